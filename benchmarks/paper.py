"""The paper's benchmark (Table 2 and its figures), run from the command line::

    python -m benchmarks.paper --dataset school --runs 10 --json out.json --plots figs/ [--seed 0]
           [--data-dir DIR] [--models STL,ELLA-Rand] [--orders] [--no-tune] [--val-splits 3] [--quiet]

(the batch comparator CMTL: :mod:`benchmarks.cmtl`; FCL3's error over its hyper-parameters:
:mod:`benchmarks.sensitivity`; learning times from this benchmark's JSON:
:mod:`benchmarks.runtime`; update times against the number of tasks learned on synthetic
streams: :mod:`benchmarks.speed`.)

Protocol (the paper's, with the decisions it leaves open written down):

* **Split**: in every run each task is split at random 50/50 into a training and a test half
  (``floor(n/2)`` training rows, as ELLA v1.0's demo does).
* **Order**: tasks are presented one at a time. ``-Rand`` models (and STL) see one random
  permutation per run, shared between them. ``ELLA-Info`` picks each next task itself among
  the remaining ones with :meth:`core.ELLA.select_next` (InfoMax on their training
  halves). ``FCL3-OneByOne`` sees the tasks cluster by cluster: on Disjoint the true clusters;
  on the real data sets, where no clusters are known, the clusters found by k-means
  (``ONEBYONE_CLUSTERS`` clusters, on the unit-normalised STL task vectors learned from the
  training halves, bias excluded); the cluster order and the order inside each cluster are
  random. ``--orders`` adds the task-order variants ``FCL3-Adversarial``,
  ``ELLA-OneByOne`` and ``ELLA-Adversarial``: the adversarial order starts from a random task
  and always presents next the remaining task least similar (cosine) to the mean of the
  unit-normalised STL vectors of the tasks already learned, the one the library explains
  worst. ``CMTL`` is a batch model: it learns every training half at once, in no order.
* **Hyper-parameters** are chosen on the *training halves only*: each training half is split
  again 70/30 (fit/validation) at random, ``--val-splits`` times (default 3); every grid point
  of :data:`GRIDS` is learned on the fit parts in the model's own order and scored on the
  validation parts, averaged over the splits; the best one is
  refitted on the whole training halves and scored once on the test halves. The single-task
  ridge ``mu`` is tuned on STL; ELLA and the FCL3 family tune their own ``mu`` with their
  other parameters (ELLA: ``n_components``; FCL3, CL3 and woDecoder, each on its own:
  ``lambda2`` and ``gamma``). ELLA-Info uses ELLA-Rand's choice and FCL3-OneByOne
  FCL3-Rand's, and so do the order variants of ``--orders`` (see :data:`SHARES_TUNING`; a
  model whose source is not run tunes its own grid). CMTL tunes ``rho1``, ``rho2`` and ``k``
  on the same validation splits.
  Tuned runs are the paper's algorithm: every model predicts with its own rule
  (``task_models="paper"``, e.g. FCL3's ``theta_t = D s_t``). ``--no-tune`` runs the classes'
  own defaults (what the service runs with: empirical-Bayes task models, see
  :mod:`core.evidence`); every grid point modifies those defaults.
* **Metric**: RMSE in the data set's own units (regression) or AUC in % (classification),
  averaged over tasks (tasks whose test half lacks a class are skipped for AUC), then
  mean ± standard error over runs. On Disjoint the standardised RMSE (RMSE divided by the
  standard deviation of all targets of the data set) is reported too.
* **Significance**: FCL3-Rand against every other model run, paired over the runs (same
  splits): the paired t-test and the Wilcoxon signed-rank test (two-sided, scipy.stats).
* **Timing**: wall-clock time of every ``learn`` call of the final fits (median and max; per
  run the times in arrival order, and the total learning time, which for CMTL is its fit).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Any

import numpy as np

from core import CL3, ELLA, FCL3, STL, FCL3WithoutDecoder, LifelongLearner
from core.metrics import auc, mean_se, rmse

from .cmtl import CMTL
from .common import matplotlib_pyplot, progress_bar, write_json
from .datasets import DATASETS, Dataset, load_dataset

# --------------------------------------------------------------------------- settings
#: Hyper-parameter grids, tuned per run on validation splits of the training halves; every grid
#: point modifies the class's own defaults.
#: "STL" tunes the single-task ridge ``mu``; a model whose grid has no ``mu`` uses STL's choice.
#: The other models tune two (ELLA) or three (the FCL3 family) parameters.
GRIDS: dict[str, dict[str, list]] = {
    "STL": {"mu": [1e-3, 1e-2, 1e-1, 1.0]},
    # ELLA does best with an almost unregularised single-task fit (the basis regularises),
    # so it tunes its own ``mu`` rather than taking STL's; code_l1 stays at v1.0's e^-12.
    "ELLA": {"mu": [1e-3, 1e-2, 1e-1, 1.0], "n_components": [2, 3, 5]},
    # The FCL3 family tunes its own single-task ridge too (as ELLA does), the cluster weight
    # and the outlier scale; every variant tunes on its own.
    "FCL3": {"mu": [1e-2, 1e-1, 1.0], "lambda2": [0.5, 1.0, 5.0], "gamma": [0.5, 2.0]},
    "CL3": {"mu": [1e-2, 1e-1, 1.0], "lambda2": [0.5, 1.0, 5.0], "gamma": [0.5, 2.0]},
    "FCL3-woDecoder": {"mu": [1e-2, 1e-1, 1.0], "lambda2": [0.5, 1.0, 5.0], "gamma": [0.5, 2.0]},
    # the batch comparator: cluster and ridge strengths, number of clusters (benchmarks.cmtl)
    "CMTL": {"rho1": [0.1, 1.0, 10.0], "rho2": [0.01, 0.1, 1.0], "k": [2, 5]},
}
#: Model family -> engine class.
FAMILIES: dict[str, type[LifelongLearner]] = {
    "STL": STL, "ELLA": ELLA, "FCL3": FCL3, "CL3": CL3, "FCL3-woDecoder": FCL3WithoutDecoder, "CMTL": CMTL,
}
#: Families that learn all tasks at once (no order, no paper rule, no single-task ``mu``).
BATCH_FAMILIES = ("CMTL",)
#: Model name -> (family, order). ``order`` is "rand", "info", "onebyone", "adversarial" or
#: "batch" (all tasks at once).
MODELS: dict[str, tuple[str, str]] = {
    "STL": ("STL", "rand"),
    "ELLA-Rand": ("ELLA", "rand"),
    "ELLA-Info": ("ELLA", "info"),
    "CL3-Rand": ("CL3", "rand"),
    "FCL3-Rand": ("FCL3", "rand"),
    "FCL3-woDecoder-Rand": ("FCL3-woDecoder", "rand"),
    "FCL3-OneByOne": ("FCL3", "onebyone"),
    "CMTL": ("CMTL", "batch"),
    "FCL3-Adversarial": ("FCL3", "adversarial"),
    "ELLA-OneByOne": ("ELLA", "onebyone"),
    "ELLA-Adversarial": ("ELLA", "adversarial"),
}
#: What ``--orders`` adds to the default models (the paper's Table 2 and CMTL).
ORDER_MODELS = ("FCL3-Adversarial", "ELLA-OneByOne", "ELLA-Adversarial")
TABLE_MODELS = tuple(m for m in MODELS if m not in ORDER_MODELS)
#: Models that reuse another model's tuned hyper-parameters (when that model is run too): the
#: order variants, whose order depends on the model being tuned.
SHARES_TUNING = {"ELLA-Info": "ELLA-Rand", "FCL3-OneByOne": "FCL3-Rand", "FCL3-Adversarial": "FCL3-Rand",
                 "ELLA-OneByOne": "ELLA-Rand", "ELLA-Adversarial": "ELLA-Rand"}
#: The model every other one is tested against (paired over the runs).
REFERENCE = "FCL3-Rand"
#: What tuned runs add to every model: the paper's prediction rule (Table 2 is the paper's algorithm).
PAPER_RULE = {"task_models": "paper"}
FCL3_FAMILIES = ("FCL3", "CL3", "FCL3-woDecoder")
ONEBYONE_CLUSTERS = 3
VALIDATION_FRACTION = 0.3


def build(family: str, kind: str, params: dict[str, Any], seed: int) -> LifelongLearner:
    """A fresh learner of ``family``: the class's defaults modified by ``params``."""
    return FAMILIES[family](kind=kind, random_state=int(seed), **params)


