"""An engine's results as the JSON a model's rows keep: an update's result (a task row's
``last_update``, the core of an update's answer) and a learner's summary (its representatives)."""

from __future__ import annotations

from typing import Any

import numpy as np

import core


def result_json(result: core.UpdateResult) -> dict[str, Any]:
    """An UpdateResult as JSON (the update's answer, and a task row's ``last_update``): the
    assignment names the representative behind each entry, the outlier slot comes last."""
    assignment = None
    if result.assignment is not None:
        weights = np.asarray(result.assignment, dtype=float).tolist()
        names = list(result.assignment_tasks)
        assignment = [
            {"representative": names[i] if i < len(names) else None, "outlier": False, "weight": weights[i]}
            for i in range(len(weights) - 1)
        ]
        assignment.append({"representative": None, "outlier": True, "weight": weights[-1]})
    return {
        "task_id": result.task_id,
        "n_samples": int(result.n_samples),
        "new_task": bool(result.new_task),
        "code": None if result.code is None else np.asarray(result.code, dtype=float).tolist(),
        "assignment": assignment,
        "outlier_probability": None if result.outlier_probability is None else float(result.outlier_probability),
        "new_representative": bool(result.new_representative),
        "n_representatives": int(result.n_representatives),
    }


def learner_summary(learner: core.LifelongLearner) -> dict[str, Any]:
    """A model row's summary from a learner alone (a new, imported or forked model)."""
    reps = getattr(learner, "representatives", None)
    if reps is None or callable(reps):
        reps = getattr(learner, "representatives_", None) or []
    return {"representatives": [str(r) for r in reps], "n_representatives": len(reps)}


def representatives(learner: core.LifelongLearner, previous: list[str], result: core.UpdateResult) -> list[str]:
    """Representative task ids, from the learner if it says, else from the update results."""
    reps = getattr(learner, "representatives", None)
    if reps is not None and not callable(reps):
        return [str(r) for r in reps]
    reps = list(result.assignment_tasks) if result.assignment_tasks else list(previous)
    if result.new_representative and result.task_id not in reps:
        reps.append(result.task_id)
    return reps


#: The key of a model row's summary listing the columns no learned batch holds anything in
#: (a level that only a batch taken back brought, :mod:`service.take_back`): such a level is
#: encoded and reported as unseen until a batch holds it again (:mod:`service.learning.prepare`).
UNLEARNED = "unlearned_columns"
