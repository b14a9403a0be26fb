"""A label request on its way through the write path (:func:`service.learning.updates.learn_batch`):
its remembered rows loaded under the update lock, encoded from their records when they kept
them, and marked labelled by the batch's commit (:class:`LabelBatch`); and the rows a prediction
remembers (:func:`remember_rows`). What is stored and refused is :mod:`service.labels.remembered`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Connection

from core.preprocessing import as_matrix
from service.evaluation.scores import served_outputs
from service.labels.remembered import Remembered, RememberedCounts, RememberedPredictions
from service.records.rows import RecordsBatch
from service.store.commit import Commit, CommitParticipant
from service.store.prepared import Prepared

if TYPE_CHECKING:
    from service.hosting import HostedModel
    from service.store.reads import Snapshot


@dataclass
class LabelBatch(CommitParticipant[Prepared]):
    """One label request on its way through :func:`service.learning.updates.learn_batch`: loaded under
    the update lock (:meth:`load`), marked labelled by the batch's commit (:meth:`in_commit`)."""

    store: RememberedPredictions
    ids: list[str]
    y: list[float]
    #: The model's schema and column cap (a model with a feature schema), to encode the records.
    records_of: Callable[[list[dict[str, Any]]], RecordsBatch] | None = None
    rows: Remembered | None = field(default=None, init=False)

    def load(
        self,
    ) -> tuple[str, np.ndarray | None, list[float], tuple[np.ndarray, np.ndarray], RecordsBatch | None]:
        """``(task_id, X, y, served outputs, records)`` of the batch (the refusals of
        :meth:`RememberedPredictions.load`): ``records`` of the rows that kept theirs, to be
        encoded under the lock (then :meth:`with_rows`), else ``X``."""
        rows = self.rows = self.store.load(self.ids)
        served = (rows.output, rows.baseline)
        kept = [r for r in rows.records if r is not None]
        if kept and self.records_of is not None:
            return rows.task_id, None, self.y, served, self.records_of(kept)
        return rows.task_id, _padded(rows.X), self.y, served, None

    def with_rows(self, encoded: list[list[float]]) -> np.ndarray:
        """The batch's rows: the encoded records in the places of the rows that kept theirs,
        the stored rows elsewhere (every row as wide as the widest, zeros after its end)."""
        assert self.rows is not None  # loaded
        it = iter(encoded)
        return _padded(
            [
                np.asarray(next(it), dtype=float) if rec is not None else x
                for x, rec in zip(self.rows.X, self.rows.records, strict=True)
            ]
        )

    def in_commit(self, conn: Connection, commit: Commit[Prepared]) -> None:
        self.store.mark_labelled(conn, self.ids, commit.version)


def _padded(rows: Sequence[np.ndarray]) -> np.ndarray:
    """``rows`` as one matrix, each as wide as the widest (zeros after its end: the engine's
    reading of a narrower row, ``grow_features``)."""
    width = max(r.shape[0] for r in rows)
    out = np.zeros((len(rows), width))
    for i, r in enumerate(rows):
        out[i, : r.shape[0]] = r
    return out


def remember_rows(
    model: HostedModel,
    task_id: str,
    X: Any,
    snap: Snapshot,
    ttl: float,
    cap: int,
    records: Sequence[dict[str, Any]] | None = None,
) -> tuple[list[str], RememberedCounts]:
    """Remember rows ``X`` of ``task_id`` just predicted from ``snap`` (and their ``records``):
    their ids, and the model's remembered rows then."""
    learner = snap.learner
    Xm = as_matrix(X, learner.n_features_in_)
    out, base = served_outputs(learner, task_id, Xm)
    return RememberedPredictions(model.reader.engine, model.name).remember(
        task_id, snap.version, Xm, out, base, ttl, cap, records
    )