def check_models(models: list[str]) -> list[str]:
    """``models`` unchanged; :class:`ValueError` naming the first unknown one."""
    for m in models:
        if m not in MODELS:
            raise ValueError(f"unknown model {m!r}; choose from {list(MODELS)}")
    return models


def _grid_points(grid: dict[str, list]) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = [{}]
    for name, values in grid.items():
        points = [{**p, name: v} for p in points for v in values]
    return points


# --------------------------------------------------------------------------- protocol pieces
Split = dict[str, tuple[np.ndarray, np.ndarray]]


def split_tasks(ds: Dataset, rng: np.random.Generator, fraction_first: float = 0.5) -> tuple[Split, Split]:
    """Random per-task split: ``floor(n * fraction_first)`` rows go to the first part."""
    first, second = {}, {}
    for tid, (X, y) in zip(ds.task_ids, ds.tasks):
        perm = rng.permutation(len(y))
        n1 = int(math.floor(len(y) * fraction_first))
        first[tid] = (X[perm[:n1]], y[perm[:n1]])
        second[tid] = (X[perm[n1:]], y[perm[n1:]])
    return first, second


def split_validation(train: Split, rng: np.random.Generator) -> tuple[Split, Split]:
    fit, val = {}, {}
    for tid, (X, y) in train.items():
        perm = rng.permutation(len(y))
        n_val = max(1, int(round(len(y) * VALIDATION_FRACTION)))
        fit[tid] = (X[perm[n_val:]], y[perm[n_val:]])
        val[tid] = (X[perm[:n_val]], y[perm[:n_val]])
    return fit, val


