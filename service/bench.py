"""Service benchmark over HTTP on loopback, with PostgreSQL and Redis.

    python -m service.bench [--updates 200] [--tasks 20] [--rows 20] [--d 10]
                            [--seconds 5] [--concurrency 16] [--workers 1] [--json out.json]

Starts ``uvicorn service.main:app`` on a throwaway PostgreSQL database (created on
``--pg-admin-url``, dropped at the end) with the Redis lock, then measures in one run:

* POST /tasks/{id}/data latency p50/p99 (one client: updates of a model are serialised),
  beside the bare engine's ``learn`` time on the same batches in the same order;
* GET /predict requests/s (one row per request, ``--concurrency`` keep-alive connections),
  beside the bare engine's ``predict`` calls/s for the same row;
* GET /healthz requests/s: a trivial FastAPI endpoint, the HTTP stack's ceiling.

The load generator is a minimal asyncio HTTP/1.1 client (keep-alive), so that the client
costs as little CPU as possible: it shares the machine with the server.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def percentile(values, q):
    return float(np.percentile(np.asarray(values), q))


def make_stream(n_updates: int, n_tasks: int, rows: int, d: int, seed: int = 0):
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


async def _http_get_loop(host, port, path, deadline, counts, idx):
    reader, writer = await asyncio.open_connection(host, port)
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    n = bad = 0
    try:
        while time.perf_counter() < deadline:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            n += 1
            bad += status != 200
    finally:
        writer.close()
    counts[idx] = (n, bad)


def get_rps(host, port, path, seconds, concurrency) -> dict:
    async def run():
        counts = [None] * concurrency
        start = time.perf_counter()
        deadline = start + seconds
        await asyncio.gather(*[_http_get_loop(host, port, path, deadline, counts, i) for i in range(concurrency)])
        return counts, time.perf_counter() - start

    counts, elapsed = asyncio.run(run())
    total = sum(c[0] for c in counts)
    bad = sum(c[1] for c in counts)
    return {"requests": total, "non_200": bad, "seconds": round(elapsed, 3), "rps": round(total / elapsed, 1)}


def create_throwaway_database(pg_admin_url: str, tag: str) -> tuple[str, str]:
    """Create an empty PostgreSQL database for one benchmark run; returns (name, SQLAlchemy URL)."""
    import psycopg

    dbname = f"fcl3_{tag}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    return dbname, "postgresql+psycopg://" + pg_admin_url.split("://", 1)[1].rsplit("/", 1)[0] + f"/{dbname}"


def drop_throwaway_backend(pg_admin_url: str, dbname: str, redis_url: str, prefix: str) -> None:
    """Drop the run's database and delete its Redis keys (best effort for Redis)."""
    import psycopg

    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    try:
        import redis

        r = redis.Redis.from_url(redis_url)
        for key in r.scan_iter(match=prefix + "*"):
            r.delete(key)
    except Exception:  # noqa: BLE001
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    args = ap.parse_args(argv)

    from service.config import Settings
    from service.store import make_learner

    dbname, db_url = create_throwaway_database(args.pg_admin_url, "bench")
    prefix = f"fcl3bench:{uuid.uuid4().hex[:8]}:"
    env = {**os.environ, "DATABASE_URL": db_url, "REDIS_URL": args.redis_url, "REDIS_PREFIX": prefix,
           "FCL3_ESTIMATOR": args.estimator, "FCL3_PARAMS": args.params, "FCL3_KIND": "regression",
           "AUTO_CREATE_SCHEMA": "false", "MODEL_NAME": "bench"}
    proc = None
    results: dict = {}
    try:
        subprocess.run([sys.executable, "-m", "alembic", "upgrade", "head"], cwd=ROOT, env=env, check=True,
                       capture_output=True)
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "service.main:app", "--host", "127.0.0.1",
                                 "--port", str(port), "--workers", str(args.workers), "--log-level", "warning",
                                 "--no-access-log"], cwd=ROOT, env=env, start_new_session=True)
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        else:
            raise RuntimeError("server did not start")

        stream = make_stream(args.updates, args.tasks, args.rows, args.d)
        settings = Settings(_env_file=None, FCL3_ESTIMATOR=args.estimator, FCL3_PARAMS=json.loads(args.params))

        # 1. bare engine: the same batches, same order
        learner = make_learner(settings.model_settings())
        engine_ms = []
        for task, X, y in stream:
            t0 = time.perf_counter()
            learner.learn(task, X, y)
            engine_ms.append((time.perf_counter() - t0) * 1e3)

        # 2. the same over HTTP (commit to PostgreSQL under the Redis lock before the answer)
        http_ms = []
        with httpx.Client(base_url=base, timeout=60) as client:
            for task, X, y in stream:
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
        predict = get_rps("127.0.0.1", port, predict_path, args.seconds, args.concurrency)
        trivial = get_rps("127.0.0.1", port, "/healthz", args.seconds, args.concurrency)

        results = {
            "command": "python -m service.bench " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "setup": {"updates": args.updates, "tasks": args.tasks, "rows_per_batch": args.rows, "d": args.d,
                      "estimator": args.estimator, "params": json.loads(args.params), "uvicorn_workers": args.workers,
                      "concurrency": args.concurrency, "database": "postgresql", "lock": "redis"},
            "update_ms": {
                "http_p50": round(percentile(http_ms, 50), 2), "http_p99": round(percentile(http_ms, 99), 2),
                "engine_p50": round(percentile(engine_ms, 50), 2), "engine_p99": round(percentile(engine_ms, 99), 2),
                "overhead_p50": round(percentile(http_ms, 50) - percentile(engine_ms, 50), 2),
                "http_mean": round(statistics.fmean(http_ms), 2), "engine_mean": round(statistics.fmean(engine_ms), 2),
            },
            "predict": {"http_rps": predict["rps"], "http_non_200": predict["non_200"],
                        "engine_calls_per_s": round(engine_pps, 1)},
            "trivial_endpoint_rps": trivial["rps"],
        }
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(15)
        drop_throwaway_backend(args.pg_admin_url, dbname, args.redis_url, prefix)

    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
