"""Fixtures for the browser tests: a real uvicorn server on a temporary SQLite file, a model
that has learned a small clustered stream, and headless Chromium driven by Playwright.

Chromium is Debian's (``/usr/bin/chromium``, or ``$FCL3_CHROMIUM``): Playwright launches that
binary and downloads nothing. Screenshots go to ``$FCL3_ARTIFACTS`` (default
``test-artifacts/ui`` in the checkout); the folder is printed at the end of the run.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest

from benchmarks.launcher import Server
from tests.service.conftest import ESTIMATOR, PARAMS, REQUIRE

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("FCL3_ARTIFACTS") or ROOT / "test-artifacts" / "ui").resolve()
CHROMIUM_ARGS = ["--no-sandbox", "--headless=new", "--disable-gpu", "--disable-dev-shm-usage"]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}

READ_KEY, WRITE_KEY = "ui-test-read-key-0123456789", "ui-test-write-key-0123456789"


_used = []


def pytest_terminal_summary(terminalreporter):
    if _used:
        terminalreporter.write_line(f"browser test screenshots: {ARTIFACTS}")


def _chromium() -> str:
    path = os.environ.get("FCL3_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        msg = "chromium not installed (apt-get install chromium), needed by the browser tests"
        if REQUIRE:
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    return path


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    _used.append(True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if REQUIRE:
            pytest.fail("the playwright package is not installed (pip install -e '.[test]')", pytrace=False)
        pytest.skip("the playwright package is not installed")
    executable = _chromium()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Requests:
    """Every request a browser context makes; :meth:`remote` lists those leaving the host."""

    def __init__(self):
        self.urls: list[str] = []

    def __call__(self, request):
        self.urls.append(request.url)

    def remote(self) -> list[str]:
        out = []
        for url in self.urls:
            parts = urlsplit(url)
            if parts.scheme in ("data", "blob", "about"):
                continue
            if parts.hostname not in LOCAL_HOSTS:
                out.append(url)
        return out


@pytest.fixture
def context(browser):
    """A fresh browser context (no stored key) recording its requests as ``context.requests``."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    ctx.requests = Requests()
    ctx.on("request", ctx.requests)
    ctx.errors = []  # uncaught exceptions and console errors of its pages (a refused fetch is no error here)

    def watch(page):
        page.on("pageerror", lambda exc: ctx.errors.append(f"uncaught: {exc}"))
        page.on("console", lambda m: ctx.errors.append(f"console: {m.text}")
                if m.type == "error" and "Failed to load resource" not in m.text else None)

    ctx.on("page", watch)
    yield ctx
    ctx.close()


# ----------------------------------------------------------------------------- servers and streams
#: Three environments: tasks of one share a weight vector (up to a little noise).
CENTRES = np.array([[3.0, 3.0, 0.0, 0.0, 0.0], [0.0, 0.0, 3.0, 3.0, 0.0], [-3.0, 0.0, 0.0, -3.0, 3.0]])


def clustered_stream(n_tasks: int, rows: int = 30, seed: int = 0, eval_rows: int = 0):
    """``n_tasks`` regression tasks from the three environments of :data:`CENTRES`, in turn:
    ``(task_id, environment, X, y, X_eval, y_eval)``."""
    rng = np.random.default_rng(seed)
    for t in range(n_tasks):
        env = t % len(CENTRES)
        w = CENTRES[env] + 0.05 * rng.normal(size=CENTRES.shape[1])
        X = rng.normal(size=(rows + eval_rows, CENTRES.shape[1]))
        y = X @ w + 0.1 * rng.normal(size=rows + eval_rows)
        yield f"task-{t:02d}", env, X[:rows], y[:rows], X[rows:], y[rows:]


def post_batch(client: httpx.Client, model: str, task_id: str, X, y) -> dict:
    r = client.post(f"/models/{model}/tasks/{task_id}/data", json={"X": np.asarray(X).tolist(), "y": np.asarray(y).tolist()})
    assert r.status_code == 200, r.text
    return r.json()


def create_model(client: httpx.Client, name: str) -> None:
    r = client.post("/models", json={"name": name, "kind": "regression", "estimator": ESTIMATOR, "params": PARAMS})
    assert r.status_code == 201, r.text


