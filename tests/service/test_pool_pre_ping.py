"""Pooled PostgreSQL connections are checked before use (issue 22, row 12).

Before: after PostgreSQL was restarted, each pooled connection whose server was gone failed
one request (2 of 40 reads answered 503 once it was back). Now every pool pre-pings
(:func:`service.db.make_engine`), so every read after the restart succeeds. Against a real
PostgreSQL: a throwaway cluster of the test's own (restarted), or the shared one, where only
the test's own backends are terminated.
"""
from __future__ import annotations

import threading
import time

import numpy as np
from sqlalchemy import text

from .conftest import pg_admin, regression_batch

PROBE = {"task_id": "t0", "X": np.random.default_rng(9).normal(size=(2, 4)).tolist()}


def reads(c, n: int, threads: int) -> list[tuple[str, int]]:
    """``n`` reads that touch the database, from ``threads`` threads at once: (route, status)."""
    routes = ["/model", "/tasks", "/readyz", "/tasks/t0", "/models"]
    out: list[tuple[str, int]] = []
    lock = threading.Lock()

    def run(k: int):
        for i in range(k, n, threads):
            route = routes[i % len(routes)]
            try:
                status = c.get(route).status_code
            except Exception as exc:  # noqa: BLE001
                status = repr(exc)
            with lock:
                out.append((route, status))

    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    return out


def test_every_read_succeeds_after_postgres_restarts(make_client, request, pg_cluster):
    c = make_client("postgres", _request=request, DATABASE_URL=pg_cluster.url(), DB_CONNECT_TIMEOUT=2)
    rng = np.random.default_rng(4)
    for i in range(3):
        X, y = regression_batch(rng, n=6, task=i)
        assert c.post(f"/tasks/t{i % 2}/data", json={"X": X, "y": y}).status_code == 200
    # several connections in each pool: reads at once, then a prediction and a write (the bulk pool)
    assert all(s == 200 for _, s in reads(c, 40, threads=8))
    assert c.post("/predict", json=PROBE).status_code == 200

    pg_cluster.stop("fast")  # every connection of both pools now has a dead server
    pg_cluster.start()

    after = reads(c, 40, threads=4)
    failed = [(route, s) for route, s in after if s != 200]
    assert not failed, f"{len(failed)} of {len(after)} reads failed after the restart: {failed}"
    assert c.post("/predict", json=PROBE).status_code == 200
    X, y = regression_batch(rng, n=6)
    r = c.post("/tasks/t0/data", json={"X": X, "y": y})
    assert r.status_code == 200 and r.json()["version"] == 4, r.text


def test_terminated_backends_are_replaced_before_use(request):
    """On the shared PostgreSQL: the pool's own backends terminated (as a restart would), the
    next checkouts get new connections; a quiet one is used without a round trip."""
    from service.db import make_engine

    from .conftest import make_settings

    url = request.getfixturevalue("pg_database")
    engine = make_engine(make_settings(DATABASE_URL=url), pool_size=4)
    try:
        conns = [engine.connect() for _ in range(4)]
        pids = [conn.execute(text("SELECT pg_backend_pid()")).scalar() for conn in conns]
        for conn in conns:
            conn.close()  # back in the pool, idle
        with pg_admin() as admin:  # only this test's own backends
            assert all(admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0] for pid in pids)
        deadline = time.monotonic() + 5
        with pg_admin() as admin:
            while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)).fetchone()[0]:
                assert time.monotonic() < deadline
                time.sleep(0.01)
        held = [engine.connect() for _ in range(4)]  # the 4 pooled connections, all dead
        new_pids = [conn.execute(text("SELECT pg_backend_pid()")).scalar() for conn in held]
        assert not set(new_pids) & set(pids)
        for conn in held:
            conn.close()
        # a quiet, live connection is used without a round trip: its backend ran no SELECT 1
        for _ in range(3):
            with engine.connect() as conn:  # checked out (and checked) here
                pid = conn.connection.dbapi_connection.info.backend_pid
                with pg_admin() as admin:
                    last = admin.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0]
                assert pid in new_pids and last in ("ROLLBACK", "SELECT pg_backend_pid()"), last  # not SELECT 1
    finally:
        engine.dispose()

