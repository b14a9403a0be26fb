"""Migrations, the array column type, what an update rewrites, and exact reloads."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis.extra import numpy as hnp
from sqlalchemy import create_engine, event, inspect, select, update

import core
from service.store.packed_arrays import array_from_bytes, array_to_bytes
from service.store.tables import BatchRow, ModelRow, TaskRow

from .conftest import ROOT, create_pg_database, drop_pg_database, pg_url, regression_batch


def alembic(*args, url: str):
    env = {**os.environ, "DATABASE_URL": url}
    return subprocess.run([sys.executable, "-m", "alembic", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return set(inspect(conn).get_table_names())
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_migrations_upgrade_and_downgrade_on_an_empty_database(backend, tmp_path, request):
    """The very command docker-compose's `migrate` service runs: `alembic upgrade head`."""
    if backend == "postgres":
        request.getfixturevalue("postgres_server")
        name = create_pg_database("fcl3_mig")
        url = pg_url(name)
    else:
        url = f"sqlite:///{tmp_path / 'mig.db'}"
    try:
        r = alembic("upgrade", "head", url=url)
        assert r.returncode == 0, r.stderr
        assert {"models", "tasks", "batches", "alembic_version"} <= tables(url)
        r = alembic("check", url=url)  # the ORM models and the migrations agree
        assert r.returncode == 0, r.stdout + r.stderr
        r = alembic("downgrade", "base", url=url)
        assert r.returncode == 0, r.stderr
        assert tables(url) <= {"alembic_version"}
        assert alembic("upgrade", "head", url=url).returncode == 0
    finally:
        if backend == "postgres":
            drop_pg_database(name)


