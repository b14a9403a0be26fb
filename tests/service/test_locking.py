"""The update lock, the version compare-and-set that guards every commit, and 503s."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from service.db import make_engine
from service.writing.locks import make_locks
from service.hosting import HostedModel
from service.learning.prepare import prepare
from service.learning.updates import learn_batch
from service.store.writes import StaleWrite

from .conftest import REDIS_URL, PG_HOST, PG_PORT, TcpProxy, regression_batch


def post(c, task, X, y):
    return c.post(f"/tasks/{task}/data", json={"X": X, "y": y})


def test_stale_writer_is_refused(make_client, request):
    """Writer A's lock expires while it computes; B commits; A's commit must be refused."""
    a = make_client("postgres", _request=request, LOCK_TTL=0.3, LOCK_WAIT=3)
    settings = a.app.state.settings
    rng = np.random.default_rng(4)
    X, y = regression_batch(rng)
    assert post(a, "t", X, y).json()["version"] == 1
    model_a: HostedModel = a.app.state.model
    # B: another process with its own engine, lock client and cache.
    model_b = HostedModel.open(make_engine(settings), make_locks(settings), settings.MODEL_NAME,
                               settings.model_settings())

    with model_a.locks.hold(model_a.name):
        snap = model_a.reader.snapshot()
        prepared = prepare(snap, "t", *regression_batch(rng))
        time.sleep(0.5)  # a long GC pause: A's lock expires
        t0 = time.monotonic()
        _, v_b = learn_batch(model_b, "u", *regression_batch(rng, task=1))  # B gets the lock at once
        assert time.monotonic() - t0 < 2.5
        assert v_b == 2
        with pytest.raises(StaleWrite, match="NOT applied"):
            model_a.writer.commit(prepared)

    m = a.get("/model").json()
    assert m["version"] == 2 and m["n_batches"] == 2
    assert a.get("/tasks/t").json()["n_samples"] == 12  # A's batch is not there
    assert [b["version"] for b in model_b.reader.batches()] == [1, 2]
    model_b.reader.engine.dispose()


def test_stale_writer_over_http_gets_409(make_client, request):
    """Two app instances (as two replicas); A stalls past its lock TTL inside an update."""
    a = make_client("postgres", _request=request, LOCK_TTL=0.3, LOCK_WAIT=3)
    b = make_client("postgres", _request=request, LOCK_TTL=0.3, LOCK_WAIT=3,
                    MODEL_NAME=a.app.state.settings.MODEL_NAME, REDIS_PREFIX=a.app.state.settings.REDIS_PREFIX)
    rng = np.random.default_rng(5)
    assert post(a, "t", *regression_batch(rng)).status_code == 200
    writer_a = a.app.state.model.writer
    real_commit = writer_a.commit

    def slow_commit(*args, **kwargs):  # the batch learned, the lock's TTL passes before its commit
        time.sleep(0.8)
        return real_commit(*args, **kwargs)

    writer_a.commit = slow_commit  # this app's writer only: b's stays fast
    results = {}
    Xa, ya = regression_batch(rng)
    th = threading.Thread(target=lambda: results.setdefault("a", post(a, "t", Xa, ya)))
    th.start()
    time.sleep(0.45)
    results["b"] = post(b, "u", *regression_batch(rng))
    th.join()
    assert results["b"].status_code == 200 and results["b"].json()["version"] == 2
    assert results["a"].status_code == 409, results["a"].text
    assert "NOT applied" in results["a"].json()["detail"]
    m = b.get("/model").json()
    assert m["version"] == 2 and m["n_batches"] == 2
    assert b.get("/tasks/t").json()["n_samples"] == 12


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_lock_contention_is_503_with_retry_after_and_predictions_do_not_wait(make_client, request, backend):
    c = make_client(backend, _request=request, LOCK_WAIT=0.2)
    rng = np.random.default_rng(6)
    assert post(c, "t", *regression_batch(rng)).status_code == 200
    model = c.app.state.model
    held, release = threading.Event(), threading.Event()

    def holder():  # another writer holding the lock (in its own thread, one `with`)
        with model.locks.hold(model.name):
            held.set()
            release.wait(10)

    th = threading.Thread(target=holder)
    th.start()
    held.wait(5)
    try:
        t0 = time.monotonic()
        r = post(c, "t", *regression_batch(rng))
        assert r.status_code == 503 and r.headers["Retry-After"] == "1", r.text
        assert "another update" in r.json()["detail"]
        assert time.monotonic() - t0 < 2
        p = c.get("/predict", params={"task_id": "t", "x": "1,2,3,4"})
        assert p.status_code == 200 and p.json()["version"] == 1
    finally:
        release.set()
        th.join()
    assert c.get("/model").json()["version"] == 1
    assert post(c, "t", *regression_batch(rng)).json()["version"] == 2


def test_redis_down_is_503_and_predictions_still_work(make_client, request):
    c = make_client("postgres", _request=request, REDIS_URL="redis://127.0.0.1:1/0")
    r = post(c, "t", *regression_batch(np.random.default_rng(7)))
    assert r.status_code == 503 and "redis unavailable" in r.json()["detail"], r.text
    ready = c.get("/readyz")
    assert ready.status_code == 503 and "unavailable" in ready.json()["lock"]
    assert c.get("/healthz").status_code == 200
    assert c.get("/model").json()["version"] == 0


def test_database_down_is_503(make_client):
    c = make_client(DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:1/nothing", DB_CONNECT_TIMEOUT=1)
    assert c.get("/healthz").status_code == 200
    for r in (c.get("/model"), c.get("/tasks"), post(c, "t", [[1.0]], [1.0]),
              c.get("/predict", params={"task_id": "t", "x": "1"})):
        assert r.status_code == 503, r.text
        assert r.json()["detail"].startswith("database unavailable")
    ready = c.get("/readyz")
    assert ready.status_code == 503 and ready.json()["database"].startswith("unavailable")


def test_service_recovers_when_database_and_redis_return(make_client, request):
    request.getfixturevalue("pg_database")
    pg = TcpProxy(PG_HOST, PG_PORT).start()
    rd = TcpProxy("127.0.0.1", int(REDIS_URL.rsplit(":", 1)[1].split("/")[0])).start()
    try:
        db = request.getfixturevalue("pg_database").rsplit("/", 1)[1]
        c = make_client("postgres", _request=request, DB_CONNECT_TIMEOUT=1,
                        DATABASE_URL=f"postgresql+psycopg://postgres@127.0.0.1:{pg.port}/{db}",
                        REDIS_URL=f"redis://127.0.0.1:{rd.port}/0")
        rng = np.random.default_rng(8)
        assert post(c, "t", *regression_batch(rng)).status_code == 200
        for proxy, words in ((pg, "database unavailable"), (rd, "redis unavailable")):
            proxy.stop()
            r = post(c, "t", *regression_batch(rng))
            assert r.status_code == 503 and words in r.json()["detail"], r.text
            assert c.get("/readyz").status_code == 503
            proxy.start()
            deadline = time.monotonic() + 10
            while c.get("/readyz").status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.1)
            r = post(c, "t", *regression_batch(rng))
            assert r.status_code == 200, r.text
        m = c.get("/model").json()
        assert m["version"] == 3 and m["n_batches"] == 3
        assert c.get("/tasks/t").json()["n_samples"] == 36
    finally:
        pg.stop()
        rd.stop()


def test_version_guard_also_holds_on_sqlite(make_client, tmp_path):
    """Embedded default: a writer that computed on an old version is refused as well."""
    a = make_client(SQLITE_PATH=str(tmp_path / "g.db"))
    settings = a.app.state.settings
    rng = np.random.default_rng(14)
    assert post(a, "t", *regression_batch(rng)).json()["version"] == 1
    model_a = a.app.state.model
    prepared = prepare(model_a.reader.snapshot(), "t", *regression_batch(rng))
    model_b = HostedModel.open(make_engine(settings), make_locks(settings), settings.MODEL_NAME,
                               settings.model_settings())
    assert learn_batch(model_b, "u", *regression_batch(rng))[1] == 2
    with pytest.raises(StaleWrite):
        model_a.writer.commit(prepared)
    assert a.get("/model").json()["version"] == 2 and a.get("/tasks/t").json()["n_samples"] == 12
    model_b.reader.engine.dispose()


def handed_over(holder, waiter, name: str = "m") -> bool:
    """``holder`` (one process's locks) holds ``name`` while ``waiter`` (another's) waits for
    it; whether the waiter takes it within 10 s of the release. Called with a waiter's ``POLL``
    of 30 s, only a wake lets it in that soon."""
    held, release, taken = threading.Event(), threading.Event(), threading.Event()

    def hold():
        with holder.hold(name):
            held.set()
            release.wait(10)

    def wait():
        with waiter.hold(name):
            taken.set()

    holding, waiting = threading.Thread(target=hold, daemon=True), threading.Thread(target=wait, daemon=True)
    holding.start()
    assert held.wait(5)
    waiting.start()
    time.sleep(0.3)  # the waiter has tried once and waits between tries
    assert not taken.is_set()
    release.set()
    ok = taken.wait(10)
    for thread in (holding, waiting):  # both released, their wakes written: nothing of theirs comes later
        thread.join(10)
    return ok


def test_a_redis_release_wakes_a_waiter_of_another_process_at_once(redis_server):
    """A release pushes to the model's wake list, on which a waiter of another process blocks:
    with a poll of 30 s the waiter still takes the lock as soon as it is released, and a
    release no one waited for leaves one entry that expires."""
    from service.writing.locks import RedisLocks

    client, prefix = redis_server
    holder, waiter = RedisLocks(REDIS_URL, prefix, 30, 60), RedisLocks(REDIS_URL, prefix, 30, 60)
    waiter.POLL = 30.0
    assert handed_over(holder, waiter), "the waiter was not woken by the release (its poll is 30 s)"

    for _ in range(3):  # nobody waits: one entry, which expires
        with holder.hold("m"):
            pass
    assert client.llen(holder.wake_key("m")) == 1
    assert 0 < client.pttl(holder.wake_key("m")) <= RedisLocks.WAKE_TTL
    time.sleep(RedisLocks.WAKE_TTL / 1000 + 0.1)
    assert client.exists(holder.wake_key("m")) == 0
    holder.close()
    waiter.close()


def test_a_file_lock_release_wakes_a_waiter_of_another_process_at_once(tmp_path):
    """The same for the file locks of the embedded default: a release writes to the model's
    wake FIFO, on which a waiter of another process waits; with a poll of 30 s the waiter
    still takes the lock as soon as it is released. A release with no waiter writes nothing."""
    import os
    import stat

    from service.writing.locks import FileLocks

    holder, waiter = FileLocks(tmp_path, 30, 60), FileLocks(tmp_path, 30, 60)  # two processes' views
    waiter.POLL = 30.0
    assert handed_over(holder, waiter), "the waiter was not woken by the release (its poll is 30 s)"

    assert stat.S_ISFIFO(os.stat(holder.wake_path("m")).st_mode)
    for _ in range(3):  # nobody waits: the open for writing fails, nothing is queued in the FIFO
        with holder.hold("m"):
            pass
    fd = os.open(holder.wake_path("m"), os.O_RDWR | os.O_NONBLOCK)
    try:
        with pytest.raises(BlockingIOError):
            os.read(fd, 1)
    finally:
        os.close(fd)


def test_a_file_lock_whose_wake_path_is_not_a_fifo_polls_and_writes_nothing_there(tmp_path):
    """Something else at the wake FIFO's path (a regular file): waiters poll, as without a
    FIFO, and a release leaves that file alone."""
    from service.writing.locks import FileLocks

    holder, waiter = FileLocks(tmp_path, 30, 10), FileLocks(tmp_path, 30, 10)
    waiter.POLL = 0.05  # polled: within the 10 s
    holder.wake_path("m").write_bytes(b"")
    assert handed_over(holder, waiter)
    assert holder.wake_path("m").read_bytes() == b""
