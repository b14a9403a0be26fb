"""FCL3's test error over its main hyper-parameters, one at a time (the paper's parameter study)::

    python -m benchmarks.sensitivity --dataset school --runs 3 [--seed 0] [--json out.json]
           [--plot fig.png] [--data-dir DIR] [--quiet]

Each of ``lambda2`` (the weight of the representatives' term), ``gamma`` (the outlier
scale), ``mu`` (the single-task ridge) and ``n_components`` (the decoder's width) is varied
over :data:`GRIDS` with every other parameter at :class:`core.FCL3`'s defaults, for the
defaults' prediction (empirical-Bayes task models) and for the paper's rule
(``task_models="paper"``, ``theta_t = D s_t``). Run ``r`` of seed ``s`` has the 50/50 split and
the random order of the same run of ``python -m benchmarks.paper --val-splits 1``,
and the score is the mean test error over tasks (RMSE, or AUC in %), mean ± standard error
over runs. This is a study of the test error, not a tuning: nothing here picks a value.
"""
from __future__ import annotations

import argparse
import inspect
import sys
from typing import Any

import numpy as np

from core import FCL3
from core.metrics import mean_se

from .common import matplotlib_pyplot, progress_bar
from .datasets import DATASETS, load_dataset
from .paper import finish, mean_score, run_splits, run_stream, save_figure

#: The values tried per parameter (each one with the others at the class's defaults).
GRIDS: dict[str, list] = {
    "lambda2": [0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 20.0],
    "gamma": [0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0],
    "mu": [1e-3, 1e-2, 0.1, 1.0, 10.0],
    "n_components": [1, 2, 3, 5, 8, 12],
}
#: The two prediction rules compared: the class's defaults and the paper's rule.
RULES = {"defaults": {}, "paper rule": {"task_models": "paper"}}


def defaults() -> dict[str, Any]:
    """:class:`core.FCL3`'s default value of every parameter of :data:`GRIDS`."""
    sig = inspect.signature(FCL3.__init__).parameters
    return {name: sig[name].default for name in GRIDS}


def run_sensitivity(dataset: str, runs: int = 3, seed: int = 0, data_dir: str | None = None,
                    grids: dict[str, list] | None = None, progress: bool = True) -> dict[str, Any]:
    """Test scores of every (rule, parameter, value), per run; the default point is fitted once
    per rule and run and shared by the four parameters."""
    grids = GRIDS if grids is None else grids
    ds = load_dataset(dataset, data_dir, random_state=seed)
    base = defaults()
    # widths beyond the bias-augmented feature count are not identifiable: leave them out
    grid = {p: [v for v in vals if p != "n_components" or v <= ds.n_features + 1] for p, vals in grids.items()}
    points = sorted({(p, v) for p, vals in grid.items() for v in vals if v != base[p]}, key=str)
    jobs = [(rule, p, v) for rule in RULES for p, v in [(None, None)] + points]
    scores: dict[tuple, list[float]] = {job: [] for job in jobs}
    bar = progress_bar(total=runs * len(jobs), desc=f"{dataset} sensitivity", enabled=progress)
    for r in range(runs):
        train, test, _, order = run_splits(ds, seed, r, 1)
        for job in jobs:
            rule, p, v = job
            params = {**RULES[rule], **({} if p is None else {p: v})}
            model = FCL3(kind=ds.kind, random_state=seed + r, **params)
            run_stream(model, train, order, ds.kind)
            scores[job].append(mean_score(model, ds.kind, test))
            bar.update(1)
            bar.set_postfix_str(f"run {r + 1}/{runs} {rule} {p or 'default'}={v if p else ''}")
    bar.close()
    out: dict[str, Any] = {"dataset": dataset, "metric": "rmse" if ds.kind == "regression" else "auc",
                           "runs": runs, "seed": seed, "defaults": base, "grids": grid, "rules": {}}
    for rule in RULES:
        default_scores = scores[(rule, None, None)]
        curves = {}
        for p, vals in grid.items():
            rows = []
            for v in vals:
                s = default_scores if v == base[p] else scores[(rule, p, v)]
                m, se = mean_se(s)
                rows.append({"value": v, "mean": m, "se": se, "per_run": s})
            curves[p] = rows
        m, se = mean_se(default_scores)
        out["rules"][rule] = {"default": {"mean": m, "se": se, "per_run": default_scores}, "curves": curves}
    return out


def format_report(res: dict[str, Any]) -> str:
    unit = "RMSE" if res["metric"] == "rmse" else "AUC %"
    lines = [f"{res['dataset']}: FCL3 test {unit} over {res['runs']} run(s), one parameter at a time "
             f"(defaults {res['defaults']})"]
    for rule, e in res["rules"].items():
        lines.append(f"  {rule}: at the defaults {e['default']['mean']:.4g} ± {e['default']['se']:.2g}")
        for p, rows in e["curves"].items():
            cells = "  ".join(f"{r['value']:g}: {r['mean']:.4g}" + ("*" if r["value"] == res["defaults"][p] else "")
                              for r in rows)
            lines.append(f"    {p:<13}{cells}")
    lines.append("  (* = the default)")
    return "\n".join(lines)


def write_plot(res: dict[str, Any], path: str) -> str:
    """One panel per parameter, a line per rule (± s.e. over runs), the default marked."""
    plt = matplotlib_pyplot()
    params = list(res["grids"])
    fig, axes = plt.subplots(1, len(params), figsize=(3.6 * len(params), 3.6), squeeze=False)
    unit = "test RMSE" if res["metric"] == "rmse" else "test AUC %"
    for ax, p in zip(axes[0], params):
        for (rule, e), color in zip(res["rules"].items(), ("C0", "C3")):
            rows = e["curves"][p]
            x = np.array([r["value"] for r in rows], dtype=float)
            m = np.array([np.nan if r["mean"] is None else r["mean"] for r in rows], dtype=float)
            se = np.array([0.0 if r["se"] is None or not np.isfinite(r["se"]) else r["se"] for r in rows])
            ax.errorbar(x, m, yerr=se, marker="o", ms=3.5, lw=1.4, capsize=2, color=color, label=rule)
            d = e["default"]["mean"]
            ax.plot([res["defaults"][p]], [d], marker="*", ms=14, color=color, mec="black", zorder=5)
        ax.axvline(res["defaults"][p], color="grey", ls=":", lw=1)
        if p != "n_components":
            ax.set_xscale("log")
        ax.set_xlabel(f"{p} (default {res['defaults'][p]:g}, dotted, *)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(unit)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{res['dataset']}: FCL3 {unit} over one hyper-parameter at a time "
                 f"(others at the defaults; {res['runs']} runs, mean ± s.e.)", fontsize=10)
    return save_figure(plt, fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.sensitivity", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", choices=DATASETS, required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", help="directory of the real data sets (default: $FCL3_DATA_DIR, ../shared/data)")
    ap.add_argument("--json", dest="json_out", help="write the results here")
    ap.add_argument("--plot", help="write the figure here (PNG)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    try:
        res = run_sensitivity(args.dataset, args.runs, args.seed, args.data_dir, progress=not args.quiet)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return finish(res, format_report(res), args.json_out, args.plot and (lambda: [write_plot(res, args.plot)]))


if __name__ == "__main__":
    raise SystemExit(main())
