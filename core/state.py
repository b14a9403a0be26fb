"""A learner's exportable state and the per-task data it keeps.

:class:`ModelState` is the whole model as JSON-able settings plus named numpy arrays (never
pickle); :func:`core.registry.load_state` rebuilds the learner it came from, bit for bit. The task-data
containers are what a learner keeps of a task's rows: :class:`SquaredLossMoments` (exact
sufficient statistics, regression) or :class:`TaskRows` (the rows, classification).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np


#: Bumped whenever the meaning or names of exported arrays change. Format 3 keeps a
#: regression task as its sufficient statistics ``X'X``, ``X'y``, ``y'y``, ``n`` and a
#: classification task as its rows. Older states still load: format-1 rows are summarised on
#: load; a regression task from format 1 or 2 has no ``y'y``, which no later batch can
#: restore, so it keeps predicting with the library's model (:attr:`SquaredLossMoments.yy`).
STATE_FORMAT_VERSION = 3
READABLE_FORMAT_VERSIONS = (1, 2, 3)


@dataclass(frozen=True)
class TaskRows:
    """A classification task's rows, raw as sent, with 0/1 targets; ``n`` rows seen in all.

    Logistic loss has no finite summary: refitting ``w_t`` after a new batch, and FCL3's
    half-Hessians ``Omega_k^t`` at other points ``D s_k``, need the rows. All of them are
    kept unless the learner's ``max_task_rows`` caps them, in which case these are a uniform
    random sample of the ``n`` seen (a reservoir): every loss here is a *mean* over rows, so
    the sample's mean loss is an unbiased estimate of the mean over all rows.
    """

    X: np.ndarray
    y: np.ndarray
    n: int

    @property
    def n_samples(self) -> int:
        return int(self.n)

    def merged(self, later: "TaskRows", max_rows: int | None = None,
               rng: np.random.Generator | None = None) -> "TaskRows":
        """These rows followed by ``later``'s, reservoir-sampled down to ``max_rows``.

        Algorithm R (Vitter 1985): the ``j``-th row seen (0-based) enters a full reservoir
        with probability ``max_rows / (j + 1)``, replacing a uniformly chosen slot, which
        leaves every row seen so far in the sample with the same probability.
        """
        n = self.n + later.n
        if max_rows is None or self.X.shape[0] + later.X.shape[0] <= max_rows:
            return TaskRows(np.vstack([self.X, later.X]), np.concatenate([self.y, later.y]), n)
        free = max(max_rows - self.X.shape[0], 0)  # slots still empty (the reservoir fills first)
        X = np.vstack([self.X, later.X[:free]])
        y = np.concatenate([self.y, later.y[:free]])
        seen = self.n + free + np.arange(later.X.shape[0] - free)  # index j of each remaining row
        slots = rng.integers(0, seen + 1)
        for i in np.flatnonzero(slots < max_rows):  # in order: a later row wins a slot
            X[slots[i]] = later.X[free + i]
            y[slots[i]] = later.y[free + i]
        return TaskRows(X, y, n)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"X": self.X, "y": self.y, "n": np.array(self.n, dtype=np.int64)}


@dataclass(frozen=True)
class SquaredLossMoments:
    """A regression task's exact sufficient statistics, in the learner's scaled space.

    Squared loss sees the rows only through ``X'X``, ``X'y``, ``y'y`` and ``n`` (``X`` scaled,
    bias column last; ``y`` scaled), so these refit ``w_t`` and ``Omega_t`` exactly and give the
    task's evidence (:mod:`core.evidence`) while their size, ``(d+1)^2``, does not grow with
    the rows learned: a long-lived regression stream keeps constant memory per task. Valid
    because the scaler is frozen after the first batch. ``yy`` is NaN for a task loaded from a
    state older than format 3, which did not keep it; the sum stays NaN.
    """

    n: int
    gram: np.ndarray  # X'X
    moment: np.ndarray  # X'y
    yy: float = float("nan")  # y'y

    @property
    def n_samples(self) -> int:
        return int(self.n)

    def merged(self, later: "SquaredLossMoments") -> "SquaredLossMoments":
        return SquaredLossMoments(self.n + later.n, self.gram + later.gram, self.moment + later.moment,
                                  self.yy + later.yy)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"gram": self.gram, "moment": self.moment, "yy": np.array(self.yy, dtype=float),
                "n": np.array(self.n, dtype=np.int64)}


TaskData = TaskRows | SquaredLossMoments


@dataclass
class TaskRecord:
    """Everything the learner keeps about one task; arrays are replaced, never mutated."""

    data: TaskData  # what the single-task fit needs of the rows learned so far
    labels: str = "none"  # "01", "pm1" or "unknown" (only positives seen) for classification
    w: np.ndarray | None = None  # single-task fit (scaled space, bias last)
    omega: np.ndarray | None = None  # half-Hessian at w
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # learner-specific (code, Z, ...)
    meta: dict[str, Any] = field(default_factory=dict)  # learner-specific JSON-able values

    @property
    def n_samples(self) -> int:
        return self.data.n_samples


@dataclass
class ModelState:
    """A learner's complete state: JSON-able settings and named arrays, split per task.

    ``arrays`` holds the global learned arrays; ``tasks[task_id]`` holds one task's arrays
    and JSON-able ``meta``. A store may persist tasks separately and rewrite only the task an
    update touched (the :class:`UpdateResult` names it) plus the global part.
    """

    estimator: str
    params: dict[str, Any]
    meta: dict[str, Any]
    arrays: dict[str, np.ndarray]
    tasks: dict[str, dict[str, Any]]
    format_version: int = STATE_FORMAT_VERSION


def check_format(state: ModelState) -> None:
    """Raise :class:`ValueError` for a state written in a format this version cannot read."""
    if state.format_version not in READABLE_FORMAT_VERSIONS:
        raise ValueError(
            f"state format {state.format_version} is not supported (this version reads {READABLE_FORMAT_VERSIONS})"
        )


#: The types a JSON-able value's leaves have that are immutable: shared, never copied.
_IMMUTABLE_LEAVES = frozenset({float, int, str, bool, type(None)})


def copy_meta(value: Any) -> Any:
    """A deep copy of a JSON-able value (a learner's meta, settings or stream choice): its dicts
    and lists are new, its numbers and strings shared (immutable); anything else goes to
    :func:`copy.deepcopy`. Equal to what ``copy.deepcopy`` gives, at a quarter of its cost
    (``copy.deepcopy`` dispatches and memoises every number of the evidence curves, hundreds
    in a task's meta)."""
    t = type(value)
    if t is dict:
        return {k: copy_meta(v) for k, v in value.items()}
    if t is list:
        return [v if type(v) in _IMMUTABLE_LEAVES else copy_meta(v) for v in value]
    if t in _IMMUTABLE_LEAVES:
        return value
    return copy.deepcopy(value)
