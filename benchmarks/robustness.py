"""Robustness suite: the learners with their default hyper-parameters against per-task tuned
baselines on seeded synthetic streams nobody tuned for (``python -m benchmarks.robustness``).

The service runs FCL3 untuned on whatever users send. The promise this suite measures: the
default learner is never worse than what a user compares it with (each task fitted alone
with a tuned penalty), and far better where tasks share structure.

**Stream families.** Each entry of :data:`FAMILIES` is a :class:`Family`: called with a seed
(``family(seed)``) it returns a :class:`Stream`, a list of tasks with their training and test
rows and the order in which the training batches arrive. Every task draws ``2 n_train`` rows,
split 50/50 into training and test halves at random (seeded). A task's weight vector is
either drawn alone (``shared="none"``) or is one of ``envs`` environment centres (unit
vectors) plus a small per-task deviation (``shared="clustered"``); features are standard
normal (optionally correlated, shifted per task, or given uneven column scales ``1e-3..1e3``
and large offsets, the same for every task of a family). Regression targets are
``y = a_t + b_t (x'w + noise)`` with per-task offsets ``a_t`` and scales ``b_t``;
classification labels are Bernoulli draws of ``sigmoid(sharpness x'w + a_t)`` with ``a_t``
set so that the task's positive rate hits its target (balanced, ~20 %, or 3-5 %). A task
may arrive in 2-5 batches interleaved with other tasks; task order is random or environment
by environment. Tags: ``shared`` in {"none", "clustered"} and ``rows`` in {"few", "plenty"}
(few: ``n_train < 3 d``).

**Baselines** (fitted on each task's training half alone, as a user would):

* regression: ``StandardScaler`` then ``RidgeCV(alphas=np.logspace(-6, 6, 25))`` with
  ``fit_intercept=True`` (the intercept is not penalised) and the default ``cv=None``, the
  exact efficient leave-one-out over the grid;
* classification: ``StandardScaler`` then ``LogisticRegressionCV(Cs=np.logspace(-4, 4, 17),
  cv=StratifiedKFold(min(5, smallest class count)), scoring="neg_log_loss", solver="lbfgs",
  max_iter=1000)`` with an L2 penalty. With lbfgs scikit-learn (checked with 1.9) applies the
  penalty ``||w||^2 / (2C)`` to the coefficients only, never to the intercept (its
  ``LinearModelLoss.l2_penalty`` receives the weights without the intercept; only
  ``liblinear`` penalises an intercept, through ``intercept_scaling``), so the intercept is
  unpenalised: with a tiny ``C`` the fit is the constant logit of the training positive rate
  (a test checks this). A task whose training half holds fewer than 2 rows of a class gets a
  constant predictor at its training positive rate (AUC 0.5).

**Error and ratio.** Error per task: RMSE on its test half (regression) or ``1 - AUC`` of the
decision scores (classification; tasks whose test half lacks a class are skipped, for every
model alike). The learners learn the training halves as one stream (each batch a
``learn(task_id, X, y)`` call, in the family's order) and are evaluated on every test half
after the whole stream. For a family and seed::

    ratio = mean over tasks of the model's error / mean over tasks of the baseline's error

and a family's ratio is the geometric mean of its seeds' ratios (a model that fails on a
stream gets ``inf``).

**Acceptance criteria** (per model, :func:`acceptance`):

1. ``ratio <= 1.02`` on every family with ``shared="none"`` (no loss where nothing is shared);
2. ``ratio <= 1.0`` on every family with ``shared="clustered"`` and ``rows="plenty"``;
3. median ratio ``<= 0.75`` over the families with ``shared="clustered"`` and ``rows="few"``.

Run ``python -m benchmarks.robustness --help``; from Python, :func:`run_suite` takes
``models={"name": factory}`` with ``factory(kind, seed) -> learner`` to try candidate
learners. Set ``OPENBLAS_NUM_THREADS=1``: the matrices are small.
"""
from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
import warnings
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .common import machine, matplotlib_pyplot, progress_bar, write_json
from .family_choice import family_report

#: The ridge grid of the regression baseline and the C grid of the classification baseline.
ALPHAS = np.logspace(-6, 6, 25)
CS = np.logspace(-4, 4, 17)
LOGISTIC_MAX_ITER = 1000
#: The models the suite compares by default (names of :data:`core.LEARNERS`).
DEFAULT_MODELS = ("FCL3", "ELLA", "STL")
#: Noise levels of the regression families, as standard deviations relative to the signal's.
NOISE = {"none": 0.0, "low": 0.05, "small": 0.1, "moderate": 0.5, "heavy": 2.0}


# ============================================================================ streams
@dataclass
class Task:
    """One task: its training and test halves, environment, and training batches."""

    task_id: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    env: int  # environment index, -1 for a task with its own weight vector
    batches: list[np.ndarray]  # row indices into the training half, in arrival order


@dataclass
class Stream:
    """A family's tasks for one seed and the order of their training batches."""

    family: str
    kind: str
    seed: int
    tasks: list[Task]
    order: list[tuple[int, int]]  # (task index, batch index), in the order the learner sees them

    def batches(self, first_row_only: bool = False):
        """Yield ``(task_id, X, y)`` for every training batch, in stream order;
        ``first_row_only``: the stream's very first batch as its first row, then the rest of
        it as another batch (the same rows in the same order)."""
        for i, (ti, k) in enumerate(self.order):
            task = self.tasks[ti]
            idx = task.batches[k]
            if first_row_only and i == 0 and len(idx) > 1:
                yield task.task_id, task.X_train[idx[:1]], task.y_train[idx[:1]]
                idx = idx[1:]
            yield task.task_id, task.X_train[idx], task.y_train[idx]


