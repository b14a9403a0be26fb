"""The three baselines of :mod:`benchmarks.multilevel`, fitted on a split's training rows, and
their on-disk cache.

* **per-task**: each task alone, ``StandardScaler`` + ``RidgeCV`` / ``LogisticRegressionCV``
  exactly as the robustness suite's baseline (:func:`benchmarks.robustness.fit_baseline`; a
  task with fewer than 2 training rows of a class predicts its training positive rate);
* **pooled**: the same estimator on every training row, ignoring the task;
* **mixed**: regression: statsmodels ``MixedLM`` (REML) with a random intercept and a random
  slope on the data set's slope column per group; prediction = fixed part + the group's
  predicted random effects (BLUPs). Covariates and target are standardised on the training
  rows first (a reparametrisation of the same model that helps the optimiser). When that fit
  fails, does not converge or ends with a singular random-effects covariance (a slope variance
  of zero or a perfect correlation: no BLUPs), it falls back to a random intercept only, and
  the result says so (``fallback``, ``attempts``); an intercept variance estimated as zero
  leaves the fixed part alone as the prediction. Classification: statsmodels
  ``BinomialBayesMixedGLM`` (variational Bayes) with a random intercept per group; score =
  fixed part + the group's posterior mean intercept.

Errors (:func:`error_of`): regression RMSE over all test rows; classification ``1 - mean
per-task AUC`` over the tasks whose test half holds both classes (the mean AUC is reported
too).
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from .multilevel_data import Split
from .robustness import ALPHAS, CS, fit_baseline

#: Bump when a baseline's computation or what is cached of it changes: cached results of other
#: versions are ignored.
BASELINE_VERSION = "3"
BASELINES = ("per_task", "pooled", "mixed")
MIXED_MAXITER = 3000


def error_of(kind: str, y_tests: list[np.ndarray], scores: list[np.ndarray]) -> dict[str, Any]:
    """The suite's error from per-task test targets and scores (see the module docstring), and
    each task's part of it (``per_task``, what :func:`benchmarks.multilevel.bootstrap_ratios`
    resamples): regression ``[squared error summed over the task's test rows, rows]``,
    classification the task's AUC (``None`` where its test half holds one class)."""
    from core.metrics import auc

    if kind == "regression":
        parts = [[float(np.sum((y - s) ** 2)), len(y)] for y, s in zip(y_tests, scores)]
        y, s = np.concatenate(y_tests), np.concatenate(scores)
        return {"error": float(np.sqrt(np.mean((y - s) ** 2))), "n_scored": len(y_tests), "per_task": parts}
    aucs = np.array([auc(y, s) for y, s in zip(y_tests, scores)], dtype=float)
    ok = np.isfinite(aucs)
    per = [float(a) if np.isfinite(a) else None for a in aucs]
    if not ok.any():
        return {"error": float("nan"), "mean_auc": float("nan"), "n_scored": 0, "per_task": per}
    mean_auc = float(aucs[ok].mean())
    return {"error": 1.0 - mean_auc, "mean_auc": mean_auc, "n_scored": int(ok.sum()), "per_task": per}


def _tests(split: Split) -> tuple[list[np.ndarray], list[np.ndarray]]:
    parts = [split.testing(t) for t in range(len(split.test))]
    return [p[0] for p in parts], [p[1] for p in parts]


def per_task(split: Split) -> dict[str, Any]:
    X_tests, y_tests = _tests(split)
    scores, fallbacks = [], 0
    for t in range(len(split.train)):
        fit = fit_baseline(split.kind, *split.training(t))
        scores.append(fit["score"](X_tests[t]))
        fallbacks += bool(fit["fallback"])
    return {**error_of(split.kind, y_tests, scores), "constant_tasks": fallbacks}


def pooled(split: Split) -> dict[str, Any]:
    X_tests, y_tests = _tests(split)
    X, y, _ = split.pooled_training()
    fit = fit_baseline(split.kind, X, y)
    return {**error_of(split.kind, y_tests, [fit["score"](Xt) for Xt in X_tests]), "param": fit["param"]}


def _standardiser(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, scale and the columns kept (constant training columns are dropped)."""
    mean, std = X.mean(axis=0), X.std(axis=0)
    keep = std > 1e-12 * np.maximum(1.0, np.abs(mean))
    return mean, np.where(keep, std, 1.0), keep


def _fit_mixedlm(y, exog, groups, exog_re):
    """Fit one MixedLM by REML with Powell's derivative-free method (then L-BFGS if it fails);
    returns ``(result, problem, warnings)``. Powell, because the gradient methods stall or stop
    at a false optimum with an infinite likelihood when a variance heads to zero (ScotsSec's
    primary schools, bdf's slope). A variance at its boundary (zero) is a valid
    estimate, not a problem; a fit that did not converge, failed, or whose random-effects
    covariance cannot give BLUPs is."""
    from statsmodels.regression.mixed_linear_model import MixedLM

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            res = MixedLM(y, exog, groups=groups, exog_re=exog_re).fit(reml=True, method=["powell", "lbfgs"],
                                                                       maxiter=MIXED_MAXITER)
        except (np.linalg.LinAlgError, ValueError) as exc:
            return None, f"{type(exc).__name__}: {exc}", []
    notes = sorted({str(w.message)[:160] for w in caught})
    if not res.converged or not np.isfinite(res.llf):
        return res, "not converged", notes
    try:
        res.random_effects  # noqa: B018 - the BLUPs need an invertible random-effects covariance
    except ValueError as exc:
        return res, str(exc), notes
    return res, None, notes


def mixed_regression(split: Split) -> dict[str, Any]:
    X_tests, y_tests = _tests(split)
    X, y, groups = split.pooled_training()
    mean, scale, keep = _standardiser(X)
    ym, ys = float(y.mean()), float(y.std()) or 1.0

    def design(A):
        return np.column_stack([np.ones(len(A)), ((A - mean) / scale)[:, keep]])

    exog = design(X)
    slope = split.dataset.slope
    slope_col = None if slope is None or not keep[slope] else 1 + int(np.sum(keep[:slope]))
    attempts = []
    if slope_col is not None:
        attempts.append(("intercept + slope " + split.dataset.columns[slope], exog[:, [0, slope_col]]))
    attempts.append(("intercept", exog[:, :1]))
    notes = []
    for label, exog_re in attempts:
        res, problem, warned = _fit_mixedlm((y - ym) / ys, exog, groups, exog_re)
        notes.append({"random_effects": label, "problem": problem, "warnings": warned})
        usable = res is not None and res.converged and np.isfinite(res.llf)
        if problem is None or exog_re.shape[1] == 1 and usable:
            break
    if not usable:
        raise RuntimeError(f"{split.dataset.name}: MixedLM failed: {notes}")
    cols = [0] if exog_re.shape[1] == 1 else [0, slope_col]
    fe = np.asarray(res.fe_params)
    try:
        blups = res.random_effects
    except ValueError:  # a zero intercept variance: every group's effect is predicted as 0
        blups = {t: np.zeros(len(cols)) for t in range(len(X_tests))}
    scores = []
    for t, Xt in enumerate(X_tests):
        D = design(Xt)
        scores.append(ym + ys * (D @ fe + D[:, cols] @ np.asarray(blups[t], dtype=float)))
    beta = np.zeros(X.shape[1])
    beta[keep] = ys * fe[1:] / scale[keep]
    return {**error_of(split.kind, y_tests, scores), "fixed_effects": beta,
            "random_effects": notes[-1]["random_effects"],
            "cov_re": np.asarray(res.cov_re) * ys ** 2, "fallback": len(notes) > 1, "attempts": notes}


def mixed_classification(split: Split) -> dict[str, Any]:
    import scipy.sparse as sp
    from statsmodels.genmod.bayes_mixed_glm import BinomialBayesMixedGLM

    X_tests, y_tests = _tests(split)
    X, y, groups = split.pooled_training()
    mean, scale, keep = _standardiser(X)

    def design(A):
        return np.column_stack([np.ones(len(A)), ((A - mean) / scale)[:, keep]])

    G = len(split.train)
    Z = sp.csr_matrix((np.ones(len(y)), (np.arange(len(y)), groups)), shape=(len(y), G))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = BinomialBayesMixedGLM(y, design(X), Z, np.zeros(G, dtype=int)).fit_vb()
    re = res.random_effects()["Mean"].to_numpy()
    scores = [res.predict(design(Xt), linear=True) + re[t] for t, Xt in enumerate(X_tests)]
    optim = getattr(res, "optim_retvals", None)
    success = bool(optim.get("success", True)) if isinstance(optim, dict) else None
    beta = np.zeros(X.shape[1])
    beta[keep] = np.asarray(res.fe_mean)[1:] / scale[keep]
    return {**error_of(split.kind, y_tests, scores), "fixed_effects": beta, "random_effects": "intercept",
            "intercept_sd": float(np.exp(res.vcp_mean[0])), "converged": success,
            "warnings": sorted({str(w.message)[:160] for w in caught})}


def mixed(split: Split) -> dict[str, Any]:
    return mixed_regression(split) if split.kind == "regression" else mixed_classification(split)


FITS = {"per_task": per_task, "pooled": pooled, "mixed": mixed}


# ============================================================================ cache
def split_digest(split: Split) -> str:
    """A digest of everything the baselines see: the data, the split and the grids."""
    h = hashlib.sha256()
    ds = split.dataset
    h.update(json.dumps([BASELINE_VERSION, ds.name, ds.kind, ds.columns, ds.task_ids, ds.slope]).encode())
    h.update(ALPHAS.tobytes() + CS.tobytes())
    for t in range(len(split.train)):
        for a in (ds.X[t], ds.y[t], split.train[t], split.test[t]):
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fcl3-multilevel"


def baselines(split: Split, cache_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """The three baselines' results for ``split``, read from ``cache_dir`` when fitted before
    (keyed by data set, seed, :data:`BASELINE_VERSION` and :func:`split_digest`), fitted and
    written there otherwise. ``cache_dir=None`` fits without caching."""
    path = None
    if cache_dir is not None:
        path = Path(cache_dir) / f"{split.dataset.name}-seed{split.seed}-v{BASELINE_VERSION}-{split_digest(split)}.json"
        if path.exists():
            with open(path) as fh:
                return {**json.load(fh), "cached": True}
    out: dict[str, Any] = {}
    for name, fit in FITS.items():
        t0 = time.perf_counter()
        out[name] = fit(split)
        out[name]["fit_s"] = time.perf_counter() - t0
    if path is not None:
        from .common import write_json

        write_json(path, out)
    return {**out, "cached": False}
