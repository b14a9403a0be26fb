"""Speed benchmark: what one operation costs as a model grows, run from the command line::

    python -m benchmarks.speed --tasks 100,1000,10000,100000 [--kind classification]
           [--max-seconds S] [--repeats 7] [--json speed_tasks.json] [--figure speed_tasks.png]
    python -m benchmarks.speed --quick
    python -m benchmarks.speed [--json speed.json] [--plots figs/] [--datasets school --data-dir DIR]

With ``--tasks`` (or ``--quick``): one model per learner (FCL3 with its defaults, FCL3 with
the paper's rule ``FCL3-Rand:paper``, ELLA, STL) grows through the given numbers of synthetic
clustered tasks (:class:`ClusteredTasks`, one batch each) and, at each, the median of several
operations, each on its own ``copy()``, is timed: a new task's update, a known task's update,
the first prediction after an update and a steady prediction; with the exported state's bytes
per task, the global state's bytes and the slowest single update of each stretch of growth (wall
clock: where a refit over every task lands), and the ratio of each cost at the largest number of
tasks to its cost at the smallest (issue 20's target: at most 1.5 for FCL3's defaults).
``--max-seconds`` bounds each learner's growth and records where it stopped.

Without ``--tasks``: the time of every update along streams of synthetic clustered tasks
(:data:`SPEED_CONFIGS`) and, with ``--datasets``, of real data sets (every task whole, in a
seeded random order, with ``p`` = 5 and 20 components), and each updated task's first
prediction after it. Wall-clock and CPU time are both recorded (on a shared machine CPU time
is the steadier of the two). Run with ``OPENBLAS_NUM_THREADS=1`` (recorded in the output):
the matrices are small, and BLAS threads only add synchronisation.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np

from .common import ROOT, blas_threads, machine, matplotlib_pyplot, progress_bar, write_json
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


# ============================================================================ cost against the number of tasks
#: The learners of the scaling run (``--tasks``): FCL3 with its defaults, with the paper's rule, ELLA, STL.
SCALING_MODELS = ("FCL3-Rand", "FCL3-Rand:paper", "ELLA-Rand", "STL")
#: The costs timed at every number of tasks, in the order of the table and the figure.
COSTS = ("new_update_ms", "known_update_ms", "first_predict_ms", "steady_predict_ms")
COST_LABELS = {
    "new_update_ms": "new task's update (ms)", "known_update_ms": "known task's update (ms)",
    "first_predict_ms": "first prediction after an update (ms)", "steady_predict_ms": "steady prediction (ms)",
    "state_bytes_per_task": "state bytes per task", "growth_ms_per_task": "growth: ms per task learned",
}
#: Issue 20's target: each of these costs at the largest number of tasks is at most this
#: multiple of its cost at the smallest, for FCL3 with its defaults.
TARGET_MODEL, TARGET_RATIO = "FCL3-Rand", 1.5
TARGET_COSTS = ("new_update_ms", "known_update_ms", "first_predict_ms")
QUICK = {"tasks": (20, 60), "repeats": 3}


class ClusteredTasks:
    """Synthetic clustered tasks, each one generated on demand from ``(seed, task index, batch)``.

    Task ``t`` belongs to environment ``t % n_environments``; its weights are the
    environment's centre plus noise of scale 0.3, its rows standard normal, its target
    ``X w + N(0, 1)`` (regression) or that sign as a 0/1 label (classification). Any task's
    any batch is reproducible without storing the stream, so 100,000 tasks cost no memory here.
    """

    def __init__(self, kind: str = "regression", n_features: int = 10, n_rows: int = 15,
                 n_environments: int = 5, seed: int = 0):
        if kind not in ("regression", "classification"):
            raise ValueError(f"kind must be 'regression' or 'classification', not {kind!r}")
        self.kind, self.n_features, self.n_rows, self.seed = kind, n_features, n_rows, seed
        self.n_environments = n_environments
        self.centres = np.random.default_rng([seed, n_features, n_environments]).normal(size=(n_environments, n_features))

    def batch(self, task: int, batch: int = 0) -> tuple[np.ndarray, np.ndarray]:
        w_rng = np.random.default_rng([self.seed, task])
        w = self.centres[task % self.n_environments] + 0.3 * w_rng.normal(size=self.n_features)
        rng = np.random.default_rng([self.seed, task, batch + 1])
        X = rng.normal(size=(self.n_rows, self.n_features))
        y = X @ w + rng.normal(size=self.n_rows)
        return X, ((y > 0.0).astype(float) if self.kind == "classification" else y)


def engine_version() -> dict[str, Any] | None:
    """The checkout's commit and whether ``core/`` differs from it (``None`` outside a git checkout)."""
    try:
        run = dict(cwd=ROOT, capture_output=True, text=True, timeout=30, check=True)
        commit = subprocess.run(["git", "rev-parse", "HEAD"], **run).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "core"], **run).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "core_modified": bool(dirty)}


