"""The task rows a group commit writes (:meth:`service.store.writes.ModelWriter.commit_group`):
each task the group touched once, with the last learner's state and the counters of every batch
of it; each kind of row (new, learned again, rewritten, re-measured) in one statement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import core
from service.store.prepared import Prepared


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
    evidence alone was measured again: their arrays are as stored)."""

    inserts: list[dict[str, Any]] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    rewrites: list[dict[str, Any]] = field(default_factory=list)
    remeasures: list[dict[str, Any]] = field(default_factory=list)


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
