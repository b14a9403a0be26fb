"""Online evaluation of a stored model: prequential scores, held-out evaluation sets, the
accuracy matrix and the transfer figures read from it (definitions and references in
docs/design.md, "Online evaluation").

* **Prequential** (test-then-train, Dawid 1984; River's ``progressive_val_score``): before a
  batch of a known task is learned, the served learner predicts it (:func:`prequential`, on
  the snapshot the update already holds: no database round trip), and so does the task's own
  single-task model as it stood before the batch (the engine's cached ``w_t`` of
  :class:`core.state.TaskRecord`, in the learner's frozen scaling): the *baseline*. What is
  kept are sums (:func:`batch_sums`), so cumulative figures over any set of batches are exact.
* **Evaluation sets**: labelled rows per task that are never learned, at most
  ``EVALUATION_MAX_ROWS`` per task (Algorithm R beyond it). Every committed update rescores
  the task it learned and the ``EVALUATION_RESCORE`` other sets whose scores are oldest,
  chosen in its own transaction (:meth:`ModelEvaluation.on_commit`) and scored just after the
  commit, with the update lock released, before it answers
  (:meth:`ModelEvaluation.rescore_sets`: each score is stored unless a later version's is;
  an update of the same process meanwhile passes over the sets being rescored): the cost per
  update is bounded by that many task models, none under the lock. An update that learns a
  new task also queues the accuracy matrix's row (:class:`MatrixJob`: every learned set
  scored with that version's immutable learner),
  computed after the commit, off the update lock, by a background thread of the process
  (:meth:`ModelEvaluation.matrix_row`); figures in docs/operations.md. The row is marked
  *due* in ``evaluation_state.matrix`` by the commit and unmarked when stored, so a row whose
  process died first is computed by the model's next update, on whichever process takes it,
  with the snapshot that update starts from: the learner of that very version
  (:meth:`ModelEvaluation._due_rows`).
* **Log**: one ``evaluation_log`` row per committed update (the event stream replays it, the
  recent prequential window and the series over versions are read from it).

Scores equal what ``/predict`` answers for the same version: both go through the learner's
``decision_function`` (``predict`` and ``predict_proba`` are functions of it).
"""
from __future__ import annotations

import logging
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
from sqlalchemy import Connection, Engine, bindparam, delete, insert, select, update

import core
from core.losses import sigmoid
from core.metrics import auc as auc_score
from core.preprocessing import as_matrix, as_targets, label_convention

from .tables import EvaluationLogRow, EvaluationSetRow, EvaluationStateRow, ModelRow, PrequentialTaskRow
from .watch import notify

log = logging.getLogger("service.evaluation")

state_t = EvaluationStateRow.__table__
sets_t = EvaluationSetRow.__table__
log_t = EvaluationLogRow.__table__
preq_t = PrequentialTaskRow.__table__

#: probabilities are clipped to [EPS, 1 - EPS] in the log-loss (as scikit-learn's log_loss does)
EPS = float(np.finfo(float).eps)


def _now() -> datetime:
    return datetime.now(timezone.utc)


# The commit hook's statements, built once (SET from the parameters given to ``execute``,
# WHERE from the ``w_*`` ones). The first locks the model's evaluation_state row (a no-op
# UPDATE: PostgreSQL's row lock, SQLite's write lock) and reads it back with the updated
# task's prequential sums, in one round trip. Those sums need no lock of their own: only a
# commit of the model writes them, and the commit already holds the model row's lock.
_LOCK_STATE = (update(state_t).where(state_t.c.model_name == bindparam("w_model"))
               .values(revision=state_t.c.revision)
               .returning(*state_t.c, select(preq_t.c.sums).where(preq_t.c.model_name == bindparam("w_model"),
                                                                  preq_t.c.task_id == bindparam("w_task"))
                          .scalar_subquery().label("task_sums")))
_UPDATE_STATE = update(state_t).where(state_t.c.model_name == bindparam("w_model"))
_INSERT_STATE = insert(state_t)
_UPDATE_TASK_SUMS = (update(preq_t).where(preq_t.c.model_name == bindparam("w_model"),
                                          preq_t.c.task_id == bindparam("w_task"))
                     .values(n_batches=preq_t.c.n_batches + 1))
_INSERT_TASK_SUMS = insert(preq_t)
_INSERT_LOG = insert(log_t)
# After the commit (:meth:`ModelEvaluation.rescore_sets`): the state row locked and read with the
# model's identity (its created_at), in one round trip, then its scores written.
_LOCK_SCORES = (update(state_t).where(state_t.c.model_name == bindparam("w_model"))
                .values(revision=state_t.c.revision)
                .returning(state_t.c.scores, select(ModelRow.__table__.c.created_at)
                           .where(ModelRow.__table__.c.name == bindparam("w_model"))
                           .scalar_subquery().label("created")))
