"""The online evaluation's figures read back: a model's report (``GET .../evaluation``), one
task's (``GET .../tasks/{task_id}``), the model-wide prequential (``GET .../model``), each in
single statements with no transaction, each setting the gauges it reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Engine

from service import metrics
from service.evaluation import store
from service.evaluation.scores import MATRIX_METRIC, MatrixRow, add_sums, scores, stored, transfer

if TYPE_CHECKING:
    from service.hosting import HostedModel


@dataclass(frozen=True)
class Pages:
    """The parts of ``GET .../evaluation`` a request asks for: the accuracy matrix's rows
    ``matrix_offset`` to ``matrix_offset + matrix_limit`` (in version order), and ``limit``
    points of the prequential series after its ``offset`` latest."""

    limit: int = 100
    offset: int = 0
    matrix_limit: int = 25
    matrix_offset: int = 0


def evaluation_report(model: HostedModel, pages: Pages = Pages()) -> dict[str, Any]:
    """The body of ``GET .../evaluation`` (:class:`fcl3.schemas.EvaluationOut`)."""
    snap = model.reader.snapshot()
    kind = snap.learner.kind
    out = report(model.reader.engine, model.name, kind, snap.version, snap.learner.task_ids, pages)
    if out["backward_transfer"] is not None:
        metrics.BACKWARD_TRANSFER.labels(model.name).set(out["backward_transfer"])
    return out


def task_evaluation(model: HostedModel, task_id: str, kind: str) -> dict[str, Any]:
    """``{"prequential", "evaluation"}`` of one task (cumulative prequential, held-out score)."""
    preq, ev = task_figures(model.reader.engine, model.name, task_id, kind)
    return {"prequential": preq, "evaluation": ev}


def batch_versions(model: HostedModel, task_ids: list[str]) -> dict[str, int]:
    """The version of each task's latest batch (``TaskOut.batch_version``)."""
    with _reads(model.reader.engine).connect() as conn:
        return store.batch_versions(conn, model.name, task_ids)


def model_prequential(model: HostedModel, kind: str) -> dict[str, Any]:
    """The model-wide prequential figures (:class:`fcl3.schemas.ModelPrequential`)."""
    out = model_figures(model.reader.engine, model.name, kind, model.shared.evaluation.window)
    if out["overall"]:
        metrics.set_prequential(model.name, kind, out["overall"])
    return out


def _reads(engine: Engine) -> Engine:
    return engine.execution_options(isolation_level="AUTOCOMMIT")


def task_figures(
    engine: Engine, name: str, task_id: str, kind: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(cumulative prequential, current evaluation score) of one task."""
    with _reads(engine).connect() as conn:
        sums = store.task_sums(conn, name, task_id)
        current = store.current_scores(conn, name)
    ev = (current or {}).get(task_id)
    return scores(stored(kind, sums)), (ev or {}).get("scores")


def model_figures(engine: Engine, name: str, kind: str, window: int) -> dict[str, Any]:
    """The model-wide prequential figures: overall, and over the ``window`` latest scored batches."""
    with _reads(engine).connect() as conn:
        overall = store.overall(conn, name)
        recent = None
        if window > 0:
            for b in store.recent_batches(conn, name, window):
                recent = add_sums(recent, stored(kind, b))
    return {"overall": scores(stored(kind, overall)), "recent": scores(recent), "window": window}


def report(
    engine: Engine, name: str, kind: str, version: int, task_order: list[str], pages: Pages = Pages()
) -> dict[str, Any]:
    """The body of ``GET .../evaluation`` (:class:`fcl3.schemas.EvaluationOut`): the transfer
    figures over the whole accuracy matrix, its rows and the prequential series paged."""
    metric, higher = MATRIX_METRIC[kind]
    with _reads(engine).connect() as conn:
        state = store.state(conn, name)
        sets = store.set_sizes(conn, name)
        mrows = store.matrix_rows(conn, name)
        series = store.series(conn, name, pages.limit, pages.offset)
        n_points = store.series_length(conn, name)
    current = (state["scores"] if state else None) or {}
    order = {t: i for i, t in enumerate(task_order)}
    names = sorted((r.task_id for r in sets), key=lambda t: (t not in order, order.get(t, 0), t))
    tasks = []
    for r in sets:
        ev = current.get(r.task_id) or {}
        tasks.append(
            {
                "task_id": r.task_id,
                "n_rows": int(np.shape(r.y)[0]),
                "n_received": int(r.n_received),
                "learned": r.task_id in order,
                "score": ev.get("scores"),
                "scored_version": ev.get("version"),
            }
        )
    tasks.sort(key=lambda t: names.index(t["task_id"]))
    rows = [MatrixRow.stored(r.task_id, r.matrix) for r in mrows]
    first, last = pages.matrix_offset, pages.matrix_offset + pages.matrix_limit
    matrix_rows = [
        {
            "version": r.version,
            "task_id": r.task_id,
            "scores": [rows[i].scores.get(t) for t in names],
            "baseline": [rows[i].baseline.get(t) for t in names],
        }
        for i, r in enumerate(mrows[first:last], start=first)
    ]
    figures = transfer(names, rows, higher)
    points = [
        {
            "version": r.version,
            "task_id": r.task_id,
            "new_task": bool(r.new_task),
            "batch": scores(stored(kind, r.batch)),
            "overall": scores(stored(kind, r.overall)),
            "source": (r.event or {}).get("source"),
            "taken_back": (r.event or {}).get("taken_back"),
        }
        for r in reversed(series)
    ]
    return {
        "model": name,
        "version": int(state["version"]) if state else version,
        "kind": kind,
        "metric": metric,
        "tasks": tasks,
        "accuracy_matrix": {
            "metric": metric,
            "higher_is_better": higher,
            "tasks": names,
            "rows": matrix_rows,
            "n_rows": len(mrows),
            "offset": first,
        },
        **figures.as_dict(),
        "prequential": points,
        "prequential_total": n_points,
        "prequential_offset": pages.offset,
    }
