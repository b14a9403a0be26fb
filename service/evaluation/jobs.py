"""The contracts of the online evaluation, between the commit that starts its work and what
runs after it: the evaluation sets (:class:`EvaluationSet`), the sets to rescore just after
a commit (:class:`RescoreJob`), an accuracy-matrix row to compute in the background
(:class:`MatrixJob`) and what the commit did to the evaluation (:class:`Evaluated`, read by
the update's answer, log line and gauges). Dataclasses only: who makes them is
:mod:`service.evaluation`, who runs them :mod:`service.evaluation` (rescoring) and
:mod:`service.evaluation.matrix` (matrix rows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

import core
from service.evaluation.scores import Transfer


@dataclass
class EvaluationSet:
    X: np.ndarray
    y: np.ndarray
    n_received: int


@dataclass
class RescoreJob:
    """Evaluation sets to rescore just after an update's commit, off the update lock: the
    learner of ``version`` (immutable: the snapshot the commit served) on ``sets``."""

    version: int
    created: Any  # the model's created_at (its identity)
    learner: core.LifelongLearner
    sets: dict[str, EvaluationSet]


@dataclass
class MatrixJob:
    """An accuracy-matrix row to compute: the learner of ``version`` (immutable: a served
    snapshot) on the evaluation sets of the tasks it had learned."""

    version: int
    task_id: str
    created: Any  # the model's created_at (its identity)
    learner: core.LifelongLearner
    sets: dict[str, EvaluationSet]
    #: Rows of earlier versions to compute first: a due row whose process died.
    also: list[MatrixJob] = field(default_factory=list)
    #: A row recovered by a later update: skipped if another process stored it meanwhile.
    recovered: bool = False


@dataclass(frozen=True)
class Evaluated:
    """What an update's commit did to the model's evaluation."""

    event: dict[str, Any]  # the update event's body (fcl3.schemas.UpdateEvent)
    evaluation: dict[str, Any] | None  # the evaluation event's body; None: no evaluation sets
    overall: dict[str, Any] | None  # the model-wide prequential scores after it
    transfer: Transfer
    rescored: int  # evaluation sets chosen for rescoring
    matrix_job: MatrixJob | None
    rescore_job: RescoreJob | None
