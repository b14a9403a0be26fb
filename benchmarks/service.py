"""Service benchmark over HTTP on loopback, with PostgreSQL and Redis.

    python -m benchmarks.service [--updates 200] [--tasks 20] [--rows 20] [--d 10]
                                 [--seconds 5] [--concurrency 16] [--workers 1] [--json out.json]

Starts ``uvicorn service.main:app`` on a throwaway PostgreSQL database (created on
``--pg-admin-url``, dropped at the end) with the Redis lock, then measures in one run:

* POST /tasks/{id}/data latency p50/p99 (one client: updates of a model are serialised),
  beside the bare engine's ``learn`` time on the same batches in the same order;
* GET /predict requests/s (one row per request, ``--concurrency`` keep-alive connections),
  beside the bare engine's ``predict`` calls/s for the same row;
* GET /healthz requests/s: a trivial FastAPI endpoint, the HTTP stack's ceiling;
* POST /predict requests/s with 1 and with 100 rows (the ratio: how much 100 rows cost).

``--embedded``: the embedded default (an SQLite file, file locks) instead.

The load generator is a minimal asyncio HTTP/1.1 client (keep-alive), so that the client
costs as little CPU as possible: it shares the machine with the server.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

import core

from .common import http_request, machine, percentile, progress_bar
from .launcher import Server, create_throwaway_database, drop_throwaway_backend, migrate, redis_prefix


def make_stream(n_updates: int, n_tasks: int, rows: int, d: int, seed: int = 0):
    """``n_updates`` regression batches cycling over ``n_tasks`` tasks around 3 centres."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(3, d))
    W = {t: centres[t % 3] + 0.1 * rng.normal(size=d) for t in range(n_tasks)}
    stream = []
    for i in range(n_updates):
        t = i % n_tasks
        X = rng.normal(size=(rows, d))
        y = X @ W[t] + 0.1 * rng.normal(size=rows)
        stream.append((f"task-{t}", X, y))
    return stream


async def _http_get_loop(host, port, path, deadline, counts, idx, body: bytes | None = None):
    reader, writer = await asyncio.open_connection(host, port)
    if body is None:
        request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    else:
        request = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    n = bad = 0
    try:
        while time.perf_counter() < deadline:
            status, _ = await http_request(reader, writer, request)
            n += 1
            bad += status != 200
    finally:
        writer.close()
    counts[idx] = (n, bad)


