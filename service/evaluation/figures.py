"""The online evaluation as the routes use it: evaluation rows posted under the update lock,
and the figures read back (the model's report, one task's, the model-wide prequential), each
setting the gauges it reads. How the figures are made is :mod:`service.evaluation`'s, their SQL
reads :mod:`service.evaluation.figures`'.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from service.evaluation import reads
from service import metrics
from service.models.lifecycle import current_for_write

if TYPE_CHECKING:
    from service.hosting import HostedModel

# "service.store": the logger name is part of each of its log lines (their "logger" field).
log = logging.getLogger("service.store")


def add_evaluation_rows(model: HostedModel, task_id: str, X, y) -> dict[str, Any]:
    """Store labelled rows as ``task_id``'s evaluation set (never learned: the model's version
    and the task's samples do not move), scored at once if the task is learned. Under the
    model's update lock (:class:`service.writing.locks.LockBusy`: 503), checked like a batch
    (``InputError``: 422, nothing stored). Returns the body of
    :class:`fcl3.schemas.EvaluationRowsOut`."""
    with model.locks.hold(model.name):
        snap = current_for_write(model)
        d = (snap.info.get("settings") or {}).get("d")
        out = model.evaluation.add_rows(snap, task_id, X, y, d)
    log.info("evaluation rows stored", extra={"event": "evaluation_rows", "model": model.name, "task": task_id,
                                              "n_rows": out["n_rows"], "n_received": out["n_received"]})
    model.wake()
    return out


def evaluation_report(model: HostedModel, limit: int = 1000) -> dict[str, Any]:
    """The body of ``GET .../evaluation`` (:class:`fcl3.schemas.EvaluationOut`)."""
    snap = model.reader.snapshot()
    kind = snap.learner.kind
    out = reads.report(model.reader.engine, model.name, kind, snap.version, snap.learner.task_ids, limit)
    if out["backward_transfer"] is not None:
        metrics.BACKWARD_TRANSFER.labels(model.name).set(out["backward_transfer"])
    return out


def task_evaluation(model: HostedModel, task_id: str, kind: str) -> dict[str, Any]:
    """``{"prequential", "evaluation"}`` of one task (cumulative prequential, held-out score)."""
    preq, ev = reads.task_figures(model.reader.engine, model.name, task_id, kind)
    return {"prequential": preq, "evaluation": ev}


def model_prequential(model: HostedModel, kind: str) -> dict[str, Any]:
    """The model-wide prequential figures (:class:`fcl3.schemas.ModelPrequential`)."""
    out = reads.model_figures(model.reader.engine, model.name, kind, model.shared.evaluation.window)
    if out["overall"]:
        metrics.set_prequential(model.name, kind, out["overall"])
    return out
