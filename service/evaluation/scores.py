"""The online evaluation's metrics: pure functions of a learner, rows and sums (no I/O).

* Sums of one scored batch (:func:`batch_sums`): squared and absolute errors (regression),
  log-losses and hits (classification), of the model and of the task's own single-task model
  (the *baseline*); cumulative figures over any set of batches are sums of sums (:func:`add_sums`).
* Scores (:func:`scores`): the API's figures of sums (:class:`fcl3.schemas.RegressionScores`,
  ``ClassificationScores``).
* The transfer figures of an accuracy matrix (:func:`transfer`), from their definitions.
* The evaluation sets' reservoir (:func:`reservoir`): the engine's Algorithm R
  (:meth:`core.state.TaskRows.merged`) with a seed of the task id and the rows seen.

Scores equal what ``/predict`` answers for the same version: both go through the learner's
``decision_function`` (``predict`` and ``predict_proba`` are functions of it).
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np

import core
from core.losses import sigmoid
from core.metrics import auc as auc_score
from core.preprocessing import as_targets
from core.state import TaskRows

log = logging.getLogger("service.evaluation")

#: probabilities are clipped to [EPS, 1 - EPS] in the log-loss (as scikit-learn's log_loss does)
EPS = float(np.finfo(float).eps)


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


@dataclass(frozen=True)
class RegressionSums:
    """Sums over scored rows: squared and absolute errors of the model and of the baseline."""

    n: int
    se: float
    ae: float
    b_se: float
    b_ae: float

    def __add__(self, other: RegressionSums) -> RegressionSums:
        return RegressionSums(
            self.n + other.n, self.se + other.se, self.ae + other.ae, self.b_se + other.b_se, self.b_ae + other.b_ae
        )

    def plain(self) -> RegressionSums:
        return self

    def finite(self) -> bool:
        return bool(np.isfinite([self.se, self.ae, self.b_se, self.b_ae]).all())

    def scores(self) -> dict[str, Any]:
        """The Scores JSON (:class:`fcl3.schemas.RegressionScores`)."""
        n = self.n
        return {
            "n": n,
            "rmse": float(np.sqrt(self.se / n)),
            "mae": self.ae / n,
            "baseline_rmse": float(np.sqrt(self.b_se / n)),
            "baseline_mae": self.b_ae / n,
        }

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ClassificationSums:
    """Sums over scored rows: log-losses and right labels of the model and of the baseline;
    one batch's AUCs when both labels occur (not additive: a sum of batches has none)."""

    n: int
    ll: float
    hit: int
    b_ll: float
    b_hit: int
    auc: float | None = None
    b_auc: float | None = None

    def __add__(self, other: ClassificationSums) -> ClassificationSums:
        return ClassificationSums(
            self.n + other.n, self.ll + other.ll, self.hit + other.hit, self.b_ll + other.b_ll, self.b_hit + other.b_hit
        )

    def plain(self) -> ClassificationSums:
        """Without the batch's AUCs."""
        return replace(self, auc=None, b_auc=None)

    def finite(self) -> bool:
        return bool(np.isfinite([self.ll, self.b_ll]).all())

    def scores(self) -> dict[str, Any]:
        """The Scores JSON (:class:`fcl3.schemas.ClassificationScores`)."""
        n = self.n
        out: dict[str, Any] = {
            "n": n,
            "log_loss": self.ll / n,
            "accuracy": self.hit / n,
            "baseline_log_loss": self.b_ll / n,
            "baseline_accuracy": self.b_hit / n,
        }
        if self.auc is not None:
            out.update(auc=self.auc, baseline_auc=self.b_auc)
        return out

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


Sums = RegressionSums | ClassificationSums


def stored(kind: str, data: dict[str, Any] | None) -> Sums | None:
    """Sums from their stored JSON (:meth:`RegressionSums.to_json`, ...); None stays None."""
    if data is None:
        return None
    return RegressionSums(**data) if kind == "regression" else ClassificationSums(**data)


def to_json(sums: Sums | None) -> dict[str, Any] | None:
    return None if sums is None else sums.to_json()


def batch_sums(kind: str, y: np.ndarray, out: np.ndarray, base: np.ndarray) -> Sums:
    """Sums of one scored batch (``out``, ``base``: the model's and the baseline's regression
    values, or decision scores for classification)."""
    y = np.asarray(y, dtype=float)
    n = int(y.size)
    if kind == "regression":
        e, b = y - out, y - base
        return RegressionSums(n, float(e @ e), float(np.abs(e).sum()), float(b @ b), float(np.abs(b).sum()))
    pos = y == 1.0

    def ll(score: np.ndarray) -> float:
        p = np.clip(sigmoid(score), EPS, 1.0 - EPS)
        return float(-(np.log(p[pos]).sum() + np.log1p(-p[~pos]).sum()))

    a, b = auc_score(pos.astype(float), out), auc_score(pos.astype(float), base)
    aucs = (float(a), float(b)) if np.isfinite(a) and np.isfinite(b) else (None, None)
    return ClassificationSums(
        n, ll(out), int(np.sum((out >= 0.0) == pos)), ll(base), int(np.sum((base >= 0.0) == pos)), *aucs
    )