def run_splits(ds: Dataset, seed: int, run: int, val_splits: int) -> tuple[Split, Split, list[tuple[Split, Split]], list[str]]:
    """Run ``run``'s training and test halves, its ``val_splits`` (fit, validation) splits of
    the training halves and its random task order (seeded by ``[seed, run]``)."""
    rng = np.random.default_rng([seed, run])
    train, test = split_tasks(ds, rng)
    folds = [split_validation(train, rng) for _ in range(val_splits)]
    return train, test, folds, [ds.task_ids[i] for i in rng.permutation(ds.n_tasks)]


def stl_directions(ds: Dataset, train: Split, mu: float) -> np.ndarray:
    """The unit-normalised STL task vectors (bias excluded) learned from ``train``, one row per
    task of ``ds.task_ids``."""
    stl = STL(kind=ds.kind, mu=mu, task_models="paper")
    for tid in ds.task_ids:
        stl.learn(tid, *train[tid])
    V = np.array([stl.theta(t)[:-1] for t in ds.task_ids])
    return V / np.maximum(np.linalg.norm(V, axis=1, keepdims=True), 1e-12)


def adversarial_order(ds: Dataset, train: Split, rng: np.random.Generator, mu: float) -> list[str]:
    """A random first task, then always the remaining task least similar (cosine) to the mean
    direction of the tasks already learned (unit-normalised STL vectors)."""
    V = stl_directions(ds, train, mu)
    ids = list(ds.task_ids)
    first = int(rng.integers(len(ids)))
    order, left, total = [first], [i for i in range(len(ids)) if i != first], V[first].copy()
    while left:
        j = left[int(np.argmin(V[left] @ total))]
        order.append(j)
        left.remove(j)
        total += V[j]
    return [ids[i] for i in order]


