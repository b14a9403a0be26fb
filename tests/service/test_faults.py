"""Faults against real servers: Redis stopped, PostgreSQL restarted, a writer killed with
SIGKILL while it holds the lock, a client that goes away mid-request.

Redis and PostgreSQL that get stopped are this test's own (a dedicated redis-server, a
throwaway PostgreSQL cluster), never the machine's shared ones.
"""
from __future__ import annotations

import socket
import threading
import time

import httpx
import numpy as np
import pytest

from .conftest import regression_batch

PROBE = {"task_id": "t0", "X": np.random.default_rng(99).normal(size=(3, 4)).tolist()}


def stored_batches(url: str, model: str) -> list[dict]:
    from service.config import Settings
    from service.db import make_engine
    from service.store.reads import ModelReader

    settings = Settings(_env_file=None, DATABASE_URL=url, MODEL_NAME=model)
    engine = make_engine(settings)
    try:
        return ModelReader(engine, model).batches()
    finally:
        engine.dispose()


def replay(url: str, model: str, settings_json: dict, probe=PROBE) -> list[float]:
    """The model rebuilt by a fresh engine from the stored raw batches, in order."""
    from service.models.learners import make_learner

    learner = make_learner(settings_json)
    for b in stored_batches(url, model):
        learner.learn(b["task_id"], b["X"], b["y"], defer_refits=b["refits_deferred"])
    return learner.predict(probe["task_id"], np.array(probe["X"])).tolist()


def check_consistent(get, url: str, model: str) -> dict:
    """Model row, task rows and stored batches agree, and the served model is the replay
    of the stored batches: nothing half-applied."""
    m = get("/model").json()
    batches = stored_batches(url, model)
    assert [b["version"] for b in batches] == list(range(1, m["version"] + 1))
    assert m["n_batches"] == len(batches)
    tasks = {t["task_id"]: t for t in get("/tasks").json()["tasks"]}
    for task, t in tasks.items():
        mine = [b for b in batches if b["task_id"] == task]
        assert t["n_samples"] == sum(b["n_samples"] for b in mine) and t["n_batches"] == len(mine)
    assert set(tasks) == {b["task_id"] for b in batches}
    if "t0" in tasks:
        served = get("/predict", params={"task_id": "t0", "x": [",".join(map(str, r)) for r in PROBE["X"]]}).json()
        assert served["version"] == m["version"]
        assert np.allclose(served["predictions"], replay(url, model, m["created_with"]), rtol=1e-12, atol=1e-12)
    return m


def same_batch(stored: dict, sent: dict) -> bool:
    return (stored["task_id"] == sent["task"] and np.array_equal(stored["X"], np.asarray(sent["X"]))
            and np.array_equal(stored["y"], np.asarray(sent["y"])))


# ----------------------------------------------------------------------------- Redis stopped
def test_redis_stopped_mid_stream_then_back(make_client, request, redis_process):
    c = make_client("postgres", _request=request, REDIS_URL=redis_process.url, LOCK_WAIT=1)
    model = c.app.state.settings.MODEL_NAME
    url = c.app.state.settings.DATABASE_URL
    rng = np.random.default_rng(5)
    sent = [dict(zip(("X", "y"), regression_batch(rng, n=6, task=i % 3)), task=f"t{i % 3}") for i in range(12)]
    acked: list[tuple[int, int]] = []  # (index in sent, version)

    def post(i):
        return c.post(f"/tasks/{sent[i]['task']}/data", json={"X": sent[i]["X"], "y": sent[i]["y"]})

    for i in range(5):
        r = post(i)
        assert r.status_code == 200, r.text
        acked.append((i, r.json()["version"]))
    before = c.post("/predict", json=PROBE).json()

    redis_process.stop()
    for i in range(5, 9):  # writes refused, nothing applied; predictions served from the cached model
        r = post(i)
        assert r.status_code == 503 and "Retry-After" in r.headers, r.text
        p = c.post("/predict", json=PROBE)
        assert p.status_code == 200 and p.json() == before
    assert c.get("/readyz").status_code == 503
    assert c.get("/model").json()["version"] == 5

    redis_process.start()  # same port
    for i in range(5, 12):  # the stream resumes (the refused batches are sent again)
        deadline = time.monotonic() + 15
        while True:
            r = post(i)
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            assert r.status_code == 503, r.text
            time.sleep(0.1)
        assert r.status_code == 200, r.text
        acked.append((i, r.json()["version"]))
    assert [v for _, v in acked] == list(range(1, 13))
    # nothing lost, nothing applied twice: the stored batches are exactly the acknowledged ones
    stored = stored_batches(url, model)
    assert len(stored) == 12 and all(same_batch(stored[v - 1], sent[i]) for i, v in acked)
    check_consistent(c.get, url, model)