def _median_ms(samples: list[float]) -> float:
    return float(np.median(samples)) if samples else float("nan")


def _timed(fn) -> tuple[float, float]:
    """Wall-clock and this thread's CPU time of ``fn()``, in ms."""
    t0, c0 = time.perf_counter(), time.thread_time()
    fn()
    return 1000.0 * (time.perf_counter() - t0), 1000.0 * (time.thread_time() - c0)


def measure_costs(model, tasks: ClusteredTasks, n_tasks: int, repeats: int, seed: int) -> dict[str, Any]:
    """The costs of a model holding ``n_tasks`` tasks (ids ``t0`` ...), each the median of
    ``repeats`` operations, every one on its own :meth:`copy` so the grown model is untouched.

    * ``new_update_ms``: ``learn`` of a task the model has not seen;
    * ``known_update_ms``: ``learn`` of a second batch of a learned task;
    * ``first_predict_ms``: ``predict`` of that task right after its update (pays whatever
      the update left to be recomputed);
    * ``steady_predict_ms``: the same prediction repeated.
    """
    rng = np.random.default_rng([seed, n_tasks])
    samples: dict[str, list[float]] = {f"{c}{s}": [] for c in COSTS for s in ("", "_cpu")}

    def add(cost: str, wall_cpu: tuple[float, float]) -> None:
        samples[cost].append(wall_cpu[0])
        samples[cost + "_cpu"].append(wall_cpu[1])

    for i in range(repeats):
        fresh = model.copy()
        X, y = tasks.batch(10 ** 9 + i)  # a task index no stream reaches
        add("new_update_ms", _timed(lambda: fresh.learn(f"new{i}", X, y)))
        known = model.copy()
        t = int(rng.integers(n_tasks))
        X, y = tasks.batch(t, batch=1)
        add("known_update_ms", _timed(lambda: known.learn(f"t{t}", X, y)))
        add("first_predict_ms", _timed(lambda: known.predict(f"t{t}", X)))
        add("steady_predict_ms", _timed(lambda: known.predict(f"t{t}", X)))
    out: dict[str, Any] = {k: _median_ms(v) for k, v in samples.items()}
    out["samples"] = samples
    return out


def state_bytes(model) -> dict[str, int]:
    """The size of the exported state (:meth:`get_state`): the global arrays' bytes, and
    the per-task arrays' bytes plus their JSON meta, summed task by task (one task's export
    alive at a time)."""
    glob = model.get_state(tasks=[])
    global_bytes = int(sum(a.nbytes for a in glob.arrays.values()))
    task_bytes = 0
    for tid in model.task_ids:
        ts = model.task_state(tid)
        task_bytes += int(sum(np.asarray(a).nbytes for a in ts["arrays"].values()))
        task_bytes += len(json.dumps(ts["meta"], default=str))
    return {"state_bytes_global": global_bytes, "state_bytes_tasks": task_bytes}


