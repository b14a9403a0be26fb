"""Labels that arrive later, as requests take them: a prediction that remembers its rows
(``POST .../predict`` with ``"remember": true``), ``POST .../labels`` (the remembered rows
learned with their labels as one batch of their task, through the ordinary write path:
:func:`service.learning.updates.learn_batch`) and ``GET .../labels`` (the rows still waiting).
What is stored and refused is :mod:`service.labels.remembered`'s; a label request in the write
path, :mod:`service.labels.batch`'s.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from service import metrics
from service.labels.batch import LabelBatch, remember_rows
from service.labels.remembered import RememberedPredictions, labels_hash
from service.learning.predictions import predict
from service.learning.updates import learn_batch
from service.records.rows import records_batch, settings_of
from service.writing import idempotent
from service.writing.idempotency import Replayed

if TYPE_CHECKING:
    from service.hosting import HostedModel
    from service.store.reads import Snapshot

# "service.store": the logger name is part of each of its log lines (their "logger" field).
log = logging.getLogger("service.store")


def predict_remembered(
    model: HostedModel,
    task_id: str,
    X: Any,
    min_version: int | None,
    snap: Snapshot | None,
    ttl: float,
    cap: int,
    records: list[dict[str, Any]] | None = None,
) -> tuple[list[float], list[float] | None, int, list[str]]:
    """:func:`service.learning.predictions.predict`, and the rows remembered for a label that
    arrives later (with their ``records``, when given): their prediction ids too, in row order."""
    if snap is None:
        snap = model.reader.snapshot(min_version, task=task_id)
    preds, probs, version = predict(model, task_id, X, min_version, snap)
    ids, counts = remember_rows(model, task_id, X, snap, ttl, cap, records)
    metrics.set_remembered(model.name, counts.pending, counts.done)
    log.info(
        "predictions remembered",
        extra={
            "event": "predictions_remembered",
            "model": model.name,
            "task": task_id,
            "version": version,
            "n_rows": len(ids),
        },
    )
    return preds, probs, version, ids


def label(
    model: HostedModel, ids: list[str], y: list[float], max_columns: int, key: str | None = None
) -> tuple[dict[str, Any], bool]:
    """Learn the remembered rows ``ids`` with their labels ``y`` as one batch of their task (at
    most once per ``key`` when given): the answer (:class:`fcl3.schemas.UpdateOut`) and whether
    it is a replay. Rows that kept their record are encoded from it (``max_columns``: the
    service's ``MAX_COLUMNS``)."""
    settings = settings_of(model) or {}
    records_of = (
        (lambda kept: records_batch(model.name, settings, kept, max_columns)) if settings.get("features") else None
    )
    batch = LabelBatch(RememberedPredictions(model.reader.engine, model.name), list(ids), list(y), records_of)
    try:
        with idempotent.claimed(model, key, lambda: labels_hash(ids, y)) as claim:
            prepared, _ = learn_batch(model, "", None, None, claim, batch)
    except Replayed as replay:
        return idempotent.replayed(model, replay), True
    return prepared.answer, False


def labels_summary(model: HostedModel) -> dict[str, Any]:
    """The body of ``GET .../labels`` (:class:`fcl3.schemas.LabelsOut`)."""
    version = model.reader.require()
    return RememberedPredictions(model.reader.engine, model.name).summary(version)
