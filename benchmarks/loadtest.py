"""Load and soak test over loopback: mixed predictions/updates against real uvicorn processes
on one PostgreSQL and one Redis.

    python -m benchmarks.loadtest [--seconds 180] [--clients 16] [--update-fraction 0.05]
                                  [--topologies 1x2,3x1] [--tasks 8] [--rows 10] [--d 8] [--json out.json]

A topology ``PxW`` is P API processes (``uvicorn service.main:app`` each on its own port),
each with W workers, all on the same throwaway PostgreSQL database (made on
``--pg-admin-url``, dropped at the end) and the same Redis lock; clients are spread over the
processes (client-side balancing). For each topology, for ``--seconds``:

* every client loops: with probability ``--update-fraction`` it POSTs a batch (write key)
  to a random task, otherwise it GETs one prediction (read key); keep-alive connections;
* reported: requests/s by kind, p50/p99 latency by kind, statuses; updates refused with
  503/409 (lock busy / stale) are counted, not retried (nothing was applied);
* zero lost updates: acknowledged versions are exactly 1..N (none lost, none twice) and the
  final model's per-task sample counts equal the acknowledged rows;
* memory: RSS of every worker process sampled every ``--rss-every`` seconds (with its
  anonymous part ``RssAnon`` and its thread count); first and last sample after the warm-up
  (first 20 %), max, a least-squares slope in MB/min after the warm-up, and the figure that
  says whether memory is flat: ``second_half_mb_per_min``, the slope over the second half of
  the run only (a worker still filling its allocator's arenas or touching library pages
  grows early and then levels off; a leak keeps the same slope). ``second_half_kb_per_update``
  divides the second-half growth by the updates committed meanwhile. The load is regression:
  the engine keeps a regression task as its sufficient statistics, whose size does not depend
  on the rows learned, so a worker's model stops growing once every task exists and both
  figures should be about 0 (a classification task keeps its rows: see the README). The raw
  samples are in the ``--json`` file.

The load generator is one asyncio process with a minimal HTTP/1.1 client: it shares the
machine with the servers, so on a small machine the figures are a floor.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import numpy as np

from .common import add_backend_options, http_request, machine, matplotlib_pyplot, pct, progress_bar
from .launcher import Server, create_throwaway_database, drop_throwaway_backend, migrate, redis_prefix

WRITE_KEY, READ_KEY = f"load-write-{uuid.uuid4().hex}", f"load-read-{uuid.uuid4().hex}"


# ----------------------------------------------------------------------------- processes and memory
def proc_memory(pid: int) -> dict[str, float]:
    """VmRSS, RssAnon (MB) and thread count of a process from /proc (empty if it is gone)."""
    keys = {"VmRSS:": "rss_mb", "RssAnon:": "anon_mb", "Threads:": "threads"}
    out: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                name = line.split(None, 1)[0] if line.strip() else ""
                if name in keys:
                    v = int(line.split()[1])
                    out[keys[name]] = v if name == "Threads:" else round(v / 1024, 2)
    except OSError:
        return {}
    return out


class Api(Server):
    """One API process of a topology: its own Prometheus multiprocess directory, no access
    log, ready once ``/readyz`` answers and every worker exists."""

    def __init__(self, env: dict, workers: int, log: Path):
        super().__init__({**env, "PROMETHEUS_MULTIPROC_DIR": tempfile.mkdtemp(prefix="fcl3-prom-")},
                         workers=workers, log_path=log, access_log=False)

    def start(self, timeout: float = 60.0) -> "Api":
        super().start(timeout)
        self.wait_workers()
        return self

    def stop(self, timeout: float = 20.0) -> None:
        super().stop(timeout)
        shutil.rmtree(self.env["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)


# ----------------------------------------------------------------------------- load generator
async def client_loop(i: int, port: int, deadline: float, args, rec: dict, rng: random.Random, rows_for):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    host = f"Host: 127.0.0.1:{port}\r\n"
    try:
        while time.perf_counter() < deadline:
            task = f"task-{rng.randrange(args.tasks)}"
            if rng.random() < args.update_fraction:
                X, y = rows_for(task, rng)
                body = json.dumps({"X": X, "y": y}).encode()
                head = (f"POST /tasks/{task}/data HTTP/1.1\r\n{host}Authorization: Bearer {WRITE_KEY}\r\n"
                        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
                t0 = time.perf_counter()
                status, payload = await http_request(reader, writer, head, body)
                rec["update_ms"].append((time.perf_counter() - t0) * 1e3)
                rec["status"][f"update {status}"] = rec["status"].get(f"update {status}", 0) + 1
                if status == 200:
                    rec["acks"].append((task, len(y), json.loads(payload)["version"]))
                    rec["ack_t"].append(time.monotonic())
            else:
                x = ",".join(f"{v:.3f}" for v in rows_for(task, rng, n=1)[0][0])
                head = (f"GET /predict?task_id={task}&x={x} HTTP/1.1\r\n{host}"
                        f"Authorization: Bearer {READ_KEY}\r\n\r\n").encode()
                t0 = time.perf_counter()
                status, _ = await http_request(reader, writer, head)
                rec["predict_ms"].append((time.perf_counter() - t0) * 1e3)
                rec["status"][f"predict {status}"] = rec["status"].get(f"predict {status}", 0) + 1
    finally:
        writer.close()


def run_load(ports: list[int], args, seconds: float) -> tuple[dict, float]:
    weights = {f"task-{t}": np.random.default_rng(t).normal(size=args.d) for t in range(args.tasks)}

    def rows_for(task, rng, n=None):
        n = n or args.rows
        X = [[rng.gauss(0, 1) for _ in range(args.d)] for _ in range(n)]
        w = weights[task]
        y = [float(np.dot(r, w)) + rng.gauss(0, 0.1) for r in X]
        return X, (y if args.kind == "regression" else [float(v > 0) for v in y])

    rec = {"update_ms": [], "predict_ms": [], "status": {}, "acks": [], "ack_t": []}

    async def main():
        deadline = time.perf_counter() + seconds
        await asyncio.gather(*[client_loop(i, ports[i % len(ports)], deadline, args, rec, random.Random(1000 + i),
                                           rows_for) for i in range(args.clients)])

    t0 = time.perf_counter()
    asyncio.run(main())
    return rec, time.perf_counter() - t0


def _slope_per_min(ts, ms) -> float:
    return float(np.polyfit(ts, ms, 1)[0]) * 60 if len(ts) >= 3 else 0.0


def rss_summary(samples: list[dict], warmup: float, half: float, ack_times: list[float] | None = None) -> dict:
    """Per-worker memory figures from samples ``{"t", "rss_mb", "anon_mb", "threads"}``.

    ``warmup``/``half``: seconds since the start of the load; ``ack_times``: when each update
    was acknowledged (same clock), for the growth per committed update in the second half."""
    after = [s for s in samples if s["t"] >= warmup] or samples
    second = [s for s in samples if s["t"] >= half] or samples
    ts, ms = np.array([s["t"] for s in after]), np.array([s["rss_mb"] for s in after])
    t2, m2 = np.array([s["t"] for s in second]), np.array([s["rss_mb"] for s in second])
    a2 = np.array([s.get("anon_mb", np.nan) for s in second])
    slope2 = _slope_per_min(t2, m2)
    out = {"first_mb": round(float(ms[0]), 1), "last_mb": round(float(ms[-1]), 1), "max_mb": round(float(ms.max()), 1),
           "slope_mb_per_min": round(_slope_per_min(ts, ms), 2),
           "second_half_mb_per_min": round(slope2, 2),
           "second_half_anon_mb_per_min": round(_slope_per_min(t2, a2), 2) if np.all(np.isfinite(a2)) else None,
           "threads_max": max((s.get("threads", 0) for s in samples), default=0),
           "samples": len(after)}
    if ack_times is not None and len(t2) >= 2:
        n = sum(1 for t in ack_times if t2[0] <= t <= t2[-1])
        grown_kb = slope2 / 60 * (t2[-1] - t2[0]) * 1024
        out["second_half_updates"] = n
        out["second_half_kb_per_update"] = round(grown_kb / n, 2) if n else None
    return out


def run_topology(processes: int, workers: int, args, base_env: dict, logdir: Path) -> dict:
    dbname, db_url = create_throwaway_database(args.pg_admin_url, "load")
    prefix = redis_prefix("load")
    env = {**base_env, "DATABASE_URL": db_url, "REDIS_PREFIX": prefix}
    apis: list[Api] = []
    try:
        migrate(env)
        for k in range(processes):  # appended before starting: a failed start is stopped too
            apis.append(Api(env, workers, logdir / f"api-{processes}x{workers}-{k}.log"))
            apis[-1].start()
        # every task learned once, so that predictions have something to answer
        seed_acks = []
        with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {WRITE_KEY}"}) as c:
            rng = np.random.default_rng(0)
            for t in range(args.tasks):
                X = rng.normal(size=(args.rows, args.d))
                y = X @ np.random.default_rng(t).normal(size=args.d)
                y = y if args.kind == "regression" else (y > 0).astype(float)
                r = c.post(f"{apis[0].url}/tasks/task-{t}/data", json={"X": X.tolist(), "y": y.tolist()})
                r.raise_for_status()
                seed_acks.append((f"task-{t}", args.rows, r.json()["version"]))

        pids = {f"api{k}/pid{p}": p for k, a in enumerate(apis) for p in a.worker_pids()}
        samples: dict[str, list[dict]] = {name: [] for name in pids}
        stop = threading.Event()
        bar = progress_bar(total=round(args.seconds), desc=f"load {processes}x{workers}", unit="s",
                           enabled=not args.quiet)
        t_start = time.monotonic()

        def sampler():
            while not stop.is_set():
                now = time.monotonic() - t_start
                for name, pid in pids.items():
                    m = proc_memory(pid)
                    if m.get("rss_mb") is not None:
                        samples[name].append({"t": round(now, 2), **m})
                bar.update(min(round(now), bar.total) - bar.n)
                stop.wait(args.rss_every)

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        rec, elapsed = run_load([a.port for a in apis], args, args.seconds)
        stop.set()
        th.join()
        bar.update(bar.total - bar.n)
        bar.close()

        # zero lost updates
        acks = seed_acks + rec["acks"]
        versions = sorted(v for _, _, v in acks)
        with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {READ_KEY}"}) as c:
            model = c.get(f"{apis[-1].url}/model").json()
            tasks = {t["task_id"]: t for t in c.get(f"{apis[-1].url}/tasks").json()["tasks"]}
            metrics_text = c.get(f"{apis[0].url}/metrics").text
        acked_rows: dict[str, int] = {}
        for task, n, _ in acks:
            acked_rows[task] = acked_rows.get(task, 0) + n
        lost_or_double = {
            "acknowledged_updates": len(acks),
            "final_version": model["version"],
            "versions_exactly_1_to_N": versions == list(range(1, len(acks) + 1)),
            "model_batches_equal_acks": model["n_batches"] == len(acks),
            "task_samples_equal_acked_rows": all(tasks[t]["n_samples"] == n for t, n in acked_rows.items())
            and set(tasks) == set(acked_rows),
        }
        lost_or_double["zero_lost_updates"] = all(v for k, v in lost_or_double.items() if isinstance(v, bool))
        warm = 0.2 * args.seconds
        ack_times = [t - t_start for t in rec["ack_t"]]
        n_pred, n_upd = len(rec["predict_ms"]), len(rec["update_ms"])
        return {
            "throwaway_database": dbname,  # dropped at the end
            "topology": f"{processes} process(es) x {workers} worker(s)",
            "seconds": round(elapsed, 1),
            "requests_per_s": round((n_pred + n_upd) / elapsed, 1),
            "predictions_per_s": round(n_pred / elapsed, 1),
            "updates_attempted_per_s": round(n_upd / elapsed, 2),
            "updates_committed_per_s": round(len(rec["acks"]) / elapsed, 2),
            "predict_ms": {"p50": pct(rec["predict_ms"], 50), "p99": pct(rec["predict_ms"], 99)},
            "update_ms": {"p50": pct(rec["update_ms"], 50), "p99": pct(rec["update_ms"], 99)},
            "status_counts": dict(sorted(rec["status"].items())),
            "consistency": lost_or_double,
            "worker_rss": {name: rss_summary(s, warm, args.seconds / 2, ack_times) for name, s in samples.items() if s},
            "metrics_exposed": "fcl3_update_duration_seconds_count" in metrics_text,
            "worker_rss_samples": samples,
        }
    finally:
        for a in apis:
            a.stop()
        drop_throwaway_backend(args.pg_admin_url, dbname, args.redis_url, prefix)


def plot_rss(results: dict, path: str) -> str:
    """Every worker's RSS against time, one panel per topology, with the warm-up shaded:
    flat lines are the claim, so the figure shows them with the committed-update count."""
    plt = matplotlib_pyplot()
    runs = results["runs"]
    fig, axes = plt.subplots(1, len(runs), figsize=(6.5 * len(runs), 3.8), squeeze=False)
    for ax, run in zip(axes[0], runs):
        for name, samples in run["worker_rss_samples"].items():
            ax.plot([s["t"] / 60 for s in samples], [s["rss_mb"] for s in samples], lw=1.2, label=name)
        ax.axvspan(0, 0.2 * run["seconds"] / 60, color="0.9", label="warm-up (not in the slopes)")
        n = run["consistency"]["acknowledged_updates"]
        ax.set(xlabel="minutes", ylabel="worker RSS (MB)", ylim=(0, None),
               title=f"{run['topology']}: {run['requests_per_s']:.0f} req/s, {n} updates acked")
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
    setup = results["setup"]
    fig.suptitle(f"{setup['estimator']} {setup.get('kind', 'regression')}, d={setup['d']}, "
                 f"{setup['clients']} clients, {setup['update_fraction']:.0%} updates", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.loadtest", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=180.0, help="duration of each topology's run")
    ap.add_argument("--clients", type=int, default=16, help="concurrent keep-alive clients")
    ap.add_argument("--update-fraction", type=float, default=0.05)
    ap.add_argument("--topologies", default="1x2,3x1", help="comma-separated PROCESSESxWORKERS")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--rows", type=int, default=10, help="rows per update batch")
    ap.add_argument("--d", type=int, default=8, help="features")
    ap.add_argument("--estimator", default="FCL3")
    ap.add_argument("--kind", choices=["regression", "classification"], default="regression",
                    help="classification tasks keep their rows, so their workers grow with the data")
    ap.add_argument("--params", default="{}", help="FCL3_PARAMS JSON")
    ap.add_argument("--lock-wait", type=float, default=5.0)
    ap.add_argument("--rss-every", type=float, default=2.0, help="seconds between RSS samples")
    add_backend_options(ap)
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--plot", default=None, help="draw every worker's RSS over time to this PNG")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)

    base_env = {**os.environ, "REDIS_URL": args.redis_url, "FCL3_ESTIMATOR": args.estimator,
                "FCL3_PARAMS": args.params, "FCL3_KIND": args.kind, "AUTO_CREATE_SCHEMA": "false",
                "MODEL_NAME": "load", "API_WRITE_KEYS": WRITE_KEY, "API_READ_KEYS": READ_KEY,
                "LOCK_WAIT": str(args.lock_wait), "DB_POOL_SIZE": "10", "OPENBLAS_NUM_THREADS": "1",
                "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    logdir = Path(tempfile.mkdtemp(prefix="fcl3-loadtest-"))
    results = {
        "command": "python -m benchmarks.loadtest " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {**machine(), "loadavg_at_start": os.getloadavg()},
        "setup": {"clients": args.clients, "update_fraction": args.update_fraction, "tasks": args.tasks,
                  "rows_per_update": args.rows, "d": args.d, "estimator": args.estimator, "kind": args.kind,
                  "params": json.loads(args.params), "database": "postgresql", "lock": "redis",
                  "logs": str(logdir)},
        "runs": [],
    }
    for topo in args.topologies.split(","):
        p, w = (int(v) for v in topo.lower().split("x"))
        print(f"running {p} process(es) x {w} worker(s) for {args.seconds:g} s ...", file=sys.stderr, flush=True)
        results["runs"].append(run_topology(p, w, args, base_env, logdir))
    shown = {**results, "runs": [{k: v for k, v in r.items() if k != "worker_rss_samples"} for r in results["runs"]]}
    print(json.dumps(shown, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if args.plot:
        plot_rss(results, args.plot)
    ok = all(r["consistency"]["zero_lost_updates"] for r in results["runs"])
    if not ok:
        print("LOST OR DOUBLED UPDATES", file=sys.stderr)
    return results


if __name__ == "__main__":
    res = main()
    sys.exit(0 if all(r["consistency"]["zero_lost_updates"] for r in res["runs"]) else 1)
