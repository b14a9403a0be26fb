"""Learning time of every Table 2 model on a paper data set (the paper's runtime figure)::

    python -m benchmarks.runtime --dataset school [--params docs/results/table2_school.json]
           [--repeats 3] [--seed 0] [--json out.json] [--plots DIR] [--data-dir DIR] [--quiet]

Every model learns the training halves of run 1 of the Table 2 protocol
(:mod:`benchmarks.paper`, ``--val-splits 1``) in its own order, with the hyper-parameters that
run chose (``--params``: a JSON written by ``python -m benchmarks.paper``; without it the
classes' defaults). ``--repeats`` passes go over the models in a new random order each time
(interleaved, so that load from other processes spreads over all models); the figures are
medians over the passes. Recorded: the total learning time (the sum of the ``learn`` calls;
CMTL's fit of all tasks at once; ELLA-Info's choice of the next task is not counted) and the
time of every update against the number of tasks learned before it. Run with
``OPENBLAS_NUM_THREADS=1``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import numpy as np

from .common import machine, matplotlib_pyplot, progress_bar
from .datasets import DATASETS, load_dataset
from .paper import (BATCH_FAMILIES, MODELS, TABLE_MODELS, adversarial_order, build, check_models, finish,
                    onebyone_order, run_splits, run_stream, save_figure)


def tuned_params(path: str | None) -> dict[str, dict[str, Any]]:
    """Each model's hyper-parameters of run 1 in a ``benchmarks.paper`` JSON (``{}`` without one)."""
    if path is None:
        return {}
    with open(path) as fh:
        data = json.load(fh)
    return {m: e["params"][0] for m, e in data["models"].items() if e.get("params")}


def run_runtime(dataset: str, models: list[str] | None = None, params: dict[str, dict[str, Any]] | None = None,
                repeats: int = 3, seed: int = 0, data_dir: str | None = None, progress: bool = True) -> dict[str, Any]:
    ds = load_dataset(dataset, data_dir, random_state=seed)
    models = list(TABLE_MODELS) if models is None else check_models(list(models))
    params = params or {}
    train, _, _, rand_order = run_splits(ds, seed, 0, 1)
    order_rng = np.random.default_rng([seed, 0, 1])
    mu = params.get("STL", {}).get("mu", 0.1)
    orders = {"rand": rand_order, "batch": rand_order, "info": "info",
              "onebyone": onebyone_order(ds, train, order_rng, mu),
              "adversarial": adversarial_order(ds, train, order_rng, mu)}
    times: dict[str, dict[str, list]] = {m: {"total_s": [], "update_ms": []} for m in models}
    rng = np.random.default_rng([seed, 2])
    bar = progress_bar(total=repeats * len(models), desc=f"{dataset} runtime", enabled=progress)
    for _ in range(repeats):
        for i in rng.permutation(len(models)):
            name = models[i]
            family, order_kind = MODELS[name]
            model = build(family, ds.kind, params.get(name, {}), seed)
            out = run_stream(model, train, orders[order_kind], ds.kind)
            total = sum(out["update_ms"]) / 1000.0
            if family in BATCH_FAMILIES:
                total += model.fit().fit_seconds
            else:
                times[name]["update_ms"].append(out["update_ms"])
            times[name]["total_s"].append(total)
            bar.update(1)
            bar.set_postfix_str(f"{name} {total:.2f} s")
    bar.close()
    res: dict[str, Any] = {"dataset": dataset, "n_tasks": ds.n_tasks, "repeats": repeats, "seed": seed,
                           "machine": machine(), "models": {}}
    for name in models:
        t = times[name]
        entry: dict[str, Any] = {"params": params.get(name, {}), "total_s_median": float(np.median(t["total_s"])),
                                 "total_s": t["total_s"]}
        if t["update_ms"]:
            entry["update_ms_median_by_tasks_learned"] = np.median(np.array(t["update_ms"]), axis=0).tolist()
        res["models"][name] = entry
    return res