_UPDATE_SCORES = update(state_t).where(state_t.c.model_name == bindparam("w_model"))


def _freshness(entry: dict | None, pending: int = -1) -> int:
    """The version a task's current score is of, or will be once a rescoring of this process
    under way stores it (``pending``)."""
    return max((entry or {}).get("version", -1), pending)


# ----------------------------------------------------------------------------- scores
def _outputs(learner: core.LifelongLearner, task_id: str, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The model's and the baseline's outputs for checked rows ``X`` of a learned task:
    regression values, or decision scores (classification)."""
    score = learner.decision_function(task_id, X)  # InputError if it overflows
    record = learner.tasks_[task_id]
    with np.errstate(over="ignore", invalid="ignore"):
        base = learner.scaler_.design(X) @ record.w
    if not np.all(np.isfinite(base)):
        raise core.InputError("the baseline's prediction overflowed")
    if learner.kind == "regression":
        return learner.scaler_.untarget(score), learner.scaler_.untarget(base)
    return score, base


def batch_sums(kind: str, y: np.ndarray, out: np.ndarray, base: np.ndarray) -> dict[str, Any]:
    """Sums of one scored batch. Regression: squared and absolute errors (``se``, ``ae``) of the
    model and of the baseline (``b_se``, ``b_ae``). Classification (``out``, ``base``: decision
    scores): log-losses (``ll``, ``b_ll``) and right labels (``hit``, ``b_hit``)."""
    y = np.asarray(y, dtype=float)
    n = int(y.size)
    if kind == "regression":
        e, b = y - out, y - base
        return {"n": n, "se": float(e @ e), "ae": float(np.abs(e).sum()),
                "b_se": float(b @ b), "b_ae": float(np.abs(b).sum())}
    pos = y == 1.0

    def ll(score):
        p = np.clip(sigmoid(score), EPS, 1.0 - EPS)
        return float(-(np.log(p[pos]).sum() + np.log1p(-p[~pos]).sum()))

    return {"n": n, "ll": ll(out), "hit": int(np.sum((out >= 0.0) == pos)),
            "b_ll": ll(base), "b_hit": int(np.sum((base >= 0.0) == pos))}


def _auc(y: np.ndarray, out: np.ndarray, base: np.ndarray) -> dict[str, float]:
    a, b = auc_score((y == 1.0).astype(float), out), auc_score((y == 1.0).astype(float), base)
    return {} if not (np.isfinite(a) and np.isfinite(b)) else {"auc": a, "b_auc": b}


def add_sums(a: dict | None, b: dict | None) -> dict | None:
    """Sums of two sets of batches (``auc`` is not additive and is dropped)."""
    if a is None or b is None:
        return b if a is None else a
    return {k: a[k] + b[k] for k in a if k not in ("auc", "b_auc")}


def scores(kind: str, sums: dict | None) -> dict[str, Any] | None:
    """The Scores JSON (:class:`fcl3.schemas.RegressionScores` or ``ClassificationScores``) of sums."""
    if not sums or not sums.get("n"):
        return None
    n = sums["n"]
    if kind == "regression":
        return {"n": n, "rmse": float(np.sqrt(sums["se"] / n)), "mae": sums["ae"] / n,
                "baseline_rmse": float(np.sqrt(sums["b_se"] / n)), "baseline_mae": sums["b_ae"] / n}
    out = {"n": n, "log_loss": sums["ll"] / n, "accuracy": sums["hit"] / n,
           "baseline_log_loss": sums["b_ll"] / n, "baseline_accuracy": sums["b_hit"] / n}
    if "auc" in sums:
        out.update(auc=sums["auc"], baseline_auc=sums["b_auc"])
    return out


def score_rows(learner: core.LifelongLearner, task_id: str, X: np.ndarray, y: np.ndarray) -> dict | None:
    """Sums (with AUC when both labels occur) of the learner on checked rows of ``task_id``;
    ``None`` when the task is not learned or cannot be scored (overflow, another width, a
    numerical failure: scoring never fails an update)."""
    if task_id not in getattr(learner, "tasks_", {}) or X.shape[1] != learner.n_features_in_:
        return None
    try:
        out, base = _outputs(learner, task_id, X)
    except core.InputError:
        return None
    except (ArithmeticError, np.linalg.LinAlgError, ValueError) as exc:
        log.warning("task %r could not be scored: %s", task_id, type(exc).__name__)
        return None
    sums = batch_sums(learner.kind, y, out, base)
    if learner.kind == "classification":
        sums.update(_auc(y, out, base))
    return sums


def prequential(learner: core.LifelongLearner, task_id: str, X, y) -> dict | None:
    """The batch's prequential sums against ``learner`` as it stood before the batch (the
    served snapshot); ``None`` for a task it has not learned (a new task's first batch)."""
    if task_id not in getattr(learner, "tasks_", {}):
        return None
    Xm = as_matrix(X, learner.n_features_in_)
    return score_rows(learner, task_id, Xm, as_targets(y, Xm.shape[0], learner.kind))


#: The accuracy matrix's metric per kind, and its direction.
MATRIX_METRIC = {"regression": ("rmse", False), "classification": ("accuracy", True)}


def matrix_entry(kind: str, s: dict | None) -> tuple[float | None, float | None]:
    """(model, baseline) value of the matrix metric from a Scores JSON."""
    if not s:
        return None, None
    name = MATRIX_METRIC[kind][0]
    return s.get(name), s.get("baseline_" + name)


# ----------------------------------------------------------------------------- transfer figures
def transfer(tasks: list[str], rows: list[dict], higher_is_better: bool) -> dict[str, float | None]:
    """BWT, forgetting and FWT of an accuracy matrix, from their definitions.

    ``rows[i]`` is ``{"task_id": new task of row i, "scores": {task: value}, "baseline":
    {task: value}}``; ``s = +1`` when higher is better, ``-1`` otherwise, so BWT and FWT are
    positive when good and forgetting is positive when a task got worse. With ``T`` rows,
    ``i_j`` the row where task ``j`` was first learned and ``R[l][j]`` its value (pairs with a
    missing value are left out; a figure with no pair is ``None``):

    * BWT = mean over ``j`` with ``i_j < T-1`` of ``s (R[T-1][j] - R[i_j][j])`` (GEM);
    * forgetting = mean over ``j`` valued in the last row and some earlier row ``l < T-1`` of
      ``max_l s R[l][j] - s R[T-1][j]`` (Chaudhry et al. 2018);
    * FWT = mean over ``j`` with ``i_j >= 1`` of ``s (R[i_j][j] - B[i_j][j])``: the task
      right after it was learned, against its own single-task model ``B`` at that version.
    """
    s = 1.0 if higher_is_better else -1.0
    T = len(rows)
    bwt, fgt, fwt = [], [], []
    if T == 0:
        return {"backward_transfer": None, "forgetting": None, "forward_transfer": None}
    first = {}
    for i, r in enumerate(rows):
        first.setdefault(r["task_id"], i)
    last = rows[-1]["scores"]
    for j in tasks:
        i = first.get(j)
        final = last.get(j)
        if i is not None:
            diag = rows[i]["scores"].get(j)
            if i < T - 1 and diag is not None and final is not None:
                bwt.append(s * (final - diag))
            base = rows[i]["baseline"].get(j)
            if i >= 1 and diag is not None and base is not None:
                fwt.append(s * (diag - base))
        earlier = [s * rows[l]["scores"][j] for l in range(T - 1) if rows[l]["scores"].get(j) is not None]
        if final is not None and earlier:
            fgt.append(max(earlier) - s * final)

    def mean(v):
        return float(np.mean(v)) if v else None

    return {"backward_transfer": mean(bwt), "forgetting": mean(fgt), "forward_transfer": mean(fwt)}


NO_FIGURES = {"backward_transfer": None, "forgetting": None, "forward_transfer": None}


def figures_of(matrix_state: dict | None) -> dict[str, float | None]:
    """The transfer figures kept in ``evaluation_state.matrix`` (see :meth:`ModelEvaluation.matrix_row`)."""
    return {k: (matrix_state or {}).get(k) for k in NO_FIGURES}


# ----------------------------------------------------------------------------- evaluation sets
def reservoir(X_kept: np.ndarray | None, y_kept: np.ndarray | None, n_seen: int, X: np.ndarray, y: np.ndarray,
              cap: int, task_id: str) -> tuple[np.ndarray, np.ndarray]:
    """The kept rows after ``X, y`` arrive: all of them up to ``cap``, then a uniform sample of
    every row received (Algorithm R, Vitter 1985), drawn from a seed of the task id and the
    rows seen, so the same posts give the same rows."""
    if X_kept is None:
        X_kept, y_kept = X[:0], y[:0]
    free = max(cap - X_kept.shape[0], 0)
    Xo = np.vstack([X_kept, X[:free]])
    yo = np.concatenate([y_kept, y[:free]])
    rest = X.shape[0] - free
    if rest > 0:
        rng = np.random.default_rng([zlib.crc32(task_id.encode()), n_seen])
        seen = n_seen + free + np.arange(rest)
        slots = rng.integers(0, seen + 1)
        for i in np.flatnonzero(slots < cap):
            Xo[slots[i]] = X[free + i]
            yo[slots[i]] = y[free + i]
    return Xo, yo


class Foreground:
    """The model updates running in this process, to which the accuracy matrix's background
    rows give way. Both are Python threads of one interpreter: left alone, a row being
    computed takes the interpreter back every few milliseconds (the GIL's switch interval) and
    slows the update under its lock about twofold. So :meth:`give_way`, called by the row
    between evaluation sets, waits while an update runs, for at most ``most`` seconds each
    time: under a steady stream of updates the rows still move on (a set per ``most``
    seconds at least), and a new task's update that waits for the backlog (lock released,
    not counted here) never waits on itself."""

    def __init__(self):
        self._running = 0
        self._changed = threading.Condition(threading.Lock())

    def __enter__(self) -> "Foreground":
        with self._changed:
            self._running += 1
        return self

    def __exit__(self, *exc) -> None:
        with self._changed:
            self._running -= 1
            if not self._running:
                self._changed.notify_all()

    def give_way(self, most: float = 0.02) -> None:
        if self._running:  # read without the lock: a stale answer costs one set's wait or none
            with self._changed:
                self._changed.wait_for(lambda: not self._running, timeout=most)


#: The process's updates (entered by :func:`service.usecases._learn` while it holds the model's
#: lock, and while it rescores evaluation sets after the commit).
FOREGROUND = Foreground()


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
    #: Rows of earlier versions to compute first: a due row whose process died (see
    #: :meth:`ModelEvaluation._due_rows`).
    also: list["MatrixJob"] = field(default_factory=list)
    #: A row recovered by a later update: skipped if another process stored it meanwhile.
    recovered: bool = False


class ModelEvaluation:
    """The evaluation of one stored model in one process: a cache of its evaluation sets (by
    the revision of ``evaluation_state``), the commit hook, and the reads."""

    def __init__(self, engine: Engine, bulk: Engine, name: str, max_rows: int = 1000, rescore: int = 8,
                 window: int = 100, matrix: bool = True):
        self.engine, self.bulk, self.name = engine, bulk, name
        self.max_rows, self.rescore, self.window, self.matrix = int(max_rows), int(rescore), int(window), bool(matrix)
        self._sets: dict[str, EvaluationSet] = {}
        self._key: tuple[Any, int] | None = None  # (model created_at, revision) the cache holds
        self._guard = threading.Lock()
        self._pending: dict[str, int] = {}  # task id -> version of a rescoring under way (rescore_sets)
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._jobs: deque[tuple[MatrixJob, Any]] = deque()
        #: (model created_at, version) of the matrix rows this process has queued or is computing
        self._claimed: set[tuple[Any, int]] = set()
        #: The model's :class:`service.reads.ModelReader` (set by :class:`service.usecases.HostedModel`):
        #: its cached snapshot is the version an update starts from, the learner a due row of
        #: that version needs. None: due rows are not recovered by this process.
        self.reader = None
        self._worker: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()

    # ------------------------------------------------------------------ cached sets
    def _load_sets(self, conn: Connection, created: Any, revision: int) -> dict[str, EvaluationSet]:
        """The model's evaluation sets at ``revision`` (read on ``conn``, incrementally when the
        cache holds an earlier revision of the same model)."""
        with self._guard:
            key = self._key
            if key == (created, revision):
                return self._sets
            q = select(sets_t.c.task_id, sets_t.c.X, sets_t.c.y, sets_t.c.n_received).where(
                sets_t.c.model_name == self.name)
            sets = {}
            if key is not None and key[0] == created and key[1] < revision:
                sets = dict(self._sets)
                q = q.where(sets_t.c.revision > key[1])
            for r in conn.execute(q):
                sets[r.task_id] = EvaluationSet(r.X, r.y, int(r.n_received))
            self._sets, self._key = sets, (created, revision)
            return sets

    def _state(self, conn: Connection, lock: bool = False):
        """The model's ``evaluation_state`` row; with ``lock``, locked for this transaction first
        (a no-op ``UPDATE``: PostgreSQL's row lock, and SQLite's write lock taken *before* the
        read, so no other writer commits between the read and this transaction's write)."""
        if lock:
            conn.execute(update(state_t).where(state_t.c.model_name == self.name).values(revision=state_t.c.revision))
        return conn.execute(select(state_t).where(state_t.c.model_name == self.name)).mappings().first()

    # ------------------------------------------------------------------ writes
    def on_commit(self, conn: Connection, p, new_version: int) -> dict[str, Any]:
        """In the update's commit transaction (after the version compare-and-set): choose the
        evaluation sets to rescore after the commit (the learned task's and the oldest others,
        passing over those this process is rescoring; ``rescore_job``, for :meth:`rescore_sets`),
        fold the batch's prequential sums into the task's and the model's, append the log row. Returns
        ``{"event", "evaluation", "overall", "transfer", "rescored", "matrix_job", "rescore_job"}``."""
        learner, result, kind = p.learner, p.result, p.learner.kind
        state = conn.execute(_LOCK_STATE, {"w_model": self.name, "w_task": p.task_id}).mappings().first()
        task_sums = state["task_sums"] if state else None
        revision = int(state["revision"]) if state else 0
        sets = self._load_sets(conn, p.info.get("created_at"), revision) if revision else {}
        current = dict(state["scores"]) if state else {}
        learned = [t for t in sets if t in learner.tasks_]
        pending = self._pending
        others = sorted((t for t in learned if t != p.task_id),
                        key=lambda t: (_freshness(current.get(t), pending.get(t, -1)), t))[:self.rescore]
        chosen = ([p.task_id] if p.task_id in sets else []) + others
        rescore = None
        if chosen:  # scored just after the commit, off the lock (rescore_sets)
            rescore = RescoreJob(new_version, p.info.get("created_at"), learner, {t: sets[t] for t in chosen})
        summary = dict(state["matrix"]) if state else {}
        created = p.info.get("created_at")
        job = None
        due, lost = self._due_rows(summary.get("due") or [], p, created, sets)
        if result.new_task and self.matrix and learned:  # computed after the commit, off the lock
            job = MatrixJob(new_version, p.task_id, created, learner, {t: sets[t] for t in learned})
            due.append([new_version, p.task_id])
            with self._guard:
                self._claimed.add((created, new_version))
        if lost is not None:  # a row whose process died: computed first
            if job is None:
                job = lost
            else:
                job.also.append(lost)
        if due:
            summary["due"] = due
        else:
            summary.pop("due", None)
        overall = add_sums(state["overall"] if state else None, _plain(p.prequential))
        evaluation = None
        if sets:
            evaluation = {"version": new_version, "reason": "update", "task_id": p.task_id, "n_tasks": len(sets),
                          **figures_of(summary)}
        now = _now()
        values = {"version": new_version, "overall": overall, "matrix": summary, "updated_at": now}
        if state:  # the scores are not rewritten here: rescore_sets stores them
            conn.execute(_UPDATE_STATE, {"w_model": self.name, **values})
        else:
            conn.execute(_INSERT_STATE, {"model_name": self.name, "revision": 0, "scores": {}, **values})
        if p.prequential is not None:
            batch = _plain(p.prequential)
            if not state:  # the model's first update: its sums were not read with the state
                task_sums = self._task_sums(conn, p.task_id)
            if task_sums is not None:  # (sums are never stored as JSON null: None is no row)
                conn.execute(_UPDATE_TASK_SUMS, {"w_model": self.name, "w_task": p.task_id, "updated_at": now,
                                                 "sums": add_sums(task_sums, batch)})
            else:
                conn.execute(_INSERT_TASK_SUMS, {"model_name": self.name, "task_id": p.task_id, "n_batches": 1,
                                                 "sums": batch, "updated_at": now})
        event = {"version": new_version, "task_id": p.task_id, "new_task": bool(result.new_task),
                 "new_representative": bool(result.new_representative),
                 "n_representatives": int(result.n_representatives), "prequential": scores(kind, p.prequential)}
        conn.execute(_INSERT_LOG, {"model_name": self.name, "version": new_version, "task_id": p.task_id,
                                   "new_task": bool(result.new_task), "event": event, "batch": p.prequential,
                                   "overall": overall, "evaluation": evaluation, "matrix": None, "created_at": now})
        return {"event": event, "evaluation": evaluation, "overall": scores(kind, overall),
                "transfer": figures_of(summary), "rescored": len(chosen), "matrix_job": job, "rescore_job": rescore}

    def _due_rows(self, due: list, p, created: Any, sets: dict[str, EvaluationSet]
                  ) -> tuple[list, MatrixJob | None]:
        """The accuracy-matrix rows still due after this commit, and the job of the one it
        recovers (or None).

        A new task's commit marks its row due (``[version, task_id]`` in ``evaluation_state.matrix``)
        and :meth:`matrix_row` unmarks it when stored: a row still due that this process is not
        computing was lost (its process died after the commit) or is being computed by another
        process. The update of version ``v + 1`` holds the learner of version ``v`` (the
        snapshot it starts from, this process's cached one), so a row due at ``v`` is computed
        again after this commit (the first row stored wins: a duplicate is only CPU). A row due
        at an earlier version can no longer be computed here (that version's learner is gone):
        it is no longer marked, with a warning (its own process, if alive, still stores it)."""
        keep, job = [], None
        with self._guard:
            claimed = set(self._claimed)
        for v, task in due:
            v = int(v)
            if (created, v) in claimed:  # this process is on it
                keep.append([v, task])
                continue
            snap = self.reader.cached if (self.reader is not None and v == p.base_version) else None
            if (self.matrix and snap is not None and snap.version == v and snap.info.get("created_at") == created
                    and task in getattr(snap.learner, "tasks_", {})):
                learned = {t: e for t, e in sets.items() if t in snap.learner.tasks_}
                if learned:
                    job = MatrixJob(v, task, created, snap.learner, learned, recovered=True)
                    with self._guard:
                        self._claimed.add((created, v))
                    keep.append([v, task])
                    continue
            if self.matrix:
                log.warning("accuracy-matrix row of model %r at version %d (task %r) not stored yet, and no later "
                            "update can compute it (that version's learner is gone): missing from the matrix "
                            "unless the process that committed it stores it", self.name, v, task)
        return keep, job

    def rescore_sets(self, job: RescoreJob) -> int:
        """Score ``job``'s sets with the learner of ``job.version`` and store each score unless
        one of a later version is stored already (called by the committing request after its
        commit, with the update lock released, before it answers). Returns how many scores were
        stored (0: the model is gone or was created again)."""
        kind = job.learner.kind
        with self._guard:  # an update of this process meanwhile picks other sets
            for t in job.sets:
                self._pending[t] = max(self._pending.get(t, -1), job.version)
        try:
            scored = {}
            for t, e in job.sets.items():
                s = score_rows(job.learner, t, e.X, e.y)
                if s is not None:
                    scored[t] = scores(kind, s)
            if not scored:
                return 0
            with self.bulk.begin() as conn:
                state = conn.execute(_LOCK_SCORES, {"w_model": self.name}).mappings().first()
                if state is None or state["created"] != job.created:
                    return 0
                current = dict(state["scores"])
                stored = 0
                for t, sc in scored.items():
                    if (current.get(t) or {}).get("version", -1) < job.version:
                        current[t] = {"version": job.version, "scores": sc}
                        stored += 1
                if stored:
                    conn.execute(_UPDATE_SCORES, {"w_model": self.name, "scores": current, "updated_at": _now()})
            return stored
        finally:
            with self._guard:
                for t in job.sets:
                    if self._pending.get(t) == job.version:
                        del self._pending[t]

    # ------------------------------------------------------------------ the accuracy matrix, off the lock
    #: Matrix rows waiting in one process at most: a new task's update (after its commit, the
    #: lock released) waits while that many are queued, so the learners they hold stay few.
    MAX_BACKLOG = 4

    def submit(self, job: MatrixJob, done=None, wait: float = 60.0) -> None:
        """Compute ``job``'s matrix row in this process's background thread (started when
        needed, gone when idle); ``done(figures)`` is called after its commit."""
        deadline = time.monotonic() + wait
        while True:
            with self._guard:
                if len(self._jobs) < self.MAX_BACKLOG or time.monotonic() > deadline:
                    break
            time.sleep(0.01)
        with self._guard:
            for j in (*job.also, job):
                self._jobs.append((j, done))
                self._claimed.add((j.created, j.version))
            self._idle.clear()
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name=f"fcl3-matrix-{self.name}", daemon=True)
                self._worker.start()

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until every submitted matrix row is stored (tests, benchmarks)."""
        return self._idle.wait(timeout)

    def _work(self) -> None:
        while True:
            with self._guard:
                if not self._jobs:
                    self._worker = None
                    self._idle.set()
                    return
                job, done = self._jobs.popleft()
            try:
                figures = self.matrix_row(job)
                if done is not None and figures is not None:
                    done(figures)
            except Exception as exc:  # noqa: BLE001 - the row stays due: the next update computes it
                log.warning("accuracy-matrix row of model %r at version %d not stored: %s", self.name, job.version,
                            type(exc).__name__)
            finally:
                with self._guard:
                    self._claimed.discard((job.created, job.version))

    def matrix_row(self, job: MatrixJob) -> dict[str, float | None] | None:
        """Score every set with the learner of ``job.version``, store the row in that version's
        log row, refresh the current scores older than it, and recompute the transfer figures
        from every stored row (kept in ``evaluation_state.matrix`` for the events and gauges).
        Returns the figures (None: the model is gone or was created again)."""
        learner, kind = job.learner, job.learner.kind
        higher = MATRIX_METRIC[kind][1]
        if job.recovered:  # the process computing it may still be alive: nothing to do if it stored it
            with self._autocommit.connect() as conn:
                if conn.execute(select(log_t.c.version).where(
                        log_t.c.model_name == self.name, log_t.c.version == job.version,
                        log_t.c.matrix.is_(None))).first() is None:
                    return None
        entries, scored = {}, {}
        for t, e in job.sets.items():
            FOREGROUND.give_way()
            s = score_rows(learner, t, e.X, e.y)
            if s is not None:
                scored[t] = scores(kind, s)
                entries[t] = list(matrix_entry(kind, scored[t]))
        from .reads import models_t

        with self.bulk.begin() as conn:
            created = conn.execute(select(models_t.c.created_at).where(models_t.c.name == self.name)).scalar()
            state = self._state(conn, lock=True)
            if state is None or created != job.created:
                return None
            res = conn.execute(update(log_t).where(log_t.c.model_name == self.name, log_t.c.version == job.version,
                                                   log_t.c.task_id == job.task_id, log_t.c.matrix.is_(None))
                               .values(matrix=entries))
            if res.rowcount != 1:  # stored already (by another process: the first one wins), or gone
                return None
            current = dict(state["scores"])
            for t, sc in scored.items():
                if (current.get(t) or {}).get("version", -1) < job.version:
                    current[t] = {"version": job.version, "scores": sc}
            rows = [{"task_id": r.task_id, "scores": {t: v[0] for t, v in r.matrix.items()},
                     "baseline": {t: v[1] for t, v in r.matrix.items()}}
                    for r in conn.execute(select(log_t.c.task_id, log_t.c.matrix).where(
                        log_t.c.model_name == self.name, log_t.c.matrix.is_not(None)).order_by(log_t.c.version))]
            columns = sorted({t for r in rows for t in r["scores"]})
            figures = transfer(columns, rows, higher)
            summary = {"rows": len(rows), "task_id": job.task_id, **figures}
            due = [d for d in (state["matrix"] or {}).get("due") or [] if int(d[0]) != job.version]
            if due:
                summary["due"] = due
            conn.execute(update(state_t).where(state_t.c.model_name == self.name).values(
                scores=current, matrix=summary, updated_at=_now()))
            notify(conn, self.name)
        return figures

    def _task_sums(self, conn: Connection, task_id: str) -> dict | None:
        return conn.execute(select(preq_t.c.sums).where(preq_t.c.model_name == self.name,
                                                        preq_t.c.task_id == task_id)).scalar()

    def add_rows(self, snap, task_id: str, X, y, d: int | None = None) -> dict[str, Any]:
        """Store labelled rows as ``task_id``'s evaluation set (the caller holds the model's
        update lock; ``snap``: its stored version). The batch's checks: :class:`core.InputError`
        (422) and nothing written. Returns the body of :class:`fcl3.schemas.EvaluationRowsOut`."""
        learner = snap.learner
        kind = learner.kind
        if learner.is_fitted:
            width = learner.n_features_in_
        else:
            width = d if d is not None else next((e.X.shape[1] for e in self._sets.values()), None)
        Xm = as_matrix(X, width)
        ym = as_targets(y, Xm.shape[0], kind)
        if kind == "classification":
            record = getattr(learner, "tasks_", {}).get(task_id)
            label_convention(ym, record.labels if record is not None else "unknown")
        now = _now()
        with self.bulk.begin() as conn:
            state = self._state(conn, lock=True)
            revision = (int(state["revision"]) if state else 0) + 1
            old = conn.execute(select(sets_t.c.X, sets_t.c.y, sets_t.c.n_received).where(
                sets_t.c.model_name == self.name, sets_t.c.task_id == task_id)).first()
            if old is not None and old.X.shape[1] != Xm.shape[1]:
                raise core.InputError(f"X has {Xm.shape[1]} features per row but the task's evaluation rows "
                                      f"have {old.X.shape[1]}")
            if old is not None and kind == "classification":
                label_convention(ym, label_convention(old.y, "unknown"))
            n_seen = int(old.n_received) if old is not None else 0
            Xk, yk = reservoir(old.X if old else None, old.y if old else None, n_seen, Xm, ym, self.max_rows, task_id)
            n_received = n_seen + Xm.shape[0]
            if old is None:
                conn.execute(insert(sets_t).values(model_name=self.name, task_id=task_id, n_received=n_received,
                                                   X=Xk, y=yk, revision=revision, created_at=now, updated_at=now))
            else:
                conn.execute(update(sets_t).where(sets_t.c.model_name == self.name, sets_t.c.task_id == task_id)
                             .values(n_received=n_received, X=Xk, y=yk, revision=revision, updated_at=now))
            current = dict(state["scores"]) if state else {}
            sums = score_rows(learner, task_id, Xk, yk) if learner.is_fitted else None
            if sums is not None:
                current[task_id] = {"version": snap.version, "scores": scores(kind, sums)}
            if state:
                conn.execute(update(state_t).where(state_t.c.model_name == self.name).values(
                    revision=revision, scores=current, updated_at=now))
            else:
                conn.execute(insert(state_t).values(model_name=self.name, revision=revision, version=snap.version,
                                                    scores=current, overall=None, matrix={}, updated_at=now))
            n_tasks = conn.execute(select(sets_t.c.task_id).where(sets_t.c.model_name == self.name)).all()
            notify(conn, self.name)
        return {"task_id": task_id, "n_rows": int(Xk.shape[0]), "n_received": n_received, "version": snap.version,
                "score": scores(kind, sums), "n_tasks": len(n_tasks), "revision": revision}

    @staticmethod
    def delete_model(conn: Connection, name: str) -> None:
        """In a model's deletion: its evaluation goes with it."""
        for t in (log_t, state_t, sets_t, preq_t):
            conn.execute(delete(t).where(t.c.model_name == name))

    # ------------------------------------------------------------------ reads
    def task_figures(self, task_id: str, kind: str) -> tuple[dict | None, dict | None]:
        """(cumulative prequential, current evaluation score) of one task."""
        with self._autocommit.connect() as conn:
            sums = self._task_sums(conn, task_id)
            current = conn.execute(select(state_t.c.scores).where(state_t.c.model_name == self.name)).scalar()
        ev = (current or {}).get(task_id)
        return scores(kind, sums), (ev or {}).get("scores")

    def model_figures(self, kind: str) -> dict[str, Any]:
        """The model-wide prequential figures: overall, and over the ``window`` latest scored batches."""
        with self._autocommit.connect() as conn:
            overall = conn.execute(select(state_t.c.overall).where(state_t.c.model_name == self.name)).scalar()
            recent = None
            if self.window > 0:
                for (b,) in conn.execute(select(log_t.c.batch).where(log_t.c.model_name == self.name,
                                                                     log_t.c.batch.is_not(None))
                                         .order_by(log_t.c.version.desc()).limit(self.window)):
                    recent = add_sums(recent, _plain(b))
        return {"overall": scores(kind, overall), "recent": scores(kind, recent), "window": self.window}

    def report(self, kind: str, version: int, task_order: list[str], limit: int = 1000) -> dict[str, Any]:
        """The body of ``GET .../evaluation`` (:class:`fcl3.schemas.EvaluationOut`)."""
        metric, higher = MATRIX_METRIC[kind]
        with self._autocommit.connect() as conn:
            state = self._state(conn)
            sets = conn.execute(select(sets_t.c.task_id, sets_t.c.n_received, sets_t.c.y).where(
                sets_t.c.model_name == self.name)).all()
            mrows = conn.execute(select(log_t.c.version, log_t.c.task_id, log_t.c.matrix).where(
                log_t.c.model_name == self.name, log_t.c.matrix.is_not(None)).order_by(log_t.c.version)).all()
            series = conn.execute(select(log_t.c.version, log_t.c.task_id, log_t.c.new_task, log_t.c.batch,
                                         log_t.c.overall).where(log_t.c.model_name == self.name)
                                  .order_by(log_t.c.version.desc()).limit(limit)).all()
        current = (state["scores"] if state else None) or {}
        order = {t: i for i, t in enumerate(task_order)}
        names = sorted((r.task_id for r in sets), key=lambda t: (t not in order, order.get(t, 0), t))
        tasks = []
        for r in sets:
            ev = current.get(r.task_id) or {}
            tasks.append({"task_id": r.task_id, "n_rows": int(np.shape(r.y)[0]), "n_received": int(r.n_received),
                          "learned": r.task_id in order, "score": ev.get("scores"), "scored_version": ev.get("version")})
        tasks.sort(key=lambda t: names.index(t["task_id"]))
        rows = [{"task_id": r.task_id, "scores": {t: v[0] for t, v in r.matrix.items()},
                 "baseline": {t: v[1] for t, v in r.matrix.items()}} for r in mrows]
        matrix_rows = [{"version": r.version, "task_id": r.task_id,
                        "scores": [rows[i]["scores"].get(t) for t in names],
                        "baseline": [rows[i]["baseline"].get(t) for t in names]} for i, r in enumerate(mrows)]
        figures = transfer(names, rows, higher)
        points = [{"version": r.version, "task_id": r.task_id, "new_task": bool(r.new_task),
                   "batch": scores(kind, r.batch), "overall": scores(kind, r.overall)} for r in reversed(series)]
        return {"model": self.name, "version": int(state["version"]) if state else version, "kind": kind,
                "metric": metric, "tasks": tasks,
                "accuracy_matrix": {"metric": metric, "higher_is_better": higher, "tasks": names, "rows": matrix_rows},
                **figures, "prequential": points}


def _plain(sums: dict | None) -> dict | None:
    """Sums without the per-batch AUC (not additive)."""
    if sums is None:
        return None
    return {k: v for k, v in sums.items() if k not in ("auc", "b_auc")}