# ----------------------------------------------------------------------------- PostgreSQL restarted
def test_postgres_restarted_mid_stream_no_acknowledged_batch_lost(make_client, request, pg_cluster):
    c = make_client("postgres", _request=request, DATABASE_URL=pg_cluster.url(), LOCK_WAIT=2, DB_CONNECT_TIMEOUT=1)
    model = c.app.state.settings.MODEL_NAME
    rng = np.random.default_rng(6)
    sent = [dict(zip(("X", "y"), regression_batch(rng, n=6, task=i % 3)), task=f"t{i % 3}") for i in range(16)]
    acked: list[tuple[int, int]] = []
    failures: dict[int, int] = {}  # attempts answered 503 per batch: a commit may have happened unanswered
    restarted = threading.Event()
    errors: list[str] = []

    def stream():
        for i, b in enumerate(sent):
            deadline = time.monotonic() + 30
            while True:
                try:
                    r = c.post(f"/tasks/{b['task']}/data", json={"X": b["X"], "y": b["y"]})
                except Exception as exc:  # noqa: BLE001
                    errors.append(f"batch {i}: {exc!r}")
                    return
                if r.status_code == 200:
                    acked.append((i, r.json()["version"]))
                    break
                if r.status_code != 503 or time.monotonic() > deadline:
                    errors.append(f"batch {i}: {r.status_code} {r.text}")
                    return
                failures[i] = failures.get(i, 0) + 1
                time.sleep(0.1)
            if i == 5:
                restarted.wait(30)  # let the restart happen while the stream is mid-way

    th = threading.Thread(target=stream)
    th.start()
    deadline = time.monotonic() + 30
    while len(acked) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    pg_cluster.stop("fast")  # drops every connection of the service's pool
    time.sleep(0.5)
    pg_cluster.start()
    restarted.set()
    th.join(120)
    assert not errors, errors
    assert len(acked) == len(sent)
    assert any(i > 5 for i, _ in acked)  # the same process went on after the restart: it reconnected
    # no acknowledged batch lost: each acknowledged version holds the batch it acknowledged
    stored = {b["version"]: b for b in stored_batches(pg_cluster.url(), model)}
    for i, v in acked:
        assert same_batch(stored[v], sent[i]), (i, v)
    # anything more was committed but answered 503 (the connection died at the commit)
    assert len(stored) <= len(acked) + sum(failures.values())
    m = check_consistent(c.get, pg_cluster.url(), model)
    assert m["version"] == len(stored)