def onebyone_order(ds: Dataset, train: Split, rng: np.random.Generator, mu: float) -> list[str]:
    """Cluster-by-cluster order: true clusters if known, else k-means on STL task vectors."""
    ids = list(ds.task_ids)
    if ds.clusters is not None:
        labels = np.asarray(ds.clusters)
    else:
        from scipy.cluster.vq import kmeans2

        V = stl_directions(ds, train, mu)
        k = min(ONEBYONE_CLUSTERS, len(ids))
        _, labels = kmeans2(V, k, seed=int(rng.integers(2**31)), minit="++")
    order: list[str] = []
    for c in rng.permutation(np.unique(labels)):
        members = [t for t, l in zip(ids, labels) if l == c]
        order.extend(members[i] for i in rng.permutation(len(members)))
    return order


def task_score(model: LifelongLearner, kind: str, tid: str, X: np.ndarray, y: np.ndarray) -> float:
    if kind == "regression":
        return rmse(y, model.predict(tid, X))
    return 100.0 * auc(y, model.decision_function(tid, X))


def mean_score(model: LifelongLearner, kind: str, sets: Split, ids=None) -> float:
    ids = list(sets) if ids is None else ids
    vals = [task_score(model, kind, t, *sets[t]) for t in ids]
    return float(np.nanmean(vals)) if np.any(np.isfinite(vals)) else float("nan")


def run_stream(
    model: LifelongLearner, train: Split, order: str | list[str], kind: str,
    test: Split | None = None, curve: bool = False,
) -> dict[str, Any]:
    """Feed the tasks one at a time; ``order="info"`` lets an ELLA model pick them (InfoMax)."""
    remaining = list(train)
    results, times, curve_vals, used = [], [], [], []
    while remaining:
        if order == "info":
            tid = model.select_next({t: train[t] for t in remaining})
        else:
            tid = order[len(used)]
        remaining.remove(tid)
        t0 = time.perf_counter()
        results.append(model.learn(tid, *train[tid]))
        times.append(1000.0 * (time.perf_counter() - t0))
        used.append(tid)
        if curve and test is not None:
            curve_vals.append(mean_score(model, kind, test, used))
    return {"results": results, "update_ms": times, "curve": curve_vals, "order": used}


def better(a: float, b: float, kind: str) -> bool:
    if not np.isfinite(a):
        return False
    if not np.isfinite(b):
        return True
    return a < b if kind == "regression" else a > b


def tune(
    family: str, order_kind: str, kind: str, folds: list[tuple[Split, Split]], order: str | list[str],
    base: dict[str, Any], seed: int, grid: dict[str, list],
) -> tuple[dict[str, Any], list]:
    """Pick the grid point with the best validation score, averaged over the (fit, validation)
    splits in ``folds`` (several random splits make the choice less noisy on small tasks)."""
    best, best_score, table = None, float("nan"), []
    for point in _grid_points(grid):
        params = {**base, **point}
        scores = []
        for fit, val in folds:
            model = build(family, kind, params, seed)
            run_stream(model, fit, order, kind)
            scores.append(mean_score(model, kind, val))
        score = float(np.mean(scores))
        table.append((point, score))
        if best is None or better(score, best_score, kind):
            best, best_score = params, score
    return best, table