def big_model_file(n_tasks: int = 1000) -> bytes:
    """A model that has learned ``n_tasks`` tiny tasks, learned in this process and exported with
    each task's last update (import is one transaction: far faster than 1,000 POSTs)."""
    import core
    from service.store.results import result_json
    from service.models.state_files import to_npz

    rng = np.random.default_rng(1)
    centres = rng.normal(size=(4, 4)) * 3
    learner = core.LEARNERS[ESTIMATOR](kind="regression", **PARAMS)
    tasks = {}
    for t in range(n_tasks):
        X = rng.normal(size=(5, 4))
        y = X @ centres[t % 4] + 0.1 * rng.normal(size=5)
        r = learner.learn(f"b{t:04d}", X, y)
        tasks[f"b{t:04d}"] = {"version": t + 1, "n_batches": 1, "last_update": result_json(r)}
    return to_npz(learner.get_state(), {"version": n_tasks, "tasks": tasks})


@pytest.fixture(scope="session")
def service(tmp_path_factory, artifacts):
    """An open server (no API keys) with model ``stream`` (20 tasks, 3 environments) and
    model ``big`` (1,000 tasks, imported)."""
    tmp = tmp_path_factory.mktemp("ui")
    env = {"SQLITE_PATH": str(tmp / "ui.db"), "MODEL_NAME": "default", "FCL3_ESTIMATOR": ESTIMATOR,
           "FCL3_PARAMS": json.dumps(PARAMS), "FCL3_KIND": "regression", "DATABASE_URL": "", "REDIS_URL": "",
           "API_WRITE_KEYS": "", "API_READ_KEYS": "", "LOG_LEVEL": "WARNING",
           "MAX_BODY_BYTES": str(64 * 1024 * 1024)}  # the 1,000-task model's file is larger than the default 16 MiB
    (artifacts / "server.log").write_bytes(b"")  # this run's log only
    with Server(env, log_path=artifacts / "server.log") as server:
        with httpx.Client(base_url=server.url, timeout=60, trust_env=False) as client:
            create_model(client, "stream")
            stream = list(clustered_stream(20, eval_rows=20))
            for task_id, _, _, _, Xe, ye in stream:  # held-out rows first: every update is scored on them
                r = client.post(f"/models/stream/tasks/{task_id}/evaluation", json={"X": Xe.tolist(), "y": ye.tolist()})
                assert r.status_code in (200, 404, 405), r.text
                server.evaluation = r.status_code == 200  # a service without online evaluation: the page says so
            for task_id, _, X, y, _, _ in stream:
                post_batch(client, "stream", task_id, X, y)
            # a second batch of a few tasks: their prequential scores (a first batch is never scored)
            for task_id, _, X, y, _, _ in list(clustered_stream(6, seed=5)):
                post_batch(client, "stream", task_id, X, y)
            t0 = time.monotonic()
            data = big_model_file()
            t1 = time.monotonic()
            r = client.post("/models/big/state", content=data, headers={"content-type": "application/octet-stream"})
            assert r.status_code == 201, r.text
            server.big_seconds = (t1 - t0, time.monotonic() - t1)  # learn in-process, import over HTTP
            server.client = client
            yield server


@pytest.fixture(scope="session")
def keyed_service(tmp_path_factory, artifacts):
    """A server with API keys and one small model ``keyed``."""
    tmp = tmp_path_factory.mktemp("ui-keys")
    env = {"SQLITE_PATH": str(tmp / "keys.db"), "MODEL_NAME": "default", "FCL3_ESTIMATOR": ESTIMATOR,
           "FCL3_PARAMS": json.dumps(PARAMS), "FCL3_KIND": "regression", "DATABASE_URL": "", "REDIS_URL": "",
           "API_WRITE_KEYS": WRITE_KEY, "API_READ_KEYS": READ_KEY, "LOG_LEVEL": "WARNING"}
    (artifacts / "server-keys.log").write_bytes(b"")
    with Server(env, log_path=artifacts / "server-keys.log") as server:
        with httpx.Client(base_url=server.url, timeout=60, trust_env=False,
                          headers={"Authorization": f"Bearer {WRITE_KEY}"}) as client:
            create_model(client, "keyed")
            for task_id, _, X, y, _, _ in clustered_stream(6, seed=3):
                post_batch(client, "keyed", task_id, X, y)
            yield server