def get_rps(host, port, path, seconds, concurrency, body: bytes | None = None) -> dict:
    """GET ``path`` (POST ``body`` to it if given) on ``concurrency`` keep-alive connections
    for ``seconds``: requests/s."""
    async def run():
        counts = [None] * concurrency
        start = time.perf_counter()
        deadline = start + seconds
        await asyncio.gather(*[_http_get_loop(host, port, path, deadline, counts, i, body)
                               for i in range(concurrency)])
        return counts, time.perf_counter() - start

    counts, elapsed = asyncio.run(run())
    total = sum(c[0] for c in counts)
    bad = sum(c[1] for c in counts)
    return {"requests": total, "non_200": bad, "seconds": round(elapsed, 3), "rps": round(total / elapsed, 1)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.service", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--updates", type=int, default=200)
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--rows", type=int, default=20, help="rows per batch")
    ap.add_argument("--d", type=int, default=10, help="features")
    ap.add_argument("--seconds", type=float, default=5.0, help="duration of each requests/s measurement")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    ap.add_argument("--estimator", default="FCL3")
    ap.add_argument("--params", default="{}", help="FCL3_PARAMS JSON")
    ap.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/test")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--embedded", action="store_true",
                    help="the embedded default (an SQLite file, file locks) instead of PostgreSQL + Redis")
    args = ap.parse_args(argv)

    params = json.loads(args.params)
    if args.estimator not in core.LEARNERS:
        ap.error(f"--estimator {args.estimator!r}: choose from {', '.join(core.LEARNERS)}")
    tmp = Path(tempfile.mkdtemp(prefix="fcl3-bench-"))
    if args.embedded:
        dbname = prefix = None
        env = {**os.environ, "DATABASE_URL": "", "REDIS_URL": "", "SQLITE_PATH": str(tmp / "fcl3.db")}
    else:
        dbname, db_url = create_throwaway_database(args.pg_admin_url, "bench")
        prefix = redis_prefix("bench")
        env = {**os.environ, "DATABASE_URL": db_url, "REDIS_URL": args.redis_url, "REDIS_PREFIX": prefix,
               "AUTO_CREATE_SCHEMA": "false"}
    env.update({"FCL3_ESTIMATOR": args.estimator, "FCL3_PARAMS": args.params, "FCL3_KIND": "regression",
                "MODEL_NAME": "bench"})
    log = tmp / "uvicorn.log"
    server = Server(env, workers=args.workers, log_path=log, access_log=False)
    results: dict = {}
    try:
        if not args.embedded:
            migrate(env)
        server.start(timeout=30)
        base = server.url

        stream = make_stream(args.updates, args.tasks, args.rows, args.d)

        # 1. bare engine, built as the service builds it: the same batches, same order
        learner = core.LEARNERS[args.estimator](kind="regression", **params)
        engine_ms = []
        for task, X, y in progress_bar(stream, desc="engine updates", enabled=not args.quiet):
            t0 = time.perf_counter()
            learner.learn(task, X, y)
            engine_ms.append((time.perf_counter() - t0) * 1e3)

        # 2. the same over HTTP (commit to PostgreSQL under the Redis lock before the answer)
        http_ms = []
        with httpx.Client(base_url=base, timeout=60) as client:
            for task, X, y in progress_bar(stream, desc="HTTP updates", enabled=not args.quiet):
                body = {"X": X.tolist(), "y": y.tolist()}
                t0 = time.perf_counter()
                r = client.post(f"/tasks/{task}/data", json=body)
                http_ms.append((time.perf_counter() - t0) * 1e3)
                r.raise_for_status()
            final = client.get("/model").json()
            row = ",".join(repr(float(v)) for v in stream[0][1][0])
            served = client.get("/predict", params={"task_id": "task-0", "x": row}).json()["predictions"]
        assert final["version"] == args.updates
        assert np.allclose(served, learner.predict("task-0", stream[0][1][:1]), rtol=0, atol=0)

        # 3. predictions: bare engine calls/s vs GET /predict requests/s; trivial endpoint
        X1 = stream[0][1][:1]
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < min(args.seconds, 2.0):
            learner.predict("task-0", X1)
            n += 1
        engine_pps = n / (time.perf_counter() - t0)
        predict_path = f"/predict?task_id=task-0&x={row}"
        if not args.quiet:
            print(f"requests/s: GET /predict then GET /healthz, {args.seconds:g} s each ...", file=sys.stderr)
        predict = get_rps("127.0.0.1", server.port, predict_path, args.seconds, args.concurrency)
        trivial = get_rps("127.0.0.1", server.port, "/healthz", args.seconds, args.concurrency)
        body100 = json.dumps({"task_id": "task-0", "X": np.resize(stream[0][1], (100, args.d)).tolist()}).encode()
        post100 = get_rps("127.0.0.1", server.port, "/predict", args.seconds, args.concurrency, body100)
        body1 = json.dumps({"task_id": "task-0", "X": X1.tolist()}).encode()
        post1 = get_rps("127.0.0.1", server.port, "/predict", args.seconds, args.concurrency, body1)

        results = {
            "command": "python -m benchmarks.service " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": machine(),
            "setup": {"updates": args.updates, "tasks": args.tasks, "rows_per_batch": args.rows, "d": args.d,
                      "estimator": args.estimator, "params": params, "uvicorn_workers": args.workers,
                      "concurrency": args.concurrency,
                      "database": "sqlite" if args.embedded else "postgresql",
                      "lock": "file" if args.embedded else "redis",
                      "server_log": str(log)},
            "update_ms": {
                "http_p50": round(percentile(http_ms, 50), 2), "http_p99": round(percentile(http_ms, 99), 2),
                "engine_p50": round(percentile(engine_ms, 50), 2), "engine_p99": round(percentile(engine_ms, 99), 2),
                "overhead_p50": round(percentile(http_ms, 50) - percentile(engine_ms, 50), 2),
                "http_mean": round(statistics.fmean(http_ms), 2), "engine_mean": round(statistics.fmean(engine_ms), 2),
            },
            "predict": {"http_rps": predict["rps"], "http_non_200": predict["non_200"],
                        "engine_calls_per_s": round(engine_pps, 1),
                        "post_1_row_rps": post1["rps"], "post_100_rows_rps": post100["rps"],
                        "post_non_200": post1["non_200"] + post100["non_200"]},
            "trivial_endpoint_rps": trivial["rps"],
            "ratios": {"get_predict_vs_trivial": round(predict["rps"] / max(trivial["rps"], 1e-9), 3),
                       "post_1_row_vs_100_rows_time": round(post1["rps"] / max(post100["rps"], 1e-9), 3)},
        }
    finally:
        server.stop(timeout=15)
        if not args.embedded:
            drop_throwaway_backend(args.pg_admin_url, dbname, args.redis_url, prefix)

    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