# --------------------------------------------------------------------------- one benchmark
def run_benchmark(
    dataset: str, runs: int = 10, seed: int = 0, models: list[str] | None = None, tune_params: bool = True,
    data_dir: str | None = None, grids: dict[str, dict[str, list]] | None = None, progress: bool = True,
    val_splits: int = 1, curves: bool = True,
) -> dict[str, Any]:
    """Run the protocol; returns the JSON-able summary plus ``_raw`` data for the plots.

    ``curves=False`` skips the test error after every task (the learning-curve figure), which
    costs a prediction of every learned task after every update."""
    grids = GRIDS if grids is None else grids
    ds = load_dataset(dataset, data_dir, random_state=seed)
    kind = ds.kind
    models = list(TABLE_MODELS) if models is None else check_models(list(models))
    y_std = float(np.std(np.concatenate([y for _, y in ds.tasks])))
    per_model: dict[str, dict[str, Any]] = {m: {"scores": [], "std_scores": [], "update_ms": [], "params": [],
                                               "curves": [], "reps": [], "rep_tasks": [], "orders": [],
                                               "update_ms_runs": [], "learn_s": []}
                                           for m in models}
    raw: dict[str, Any] = {"first_run": {}}
    bar = progress_bar(total=runs * len(models), desc=f"{dataset}", enabled=progress)
    for r in range(runs):
        run_seed = seed + r
        train, test, folds, rand_order = run_splits(ds, seed, r, val_splits)
        order_rng = np.random.default_rng([seed, r, 1])
        chosen: dict[str, dict[str, Any]] = {}
        # the single-task ridge: tuned on STL (whether or not STL is reported)
        stl_params: dict[str, Any] = dict(PAPER_RULE) if tune_params else {}
        if tune_params:
            stl_params, _ = tune("STL", "rand", kind, folds, rand_order, stl_params, run_seed, grids["STL"])
        shared = {"mu": stl_params["mu"]} if "mu" in stl_params else {}
        computed_orders: dict[str, list[str]] = {}
        sources = [m for m in models if m in SHARES_TUNING.values()]
        for name in sources + [m for m in models if m not in sources]:
            family, order_kind = MODELS[name]
            if order_kind in ("rand", "batch"):
                order: str | list[str] = rand_order
            elif order_kind == "info":
                order = "info"
            else:
                if order_kind not in computed_orders:
                    make = onebyone_order if order_kind == "onebyone" else adversarial_order
                    computed_orders[order_kind] = make(ds, train, order_rng, shared.get("mu", STL().mu))
                order = computed_orders[order_kind]
            batch = family in BATCH_FAMILIES
            if family == "STL":
                params = dict(stl_params)
            elif not tune_params:
                params = {}
            elif name in SHARES_TUNING and SHARES_TUNING[name] in chosen:
                params = chosen[SHARES_TUNING[name]]
            else:
                base = {} if batch else {**PAPER_RULE, **({} if "mu" in grids[family] else shared)}
                params, _ = tune(family, order_kind, kind, folds, order, base, run_seed, grids[family])
            chosen[name] = params
            model = build(family, kind, params, run_seed)
            out = run_stream(model, train, order, kind, test=test, curve=curves and not batch)
            learn_s = sum(out["update_ms"]) / 1000.0
            if batch:
                learn_s += model.fit().fit_seconds
            score = mean_score(model, kind, test)
            rec = per_model[name]
            rec["scores"].append(score)
            if kind == "regression":
                rec["std_scores"].append(float(np.mean([task_score(model, kind, t, *test[t]) for t in test]) / y_std))
            rec["update_ms"].extend(out["update_ms"])
            rec["update_ms_runs"].append(out["update_ms"])
            rec["learn_s"].append(learn_s)
            rec["params"].append({k: (float(v) if isinstance(v, (float, np.floating)) else v) for k, v in params.items()})
            rec["curves"].append(out["curve"])
            rec["orders"].append(out["order"])
            if family in FCL3_FAMILIES:
                rec["reps"].append(int(out["results"][-1].n_representatives))
                rec["rep_tasks"].append(list(model.representatives))
            if r == 0:
                raw["first_run"][name] = {"results": out["results"], "order": out["order"],
                                          "theta": {t: model.theta(t) for t in ds.task_ids}}
            bar.update(1)
            bar.set_postfix_str(f"run {r + 1}/{runs} {name} {score:.3f}")
    bar.close()
    summary: dict[str, Any] = {
        "dataset": dataset, "metric": "rmse" if kind == "regression" else "auc", "runs": runs, "seed": seed,
        "tuned": tune_params, "n_tasks": ds.n_tasks, "n_features": ds.n_features, "models": {},
    }
    if dataset == "disjoint":
        summary["disjoint"] = {**ds.info, "target_std": y_std}
    for name in models:
        rec = per_model[name]
        mean, se = mean_se(rec["scores"])
        entry: dict[str, Any] = {
            "mean": mean, "se": se, "per_run": rec["scores"],
            "update_ms_median": float(np.median(rec["update_ms"])), "update_ms_max": float(np.max(rec["update_ms"])),
            "params": rec["params"], "learn_s_per_run": rec["learn_s"], "update_ms_per_run": rec["update_ms_runs"],
        }
        if MODELS[name][0] in BATCH_FAMILIES:  # its learn calls only store rows: no update times
            entry["update_ms_median"] = entry["update_ms_max"] = None
            entry.pop("update_ms_per_run")
        if dataset == "disjoint":
            m2, s2 = mean_se(rec["std_scores"])
            entry["rmse_standardized"] = {"mean": m2, "se": s2, "per_run": rec["std_scores"]}
        if rec["reps"]:
            entry["n_representatives"] = {"mean": float(np.mean(rec["reps"])), "per_run": rec["reps"]}
            entry["representatives"] = rec["rep_tasks"]
            if ds.clusters is not None:
                cl = dict(zip(ds.task_ids, ds.clusters.tolist()))
                entry["representative_clusters"] = [[cl[t] for t in reps] for reps in rec["rep_tasks"]]
                entry["clusters_covered"] = [len(set(cl[t] for t in reps)) for reps in rec["rep_tasks"]]
        summary["models"][name] = entry
    summary["significance"] = significance(summary)
    summary["order_tests"] = order_tests(summary)
    summary["_raw"] = {**raw, "curves": {m: per_model[m]["curves"] for m in models}, "dataset": ds}
    return summary


