"""Update-speed benchmark: the time of single ``learn`` calls against the number of tasks
already learned, run from the command line::

    python -m benchmarks.speed [--json speed.json] [--plots figs/] [--models FCL3-Rand,ELLA-Rand]
           [--datasets school --data-dir DIR] [--seed 0] [--quiet]

Streams of synthetic clustered tasks (:data:`SPEED_CONFIGS`) and, with ``--datasets``, the
streams of real data sets (every task whole, in a seeded random order, with ``p`` = 5 and 20
components). Wall-clock and process CPU time of every update are recorded (on a shared
machine CPU time is the steadier of the two), and the time of the updated task's first
prediction after it, when its empirical-Bayes task model is computed. ``FCL3-Rand:paper``
is FCL3 with the paper's prediction rule: what the task models add is the difference. Run it with ``OPENBLAS_NUM_THREADS=1`` (recorded
in the output): the matrices are small, and BLAS threads only add synchronisation.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Any

import numpy as np

from .common import blas_threads, matplotlib_pyplot, progress_bar, write_json
from .datasets import REAL_DATASETS, load_dataset
from .paper import MODELS, build, check_models

SPEED_CONFIGS = [  # (n_features, n_components, n_tasks, n_environments)
    (28, 5, 150, 4),
    (28, 20, 150, 4),
    (28, 20, 150, 24),  # more environments than components: every column of D is in use
    (128, 20, 60, 4),
    (128, 20, 60, 24),
]
DEFAULT_MODELS = ("FCL3-Rand", "FCL3-Rand:paper", "ELLA-Rand")
#: A model name ending in this runs the paper's prediction rule (``task_models="paper"``):
#: the same library learning, without the empirical-Bayes task models.
PAPER_SUFFIX = ":paper"


def speed_benchmark(configs=None, n_samples: int = 50, seed: int = 0, models=None,
                    progress: bool = True, datasets: tuple[str, ...] = (), data_dir: str | None = None,
                    dataset_components: tuple[int, ...] = (5, 20)) -> dict[str, Any]:
    """Time single updates vs the number of tasks already learned on synthetic clustered data
    (``configs``, default :data:`SPEED_CONFIGS`) and, for each name in ``datasets``, on that real data set's stream (every task whole, in
    a seeded random order, with ``n_components`` in ``dataset_components``).

    Synthetic tasks cycle through ``n_environments`` centres. With 4 environments FCL3 seeds
    and uses only 4 of the ``p`` columns of ``D`` (the others decouple and cost nothing);
    with 24 every column is in use, the worst case for the decoder solve. Wall-clock and
    process CPU time are both recorded: on a shared machine CPU time is the steadier of the two.
    """
    configs = SPEED_CONFIGS if configs is None else configs
    models = list(models or DEFAULT_MODELS)
    check_models([m.removesuffix(PAPER_SUFFIX) for m in models])
    for name in models:
        if MODELS[name.removesuffix(PAPER_SUFFIX)][0] == "STL":
            raise ValueError(f"{name} has no components to time against; choose a model with a basis")
    real = [load_dataset(name, data_dir, random_state=seed) for name in datasets]  # a missing file fails now
    out: dict[str, Any] = {"n_samples_per_task": n_samples, "blas_threads": blas_threads(), "configs": []}
    for config in configs:
        d, p, T = config[:3]
        n_env = config[3] if len(config) > 3 else 4
        rng = np.random.default_rng([seed, d, p, n_env])
        centers = rng.normal(size=(n_env, d))
        tasks = []
        for t in range(T):
            w = centers[t % n_env] + 0.3 * rng.normal(size=d)
            X = rng.normal(size=(n_samples, d))
            tasks.append((X, X @ w + rng.normal(size=n_samples)))
        cfg: dict[str, Any] = {"data": "synthetic", "n_features": d, "n_components": p, "n_tasks": T,
                               "n_environments": n_env, "models": {}}
        for name in models:
            cfg["models"][name] = _time_stream(name, "regression", tasks, p, seed,
                                               f"speed d={d} p={p} env={n_env} {name}", progress)
        out["configs"].append(cfg)
    for dataset, ds in zip(datasets, real):
        order = np.random.default_rng(seed).permutation(ds.n_tasks)
        tasks = [ds.tasks[i] for i in order]
        for p in dataset_components:
            cfg = {"data": dataset, "n_features": ds.n_features, "n_components": p, "n_tasks": ds.n_tasks,
                   "n_environments": None, "models": {}}
            for name in models:
                cfg["models"][name] = _time_stream(name, ds.kind, tasks, p, seed,
                                                   f"speed {dataset} p={p} {name}", progress)
            out["configs"].append(cfg)
    return out


def _time_stream(name: str, kind: str, tasks, n_components: int, seed: int, label: str,
                 progress: bool) -> dict[str, Any]:
    """Learn ``tasks`` one at a time with model ``name`` and record each update's time, and the
    time of the updated task's first prediction after it (its task model is computed then)."""
    family, _ = MODELS[name.removesuffix(PAPER_SUFFIX)]
    params = {"n_components": n_components}
    if name.endswith(PAPER_SUFFIX):
        params["task_models"] = "paper"
    model = build(family, kind, params, seed)
    times, cpu, first = [], [], []
    for t in progress_bar(range(len(tasks)), desc=label, enabled=progress):
        t0, c0 = time.perf_counter(), time.process_time()
        model.learn(f"t{t}", *tasks[t])
        t1, c1 = time.perf_counter(), time.process_time()
        model.theta(f"t{t}")
        first.append(1000.0 * (time.perf_counter() - t1))
        times.append(1000.0 * (t1 - t0))
        cpu.append(1000.0 * (c1 - c0))
    times_a = np.array(times)
    q = max(1, len(tasks) // 5)
    entry = {"update_ms_median": float(np.median(times_a)), "update_ms_max": float(times_a.max()),
             "update_cpu_ms_median": float(np.median(cpu)),
             "first_predict_ms_median": float(np.median(first)),
             "median_first_fifth": float(np.median(times_a[:q])),
             "median_last_fifth": float(np.median(times_a[-q:])), "update_ms": times}
    res = getattr(model, "representatives", None)
    if res is not None:
        entry["n_representatives"] = len(res)
    D = getattr(model, "D_", None)
    if D is not None:
        entry["n_active_components"] = int(np.sum(np.any(D != 0.0, axis=0)))
    return entry


def format_speed(speed: dict[str, Any]) -> str:
    lines = [f"{'data':<10}{'d':>5}{'p':>4}{'env':>5}{'tasks':>7}  {'model':<16}{'median ms':>11}{'cpu ms':>8}{'max ms':>9}"
             f"{'first 1/5':>11}{'last 1/5':>10}{'K':>4}{'cols':>6}{'1st pred ms':>13}"]
    for cfg in speed["configs"]:
        for name, e in cfg["models"].items():
            env = cfg.get("n_environments")
            lines.append(f"{cfg.get('data', 'synthetic'):<10}{cfg['n_features']:>5}{cfg['n_components']:>4}"
                         f"{'' if env is None else env:>5}"
                         f"{cfg['n_tasks']:>7}  {name:<16}"
                         f"{e['update_ms_median']:>11.2f}{e.get('update_cpu_ms_median', float('nan')):>8.2f}"
                         f"{e['update_ms_max']:>9.1f}{e['median_first_fifth']:>11.2f}"
                         f"{e['median_last_fifth']:>10.2f}{e.get('n_representatives', ''):>4}"
                         f"{e.get('n_active_components', ''):>6}"
                         f"{e.get('first_predict_ms_median', float('nan')):>13.2f}")
    return "\n".join(lines)


def plot_speed(speed: dict[str, Any], out_dir: str) -> str:
    plt = matplotlib_pyplot()
    os.makedirs(out_dir, exist_ok=True)
    n = len(speed["configs"])
    ncols = min(4, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.4 * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, cfg in zip(axes.flat, speed["configs"]):
        for name, e in cfg["models"].items():
            ax.plot(np.arange(len(e["update_ms"])), e["update_ms"], label=name, lw=1)
        ax.set_yscale("log")
        ax.set_xlabel("tasks already learned")
        ax.set_ylabel("update time (ms)")
        where = (f"{cfg['n_environments']} environments" if cfg.get("n_environments")
                 else cfg.get("data", "synthetic"))
        ax.set_title(f"d={cfg['n_features']}, p={cfg['n_components']}, {where}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out_dir, "speed.png")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.speed", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", dest="json_out", help='write {"speed": ...} here')
    ap.add_argument("--plots", help="write speed.png to this directory")
    ap.add_argument("--datasets", "--speed-data", dest="datasets", default="",
                    help="also time the streams of these real data sets (comma-separated, from: "
                         + ", ".join(REAL_DATASETS) + "), with p = 5 and 20")
    ap.add_argument("--data-dir", help="directory of the real data sets (default: $FCL3_DATA_DIR, ../shared/data)")
    ap.add_argument("--models", help="comma-separated, default " + ",".join(DEFAULT_MODELS)
                    + "; any of: " + ", ".join(m for m, (fam, _) in MODELS.items() if fam != "STL")
                    + f", each optionally with {PAPER_SUFFIX!r} (the paper's prediction rule)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    models = [m.strip() for m in args.models.split(",")] if args.models else None
    real = tuple(s.strip() for s in args.datasets.split(",") if s.strip())
    try:
        speed = speed_benchmark(models=models, seed=args.seed, progress=not args.quiet,
                                datasets=real, data_dir=args.data_dir)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_speed(speed))
    if args.plots:
        print(f"wrote {plot_speed(speed, args.plots)}", file=sys.stderr)
    if args.json_out:
        print(f"wrote {write_json(args.json_out, {'speed': speed})}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
