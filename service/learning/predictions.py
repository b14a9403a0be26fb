"""Predict with a hosted model: the served version's predictions (never waiting for the update
lock), counted (``fcl3_prediction_requests_total``, ``fcl3_predictions_total``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import core
from service import metrics

if TYPE_CHECKING:
    from service.hosting import HostedModel
    from service.store.reads import Snapshot


def predict(
    model: HostedModel, task_id: str, X: Any, min_version: int | None = None, snap: Snapshot | None = None
) -> tuple[list[float], list[float] | None, int]:
    """Predictions of the served version, at least ``min_version``, or of ``snap`` (a snapshot
    :meth:`service.store.reads.ModelReader.fresh` just returned), and the version that made them.
    :class:`service.store.reads.VersionBehind` (409) when the stored model is below ``min_version``."""
    try:
        preds, probs, version = model.reader.predict(task_id, X, min_version, snap)
    except core.UnknownTaskError:
        raise core.UnknownTaskError(f"unknown task {task_id!r}: model {model.name!r} has not learned it") from None
    finally:
        model.observe()
    metrics.PREDICTION_REQUESTS.inc()
    metrics.PREDICTIONS.inc(len(preds))
    return preds, probs, version