# --------------------------------------------------------------------------- significance
def paired_tests(reference: list[float], other: list[float], kind: str) -> dict[str, Any]:
    """Paired two-sided tests of ``reference`` against ``other`` (scores of the same runs):
    the t-test and the Wilcoxon signed-rank test (scipy.stats; exact for small samples, ``None``
    when every difference is zero or there are fewer than 2 runs). ``wins`` counts the runs
    where the reference is better (lower RMSE, higher AUC)."""
    from scipy import stats

    a, b = np.asarray(reference, dtype=float), np.asarray(other, dtype=float)
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    diff = b - a
    out: dict[str, Any] = {"n": int(a.size), "mean_difference": float(np.mean(diff)) if a.size else None,
                           "wins": int(np.sum(diff > 0) if kind == "regression" else np.sum(diff < 0)),
                           "t_p": None, "wilcoxon_p": None}
    if a.size >= 2 and np.any(diff != 0):
        out["t_p"] = float(stats.ttest_rel(a, b).pvalue)
        out["wilcoxon_p"] = float(stats.wilcoxon(a, b).pvalue)
    return out


def significance(summary: dict[str, Any], reference: str = REFERENCE) -> dict[str, Any] | None:
    """:func:`paired_tests` of ``reference`` against every other model of ``summary``
    (``None`` when ``reference`` was not run)."""
    models = summary["models"]
    if reference not in models:
        return None
    kind = "regression" if summary["metric"] == "rmse" else "classification"
    ref = models[reference]["per_run"]
    return {"reference": reference, "differences": "other model minus reference",
            "tests": {m: paired_tests(ref, e["per_run"], kind) for m, e in models.items() if m != reference}}


def order_tests(summary: dict[str, Any]) -> dict[str, Any]:
    """Each order variant of FCL3 and ELLA against the family's random order (paired tests)."""
    models = summary["models"]
    kind = "regression" if summary["metric"] == "rmse" else "classification"
    out = {}
    for name in models:
        family, order = MODELS[name]
        ref = f"{family}-Rand"
        if family in ("FCL3", "ELLA") and order != "rand" and ref in models:
            out[f"{name} vs {ref}"] = paired_tests(models[ref]["per_run"], models[name]["per_run"], kind)
    return out


def _p(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2g}" if value >= 1e-3 else f"{value:.1e}"


