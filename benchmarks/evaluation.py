"""What online evaluation adds to an update: 500 tasks that each hold evaluation rows.

    python -m benchmarks.evaluation [--tasks 500] [--eval-rows 50] [--rows 20] [--d 10]
                                    [--updates 500] [--rescore 8] [--no-matrix] [--embedded] [--json out.json]

Runs the service's update path in process (``service.learning.updates``: lock, load, learn, score,
commit; no HTTP) on a throwaway PostgreSQL database (``--pg-admin-url``; ``--embedded``: an
SQLite file), for two models fed the same stream:

* ``evaluated``: every task gets ``--eval-rows`` held-out rows before its first batch;
* ``control``: no evaluation rows (prequential scoring only, which every known-task batch has).

Each phase runs the evaluated model's updates first, waits for its background work, then the
control's: the background matrix rows compete for the interpreter with the evaluated model's
own updates (as they would in a server), never with the control's.

Phase 1 learns the ``--tasks`` tasks (each update is a new task's first batch: the accuracy
matrix gains a row, for which every learned evaluation set is scored just after the commit,
off the update lock, in the process's background thread: its time is reported apart, as
``matrix_rows_background``; with ``--no-matrix`` there is none); phase 2 sends ``--updates``
batches of known tasks (each rescores its own task's set in the commit and ``--rescore`` others
just after it, off the update lock). For each update the service records the engine's time
(``learn``), the prequential scoring time, the evaluation time (the commit's hook plus the
rescoring after it, also given apart as ``rescore_after_commit``); the added time is
prequential + evaluation. Reported: median and p99 per phase (phase 1 also per block of 100
tasks), beside the update's whole time (lock acquired to answer) and the time the update lock
was held (``lock_held``) of both models.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

from .common import machine, pct, progress_bar, write_json


def _stream(n_tasks: int, n_updates: int, rows: int, eval_rows: int, d: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(4, d))
    W = [centres[t % 4] + 0.2 * rng.normal(size=d) for t in range(n_tasks)]

    def batch(t, n):
        X = rng.normal(size=(n, d))
        return X, X @ W[t] + 0.3 * rng.normal(size=n)

    first = [(f"task-{t}", *batch(t, rows), *batch(t, eval_rows)) for t in range(n_tasks)]
    later = [(f"task-{t}", *batch(t, rows)) for t in rng.integers(0, n_tasks, size=n_updates)]
    return first, later


def _stats(values_ms) -> dict:
    return {"n": len(values_ms), "median_ms": pct(values_ms, 50), "p99_ms": pct(values_ms, 99),
            "max_ms": round(max(values_ms), 2) if values_ms else None}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.evaluation", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=500)
    ap.add_argument("--eval-rows", type=int, default=50)
    ap.add_argument("--rows", type=int, default=20)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--updates", type=int, default=500)
    ap.add_argument("--rescore", type=int, default=8, help="EVALUATION_RESCORE")
    ap.add_argument("--no-matrix", action="store_true", help="EVALUATION_MATRIX=false")
    ap.add_argument("--embedded", action="store_true", help="an SQLite file instead of PostgreSQL")
    ap.add_argument("--pg-admin-url", default=os.environ.get("FCL3_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/test"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)

    from service.evaluation import model_evaluation
    from service.models import lifecycle
    from service.learning import updates
    from service.config import Settings
    from service.db import make_bulk_engine, make_engine, upgrade_schema
    from service.writing.locks import LocalLocks

    from .launcher import create_throwaway_database

    dbname = None
    tmp = tempfile.mkdtemp(prefix="fcl3-evalbench-")
    if args.embedded:
        settings = Settings(_env_file=None, SQLITE_PATH=os.path.join(tmp, "bench.db"), DATABASE_URL=None)
    else:
        dbname, url = create_throwaway_database(args.pg_admin_url, "evalbench")
        settings = Settings(_env_file=None, DATABASE_URL=url)
    settings = settings.model_copy(update={"EVALUATION_RESCORE": args.rescore, "EVALUATION_MATRIX": not args.no_matrix})
    engine = make_engine(settings)
    bulk = make_bulk_engine(settings, engine)
    upgrade_schema(engine)
    locks = LocalLocks(30, 5)
    from service.evaluation.model_evaluation import EvaluationSettings
    from service.hosting import ModelRegistry, Shared

    registry = ModelRegistry(engine, bulk, locks, "bench-default", settings.model_settings(), 10,
                             shared=Shared(evaluation=EvaluationSettings.of(settings)))
    models = {}
    for name in ("evaluated", "control"):
        m = registry.get(name)
        lifecycle.create_model(m, {"estimator": "FCL3", "kind": "regression", "params": {}, "d": None},
                               settings.max_columns)
        models[name] = registry.get(name)
    matrix_ms = []
    ev = models["evaluated"].evaluation.matrix
    row = ev.store_row

    def timed_row(job):  # the accuracy-matrix rows, computed off the lock in the background
        t0 = time.perf_counter()
        try:
            return row(job)
        finally:
            matrix_ms.append((time.perf_counter() - t0) * 1000)

    ev.store_row = timed_row
    submit, waited = ev.submit, []

    def timed_submit(*a, **kw):  # a new task's update waits here (lock released) on a full backlog
        t0 = time.perf_counter()
        try:
            return submit(*a, **kw)
        finally:
            waited.append(time.perf_counter() - t0)

    ev.submit = timed_submit
    first, later = _stream(args.tasks, args.updates, args.rows, args.eval_rows, args.d)
    rec: dict[str, dict[str, list]] = {n: {"new": [], "known": []} for n in models}
    eval_post_ms = []
    try:
        for phase, items in (("new", first), ("known", later)):
            # One model at a time, so that the evaluated model's background matrix rows never
            # compete with the control's updates (they do with the evaluated model's own).
            for name, m in models.items():
                for item in progress_bar(items, desc=f"{name}: {phase}-task updates", enabled=not args.quiet,
                                         unit="update"):
                    task, X, y = item[:3]
                    if phase == "new" and name == "evaluated":
                        t0 = time.perf_counter()
                        model_evaluation.add_evaluation_rows(m, task, item[3], item[4])
                        eval_post_ms.append((time.perf_counter() - t0) * 1000)
                    waited.clear()
                    t0 = time.perf_counter()
                    p, _ = updates.learn_batch(m, task, X, y)
                    total = time.perf_counter() - t0 - sum(waited)  # the update, not the backlog wait
                    rec[name][phase].append({"total": total * 1000, "backlog_wait": sum(waited) * 1000 if name == "evaluated" else 0.0, "engine": p.engine_seconds * 1000,
                                             "prequential": p.prequential_seconds * 1000,
                                             "evaluation": (p.evaluation_seconds + p.rescore_seconds) * 1000,
                                             "rescore_after_commit": p.rescore_seconds * 1000,
                                             "lock_held": p.lock_held_seconds * 1000,
                                             "rescored": p.evaluated.rescored})
                ev.wait_idle(600)
    finally:
        engine.dispose()
        if bulk is not engine:
            bulk.dispose()
        if dbname is not None:
            from .launcher import drop_throwaway_backend

            drop_throwaway_backend(args.pg_admin_url, dbname, "redis://127.0.0.1:6379/0", "none:")

    def summary(name, phase, rows):
        added = [r["prequential"] + r["evaluation"] for r in rows]
        return {"added": _stats(added), "evaluation": _stats([r["evaluation"] for r in rows]),
                "prequential": _stats([r["prequential"] for r in rows]),
                "rescore_after_commit": _stats([r["rescore_after_commit"] for r in rows]),
                "engine": _stats([r["engine"] for r in rows]), "update_total": _stats([r["total"] for r in rows]),
                "lock_held": _stats([r["lock_held"] for r in rows]),
                "backlog_wait": _stats([r["backlog_wait"] for r in rows]),
                "rescored_median": float(np.median([r["rescored"] for r in rows])) if rows else None}

    out = {"command": "python -m benchmarks.evaluation " + " ".join(argv if argv is not None else sys.argv[1:]),
           "backend": "sqlite" if args.embedded else "postgresql", "machine": machine(), "settings": vars(args),
           "post_evaluation_rows": _stats(eval_post_ms), "matrix_rows_background": _stats(matrix_ms),
           "results": {}}
    for name in models:
        out["results"][name] = {phase: summary(name, phase, rec[name][phase]) for phase in ("new", "known")}
        blocks = {}
        rows = rec[name]["new"]
        for start in range(0, len(rows), 100):
            blocks[f"tasks {start + 1}-{min(start + 100, len(rows))}"] = summary(name, "new", rows[start:start + 100])["added"]
        out["results"][name]["new_by_block"] = blocks
    if args.json:
        write_json(args.json, out)
    import json

    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
