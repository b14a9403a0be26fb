"""Fixtures of the client and ``fcl3`` tests: real uvicorn services, started once per session.

* ``sqlite_service``: the embedded default (an SQLite file);
* ``postgres_service``: PostgreSQL + Redis (a throwaway database, a unique Redis prefix; skipped
  with the reason when absent, a failure under CI, as in tests/service);
* ``service``: both, one after the other (parametrized);
* ``fault_service``: on both backends, the service with ``LOCK_WAIT=0`` (a batch sent while
  another holds the update lock gets 503 + Retry-After at once) and a :class:`Gate` on its
  commits (tests/client/gate_app.py), so that a test holds an update exactly where it wants.

Every service has API keys (``WRITE_KEY``, ``READ_KEY``); models are made with small, fast
hyper-parameters (``PARAMS``), each test on models of its own names.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from benchmarks.launcher import Server
from tests.service.conftest import (  # noqa: F401 - fixtures used here
    ESTIMATOR, PARAMS, REDIS_URL, pg_database, postgres_server, redis_server, unique_name)

ROOT = Path(__file__).resolve().parents[2]
WRITE_KEY = "client-tests-write-key"
READ_KEY = "client-tests-read-key"
STREAM = ROOT / "examples" / "stream.csv"


class Gate:
    """The test side of tests/client/gate_app.py: :meth:`hold` makes the next commit wait (the
    update lock held) until :meth:`release`."""

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)

    def hold(self) -> None:
        (self.path / "hold").touch()

    def release(self) -> None:
        (self.path / "hold").unlink(missing_ok=True)

    def _until(self, what, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            if time.monotonic() > deadline:
                raise AssertionError(f"gate {self.path}: timed out after {timeout} s")
            time.sleep(0.01)

    def wait_held(self, timeout: float = 30.0) -> None:
        """Until a commit waits at the gate (it holds the update lock)."""
        self._until(lambda: (self.path / "held").exists(), timeout)

    def wait_committed(self, timeout: float = 30.0) -> None:
        """Until the commit held at the gate has returned (the batch and its key's answer stored)."""
        self._until(lambda: not (self.path / "held").exists(), timeout)


@dataclass
class Service:
    backend: str
    server: Server
    gate: Gate | None = None

    @property
    def url(self) -> str:
        return self.server.url


def _env(**extra) -> dict:
    return {"API_WRITE_KEYS": WRITE_KEY, "API_READ_KEYS": READ_KEY, "FCL3_ESTIMATOR": ESTIMATOR,
            "FCL3_PARAMS": json.dumps(PARAMS), "FCL3_KIND": "regression", "MODEL_NAME": unique_name("default"),
            "LOG_LEVEL": "WARNING", "DATABASE_URL": "", "REDIS_URL": "", **extra}


@pytest.fixture(scope="session")
def sqlite_service(tmp_path_factory):
    d = tmp_path_factory.mktemp("sqlite-service")
    server = Server(_env(SQLITE_PATH=str(d / "fcl3.db")), log_path=d / "server.log", access_log=False)
    server.start(timeout=60)
    yield Service("sqlite", server)
    server.stop()


@pytest.fixture(scope="session")
def postgres_service(tmp_path_factory, pg_database, redis_server):
    _, prefix = redis_server
    d = tmp_path_factory.mktemp("postgres-service")
    server = Server(_env(DATABASE_URL=pg_database, REDIS_URL=REDIS_URL, REDIS_PREFIX=prefix, AUTO_CREATE_SCHEMA="false"),
                    log_path=d / "server.log", access_log=False)
    server.start(timeout=60)
    yield Service("postgres", server)
    server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def service(request) -> Service:
    return request.getfixturevalue(f"{request.param}_service")


def _gated(backend: str, d: Path, **env) -> Service:
    gate = Gate(d / "gate")
    server = Server(_env(LOCK_WAIT="0", FCL3_TEST_GATE=str(gate.path), **env), app="tests.client.gate_app:app",
                    log_path=d / "server.log", access_log=False)
    server.start(timeout=60)
    return Service(backend, server, gate)


@pytest.fixture(scope="session")
def sqlite_fault_service(tmp_path_factory):
    d = tmp_path_factory.mktemp("sqlite-fault-service")
    service = _gated("sqlite", d, SQLITE_PATH=str(d / "fcl3.db"))
    yield service
    service.gate.release()
    service.server.stop()


@pytest.fixture(scope="session")
def postgres_fault_service(tmp_path_factory, pg_database, redis_server):
    _, prefix = redis_server
    d = tmp_path_factory.mktemp("postgres-fault-service")
    service = _gated("postgres", d, DATABASE_URL=pg_database, REDIS_URL=REDIS_URL, REDIS_PREFIX=prefix,
                     AUTO_CREATE_SCHEMA="false")
    yield service
    service.gate.release()
    service.server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def fault_service(request) -> Service:
    """``LOCK_WAIT=0`` and a :class:`Gate` on the commits, on both backends; the gate is
    released after each test."""
    service = request.getfixturevalue(f"{request.param}_fault_service")
    yield service
    service.gate.release()


@pytest.fixture
def model_name():
    return unique_name("c")


# ----------------------------------------------------------------------------- scripted answers
#: A batch's answer (``UpdateOut``) for scripted transports.
UPDATE = {"task_id": "a", "n_samples": 2, "new_task": True, "new_representative": True, "n_representatives": 1,
          "version": 1}


class Script:
    """A mock transport answering from a list: each entry a response or an exception to raise."""

    def __init__(self, *steps):
        self.steps = list(steps)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


def scripted(script, **kw):
    """A sync client whose every request ``script`` answers (no server)."""
    from fcl3 import Client

    return Client("http://fcl3.test", transport=httpx.MockTransport(script), **kw)


@pytest.fixture
def sleeps(monkeypatch):
    """The client's waits, recorded instead of slept."""
    import asyncio

    waited: list[float] = []
    monkeypatch.setattr(time, "sleep", waited.append)

    async def no_wait(s):
        waited.append(s)

    monkeypatch.setattr(asyncio, "sleep", no_wait)
    return waited
