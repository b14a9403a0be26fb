"""What an update or a take-back computed before its commit: :class:`Prepared` (a batch
learned on a private copy of the learner, :func:`service.learning.prepare.prepare`) and
:class:`PreparedTakeBack` (the model rebuilt without a batch, :mod:`service.take_back`). Both
are dataclasses handed from the step that computes to the commit that stores
(:mod:`service.store.writes`), so nothing is stored until the version compare-and-set succeeds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

import core

if TYPE_CHECKING:
    from service.evaluation.scores import Sums


@dataclass
class Prepared:
    """An update computed against ``base_version`` but not yet committed."""

    base_version: int
    task_id: str
    result: core.UpdateResult
    learner: core.LifelongLearner
    #: global part + the tasks the commit rewrites, exported by the commit (None before)
    state: core.ModelState | None
    X: np.ndarray
    y: np.ndarray
    summary: dict[str, Any]  # the model row's summary after this update
    info: dict[str, Any]  # the model row (without arrays) this update was computed from
    last_update: dict[str, Any]  # the engine's result as JSON (the task row's last_update)
    answer: dict[str, Any]  # the body of the update's 200 (fcl3.schemas.UpdateOut)
    #: The batch's prequential sums against the snapshot before it (service.evaluation.scores); None: new task
    prequential: Sums | None = None
    engine_seconds: float = 0.0  # time in the engine's learn()
    prequential_seconds: float = 0.0  # time scoring the batch before it is learned
    #: What the commit did to the evaluation (service.evaluation.jobs.Evaluated), once committed
    evaluated: Any = None
    evaluation_seconds: float = 0.0  # time of the commit's evaluation hook (in its transaction)
    rescore_seconds: float = 0.0  # time rescoring evaluation sets after the commit, off the lock
    lock_held_seconds: float = 0.0  # from the update lock acquired to its release, once committed
    source: str | None = None  # the stored batch's source: "labels" (labels that arrived later); None: posted
    refits_deferred: bool = False  # learned with the stream-level refits left to a later batch (group commit)


@dataclass(frozen=True)
class TakeBackSums:
    """The prequential sums a take-back leaves, added in version order over the scored batches
    still learned up to ``version`` (0: none yet): the model's, and those of the batch's task
    with how many of its batches they hold (:mod:`service.take_back.rebuild`)."""

    version: int = 0
    overall: Sums | None = None
    task: Sums | None = None
    n_task: int = 0


@dataclass
class PreparedTakeBack:
    """A take-back computed against ``base_version`` but not yet committed
    (:mod:`service.take_back`): the model rebuilt without the batch ``batch_version``."""

    base_version: int
    batch_version: int
    task_id: str  # the batch's task
    n_samples: int  # rows taken back
    task_removed: bool  # the batch was its task's only one: the task is gone
    n_replayed: int  # batches replayed to rebuild the model
    learner: core.LifelongLearner
    summary: dict[str, Any]
    tasks: dict[str, dict[str, Any]]  # task id -> {"n_batches", "last_update"} after the replay
    info: dict[str, Any]
    #: The whole rebuilt model (every task: its checkpoint stores them all), exported once the
    #: take-back is brought to the version it commits on (None before:
    #: :func:`service.take_back.rebuild.finished`), not in every round of its catch-up
    state: core.ModelState | None = None
    #: The tasks whose arrays (True) or meta alone (False) differ from those of the version it
    #: was computed against (its snapshot's learner, which is what its task rows store:
    #: :func:`service.store.task_rows.changed_parts`): the commit rewrites those rows' arrays or
    #: meta. Made with :attr:`state` (None before)
    changed: dict[str, bool] | None = None
    replay_seconds: float = 0.0
    checkpoint: int = 0  # the version of the checkpoint the replay started from (0: the start)
    #: the batches replayed (service.models.history.StoredBatch), for the unlearned columns of a catch-up
    others: list[Any] = field(default_factory=list)
    answer: dict[str, Any] | None = None  # the body of the 200 (fcl3.schemas.TakeBackOut), once committed
    rows_written: int = 0  # task rows its commit wrote (inserted, rewritten or deleted), once committed
    #: The sums up to the version replayed, added off the lock; the commit adds the batches after it
    sums: TakeBackSums = field(default_factory=TakeBackSums)

    def answer_at(self, version: int) -> dict[str, Any]:
        task = self.learner.tasks_.get(self.task_id) if not self.task_removed else None
        return {
            "version": version,
            "batch_version": self.batch_version,
            "task_id": self.task_id,
            "n_samples": self.n_samples,
            "task_removed": self.task_removed,
            "task_n_samples": int(task.n_samples) if task is not None else 0,
            "n_replayed": self.n_replayed,
            "n_representatives": int(self.summary.get("n_representatives", 0)),
        }
