"""Where a sequential update's time outside the engine goes in the database: every SQL statement
of School's stream timed in process, beside the engine's own update.

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.commit_statements [--postgres] [--batches 278]
                           [--json out.json]

The service runs in this process (its ASGI app called directly, no server, no socket) on a
throwaway SQLite file, or with ``--postgres`` on a throwaway PostgreSQL database (migrated,
dropped at the end) with Redis locks, as ``benchmarks.service`` runs it; one client posts
School's batches (:func:`benchmarks.service.school_stream`) one after another, and the
engine alone learns the same batches in a loop of its own. Each statement is timed from
SQLAlchemy's ``before_cursor_execute`` to its ``after_cursor_execute`` event (the driver's
round trip and the database's work); a transaction's ``COMMIT`` from the ``commit`` event to
the connection's return to the pool (``checkin``). The table gives, per kind of statement,
how many ran, the median of one and the mean per update, in ms, and the sum per update
beside the engine's median update and the request's median.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from .common import add_backend_options, machine
from .launcher import inprocess_service_env
from .predict_cost import Lifespan, call


def statement_kind(sql: str) -> str:
    """``UPDATE tasks SET version, meta, ...`` from a statement's text: the verb, the table and,
    for an ``UPDATE``, the columns it sets (statements that set other columns are other kinds)."""
    sql = " ".join(sql.split())
    m = re.match(r"(?i)update (\w+) set (.*?)(?: where |$)", sql)
    if m:
        return f"UPDATE {m.group(1)} SET " + ", ".join(re.findall(r"(\w+)\s*=", m.group(2)))
    m = re.match(r"(?i)(insert into|delete from) (\w+)", sql)
    if m:
        return f"{m.group(1).upper()} {m.group(2)}"
    m = re.match(r"(?i)select (.*?) from (\w+)", sql)
    if m:
        return f"SELECT {m.group(1)[:40]} FROM {m.group(2)}"
    return sql[:60]


class StatementClock:
    """Times every statement and every ``COMMIT`` of every engine (SQLAlchemy's public events)."""

    def __init__(self):
        from sqlalchemy import event
        from sqlalchemy.engine import Engine
        from sqlalchemy.pool import Pool

        self.seconds: dict[str, list[float]] = defaultdict(list)
        self._started: dict[int, float] = {}
        self._committing: dict[int, float] = {}
        self.recording = False
        self._hooks = [(Engine, "before_cursor_execute", self._before), (Engine, "after_cursor_execute", self._after),
                       (Engine, "commit", self._commit), (Pool, "checkin", self._checkin)]
        for target, name, fn in self._hooks:
            event.listen(target, name, fn)

    def close(self) -> None:
        from sqlalchemy import event

        for target, name, fn in self._hooks:
            event.remove(target, name, fn)

    def _before(self, conn, cursor, statement, parameters, context, executemany):
        self._started[id(conn)] = time.perf_counter()

    def _after(self, conn, cursor, statement, parameters, context, executemany):
        t0 = self._started.pop(id(conn), None)
        if self.recording and t0 is not None:
            self.seconds[statement_kind(statement)].append(time.perf_counter() - t0)

    def _commit(self, conn):
        self._committing[id(conn.connection.dbapi_connection)] = time.perf_counter()

    def _checkin(self, dbapi_connection, record):
        t0 = self._committing.pop(id(dbapi_connection), None)
        if self.recording and t0 is not None:
            self.seconds["COMMIT"].append(time.perf_counter() - t0)


def main_run(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="fcl3-statements-"))
    env = {"MODEL_NAME": "bench", "FCL3_ESTIMATOR": "FCL3", "FCL3_PARAMS": "{}", "FCL3_KIND": "regression",
           "LOG_LEVEL": "WARNING"}
    try:
        with inprocess_service_env(env, tmp, "statements", args.postgres, args.pg_admin_url,
                                   args.redis_url) as dbname:
            res = asyncio.run(run(args))
        return {**res, "throwaway_database": dbname}  # dropped by now
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def run(args) -> dict:
    import core
    from service.config import get_settings
    from service.main import create_app

    from .service import school_stream

    stream, source = school_stream(args.batches)
    bodies = [json.dumps({"X": X.tolist(), "y": y.tolist()}).encode() for _, X, y in stream]
    learner = core.LEARNERS["FCL3"](kind="regression")
    engine_ms = []
    for task, X, y in stream:
        t0 = time.perf_counter()
        learner.learn(task, X, y)
        engine_ms.append((time.perf_counter() - t0) * 1e3)
    get_settings.cache_clear()
    app = create_app()
    clock = StatementClock()
    request_ms = []
    try:
        async with Lifespan(app):
            clock.recording = True
            for (task, _, _), body in zip(stream, bodies):
                t0 = time.perf_counter()
                status, text = await call(app, "POST", f"/tasks/{task}/data", body)
                request_ms.append((time.perf_counter() - t0) * 1e3)
                assert status == 200, text
            clock.recording = False
    finally:
        clock.close()
        get_settings.cache_clear()
    n = len(stream)
    kinds = {k: {"count": len(v), "median_ms": round(statistics.median(v) * 1e3, 3),
                 "per_update_ms": round(sum(v) * 1e3 / n, 3)}
             for k, v in sorted(clock.seconds.items(), key=lambda kv: -sum(kv[1]))}
    return {"machine": machine(), "database": "postgresql" if args.postgres else "sqlite", "source": source, "updates": n,
            "engine_p50_ms": round(statistics.median(engine_ms), 3),
            "request_p50_ms": round(statistics.median(request_ms), 3),
            "sql_per_update_ms": round(sum(v["per_update_ms"] for v in kinds.values()), 3), "statements": kinds}


def table(res: dict) -> str:
    lines = [f"{res['database']}, {res['source']}, {res['updates']} updates: request p50 {res['request_p50_ms']:.2f} ms "
             f"(in process), engine alone p50 {res['engine_p50_ms']:.2f} ms, SQL per update {res['sql_per_update_ms']:.2f} ms",
             f"{'count':>6} {'median ms':>10} {'ms/update':>10}  statement"]
    for kind, v in res["statements"].items():
        lines.append(f"{v['count']:6d} {v['median_ms']:10.3f} {v['per_update_ms']:10.3f}  {kind}")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.commit_statements", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=None, help="School's first batches only (default: all 278)")
    ap.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL database and Redis locks")
    add_backend_options(ap)
    ap.add_argument("--json", default=None, help="write the result here")
    ap.add_argument("--quiet", action="store_true", help="no table on stdout")
    args = ap.parse_args(argv)
    command = "python -m benchmarks.commit_statements " + " ".join(sys.argv[1:] if argv is None else argv)
    res = {"command": command, **main_run(args)}
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    if not args.quiet:
        print(table(res))
    return res


if __name__ == "__main__":
    main()
