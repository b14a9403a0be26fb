"""Process liveness (service/leases.py): one lease connection per process and database, shared
by the Idempotency-Key claims and the update locks; the holders written by either are judged
alike, in the forms stored before the two shared one module."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from service.writing.leases import APPLICATION_NAME, LEASE_SPACE, Liveness, local_holder, machine, process_start

from .conftest import create_pg_database, drop_pg_database, pg_admin, pg_url, regression_batch


@pytest.fixture
def own_database(postgres_server):
    """A PostgreSQL database of this test alone (no other process holds a lease on it)."""
    from alembic import command

    from service.db import alembic_config

    name = create_pg_database("fcl3_lease")
    url = pg_url(name)
    command.upgrade(alembic_config(url), "head")
    yield url
    drop_pg_database(name)


def leases_on(url: str) -> list[tuple[int, int, str]]:
    """The leases held on the database of ``url``: (backend pid, lease id, application_name)."""
    from sqlalchemy.engine import make_url

    with pg_admin() as conn:
        return conn.execute(
            "SELECT l.pid, l.objid::bigint, a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = %s::oid"
            " AND a.datname = %s ORDER BY l.pid", (LEASE_SPACE, make_url(url).database)).fetchall()


def test_one_process_holds_one_lease_connection_for_claims_and_update_locks(make_client, request, own_database):
    """A claimed update (its claim and its Redis update lock both name the holder), then the
    holders of both judged: one backend holds one lease, the one both name."""
    c = make_client("postgres", _request=request, DATABASE_URL=own_database)
    X, y = regression_batch(np.random.default_rng(1))
    r = c.post("/tasks/t/data", json={"X": X, "y": y}, headers={"Idempotency-Key": "k"})
    assert r.status_code == 200, r.text
    keys, holders = c.app.state.model.keys, c.app.state.locks.holders
    assert keys.holder() == holders.holder() and keys.holder().startswith("g")
    assert not holders.gone(holders.holder())  # ours
    assert holders.gone("g7fffffff")  # nobody's: asked on the lease's connection
    with keys.engine.begin() as conn:
        assert keys.gone(conn, "g7ffffffe.x")  # asked in the claim's transaction
    held = leases_on(own_database)
    assert [(lease, app) for _, lease, app in held] == [(int(keys.holder()[1:], 16), APPLICATION_NAME)], held


def test_the_lease_is_closed_by_its_last_user(own_database):
    a, b = Liveness(own_database), Liveness(own_database)
    holder = a.holder()
    assert b.holder() == holder and len(leases_on(own_database)) == 1
    a.close()
    assert b.holder() == holder and len(leases_on(own_database)) == 1  # b still uses it
    b.close()
    assert leases_on(own_database) == []
    other = Liveness(own_database)
    try:
        assert other.gone(holder)  # a closed lease is gone
    finally:
        other.close()


def test_a_process_gone_is_judged_in_both_stored_forms(tmp_path):
    """``p<pid>-<start>`` (claims on SQLite) and ``p<pid>-<start>@<machine>`` (Redis locks)."""
    live = Liveness(f"sqlite:///{tmp_path}/x.db")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead = f"p{proc.pid:x}-{process_start(proc.pid):x}"
        assert not live.gone(dead) and not live.gone(f"{dead}@{machine()}")  # alive
    finally:
        proc.kill()
        proc.wait(10)
    assert live.gone(dead) and live.gone(f"{dead}@{machine()}")
    assert not live.gone(f"{dead}@000000000000")  # another machine: its lock waits for its TTL
    assert live.holder() == f"{local_holder(scoped=False)}@{machine()}" == local_holder()
    for mine in (local_holder(), local_holder(scoped=False)):
        assert not live.gone(mine)
    for odd in ("", "p", "p12", "pzz-1", "g12", "zz", f"p{os.getpid():x}-0"):
        assert not live.gone(odd)
