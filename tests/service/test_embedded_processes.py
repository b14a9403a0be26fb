"""The embedded SQLite default with ``uvicorn --workers N`` on one machine: start-up migrations
serialised by a file lock, writers of every process queued on a per-model file lock."""
from __future__ import annotations

import json
import threading
import time

import httpx
import numpy as np
import pytest

from service.writing.locks import FileLocks, LockBusy

from .conftest import ESTIMATOR, PARAMS, concurrent_writers, regression_batch, unique_name


def embedded_env(tmp_path, **extra) -> dict:
    return {"SQLITE_PATH": str(tmp_path / "fcl3.db"), "MODEL_NAME": unique_name("emb"), "FCL3_ESTIMATOR": ESTIMATOR,
            "FCL3_KIND": "regression", "FCL3_PARAMS": json.dumps(PARAMS), "DATABASE_URL": "", "REDIS_URL": "",
            **{k: str(v) for k, v in extra.items()}}


def test_file_locks_queue_across_instances_then_refuse_past_the_wait(tmp_path):
    a, b = FileLocks(tmp_path / "locks", 30, 5), FileLocks(tmp_path / "locks", 30, 0.3)  # as two processes
    held, release = threading.Event(), threading.Event()

    def holder():
        with a.hold("m"):
            held.set()
            release.wait(10)

    th = threading.Thread(target=holder)
    th.start()
    assert held.wait(5)
    t0 = time.monotonic()
    with pytest.raises(LockBusy) as busy:
        with b.hold("m"):
            pass
    assert time.monotonic() - t0 >= 0.25 and busy.value.wait == 0.3
    with b.hold("other"):  # another model never waits
        pass
    threading.Timer(0.2, release.set).start()
    with b.hold("m", wait=5):  # queued, then granted once the holder is done
        pass
    th.join()


def test_embedded_writer_past_lock_wait_gets_503_with_retry_after(make_client, tmp_path):
    a = make_client(LOCK_WAIT=5)
    b = make_client(LOCK_WAIT=0.3, MODEL_NAME=a.app.state.settings.MODEL_NAME)  # a second process on the same file
    assert a.app.state.locks.backend == "file" and b.app.state.locks.backend == "file"
    rng = np.random.default_rng(1)
    assert a.post("/tasks/t/data", json=dict(zip("Xy", regression_batch(rng)))).status_code == 200
    writer = a.app.state.model.writer
    real = writer.commit_group

    def slow(*args, **kwargs):  # the batch learned under the lock, its commit a second later
        time.sleep(1.0)
        return real(*args, **kwargs)

    writer.commit_group = slow
    out = {}
    th = threading.Thread(target=lambda: out.setdefault("a", a.post("/tasks/t/data", json=dict(zip("Xy", regression_batch(rng))))))
    th.start()
    time.sleep(0.3)
    r = b.post("/tasks/u/data", json=dict(zip("Xy", regression_batch(rng))))
    th.join()
    assert r.status_code == 503 and r.headers["Retry-After"] == "1", r.text
    assert out["a"].status_code == 200 and out["a"].json()["version"] == 2
    # with a wait long enough it queues instead: no 409, no 503
    b2 = make_client(LOCK_WAIT=5, MODEL_NAME=a.app.state.settings.MODEL_NAME)
    th = threading.Thread(target=lambda: out.setdefault("a2", a.post("/tasks/t/data", json=dict(zip("Xy", regression_batch(rng))))))
    th.start()
    time.sleep(0.3)
    r = b2.post("/tasks/u/data", json=dict(zip("Xy", regression_batch(rng))))
    th.join()
    writer.commit_group = real
    assert out["a2"].status_code == 200 and r.status_code == 200
    assert sorted([out["a2"].json()["version"], r.json()["version"]]) == [3, 4]


@pytest.mark.slow
def test_two_workers_on_a_fresh_sqlite_file_start_cleanly_every_time(tmp_path, spawn):
    for i in range(10):
        run = tmp_path / f"run{i}"
        run.mkdir()
        log = run / "uvicorn.log"
        server = spawn(embedded_env(run), workers=2, log_path=log, log_level="info").start(timeout=60)
        deadline = time.monotonic() + 30
        while log.read_text().count("Application startup complete") < 2:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        with httpx.Client(base_url=server.url, timeout=10) as client:
            for _ in range(4):  # both workers answer
                assert client.get("/readyz").status_code == 200
            X, y = regression_batch(np.random.default_rng(i))
            assert client.post("/tasks/t/data", json={"X": X, "y": y}).json()["version"] == 1
        server.stop()
        text = log.read_text()
        for bad in ("Traceback", "ERROR", "database is locked", "startup failed", "already exists"):
            assert bad not in text, f"run {i}: {bad!r} in the log:\n{text}"


@pytest.mark.slow
def test_two_workers_eight_writers_on_sqlite_queue_without_409_or_503(tmp_path, spawn):
    server = spawn(embedded_env(tmp_path), workers=2, log_path=tmp_path / "uvicorn.log").start(timeout=60)
    server.wait_workers()
    n_clients, per_client = 8, 6
    # no retry: every write must pass
    acks, sent, errors = concurrent_writers(server.url, n_clients, per_client, seed=200)
    assert not errors, errors
    total = n_clients * per_client
    assert sorted(v for vs in acks.values() for v in vs) == list(range(1, total + 1))
    for vs in acks.values():
        assert vs == sorted(vs)
    with httpx.Client(base_url=server.url, timeout=10) as client:
        model = client.get("/model").json()
        assert model["version"] == total and model["n_batches"] == total
        tasks = {t["task_id"]: t for t in client.get("/tasks").json()["tasks"]}
        for k in range(4):
            assert tasks[f"c{k}"]["n_samples"] == sum(sent[i] for i in range(n_clients) if i % 4 == k)
    log = (tmp_path / "uvicorn.log").read_text()
    assert "Traceback" not in log and " 409" not in log and " 503" not in log and " 500" not in log


@pytest.mark.slow
def test_two_workers_idempotent_duplicates_apply_once(tmp_path, spawn):
    server = spawn(embedded_env(tmp_path), workers=2, log_path=tmp_path / "uvicorn.log").start(timeout=60)
    server.wait_workers()
    X, y = regression_batch(np.random.default_rng(3))
    out: list[httpx.Response] = []
    barrier = threading.Barrier(8)

    def one():
        with httpx.Client(base_url=server.url, timeout=30) as client:
            barrier.wait()
            out.append(client.post("/tasks/t/data", json={"X": X, "y": y}, headers={"Idempotency-Key": "dup"}))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert {r.status_code for r in out} <= {200, 409}, [r.text for r in out]
    bodies = [r.json() for r in out if r.status_code == 200]
    assert bodies and all(b == bodies[0] for b in bodies) and bodies[0]["version"] == 1
    with httpx.Client(base_url=server.url, timeout=10) as client:
        assert client.get("/model").json()["n_batches"] == 1