def add_sums(a: Sums | None, b: Sums | None) -> Sums | None:
    """Sums of two sets of batches (without AUCs: they are not additive). Sums are finite: when
    adding ``b`` would overflow, ``b`` is left out (its rows stay unscored in the total, ``n``
    says which rows count), as a batch whose own sums overflow is never scored."""
    if a is None:
        return None if b is None else b.plain()
    if b is None:
        return a.plain()
    with np.errstate(over="ignore"):
        total: Sums = a + b  # type: ignore[operator]  # sums of one model: of one kind
    return total if total.finite() else a.plain()


def scores(sums: Sums | None) -> dict[str, Any] | None:
    """The Scores JSON (:class:`fcl3.schemas.RegressionScores` or ``ClassificationScores``) of
    sums; None without sums or rows, or for sums that are not finite (stored before they were
    kept finite): an infinite error is not a figure to show."""
    return None if sums is None or not sums.n or not sums.finite() else sums.scores()


def score_rows(learner: core.LifelongLearner, task_id: str, X: np.ndarray, y: np.ndarray) -> Sums | None:
    """Sums (with AUC when both labels occur) of the learner on checked rows of ``task_id``;
    ``None`` when the task is not learned or cannot be scored (overflow of its predictions or
    of its errors, another width, a numerical failure: scoring never fails an update)."""
    if task_id not in getattr(learner, "tasks_", {}) or X.shape[1] != learner.n_features_in_:
        return None
    try:
        out, base = _outputs(learner, task_id, X)
    except core.InputError:
        return None
    except (ArithmeticError, np.linalg.LinAlgError, ValueError) as exc:
        log.warning("task %r could not be scored: %s", task_id, type(exc).__name__)
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        sums = batch_sums(learner.kind, y, out, base)
    if not sums.finite():  # errors too large for float64: no finite figure, and JSON cannot store one
        log.warning("task %r could not be scored: its errors overflow", task_id)
        return None
    return sums


def prequential(learner: core.LifelongLearner, task_id: str, X: Any, y: Any) -> Sums | None:
    """The batch's prequential sums against ``learner`` as it stood before the batch (the
    served snapshot); ``None`` for a task it has not learned (a new task's first batch)."""
    if task_id not in getattr(learner, "tasks_", {}):
        return None
    Xm = learner.model_rows(X)  # a new column (grow_features) has weight 0 in the model scored
    return score_rows(learner, task_id, Xm, as_targets(y, Xm.shape[0], learner.kind))


