"""Response shaping: stored rows -> the API's schemas (pure functions of their arguments), and
a model described as ``GET /model`` answers it (its row and vocabulary, read now)."""

from __future__ import annotations

from typing import Any

from fcl3.schemas import ModelOut, TaskOut
from service.hosting import HostedModel
from service.records.rows import schema_of


def error_example(detail: str, **extra: Any) -> dict[str, Any]:
    """An OpenAPI example of an error body (``{"detail": ..., **extra}``)."""
    return {"application/json": {"example": {"detail": detail, **extra}}}


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
    return ModelOut(
        features=(info.get("settings") or {}).get("features"),
        columns=columns,
        name=info["name"],
        estimator=info["estimator"],
        kind=info["kind"],
        d=d,
        p=code_length(params),
        hyperparameters=params,
        created_with=info["settings"],
        version=info["version"],
        n_tasks=info["n_tasks"],
        n_batches=info["n_batches"],
        n_representatives=summary.get("n_representatives", 0),
        representatives=summary.get("representatives", []),
        created_at=info["created_at"],
        updated_at=info["updated_at"],
        origin=info.get("origin"),
    )


def task_out(row: dict[str, Any], batch_version: int | None = None) -> TaskOut:
    """``GET /tasks/{task_id}`` (and each entry of ``GET /tasks``) from a task row without arrays
    and the version of its latest batch."""
    return TaskOut(
        task_id=row["task_id"],
        n_samples=row["n_samples"],
        n_batches=row["n_batches"],
        version=row["version"],
        batch_version=batch_version,
        labels=(row.get("meta") or {}).get("labels"),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_update=row["last_update"],
    )


def described_model(model: HostedModel) -> ModelOut:
    """``GET /model``'s answer without the prequential scores: the model row and, for a model
    with a schema, its vocabulary (read now)."""
    info = model.reader.model_info()
    columns = None
    if schema_of(info.get("settings")) is not None:
        columns = [c.label() for c in model.vocabulary.refresh()]
    return model_out(info, columns)
