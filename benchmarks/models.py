"""Many models in one process: memory and latency with 1,000 small models and 10 large ones.

    python -m benchmarks.models [--small 1000] [--large 10] [--cache-size 1000] [--json out.json]

Starts one ``uvicorn service.main:app`` worker on a throwaway PostgreSQL database with the
Redis lock (``MODEL_CACHE_SIZE`` = ``--cache-size``), then, for each group of models:

1. creates the models (``POST /models``) and teaches each its tasks (``POST
   /models/{name}/tasks/{id}/data``, one batch per task), recording every update's latency;
2. reads every model once (``POST /models/{name}/predict``), which loads it into the
   process's cache, and records the worker's RSS before and after (``/proc``);
3. times predictions on models drawn at random among the group (cached: the steady state),
   and a second pass of updates.

Small models: d = 5, 3 tasks of 20 rows. Large models: d = 64, p = 20, 40 tasks of 50 rows.
Reports p50/p99 latencies in ms, requests/s of the prediction loop, and the worker's RSS per
model. One client, keep-alive; everything runs on loopback on this machine.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

from .common import machine, pct, progress_bar, write_json
from .launcher import Server, create_throwaway_database, drop_throwaway_backend, migrate, redis_prefix
from .loadtest import proc_memory

GROUPS = {  # name: (n_features, n_components, tasks per model, rows per task)
    "small": (5, 5, 3, 20),
    "large": (64, 20, 40, 50),
}


def _batch(rng: np.random.Generator, centre: np.ndarray, rows: int) -> dict[str, list]:
    X = rng.normal(size=(rows, centre.size))
    y = X @ (centre + 0.2 * rng.normal(size=centre.size)) + 0.3 * rng.normal(size=rows)
    return {"X": X.round(6).tolist(), "y": y.round(6).tolist()}


def run_group(client, server: Server, group: str, n_models: int, seed: int, n_predictions: int,
              progress: bool) -> dict[str, Any]:
    d, p, tasks, rows = GROUPS[group]
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(3, d))
    names = [f"{group}-{i:04d}" for i in range(n_models)]
    (pid,) = server.worker_pids()[:1]
    rss_start = proc_memory(pid).get("rss_mb")
    create_ms, update_ms = [], []
    for name in progress_bar(names, desc=f"{group}: create and learn", enabled=progress):
        t0 = time.perf_counter()
        r = client.post("/models", json={"name": name, "kind": "regression", "params": {"n_components": p}})
        create_ms.append(1000 * (time.perf_counter() - t0))
        r.raise_for_status()
        for t in range(tasks):
            body = _batch(rng, centres[t % 3], rows)
            t0 = time.perf_counter()
            r = client.post(f"/models/{name}/tasks/task{t}/data", json=body)
            update_ms.append(1000 * (time.perf_counter() - t0))
            r.raise_for_status()
    row = rng.normal(size=(1, d)).round(6).tolist()
    first_ms = []
    for name in progress_bar(names, desc=f"{group}: first reads", enabled=progress):
        t0 = time.perf_counter()
        client.post(f"/models/{name}/predict", json={"task_id": "task0", "X": row}).raise_for_status()
        first_ms.append(1000 * (time.perf_counter() - t0))
    rss_loaded = proc_memory(pid).get("rss_mb")
    predict_ms = []
    picks = rng.integers(0, n_models, n_predictions)
    t_loop = time.perf_counter()
    for i in progress_bar(picks, desc=f"{group}: predictions", enabled=progress):
        t0 = time.perf_counter()
        client.post(f"/models/{names[i]}/predict", json={"task_id": "task1", "X": row}).raise_for_status()
        predict_ms.append(1000 * (time.perf_counter() - t0))
    loop_s = time.perf_counter() - t_loop
    again_ms = []
    for i in progress_bar(picks[: max(1, n_predictions // 10)], desc=f"{group}: updates", enabled=progress):
        body = _batch(rng, centres[0], rows)
        t0 = time.perf_counter()
        client.post(f"/models/{names[i]}/tasks/task0/data", json=body).raise_for_status()
        again_ms.append(1000 * (time.perf_counter() - t0))
    rss_end = proc_memory(pid).get("rss_mb")
    per_model = None if rss_start is None or rss_loaded is None else (rss_loaded - rss_start) / n_models
    return {
        "models": n_models, "n_features": d, "n_components": p, "tasks_per_model": tasks, "rows_per_task": rows,
        "create_ms": {"p50": pct(create_ms, 50), "p99": pct(create_ms, 99)},
        "first_update_ms": {"p50": pct(update_ms, 50), "p99": pct(update_ms, 99)},
        "first_read_ms": {"p50": pct(first_ms, 50), "p99": pct(first_ms, 99)},
        "predict_ms": {"p50": pct(predict_ms, 50), "p99": pct(predict_ms, 99)},
        "predict_per_s": round(len(predict_ms) / loop_s, 1),
        "update_ms": {"p50": pct(again_ms, 50), "p99": pct(again_ms, 99)},
        "worker_rss_mb": {"start": rss_start, "all_loaded": rss_loaded, "end": rss_end},
        "rss_mb_per_model": None if per_model is None else round(per_model, 3),
    }


def format_report(report: dict[str, Any]) -> str:
    lines = [f"{'group':<7}{'models':>7}{'d':>5}{'p':>4}{'tasks':>6}  {'update p50/p99 ms':>18}"
             f"{'1st read p50/p99':>18}{'predict p50/p99':>17}{'pred/s':>8}{'RSS MB (start > loaded)':>25}{'MB/model':>10}"]
    for g, e in report["groups"].items():
        rss = e["worker_rss_mb"]
        lines.append(f"{g:<7}{e['models']:>7}{e['n_features']:>5}{e['n_components']:>4}{e['tasks_per_model']:>6}  "
                     f"{e['update_ms']['p50']:>8} / {e['update_ms']['p99']:<7}"
                     f"{e['first_read_ms']['p50']:>8} / {e['first_read_ms']['p99']:<7}"
                     f"{e['predict_ms']['p50']:>7} / {e['predict_ms']['p99']:<7}{e['predict_per_s']:>8}"
                     f"{rss['start']:>12} > {rss['all_loaded']:<10}{e['rss_mb_per_model']:>10}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.models", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=1000, help="number of small models (d=5, 3 tasks)")
    ap.add_argument("--large", type=int, default=10, help="number of large models (d=64, p=20, 40 tasks)")
    ap.add_argument("--cache-size", type=int, default=1000, help="MODEL_CACHE_SIZE of the server")
    ap.add_argument("--predictions", type=int, default=2000, help="timed predictions per group")
    ap.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    args = ap.parse_args(argv)
    import httpx

    dbname, url = create_throwaway_database(args.pg_admin_url, "models")
    prefix = redis_prefix("models")
    env = {"DATABASE_URL": url, "REDIS_URL": args.redis_url, "REDIS_PREFIX": prefix,
           "MODEL_CACHE_SIZE": str(args.cache_size), "LOG_LEVEL": "WARNING", "OPENBLAS_NUM_THREADS": "1"}
    report: dict[str, Any] = {"command": "python -m benchmarks.models " + " ".join(argv if argv is not None else sys.argv[1:]),
                              "machine": machine(), "cache_size": args.cache_size, "groups": {},
                              "throwaway_database": dbname}  # dropped at the end
    server = Server(env, access_log=False)
    try:
        migrate({**os.environ, **env})
        server.start()
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for group, n in (("small", args.small), ("large", args.large)):
                if n > 0:
                    report["groups"][group] = run_group(client, server, group, n, args.seed, args.predictions,
                                                        not args.quiet)
    finally:
        server.stop()
        drop_throwaway_backend(args.pg_admin_url, dbname, args.redis_url, prefix)
    print(format_report(report))
    if args.json_out:
        print(f"wrote {write_json(args.json_out, report)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
