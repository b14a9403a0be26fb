"""Idempotency-Key on POST .../tasks/{task_id}/data: replay, conflicts, crashes, purge."""
from __future__ import annotations

import threading
import time

import httpx
import numpy as np
import pytest

from service.store.tables import keys_t

from .conftest import regression_batch


def post(c, task, X, y, key=None, prefix=""):
    headers = {"Idempotency-Key": key} if key is not None else {}
    return c.post(f"{prefix}/tasks/{task}/data", json={"X": X, "y": y}, headers=headers)


def key_rows(engine, model_name):
    from sqlalchemy import select

    with engine.connect() as conn:
        return conn.execute(select(keys_t).where(keys_t.c.model_name == model_name)).all()


def test_a_committed_key_replays_the_first_answer_and_applies_nothing(backend_client):
    c = backend_client
    name = c.app.state.settings.MODEL_NAME
    X, y = regression_batch(np.random.default_rng(1))
    first = post(c, "t", X, y, key="batch-0001")
    assert first.status_code == 200 and first.json()["version"] == 1
    assert "Idempotent-Replayed" not in first.headers
    # the same key and batch: again, through the named route too, with another JSON spelling
    for again in (post(c, "t", X, y, key="batch-0001"), post(c, "t", X, y, key="batch-0001", prefix=f"/models/{name}"),
                  c.post("/tasks/t/data", content=('{"y": %s, "X": %s}' % (y, X)).encode(),
                         headers={"Idempotency-Key": "batch-0001", "Content-Type": "application/json"})):
        assert again.status_code == 200, again.text
        assert again.json() == first.json()
        assert again.headers["Idempotent-Replayed"] == "true"
    m = c.get("/model").json()
    assert m["version"] == 1 and m["n_batches"] == 1
    assert c.get("/tasks/t").json()["n_samples"] == len(y)
    # a new key is a new batch; no key is always a new batch
    assert post(c, "t", X, y, key="batch-0002").json()["version"] == 2
    assert post(c, "t", X, y).json()["version"] == 3
    # keys are per model: the same key on another model is that model's first use
    assert c.post("/models", json={"name": name + "-b", "kind": "regression", "estimator": c.app.state.settings.FCL3_ESTIMATOR,
                                   "params": c.app.state.settings.FCL3_PARAMS}).status_code == 201
    other = post(c, "t", X, y, key="batch-0001", prefix=f"/models/{name}-b")
    assert other.status_code == 200 and other.json()["version"] == 1 and "Idempotent-Replayed" not in other.headers
    assert c.get("/model").json()["version"] == 3


def test_same_key_with_another_body_or_task_is_422(backend_client):
    c = backend_client
    rng = np.random.default_rng(2)
    X, y = regression_batch(rng)
    assert post(c, "t", X, y, key="k").status_code == 200
    X2, y2 = regression_batch(rng)
    for r in (post(c, "t", X2, y2, key="k"), post(c, "u", X, y, key="k")):
        assert r.status_code == 422
        assert "already used" in r.json()["detail"] and "another request" in r.json()["detail"]
    assert c.get("/model").json()["version"] == 1


@pytest.mark.parametrize("key, why", [("", "empty"), ("x" * 256, "256 characters"), (b"caf\xe9", "character")])
def test_malformed_keys_are_422(make_client, key, why):
    c = make_client()
    X, y = regression_batch(np.random.default_rng(3))
    r = post(c, "t", X, y, key=key)
    assert r.status_code == 422 and why in r.json()["detail"] and "Idempotency-Key" in r.json()["detail"]
    assert post(c, "t", X, y, key="x" * 255).status_code == 200  # the longest key is fine
    assert post(c, "t", X, y, key="a b~!{}").json()["version"] == 2  # printable, spaces included


