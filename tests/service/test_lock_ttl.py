"""No update holds a model's lock past ``LOCK_TTL`` (issue 22, row 3), on every backend: a
holder that outlives it loses the lock to the next writer, and its late release leaves the
new holder's lock alone."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from service.writing.locks import FileLocks, LocalLocks, LockBusy, RedisLocks

from .conftest import REDIS_URL, regression_batch

TTL = 0.5
#: How long a stuck holder holds on, and how late after the TTL a waiter may still get the lock:
#: the slack allows for a stall of the test process (a busy machine, a long collection), and
#: stays below what waiting for the stuck holder would take.
STUCK, SLACK = 4.0, 2.5


def make_locks(kind, tmp_path, request, wait):
    if kind == "local":
        return LocalLocks(TTL, wait)
    if kind == "file":
        return FileLocks(tmp_path / "locks", TTL, wait)
    _, prefix = request.getfixturevalue("redis_server")
    return RedisLocks(REDIS_URL, prefix, TTL, wait)


def hold_in_thread(locks, name, seconds):
    """A writer holding ``name`` for ``seconds`` (longer than the TTL: a stuck update)."""
    held, done = threading.Event(), threading.Event()

    def run():
        with locks.hold(name):
            held.set()
            time.sleep(seconds)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert held.wait(5)
    return done


@pytest.mark.parametrize("kind", ["local", "file", "redis"])
def test_a_holder_past_the_ttl_loses_the_lock_and_its_late_release_frees_nothing(kind, tmp_path, request):
    locks = make_locks(kind, tmp_path, request, wait=5)
    other = make_locks(kind, tmp_path, request, wait=0.2) if kind != "local" else locks  # another process
    t0 = time.monotonic()
    stuck = hold_in_thread(locks, "m", seconds=STUCK)
    with locks.hold("m", ttl=30):  # waits for the TTL, not for the stuck holder
        waited = time.monotonic() - t0
        assert TTL - 0.1 <= waited < TTL + SLACK, waited
        assert stuck.wait(10)  # the stuck holder releases while we hold the lock ...
        with pytest.raises(LockBusy):  # ... which frees nothing: ours is still held
            with other.hold("m", wait=0.2):
                pass
    with other.hold("m", wait=1):  # released by us: free
        pass


def test_file_lock_ttls_are_kept_by_one_thread_and_a_shorter_one_ends_on_time(tmp_path):
    """One thread per process (per :class:`FileLocks`) keeps every hold's TTL (no thread per hold); a hold
    with a TTL shorter than those already kept wakes it and still ends at its own TTL."""
    locks = FileLocks(tmp_path / "locks", 30, 5)
    other = FileLocks(tmp_path / "locks", 30, 0.1)  # another process's view
    before = threading.active_count()
    for _ in range(50):
        with locks.hold("m"):
            pass
    assert threading.active_count() <= before + 1
    with locks.hold("long"):  # kept with its TTL of 30 s
        t0 = time.monotonic()
        held, done = threading.Event(), threading.Event()

        def stuck():
            with locks.hold("short-lived", ttl=TTL):
                held.set()
                time.sleep(STUCK)
            done.set()

        thread = threading.Thread(target=stuck, daemon=True)
        thread.start()
        assert held.wait(5)
        with other.hold("short-lived", wait=5):  # free once the stuck hold's own TTL ends
            assert TTL - 0.1 <= time.monotonic() - t0 < TTL + SLACK
        assert done.wait(10)
        thread.join(5)
    assert threading.active_count() <= before + 2  # one thread for each of the two FileLocks


def test_a_stuck_process_loses_its_file_lock_at_the_ttl(tmp_path):
    """Another process holds the lock and never lets go: it is unlocked at its TTL."""
    script = textwrap.dedent(f"""
        import sys, time
        from service.writing.locks import FileLocks
        with FileLocks({str(tmp_path / "locks")!r}, {TTL}, 5).hold("m"):
            print("held", flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with FileLocks(tmp_path / "locks", 30, 5).hold("m"):
            assert time.monotonic() - t0 < TTL + SLACK
        assert proc.poll() is None  # it still runs
    finally:
        proc.kill()
        proc.wait(10)


def test_an_update_that_outlives_the_ttl_on_sqlite_lets_the_next_writer_commit(make_client, tmp_path):
    """Two replicas on one SQLite file: A's update stalls past LOCK_TTL; B gets the lock at the
    TTL (not after A) and commits; A's late commit is refused (409) and nothing of it is stored.

    A's update stays stalled until B is answered, so the order does not depend on how long
    either takes: had B waited for A, it would have given up after its LOCK_WAIT (503)."""
    path = str(tmp_path / "ttl.db")
    a = make_client(SQLITE_PATH=path, LOCK_TTL=TTL, LOCK_WAIT=5)
    b = make_client(SQLITE_PATH=path, LOCK_TTL=TTL, LOCK_WAIT=5, MODEL_NAME=a.app.state.settings.MODEL_NAME)
    rng = np.random.default_rng(5)
    assert a.post("/tasks/t/data", json=dict(zip("Xy", regression_batch(rng)))).status_code == 200
    writer_a = a.app.state.model.writer
    real_commit = writer_a.commit_group
    stalled, b_answered = threading.Event(), threading.Event()

    def slow_commit(*args, **kwargs):  # a long solve: A's update, learned, runs until B is answered
        stalled.set()
        b_answered.wait(30)
        return real_commit(*args, **kwargs)

    writer_a.commit_group = slow_commit
    results = {}
    batch_a = dict(zip("Xy", regression_batch(rng)))
    th = threading.Thread(target=lambda: results.setdefault("a", a.post("/tasks/t/data", json=batch_a)))
    th.start()
    assert stalled.wait(10)  # A holds the lock and has learned
    try:
        results["b"] = b.post("/tasks/u/data", json=dict(zip("Xy", regression_batch(rng, task=1))))
    finally:
        b_answered.set()
    th.join(30)
    assert results["b"].status_code == 200, results["b"].text
    assert results["b"].json()["version"] == 2
    assert results["a"].status_code == 409 and "NOT applied" in results["a"].json()["detail"], results["a"].text
    m = b.get("/model").json()
    assert m["version"] == 2 and m["n_batches"] == 2
    assert b.get("/tasks/t").json()["n_samples"] == 12