def column_compression(url: str) -> dict[tuple[str, str], str]:
    """PostgreSQL's compression method of each column of packed arrays ('' : the default)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {(t, c): m for t, c, m in conn.exec_driver_sql(
                "SELECT c.relname, a.attname, a.attcompression FROM pg_attribute a "
                "JOIN pg_class c ON c.oid = a.attrelid WHERE c.relnamespace = 'public'::regnamespace "
                "AND a.attnum > 0 AND NOT a.attisdropped AND a.atttypid = 'bytea'::regtype")}
    finally:
        engine.dispose()


def test_packed_arrays_are_compressed_with_lz4_on_postgres(postgres_server):
    """Revision 0011: every column of packed arrays compresses with LZ4 (pglz spends
    milliseconds on float64 arrays it then stores uncompressed), a value written afterwards is
    stored with it, and the downgrade restores pglz."""
    spec = importlib.util.spec_from_file_location("revision_0011", ROOT / "migrations/versions/0011_arrays_lz4.py")
    revision = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(revision)
    name = create_pg_database("fcl3_lz4")
    url = pg_url(name)
    try:
        assert alembic("upgrade", "0010", url=url).returncode == 0
        assert set(column_compression(url).values()) == {""}
        assert alembic("upgrade", "head", url=url).returncode == 0
        methods = column_compression(url)
        # every bytea column is one of the arrays, or revision 0013's checkpoint states
        assert set(methods) == {*revision.ARRAY_COLUMNS, ("checkpoints", "state")}
        assert set(methods.values()) == {"l"}
        engine = create_engine(url)
        try:
            with engine.begin() as conn:
                conn.exec_driver_sql("INSERT INTO models (name, version, estimator, kind, settings, params, meta, "
                                     "arrays, format_version, summary, created_at, updated_at) VALUES ('m', 0, 'FCL3', "
                                     "'regression', '{}', '{}', '{}', %(a)s, 1, '{}', now(), now())",
                                     {"a": np.zeros(4096).tobytes()})
                assert conn.exec_driver_sql("SELECT pg_column_compression(arrays) FROM models").scalar() == "lz4"
        finally:
            engine.dispose()
        assert alembic("downgrade", "0010", url=url).returncode == 0
        assert set(column_compression(url).values()) == {"p"}
    finally:
        drop_pg_database(name)


@pytest.mark.parametrize("a", [
    np.arange(12, dtype=np.float64).reshape(3, 4), np.array(3.5), np.zeros((0, 5)), np.arange(5, dtype=np.int32),
    np.array([True, False]), np.asfortranarray(np.random.default_rng(0).normal(size=(4, 3))),
])
def test_array_bytes_keep_dtype_shape_and_values(a):
    b = array_from_bytes(array_to_bytes(a))
    assert b.dtype == a.dtype and b.shape == a.shape and np.array_equal(a, b)


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(dtype=hnp.scalar_dtypes(), shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)))
def test_array_bytes_round_trip_any_numeric_array(a):
    b = array_from_bytes(array_to_bytes(a))
    assert b.dtype == a.dtype and b.shape == a.shape
    assert a.tobytes() == b.tobytes()  # bit for bit (NaN and NaT included)


def test_array_bytes_never_unpickle():
    with pytest.raises(ValueError):
        array_to_bytes(np.array([{"a": 1}], dtype=object))


def _post(c, task, X, y):
    r = c.post(f"/tasks/{task}/data", json={"X": X, "y": y})
    assert r.status_code == 200, r.text
    return r.json()


def test_update_rewrites_only_the_model_row_its_task_and_the_one_measured_again(backend_client):
    """A known task's update writes the model row, its task's row, and the row of the one task
    whose evidence the update measured again (the engine's ``remeasured_tasks``): that row's
    meta and version, not its counters and not its arrays, which did not change."""
    c = backend_client
    reader = c.app.state.model.reader
    rng = np.random.default_rng(9)
    _post(c, "w", *regression_batch(rng, n=200))  # past the scaling's warm-up, which rewrites every task
    for task in ("a", "b", "c"):
        _post(c, task, *regression_batch(rng))
    cols = (TaskRow.task_id, TaskRow.version, TaskRow.updated_at, TaskRow.n_samples, TaskRow.n_batches,
            TaskRow.last_update, TaskRow.meta)
    with reader.engine.connect() as conn:
        before = {r.task_id: r for r in conn.execute(select(*cols).where(TaskRow.model_name == reader.name))}
    written = []  # the task rows' UPDATEs: (columns set, task ids)

    def capture(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("UPDATE TASKS"):
            sets = statement.split(" SET ", 1)[1].split(" WHERE ", 1)[0]
            rows = parameters if executemany else [parameters]
            written.append((sets, [r["w_task"] if isinstance(r, dict) else r[-1] for r in rows]))

    event.listen(reader.bulk, "before_cursor_execute", capture)
    try:
        _post(c, "b", *regression_batch(rng))
    finally:
        event.remove(reader.bulk, "before_cursor_execute", capture)
    with reader.engine.connect() as conn:
        after = {r.task_id: r for r in conn.execute(select(*cols).where(TaskRow.model_name == reader.name))}
        batches = conn.execute(select(BatchRow.task_id, BatchRow.version, BatchRow.n_samples)
                               .where(BatchRow.model_name == reader.name).order_by(BatchRow.version)).all()
    assert after["b"].version == 5 and after["b"].n_batches == 2
    (again,) = [t for t in after if t != "b" and after[t] != before[t]]
    assert after[again].version == 5 and after[again].meta["evidence"] != before[again].meta["evidence"]
    assert (after[again].n_samples, after[again].n_batches, after[again].last_update) == (
        before[again].n_samples, before[again].n_batches, before[again].last_update)
    assert len(written) == 2 and "arrays" in written[0][0] and "arrays" not in written[1][0], written
    assert [w[1] for w in written] == [["b"], [again]]
    assert [(b.task_id, b.version, b.n_samples) for b in batches] == [
        ("w", 1, 200), ("a", 2, 12), ("b", 3, 12), ("c", 4, 12), ("b", 5, 12)]


def test_reload_is_exact_and_raw_batches_replay_to_the_same_model(backend_client, make_client, request):
    c = backend_client
    s = c.app.state.settings
    rng = np.random.default_rng(10)
    for i, task in enumerate(["a", "b", "a", "c", "b", "d"]):
        _post(c, task, *regression_batch(rng, n=8 + i, task=i))
    probe = rng.normal(size=(5, 4)).tolist()
    before = {t: c.post("/predict", json={"task_id": t, "X": probe}).json() for t in "abcd"}

    # A fresh process view (new app, empty cache) on the same stored model.
    if s.DATABASE_URL:
        fresh = make_client("postgres", _request=request, MODEL_NAME=s.MODEL_NAME, REDIS_PREFIX=s.REDIS_PREFIX)
    else:
        fresh = make_client(SQLITE_PATH=s.SQLITE_PATH, MODEL_NAME=s.MODEL_NAME)
    after = {t: fresh.post("/predict", json={"task_id": t, "X": probe}).json() for t in "abcd"}
    assert after == before  # bit for bit (floats round-trip exactly through JSON)

    # The append-only batch table alone rebuilds the same model.
    reader = fresh.app.state.model.reader
    from service.models.learners import make_learner

    learner = make_learner(reader.snapshot().info["settings"])
    for b in reader.batches():
        learner.learn(b["task_id"], b["X"], b["y"], defer_refits=b["refits_deferred"])
    for t in "abcd":
        assert learner.predict(t, np.array(probe)).tolist() == before[t]["predictions"]
    assert core.load_state(reader.snapshot().learner.get_state()).get_params() == learner.get_params()


def test_a_reader_follows_another_writer(make_client, request):
    """Replica B writes; replica A notices the version moved and reloads (only what changed)."""
    a = make_client("postgres", _request=request)
    s = a.app.state.settings
    b = make_client("postgres", _request=request, MODEL_NAME=s.MODEL_NAME, REDIS_PREFIX=s.REDIS_PREFIX)
    rng = np.random.default_rng(11)
    _post(a, "t", *regression_batch(rng))
    probe = {"task_id": "t", "X": [[0.5, 0.5, 0.5, 0.5]]}
    first = a.post("/predict", json=probe).json()
    assert first["version"] == 1
    _post(b, "t", *regression_batch(rng))
    _post(b, "u", *regression_batch(rng))
    pa, pb = a.post("/predict", json=probe).json(), b.post("/predict", json=probe).json()
    assert pa == pb and pa["version"] == 3 and pa["predictions"] != first["predictions"]
    assert a.get("/tasks/u").status_code == 200


def test_a_database_of_format_1_task_rows_is_read_and_upgraded_one_task_at_a_time(backend_client, make_client, request):
    """Format 1 stored every task's raw rows; such a database keeps serving, and an update
    rewrites only the task it learns in format 2 (sufficient statistics, constant size); the
    row of the task whose evidence it measured again gets its new meta and keeps its arrays."""
    c = backend_client
    s = c.app.state.settings
    reader = c.app.state.model.reader
    rng = np.random.default_rng(12)
    for i, task in enumerate(["a", "b", "a", "c"]):
        _post(c, task, *regression_batch(rng, n=9 + i, task=i))
    probe = rng.normal(size=(4, 4)).tolist()
    before = {t: c.post("/predict", json={"task_id": t, "X": probe}).json()["predictions"] for t in "abc"}
    with reader.engine.begin() as conn:  # turn the stored model back into format 1
        rows = {}
        for b in reader.batches():
            X, y = rows.get(b["task_id"], (np.zeros((0, 4)), np.zeros(0)))
            rows[b["task_id"]] = (np.vstack([X, b["X"]]), np.concatenate([y, b["y"]]))
        for r in conn.execute(select(TaskRow.task_id, TaskRow.arrays).where(TaskRow.model_name == reader.name)).all():
            assert {"gram", "moment", "n"} <= set(r.arrays) and "X" not in r.arrays
            arrays = {k: v for k, v in r.arrays.items() if k not in ("gram", "moment", "n")}
            X, y = rows[r.task_id]
            conn.execute(update(TaskRow).where(TaskRow.model_name == reader.name, TaskRow.task_id == r.task_id)
                         .values(arrays={"X": X, "y": y, **arrays}))
        conn.execute(update(ModelRow).where(ModelRow.name == reader.name).values(format_version=1))

    if s.DATABASE_URL:
        fresh = make_client("postgres", _request=request, MODEL_NAME=s.MODEL_NAME, REDIS_PREFIX=s.REDIS_PREFIX)
    else:
        fresh = make_client(SQLITE_PATH=s.SQLITE_PATH, MODEL_NAME=s.MODEL_NAME)
    for t in "abc":
        got = fresh.post("/predict", json={"task_id": t, "X": probe}).json()["predictions"]
        np.testing.assert_allclose(got, before[t], rtol=1e-10)
    _post(fresh, "b", *regression_batch(rng, n=7, task=1))
    with reader.engine.connect() as conn:
        rows_after = conn.execute(select(TaskRow.task_id, TaskRow.arrays, TaskRow.version)
                                  .where(TaskRow.model_name == reader.name)).all()
        version = conn.execute(select(ModelRow.format_version).where(ModelRow.name == reader.name)).scalar()
    kept = {r.task_id: set(r.arrays) for r in rows_after}
    written = {r.task_id for r in rows_after if r.version == 5}
    assert "b" in written and len(written) == 2  # b, and the task measured again
    for t in "abc":
        assert ("gram" in kept[t] and "X" not in kept[t]) if t == "b" else ("X" in kept[t])
    assert version == core.STATE_FORMAT_VERSION == 3
    from service.models.learners import make_learner

    replay = make_learner(fresh.app.state.model.reader.snapshot().info["settings"])
    for b in fresh.app.state.model.reader.batches():
        replay.learn(b["task_id"], b["X"], b["y"], defer_refits=b["refits_deferred"])
    for t in "abc":
        got = fresh.post("/predict", json={"task_id": t, "X": probe}).json()["predictions"]
        np.testing.assert_allclose(got, replay.predict(t, np.array(probe)), rtol=1e-9)
