"""Response shaping: engine results and stored rows -> the API's JSON and schemas.

Pure functions of their arguments: no database, no cache, no metrics.
"""
from __future__ import annotations

from typing import Any

import numpy as np

import core

from fcl3.schemas import ModelOut, TaskOut


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


def code_length(hyperparameters: dict[str, Any]) -> int | None:
    """``p``, the length of a task's code: the estimator's ``n_components`` hyper-parameter
    when it has one, else None (a learner without a shared library, e.g. STL)."""
    p = hyperparameters.get("n_components")
    return None if p is None else int(p)


def model_out(info: dict[str, Any], columns: list[str] | None = None) -> ModelOut:
    """``GET /model`` from the model row (without arrays) and its task and batch counts;
    ``columns``: the labels of its vocabulary (a model with a feature schema)."""
    summary = info.get("summary") or {}
    params = info["params"]
    d = (info.get("meta") or {}).get("n_features") or (info.get("settings") or {}).get("d")
    return ModelOut(features=(info.get("settings") or {}).get("features"), columns=columns,
        name=info["name"], estimator=info["estimator"], kind=info["kind"], d=d, p=code_length(params),
        hyperparameters=params, created_with=info["settings"], version=info["version"], n_tasks=info["n_tasks"],
        n_batches=info["n_batches"], n_representatives=summary.get("n_representatives", 0),
        representatives=summary.get("representatives", []),
        created_at=info["created_at"], updated_at=info["updated_at"], origin=info.get("origin"))


def task_out(row: dict[str, Any]) -> TaskOut:
    """``GET /tasks/{task_id}`` (and each entry of ``GET /tasks``) from a task row without arrays."""
    return TaskOut(task_id=row["task_id"], n_samples=row["n_samples"], n_batches=row["n_batches"],
                   version=row["version"], labels=(row.get("meta") or {}).get("labels"),
                   created_at=row["created_at"], updated_at=row["updated_at"], last_update=row["last_update"])