RATIO_KEYS = COSTS + tuple(c + "_cpu" for c in COSTS) + ("state_bytes_per_task",)


def cost_ratios(checkpoints: list[dict[str, Any]], keys=RATIO_KEYS) -> dict[str, Any]:
    """Each cost at the largest number of tasks measured divided by its cost at the smallest
    (``None`` with fewer than two measured numbers of tasks)."""
    done = [c for c in checkpoints if c.get("reached")]
    if len(done) < 2:
        return {"between": None, **{k: None for k in keys}}
    lo, hi = done[0], done[-1]
    return {"between": [lo["n_tasks"], hi["n_tasks"]],
            **{k: (hi[k] / lo[k] if lo[k] > 0 else None) for k in keys}}


def target_verdict(result: dict[str, Any]) -> dict[str, Any]:
    """Issue 20's target for :data:`TARGET_MODEL`: each of :data:`TARGET_COSTS` at the largest
    requested number of tasks at most :data:`TARGET_RATIO` times its cost at the smallest.
    ``met`` is ``None`` when that model is not in the run or did not reach the largest number."""
    tasks = result["settings"]["tasks"]
    entry = result["models"].get(TARGET_MODEL)
    verdict: dict[str, Any] = {"model": TARGET_MODEL, "max_ratio": TARGET_RATIO, "costs": list(TARGET_COSTS),
                               "between": [tasks[0], tasks[-1]], "met": None, "met_cpu": None}
    if entry is None or entry["ratios"]["between"] != [tasks[0], tasks[-1]]:
        return verdict
    for clock, suffix in (("", ""), ("_cpu", "_cpu")):
        ratios = {k: entry["ratios"][k + suffix] for k in TARGET_COSTS}
        verdict["ratios" + clock] = ratios
        verdict["met" + clock] = all(r is not None and r <= TARGET_RATIO for r in ratios.values())
    return verdict