def test_a_failed_update_releases_its_key(make_client):
    c = make_client()
    X, y = regression_batch(np.random.default_rng(4))
    bad = post(c, "t", X, y[:-1], key="k")  # lengths differ: refused by the engine
    assert bad.status_code == 422
    assert key_rows(c.app.state.engine, c.app.state.settings.MODEL_NAME) == []
    assert post(c, "t", X, y, key="k").status_code == 200  # the corrected batch, same key


def test_key_in_flight_gets_409_then_the_answer(backend_client):
    c = backend_client
    rng = np.random.default_rng(5)
    assert post(c, "t", *regression_batch(rng)).status_code == 200
    writer = c.app.state.model.writer
    real_commit = writer.commit_group

    def slow_commit(*args, **kwargs):  # the batch learned under the lock, its commit a second later
        time.sleep(1.0)
        return real_commit(*args, **kwargs)

    writer.commit_group = slow_commit
    X, y = regression_batch(rng)
    results = {}
    th = threading.Thread(target=lambda: results.setdefault("first", post(c, "t", X, y, key="slow")))
    th.start()
    time.sleep(0.4)
    busy = post(c, "t", X, y, key="slow")
    th.join()
    writer.commit_group = real_commit
    assert busy.status_code == 409 and busy.headers["Retry-After"] == "1"
    assert "still running" in busy.json()["detail"]
    assert results["first"].status_code == 200 and results["first"].json()["version"] == 2
    again = post(c, "t", X, y, key="slow")
    assert again.status_code == 200 and again.json() == results["first"].json()
    assert c.get("/model").json()["n_batches"] == 2


def test_concurrent_duplicates_apply_once(backend_client):
    c = backend_client
    X, y = regression_batch(np.random.default_rng(6))
    barrier = threading.Barrier(6)
    out = []

    def one():
        barrier.wait()
        out.append(post(c, "t", X, y, key="dup"))

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r.status_code for r in out)
    assert set(codes) <= {200, 409}, [r.text for r in out]
    ok = [r.json() for r in out if r.status_code == 200]
    assert ok and all(b == ok[0] for b in ok) and ok[0]["version"] == 1
    m = c.get("/model").json()
    assert m["version"] == 1 and m["n_batches"] == 1


def test_an_abandoned_claim_expires_after_lock_ttl(make_client):
    from service.writing.idempotent import request_hash

    c = make_client(LOCK_TTL=0.6)
    name = c.app.state.settings.MODEL_NAME
    X, y = regression_batch(np.random.default_rng(7))
    # a request that claimed the key and died before its commit
    c.app.state.model.keys.claim(name, "orphan", request_hash("t", X, y))
    assert post(c, "t", X, y, key="orphan").status_code == 409
    time.sleep(0.7)
    r = post(c, "t", X, y, key="orphan")
    assert r.status_code == 200 and r.json()["version"] == 1
    assert post(c, "t", X, y, key="orphan").headers["Idempotent-Replayed"] == "true"


def test_keys_are_purged_after_the_ttl(make_client):
    from datetime import datetime, timedelta, timezone

    from sqlalchemy import update

    c = make_client(IDEMPOTENCY_TTL=60, IDEMPOTENCY_PURGE_EVERY=0)
    name = c.app.state.settings.MODEL_NAME
    rng = np.random.default_rng(8)
    X, y = regression_batch(rng)
    assert post(c, "t", X, y, key="old").json()["version"] == 1
    assert post(c, "t", X, y, key="old").headers["Idempotent-Replayed"] == "true"
    # "old" last touched 61 s ago (aged in the table: no race with how long an update takes)
    with c.app.state.engine.begin() as conn:
        conn.execute(update(keys_t).where(keys_t.c.model_name == name, keys_t.c.key == "old").values(
            touched_at=datetime.now(timezone.utc) - timedelta(seconds=61)))
    assert post(c, "t", *regression_batch(rng), key="new").json()["version"] == 2  # this write purges "old"
    assert [r.key for r in key_rows(c.app.state.engine, name)] == ["new"]
    r = post(c, "t", X, y, key="old")  # a new request now
    assert r.status_code == 200 and r.json()["version"] == 3 and "Idempotent-Replayed" not in r.headers