def served_outputs(learner: core.LifelongLearner, task_id: str, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The outputs a prediction of checked rows ``X`` serves (regression values, or decision
    scores whose sigmoid is the served probability) and the baseline's, NaN where the
    baseline overflows: what a remembered prediction keeps for its label's prequential sums."""
    score = learner.decision_function(task_id, X)  # InputError if it overflows (the prediction does too)
    record = learner.tasks_[task_id]
    with np.errstate(over="ignore", invalid="ignore"):
        base = learner.scaler_.design(X) @ record.w
        if learner.kind == "regression":
            score, base = learner.scaler_.untarget(score), learner.scaler_.untarget(base)
    return np.asarray(score, dtype=float), np.where(np.isfinite(base), base, np.nan)


def served_sums(kind: str, task_id: str, y: Any, out: np.ndarray, base: np.ndarray) -> Sums | None:
    """The prequential sums of a batch from the outputs its rows were served when they were
    predicted (:func:`served_outputs`), not from a recomputation; ``None`` when they cannot be
    scored (a baseline that overflowed, errors too large for float64), as :func:`score_rows`."""
    ym = as_targets(y, len(out), kind)
    with np.errstate(over="ignore", invalid="ignore"):
        sums = batch_sums(kind, ym, np.asarray(out, dtype=float), np.asarray(base, dtype=float))
    if not sums.finite():
        log.warning("task %r: the served predictions of a labelled batch could not be scored", task_id)
        return None
    return sums


#: The accuracy matrix's metric per kind, and its direction.
MATRIX_METRIC = {"regression": ("rmse", False), "classification": ("accuracy", True)}


def matrix_entry(kind: str, s: dict[str, Any] | None) -> tuple[float | None, float | None]:
    """(model, baseline) value of the matrix metric from a Scores JSON."""
    if not s:
        return None, None
    name = MATRIX_METRIC[kind][0]
    return s.get(name), s.get("baseline_" + name)


# ----------------------------------------------------------------------------- transfer figures
@dataclass(frozen=True)
class MatrixRow:
    """One row of the accuracy matrix: the task learned new at its version, and every learned
    task's value of the matrix metric (model, and its own single-task model)."""

    task_id: str
    scores: dict[str, float | None]
    baseline: dict[str, float | None]

    @classmethod
    def stored(cls, task_id: str, entries: dict[str, list[Any]]) -> MatrixRow:
        """From an ``evaluation_log.matrix`` value (task id -> [metric, baseline])."""
        return cls(task_id, {t: v[0] for t, v in entries.items()}, {t: v[1] for t, v in entries.items()})


@dataclass(frozen=True)
class Transfer:
    """BWT, forgetting and FWT of an accuracy matrix (None: no pair to average)."""

    backward_transfer: float | None = None
    forgetting: float | None = None
    forward_transfer: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def of(cls, stored: dict[str, Any] | None) -> Transfer:
        """The figures kept in ``evaluation_state.matrix``."""
        return cls(**{f.name: (stored or {}).get(f.name) for f in fields(cls)})


def transfer(tasks: list[str], rows: list[MatrixRow], higher_is_better: bool) -> Transfer:
    """BWT, forgetting and FWT of an accuracy matrix, from their definitions.

    ``s = +1`` when higher is better, ``-1`` otherwise, so BWT and FWT are positive when good
    and forgetting is positive when a task got worse. With ``T`` rows, ``i_j`` the row where
    task ``j`` was first learned and ``R[l][j]`` its value (pairs with a missing value are left
    out; a figure with no pair is ``None``):

    * BWT = mean over ``j`` with ``i_j < T-1`` of ``s (R[T-1][j] - R[i_j][j])`` (GEM);
    * forgetting = mean over ``j`` valued in the last row and some earlier row ``l < T-1`` of
      ``max_l s R[l][j] - s R[T-1][j]`` (Chaudhry et al. 2018);
    * FWT = mean over ``j`` with ``i_j >= 1`` of ``s (R[i_j][j] - B[i_j][j])``: the task
      right after it was learned, against its own single-task model ``B`` at that version.
    """
    s = 1.0 if higher_is_better else -1.0
    T = len(rows)
    bwt: list[float] = []
    fgt: list[float] = []
    fwt: list[float] = []
    if T == 0:
        return Transfer()
    first: dict[str, int] = {}
    for k, r in enumerate(rows):
        first.setdefault(r.task_id, k)
    last = rows[-1].scores
    for j in tasks:
        i = first.get(j)
        final = last.get(j)
        if i is not None:
            diag = rows[i].scores.get(j)
            if i < T - 1 and diag is not None and final is not None:
                bwt.append(s * (final - diag))
            base = rows[i].baseline.get(j)
            if i >= 1 and diag is not None and base is not None:
                fwt.append(s * (diag - base))
        earlier = [s * v for k in range(T - 1) if (v := rows[k].scores.get(j)) is not None]
        if final is not None and earlier:
            fgt.append(max(earlier) - s * final)

    def mean(v: list[float]) -> float | None:
        return float(np.mean(v)) if v else None

    return Transfer(mean(bwt), mean(fgt), mean(fwt))


def figures_of(matrix_state: dict[str, Any] | None) -> dict[str, float | None]:
    """The transfer figures kept in ``evaluation_state.matrix``, as the API's fields."""
    return Transfer.of(matrix_state).as_dict()


def reservoir(
    X_kept: np.ndarray | None,
    y_kept: np.ndarray | None,
    n_seen: int,
    X: np.ndarray,
    y: np.ndarray,
    cap: int,
    task_id: str,
) -> tuple[np.ndarray, np.ndarray]:
    """The kept rows after ``X, y`` arrive: all of them up to ``cap``, then a uniform sample of
    every row received (the engine's Algorithm R, :meth:`core.state.TaskRows.merged`), drawn
    from a seed of the task id and the rows seen, so the same posts give the same rows."""
    if X_kept is None or y_kept is None:
        X_kept, y_kept = X[:0], y[:0]
    rng = np.random.default_rng([zlib.crc32(task_id.encode()), n_seen])
    kept = TaskRows(X_kept, y_kept, n_seen).merged(TaskRows(X, y, X.shape[0]), cap, rng)
    return kept.X, kept.y
