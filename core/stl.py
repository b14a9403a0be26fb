"""Single-task learning (STL): every task alone, the baseline of the paper's Table 2."""
from __future__ import annotations

import numpy as np

from .base import LifelongLearner, TaskRecord, UpdateResult
from .params import BASE_CONSTRAINTS, validate_params


class STL(LifelongLearner):
    """Each task's model is its own single-task fit ``w_t``; nothing is shared.

    It uses the same single-task learner (and so the same ``mu``, scaling and bias handling)
    as every lifelong model, so differences in the benchmark come from sharing alone.
    """

    #: The range of every hyper-parameter (:mod:`core.params`).
    _parameter_constraints = dict(BASE_CONSTRAINTS)

    def _check_params(self) -> None:
        validate_params(self)

    def _update(self, task_id: str, record: TaskRecord, previous: TaskRecord | None) -> UpdateResult:
        self.tasks_ = self.tasks_.set(task_id, record)
        return UpdateResult(task_id=task_id, n_samples=record.n_samples, new_task=previous is None)

    def _theta(self, task_id: str) -> np.ndarray:
        return self.tasks_[task_id].w