# ----------------------------------------------------------------------------- SIGKILL holding the lock
def lock_held(redis_client, key: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if redis_client.exists(key):
            return True
        time.sleep(0.01)
    return False


def seed(client, n=3, rng_seed=7) -> None:
    rng = np.random.default_rng(rng_seed)
    for i in range(n):
        X, y = regression_batch(rng, n=6, task=i)
        assert client.post(f"/tasks/t{i % 2}/data", json={"X": X, "y": y}).status_code == 200


@pytest.mark.slow
def test_worker_sigkilled_while_holding_the_lock(server_env, request, tmp_path, spawn):
    redis_client, prefix = request.getfixturevalue("redis_server")
    env = {**server_env, "LOCK_TTL": "2", "LOCK_WAIT": "0.3"}
    lock_key = f"{prefix}lock:{env['MODEL_NAME']}"
    good = spawn(env, log_path=tmp_path / "good.log").start()
    doomed = spawn({**env, "FCL3_FAULT_COMMIT_DELAY": "60"}, app="tests.service.fault_app:app",
                   log_path=tmp_path / "doomed.log").start()
    with httpx.Client(base_url=good.url, timeout=10) as client:
        seed(client)
        before = client.post("/predict", json=PROBE).json()
        assert before["version"] == 3

        X, y = regression_batch(np.random.default_rng(8), n=6)

        def doomed_post():
            try:
                httpx.post(doomed.url + "/tasks/killed/data", json={"X": X, "y": y}, timeout=30)
            except httpx.HTTPError:
                pass  # its server dies under it

        th = threading.Thread(target=doomed_post, daemon=True)
        th.start()
        assert lock_held(redis_client, lock_key, 15), "the doomed writer never took the lock"
        time.sleep(0.2)  # it has learned and sleeps before its commit
        doomed.kill9()
        t_kill = time.monotonic()
        th.join(10)

        # The model is the last committed one, and is still served.
        assert client.post("/predict", json=PROBE).json() == before
        # The lock names its holder's lease: the next writer finds the holder gone, takes the
        # lock over at once (no 503 until the TTL) and commits on the last committed model.
        r = client.post("/tasks/t0/data", json={"X": X, "y": y})
        assert r.status_code == 200 and r.json()["version"] == 4, r.text
        assert time.monotonic() - t_kill < float(env["LOCK_TTL"])  # before the lock would expire
        assert client.get("/tasks/killed").status_code == 404  # the killed update left nothing
        check_consistent(client.get, env["DATABASE_URL"], env["MODEL_NAME"])


# ----------------------------------------------------------------------------- client disconnects
def raw_post(port: int, path: str, body: bytes, send_bytes: int | None = None) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    s.sendall(head + body[:send_bytes] if send_bytes is not None else head + body)
    return s


@pytest.mark.slow
def test_client_disconnect_mid_request_is_all_or_nothing(server_env, request, tmp_path, spawn):
    import json

    redis_client, prefix = request.getfixturevalue("redis_server")
    env = {**server_env, "LOCK_WAIT": "5", "FCL3_FAULT_COMMIT_DELAY": "1.0"}
    lock_key = f"{prefix}lock:{env['MODEL_NAME']}"
    server = spawn(env, app="tests.service.fault_app:app", log_path=tmp_path / "uvicorn.log").start()
    with httpx.Client(base_url=server.url, timeout=10) as client:
        seed(client, n=2)
        X, y = regression_batch(np.random.default_rng(9), n=6)
        body = json.dumps({"X": X, "y": y}).encode()

        # 1. gone while sending the body: nothing is applied
        s = raw_post(server.port, "/tasks/half/data", body, send_bytes=len(body) // 2)
        time.sleep(0.3)
        s.close()
        time.sleep(0.5)
        assert client.get("/model").json()["version"] == 2
        assert client.get("/tasks/half").status_code == 404

        # 2. gone while the update runs (lock held, commit pending): all or nothing
        s = raw_post(server.port, "/tasks/gone/data", body)
        assert lock_held(redis_client, lock_key, 10)
        s.close()
        deadline = time.monotonic() + 15
        while redis_client.exists(lock_key) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        m = check_consistent(client.get, env["DATABASE_URL"], env["MODEL_NAME"])
        task = client.get("/tasks/gone")
        if m["version"] == 3:  # committed fully
            assert task.status_code == 200 and task.json()["n_samples"] == 6
        else:  # or not at all
            assert m["version"] == 2 and task.status_code == 404
        # and the service goes on
        r = client.post("/tasks/t0/data", json={"X": X, "y": y})
        assert r.status_code == 200 and r.json()["version"] == m["version"] + 1