def format_report(res: dict[str, Any]) -> str:
    lines = [f"{res['dataset']} ({res['n_tasks']} tasks): learning time, median of {res['repeats']} interleaved passes",
             f"{'model':<22}{'total s':>10}{'update ms: first 10%':>22}{'last 10%':>10}"]
    for name, e in res["models"].items():
        row = f"{name:<22}{e['total_s_median']:>10.3f}"
        u = e.get("update_ms_median_by_tasks_learned")
        if u:
            n = max(1, len(u) // 10)
            row += f"{np.median(u[:n]):>22.2f}{np.median(u[-n:]):>10.2f}"
        else:
            row += f"{'(batch: one fit)':>22}"
        lines.append(row)
    return "\n".join(lines)


def write_plots(results: list[dict[str, Any]], out_dir: str) -> list[str]:
    """``runtime_total.png`` (a bar per model, a panel per data set) and
    ``runtime_per_update.png`` (update time against the number of tasks learned)."""
    plt = matplotlib_pyplot()
    os.makedirs(out_dir, exist_ok=True)
    names = list(dict.fromkeys(m for r in results for m in r["models"]))
    colors = {m: f"C{i % 10}" for i, m in enumerate(names)}
    written = []
    fig, axes = plt.subplots(1, len(results), figsize=(3.8 * len(results), 4.2), squeeze=False)
    for ax, r in zip(axes[0], results):
        ms = list(r["models"])
        vals = [r["models"][m]["total_s_median"] for m in ms]
        ax.bar(range(len(ms)), vals, color=[colors[m] for m in ms])
        ax.set_xticks(range(len(ms)))
        ax.set_xticklabels(ms, rotation=60, ha="right", fontsize=7)
        ax.set_yscale("log")
        ax.set_title(f"{r['dataset']} ({r['n_tasks']} tasks)", fontsize=10)
        ax.grid(axis="y", alpha=0.3, which="both")
    axes[0][0].set_ylabel("total learning time, s (log)")
    fig.suptitle("Total learning time of the training halves (median of interleaved passes; one BLAS thread)",
                 fontsize=10)
    written.append(save_figure(plt, fig, os.path.join(out_dir, "runtime_total.png")))

    fig, axes = plt.subplots(1, len(results), figsize=(3.8 * len(results), 3.8), squeeze=False)
    for ax, r in zip(axes[0], results):
        for m, e in r["models"].items():
            u = e.get("update_ms_median_by_tasks_learned")
            if not u:
                continue
            x = np.arange(len(u))
            w = max(1, len(u) // 15)  # running median over w updates against the machine's noise
            smooth = [np.median(u[max(0, i - w + 1): i + 1]) for i in range(len(u))]
            ax.plot(x, smooth, color=colors[m], lw=1.3, label=m)
        ax.set_yscale("log")
        ax.set_xlabel("tasks learned before the update")
        ax.set_title(r["dataset"], fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("update time, ms (log; running median)")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("Time of one update (a task's whole training half) against the number of tasks learned",
                 fontsize=10)
    written.append(save_figure(plt, fig, os.path.join(out_dir, "runtime_per_update.png")))
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.runtime", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", choices=DATASETS, action="append", required=True,
                    help="a data set (repeat the option for several: one figure panel each)")
    ap.add_argument("--params", action="append", default=[],
                    help="a benchmarks.paper JSON per --dataset, in the same order (run 1's tuned parameters)")
    ap.add_argument("--models", help="comma-separated subset of: " + ", ".join(MODELS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir")
    ap.add_argument("--json", dest="json_out", help="write the results (a list, one per data set) here")
    ap.add_argument("--plots", help="write runtime_total.png and runtime_per_update.png to this directory")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.params and len(args.params) != len(args.dataset):
        print("error: give one --params per --dataset, or none", file=sys.stderr)
        return 2
    models = [m.strip() for m in args.models.split(",")] if args.models else None
    results = []
    try:
        for i, name in enumerate(args.dataset):
            params = tuned_params(args.params[i] if args.params else None)
            results.append(run_runtime(name, models, params, args.repeats, args.seed, args.data_dir,
                                       progress=not args.quiet))
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return finish(results, "\n".join(map(format_report, results)), args.json_out,
                  args.plots and (lambda: write_plots(results, args.plots)))


if __name__ == "__main__":
    raise SystemExit(main())
