"""``POST .../labels`` and ``GET .../labels``: the rows remembered at a prediction
(:mod:`service.labels`) learned with the labels that arrived later, as one batch of their task
through the ordinary write path (:func:`service.learning.updates.learn_batch`), and the summary of the
rows still waiting.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from service.writing.idempotent import once
from service.labels.remembered import LabelBatch, RememberedPredictions, labels_hash
from service.learning.updates import learn_batch, update_answer

if TYPE_CHECKING:
    from service.hosting import HostedModel


def label(model: HostedModel, ids: list[str], y: list[float], key: str | None = None) -> tuple[dict[str, Any], bool]:
    """Learn the remembered rows ``ids`` with their labels ``y`` as one batch of their task
    (:mod:`service.labels`; at most once per ``key`` when given): the answer
    (:class:`fcl3.schemas.UpdateOut`) and whether it is a replay."""
    batch = LabelBatch(RememberedPredictions(model.reader.engine, model.name), list(ids), list(y))
    if key is None:
        prepared, version = learn_batch(model, "", None, None, labels=batch)
        return update_answer(prepared, version), False
    return once(model, key, labels_hash(ids, y), lambda claim: learn_batch(model, "", None, None, claim, batch))


def labels_summary(model: HostedModel) -> dict[str, Any]:
    """The body of ``GET .../labels`` (:class:`fcl3.schemas.LabelsOut`)."""
    version = model.reader.require()
    return RememberedPredictions(model.reader.engine, model.name).summary(version)