# --------------------------------------------------------------------------- output
def format_table(summary: dict[str, Any]) -> str:
    metric = summary["metric"]
    head = "RMSE" if metric == "rmse" else "AUC %"
    lines = [f"{summary['dataset']}: {summary['runs']} run(s), mean ± s.e. ({'tuned on validation' if summary['tuned'] else 'defaults'})"]
    extra = summary["dataset"] == "disjoint"
    sig = summary.get("significance")
    cols = (f"{'model':<22}{head:>20}" + (f"{'std. RMSE':>20}" if extra else "") + f"{'update ms med/max':>22}{'reps':>8}"
            + (f"{'learn s':>9}{'t-test p':>10}{'Wilcoxon p':>12}{'wins':>6}" if sig else ""))
    lines += [cols, "-" * len(cols)]
    for name, e in summary["models"].items():
        se = e["se"]
        se_txt = "nan" if se is None or not np.isfinite(se) else f"{se:.3f}"
        row = f"{name:<22}{e['mean']:>12.3f} ± {se_txt:<5}"
        if extra:
            s = e["rmse_standardized"]
            s_se = "nan" if s["se"] is None or not np.isfinite(s["se"]) else f"{s['se']:.3f}"
            row += f"{s['mean']:>12.3f} ± {s_se:<5}"
        if e["update_ms_median"] is None:
            row += f"{'(batch)':>22}"
        else:
            row += f"{e['update_ms_median']:>12.2f} / {e['update_ms_max']:<7.1f}"
        row += f"{e['n_representatives']['mean']:>8.1f}" if "n_representatives" in e else f"{'':>8}"
        if sig:
            row += f"{np.mean(e['learn_s_per_run']):>9.2f}"
            t = sig["tests"].get(name)
            row += (f"{_p(t['t_p']):>10}{_p(t['wilcoxon_p']):>12}{t['wins']:>3}/{t['n']:<2}" if t
                    else f"{'(reference)':>22}")
        lines.append(row)
    if sig:
        lines.append(f"p: paired two-sided tests of {sig['reference']} against each model over the runs; "
                     f"wins: runs where {sig['reference']} is better; learn s: total learning time per run")
    return "\n".join(lines)


