"""Idempotency-Key claims whose holder is gone (issue 22, row 8): a claim held by a process
killed with SIGKILL, and a claim a database error left behind, are released as soon as the
database answers, and the retry is applied exactly once. On SQLite and on PostgreSQL + Redis."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from sqlalchemy import create_engine, event, select

from service.store.tables import keys_t
from service.writing.idempotent import request_hash

from .conftest import ESTIMATOR, PARAMS, TcpProxy, regression_batch, unique_name

ROOT = Path(__file__).resolve().parents[2]

#: A process that claims one key, says so, and waits to be killed.
HOLDER = """
import sys, time
from sqlalchemy import create_engine
from service.writing.idempotency import IdempotencyKeys
url, model, key, digest = sys.argv[1:5]
keys = IdempotencyKeys(create_engine(url), claim_ttl=600)
claim = keys.claim(model, key, digest)
print("claimed", claim.owner, flush=True)
time.sleep(600)
"""


@pytest.fixture
def app(backend_app):
    return backend_app


def post(c, X, y, key, task="t"):
    return c.post(f"/tasks/{task}/data", json={"X": X, "y": y}, headers={"Idempotency-Key": key})


def key_rows(url: str, model: str) -> list:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(select(keys_t.c.key, keys_t.c.owner, keys_t.c.response)
                                .where(keys_t.c.model_name == model)).all()
    finally:
        engine.dispose()


def retry_until_not_409(c, X, y, key: str, within: float = 5.0) -> tuple[httpx.Response, float, int]:
    """Send the batch until it is not answered 409: the answer, the seconds it took and the 409s
    on the way. (PostgreSQL drops a dead session's advisory locks when its backend notices the
    socket closed and exits: a few milliseconds after the process died, not at the same instant.)"""
    t0, conflicts = time.monotonic(), 0
    while True:
        r = post(c, X, y, key)
        if r.status_code != 409 or time.monotonic() - t0 > within:
            return r, time.monotonic() - t0, conflicts
        conflicts += 1
        time.sleep(0.02)


def start_holder(url: str, model: str, key: str, digest: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, url, model, key, digest], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    line = proc.stdout.readline()
    if not line.startswith("claimed"):
        proc.kill()
        raise AssertionError(f"the holder did not claim: {line!r} {proc.stderr.read()}")
    return proc


def test_a_claim_whose_process_was_killed_is_taken_over_at_once(app):
    """Another process claims the key and lives: 409. Killed with SIGKILL: the next retry is
    learned at once (``LOCK_TTL`` is 60 s: no expiry is waited for), exactly once."""
    c = app(LOCK_TTL=60)
    name, url = c.app.state.settings.MODEL_NAME, c.app.state.settings.database_url
    X, y = regression_batch(np.random.default_rng(1))
    holder = start_holder(url, name, "crash", request_hash("t", X, y))
    try:
        busy = post(c, X, y, "crash")
        assert busy.status_code == 409 and "still running" in busy.json()["detail"]
    finally:
        holder.kill()  # SIGKILL: nothing of it runs again
        holder.wait(10)
    r, seconds, conflicts = retry_until_not_409(c, X, y, "crash")
    assert r.status_code == 200, r.text
    assert r.json()["version"] == 1 and "Idempotent-Replayed" not in r.headers
    assert seconds < 5 and (conflicts == 0 if app.backend == "sqlite" else True)  # at once: no expiry waited for
    again = post(c, X, y, "crash")
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true" and again.json() == r.json()
    m = c.get("/model").json()
    assert m["version"] == 1 and m["n_batches"] == 1


def test_a_zombie_holder_is_gone_too(make_client):
    """Killed but not yet reaped by its parent (a zombie), the holder is gone all the same."""
    c = make_client(LOCK_TTL=60)
    name, url = c.app.state.settings.MODEL_NAME, c.app.state.settings.database_url
    X, y = regression_batch(np.random.default_rng(2))
    holder = start_holder(url, name, "zombie", request_hash("t", X, y))
    try:
        holder.kill()
        deadline = time.monotonic() + 5
        while Path(f"/proc/{holder.pid}/stat").read_text().split(")")[-1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        r = post(c, X, y, "zombie")
        assert r.status_code == 200 and r.json()["version"] == 1
    finally:
        holder.wait(10)


def test_a_live_claim_of_this_process_is_still_in_flight(app):
    """Judging holders never takes a live request's claim: a claim of this very process, alive,
    is answered 409 until its claim TTL."""
    c = app(LOCK_TTL=60)
    name = c.app.state.settings.MODEL_NAME
    X, y = regression_batch(np.random.default_rng(3))
    c.app.state.model.keys.claim(name, "mine", request_hash("t", X, y))
    r = post(c, X, y, "mine")
    assert r.status_code == 409 and r.headers["Retry-After"] == "1"
    assert c.get("/model").json()["version"] == 0


# ----------------------------------------------------------------------------- a database error inside a request
def _fail_commit_while(c, during) -> httpx.Response:
    """Post a batch whose update runs ``during`` (the database goes away) between its learning
    and its commit; the answer."""
    writer = c.app.state.model.writer
    real_commit = writer.commit_group

    def commit_group(*args, **kwargs):  # the batch learned: its commit comes next
        during()
        return real_commit(*args, **kwargs)

    writer.commit_group = commit_group
    try:
        return post(c, *c.batch, "outage")
    finally:
        writer.commit_group = real_commit


def _wait_released(url: str, model: str, timeout: float = 5.0) -> float:
    t0 = time.monotonic()
    while key_rows(url, model):
        assert time.monotonic() - t0 < timeout, "the abandoned claim was never released"
        time.sleep(0.05)
    return time.monotonic() - t0


def test_sqlite_locked_the_claim_is_released_when_the_database_answers(make_client, tmp_path):
    """Another connection holds SQLite's write lock while the update commits: the commit and
    the release of the claim fail (``database is locked``, 503). Once the lock is let go, the
    claim is released without any request, and the retry is learned once."""
    c = make_client(LOCK_TTL=60)
    s = c.app.state.settings
    engine = c.app.state.engine
    event.listen(engine, "connect", lambda dbapi, _: dbapi.execute("PRAGMA busy_timeout = 200"))
    engine.dispose()  # every connection from now on gives up after 200 ms
    c.batch = regression_batch(np.random.default_rng(4))
    blocker = sqlite3.connect(s.SQLITE_PATH, isolation_level=None, check_same_thread=False)
    r = _fail_commit_while(c, lambda: blocker.execute("BEGIN IMMEDIATE"))
    assert r.status_code == 503 and "database unavailable" in r.json()["detail"], r.text
    assert [row.key for row in key_rows(s.database_url, s.MODEL_NAME)] == ["outage"]  # left behind
    blocker.execute("ROLLBACK")  # the database answers again
    blocker.close()
    _wait_released(s.database_url, s.MODEL_NAME)
    retry = post(c, *c.batch, "outage")
    assert retry.status_code == 200 and retry.json()["version"] == 1, retry.text
    assert post(c, *c.batch, "outage").headers["Idempotent-Replayed"] == "true"
    assert c.get("/model").json()["n_batches"] == 1


def test_postgres_cut_off_the_claim_is_released_when_the_database_answers(make_client, request, pg_database):
    """PostgreSQL is reached through a loopback proxy, cut between the update's learning and
    its commit: the commit and the release of the claim fail (503). Once the proxy is back, the
    claim is released without any request, and the retry is learned once."""
    from sqlalchemy.engine import make_url

    target = make_url(pg_database)
    proxy = TcpProxy(target.host, target.port).start()
    try:
        proxied = target.set(port=proxy.port).render_as_string(hide_password=False)
        c = make_client("postgres", _request=request, DATABASE_URL=proxied, LOCK_TTL=60)
        name = c.app.state.settings.MODEL_NAME
        c.batch = regression_batch(np.random.default_rng(5))
        r = _fail_commit_while(c, proxy.stop)
        assert r.status_code == 503, r.text
        assert [row.key for row in key_rows(pg_database, name)] == ["outage"]  # left behind
        proxy.start()  # the database answers again
        _wait_released(pg_database, name)
        for _ in range(20):  # stale pooled connections may cost a 503 (never a 409)
            retry = post(c, *c.batch, "outage")
            if retry.status_code != 503:
                break
            time.sleep(0.1)
        assert retry.status_code == 200 and retry.json()["version"] == 1, retry.text
        assert post(c, *c.batch, "outage").headers["Idempotent-Replayed"] == "true"
        assert c.get("/model").json()["n_batches"] == 1
    finally:
        proxy.stop()


def test_postgres_restarted_the_claim_is_released_when_it_is_back(make_client, request, pg_cluster):
    """PostgreSQL itself stops (``fast``: every session dropped) between the update's learning
    and its commit: 503, the claim left behind. Once it is started again, the claim is
    released without any request and the retry is learned once."""
    c = make_client("postgres", _request=request, DATABASE_URL=pg_cluster.url(), LOCK_TTL=60, DB_CONNECT_TIMEOUT=1)
    name = c.app.state.settings.MODEL_NAME
    c.batch = regression_batch(np.random.default_rng(8))
    r = _fail_commit_while(c, lambda: pg_cluster.stop("fast"))
    assert r.status_code == 503, r.text
    pg_cluster.start()
    _wait_released(pg_cluster.url(), name)  # before: kept for LOCK_TTL
    retry = post(c, *c.batch, "outage")
    assert retry.status_code == 200 and retry.json()["version"] == 1, retry.text
    assert post(c, *c.batch, "outage").headers["Idempotent-Replayed"] == "true"
    assert c.get("/model").json()["n_batches"] == 1


def test_a_claim_left_by_a_restarted_database_is_taken_over_from_another_process(make_client, request,
                                                                                 pg_database):
    """The claim's process lives on, but the database restarted (here: its connections cut):
    its lease is gone with them, so a retry reaching *another* process takes the claim over
    at once, without waiting for the first process to release it."""
    from sqlalchemy.engine import make_url

    target = make_url(pg_database)
    proxy = TcpProxy(target.host, target.port).start()
    holder = None
    try:
        proxied = target.set(port=proxy.port).render_as_string(hide_password=False)
        c = make_client("postgres", _request=request, LOCK_TTL=60)
        name = c.app.state.settings.MODEL_NAME
        X, y = regression_batch(np.random.default_rng(6))
        holder = start_holder(proxied, name, "restart", request_hash("t", X, y))
        assert post(c, X, y, "restart").status_code == 409  # its lease is held
        proxy.stop()  # its connections die, as in a restart; the process lives
        r, seconds, _ = retry_until_not_409(c, X, y, "restart")
        assert r.status_code == 200 and r.json()["version"] == 1, r.text
        assert seconds < 5  # LOCK_TTL is 60 s
        assert post(c, X, y, "restart").headers["Idempotent-Replayed"] == "true"
    finally:
        proxy.stop()
        if holder is not None:
            holder.kill()
            holder.wait(10)


# ----------------------------------------------------------------------------- a real server killed
@pytest.mark.slow
def test_server_killed_holding_a_claim_then_the_retry_is_learned_at_once(tmp_path, spawn):
    """A real server (SQLite) is killed with SIGKILL while its update holds the key's claim and
    the update lock, before its commit; the retry, on the restarted server, is learned on its
    first attempt (``LOCK_TTL`` is 60 s) and exactly once."""
    db = tmp_path / "fcl3.db"
    env = {"SQLITE_PATH": str(db), "MODEL_NAME": unique_name("crash"), "FCL3_ESTIMATOR": ESTIMATOR,
           "FCL3_KIND": "regression", "FCL3_PARAMS": json.dumps(PARAMS), "DATABASE_URL": "", "REDIS_URL": "",
           "LOCK_TTL": "60"}
    doomed = spawn({**env, "FCL3_FAULT_COMMIT_DELAY": "60"}, app="tests.service.fault_app:app",
                   log_path=tmp_path / "doomed.log").start()
    X, y = regression_batch(np.random.default_rng(7))

    def send():
        try:
            httpx.post(doomed.url + "/tasks/t/data", json={"X": X, "y": y}, headers={"Idempotency-Key": "k"},
                       timeout=30)
        except httpx.HTTPError:
            pass  # its server dies before answering

    threading.Thread(target=send, daemon=True).start()
    deadline = time.monotonic() + 20
    while not key_rows(f"sqlite:///{db}", env["MODEL_NAME"]):  # claimed; the update then waits before its commit
        assert time.monotonic() < deadline, "the update never claimed its key"
        time.sleep(0.05)
    time.sleep(0.3)
    doomed.kill9()

    server = spawn(env, log_path=tmp_path / "uvicorn.log").start()
    with httpx.Client(base_url=server.url, timeout=10) as client:
        r = client.post("/tasks/t/data", json={"X": X, "y": y}, headers={"Idempotency-Key": "k"})
        assert r.status_code == 200, r.text
        assert r.json()["version"] == 1 and "Idempotent-Replayed" not in r.headers
        again = client.post("/tasks/t/data", json={"X": X, "y": y}, headers={"Idempotency-Key": "k"})
        assert again.headers["Idempotent-Replayed"] == "true"
        m = client.get("/model").json()
        assert m["version"] == 1 and m["n_batches"] == 1