def test_deleting_a_model_deletes_its_keys(make_client):
    c = make_client()
    s = c.app.state.settings
    name = s.MODEL_NAME + "-x"
    assert c.post("/models", json={"name": name, "kind": "regression", "estimator": s.FCL3_ESTIMATOR,
                                   "params": s.FCL3_PARAMS}).status_code == 201
    X, y = regression_batch(np.random.default_rng(9))
    assert post(c, "t", X, y, key="k", prefix=f"/models/{name}").status_code == 200
    assert len(key_rows(c.app.state.engine, name)) == 1
    assert c.delete(f"/models/{name}").status_code == 204
    assert key_rows(c.app.state.engine, name) == []


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_migration_0003_upgrade_and_downgrade(backend, tmp_path, request):
    from .conftest import create_pg_database, drop_pg_database, pg_url
    from .test_persistence import alembic, tables

    if backend == "postgres":
        request.getfixturevalue("postgres_server")
        db = create_pg_database("fcl3_mig3")
        url = pg_url(db)
    else:
        url = f"sqlite:///{tmp_path / 'mig3.db'}"
    try:
        assert alembic("upgrade", "0002", url=url).returncode == 0
        assert "idempotency_keys" not in tables(url)
        r = alembic("upgrade", "head", url=url)
        assert r.returncode == 0, r.stderr
        assert "idempotency_keys" in tables(url)
        r = alembic("downgrade", "0002", url=url)
        assert r.returncode == 0, r.stderr
        assert "idempotency_keys" not in tables(url) and {"models", "tasks", "batches"} <= tables(url)
        assert alembic("upgrade", "head", url=url).returncode == 0
    finally:
        if backend == "postgres":
            drop_pg_database(db)


# ----------------------------------------------------------------------------- a real server killed
@pytest.mark.slow
def test_server_killed_between_commit_and_answer_then_retry_learns_once(tmp_path, spawn):
    import json

    from .conftest import ESTIMATOR, PARAMS, unique_name

    env = {"SQLITE_PATH": str(tmp_path / "fcl3.db"), "MODEL_NAME": unique_name("idem"), "FCL3_ESTIMATOR": ESTIMATOR,
           "FCL3_KIND": "regression", "FCL3_PARAMS": json.dumps(PARAMS), "DATABASE_URL": "", "REDIS_URL": ""}
    doomed = spawn({**env, "FCL3_FAULT_AFTER_COMMIT_DELAY": "60"}, app="tests.service.fault_app:app",
                   log_path=tmp_path / "doomed.log").start()
    X, y = regression_batch(np.random.default_rng(10))
    lost = {}

    def send():
        try:
            lost["r"] = httpx.post(doomed.url + "/tasks/t/data", json={"X": X, "y": y},
                                   headers={"Idempotency-Key": "once"}, timeout=30)
        except httpx.HTTPError as exc:
            lost["error"] = exc  # its server dies before answering

    th = threading.Thread(target=send, daemon=True)
    th.start()
    with httpx.Client(base_url=doomed.url, timeout=5) as client:
        deadline = time.monotonic() + 20
        while client.get("/model").json()["version"] != 1:  # committed, not yet answered
            assert time.monotonic() < deadline, "the update never committed"
            time.sleep(0.05)
    doomed.kill9()
    th.join(10)
    assert "r" not in lost and "error" in lost  # the client never got an answer

    server = spawn(env, log_path=tmp_path / "uvicorn.log").start()
    with httpx.Client(base_url=server.url, timeout=10) as client:
        retry = client.post("/tasks/t/data", json={"X": X, "y": y}, headers={"Idempotency-Key": "once"})
        assert retry.status_code == 200, retry.text
        assert retry.json()["version"] == 1 and retry.headers["Idempotent-Replayed"] == "true"
        m = client.get("/model").json()
        assert m["version"] == 1 and m["n_batches"] == 1
        assert client.get("/tasks/t").json()["n_samples"] == len(y)
