"""The online-learner API every model in :mod:`core` implements.

Modelled on scikit-learn and River: hyper-parameters are explicit ``__init__`` arguments
stored unchanged, ``__init__`` does no work, learned attributes end in ``_``. One object holds
the whole model; :meth:`LifelongLearner.learn` takes one labelled batch of one task (new or
already seen) and returns an :class:`UpdateResult`; :meth:`predict` works for every learned
task; :meth:`get_state` / :func:`core.load_state` export and restore the model exactly as named
numpy arrays plus JSON-able settings (never pickle).

An update is transactional: learned arrays are replaced, never mutated in place, so a batch
that fails half-way (bad input, a solver error) is rolled back by restoring references.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import zlib
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .exceptions import InputError, UnknownTaskError
from .losses import KINDS, curvature_scale, fit_single_task, fit_squared_from_moments, sigmoid
from .preprocessing import SCALER_WARMUP_ROWS, Scaler, as_matrix, as_targets, label_convention
from .state import ModelState, SquaredLossMoments, TaskData, TaskRecord, TaskRows, check_format, copy_meta
from .task_map import TaskMap
from .task_models import EmpiricalBayesTaskModels


def pad_square(M: np.ndarray, at: int, k: int, diagonal: float = 0.0) -> np.ndarray:
    """A new square matrix: ``M`` with ``k`` zero rows and columns inserted before index ``at``
    and ``diagonal`` on the new diagonal entries."""
    out = np.insert(np.insert(M, [at] * k, 0.0, axis=0), [at] * k, 0.0, axis=1)
    out[np.arange(at, at + k), np.arange(at, at + k)] = diagonal
    return out


#: ``task_models`` values: every task's own empirical-Bayes model, or the paper's rule.
TASK_MODELS = ("empirical_bayes", "paper")



@functools.cache
def _init_parameters(cls: type) -> tuple[str, ...]:
    """The ``__init__`` parameters of ``cls`` and its bases, in order (read once per class:
    :meth:`LifelongLearner.learn` checks the parameters at every batch)."""
    names: list[str] = []
    for klass in cls.__mro__:
        if klass is object:
            continue
        for name, p in inspect.signature(klass.__init__).parameters.items():
            if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name not in names:
                names.append(name)
    return tuple(names)


@dataclass(frozen=True)
class UpdateResult:
    """What one update did. Learners without codes or clusters leave those fields ``None``."""

    task_id: str
    n_samples: int
    new_task: bool
    code: np.ndarray | None = None
    assignment: np.ndarray | None = None
    assignment_tasks: tuple[str, ...] = ()
    outlier_probability: float | None = None
    new_representative: bool = False
    n_representatives: int = 0
    #: Other tasks whose stored record the update changed (learned again in the scaling's
    #: warm-up, or their evidence measured again): a store that keeps tasks apart writes them too.
    changed_tasks: tuple[str, ...] = ()
    #: Of ``changed_tasks``, those whose evidence alone was measured again: their ``meta``
    #: changed and their arrays did not, so such a store writes their meta alone.
    remeasured_tasks: tuple[str, ...] = ()


class LifelongLearner(EmpiricalBayesTaskModels):
    """Base class: input checks, task bookkeeping, scaling, prediction, state export.

    Subclasses implement :meth:`_update` (learn the task whose record was just extended)
    and :meth:`_theta` (the task's current parameters), and list their global learned
    attributes in ``_state_attrs``.

    Parameters shared by every learner: ``kind`` ("regression" or "classification"); ``mu``,
    the single-task ridge (relative to the loss curvature, see :mod:`core.losses`);
    ``standardize``, scale features (and regression targets) with first-batch statistics;
    ``random_state``; ``max_task_rows``: ``None`` keeps every row of a classification task
    (exact refits, memory growing with the data), an integer keeps a uniform random sample
    of that many (:class:`TaskRows`). Regression tasks are exact sufficient statistics
    (:class:`SquaredLossMoments`) either way. ``task_models``: ``"empirical_bayes"`` (default)
    predicts every task with its posterior mean under a prior built from the learned library
    without that task, the prior's strength and family chosen by the evidence
    (:mod:`core.evidence`); ``"paper"`` predicts with the learner's own rule (FCL3: ``D s_t``;
    ELLA: ``L s_t``; STL: the ridge fit with ``mu``). ``grow_features``: ``False`` (default)
    refuses a batch of another width than the first; ``True`` lets a wider batch append
    feature columns at the end (:meth:`add_features`: each enters every stored task with
    weight 0, the stored statistics padded exactly) and predicts rows wider than the model
    with the columns it never learned at weight 0.
    """

    _state_attrs: ClassVar[tuple[str, ...]] = ()  # global learned arrays
    _meta_attrs: ClassVar[tuple[str, ...]] = ()  # global learned JSON-able values

    def __init__(self, kind: str = "regression", mu: float = 0.1, standardize: bool = True, random_state: int = 0,
                 max_task_rows: int | None = None, task_models: str = "empirical_bayes",
                 grow_features: bool = False):
        self.kind = kind
        self.mu = mu
        self.standardize = standardize
        self.random_state = random_state
        self.max_task_rows = max_task_rows
        self.task_models = task_models
        self.grow_features = grow_features

    # ----------------------------------------------------------------- parameters
    @classmethod
    def _param_names(cls) -> list[str]:
        return list(_init_parameters(cls))

    def get_params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._param_names()}

    def check_params(self) -> None:
        """Raise :class:`InputError` for a bad hyper-parameter. :meth:`learn` calls it before
        any work; a service calls it at start-up, so a bad setting never reaches a client."""
        self._check_params()

    def _check_params(self) -> None:
        if self.kind not in KINDS:
            raise InputError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if not (np.isfinite(self.mu) and self.mu >= 0):
            raise InputError(f"mu must be a finite number >= 0, got {self.mu!r}")
        cap = self.max_task_rows
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 1):
            raise InputError(f"max_task_rows must be None or an integer >= 1, got {cap!r}")
        if self.task_models not in TASK_MODELS:
            raise InputError(f"task_models must be one of {TASK_MODELS}, got {self.task_models!r}")

    # ----------------------------------------------------------------- learned state
    @property
    def is_fitted(self) -> bool:
        return getattr(self, "scaler_", None) is not None

    def _init_learned(self, n_features: int) -> None:
        """Called once, on the first batch; subclasses extend it to create their arrays."""
        self.n_features_in_ = n_features
        self.tasks_: TaskMap[TaskRecord] = TaskMap()
        self.stream_choice_: dict[str, Any] | None = None
        self.evidence_cursor_ = 0
        self.evidence_due_: tuple[str, ...] = ()

    @property
    def task_ids(self) -> list[str]:
        return list(getattr(self, "tasks_", {}).keys())

    def _record(self, task_id: str) -> TaskRecord:
        tasks = getattr(self, "tasks_", {})
        if task_id not in tasks:
            raise UnknownTaskError(f"unknown task {task_id!r}: the model has not learned it")
        return tasks[task_id]

    # ----------------------------------------------------------------- learning
    def check_size(self, n_features: int) -> None:
        """:class:`InputError` when a model of ``n_features`` features would be too large to
        update in bounded time and memory (checked on the first batch; a service may call it
        when a model's number of features is known at creation). Nothing is too large here."""

    def learn(self, task_id: str, X, y, defer_refits: bool = False) -> UpdateResult:
        """Learn one labelled batch of task ``task_id`` (appended if the task is known).

        ``defer_refits``: the stream-level estimates over every task (the population, the
        stream's family and its priors over ``omega``) are not refitted by this batch, nor is
        another task's evidence, which only the family's choice reads, measured again; nor is
        this task's own evidence when it has some already (a new task's is measured: its
        predictions need one), which is left due. The next batch learned without it measures
        every due task's evidence (against the library and population without that task, as
        then learned) and refits the estimates if they are due by then (their schedules count
        every batch, deferred or not). For a group of batches learned one after another, where
        only the estimates after the last batch are kept: the group pays for one refit and one
        measurement per task it learned, however many of its batches that task had.

        Raises :class:`InputError` for a bad batch, leaving the model exactly as it was.
        """
        self._check_params()
        if not isinstance(task_id, str) or not task_id:
            raise InputError("task_id must be a non-empty string")
        n_features = getattr(self, "n_features_in_", None)
        X = self._as_rows(X, n_features)
        wider = self.is_fitted and X.shape[1] > n_features
        if not self.is_fitted or wider:
            self.check_size(X.shape[1])
        y = as_targets(y, X.shape[0], self.kind)
        known = task_id in getattr(self, "tasks_", {})
        previous = self.tasks_[task_id] if known else None
        labels = "none"
        if self.kind == "classification":
            labels = label_convention(y, previous.labels if previous else "unknown")
        snapshot = self._snapshot()
        try:
            if wider:
                self._add_features(X.shape[1] - n_features)
            if not self.is_fitted:
                self._init_learned(X.shape[1])
                y01 = (y == 1.0).astype(float) if self.kind == "classification" else y
                self.scaler_ = Scaler.fit(X, y01, self.kind, self.standardize)
                self.scaler_rows_ = 0
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # checked below
                batch = self._summarise(X, y)
                fitted_on = int(getattr(self, "scaler_rows_", SCALER_WARMUP_ROWS))
                rows = 0
                if self.standardize and fitted_on < SCALER_WARMUP_ROWS:
                    rows = sum(r.n_samples for r in self.tasks_.values()) + X.shape[0]
                if rows and (rows >= 2 * fitted_on or rows >= SCALER_WARMUP_ROWS):
                    result = self._learn_with_refitted_scaling(task_id, batch, labels, rows)
                else:
                    result = self._learn_batch(task_id, batch, labels, defer_refits)
            self._check_finite(task_id)
        except (np.linalg.LinAlgError, ArithmeticError) as exc:
            # finite input whose scale breaks the arithmetic (values ~1e16 and beyond): the
            # solvers raise FloatingPointError where they meet non-finite values
            self._restore(snapshot)
            raise InputError(
                f"this batch could not be learned: numerical failure ({type(exc).__name__}); "
                "check the scale of its values. Nothing was changed") from None
        except BaseException:
            self._restore(snapshot)
            raise
        self._forget_derived()  # the task models follow the new library
        return result

    def _as_rows(self, X, n_features: int | None) -> np.ndarray:
        """``X`` checked as a matrix of ``n_features`` columns; when the learner grows
        (``grow_features``) and has learned its first batch, of any width: a row narrower than
        the model holds 0 in the columns it lacks (appended), a wider one has new columns."""
        if not (self.grow_features and self.is_fitted):
            return as_matrix(X, n_features)
        X = as_matrix(X, None)
        if X.shape[1] < n_features:
            X = np.hstack([X, np.zeros((X.shape[0], n_features - X.shape[1]))])
        return X

    # ----------------------------------------------------------------- new feature columns
    def add_features(self, n_new: int) -> None:
        """Append ``n_new`` feature columns (``grow_features``; :meth:`learn` calls it for a
        wider batch). A new column enters the model as if every row learned so far had held 0
        in it: the scaling gets mean 0 and scale 1 for it (what it fits on an all-zero
        column), each stored task's statistics (``X'X``, ``X'y``; or its rows) are padded with
        those zeros, its single-task fit ``w_t`` gets weight 0 there (exact: a column of zeros
        decouples from the others under the ridge) and its half-Hessian ``Omega_t`` the ridge
        ``mu`` on the new diagonal; subclasses pad their shared statistics the same way
        (:meth:`_grow_global`). Every stored task's model gets weight 0 on the new columns and
        keeps its other weights, so no stored task's predictions change. Transactional."""
        if not self.is_fitted:
            raise InputError("a model grows only once it has learned its first batch")
        if isinstance(n_new, bool) or not isinstance(n_new, (int, np.integer)) or n_new < 1:
            raise InputError(f"n_new must be an integer >= 1, got {n_new!r}")
        self.check_size(int(self.n_features_in_) + int(n_new))
        snapshot = self._snapshot()
        try:
            self._add_features(int(n_new))
        except BaseException:
            self._restore(snapshot)
            raise
        self._forget_derived()

    def _zero_columns(self, record: TaskRecord) -> np.ndarray:
        """Which features are zero in every row of the task, in the scaled space."""
        data = record.data
        if isinstance(data, SquaredLossMoments):
            return np.diag(data.gram)[:-1] == 0.0
        return np.all(self.scaler_.design(data.X)[:, :-1] == 0.0, axis=0)

    def _ridge_of(self, record: TaskRecord) -> float:
        """The absolute ridge of a task's single-task fit on a (non-bias) coordinate."""
        if isinstance(record.data, SquaredLossMoments):
            return float(self.mu)
        return float(self.mu * curvature_scale(self.kind, record.data.X, record.data.y))

    def _add_features(self, k: int) -> None:
        """:meth:`add_features` without its checks; replaces attributes, never writes into them."""
        d0 = int(self.n_features_in_)
        old = self.scaler_
        self.scaler_ = Scaler(np.concatenate([old.x_mean, np.zeros(k)]), np.concatenate([old.x_scale, np.ones(k)]),
                              old.y_mean, old.y_scale)
        records = dict(self.tasks_)
        grown = {tid: self._grown_record(r, d0, k) for tid, r in records.items()}
        self._grow_global(d0, k, records, grown)
        self.tasks_ = TaskMap(grown.items())
        self.n_features_in_ = d0 + k

    def _grown_record(self, record: TaskRecord, d0: int, k: int) -> TaskRecord:
        """A stored task with ``k`` zero columns after its ``d0`` features (before the bias)."""
        data = record.data
        if isinstance(data, SquaredLossMoments):
            data = SquaredLossMoments(data.n, pad_square(data.gram, d0, k), np.insert(data.moment, [d0] * k, 0.0),
                                      data.yy)
        else:
            data = TaskRows(np.hstack([data.X, np.zeros((data.X.shape[0], k))]), data.y, data.n)
        ridge = self._ridge_of(record)
        return TaskRecord(data=data, labels=record.labels, w=np.insert(record.w, [d0] * k, 0.0),
                          omega=pad_square(record.omega, d0, k, ridge),
                          arrays=self._grown_task_arrays(record, d0, k, ridge), meta=dict(record.meta))

    def _grown_task_arrays(self, record: TaskRecord, d0: int, k: int, ridge: float) -> dict[str, np.ndarray]:
        """A task's learner-specific arrays after :meth:`add_features` (none depend on the
        features here)."""
        return dict(record.arrays)

    def _grow_global(self, d0: int, k: int, records: dict[str, TaskRecord], grown: dict[str, TaskRecord]) -> None:
        """Pad the learner's global arrays for ``k`` new columns after feature ``d0``
        (``records``: the tasks before, ``grown``: after). Nothing global here."""

    def _learn_batch(self, task_id: str, batch: TaskData, labels: str, defer_refits: bool = False) -> UpdateResult:
        """Learn one summarised batch (in the current scaling) of task ``task_id``
        (``defer_refits``: :meth:`learn`)."""
        previous = self.tasks_.get(task_id)
        # a deferred batch of a task with evidence leaves its measurement due (:meth:`learn`)
        measure = self.task_models == "empirical_bayes" and not (
            defer_refits and previous is not None and previous.meta.get("evidence"))
        # the prior this task's evidence is measured against: the library and population without it
        library = population = None
        if measure:
            population = self._population_without(previous)
            library = self._safe_library(task_id, previous, population)
        data = self._merged(task_id, previous.data if previous else None, batch)
        if previous is None:
            record = TaskRecord(data=data, labels=labels, meta={"position": len(self.tasks_)})
        else:
            record = TaskRecord(
                data=data, labels=labels, w=previous.w, omega=previous.omega,
                arrays=dict(previous.arrays), meta=dict(previous.meta),
            )
        record.w, record.omega = self._single_task(record.data)
        result = self._update(task_id, record, previous)
        scores = None
        if self.task_models == "empirical_bayes":
            due = tuple(getattr(self, "evidence_due_", ()))
            if measure:
                curves = self._record_evidence(task_id, library, population)
                scores = self._prequential_scores(task_id, previous, curves, library, population,
                                                  batch if self.kind == "regression" else self._design(batch)[:2])
                due = tuple(t for t in due if t != task_id)
            elif task_id not in due:
                due += (task_id,)
            self.evidence_due_ = due
            if self._keeps_population:
                self._update_population(defer_refits)
            if not defer_refits:
                again = self._measure_due_evidence()  # this task, just measured, is not among them
                again += self._measure_evidence_again((task_id, *again))
                result = dataclasses.replace(result, changed_tasks=(*result.changed_tasks, *again),
                                             remeasured_tasks=(*result.remeasured_tasks, *again))
            self._update_stream_choice(defer_refits, scores, known=previous is not None)
        return result

    def _learn_with_refitted_scaling(self, task_id: str, batch: TaskData, labels: str, rows: int) -> UpdateResult:
        """Warm-up (:data:`core.preprocessing.SCALER_WARMUP_ROWS`): refit the scaling on every
        row seen, this batch's included, re-express every task's data exactly in it and learn
        the tasks again from a fresh start, each as one batch, in their order. The model is
        then what the same rows would give had they arrived with the scaling known, however
        the stream began (a one-row first batch no longer sets the scaling); the stream's
        prequential sums start again too, each task scored as the one batch it is learned as."""
        known = task_id in self.tasks_
        tasks = dict(self.tasks_)
        labels_of = {tid: r.labels for tid, r in tasks.items()}
        data_of = {tid: r.data for tid, r in tasks.items()}
        data_of[task_id] = self._merged(task_id, data_of.get(task_id), batch)
        labels_of[task_id] = labels
        old = self.scaler_
        if self.kind == "regression":
            total = [sum(d.n for d in data_of.values()), sum(d.gram for d in data_of.values()),
                     sum(d.moment for d in data_of.values()), sum(d.yy for d in data_of.values())]
            new = Scaler.from_stats(*old.raw_stats(*total), self.kind, self.standardize)
            data_of = {tid: SquaredLossMoments(d.n, *new.moments_from(old, d.n, d.gram, d.moment, d.yy))
                       for tid, d in data_of.items()}
        else:
            X = np.vstack([d.X for d in data_of.values()])
            new = Scaler.fit(X, np.zeros(X.shape[0]), self.kind, self.standardize)
        self._init_learned(self.n_features_in_)
        self.scaler_, self.scaler_rows_ = new, rows
        result = None
        for tid, data in data_of.items():
            step = self._learn_batch(tid, data, labels_of[tid])
            result = step if tid == task_id else result
            self._forget_derived()
        return dataclasses.replace(result, new_task=not known, changed_tasks=tuple(t for t in data_of if t != task_id),
                                   remeasured_tasks=())

    def _check_finite(self, task_id: str) -> None:
        """Refuse an update whose learned arrays are not all finite (the caller rolls back)."""
        arrays = [self._finite_witness(a, getattr(self, a)) for a in self._state_attrs]
        arrays += list(self.scaler_.to_arrays().values())
        record = self.tasks_[task_id]
        # y'y may be NaN by design (a task from a state older than format 3): not a failure
        arrays += [record.w, record.omega, *record.arrays.values(),
                   *(v for k, v in record.data.to_arrays().items() if k != "yy")]
        if not all(np.isfinite(a).all() for a in arrays):
            raise FloatingPointError("learning gave non-finite parameters")

    def _finite_witness(self, name: str, array: np.ndarray) -> np.ndarray:
        """The part of a state array whose finiteness proves the whole array finite (all of it
        unless a subclass knows better: a large PSD matrix is finite when its diagonal is)."""
        return array

    def _summarise(self, X: np.ndarray, y: np.ndarray, scaler: Scaler | None = None) -> TaskData:
        """What the learner keeps of a checked batch (``y`` in the convention it was sent).

        ``scaler`` defaults to the learner's own; ELLA-Info scores candidates before it exists.
        """
        if self.kind == "classification":
            return TaskRows(X.copy(), (y == 1.0).astype(float), X.shape[0])
        scaler = self.scaler_ if scaler is None else scaler
        Xd = scaler.design(X)
        t = scaler.target(y)
        return SquaredLossMoments(X.shape[0], Xd.T @ Xd, Xd.T @ t, float(t @ t))

    def _merged(self, task_id: str, kept: TaskData | None, batch: TaskData) -> TaskData:
        """What the task keeps after ``batch``: summed statistics, or rows (capped at
        ``max_task_rows`` by a reservoir whose draws depend only on ``random_state``, the
        task id and the rows seen before, so replaying the same batches gives the same model)."""
        if isinstance(batch, SquaredLossMoments):
            return batch if kept is None else kept.merged(batch)
        if kept is None:
            kept = TaskRows(batch.X[:0], batch.y[:0], 0)
        rng = None
        if self.max_task_rows is not None:
            rng = np.random.default_rng([int(self.random_state) & 0xFFFFFFFF, zlib.crc32(task_id.encode()), kept.n])
        return kept.merged(batch, self.max_task_rows, rng)

    def _design(self, rows: TaskRows, scaler: Scaler | None = None) -> tuple[np.ndarray, np.ndarray, float]:
        """A classification task's scaled design (bias last), its 0/1 targets and its absolute ridge."""
        Xd = (self.scaler_ if scaler is None else scaler).design(rows.X)
        return Xd, rows.y, self.mu * curvature_scale(self.kind, Xd, rows.y)

    def _single_task(self, data: TaskData, scaler: Scaler | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(w_t, Omega_t)``; regression's ``curvature_scale`` is 1, so ``mu`` is absolute there."""
        if isinstance(data, SquaredLossMoments):
            return fit_squared_from_moments(data.gram, data.moment, data.n, self.mu)
        Xd, target, mu = self._design(data, scaler)
        return fit_single_task(self.kind, Xd, target, mu)

    def _update(self, task_id: str, record: TaskRecord, previous: TaskRecord | None) -> UpdateResult:
        raise NotImplementedError

    def _snapshot(self) -> dict[str, Any]:
        """The learned attributes as they are, to restore after a failed update. References,
        not copies: learning replaces attributes (``tasks_`` included: a new
        :class:`~core.task_map.TaskMap` with the task's new record), never mutates them in
        place, so the snapshot costs nothing however many tasks there are."""
        attrs = ("n_features_in_", "scaler_", "scaler_rows_", "stream_choice_", "evidence_cursor_", "evidence_due_", "tasks_") + self._state_attrs + self._meta_attrs
        return {a: getattr(self, a) for a in attrs if hasattr(self, a)}

    def _restore(self, snapshot: dict[str, Any]) -> None:
        attrs = ("n_features_in_", "scaler_", "scaler_rows_", "stream_choice_", "evidence_cursor_", "evidence_due_", "tasks_") + self._state_attrs + self._meta_attrs
        for a in attrs:
            if a in snapshot:
                setattr(self, a, snapshot[a])
            elif hasattr(self, a):
                delattr(self, a)
        self._forget_derived()

    def _forget_derived(self) -> None:
        """Drop what is computed from the learned state on demand: each task's model
        (``_task_models``, keyed by task id) and the stream-level values (``_stream_cache``:
        the family, the priors over ``omega``, the environments), kept apart so that any
        string is a task id."""
        self._task_models: dict[str, np.ndarray] = {}
        self._stream_cache: dict[str, Any] = {}

    def _stream_value(self, name: str, compute) -> Any:
        """A stream-level value, computed once per update."""
        cache = self.__dict__.setdefault("_stream_cache", {})
        if name not in cache:
            cache[name] = compute()
        return cache[name]

    def copy(self) -> "LifelongLearner":
        """A copy that can learn without touching this one, in O(number of tasks) time.

        Learned arrays are shared, which is safe because updates replace arrays and never
        write into them (the rule that also makes :meth:`learn` roll back). A service keeps
        serving predictions from the original while it updates the copy.
        """
        clone = copy.copy(self)
        if hasattr(self, "tasks_"):
            clone.tasks_ = self.tasks_  # immutable: learning replaces it
        clone._forget_derived()
        return clone

    # ----------------------------------------------------------------- prediction
    def _theta(self, task_id: str) -> np.ndarray:
        raise NotImplementedError

    def theta(self, task_id: str) -> np.ndarray:
        """The parameters task ``task_id`` is predicted with, in the scaled space (bias last):
        its empirical-Bayes model, or with ``task_models="paper"`` the learner's own rule
        (FCL3/ELLA: ``theta_t = D s_t``)."""
        self._record(task_id)
        return self._task_model(task_id).copy()

    def model_rows(self, X) -> np.ndarray:
        """``X`` checked and read as rows of the model's learned columns: with ``grow_features``
        a narrower row holds 0 in the columns it lacks and a wider row's never-learned columns
        are left out (their weight is 0 in every task); else exactly the model's width."""
        return self._as_rows(X, self.n_features_in_)[:, :self.n_features_in_]

    def _outputs(self, task_id: str, X, untarget: bool = False) -> np.ndarray:
        """The task's scores of the rows ``X`` (with ``untarget``, in the target's units),
        checked finite once: :class:`InputError` when they overflow."""
        self._record(task_id)
        X = self.model_rows(X)
        with np.errstate(over="ignore", invalid="ignore"):
            out = self.scaler_.linear(X, self._task_model(task_id))
            if untarget:
                out = self.scaler_.untarget(out)
        if not np.isfinite(out).all():
            raise InputError("the prediction overflowed: the rows' values are too large for this model")
        return out

    def decision_function(self, task_id: str, X) -> np.ndarray:
        return self._outputs(task_id, X)

    def predict(self, task_id: str, X) -> np.ndarray:
        """Regression values, or class labels in the convention the task's labels came in."""
        if self.kind == "regression":
            return self._outputs(task_id, X, untarget=True)
        score = self._outputs(task_id, X)
        positive = score >= 0.0
        negative = -1.0 if self._record(task_id).labels == "pm1" else 0.0
        return np.where(positive, 1.0, negative)

    def predict_proba(self, task_id: str, X) -> np.ndarray:
        """Probability of the positive class (classification only)."""
        if self.kind != "classification":
            raise InputError("predict_proba is only defined for classification models")
        return sigmoid(self.decision_function(task_id, X))

    # ----------------------------------------------------------------- state
    def task_state(self, task_id: str) -> dict[str, Any]:
        """One task's exported state (arrays and JSON-able meta)."""
        r = self._record(task_id)
        arrays = {**r.data.to_arrays(), "w": r.w, "omega": r.omega}
        arrays.update({f"arr_{k}": v for k, v in r.arrays.items()})
        return {"arrays": {k: np.array(v, copy=True) for k, v in arrays.items()},
                "meta": {"labels": r.labels, **copy_meta(r.meta)}}

    def get_state(self, tasks: list[str] | None = None) -> ModelState:
        """The model as named arrays plus JSON-able settings; see :func:`load_state`.

        ``tasks`` limits the per-task part to those task ids (a store that persists tasks
        separately passes the one an update touched, so exporting does not copy every task);
        ``None`` exports all of them, which is what :func:`load_state` needs.
        """
        meta: dict[str, Any] = {"fitted": self.is_fitted}
        arrays: dict[str, np.ndarray] = {}
        wanted = tasks
        tasks: dict[str, dict[str, Any]] = {}
        if self.is_fitted:
            meta["n_features"] = int(self.n_features_in_)
            meta["scaler_rows"] = int(getattr(self, "scaler_rows_", SCALER_WARMUP_ROWS))
            meta["evidence_cursor"] = int(getattr(self, "evidence_cursor_", 0))
            if getattr(self, "evidence_due_", ()):
                meta["evidence_due"] = list(self.evidence_due_)
            if getattr(self, "stream_choice_", None):
                meta["stream_choice"] = copy_meta(self.stream_choice_)
            meta["task_order"] = self.task_ids
            meta.update({a.rstrip("_"): copy_meta(getattr(self, a)) for a in self._meta_attrs})
            arrays.update({f"scaler_{k}": v.copy() for k, v in self.scaler_.to_arrays().items()})
            for attr in self._state_attrs:
                arrays[attr.rstrip("_")] = np.array(getattr(self, attr), copy=True)
            tasks = {tid: self.task_state(tid) for tid in (self.task_ids if wanted is None else wanted)}
        return ModelState(type(self).__name__, copy_meta(self.get_params()), meta, arrays, tasks)

    @classmethod
    def _from_state(cls, state: ModelState) -> "LifelongLearner":
        check_format(state)
        model = cls(**state.params)
        if not state.meta.get("fitted"):
            return model
        model._init_learned(int(state.meta["n_features"]))
        model._set_global_state(state)
        model._check_global_shapes()
        if set(state.meta["task_order"]) != set(state.tasks):
            raise ValueError("state is inconsistent: task_order does not list exactly the stored tasks")
        model.tasks_ = TaskMap((tid, model._task_record(state.tasks[tid])) for tid in state.meta["task_order"])
        return model

    def _set_global_state(self, state: ModelState) -> None:
        self.scaler_ = Scaler.from_arrays({k[len("scaler_"):]: v for k, v in state.arrays.items() if k.startswith("scaler_")})
        # a state from before the warm-up keeps its scaling frozen
        self.scaler_rows_ = int(state.meta.get("scaler_rows", SCALER_WARMUP_ROWS))
        self.stream_choice_ = copy_meta(state.meta.get("stream_choice"))
        self.evidence_cursor_ = int(state.meta.get("evidence_cursor", 0))
        self.evidence_due_ = tuple(state.meta.get("evidence_due", ()))
        defaults = self._state_defaults()
        for attr in self._state_attrs:
            name = attr.rstrip("_")
            value = state.arrays[name] if name in state.arrays or attr not in defaults else defaults[attr]
            setattr(self, attr, np.array(value, copy=True))
        for attr in self._meta_attrs:
            name = attr.rstrip("_")
            value = state.meta[name] if name in state.meta or attr not in defaults else defaults[attr]
            setattr(self, attr, copy_meta(value))

    def _check_global_shapes(self) -> None:
        """Refuse global arrays whose shapes a learner of these settings and features cannot
        have: each has the dimensions of a fresh learner's, where an axis empty at the start
        (one that grows with the tasks or the environments) may have any length."""
        fresh = type(self)(**self.get_params())  # a full load only: a state moved forward
        fresh._init_learned(int(self.n_features_in_))  # (with_state) is the store's own
        for attr in self._state_attrs:
            want, got = np.shape(getattr(fresh, attr)), np.shape(getattr(self, attr))
            if len(got) != len(want) or any(w and g != w for g, w in zip(got, want)):
                raise ValueError(f"state is inconsistent: array {attr.rstrip('_')!r} has shape {got}, "
                                 f"expected {tuple(w or 'any' for w in want)}")

    def _state_defaults(self) -> dict[str, Any]:
        """Values of global arrays and meta that a state of an earlier format lacks (none here)."""
        return {}

    def with_state(self, state: ModelState) -> "LifelongLearner":
        """This model moved forward to ``state``, reading only what ``state`` carries.

        ``state`` is a *later* export of the same model whose ``tasks`` may hold just the tasks
        that changed since this one (``get_state(tasks=[...])``); every other task is shared
        with this model. A reader that follows a stored model thus rebuilds the global arrays
        and the changed tasks, not every task's data. The result equals
        ``load_state`` of the full state; this model is not modified.
        """
        if state.estimator != type(self).__name__:
            raise ValueError(f"a {state.estimator} state cannot move a {type(self).__name__} forward")
        if state.params != self.get_params() or not self.is_fitted:
            return type(self)._from_state(state)
        model = self.copy()
        model._set_global_state(state)
        order = state.meta["task_order"]
        known = dict(model.tasks_)
        missing = [t for t in order if t not in known and t not in state.tasks]
        if missing or set(known) - set(order):
            raise ValueError(f"state is inconsistent with this model: tasks {missing or sorted(set(known) - set(order))}")
        for tid, task in state.tasks.items():
            known[tid] = model._task_record(task)
        model.tasks_ = TaskMap((tid, known[tid]) for tid in order)
        return model

    def _task_record(self, task: dict[str, Any]) -> TaskRecord:
        """One task from its export; format-1 regression rows are summarised here, once.

        Decided per task, not per state, because a store upgraded in place holds format-1
        task rows until an update rewrites them.
        """
        a = {k: np.array(v, copy=True) for k, v in task["arrays"].items()}
        meta = dict(task["meta"])
        labels = meta.pop("labels")
        if "gram" in a:
            data: TaskData = SquaredLossMoments(int(a.pop("n")), a.pop("gram"), a.pop("moment"),
                                                float(a.pop("yy", np.nan)))
        elif self.kind == "regression":
            X, y = a.pop("X"), a.pop("y")
            data = self._summarise(X, y)
        else:  # a format-1 task has no "n": it kept every row
            X, y = a.pop("X"), a.pop("y")
            data = TaskRows(X, y, int(a.pop("n")) if "n" in a else X.shape[0])
        return TaskRecord(
            data=data, labels=labels, w=a.pop("w"), omega=a.pop("omega"),
            arrays={k[len("arr_"):]: v for k, v in a.items()}, meta=meta,
        )


