"""The task rows a commit writes: a group commit's
(:meth:`service.store.writes.ModelWriter.commit_group`: each task the group touched once, with
the last learner's state and the counters of every batch of it) and a take-back's
(:meth:`~service.store.writes.ModelWriter.commit_take_back`: the rows whose stored content the
rebuilt model changes, no other); each kind of row (new, learned again, rewritten, re-measured,
moved, deleted) in one statement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import Connection, bindparam, select

import core
from service.db import json_text
from service.store.prepared import Prepared, PreparedTakeBack
from service.store.tables import tasks_t

#: The columns of a task row a take-back compares with what is stored (besides its arrays and meta).
COUNTERS = ("position", "n_samples", "n_batches", "last_update")
_STORED = select(tasks_t.c.task_id, *(tasks_t.c[k] for k in COUNTERS)).where(
    tasks_t.c.model_name == bindparam("w_name")
)


def task_positions(state: core.ModelState, learner: core.LifelongLearner | None = None) -> dict[str, int]:
    """Each task's place in the learner's task order (the state's ``task_order``)."""
    order = state.meta.get("task_order")
    if order is None:
        order = list(learner.task_ids) if learner is not None else list(state.tasks)
    return {tid: i for i, tid in enumerate(order)}


@dataclass
class TaskRows:
    """The rows of each kind: ``inserts`` (new tasks), ``updates`` (tasks a batch learned),
    ``rewrites`` (tasks learned again, the scaling's warm-up), ``remeasures`` (tasks whose
    evidence alone was measured again: their arrays are as stored); for a take-back also
    ``moves`` (tasks whose place or counters alone changed) and ``deletes`` (tasks gone)."""

    inserts: list[dict[str, Any]] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    rewrites: list[dict[str, Any]] = field(default_factory=list)
    remeasures: list[dict[str, Any]] = field(default_factory=list)
    moves: list[dict[str, Any]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)

    def count(self) -> int:
        """How many task rows these are."""
        kinds = (self.inserts, self.updates, self.rewrites, self.remeasures, self.moves, self.deletes)
        return sum(len(k) for k in kinds)


def group_task_rows(name: str, group: Sequence[Prepared], versions: list[int], now: datetime) -> TaskRows:
    """The task rows of the model ``name`` that ``group`` (committed as ``versions``) writes;
    exports the last learner's state of those tasks into ``group[-1].state``."""
    last = group[-1]
    touched: dict[str, dict[str, Any]] = {}  # task id -> what its row gets
    for p, v in zip(group, versions, strict=True):
        t = touched.setdefault(p.task_id, {"n": 0, "new": False})
        t.update(n=t["n"] + 1, version=v, last=p.last_update, n_samples=p.result.n_samples)
        t["new"] = t["new"] or bool(p.result.new_task)
        for tid in p.result.changed_tasks:  # learned again (the scaling's warm-up) or their evidence measured again
            other = touched.setdefault(tid, {"n": 0, "new": False})
            other["version"] = v
            other["arrays"] = other.get("arrays", False) or tid not in p.result.remeasured_tasks
    state = last.learner.get_state(tasks=list(touched))
    last.state = state
    positions = task_positions(state, last.learner) if any(t["new"] for t in touched.values()) else {}
    rows = TaskRows()
    for tid, t in touched.items():
        task = state.tasks[tid]
        if t["new"]:
            rows.inserts.append(
                {
                    "model_name": name,
                    "task_id": tid,
                    "version": t["version"],
                    "n_samples": t["n_samples"],
                    "n_batches": t["n"],
                    "position": positions[tid],
                    "arrays": task["arrays"],
                    "meta": task["meta"],
                    "last_update": t["last"],
                    "created_at": now,
                    "updated_at": now,
                }
            )
        elif t["n"]:
            rows.updates.append(
                {
                    "w_name": name,
                    "w_task": tid,
                    "w_n": t["n"],
                    "version": t["version"],
                    "n_samples": t["n_samples"],
                    "arrays": task["arrays"],
                    "meta": task["meta"],
                    "last_update": t["last"],
                    "updated_at": now,
                }
            )
        elif t["arrays"]:
            rows.rewrites.append(
                {
                    "w_name": name,
                    "w_task": tid,
                    "version": t["version"],
                    "arrays": task["arrays"],
                    "meta": task["meta"],
                    "updated_at": now,
                }
            )
        else:  # its evidence alone measured again: its arrays are as stored
            rows.remeasures.append(
                {
                    "w_name": name,
                    "w_task": tid,
                    "version": t["version"],
                    "meta": task["meta"],
                    "updated_at": now,
                }
            )
    return rows


def _same_arrays(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    """Whether two tasks' arrays are stored as the same bytes: the same names in the same order,
    each of the same dtype and shape and bit for bit equal."""
    if list(a) != list(b):
        return False
    for k, x in a.items():
        x, y = np.asarray(x), np.asarray(b[k])
        if x.dtype.str != y.dtype.str or x.shape != y.shape or x.tobytes() != y.tobytes():
            return False
    return True


def changed_parts(before: core.LifelongLearner, after: core.ModelState, chunk: int = 256) -> dict[str, bool]:
    """The tasks of ``after`` whose row's arrays or meta would be stored otherwise than
    ``before``'s: task id -> whether its arrays differ (True, a new task too) or its meta alone
    (False). The meta is compared as the JSON columns store it (:func:`service.db.json_text`);
    ``before``'s tasks are exported ``chunk`` at a time, never all at once."""
    had = getattr(before, "tasks_", {})
    known = [tid for tid in after.tasks if tid in had]
    out = {tid: True for tid in after.tasks if tid not in had}
    for i in range(0, len(known), chunk):
        old = before.get_state(tasks=known[i : i + chunk]).tasks
        for tid, was in old.items():
            task = after.tasks[tid]
            if not _same_arrays(was["arrays"], task["arrays"]):
                out[tid] = True
            elif json_text(was["meta"]) != json_text(task["meta"]):
                out[tid] = False
    return out


def take_back_task_rows(conn: Connection, name: str, p: PreparedTakeBack, version: int, now: datetime) -> TaskRows:
    """The task rows of the model ``name`` that the take-back ``p`` (committed as ``version``)
    writes, against the stored rows' :data:`COUNTERS` (read in ``conn``'s transaction) and
    ``p.changed``: new tasks inserted, tasks gone deleted, and a stored task rewritten only if
    its arrays (``rewrites``), meta (``remeasures``) or counters (``moves``) change; every
    other row stays as it is."""
    assert p.state is not None and p.changed is not None  # made before the commit
    stored = {r["task_id"]: r for r in conn.execute(_STORED, {"w_name": name}).mappings()}
    positions = task_positions(p.state, p.learner)
    rows = TaskRows(deletes=[tid for tid in stored if tid not in p.state.tasks])
    for tid, task in p.state.tasks.items():
        counters = p.tasks[tid]
        row: dict[str, Any] = {
            "position": positions[tid],
            "n_samples": int(p.learner.tasks_[tid].n_samples),
            "n_batches": int(counters["n_batches"]),
            "last_update": counters["last_update"],
        }
        old = stored.get(tid)
        if old is None:
            rows.inserts.append(
                {
                    "model_name": name,
                    "task_id": tid,
                    "version": version,
                    **row,
                    "arrays": task["arrays"],
                    "meta": task["meta"],
                    "created_at": now,
                    "updated_at": now,
                }
            )
            continue
        arrays = p.changed.get(tid)
        if arrays is None and all(json_text(old[k]) == json_text(row[k]) for k in COUNTERS):
            continue  # stored as it is
        row.update(w_name=name, w_task=tid, version=version, updated_at=now)
        if arrays is None:
            rows.moves.append(row)
        else:
            row["meta"] = task["meta"]
            if arrays:
                row["arrays"] = task["arrays"]
            (rows.rewrites if arrays else rows.remeasures).append(row)
    return rows