@dataclass(frozen=True)
class Family:
    """A seeded stream family: ``family(seed)`` returns its :class:`Stream`.

    ``options`` (all optional) shape the generator :func:`make_stream`:

    * ``envs``: number of environments (0: every task has its own weight vector);
    * ``deviation``: norm of a task's deviation from its environment centre (unit norm), 0.15;
    * ``noise``: a key of :data:`NOISE` (regression; default ``"moderate"``);
    * ``offsets`` / ``scales``: ``(lo, hi)``: ``|a_t| = 10^U(lo, hi)`` with a random sign and
      ``b_t = 10^U(lo, hi)`` (regression; defaults ``a_t ~ N(0, 0.5^2)``, ``b_t = 1``);
    * ``intercept_sd``: the tasks' intercepts ``a_t ~ N(0, intercept_sd^2)``: regression (instead
      of 0.5), and classification's logit (instead of a positive rate per task);
    * ``target`` / ``features``: ``(offset, scale)``: every target ``offset + scale y``
      (regression), every feature ``offset + scale x`` (the same for all tasks);
    * ``uneven``: columns multiplied by ``10^U(-3, 3)`` and shifted by ``±10^U(0, 4)``;
    * ``corr``: AR(1) correlation of adjacent features;
    * ``task_shift``: per-task feature means ``N(0, task_shift^2)`` and scales ``e^N(0, 0.3^2)``;
    * ``task_uneven``: every task's columns multiplied by its own ``10^U(-2, 2)`` and shifted by
      its own ``±10^U(0, 3)`` (sensors calibrated differently per task);
    * ``pos_rate``: ``(lo, hi)`` range of the tasks' positive rates (classification; default
      balanced); ``sharpness``: multiplier of ``x'w`` in the logit (default 3);
    * ``batches``: ``k`` or ``(lo, hi)`` training batches per task;
    * ``order``: ``"random"`` (batches of all tasks interleaved at random) or ``"cluster"``
      (environment by environment, batches interleaved within an environment).
    """

    name: str
    description: str
    kind: str
    shared: str
    d: int
    n_tasks: int
    n_train: int
    options: dict = field(default_factory=dict)

    @property
    def rows(self) -> str:
        return "few" if self.n_train < 3 * self.d else "plenty"

    @property
    def tags(self) -> dict[str, str]:
        return {"shared": self.shared, "rows": self.rows}

    @property
    def batch_range(self) -> tuple[int, int]:
        b = self.options.get("batches", 1)
        return (b, b) if isinstance(b, int) else (int(b[0]), int(b[1]))

    def n_tasks_for(self, quick: bool = False) -> int:
        return max(6, self.n_tasks // 4) if quick else self.n_tasks

    def __call__(self, seed: int, quick: bool = False) -> Stream:
        return make_stream(self, seed, quick=quick)

    def describe(self) -> dict[str, Any]:
        lo, hi = self.batch_range
        return {"description": self.description, "kind": self.kind, "d": self.d, "n_tasks": self.n_tasks,
                "n_train": self.n_train, "tags": self.tags, "batches": [lo, hi],
                "order": self.options.get("order", "random"), "options": dict(self.options)}


def _unit(rng: np.random.Generator, d: int) -> np.ndarray:
    g = rng.normal(size=d)
    return g / np.linalg.norm(g)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _intercept_for_rate(f: np.ndarray, rate: float) -> float:
    """The ``a`` with ``mean(sigmoid(f + a)) = rate`` (bisection; the mean is increasing in a)."""
    lo, hi = -60.0, 60.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if _sigmoid(f + mid).mean() < rate:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def make_stream(family: Family, seed: int, quick: bool = False) -> Stream:
    """Generate ``family``'s stream for ``seed`` (deterministic; see :class:`Family`)."""
    o = family.options
    rng = np.random.default_rng([zlib.crc32(family.name.encode()), int(seed)])
    d, n = family.d, family.n_train
    T = family.n_tasks_for(quick)
    K = int(o.get("envs", 0))
    if (K > 0) != (family.shared == "clustered"):
        raise ValueError(f"family {family.name}: envs={K} contradicts shared={family.shared!r}")
    if o.get("uneven"):
        col_scale = 10.0 ** rng.uniform(-3, 3, d)
        col_offset = rng.choice([-1.0, 1.0], d) * 10.0 ** rng.uniform(0, 4, d)
    else:
        col_scale, col_offset = np.ones(d), np.zeros(d)
    corr = float(o.get("corr", 0.0))
    chol = None
    if corr:
        idx = np.arange(d)
        chol = np.linalg.cholesky(corr ** np.abs(idx[:, None] - idx[None, :]))
    centres = [_unit(rng, d) for _ in range(K)]
    envs = rng.permutation(np.arange(T) % K) if K else -np.ones(T, dtype=int)
    deviation = float(o.get("deviation", 0.15))
    noise = NOISE[o.get("noise", "moderate")]
    sharpness = float(o.get("sharpness", 3.0))
    blo, bhi = family.batch_range
    tasks = []
    for t in range(T):
        e = int(envs[t])
        w = centres[e] + deviation * _unit(rng, d) if K else _unit(rng, d)

        def draw(m: int, t_mean=None, t_scale=None) -> np.ndarray:
            Z = rng.normal(size=(m, d))
            if chol is not None:
                Z = Z @ chol.T
            if t_mean is not None:
                Z = Z * t_scale + t_mean
            return Z

        t_mean = t_scale = None
        if o.get("task_shift"):
            t_mean = rng.normal(0.0, float(o["task_shift"]), d)
            t_scale = np.exp(rng.normal(0.0, 0.3, d))
        Z = draw(2 * n, t_mean, t_scale)
        f = Z @ w
        if family.kind == "regression":
            a = (rng.choice([-1.0, 1.0]) * 10.0 ** rng.uniform(*o["offsets"]) if "offsets" in o
                 else rng.normal(0.0, float(o.get("intercept_sd", 0.5))))
            b = 10.0 ** rng.uniform(*o["scales"]) if "scales" in o else 1.0
            y = a + b * (f + noise * rng.normal(size=2 * n))
            if "target" in o:
                y = o["target"][0] + o["target"][1] * y
        else:
            if "intercept_sd" in o:
                a = rng.normal(0.0, float(o["intercept_sd"]))
            else:
                lo, hi = o.get("pos_rate", (0.5, 0.5))
                rate = rng.uniform(lo, hi)
                population = sharpness * (draw(4000, t_mean, t_scale) @ w)
                a = _intercept_for_rate(population, rate)
            y = (rng.random(2 * n) < _sigmoid(sharpness * f + a)).astype(float)
        X = Z * col_scale + col_offset
        if "features" in o:
            X = o["features"][0] + o["features"][1] * X
        if o.get("task_uneven"):
            X = X * 10.0 ** rng.uniform(-2, 2, d) + rng.choice([-1.0, 1.0], d) * 10.0 ** rng.uniform(0, 3, d)
        perm = rng.permutation(2 * n)
        tr, te = perm[:n], perm[n:]
        nb = int(rng.integers(blo, bhi + 1))
        tasks.append(Task(task_id=f"task-{t:03d}", X_train=X[tr], y_train=y[tr], X_test=X[te], y_test=y[te],
                          env=e, batches=[np.asarray(c) for c in np.array_split(np.arange(n), nb)]))
    order_kind = o.get("order", "random")
    if order_kind == "random":
        blocks = [list(rng.permutation(T))]
    elif order_kind == "cluster":
        blocks = [list(rng.permutation(np.flatnonzero(envs == e))) for e in rng.permutation(K)]
    else:
        raise ValueError(f"family {family.name}: unknown order {order_kind!r}")
    order: list[tuple[int, int]] = []
    for block in blocks:
        seq = np.concatenate([[ti] * len(tasks[ti].batches) for ti in block]).astype(int)
        seq = rng.permutation(seq) if bhi > 1 else seq
        seen: dict[int, int] = {}
        for ti in seq:
            k = seen.get(int(ti), 0)
            order.append((int(ti), k))
            seen[int(ti)] = k + 1
    return Stream(family=family.name, kind=family.kind, seed=int(seed), tasks=tasks, order=order)


def _families() -> dict[str, Family]:
    R, C = "regression", "classification"
    fams = [
        # ---------------------------------------------------------------- no shared structure
        Family("reg_unrelated_few", "unrelated regression tasks, 12 rows, d=10, noise 5%", R, "none", 10, 30, 12,
               {"noise": "low"}),
        Family("reg_unrelated_plenty", "unrelated regression tasks, 100 rows, d=10", R, "none", 10, 30, 100),
        Family("reg_unrelated_offsets", "unrelated tasks, target offsets 1..1e4 and scales 1e-2..1e2", R,
               "none", 5, 30, 40, {"offsets": (0, 4), "scales": (-2, 2), "noise": "small"}),
        Family("reg_unrelated_uneven_batches", "unrelated tasks, uneven features, 2-5 interleaved batches, "
               "heavy noise", R, "none", 20, 30, 80, {"uneven": True, "batches": (2, 5), "noise": "heavy"}),
        Family("reg_unrelated_d3", "unrelated tasks, d=3, 60 rows (20 d)", R, "none", 3, 30, 60),
        Family("reg_unrelated_calibrated", "unrelated tasks, each task's features on its own scale and offset, "
               "12 rows, d=10, noise 5%", R, "none", 10, 30, 12, {"task_uneven": True, "noise": "low"}),
        Family("clf_unrelated", "unrelated balanced classification tasks, d=10", C, "none", 10, 30, 40),
        Family("clf_unrelated_calibrated", "unrelated balanced tasks, each task's features on its own scale and "
               "offset, 12 rows, d=10", C, "none", 10, 30, 12, {"task_uneven": True}),
        Family("clf_unrelated_imbalanced_uneven", "unrelated tasks, ~20% positives, uneven features", C,
               "none", 5, 30, 60, {"pos_rate": (0.15, 0.25), "uneven": True}),
        # ---------------------------------------------------------------- clustered, plenty of rows
        Family("reg_clustered_plenty", "4 environments, 60 rows per task, d=10, noise 10%", R, "clustered", 10, 30, 60,
               {"envs": 4, "noise": "small"}),
        Family("reg_offsets_scales", "3 environments, target offsets 1..1e4 and scales 1e-2..1e2", R,
               "clustered", 10, 30, 40, {"envs": 3, "offsets": (0, 4), "scales": (-2, 2), "noise": "small"}),
        Family("reg_plenty_heavy_noise", "3 environments, 80 rows, heavy noise (SNR 1/4)", R, "clustered", 10, 30, 80,
               {"envs": 3, "noise": "heavy"}),
        Family("reg_batches_cluster_order", "3 environments, d=20, correlated features, 4 batches, "
               "environment by environment", R, "clustered", 20, 30, 160,
               {"envs": 3, "corr": 0.6, "batches": 4, "order": "cluster"}),
        Family("clf_clustered_plenty", "3 environments, balanced, 100 rows", C, "clustered", 10, 30, 100,
               {"envs": 3}),
        Family("clf_rare", "3 environments, rare positives (3-5%), 100 rows", C, "clustered", 10, 30, 100,
               {"envs": 3, "pos_rate": (0.03, 0.05)}),
        # ---------------------------------------------------------------- clustered, few rows
        Family("reg_clustered_few_uneven", "4 environments, 15 rows, uneven features, noise 10%", R, "clustered", 10,
               30, 15, {"envs": 4, "uneven": True, "noise": "small"}),
        Family("reg_one_env", "all tasks from one environment, 10 rows, noise 5%", R, "clustered", 10, 30, 10,
               {"envs": 1, "noise": "low"}),
        Family("reg_d40", "3 environments, d=40, 40 rows", R, "clustered", 40, 30, 40, {"envs": 3}),
        Family("reg_d100", "2 environments, d=100, 50 rows (d/2)", R, "clustered", 100, 16, 50, {"envs": 2}),
        Family("reg_noiseless_half_d", "3 environments, d=20, 10 rows (d/2), no noise", R, "clustered", 20, 30, 10,
               {"envs": 3, "noise": "none"}),
        Family("reg_heavy_noise", "3 environments, heavy noise (SNR 1/4), 20 rows", R, "clustered", 10, 30, 20,
               {"envs": 3, "noise": "heavy"}),
        Family("reg_many_envs", "10 environments, 40 tasks, 20 rows", R, "clustered", 10, 40, 20, {"envs": 10}),
        Family("reg_batches_offsets", "4 environments, 2-5 interleaved batches, offsets 1..100, scales 0.1..10",
               R, "clustered", 10, 30, 24, {"envs": 4, "batches": (2, 5), "offsets": (0, 2), "scales": (-1, 1)}),
        Family("reg_cluster_order", "4 environments, streamed environment by environment, 20 rows", R,
               "clustered", 10, 30, 20, {"envs": 4, "order": "cluster"}),
        Family("reg_task_shift", "3 environments, per-task feature shifts, uneven features, 25 rows", R,
               "clustered", 10, 30, 25, {"envs": 3, "task_shift": 1.0, "uneven": True}),
        Family("reg_d3_few", "3 environments, d=3, 6 rows", R, "clustered", 3, 30, 6, {"envs": 3}),
        Family("clf_clustered", "4 environments, balanced, 24 rows", C, "clustered", 10, 30, 24, {"envs": 4}),
        Family("clf_imbalanced_batches", "3 environments, ~20% positives, 2-3 interleaved batches, 25 rows", C,
               "clustered", 10, 30, 25, {"envs": 3, "pos_rate": (0.15, 0.25), "batches": (2, 3)}),
        Family("clf_d40", "3 environments, d=40, balanced, 60 rows", C, "clustered", 40, 30, 60, {"envs": 3}),
        Family("clf_one_env_uneven", "one environment, uneven features, 16 rows", C, "clustered", 10, 30, 16,
               {"envs": 1, "uneven": True}),
        Family("clf_rare_few", "3 environments, rare positives (3-5%), d=20, 40 rows", C, "clustered", 20, 30, 40,
               {"envs": 3, "pos_rate": (0.03, 0.05)}),
        Family("reg_clustered_intercepts", "4 environments, per-task intercepts 10x the noise, targets 300 + 50 y, "
               "12 rows, d=5", R, "clustered", 5, 40, 12,
               {"envs": 4, "intercept_sd": 5.0, "target": (300.0, 50.0)}),
        Family("clf_clustered_intercepts", "4 environments, per-task logit intercepts (sd 2), features 300 + 50 x, "
               "14 rows, d=5", C, "clustered", 5, 40, 14,
               {"envs": 4, "intercept_sd": 2.0, "features": (300.0, 50.0)}),
    ]
    return {f.name: f for f in fams}


#: Every stream family by name.
FAMILIES: dict[str, Family] = _families()


# ============================================================================ baselines
def _logistic_cv(n_splits: int):
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.model_selection import StratifiedKFold

    kwargs: dict[str, Any] = dict(Cs=CS, cv=StratifiedKFold(n_splits), scoring="neg_log_loss", solver="lbfgs",
                                  max_iter=LOGISTIC_MAX_ITER, fit_intercept=True)
    params = inspect.signature(LogisticRegressionCV).parameters
    if "l1_ratios" in params:  # scikit-learn >= 1.8: the L2 penalty is l1_ratio 0
        kwargs["l1_ratios"] = (0.0,)
    else:
        kwargs["penalty"] = "l2"
    if "use_legacy_attributes" in params:
        kwargs["use_legacy_attributes"] = False
    return LogisticRegressionCV(**kwargs)


def fit_baseline(kind: str, X: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """Fit the per-task baseline on one task's training rows.

    Returns ``{"score": f(X) -> scores or predictions, "param": chosen alpha or C (None for the
    constant fallback), "fallback": bool, "warnings": number of convergence warnings}``.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        if kind == "regression":
            pipe = make_pipeline(StandardScaler(), RidgeCV(alphas=ALPHAS, fit_intercept=True)).fit(X, y)
            out = {"score": pipe.predict, "param": float(pipe[-1].alpha_), "fallback": False}
        else:
            y01 = (np.asarray(y) == 1.0).astype(int)
            counts = np.bincount(y01, minlength=2)
            if counts.min() < 2:
                rate = float(np.clip(y01.mean(), 1e-6, 1 - 1e-6))
                logit = float(np.log(rate / (1 - rate)))
                out = {"score": lambda Xn, v=logit: np.full(len(Xn), v), "param": None, "fallback": True}
            else:
                pipe = make_pipeline(StandardScaler(), _logistic_cv(int(min(5, counts.min())))).fit(X, y01)
                out = {"score": pipe.decision_function, "param": float(np.ravel(pipe[-1].C_)[0]), "fallback": False}
    out["warnings"] = sum(issubclass(w.category, ConvergenceWarning) for w in caught)
    return out


def task_error(kind: str, y_test: np.ndarray, score: np.ndarray) -> float:
    """RMSE (regression) or ``1 - AUC`` of the scores (classification; ``nan`` when the test
    half lacks a class)."""
    from core.metrics import auc, rmse

    if kind == "regression":
        return rmse(y_test, score)
    return 1.0 - auc((np.asarray(y_test) == 1.0).astype(float), score)


def _grid_summary(params: list[float | None], grid: np.ndarray) -> dict[str, Any]:
    vals = np.array([p for p in params if p is not None], dtype=float)
    out: dict[str, Any] = {"n_fitted": int(vals.size), "n_fallback": int(len(params) - vals.size)}
    if vals.size:
        lg = np.log10(vals)
        out.update(median_log10=float(np.median(lg)), min_log10=float(lg.min()), max_log10=float(lg.max()),
                   at_lower_edge=int(np.sum(np.isclose(vals, grid[0]))),
                   at_upper_edge=int(np.sum(np.isclose(vals, grid[-1]))))
    return out


def run_baseline(stream: Stream) -> dict[str, Any]:
    """Fit the baseline on every task of ``stream``; its errors and chosen penalties."""
    t0 = time.perf_counter()
    errors, params, n_warn = [], [], 0
    for task in stream.tasks:
        fit = fit_baseline(stream.kind, task.X_train, task.y_train)
        errors.append(task_error(stream.kind, task.y_test, fit["score"](task.X_test)))
        params.append(fit["param"])
        n_warn += fit["warnings"]
    name = "alpha" if stream.kind == "regression" else "C"
    return {"errors": errors, "mean_error": float(np.nanmean(errors)), "param_name": name,
            "params": params, "chosen": _grid_summary(params, ALPHAS if name == "alpha" else CS),
            "convergence_warnings": n_warn, "fit_s": time.perf_counter() - t0}


# ============================================================================ models
Factory = Callable[[str, int], Any]


def default_models(names=None, params: dict[str, dict] | None = None) -> dict[str, Factory]:
    """Factories ``f(kind, seed)`` of the engine's learners (``core.LEARNERS``) with their
    defaults, ``random_state=seed`` and the extra keyword arguments in ``params[name]``."""
    from core import LEARNERS

    names = list(DEFAULT_MODELS if names is None else names)
    params = params or {}
    unknown = [n for n in list(names) + list(params) if n not in LEARNERS]
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; choose from {sorted(LEARNERS)}")
    missing = [n for n in params if n not in names]
    if missing:
        raise ValueError(f"--params names model(s) {missing} that are not run")

    def factory(name: str) -> Factory:
        cls, kw = LEARNERS[name], dict(params.get(name, {}))

        def make(kind: str, seed: int):
            return cls(kind=kind, random_state=seed, **kw)

        make.params = kw  # type: ignore[attr-defined]
        return make

    return {n: factory(n) for n in names}


def run_model(factory: Factory, stream: Stream, first_row_only: bool = False,
              scan_against: list[float] | None = None) -> dict[str, Any]:
    """Learn ``stream``'s training batches in order with a fresh learner, then score every
    task's test half (``first_row_only``: :meth:`Stream.batches`). A learner that raises gets
    ``errors=None`` and the exception text. ``family_choice``: how the stream's family was
    chosen (:func:`benchmarks.family_choice.family_report`); given the baseline's per-task
    errors ``scan_against``, with every family's ratio to them too."""
    try:
        model = factory(stream.kind, stream.seed)
        t0 = time.perf_counter()
        last = None
        for task_id, X, y in stream.batches(first_row_only):
            last = model.learn(task_id, X, y)
        learn_s = time.perf_counter() - t0

        def tested(m) -> list[float]:
            return [task_error(stream.kind, task.y_test, m.predict(task.task_id, task.X_test)
                               if stream.kind == "regression" else m.decision_function(task.task_id, task.X_test))
                    for task in stream.tasks]

        t0 = time.perf_counter()
        errors = tested(model)
        predict_s = time.perf_counter() - t0
        choice = family_report(model, None if scan_against is None else lambda m: ratio_of(tested(m), scan_against))
    except Exception as exc:  # noqa: BLE001 - a failing learner is a result, not a crash
        return {"errors": None, "failure": f"{type(exc).__name__}: {exc}"}
    reps = getattr(last, "n_representatives", None)
    return {"errors": errors, "learn_s": learn_s, "predict_s": predict_s,
            "n_updates": len(stream.order), "n_representatives": reps, "family_choice": choice}


def ratio_of(model_errors, baseline_errors) -> float:
    """Mean model error over mean baseline error, over the tasks both scored (``inf`` when the
    model failed)."""
    if model_errors is None:
        return float("inf")
    m = np.asarray(model_errors, dtype=float)
    b = np.asarray(baseline_errors, dtype=float)
    ok = np.isfinite(b) & ~np.isnan(m)
    if not ok.any():
        return float("nan")
    if not np.all(np.isfinite(m[ok])):
        return float("inf")
    return float(m[ok].mean() / b[ok].mean())


def geometric_mean(values) -> float:
    v = np.asarray(values, dtype=float)
    if v.size == 0 or np.any(np.isnan(v)):
        return float("nan")
    if np.any(~np.isfinite(v)) or np.any(v <= 0):
        return float("inf") if np.any(np.isinf(v)) else 0.0
    return float(np.exp(np.mean(np.log(v))))


# ============================================================================ criteria
#: (key, label, statistic, selector on tags, threshold)
CRITERIA = (
    ("unrelated", 'max ratio, shared="none"', "max", lambda t: t["shared"] == "none", 1.02),
    ("clustered_plenty", 'max ratio, shared="clustered", rows="plenty"', "max",
     lambda t: t["shared"] == "clustered" and t["rows"] == "plenty", 1.0),
    ("clustered_few", 'median ratio, shared="clustered", rows="few"', "median",
     lambda t: t["shared"] == "clustered" and t["rows"] == "few", 0.75),
)


def acceptance(ratios: dict[str, float], tags: dict[str, dict[str, str]]) -> dict[str, dict[str, Any]]:
    """The three acceptance criteria for one model's family ratios.

    ``ratios`` maps family name to ratio, ``tags`` family name to ``{"shared", "rows"}``. Each
    criterion gets the families it covers, its statistic's value, the threshold and ``passed``
    (``None`` when no family of the run falls under it). A ``nan`` ratio fails.
    """
    out = {}
    for key, label, stat, select, threshold in CRITERIA:
        fams = [f for f in ratios if select(tags[f])]
        if not fams:
            out[key] = {"label": label, "families": [], "value": None, "threshold": threshold, "passed": None}
            continue
        vals = np.array([ratios[f] for f in fams], dtype=float)
        vals = np.where(np.isnan(vals), np.inf, vals)
        value = float(vals.max() if stat == "max" else np.median(vals))
        worst = fams[int(np.argmax(vals))]
        out[key] = {"label": label, "families": fams, "value": value, "threshold": threshold,
                    "passed": bool(value <= threshold), "worst_family": worst}
    return out


# ============================================================================ the suite
def _resolve_families(families) -> list[Family]:
    if families is None:
        return list(FAMILIES.values())
    out = []
    for f in families:
        if isinstance(f, Family):
            out.append(f)
        elif f in FAMILIES:
            out.append(FAMILIES[f])
        else:
            raise ValueError(f"unknown family {f!r}; choose from {', '.join(FAMILIES)}")
    return out


def cached_baseline(cache: dict[str, Any] | None, stream: Stream, quick: bool) -> dict[str, Any] | None:
    """The baseline of ``stream`` from an earlier result (``--baselines``): reused only when
    that run had the same ``quick`` setting and scored the same family and seed on the same
    number of tasks with the same baseline grids (the streams are seeded, so the baseline is
    the same computation)."""
    if not cache or bool(cache.get("quick")) != bool(quick):
        return None
    grids = cache.get("baseline", {})
    for got, want in ((grids.get("regression", {}).get("alphas"), ALPHAS), (grids.get("classification", {}).get("Cs"), CS)):
        if got is None or len(got) != len(want) or not np.allclose(got, want, rtol=1e-12):
            return None
    entry = cache.get("families", {}).get(stream.family, {}).get("seeds", {}).get(str(stream.seed))
    if entry is None or len(entry["baseline"]["errors"]) != len(stream.tasks):
        return None
    return entry["baseline"]


def run_suite(families=None, seeds=(0, 1, 2), models: dict[str, Factory] | None = None, progress: bool = True,
              quick: bool = False, baselines: dict[str, Any] | None = None,
              first_batch: bool = False, family_scan: bool = False) -> dict[str, Any]:
    """Run the suite and return its results (the structure ``--json`` writes).

    ``families``: names or :class:`Family` objects (default: all of :data:`FAMILIES`);
    ``models``: display name -> ``factory(kind, seed) -> learner`` (default: FCL3, ELLA, STL
    with their defaults); ``quick``: fewer tasks per family; ``baselines``: an earlier result
    whose baselines are reused where they match (:func:`cached_baseline`); ``first_batch``:
    every stream also learned with its first batch cut to one row (the rest of it following
    as another batch), and each model's mean test error so over its usual one reported per
    family (``first_batch``, geometric mean over seeds) and at most (``summary``);
    ``family_scan``: every prior family's ratio beside each model's (:func:`run_model`).
    """
    fams = _resolve_families(families)
    models = default_models() if models is None else dict(models)
    seeds = [int(s) for s in seeds]
    start = time.perf_counter()
    result: dict[str, Any] = {
        "suite": "robustness", "seeds": seeds, "quick": bool(quick),
        "models": {m: {"params": getattr(f, "params", None)} for m, f in models.items()},
        "baseline": {"regression": {"estimator": "StandardScaler + RidgeCV (efficient leave-one-out)",
                                    "alphas": ALPHAS},
                     "classification": {"estimator": "StandardScaler + LogisticRegressionCV (lbfgs, L2, "
                                                     "StratifiedKFold(min(5, smallest class)), neg_log_loss)",
                                        "Cs": CS, "max_iter": LOGISTIC_MAX_ITER}},
        "criteria": {key: {"label": label, "statistic": stat, "threshold": thr}
                     for key, label, stat, _, thr in CRITERIA},
        "machine": machine(), "families": {},
    }
    bar = progress_bar(total=len(fams) * len(seeds), desc="robustness", enabled=progress, unit="stream")
    for fam in fams:
        entry = fam.describe()
        entry["n_tasks_run"] = fam.n_tasks_for(quick)
        entry["seeds"] = {}
        for seed in seeds:
            bar.set_postfix_str(f"{fam.name} seed {seed}")
            stream = fam(seed, quick=quick)
            base = cached_baseline(baselines, stream, quick) or run_baseline(stream)
            per_model = {}
            for name, factory in models.items():
                r = run_model(factory, stream, scan_against=base["errors"] if family_scan else None)
                r["mean_error"] = float(np.nanmean(r["errors"])) if r["errors"] is not None else None
                r["ratio"] = ratio_of(r["errors"], base["errors"])
                if first_batch:
                    cut = run_model(factory, stream, first_row_only=True)
                    r["first_batch"] = {"mean_error": (float(np.nanmean(cut["errors"]))
                                                       if cut["errors"] is not None else None),
                                        "ratio": ratio_of(cut["errors"], r["errors"]) if r["errors"] is not None
                                        else float("nan")}
                per_model[name] = r
            entry["seeds"][str(seed)] = {
                "baseline": base, "models": per_model,
                "n_tasks_scored": int(np.sum(np.isfinite(np.asarray(base["errors"], dtype=float)))),
            }
            bar.update(1)
        entry["ratio"] = {m: geometric_mean([entry["seeds"][str(s)]["models"][m]["ratio"] for s in seeds])
                          for m in models}
        entry["ratio_per_seed"] = {m: [entry["seeds"][str(s)]["models"][m]["ratio"] for s in seeds] for m in models}
        if first_batch:
            entry["first_batch"] = {m: geometric_mean([entry["seeds"][str(s)]["models"][m]["first_batch"]["ratio"]
                                                       for s in seeds]) for m in models}
        reps = [entry["seeds"][str(s)]["models"][m].get("n_representatives") for s in seeds for m in models
                if m == "FCL3"]
        if reps:
            entry["fcl3_n_representatives"] = reps
        result["families"][fam.name] = entry
    bar.close()
    tags = {f: e["tags"] for f, e in result["families"].items()}
    result["summary"] = {}
    for m in models:
        ratios = {f: e["ratio"][m] for f, e in result["families"].items()}
        vals = np.array(list(ratios.values()), dtype=float)
        finite = np.where(np.isnan(vals), np.inf, vals)
        worst = list(ratios)[int(np.argmax(finite))] if len(vals) else None
        result["summary"][m] = {
            "median": float(np.median(finite)) if len(vals) else None,
            "worst": float(finite.max()) if len(vals) else None, "worst_family": worst,
            "learn_s": float(sum(e["seeds"][str(s)]["models"][m].get("learn_s", 0.0)
                                 for e in result["families"].values() for s in seeds)),
            "criteria": acceptance(ratios, tags),
        }
        if first_batch:
            cut = {f: e["first_batch"][m] for f, e in result["families"].items()}
            far = max(cut, key=lambda f: abs(np.log(cut[f])) if np.isfinite(cut[f]) and cut[f] > 0 else np.inf)
            result["summary"][m]["first_batch"] = {"farthest": cut[far], "farthest_family": far}
    result["baseline_fit_s"] = float(sum(e["seeds"][str(s)]["baseline"]["fit_s"]
                                         for e in result["families"].values() for s in seeds))
    result["wall_s"] = time.perf_counter() - start
    return result


# ============================================================================ output
def _fmt_ratio(r) -> str:
    if r is None or (isinstance(r, float) and np.isnan(r)):
        return "nan"
    if np.isinf(r):
        return "FAIL"
    return f"{r:.3f}"


def format_table(result: dict[str, Any]) -> str:
    """The per-family table, then per model its median and worst ratio and the criteria."""
    models = list(result["models"])
    head = f"{'family':<32} {'kind':<5} {'d':>3} {'tasks':>5} {'rows':>4} {'batch':>5}  {'shared':<9} {'rows':<6}"
    head += "".join(f" {m:>9}" for m in models)
    cut = any("first_batch" in e for e in result["families"].values())
    if cut:
        head += "".join(f" {'1st row ' + m:>9}" for m in models)
    lines = [head, "-" * len(head)]
    for name, e in result["families"].items():
        lo, hi = e["batches"]
        b = f"{lo}" if lo == hi else f"{lo}-{hi}"
        line = (f"{name:<32} {e['kind'][:5]:<5} {e['d']:>3} {e['n_tasks_run']:>5} {e['n_train']:>4} {b:>5}  "
                f"{e['tags']['shared']:<9} {e['tags']['rows']:<6}")
        line += "".join(f" {_fmt_ratio(e['ratio'][m]):>9}" for m in models)
        if "first_batch" in e:
            line += "".join(f" {_fmt_ratio(e['first_batch'][m]):>9}" for m in models)
        lines.append(line)
    lines.append("")
    for m in models:
        s = result["summary"][m]
        lines.append(f"{m}: median ratio {_fmt_ratio(s['median'])}, worst {_fmt_ratio(s['worst'])} "
                     f"({s['worst_family']})")
        if "first_batch" in s:
            fb = s["first_batch"]
            lines.append(f"  first batch cut to one row / usual: farthest from 1 {_fmt_ratio(fb['farthest'])} "
                         f"({fb['farthest_family']})")
        for key, c in s["criteria"].items():
            verdict = {True: "PASS", False: "FAIL", None: "n/a"}[c["passed"]]
            val = "-" if c["value"] is None else _fmt_ratio(c["value"])
            extra = f"  worst: {c['worst_family']}" if c.get("worst_family") and c["passed"] is False else ""
            lines.append(f"  {verdict:<4}  {c['label']:<46} = {val:>6} (<= {c['threshold']}, "
                         f"{len(c['families'])} families){extra}")
    return "\n".join(lines)


GROUPS = (
    ("none", None, 'shared="none"\n(every ratio <= 1.02)'),
    ("clustered", "plenty", 'clustered, plenty of rows\n(every ratio <= 1.0)'),
    ("clustered", "few", 'clustered, few rows\n(median <= 0.75)'),
)
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def plot_ratios(result: dict[str, Any], path: str) -> str:
    """One figure: each model's ratio per family (log axis; per-seed ratios as small dots),
    families grouped by tags, lines at 1.0 and 0.75."""
    plt = matplotlib_pyplot()
    fams = result["families"]
    models = list(result["models"])
    order, spans = [], []
    for shared, rows, label in GROUPS:
        members = [f for f, e in fams.items()
                   if e["tags"]["shared"] == shared and (rows is None or e["tags"]["rows"] == rows)]
        if members:
            spans.append((len(order), len(order) + len(members) - 1, label))
            order += members
    fig, ax = plt.subplots(figsize=(max(9.0, 0.42 * len(order) + 3), 6.6))
    x = np.arange(len(order))
    width = 0.6 / max(1, len(models))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    finite_vals = [1.0, 0.75]
    for i, m in enumerate(models):
        off = (i - (len(models) - 1) / 2) * width
        for j, f in enumerate(order):
            for r in fams[f]["ratio_per_seed"][m]:
                if r is not None and np.isfinite(r) and r > 0:
                    ax.plot(x[j] + off, r, ".", color=colors[i % len(colors)], alpha=0.35, ms=4)
                    finite_vals.append(r)
        vals = np.array([fams[f]["ratio"][m] for f in order], dtype=float)
        ok = np.isfinite(vals) & (vals > 0)
        ax.plot(x[ok] + off, vals[ok], _MARKERS[i % len(_MARKERS)], color=colors[i % len(colors)], ms=7,
                mec="black", mew=0.5, label=f"{m} (geometric mean over seeds)", ls="none")
        finite_vals += list(vals[ok])
    ax.plot([], [], ".", color="grey", alpha=0.5, ms=4, label="single seeds")
    ax.set_yscale("log")
    lo, hi = min(finite_vals), max(finite_vals)
    ax.set_ylim(lo / 1.3, hi * 1.6)
    ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0)
             if lo / 1.3 <= t <= hi * 1.6]
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.axhline(1.0, color="black", lw=1.0)
    ax.axhline(0.75, color="black", lw=0.8, ls="--")
    for k, (a, b, label) in enumerate(spans):
        if k:
            ax.axvline(a - 0.5, color="grey", lw=0.8)
        if k % 2 == 1:
            ax.axvspan(a - 0.5, b + 0.5, color="grey", alpha=0.07, lw=0)
        ax.text((a + b) / 2, 1.0, label, transform=ax.get_xaxis_transform(), ha="center", va="bottom", fontsize=9)
    ax.set_xticks(x)
    ax.set_xticklabels(order, rotation=60, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(order) - 0.4)
    ax.set_ylabel("error ratio: model / per-task tuned baseline (log)")
    seeds = result["seeds"]
    ax.set_title(f"Robustness suite, default hyper-parameters ({len(seeds)} seed{'s' * (len(seeds) > 1)}; "
                 "below 1 = better than the tuned per-task baseline)", fontsize=10, pad=34)
    ax.grid(axis="y", which="major", alpha=0.25)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.47), ncol=len(models) + 1, fontsize=8, frameon=False)
    fig.tight_layout()
    import os

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