def scaling_benchmark(n_tasks=(100, 1000, 10000), models=None, kind: str = "regression", n_features: int = 10,
                      n_rows: int = 15, n_environments: int = 5, repeats: int = 7, max_seconds: float | None = None,
                      seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """Grow one model per learner through ``n_tasks`` (sorted) and measure its costs at each.

    Each learner learns one batch of tasks ``t0, t1, ...`` up to the first number of tasks, is
    measured (:func:`measure_costs`, :func:`state_bytes`), continues to the next, and so on.
    ``max_seconds`` bounds each learner's growth time: past it the learner stops growing and
    records where (``stopped_at``); numbers of tasks it did not reach are marked unreached.
    """
    n_tasks = sorted({int(n) for n in n_tasks})
    if not n_tasks or n_tasks[0] < 1:
        raise ValueError("--tasks needs positive numbers of tasks")
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    models = list(models or SCALING_MODELS)
    check_models([m.removesuffix(PAPER_SUFFIX) for m in models])
    tasks = ClusteredTasks(kind, n_features, n_rows, n_environments, seed)
    result: dict[str, Any] = {
        "settings": {"kind": kind, "n_features": n_features, "rows_per_batch": n_rows,
                     "n_environments": n_environments, "repeats": repeats, "tasks": n_tasks,
                     "max_seconds": max_seconds, "seed": seed, "models": models,
                     "memory": "bytes of the exported state (get_state): global arrays; per-task arrays "
                               "plus JSON meta, divided by the number of tasks",
                     "timing": "median of `repeats` operations, each on its own model.copy(); "
                               "wall clock (ms) and thread CPU time (*_cpu)"},
        "machine": machine(), "engine": engine_version(), "command": "python -m benchmarks.speed " + " ".join(sys.argv[1:]),
        "models": {},
    }
    for name in models:
        family, _ = MODELS[name.removesuffix(PAPER_SUFFIX)]
        params = {"task_models": "paper"} if name.endswith(PAPER_SUFFIX) else {}
        model = build(family, kind, params, seed)
        checkpoints, grown, spent, stopped_at = [], 0, 0.0, None
        bar = progress_bar(total=n_tasks[-1], desc=f"speed {name}", enabled=progress, unit="task")
        for n in n_tasks:
            seg_start, seg_cpu, seg_tasks = time.perf_counter(), time.thread_time(), grown
            durations = []
            while grown < n and stopped_at is None:
                began = time.perf_counter()
                model.learn(f"t{grown}", *tasks.batch(grown))
                durations.append(time.perf_counter() - began)
                grown += 1
                bar.update(1)
                if max_seconds is not None and spent + time.perf_counter() - seg_start > max_seconds and grown < n:
                    stopped_at = grown
            seg, seg_cpu = time.perf_counter() - seg_start, time.thread_time() - seg_cpu
            spent += seg
            point: dict[str, Any] = {"n_tasks": n, "reached": grown >= n, "tasks_learned": grown,
                                     "growth_seconds": spent,
                                     "segment_seconds": seg,
                                     "growth_ms_per_task": 1000.0 * seg / max(grown - seg_tasks, 1),
                                     "growth_slowest_ms": 1000.0 * max(durations, default=0.0),
                                     "growth_median_ms": 1000.0 * float(np.median(durations)) if durations else 0.0,
                                     "growth_cpu_ms_per_task": 1000.0 * seg_cpu / max(grown - seg_tasks, 1)}
            if point["reached"]:
                bar.set_postfix_str(f"measuring at {n}")
                point.update(measure_costs(model, tasks, n, repeats, seed))
                point.update(state_bytes(model))
                point["state_bytes_per_task"] = point["state_bytes_tasks"] / n
                bar.set_postfix_str(f"measured at {n}")
            checkpoints.append(point)
            if stopped_at is not None:
                checkpoints += [{"n_tasks": later, "reached": False} for later in n_tasks if later > n]
                break
        bar.close()
        result["models"][name] = {"params": model.get_params(), "checkpoints": checkpoints,
                                  "stopped_at": stopped_at, "ratios": cost_ratios(checkpoints)}
    result["target"] = target_verdict(result)
    return result


# ============================================================================ cost against the number of features
#: The learners of the features run (``--features`` with several values): FCL3's defaults and
#: its paper rule, ELLA as published and with its defaults, STL.
FEATURES_MODELS = ("FCL3-Rand", "FCL3-Rand:paper", "ELLA-Rand:paper", "ELLA-Rand", "STL")
#: The engine-cost targets: each of :data:`TARGET_COSTS` of FCL3's defaults at most
#: ``FEATURES_TARGET_RATIO`` times its paper rule's in the same run, and the slowest single
#: update of its stream at most ``SLOWEST_TARGET_RATIO`` times that stream's median update.
FEATURES_REFERENCE, FEATURES_TARGET_RATIO, SLOWEST_TARGET_RATIO = "FCL3-Rand:paper", 2.0, 10.0


def features_benchmark(features, models=None, kind: str = "regression", n_tasks: int = 40, n_rows: int = 20,
                       n_environments: int = 4, repeats: int = 7, max_seconds: float | None = None, seed: int = 0,
                       progress: bool = True) -> dict[str, Any]:
    """One :func:`scaling_benchmark` per number of features in ``features``: every learner
    grows through ``n_tasks`` tasks of one ``n_rows``-row batch each and is measured there, its
    costs set beside :data:`FEATURES_REFERENCE`'s at the same ``d`` (the ratios of
    :data:`TARGET_COSTS`), with the slowest update of its growth over the median one, its state's
    bytes and the verdict of :data:`FEATURES_TARGET_RATIO` and :data:`SLOWEST_TARGET_RATIO`."""
    features = sorted({int(d) for d in features})
    if not features or features[0] < 1:
        raise ValueError("--features needs positive numbers of features")
    models = list(models or FEATURES_MODELS)
    runs = []
    for d in progress_bar(features, desc="features", enabled=progress, unit="d"):
        run = scaling_benchmark([n_tasks], models=models, kind=kind, n_features=d, n_rows=n_rows,
                                n_environments=n_environments, repeats=repeats, max_seconds=max_seconds,
                                seed=seed, progress=False)
        reference = run["models"].get(FEATURES_REFERENCE, {}).get("checkpoints", [{}])[0]
        row: dict[str, Any] = {"n_features": d, "models": {}}
        for name, entry in run["models"].items():
            point = entry["checkpoints"][0]
            out = {"reached": point["reached"], "stopped_at": entry["stopped_at"],
                   **{k: point.get(k) for k in ("growth_slowest_ms", "growth_median_ms", "growth_ms_per_task")}}
            if point["reached"]:
                out.update({k: point[k] for k in COSTS + tuple(c + "_cpu" for c in COSTS)})
                out.update({k: point[k] for k in ("state_bytes_global", "state_bytes_per_task")})
                out["slowest_over_median"] = (point["growth_slowest_ms"] / point["growth_median_ms"]
                                              if point["growth_median_ms"] > 0 else None)
                if reference.get("reached"):
                    out["over_reference"] = {k: point[k] / reference[k] if reference[k] > 0 else None
                                             for k in TARGET_COSTS}
            row["models"][name] = out
        runs.append(row)
    result = {"settings": {"kind": kind, "features": features, "n_tasks": n_tasks, "rows_per_batch": n_rows,
                           "n_environments": n_environments, "repeats": repeats, "max_seconds": max_seconds,
                           "seed": seed, "models": models, "reference": FEATURES_REFERENCE,
                           "timing": "median of `repeats` operations at n_tasks tasks, each on its own copy(); "
                                     "the slowest and median update over the growth to n_tasks (wall clock)"},
              "machine": machine(), "engine": engine_version(),
              "command": "python -m benchmarks.speed " + " ".join(sys.argv[1:]), "by_features": runs}
    result["target"] = features_verdict(result)
    return result


def features_verdict(result: dict[str, Any], model: str = TARGET_MODEL) -> dict[str, Any]:
    """At every ``d``: are ``model``'s :data:`TARGET_COSTS` each within
    :data:`FEATURES_TARGET_RATIO` of the reference's, and its slowest update within
    :data:`SLOWEST_TARGET_RATIO` of its median (``None`` where not measured)."""
    out = {"model": model, "reference": FEATURES_REFERENCE, "max_ratio": FEATURES_TARGET_RATIO,
           "max_slowest_over_median": SLOWEST_TARGET_RATIO, "by_features": {}}
    for row in result["by_features"]:
        entry = row["models"].get(model)
        ratios = (entry or {}).get("over_reference")
        cost = None if not ratios else all(r is not None and r <= FEATURES_TARGET_RATIO for r in ratios.values())
        slow = (entry or {}).get("slowest_over_median")
        out["by_features"][str(row["n_features"])] = {
            "costs_met": cost, "slowest_met": None if slow is None else slow <= SLOWEST_TARGET_RATIO}
    return out


def format_features(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [f"{s['kind']}, {s['n_tasks']} tasks of one {s['rows_per_batch']}-row batch, {s['n_environments']} "
             f"environments; ms, median of {s['repeats']} (wall clock); x ref: over {s['reference']} at the same d; "
             f"{result['machine']['cores']} cores, {result['machine']['blas_threads'] or 'BLAS threads unset'}",
             f"{'d':>6} {'model':<17}{'new upd':>9}{'known upd':>10}{'1st pred':>10}{'x ref new':>10}"
             f"{'x known':>8}{'x pred':>8}{'slowest':>9}{'median':>8}{'slow/med':>9}{'global B':>11}{'B/task':>8}"]
    for row in result["by_features"]:
        for name, e in row["models"].items():
            if not e["reached"]:
                lines.append(f"{row['n_features']:>6} {name:<17} not measured: growth stopped at {e['stopped_at']} "
                             f"tasks (--max-seconds {s['max_seconds']:g})")
                continue
            ref = e.get("over_reference") or {}
            lines.append(f"{row['n_features']:>6} {name:<17}{e['new_update_ms']:>9.2f}{e['known_update_ms']:>10.2f}"
                         f"{e['first_predict_ms']:>10.2f}" + "".join(
                             f"{_fmt(ref.get(k), '.2f'):>{w}}" for k, w in zip(TARGET_COSTS, (10, 8, 8)))
                         + f"{e['growth_slowest_ms']:>9.1f}{e['growth_median_ms']:>8.2f}"
                           f"{_fmt(e['slowest_over_median'], '.1f'):>9}{e['state_bytes_global']:>11}"
                           f"{e['state_bytes_per_task']:>8.0f}")
    t = result["target"]
    words = {True: "met", False: "NOT met", None: "not measured"}
    for d, v in t["by_features"].items():
        lines.append(f"target at d = {d} ({t['model']}): costs <= {t['max_ratio']:g} x {t['reference']}: "
                     f"{words[v['costs_met']]}; slowest <= {t['max_slowest_over_median']:g} x median: "
                     f"{words[v['slowest_met']]}")
    return "\n".join(lines)


def plot_features(result: dict[str, Any], path: str) -> str:
    """A known task's update and the slowest update of the growth against ``d``, log-log, one
    line per learner."""
    plt = matplotlib_pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    names = result["settings"]["models"]
    for ax, key, title in zip(axes, ("known_update_ms", "growth_slowest_ms"),
                              ("known task's update (ms, median)", "slowest update of the growth (ms)")):
        for i, name in enumerate(names):
            pts = [(row["n_features"], row["models"][name][key]) for row in result["by_features"]
                   if row["models"].get(name, {}).get("reached")]
            if pts:
                ax.plot(*zip(*pts), marker="o", color=f"C{i}", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("features d")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    s = result["settings"]
    fig.suptitle(f"cost against features: {s['kind']}, {s['n_tasks']} tasks of {s['rows_per_batch']} rows, "
                 f"{s['n_environments']} environments", fontsize=11)
    fig.tight_layout()
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _fmt(v, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def format_scaling(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [f"{s['kind']}, d = {s['n_features']}, {s['rows_per_batch']} rows per batch, "
             f"{s['n_environments']} environments; ms, median of {s['repeats']}, wall clock and thread CPU time; "
             f"{result['machine']['cores']} cores, {result['machine']['blas_threads'] or 'BLAS threads unset'}",
             f"{'model':<17}{'tasks':>8}{'clock':>6}{'new upd':>9}{'known upd':>10}{'1st pred':>10}{'steady':>8}"
             f"{'B/task':>8}{'global B':>10}{'grow ms/t':>10}{'slowest':>9}{'grown s':>9}"]
    for name, e in result["models"].items():
        for c in e["checkpoints"]:
            if not c["reached"]:
                lines.append(f"{name:<17}{c['n_tasks']:>8}  not reached: growth stopped at {e['stopped_at']} "
                             f"tasks (--max-seconds {s['max_seconds']:g})")
                continue
            for clock, suffix in (("wall", ""), ("cpu", "_cpu")):
                costs = "".join(f"{c[k + suffix]:>{w}.{p}f}" for k, w, p in zip(COSTS, (9, 10, 10, 8), (2, 2, 2, 3)))
                rest = (f"{c['state_bytes_per_task']:>8.0f}{c['state_bytes_global']:>10}"
                        f"{c['growth_ms_per_task']:>10.2f}{c.get('growth_slowest_ms', float('nan')):>9.1f}"
                        f"{c['growth_seconds']:>9.1f}" if clock == "wall" else "")
                lines.append(f"{name:<17}{c['n_tasks']:>8}{clock:>6}{costs}{rest}")
    lines.append("ratio: cost at the largest number of tasks measured / at the smallest")
    lines.append(f"{'model':<17}{'clock':>6}{'between':>14}{'new upd':>9}{'known upd':>10}{'1st pred':>10}"
                 f"{'steady':>8}{'B/task':>8}")
    for name, e in result["models"].items():
        r = e["ratios"]
        span = "-" if r["between"] is None else f"{r['between'][0]}-{r['between'][1]}"
        for clock, suffix in (("wall", ""), ("cpu", "_cpu")):
            lines.append(f"{name:<17}{clock:>6}{span:>14}" + "".join(
                f"{_fmt(r[k + suffix], '.2f'):>{w}}" for k, w in zip(COSTS, (9, 10, 10, 8)))
                + f"{_fmt(r['state_bytes_per_task'], '.2f'):>8}")
    for name, e in result["models"].items():
        if e["stopped_at"] is not None:
            lines.append(f"{name}: growth stopped at {e['stopped_at']} tasks (--max-seconds "
                         f"{result['settings']['max_seconds']:g}); its ratios span only the numbers it reached")
    t = result["target"]
    words = {True: "met", False: "NOT met", None: "not measured (model absent or largest number not reached)"}
    lines.append(f"target ({t['model']}, {', '.join(t['costs'])} ratio <= {t['max_ratio']} between "
                 f"{t['between'][0]} and {t['between'][1]} tasks): wall clock {words[t['met']]}, "
                 f"CPU time {words[t['met_cpu']]}")
    return "\n".join(lines)


def plot_scaling(result: dict[str, Any], path: str, clock: str = "cpu") -> str:
    """Each cost against the number of tasks, log-log: one panel per cost, one line per learner.
    ``clock`` is "cpu" (thread CPU time, the steadier on a shared machine) or "wall"; the
    growth panel is wall clock, each stretch plotted at the number of tasks it ended at."""
    if clock not in ("cpu", "wall"):
        raise ValueError(f"clock must be 'cpu' or 'wall', not {clock!r}")
    plt = matplotlib_pyplot()
    suffix = "_cpu" if clock == "cpu" else ""
    keys = tuple(c + suffix for c in COSTS) + ("state_bytes_per_task", "growth_ms_per_task")
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5))
    for ax, key in zip(axes.flat, keys):
        for i, (name, e) in enumerate(result["models"].items()):
            pts = [(c.get("tasks_learned", c["n_tasks"] if c["reached"] else e["stopped_at"]), c[key])
                   for c in e["checkpoints"] if key in c]
            if pts:
                ax.plot(*zip(*pts), marker="o", color=f"C{i}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tasks learned")
        ax.set_title(COST_LABELS[key.removesuffix("_cpu")].replace("(ms)", f"(ms, {clock})"), fontsize=10)
        ax.grid(alpha=0.3, which="both")
    handles = [plt.Line2D([], [], marker="o", color=f"C{i}") for i in range(len(result["models"]))]
    labels = [name if e["stopped_at"] is None else f"{name} (growth stopped at {e['stopped_at']} tasks)"
              for name, e in result["models"].items()]
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9, bbox_to_anchor=(0.5, -0.03))
    s = result["settings"]
    fig.suptitle(f"cost against tasks learned: {s['kind']}, d = {s['n_features']}, {s['rows_per_batch']} rows "
                 f"per batch, {s['n_environments']} environments, median of {s['repeats']}", fontsize=11)
    fig.tight_layout()
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.speed", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", dest="json_out", help='write {"speed": ...} (or, with --tasks, {"scaling": ...}) here')
    ap.add_argument("--plots", help="write speed.png to this directory (update times along a stream)")
    ap.add_argument("--datasets", "--speed-data", dest="datasets", default="",
                    help="also time the streams of these real data sets (comma-separated, from: "
                         + ", ".join(REAL_DATASETS) + "), with p = 5 and 20")
    ap.add_argument("--data-dir", help="directory of the real data sets (default: $FCL3_DATA_DIR, ../shared/data)")
    ap.add_argument("--models", help="comma-separated, default " + ",".join(DEFAULT_MODELS)
                    + " (with --tasks: " + ",".join(SCALING_MODELS) + "); any of: " + ", ".join(MODELS)
                    + f", each optionally with {PAPER_SUFFIX!r} (the paper's prediction rule); "
                    "STL only with --tasks")
    scaling = ap.add_argument_group("cost against the number of tasks (--tasks or --quick)")
    scaling.add_argument("--tasks", help="grow one model per learner through these numbers of tasks "
                         "(comma-separated, e.g. 100,1000,10000,100000) and measure each cost at each")
    scaling.add_argument("--quick", action="store_true",
                         help=f"a few seconds' run: --tasks {','.join(map(str, QUICK['tasks']))} "
                              f"--repeats {QUICK['repeats']} unless given")
    scaling.add_argument("--kind", choices=("regression", "classification"), default="regression")
    scaling.add_argument("--features", default="10",
                         help="d (default 10); several, comma-separated (e.g. 10,30,100,300,1000): the cost "
                              "against the number of features, each learner grown through one --tasks "
                              "number of tasks (default 40) of --rows rows (default 20)")
    scaling.add_argument("--rows", type=int, help="rows per batch (default 15; 20 with several --features)")
    scaling.add_argument("--environments", type=int,
                         help="clusters of tasks (default 5; 4 with several --features)")
    scaling.add_argument("--repeats", type=int, help="timed operations per cost, the median reported (default 7)")
    scaling.add_argument("--max-seconds", type=float,
                         help="stop a learner's growth after this many seconds and record where it stopped")
    scaling.add_argument("--figure", help="write the log-log figure (one panel per cost) to this PNG path")
    scaling.add_argument("--figure-clock", choices=("cpu", "wall"), default="cpu",
                         help="the clock the figure's timings use (default cpu: steadier on a shared machine)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    models = [m.strip() for m in args.models.split(",")] if args.models else None
    try:
        features = [int(f) for f in args.features.split(",") if f.strip()]
    except ValueError:
        print(f"error: --features takes comma-separated integers, not {args.features!r}", file=sys.stderr)
        return 2
    if len(features) > 1:
        return _main_features(args, models, features)
    args.features = features[0] if features else 0
    if args.tasks or args.quick:
        return _main_scaling(args, models)
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


def _main_scaling(args, models) -> int:
    try:
        n_tasks = [int(n) for n in args.tasks.split(",") if n.strip()] if args.tasks else list(QUICK["tasks"])
        repeats = args.repeats or (QUICK["repeats"] if args.quick else 7)
        result = scaling_benchmark(n_tasks, models=models, kind=args.kind, n_features=args.features,
                                   n_rows=args.rows or 15, n_environments=args.environments or 5, repeats=repeats,
                                   max_seconds=args.max_seconds, seed=args.seed, progress=not args.quiet)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_scaling(result))
    if args.json_out:
        print(f"wrote {write_json(args.json_out, {'scaling': result})}", file=sys.stderr)
    if args.figure:
        print(f"wrote {plot_scaling(result, args.figure, args.figure_clock)}", file=sys.stderr)
    return 0


def _main_features(args, models, features) -> int:
    try:
        tasks = [int(n) for n in args.tasks.split(",") if n.strip()] if args.tasks else [40]
        if len(tasks) != 1:
            raise ValueError("with several --features, --tasks takes one number of tasks")
        result = features_benchmark(features, models=models, kind=args.kind, n_tasks=tasks[0],
                                    n_rows=args.rows or 20, n_environments=args.environments or 4,
                                    repeats=args.repeats or 7, max_seconds=args.max_seconds, seed=args.seed,
                                    progress=not args.quiet)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_features(result))
    if args.json_out:
        print(f"wrote {write_json(args.json_out, {'features': result})}", file=sys.stderr)
    if args.figure:
        print(f"wrote {plot_features(result, args.figure)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
