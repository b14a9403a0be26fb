"""CPU time per request of the service's hot routes, in process: the ASGI app called directly
(no server, no socket), beside the bare route of ``benchmarks.bare_app``.

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.predict_cost [--requests 500] [--rounds 7]
                           [--postgres] [--multiproc] [--profile get_predict_1_row] [--json out.json]

The service runs on a throwaway SQLite file, or with ``--postgres`` on a throwaway PostgreSQL
database (migrated, dropped at the end) with Redis locks, as ``benchmarks.service`` runs it
(``--multiproc``: with ``PROMETHEUS_MULTIPROC_DIR`` set, as with several workers), with one
model of ``--tasks`` tasks learned through the app itself. Each round sends ``--requests``
requests of each kind in turn (bare route, ``/healthz``, ``GET /predict`` of one row, ``POST
/predict`` of 1 and of 100 rows, the order reversed every other round) and measures the
process's CPU time
(:func:`time.process_time`); the table gives the best round of each kind, in µs per request,
and the worst beside it. ``--profile KIND`` runs that kind under :mod:`cProfile` instead and
prints the functions by their own time. The server's HTTP parsing (uvicorn) is not measured:
it costs the bare route and the service alike.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from .common import add_backend_options
from .launcher import inprocess_service_env


def _scope(method: str, url: str, body: bytes | None) -> dict:
    parts = urlsplit(url)
    headers = [(b"host", b"127.0.0.1")]
    if body is not None:
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": method, "scheme": "http", "path": parts.path, "raw_path": parts.path.encode(),
            "root_path": "", "query_string": parts.query.encode(), "headers": headers,
            "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000)}


async def call(app, method: str, url: str, body: bytes | None = None) -> tuple[int, bytes]:
    """One request to the ASGI ``app``: its status and body."""
    scope = _scope(method, url, body)
    sent = False
    out: dict = {"status": 0, "body": b""}

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body or b"", "more_body": False}
        await asyncio.Event().wait()  # never: the app answers before it reads again

    async def send(message):
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    await app(scope, receive, send)
    return out["status"], out["body"]


class Lifespan:
    """The app's lifespan run through the ASGI protocol (start-up on enter, shutdown on exit)."""

    def __init__(self, app):
        self.app = app
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.outbox: asyncio.Queue = asyncio.Queue()

    async def __aenter__(self):
        self.task = asyncio.create_task(self.app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}},
                                                 self.inbox.get, self.outbox.put))
        await self.inbox.put({"type": "lifespan.startup"})
        message = await self.outbox.get()
        if message["type"] != "lifespan.startup.complete":
            raise RuntimeError(f"start-up failed: {message}")
        return self

    async def __aexit__(self, *exc):
        await self.inbox.put({"type": "lifespan.shutdown"})
        await self.outbox.get()
        await self.task


def loads(d: int) -> tuple[np.ndarray, dict[str, tuple[str, str, str, bytes | None]]]:
    """The requests of the service benchmark (``benchmarks.service``): kind -> (app, method, url, body)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, d))
    row = ",".join(repr(float(v)) for v in X[0])
    body1 = json.dumps({"task_id": "task-0", "X": X[:1].tolist()}).encode()
    body100 = json.dumps({"task_id": "task-0", "X": X.tolist()}).encode()
    return X, {"bare_route": ("bare", "GET", "/", None),
               "healthz": ("service", "GET", "/healthz", None),
               "get_predict_1_row": ("service", "GET", f"/predict?task_id=task-0&x={row}", None),
               "post_predict_1_row": ("service", "POST", "/predict", body1),
               "post_predict_100_rows": ("service", "POST", "/predict", body100)}


async def measure(apps: dict, kinds: dict, requests: int, rounds: int) -> dict[str, list[float]]:
    """µs of CPU per request of each kind, one figure per round."""
    out: dict[str, list[float]] = {k: [] for k in kinds}
    names = list(kinds)
    for k in range(rounds):
        for name in (names if k % 2 == 0 else names[::-1]):
            app, method, url, body = kinds[name]
            app = apps[app]
            t0 = time.process_time()
            for _ in range(requests):
                await call(app, method, url, body)
            out[name].append((time.process_time() - t0) / requests * 1e6)
    return out


def main_async(args) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="fcl3-cost-"))
    env = {"MODEL_NAME": "bench", "FCL3_ESTIMATOR": "FCL3", "FCL3_PARAMS": "{}", "FCL3_KIND": "regression",
           "LOG_LEVEL": args.log_level}
    if args.multiproc:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp / "prometheus")
    try:
        with inprocess_service_env(env, tmp, "cost", args.postgres, args.pg_admin_url, args.redis_url):
            asyncio.run(run(args, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def run(args, tmp: Path) -> None:
    log, stderr = open(tmp / "service.log", "w"), sys.stderr
    sys.stderr = log  # the access lines (the service logs to whatever sys.stderr is)
    try:
        from service.config import get_settings
        from service.main import create_app

        from .bare_app import app as bare

        get_settings.cache_clear()
        service = create_app()
        X, kinds = loads(args.d)
        rng = np.random.default_rng(1)
        async with Lifespan(service):
            for i in range(args.updates):
                Xb = rng.normal(size=(20, args.d))
                status, text = await call(service, "POST", f"/tasks/task-{i % args.tasks}/data",
                                          json.dumps({"X": Xb.tolist(), "y": Xb.sum(axis=1).tolist()}).encode())
                assert status == 200, text
            apps = {"bare": bare, "service": service}
            for name, (app, method, url, body) in kinds.items():
                status, text = await call(apps[app], method, url, body)
                assert status == 200, (name, status, text)
                for _ in range(min(200, args.requests)):  # warm
                    await call(apps[app], method, url, body)
            if args.profile:
                import cProfile
                import pstats

                app, method, url, body = kinds[args.profile]
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(args.requests * args.rounds):
                    await call(apps[app], method, url, body)
                prof.disable()
                sys.stderr = stderr
                pstats.Stats(prof, stream=sys.stdout).sort_stats(args.sort).print_stats(args.top)
                return
            result = await measure(apps, kinds, args.requests, args.rounds)
    finally:
        sys.stderr = stderr
        log.close()
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if args.quiet:
        return
    print(f"CPU µs per request, best [worst] of {args.rounds} rounds of {args.requests} "
          f"(LOG_LEVEL={args.log_level}, {'PostgreSQL + Redis' if args.postgres else 'SQLite'}"
          f"{', multiprocess metrics' if args.multiproc else ''}):")
    for name, values in result.items():
        print(f"  {name:24s} {min(values):7.1f} [{max(values):7.1f}]")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.predict_cost", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=500, help="requests of each kind per round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--updates", type=int, default=40, help="batches learned before measuring")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--log-level", default="INFO")
    ap.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL database and Redis locks")
    add_backend_options(ap)
    ap.add_argument("--multiproc", action="store_true", help="PROMETHEUS_MULTIPROC_DIR set (several workers)")
    ap.add_argument("--profile", default=None, help="a kind to profile instead of measuring")
    ap.add_argument("--sort", default="tottime")
    ap.add_argument("--top", type=int, default=45)
    ap.add_argument("--json", default=None, help="write the µs per request of every round here")
    ap.add_argument("--quiet", action="store_true", help="no table on stdout")
    main_async(ap.parse_args(argv))


if __name__ == "__main__":
    main()
