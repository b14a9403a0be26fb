"""What a commit writes does not grow with the number of tasks: the learner's task order is
kept by the task rows' positions (migration 0008), not rewritten in the model row, and the
model read back from the store has the same task order."""
from __future__ import annotations

import json

import numpy as np
import pytest
from sqlalchemy import create_engine, text

from benchmarks.service import bytes_per_commit
from service.store.reads import ModelReader
from service.models.state_files import to_npz

from .conftest import regression_batch


def test_bytes_per_commit_do_not_grow_with_the_tasks():
    out = bytes_per_commit((50, 1500), d=4, rows=3)
    small, large = out["50"], out["1500"]
    for key in ("known_task_commit_bytes", "new_task_commit_bytes"):
        # the learned arrays differ a little between the two models; 1,450 more task ids in the
        # model row's task_order were ~14,000 bytes more per commit
        assert large[key] - small[key] < 1000, (key, small[key], large[key])
    assert large["task_order_json_bytes"] > 14_000  # what the old model row rewrote on each commit


def _order_stored(c, model) -> list[str]:
    return ModelReader(model.reader.engine, model.name).snapshot().learner.task_ids


def test_the_task_order_survives_the_store(backend_client):
    c = backend_client
    model = c.app.state.model
    rng = np.random.default_rng(3)
    for task in ("zeta", "alpha", "mu", "alpha", "beta"):
        assert c.post(f"/tasks/{task}/data", json=dict(zip(("X", "y"), regression_batch(rng)))).status_code == 200
    with model.reader.bulk.connect() as conn:
        meta = conn.execute(text("SELECT meta FROM models WHERE name = :n"), {"n": model.name}).scalar_one()
        rows = dict(conn.execute(text("SELECT task_id, position FROM tasks WHERE model_name = :n"),
                                 {"n": model.name}).all())
    meta = json.loads(meta) if isinstance(meta, str) else meta
    assert "task_order" not in meta
    assert rows == {"zeta": 0, "alpha": 1, "mu": 2, "beta": 3}
    assert _order_stored(c, model) == ["zeta", "alpha", "mu", "beta"] == model.reader.snapshot().learner.task_ids
    # a process that cached an earlier version reads only the new tasks and puts them last
    other = ModelReader(model.reader.engine, model.name)
    other.snapshot()
    assert c.post("/tasks/omega/data", json=dict(zip(("X", "y"), regression_batch(rng)))).status_code == 200
    assert c.post("/tasks/delta/data", json=dict(zip(("X", "y"), regression_batch(rng)))).status_code == 200
    assert other.snapshot(check=True).learner.task_ids == ["zeta", "alpha", "mu", "beta", "omega", "delta"]
    # a take-back rebuilds the model: every row's position is written again
    r = c.delete("/batches/1")  # zeta's only batch
    assert r.status_code == 200, r.text
    assert _order_stored(c, model) == ["alpha", "mu", "beta", "omega", "delta"]
    assert other.snapshot(check=True).learner.task_ids == ["alpha", "mu", "beta", "omega", "delta"]
    # an exported model imported elsewhere keeps its order
    state = model.reader.snapshot().learner.get_state()
    state.tasks = dict(reversed(list(state.tasks.items())))  # the file's task list in another order
    r = c.post("/models/imported/state", content=to_npz(state), headers={"Content-Type": "application/octet-stream"})
    assert r.status_code in (200, 201), r.text
    imported = ModelReader(model.reader.engine, "imported").snapshot().learner
    assert imported.task_ids == ["alpha", "mu", "beta", "omega", "delta"]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_migration_0008_moves_the_task_order_to_the_task_rows_and_back(backend, tmp_path, request):
    from .conftest import create_pg_database, drop_pg_database, pg_url
    from .test_persistence import alembic

    if backend == "postgres":
        request.getfixturevalue("postgres_server")
        db = create_pg_database("fcl3_mig8")
        url = pg_url(db)
    else:
        url = f"sqlite:///{tmp_path / 'mig8.db'}"
    engine = create_engine(url)
    try:
        assert alembic("upgrade", "0007", url=url).returncode == 0
        order = ["t9", "t1", "t5"]
        meta = {"fitted": True, "task_order": order, "n_features": 2}
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO models (name, version, estimator, kind, settings, params, meta, arrays, "
                              "format_version, summary, created_at, updated_at) VALUES ('m', 3, 'FCL3', 'regression', "
                              "'{}', '{}', :meta, :arr, 3, '{}', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"),
                         {"meta": json.dumps(meta), "arr": b""})
            for t in sorted(order):
                conn.execute(text("INSERT INTO tasks (model_name, task_id, version, n_samples, n_batches, arrays, "
                                  "meta, last_update, created_at, updated_at) VALUES ('m', :t, 1, 1, 1, :arr, '{}', "
                                  "'{}', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"), {"t": t, "arr": b""})
        r = alembic("upgrade", "head", url=url)
        assert r.returncode == 0, r.stderr
        with engine.connect() as conn:
            stored = conn.execute(text("SELECT meta FROM models WHERE name = 'm'")).scalar_one()
            positions = dict(conn.execute(text("SELECT task_id, position FROM tasks WHERE model_name = 'm'")).all())
        stored = json.loads(stored) if isinstance(stored, str) else stored
        assert "task_order" not in stored and stored["n_features"] == 2
        assert positions == {"t9": 0, "t1": 1, "t5": 2}
        r = alembic("downgrade", "0007", url=url)
        assert r.returncode == 0, r.stderr
        with engine.connect() as conn:
            stored = conn.execute(text("SELECT meta FROM models WHERE name = 'm'")).scalar_one()
        stored = json.loads(stored) if isinstance(stored, str) else stored
        assert stored["task_order"] == order
        assert alembic("upgrade", "head", url=url).returncode == 0
    finally:
        engine.dispose()
        if backend == "postgres":
            drop_pg_database(db)
