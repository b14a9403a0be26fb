"""A take-back's commit writes only the task rows the rebuilt model changes (issue 56): on a
stream of many tasks whose replay window touches few, the rows its statements write (counted by
the database's own row counts) are exactly the tasks whose stored row differs, every other row
stays as it was, column for column; the model after it is the engine's without the batch, bit
for bit, also in another process that reads it whole."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sqlalchemy import event, select

import core
from service.db import json_text
from service.store.packed_arrays import pack_arrays
from service.store.tables import tasks_t

from .test_take_back import create, engine_run, post
from .test_take_back_checkpoints import assert_same_model, every, long_stream  # noqa: F401 - every: a fixture

#: A checkpoint every 5 versions (the fixture ``every``), so that a replay window is short.
pytestmark = pytest.mark.usefixtures("every")

N_TASKS = 12


def stored_rows(c, name) -> dict[str, dict[str, Any]]:
    """Each task row of model ``name`` as stored, its arrays as their stored bytes."""
    engine = c.app.state.models.get(name).reader.bulk
    with engine.connect() as conn:
        rows = conn.execute(select(tasks_t).where(tasks_t.c.model_name == name)).mappings().all()
    return {r["task_id"]: {**r, "arrays": pack_arrays(r["arrays"])} for r in rows}


def taken_back_counting_rows(c, name, batch_version: int) -> tuple[dict[str, Any], int]:
    """Take ``batch_version`` back; its answer and the task rows its statements wrote
    (inserted, updated or deleted: the cursor's row counts)."""
    engine = c.app.state.models.get(name).reader.bulk
    written = [0]

    def count(_conn, cursor, statement, *_args) -> None:
        head = " ".join(statement.split()[:3]).upper()
        if head.startswith(("UPDATE TASKS ", "INSERT INTO TASKS", "DELETE FROM TASKS")):
            written[0] += max(cursor.rowcount, 0)

    event.listen(engine, "after_cursor_execute", count)
    try:
        r = c.delete(f"/models/{name}/batches/{batch_version}")
    finally:
        event.remove(engine, "after_cursor_execute", count)
    assert r.status_code == 200, r.text
    return r.json(), written[0]


def differing(a: core.LifelongLearner, b: core.LifelongLearner) -> set[str]:
    """The tasks whose exported arrays or meta differ between ``a`` and ``b`` (or that one lacks)."""
    sa, sb = a.get_state(), b.get_state()
    out = set(sa.tasks) ^ set(sb.tasks)
    for t in set(sa.tasks) & set(sb.tasks):
        x, y = sa.tasks[t], sb.tasks[t]
        if pack_arrays(x["arrays"]) != pack_arrays(y["arrays"]) or json_text(x["meta"]) != json_text(y["meta"]):
            out.add(t)
    return out


def test_a_take_back_rewrites_only_the_task_rows_it_changes(backend_app):
    """40 batches of 12 tasks; the last but one is taken back from the checkpoint of 35: the
    replay window (36..38, 40) learns its batches as the stream did, so the rows written are the
    tasks the batch's absence changes, not the 12."""
    c = backend_app()
    name = create(c)
    batches = long_stream(7, 40, n_tasks=N_TASKS)
    for task, X, y in batches:
        post(c, name, task, X, y)
    before = stored_rows(c, name)
    bad = 39
    answer, written = taken_back_counting_rows(c, name, bad)
    assert (answer["version"], answer["n_replayed"]) == (41, 4)
    kept = [b for v, b in enumerate(batches, 1) if v != bad]
    want = engine_run(kept)
    changed = differing(engine_run(batches), want) | {batches[bad - 1][0]}  # its counters at least
    assert 0 < len(changed) < N_TASKS // 2, changed
    after = stored_rows(c, name)
    assert written == len(changed)  # the commit's statements wrote these rows and no other
    assert {t for t, r in after.items() if r["version"] == 41} == changed
    for t in set(before) - changed:
        assert after[t] == before[t], t  # every column as it was: arrays' bytes, version, updated_at
    assert_same_model(c, name, want)
    assert_same_model(backend_app(), name, want)  # another process, reading every row
    # the model learns on from the rows left as they were
    more = long_stream(8, 3, n_tasks=N_TASKS)
    for task, X, y in more:
        post(c, name, task, X, y)
    assert_same_model(backend_app(), name, engine_run(kept + more))


def test_a_task_whose_only_batch_is_taken_back_loses_its_row_and_the_others_keep_their_place(backend_app):
    """A task learned once in the middle of the stream: its row is deleted, the tasks after it
    in the order move up one place, and a process reading the model whole serves the engine's."""
    c = backend_app()
    name = create(c)
    batches = long_stream(9, 30, n_tasks=4)
    rng = np.random.default_rng(10)
    solo = ("solo", rng.normal(size=(4, 4)).tolist(), rng.normal(size=4).tolist())
    late = [("late", *long_stream(11, 1)[0][1:])]
    stream = batches[:26] + [solo] + batches[26:] + late  # "solo" is version 27, "late" the last
    for task, X, y in stream:
        post(c, name, task, X, y)
    answer, written = taken_back_counting_rows(c, name, 27)
    assert answer["task_removed"] and answer["n_replayed"] == 6  # 26 and 28..32 on the checkpoint of 25
    after = stored_rows(c, name)
    assert "solo" not in after and sorted(r["position"] for r in after.values()) == list(range(5))
    assert after["late"]["position"] == 4
    kept = [b for b in stream if b[0] != "solo"]
    want = engine_run(kept)
    assert written <= len(differing(engine_run(stream), want)) + 1  # the deleted row and the moved one
    assert_same_model(c, name, want)
    assert_same_model(backend_app(), name, want)
