"""The SQLite file deleted or replaced under a running service (issue 22, row 6).

Before: the process kept writing to the unlinked file, acknowledged every batch and stayed
ready; after a restart the model was at version 0. Now the process remembers its file's
identity (device, inode) and checks it before each commit and each use of a pooled
connection: a store whose file vanished or was replaced answers 503 to writes (nothing
acknowledged) and to ``/readyz``, which names the database.
"""
from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest

from .conftest import regression_batch


def write(c, rng, task: str = "t0"):
    X, y = regression_batch(rng, n=6)
    return c.post(f"/tasks/{task}/data", json={"X": X, "y": y})


def remove_store(path: Path, how: str) -> None:
    if how == "deleted":  # the file alone (its -wal and -shm stay)
        path.unlink()
    elif how == "deleted with its wal":
        for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            p.unlink(missing_ok=True)
    elif how == "replaced":  # a consistent copy of itself (a backup) moved over it: another file
        copy = path.with_name("copy.db")
        with sqlite3.connect(path) as src, sqlite3.connect(copy) as dst:
            src.backup(dst)
        for p in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            p.unlink(missing_ok=True)  # the old file's: not the copy's
        os.replace(copy, path)
    else:  # pragma: no cover
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["deleted", "deleted with its wal", "replaced"])
def test_writes_refused_and_not_ready_once_the_file_is_gone(make_client, tmp_path, how):
    path = tmp_path / "store.db"
    c = make_client(SQLITE_PATH=str(path))
    rng = np.random.default_rng(1)
    for _ in range(3):
        assert write(c, rng).status_code == 200
    assert c.get("/readyz").status_code == 200

    remove_store(path, how)
    acknowledged = 0
    for i in range(10):
        r = write(c, rng, task=f"t{i % 2}")
        assert r.status_code == 503, r.text
        assert "database" in r.json()["detail"] and str(path) in r.json()["detail"]
        acknowledged += r.status_code == 200
    assert acknowledged == 0
    r = c.post("/models", json={"name": "other", "kind": "regression"})
    assert r.status_code == 503, r.text
    ready = c.get("/readyz")
    assert ready.status_code == 503 and ready.json()["database"].startswith("unavailable"), ready.text
    assert "deleted or replaced" in ready.json()["database"]  # no key configured: the details
    if how != "replaced":  # nothing was created at the path meanwhile
        assert not path.exists()


def test_after_a_restart_the_store_holds_exactly_the_acknowledged_batches(make_client, tmp_path):
    path = tmp_path / "store.db"
    c = make_client(SQLITE_PATH=str(path))
    rng = np.random.default_rng(2)
    for _ in range(4):
        assert write(c, rng).status_code == 200
    remove_store(path, "replaced")  # holds versions 1..4
    statuses = [write(c, rng).status_code for _ in range(6)]
    assert statuses == [503] * 6
    c.__exit__(None, None, None)
    # the restarted service, on the file now at the path
    again = make_client(SQLITE_PATH=str(path), MODEL_NAME=c.app.state.settings.MODEL_NAME)
    assert again.get("/readyz").status_code == 200
    assert again.get("/model").json()["version"] == 4
    assert write(again, rng).json()["version"] == 5


def test_a_real_server_refuses_writes_once_its_file_is_deleted(spawn, tmp_path):
    import json

    import httpx

    from .conftest import ESTIMATOR, PARAMS, unique_name

    path = tmp_path / "served.db"
    server = spawn({"SQLITE_PATH": str(path), "DATABASE_URL": "", "REDIS_URL": "", "MODEL_NAME": unique_name("v"),
                    "FCL3_ESTIMATOR": ESTIMATOR, "FCL3_KIND": "regression", "FCL3_PARAMS": json.dumps(PARAMS)},
                   workers=2, log_path=tmp_path / "server.log")
    server.start()
    # both workers started on the file (a worker that starts after it is gone makes a new one)
    deadline = time.monotonic() + 30
    while (tmp_path / "server.log").read_text().count('"event":"started"') < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    rng = np.random.default_rng(3)
    with httpx.Client(base_url=server.url, timeout=30) as c:
        for _ in range(3):
            assert write(c, rng).status_code == 200
        path.unlink()
        statuses = [write(c, rng, task=f"t{i % 3}").status_code for i in range(20)]
        assert statuses == [503] * 20, statuses
        deadline = time.monotonic() + 5
        while c.get("/readyz").status_code != 503 and time.monotonic() < deadline:  # both workers
            time.sleep(0.05)
        assert all(c.get("/readyz").status_code == 503 for _ in range(10))
    assert not path.exists()


def test_a_transaction_begun_before_the_file_vanished_is_not_committed(tmp_path):
    from sqlalchemy import exc as sa_exc
    from sqlalchemy import text

    from service.db import make_engine, store_problem

    from .conftest import make_settings

    path = tmp_path / "t.db"
    engine = make_engine(make_settings(SQLITE_PATH=str(path)))
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (x INTEGER)"))
        witness = sqlite3.connect(path)  # holds the file open after it is deleted
        assert witness.execute("SELECT count(*) FROM t").fetchone()[0] == 0
        assert store_problem(engine) is None
        with pytest.raises(sa_exc.OperationalError, match="deleted or replaced"):
            with engine.begin() as conn:
                conn.execute(text("INSERT INTO t VALUES (1)"))
                path.unlink()  # between the statement and the commit
        assert "was deleted" in store_problem(engine)
        assert witness.execute("SELECT count(*) FROM t").fetchone()[0] == 0  # rolled back
        with pytest.raises(sa_exc.OperationalError, match="deleted or replaced"):
            engine.connect()
        assert not path.exists()
        witness.close()
    finally:
        engine.dispose()


def test_a_file_deleted_during_the_commit_is_not_acknowledged(make_client, tmp_path):
    """The file unlinked after the commit's own check and before the write reaches it (the
    race the fault suite met: the batch went into the unlinked file and was answered 200):
    the answer is 503, and after a restart the store holds exactly the acknowledged batches."""
    from sqlalchemy import event

    path = tmp_path / "store.db"
    c = make_client(SQLITE_PATH=str(path))
    rng = np.random.default_rng(4)
    for _ in range(3):
        assert write(c, rng).status_code == 200
    engine = c.app.state.models.bulk if hasattr(c.app.state.models, "bulk") else c.app.state.engine
    removed = []

    @event.listens_for(engine, "commit")  # registered after the guard's: runs once it has passed
    def _unlink(_conn):
        if not removed and path.exists():
            remove_store(path, "replaced")  # the file at the path now holds versions 1..3
            removed.append(True)

    r = write(c, rng)
    assert removed and r.status_code == 503, r.text
    assert "deleted or replaced" in r.json()["detail"]
    c.__exit__(None, None, None)
    again = make_client(SQLITE_PATH=str(path), MODEL_NAME=c.app.state.settings.MODEL_NAME)
    assert again.get("/model").json()["version"] == 3


def test_an_engine_that_never_connected_does_not_create_the_file_again(tmp_path):
    """A second worker whose requests all went to the first has an engine that never
    connected: the file deleted, its first connection must fail, not make a new empty file
    at the path (seen in a 2-worker server under load)."""
    import sqlalchemy as sa

    from service.config import Settings
    from service.db import make_engine

    path = tmp_path / "store.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
    engine = make_engine(Settings(SQLITE_PATH=str(path), DATABASE_URL="", REDIS_URL=""))
    path.unlink()
    with pytest.raises(sa.exc.OperationalError, match="deleted"):
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    assert not path.exists()