# ============================================================================ CLI
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.robustness",
        description="Robustness suite: learners with default hyper-parameters against per-task tuned "
                    "RidgeCV / LogisticRegressionCV baselines on seeded synthetic stream families.")
    ap.add_argument("--families", help="comma-separated subset of: " + ", ".join(FAMILIES))
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    ap.add_argument("--quick", action="store_true", help="one seed (the first) and fewer tasks per family")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS),
                    help="comma-separated names of core.LEARNERS (default FCL3,ELLA,STL)")
    ap.add_argument("--params", default="{}",
                    help='JSON of keyword arguments per model, e.g. \'{"FCL3": {"lambda2": 0.5}}\'')
    ap.add_argument("--json", dest="json_out", help="write every result to this path")
    ap.add_argument("--plot", help="write the ratio figure (PNG) to this path")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--family-scan", action="store_true",
                    help="also every prior family's ratio, the learned model forced to it (benchmarks.family_choice)")
    ap.add_argument("--first-batch", action="store_true",
                    help="also learn every stream with its very first batch cut to one row and compare")
    ap.add_argument("--baselines", help="reuse the baselines of an earlier --json result where they match "
                                        "(same family, seed, task count, grids and --quick)")
    args = ap.parse_args(argv)
    try:
        params = json.loads(args.params)
        if not isinstance(params, dict) or not all(isinstance(v, dict) for v in params.values()):
            raise ValueError("--params must be a JSON object of objects")
        models = default_models([m.strip() for m in args.models.split(",") if m.strip()], params)
        families = None if not args.families else [f.strip() for f in args.families.split(",") if f.strip()]
        _resolve_families(families)
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.quick:
        seeds = seeds[:1]
    cache = None
    if args.baselines:
        with open(args.baselines) as fh:
            cache = json.load(fh)
    result = run_suite(families, seeds=seeds, models=models, progress=not args.quiet, quick=args.quick,
                       baselines=cache, first_batch=args.first_batch, family_scan=args.family_scan)
    result["command"] = "python -m benchmarks.robustness " + " ".join(sys.argv[1:] if argv is None else argv)
    print(format_table(result))
    print(f"\nwall time {result['wall_s']:.1f} s (baselines {result['baseline_fit_s']:.1f} s)")
    if args.json_out:
        print("wrote", write_json(args.json_out, result))
    if args.plot:
        print("wrote", plot_ratios(result, args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