def write_plots(summary: dict[str, Any], out_dir: str) -> list[str]:
    """Error vs tasks learned, Z^t heat-maps of the FCL3 models, Disjoint correlation matrices."""
    plt = matplotlib_pyplot()
    os.makedirs(out_dir, exist_ok=True)
    raw = summary["_raw"]
    ds: Dataset = raw["dataset"]
    name = summary["dataset"]
    ylabel = "mean test RMSE over learned tasks" if summary["metric"] == "rmse" else "mean test AUC % over learned tasks"
    written = []

    if any(any(curves) for curves in raw["curves"].values()):  # none with --no-curves
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for model, curves in raw["curves"].items():
            if not any(curves):
                continue
            arr = np.array(curves, dtype=float)
            x = np.arange(1, arr.shape[1] + 1)
            m = np.nanmean(arr, axis=0)
            ax.plot(x, m, label=model, lw=1.6)
            if arr.shape[0] > 1:
                se = np.nanstd(arr, axis=0, ddof=1) / np.sqrt(arr.shape[0])
                ax.fill_between(x, m - se, m + se, alpha=0.15)
        ax.set_xlabel("number of tasks learned")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{name}: error vs number of tasks learned ({summary['runs']} run(s))")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = os.path.join(out_dir, f"{name}_learned_tasks.png")
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        written.append(path)

    cl = dict(zip(ds.task_ids, ds.clusters.tolist())) if ds.clusters is not None else None
    for model, first in raw["first_run"].items():
        results = first["results"]
        if not results or results[-1].assignment is None:
            continue
        reps: list[str] = []
        for res in results:
            for t in res.assignment_tasks:
                if t not in reps:
                    reps.append(t)
            if res.new_representative and res.task_id not in reps:
                reps.append(res.task_id)
        H = np.full((len(results), len(reps) + 1), np.nan)
        for i, res in enumerate(results):
            for t, z in zip(res.assignment_tasks, res.assignment[:-1]):
                H[i, reps.index(t)] = z
            H[i, -1] = res.assignment[-1]
        fig, ax = plt.subplots(figsize=(max(5.5, 0.5 * len(reps) + 4), max(4.0, 0.12 * len(results) + 1.5)))
        im = ax.imshow(H, aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
        for i, res in enumerate(results):
            if res.new_representative:
                ax.plot(reps.index(res.task_id), i, marker="*", color="red", ms=9, mec="white")
        labels = [f"{t}" + (f"\n(c{cl[t]})" if cl else "") for t in reps] + ["outlier"]
        ax.set_xticks(range(len(reps) + 1))
        ax.set_xticklabels(labels, rotation=90 if len(reps) > 8 else 0, fontsize=7)
        step = max(1, len(results) // 30)
        ax.set_yticks(range(0, len(results), step))
        ax.set_yticklabels([results[i].task_id + (f" c{cl[results[i].task_id]}" if cl else "")
                            for i in range(0, len(results), step)], fontsize=6)
        ax.set_xlabel("representative task (columns in order of appearance) + outlier slot")
        ax.set_ylabel("task, in arrival order")
        ax.set_title(f"{name} {model}: assignment Z^t (run 1; * = became a representative)", fontsize=9)
        fig.colorbar(im, ax=ax, label="z")
        fig.tight_layout()
        path = os.path.join(out_dir, f"{name}_{model}_assignment.png")
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        written.append(path)

    if ds.true_weights is not None:
        ids = list(ds.task_ids)
        mats = [("Ground truth", np.corrcoef(ds.true_weights))]
        for model, first in raw["first_run"].items():
            V = np.array([first["theta"][t][:-1] for t in ids])
            mats.append((model, np.corrcoef(V)))
        n = len(mats)
        cols = min(4, n)
        rows = int(math.ceil(n / cols))
        fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.2 * rows), squeeze=False)
        for ax in axes.ravel():
            ax.axis("off")
        for ax, (title, C) in zip(axes.ravel(), mats):
            ax.axis("on")
            ax.imshow(np.abs(C), cmap="Greys", vmin=0, vmax=1, interpolation="nearest")
            ax.set_title(title, fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
        fig.suptitle("Disjoint: |correlation| of task weight vectors (tasks ordered by true cluster; run 1)", fontsize=10)
        fig.tight_layout()
        path = os.path.join(out_dir, f"{name}_correlation.png")
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        written.append(path)
    return written


def save_figure(plt, fig, path: str, dpi: int = 110) -> str:
    """Lay out, write and close ``fig``; returns ``path``."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- CLI
def finish(result: Any, report: str, json_out: str | None, figures=None) -> int:
    """The end of a benchmark's command: print ``report``, write the figures (``figures()``
    returns their paths) and the JSON; exit status 0."""
    if report:
        print(report)
    for path in figures() if figures else []:
        print(f"wrote {path}", file=sys.stderr)
    if json_out:
        print(f"wrote {write_json(json_out, result)}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.paper", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", choices=DATASETS, required=True)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", dest="json_out", help="write the summary here")
    ap.add_argument("--data-dir", help="directory of the real data sets (default: $FCL3_DATA_DIR, ../shared/data)")
    ap.add_argument("--plots", help="write the figures to this directory")
    ap.add_argument("--models", help="comma-separated subset of: " + ", ".join(MODELS))
    ap.add_argument("--orders", action="store_true",
                    help="add the task-order variants " + ", ".join(ORDER_MODELS) + " (tuned as their -Rand model)")
    ap.add_argument("--no-tune", action="store_true", help="use the classes' own defaults instead of validation tuning")
    ap.add_argument("--val-splits", type=int, default=3,
                    help="random fit/validation splits of the training halves averaged when tuning")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--no-curves", action="store_true",
                    help="skip the test error after every task (no learning-curve figure; faster)")
    args = ap.parse_args(argv)
    models = [m.strip() for m in args.models.split(",")] if args.models else None
    if args.orders:
        models = list(dict.fromkeys((models or list(TABLE_MODELS)) + list(ORDER_MODELS)))
    try:
        summary = run_benchmark(args.dataset, args.runs, args.seed, models, not args.no_tune, args.data_dir,
                                progress=not args.quiet, val_splits=args.val_splits, curves=not args.no_curves)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = "\n".join([format_table(summary)] + [
        f"order: {pair}: mean difference {t['mean_difference']:+.4g}, t-test p {_p(t['t_p'])}, "
        f"Wilcoxon p {_p(t['wilcoxon_p'])}" for pair, t in summary["order_tests"].items()])
    return finish(summary, report, args.json_out, args.plots and (lambda: write_plots(summary, args.plots)))


if __name__ == "__main__":
    raise SystemExit(main())
