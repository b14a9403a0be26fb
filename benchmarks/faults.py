"""Fault suite: real servers, a real client, faults injected and undone; is every acknowledged
batch stored exactly once? (``python -m benchmarks.faults``, issue 22 part 2).

    python -m benchmarks.faults [--quick] [--faults kill9-sqlite,disk-full,...] [--json PATH]
                                [--writers 3] [--workers 2] [--lock-ttl S] [--quiet]

Bounded: ``--quick`` about 2 min for the eight faults (short phases, two kill cycles, the
servers' ``LOCK_TTL`` 10 s), the default about 7 min (four kill cycles, five removals, the service's defaults).
Loopback only.

Each fault runs ``uvicorn service.main:app`` (:class:`benchmarks.launcher.Server`, ``--workers
2`` by default) on a loopback port with its own store: a fresh SQLite file in a temporary
directory, or a throwaway PostgreSQL database (made on ``--pg-admin-url``, dropped at the end)
with its own Redis key prefix — or, where PostgreSQL or Redis is the fault, a PostgreSQL
cluster (``initdb`` + ``pg_ctl`` in a temporary directory, a spare port) or a ``redis-server``
(a spare port, no persistence) started for the fault alone: the machine's shared servers are
never stopped. Meanwhile ``--writers`` threads, each with the shipped :class:`fcl3.Client`
(default retries: a batch answered 503 or 409 is retried for ``Retries.patience`` = 60 s, a
lost connection is retried with the same ``Idempotency-Key``), send labelled regression
batches (8 rows, 4 features, 4 tasks; a batch's rows are its label, every batch different),
and one reader asks for predictions.

A fault run: writes for ``warm`` seconds; the fault injected, held ``hold`` seconds, undone
(its *end*); from the end a probe (a client that never retries, so that no backoff of its own
delays it) sends a new batch every 0.1 s until one is acknowledged; the writers go on until
their own first acknowledgement after the end (at most ``recover_cap`` s) and ``after``
seconds more. Then the first 5 batches acknowledged before the fault are sent again with their
own keys (a client retrying after a lost answer: each must come back as a replay, not be
applied again); the writers stop and the store is read back directly (SQLAlchemy on the
tables ``models``, ``tasks`` and ``batches``, not through the API).

The faults (``--faults``, default all):

* ``kill9-sqlite`` / ``kill9-postgres``: ``kill -9`` during writes, ``cycles`` times (2 quick, 4
  by default), alternately: the server's whole process group (master and both workers), started
  again 1 s later (as a supervisor would; end: it answers ``/readyz``); one worker alone, the
  other serving on (uvicorn's master starts a new one; end: the kill). SQLite (the embedded
  default: file locks) and PostgreSQL + Redis (the shared servers, a throwaway database, a
  prefix of its own).
* ``postgres-restart``: a throwaway cluster stopped (``pg_ctl stop -m fast``: every connection
  dropped), held, started again on the same port (end: ``pg_ctl start`` returned); Redis: the
  shared one, a prefix of its own.
* ``redis-restart``: a throwaway ``redis-server`` stopped (SIGTERM; ``--save ''``, so the lock
  keys go with it), held, started again on the same port (end: it answers PING); PostgreSQL:
  the shared server, a throwaway database.
* ``disk-full``: the SQLite file on a tmpfs of its own (as root: ``mount -t tmpfs -o
  size=64m``), the rest of the tmpfs filled by a file written until ``ENOSPC``, held, the file
  deleted (the end). Not root: not injected (said so in the results).
* ``sqlite-removed``: the SQLite file unlinked under the running server (its ``-wal`` and
  ``-shm`` left, as ``rm fcl3.db`` does), held; then the server restarted (an operator's
  remedy: a new empty store; the end: it answers ``/readyz``); once quick, 5 times by
  default. Batches acknowledged before the removal went with the file: reported apart
  (``removed_with_file``: acknowledged by the old server at a version the file held when it
  was unlinked, read through a connection opened before the unlink, just after it), left out
  of the accounting; ``acked_while_removed``: acknowledged by the old server at a later
  version, i.e. committed after the unlink (each is lost).
* ``clock-sqlite`` / ``clock-postgres``: the server's wall clock stepped 2 days forward, held,
  stepped back (the end). The step: an ``LD_PRELOAD`` shim compiled here (:data:`CLOCK_SHIM`,
  ``cc``) adds the seconds written in a file (re-read every 0.1 s) to ``clock_gettime`` of
  ``CLOCK_REALTIME``, ``gettimeofday`` and ``time``, the monotonic clock untouched, as an NTP
  step; SQLite's ``'now'`` moves with the process's clock, PostgreSQL's ``now()`` does not
  (libfaketime cannot stand in: see :func:`build_clock_shim`). ``IDEMPOTENCY_PURGE_EVERY=1``
  so that expired keys are purged during the step (default: at most every 300 s per process);
  the batches are sent again with their keys while the clock is ahead.
* ``bad-input-sqlite`` / ``bad-input-postgres``: issue 55's inputs (:mod:`benchmarks.bad_inputs`:
  refused batches with new levels, 400-digit integers, NUL, lone surrogates and ESC in levels,
  CSV bodies with unknown or duplicated columns, ``1_000``, another charset, remembering with
  a read key, labels refused, a retry of a batch taken back since, schemas past the column cap,
  mangled imports), sent by a client of their own to a records model beside the writers; the
  row counts them (``bad_inputs``), those answered 5xx (``bad_input_5xx``) and those not
  answered their 4xx or that changed something (``bad_input_wrong``: the model's version,
  vocabulary, remembered rows or the list of models). The servers keep at most 50 remembered
  rows per model (``MAX_REMEMBERED_PER_MODEL``), so that one case passes it.

Figures per fault: ``acknowledged`` (batches answered 200), ``stored`` (rows of ``batches``),
``lost`` (acknowledged, not stored), ``unacked_stored`` (stored although never acknowledged:
the client gave up, or the probe's request was cut), ``duplicates`` (a batch stored more than
once), ``ack_equals_stored`` (the stored batches are exactly the acknowledged ones, each once,
at the version it was acknowledged with, and the model's version and its tasks' batch and row
counts agree with them), ``resent_applied`` (batches sent again with their keys and applied
again), the statuses of every write and read attempt (``5xx``: every 5xx answer;
``5xx_not_503``: 500 and the like; a 503 says "nothing applied, retry"; ``5xx_after_recovery``:
answered after the service had written again), what the writers gave up with, ``recovery_s``
(seconds from the fault's end to the first acknowledged batch: the probe's or a writer's;
each cycle's, the largest) and ``client_recovery_s`` (the same for the writers alone, their
backoff included).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import httpx
import numpy as np

from benchmarks.common import machine, progress_bar, write_json
from benchmarks.launcher import (ROOT, PgCluster, RedisProcess, Server, create_throwaway_database,
                                 drop_throwaway_backend, find_pg_bindir, migrate, redis_prefix)

MODEL = "faults"
WRITE_KEY = "faults-write-key"
READ_KEY = "faults-read-key"
D, ROWS, TASKS = 4, 8, 4
DEFAULT_JSON = ROOT / "docs" / "results" / "faults.json"


@dataclass(frozen=True)
class Timing:
    """Seconds of each phase of a fault run (see the module's docstring)."""

    warm: float
    hold: float
    after: float
    recover_cap: float
    cycles: int  # kill -9 cycles
    removals: int  # sqlite-removed cycles
    join: float  # at most this long for the writers' last calls once told to stop


QUICK = Timing(warm=1.0, hold=1.5, after=1.0, recover_cap=30.0, cycles=2, removals=1, join=75.0)
FULL = Timing(warm=5.0, hold=10.0, after=8.0, recover_cap=90.0, cycles=4, removals=5, join=120.0)


# ----------------------------------------------------------------------------- the client side
@dataclass
class Batch:
    """One labelled batch: what was sent and what became of it."""

    writer: int
    task: str
    X: list[list[float]]
    y: list[float]
    key: str
    t_sent: float
    t_ack: float | None = None
    version: int | None = None
    replayed: bool = False
    attempts: int = 0
    error: str | None = None

    @property
    def label(self) -> bytes:
        return batch_label(self.task, self.X, self.y)


def batch_label(task: str, X, y) -> bytes:
    """A batch's identity: its task and the exact bytes of its rows and targets (every batch
    sent is different, so a stored batch is matched to the one sent)."""
    return (task.encode() + b"\0" + np.ascontiguousarray(X, dtype=np.float64).tobytes() + b"\0"
            + np.ascontiguousarray(y, dtype=np.float64).tobytes())


class Ledger:
    """Every batch sent and every HTTP attempt's status (or transport error), thread-safe."""

    def __init__(self):
        self.lock = threading.Lock()
        self.batches: list[Batch] = []
        self.statuses: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.server_errors: list[tuple[float, str]] = []  # (when, "write 500"): every 5xx answer
        self.reads_ok = 0
        self.reads_failed: Counter[str] = Counter()

    def add(self, b: Batch) -> None:
        with self.lock:
            self.batches.append(b)

    def note(self, kind: str, status: int | None, error: str | None = None) -> None:
        with self.lock:
            if status is not None:
                self.statuses[f"{kind} {status}"] += 1
                if status >= 500:
                    self.server_errors.append((time.monotonic(), f"{kind} {status}"))
            else:
                self.errors[f"{kind} {error}"] += 1

    def acks(self) -> list[Batch]:
        with self.lock:
            return [b for b in self.batches if b.version is not None and b.t_ack is not None]


class CountingTransport(httpx.HTTPTransport):
    """httpx's transport, noting every attempt's status in a :class:`Ledger` (the client's
    retries hide them from its caller)."""

    def __init__(self, ledger: Ledger):
        super().__init__()
        self.ledger = ledger

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        kind = "write" if request.url.path.endswith("/data") else "read"
        try:
            response = super().handle_request(request)
        except httpx.TransportError as exc:
            self.ledger.note(kind, None, type(exc).__name__)
            raise
        self.ledger.note(kind, response.status_code)
        return response


def make_client(url: str, key: str, ledger: Ledger):
    from fcl3 import Client

    return Client(url, key, timeout=15.0, transport=CountingTransport(ledger), trust_env=False)


class Load:
    """``n`` writer threads and one reader against ``url`` until :meth:`stop`."""

    def __init__(self, url: str, n: int, seed: int, ledger: Ledger):
        self.url, self.n, self.seed, self.ledger = url, n, seed, ledger
        self.weights = {f"t{t}": np.random.default_rng(1000 + t).normal(size=D) for t in range(TASKS)}
        self._stop = threading.Event()
        self.threads = [threading.Thread(target=self._write, args=(i,), daemon=True) for i in range(n)]
        self.threads.append(threading.Thread(target=self._read, daemon=True))

    def start(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def _write(self, i: int) -> None:
        from fcl3 import FCL3Error

        rng = np.random.default_rng(self.seed * 100 + i)
        with make_client(self.url, WRITE_KEY, self.ledger) as client:
            k = 0
            while not self._stop.is_set():
                task = f"t{(i + k) % TASKS}"
                X = rng.normal(size=(ROWS, D))
                y = X @ self.weights[task] + 0.1 * rng.normal(size=ROWS)
                b = Batch(i, task, X.tolist(), y.tolist(), str(uuid.uuid4()), time.monotonic())
                self.ledger.add(b)
                try:
                    res = client.learn_batch(MODEL, task, b.X, b.y, idempotency_key=b.key)
                except FCL3Error as exc:
                    b.error = f"{type(exc).__name__}: {str(exc)[:200]}"
                    self._stop.wait(0.2)
                except Exception as exc:  # noqa: BLE001 - a bug of the client's is a result too
                    b.error = f"{type(exc).__name__}: {str(exc)[:200]}"
                    self._stop.wait(0.2)
                else:
                    b.t_ack = time.monotonic()  # before the version: acks() reads both
                    b.version, b.replayed, b.attempts = res.update.version, res.replayed, res.attempts
                k += 1

    def _read(self) -> None:
        from fcl3 import FCL3Error

        rng = np.random.default_rng(self.seed)
        while not self._stop.is_set() and len({b.task for b in self.ledger.acks()}) < TASKS:
            self._stop.wait(0.05)  # every task learned once: a prediction has an answer
        with make_client(self.url, READ_KEY, self.ledger) as client:
            while not self._stop.is_set():
                try:
                    client.predict(MODEL, f"t{rng.integers(TASKS)}", rng.normal(size=(2, D)).tolist())
                    self.ledger.reads_ok += 1
                except FCL3Error as exc:
                    self.ledger.reads_failed[type(exc).__name__] += 1
                    self._stop.wait(0.2)
                self._stop.wait(0.05)

    def stop(self, join: float) -> int:
        """Tell every thread to stop; wait up to ``join`` s for their last calls; how many are
        still running."""
        self._stop.set()
        deadline = time.monotonic() + join
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return sum(t.is_alive() for t in self.threads)


def probe(url: str, ledger: Ledger, seed: int, stop: threading.Event, cap: float) -> None:
    """From the fault's end: a new batch every 0.1 s (a client that never retries, so no
    backoff of its own delays it) until one is acknowledged: when the service writes again."""
    from fcl3 import FCL3Error
    from fcl3 import Client

    rng = np.random.default_rng(10_000 + seed)
    w = np.random.default_rng(1000).normal(size=D)
    deadline = time.monotonic() + cap
    with Client(url, WRITE_KEY, timeout=15.0, retries=0, transport=CountingTransport(ledger), trust_env=False) as c:
        while not stop.is_set() and time.monotonic() < deadline:
            X = rng.normal(size=(ROWS, D))
            b = Batch(-1, "t0", X.tolist(), (X @ w).tolist(), str(uuid.uuid4()), time.monotonic())
            ledger.add(b)
            try:
                res = c.learn_batch(MODEL, b.task, b.X, b.y, idempotency_key=b.key)
            except FCL3Error as exc:
                b.error = f"probe {type(exc).__name__}: {str(exc)[:200]}"
                stop.wait(0.1)
            else:
                b.t_ack = time.monotonic()
                b.version, b.replayed, b.attempts = res.update.version, res.replayed, res.attempts
                return


def resend(url: str, batches: list[Batch], ledger: Ledger) -> list[dict]:
    """Send ``batches`` (acknowledged ones) again with their own keys, as a client that lost
    the answers would: each must come back as a replay at its acknowledged version."""
    from fcl3 import FCL3Error

    out = []
    with make_client(url, WRITE_KEY, ledger) as client:
        for b in batches:
            try:
                res = client.learn_batch(MODEL, b.task, b.X, b.y, idempotency_key=b.key)
                out.append({"replayed": res.replayed, "version": res.update.version, "acked_version": b.version})
            except FCL3Error as exc:
                out.append({"error": f"{type(exc).__name__}: {str(exc)[:200]}", "acked_version": b.version})
    return out


# ----------------------------------------------------------------------------- the store, read back
def read_back(db_url: str, model: str = MODEL) -> dict[str, Any]:
    """The model's row, its tasks' counts and every stored batch, straight from the database."""
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            version = conn.execute(text("SELECT version FROM models WHERE name = :m"), {"m": model}).scalar()
            tasks = conn.execute(text("SELECT task_id, n_samples, n_batches FROM tasks WHERE model_name = :m"),
                                 {"m": model}).all()
            rows = conn.execute(text('SELECT version, task_id, n_samples, "X", y FROM batches '
                                     "WHERE model_name = :m ORDER BY version"), {"m": model}).all()
    finally:
        engine.dispose()
    import io

    stored = [{"version": r[0], "task": r[1], "n": r[2],
               "label": batch_label(r[1], np.load(io.BytesIO(bytes(r[3]))), np.load(io.BytesIO(bytes(r[4]))))}
              for r in rows]
    return {"model_version": version, "tasks": [tuple(t) for t in tasks], "batches": stored}


def account(sent: list[Batch], store: dict[str, Any], before: list[Batch] = (),
            injected: list[float] = (0.0,)) -> dict[str, Any]:
    """Acknowledged against stored. ``before``: batches left out of the accounting (acknowledged
    before a removal of the store); those found stored anyway are counted as ``resurrected``.
    ``injected``: when each cycle's fault was injected (``lost_detail`` times are from the last
    injection before the acknowledgement)."""

    def since(b: Batch) -> float:
        return max([t for t in injected if t <= b.t_ack] or [injected[0]])

    stored_at: dict[bytes, list[int]] = {}
    for s in store["batches"]:
        stored_at.setdefault(s["label"], []).append(s["version"])
    acked = [b for b in sent if b.version is not None]
    sent_labels = {b.label for b in sent}
    before_labels = {b.label for b in before}
    lost = [b for b in acked if b.label not in stored_at]
    wrong_version = [b for b in acked if b.label in stored_at and b.version not in stored_at[b.label]]
    unacked_stored = [b for b in sent if b.version is None and b.label in stored_at]
    duplicates = sum(len(v) - 1 for v in stored_at.values())
    unknown = [lab for lab in stored_at if lab not in sent_labels and lab not in before_labels]
    resurrected = [lab for lab in stored_at if lab in before_labels]
    versions = [s["version"] for s in store["batches"]]
    task_batches = sum(t[2] for t in store["tasks"])
    task_rows = sum(t[1] for t in store["tasks"])
    counts_agree = (versions == list(range(1, len(versions) + 1)) and (store["model_version"] or 0) == len(versions)
                    and task_batches == len(versions) and task_rows == sum(s["n"] for s in store["batches"]))
    gave_up = Counter(b.error.split(":", 1)[0] for b in sent if b.error and b.writer >= 0)
    return {
        "acknowledged": len(acked),
        "stored": len(store["batches"]),
        "lost": len(lost),
        "unacked_stored": len(unacked_stored),
        "duplicates": duplicates,
        "acked_version_mismatch": len(wrong_version),
        "stored_unknown": len(unknown),
        "resurrected": len(resurrected),
        "model_version": store["model_version"],
        "task_batches": task_batches,
        "task_rows": task_rows,
        "acked_rows": sum(len(b.y) for b in acked),
        "counts_agree": counts_agree,
        "ack_equals_stored": not (lost or unacked_stored or duplicates or wrong_version or unknown or resurrected)
        and counts_agree and len(acked) == len(store["batches"]),
        "sent": len(sent),
        "gave_up": dict(gave_up),
        "replayed_answers": sum(b.replayed for b in acked),
        "gave_up_examples": [b.error for b in sent if b.error and b.writer >= 0][:3],
        "probe_attempts": sum(1 for b in sent if b.writer < 0),
        "lost_detail": [{"version": b.version, "task": b.task, "writer": b.writer, "attempts": b.attempts,
                         "sent_s": round(b.t_sent - since(b), 3), "acked_s": round(b.t_ack - since(b), 3)}
                        for b in lost[:10]],
    }


# ----------------------------------------------------------------------------- one fault run
class NotInjected(Exception):
    """The fault cannot be injected on this machine (the reason is the message)."""


@dataclass
class Run:
    """What a fault's hooks share: the run's directory, the server, its store's URL and env."""

    name: str
    args: argparse.Namespace
    timing: Timing
    dir: Path
    env: dict[str, str] = field(default_factory=dict)
    db_url: str = ""
    server: Server | None = None
    cleanups: list[Callable[[], None]] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    phase: str = "setup"

    def start_server(self, timeout: float = 60.0) -> Server:
        if self.server is None:
            self.server = Server(self.env, workers=self.args.workers, log_path=self.dir / "server.log",
                                 cwd=self.args.server_tree,
                                 access_log=False)
        self.server.start(timeout)
        self.server.wait_workers()
        return self.server


def base_env(args) -> dict[str, str]:
    return {"MODEL_NAME": MODEL, "API_WRITE_KEYS": WRITE_KEY, "API_READ_KEYS": READ_KEY, "FCL3_ESTIMATOR": "FCL3",
            "FCL3_KIND": "regression", "LOG_LEVEL": "INFO", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1", "DATABASE_URL": "", "REDIS_URL": ""}  # empty: unset


def use_sqlite(run: Run, directory: Path | None = None) -> None:
    path = (directory or run.dir) / "fcl3.db"
    run.env.update(SQLITE_PATH=str(path))
    run.db_url = f"sqlite:///{path}"
    run.notes["store"] = "sqlite (file locks)"


def use_postgres(run: Run, admin_url: str, redis_url: str) -> None:
    """A throwaway database on ``admin_url``'s server, migrated; the lock on ``redis_url``
    under a prefix of this run's own."""
    dbname, url = create_throwaway_database(admin_url, "faults")
    prefix = redis_prefix("faults")
    run.cleanups.append(lambda: drop_throwaway_backend(admin_url, dbname, redis_url, prefix))
    run.env.update(DATABASE_URL=url, REDIS_URL=redis_url, REDIS_PREFIX=prefix, AUTO_CREATE_SCHEMA="false")
    migrate({**os.environ, **run.env}, cwd=run.args.server_tree)
    run.db_url = url
    run.notes["store"] = f"postgresql database {dbname} + redis prefix {prefix}"


# --- the faults: each is (setup, inject, undo); undo's return is the fault's end ------------
class Fault:
    """A fault: ``setup`` gives the run its store and starts what it needs (not the API
    server), ``inject`` and ``undo`` make and end it; ``how``: one line for the results."""

    name = ""
    how = ""
    cycles = 1
    hold: float | None = None  # seconds the fault lasts (None: the timing's)
    store_replaced = False  # the store is gone after the fault: acks before it are not counted

    def setup(self, run: Run) -> None:
        use_sqlite(run)

    def inject(self, run: Run) -> None:
        raise NotImplementedError

    def undo(self, run: Run) -> None:
        raise NotImplementedError

    def went_with_store(self, b: Batch, windows: list[dict]) -> bool | None:
        """(``store_replaced``) Whether the acknowledged batch ``b`` was in a store when it
        went (False: acknowledged after; None: acknowledged by the last store's server)."""
        return None

    def cycles_for(self, timing: Timing) -> int:
        return self.cycles

    def hold_for(self, timing: Timing) -> float:
        """Seconds this cycle's fault lasts."""
        return self.hold if self.hold is not None else timing.hold

    def during_hold(self, run: Run, early: list[Batch], ledger: Ledger) -> list[dict] | None:
        """While the fault lasts (after ``inject``): the batches ``early`` sent again, if this
        fault wants them sent then (else they are sent after the recovery)."""
        return None


class Kill9(Fault):
    how = ("kill -9 (SIGKILL) during writes; odd cycles: the server's whole process group (master and workers), "
           "the server started again 1 s later on the same port (as a supervisor would), end = /readyz answers "
           "200 again; even cycles: one worker alone (uvicorn's master starts another), end = the kill")

    def __init__(self, backend: str):
        self.backend = backend
        self.name = f"kill9-{backend}"
        self.cycle = 0
        self.kinds: list[str] = []

    def whole(self) -> bool:
        return self.cycle % 2 == 0

    def cycles_for(self, timing: Timing) -> int:
        return timing.cycles

    def hold_for(self, timing: Timing) -> float:
        return 1.0 if self.whole() else 0.0

    def setup(self, run: Run) -> None:
        if self.backend == "sqlite":
            use_sqlite(run)
        else:
            use_postgres(run, run.args.pg_admin_url, run.args.redis_url)

    def inject(self, run: Run) -> None:
        if self.whole():
            self.kinds.append("server")
            run.server.kill9()
        else:
            pids = run.server.worker_pids()
            self.kinds.append(f"worker (1 of {len(pids)})")
            os.kill(pids[0], signal.SIGKILL)

    def undo(self, run: Run) -> None:
        if self.whole():
            run.start_server()
        run.notes["kill_kinds"] = self.kinds


class PostgresRestart(Fault):
    name = "postgres-restart"
    how = ("a throwaway PostgreSQL cluster (initdb + pg_ctl, spare port) stopped with pg_ctl stop -m fast "
           "(every connection dropped), held, started again on the same port; end = pg_ctl start returned")

    def setup(self, run: Run) -> None:
        bindir = find_pg_bindir()
        if bindir is None:
            raise NotInjected("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb)")
        self.cluster = PgCluster(bindir).init()
        run.cleanups.append(self.cluster.cleanup)
        self.cluster.start()
        use_postgres(run, self.cluster.admin_url(), run.args.redis_url)
        run.notes["postgres"] = f"throwaway cluster on port {self.cluster.port} ({bindir})"

    def inject(self, run: Run) -> None:
        self.cluster.stop("fast")

    def undo(self, run: Run) -> None:
        self.cluster.start()


class RedisRestart(Fault):
    name = "redis-restart"
    how = ("a throwaway redis-server (spare port, --save '' --appendonly no) stopped with SIGTERM (its lock keys "
           "gone with it), held, started again on the same port; end = it answers PING")

    def setup(self, run: Run) -> None:
        if shutil.which("redis-server") is None:
            raise NotInjected("no redis-server binary on PATH")
        self.redis = RedisProcess()
        run.cleanups.append(self.redis.stop)
        self.redis.start()
        use_postgres(run, run.args.pg_admin_url, self.redis.url)
        run.notes["redis"] = f"throwaway redis-server on port {self.redis.port}"

    def inject(self, run: Run) -> None:
        self.redis.stop()

    def undo(self, run: Run) -> None:
        self.redis.start()


class DiskFull(Fault):
    name = "disk-full"
    how = ("the SQLite file on its own 64 MB tmpfs (mount -t tmpfs, as root); the tmpfs filled by a file written "
           "until ENOSPC, held, the file deleted; end = the file deleted")
    SIZE_MB = 64

    def setup(self, run: Run) -> None:
        if os.geteuid() != 0:
            raise NotInjected("not root: no tmpfs can be mounted (run as root, or give the suite a quota-limited "
                              "directory)")
        self.mount = run.dir / "disk"
        self.mount.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.SIZE_MB}m", "fcl3-faults", str(self.mount)],
                       check=True, capture_output=True)
        run.cleanups.append(lambda: subprocess.run(["umount", "-l", str(self.mount)], capture_output=True))
        use_sqlite(run, self.mount)
        self.filler = self.mount / "filler"

    def inject(self, run: Run) -> None:
        chunk = b"\0" * (1 << 20)
        with open(self.filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(chunk)
            except OSError:  # ENOSPC: now with smaller writes, to the last page
                pass
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        st = os.statvfs(self.mount)
        run.notes["free_bytes_when_full"] = st.f_bavail * st.f_frsize
        run.notes["filler_mb"] = round(self.filler.stat().st_size / 2**20, 1)

    def undo(self, run: Run) -> None:
        self.filler.unlink()


class SqliteRemoved(Fault):
    name = "sqlite-removed"
    how = ("the SQLite file unlinked under the running server (its -wal and -shm left, as `rm fcl3.db` does), "
           "held; then the server restarted (an operator's remedy: a new empty store); end = the restarted "
           "server answers /readyz. The model's version is read from the file just before the unlink and, "
           "through a connection opened before, just after it: batches the old server acknowledged at a "
           "version up to the second were in the file when it went")
    store_replaced = True

    def __init__(self):
        self.versions: list[int] = []  # the model's version in the file just after each unlink

    def inject(self, run: Run) -> None:
        import sqlite3

        path = Path(run.env["SQLITE_PATH"])
        con = sqlite3.connect(path, timeout=10)
        query = "SELECT version FROM models WHERE name = ?"
        try:
            before = con.execute(query, (MODEL,)).fetchone()[0]
            path.unlink()
            after = con.execute(query, (MODEL,)).fetchone()[0]
        finally:
            con.close()
        self.versions.append(after)
        run.notes.setdefault("removed_at", []).append(datetime.now(timezone.utc).isoformat(timespec="milliseconds"))
        run.notes.setdefault("version_at_removal", []).append([before, after])

    def cycles_for(self, timing: Timing) -> int:
        return timing.removals

    def went_with_store(self, b: Batch, windows: list[dict]) -> bool | None:
        """Acknowledged by the server of the k-th store (before the k-th restart) at a version
        that store held when it was unlinked."""
        k = sum(1 for w in windows if w["end"] <= b.t_ack)
        return None if k >= len(windows) else b.version <= self.versions[k]

    def undo(self, run: Run) -> None:
        run.server.stop()
        run.start_server()


class ClockStep(Fault):
    how = ("the server's wall clock stepped +2 days (an LD_PRELOAD shim compiled here with cc: clock_gettime "
           "CLOCK_REALTIME[_COARSE], gettimeofday and time() shifted by the seconds in a file re-read every 0.1 s; "
           "the monotonic clock untouched, as an NTP step; SQLite's 'now' moves with it, PostgreSQL's now() does "
           "not), held 2 s more than a purge needs (IDEMPOTENCY_PURGE_EVERY=1) while the batches acknowledged "
           "before the step are sent again with their keys, stepped back; end = stepped back")

    def __init__(self, backend: str):
        self.backend = backend
        self.name = f"clock-{backend}"

    def setup(self, run: Run) -> None:
        lib = build_clock_shim(run.dir)
        if self.backend == "sqlite":
            use_sqlite(run)
        else:
            use_postgres(run, run.args.pg_admin_url, run.args.redis_url)
        self.file = run.dir / "clock-offset"
        self.file.write_text("0\n")
        run.env.update(LD_PRELOAD=str(lib), FCL3_CLOCK_OFFSET_FILE=str(self.file), IDEMPOTENCY_PURGE_EVERY="1")

    def _set(self, seconds: int) -> None:
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(f"{seconds}\n")
        os.replace(tmp, self.file)
        time.sleep(0.25)  # the shim re-reads the file every 0.1 s

    def inject(self, run: Run) -> None:
        self._set(2 * 86400)

    def during_hold(self, run: Run, early: list[Batch], ledger: Ledger) -> list[dict]:
        time.sleep(2.0)  # every process has written since the step: each has purged (at most every 1 s)
        run.notes["server_date_after_step"] = server_date(run.server.url)  # uvicorn renews it every second
        return resend(run.server.url, early, ledger)

    def undo(self, run: Run) -> None:
        self._set(0)


def server_date(url: str) -> str | None:
    """The server's idea of now (its ``Date`` header)."""
    try:
        return httpx.get(url + "/healthz", timeout=2, trust_env=False).headers.get("date")
    except httpx.HTTPError:
        return None


CLOCK_SHIM = r"""
#define _GNU_SOURCE
#define gettimeofday fcl3_hidden_gettimeofday
#define clock_gettime fcl3_hidden_clock_gettime
#define time fcl3_hidden_time
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#undef gettimeofday
#undef clock_gettime
#undef time

typedef int (*cg_t)(clockid_t, struct timespec *);
typedef int (*gtod_t)(struct timeval *, void *);
static cg_t real_cg;
static gtod_t real_gtod;
static volatile long long offset_s, next_ns;

static void load(void) {
    if (!real_cg) real_cg = (cg_t)dlsym(RTLD_NEXT, "clock_gettime");
    if (!real_gtod) real_gtod = (gtod_t)dlsym(RTLD_NEXT, "gettimeofday");
}

/* the offset in seconds, from the file FCL3_CLOCK_OFFSET_FILE, re-read every 0.1 s */
static long long offset(void) {
    struct timespec m;
    long long now;
    load();
    real_cg(CLOCK_MONOTONIC_COARSE, &m);
    now = m.tv_sec * 1000000000LL + m.tv_nsec;
    if (now >= next_ns) {
        const char *path = getenv("FCL3_CLOCK_OFFSET_FILE");
        next_ns = now + 100000000LL;
        if (path) {
            int fd = open(path, O_RDONLY);
            if (fd >= 0) {
                char buf[32];
                ssize_t n = read(fd, buf, sizeof buf - 1);
                close(fd);
                if (n > 0) { buf[n] = 0; offset_s = strtoll(buf, NULL, 10); }
            }
        }
    }
    return offset_s;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int r;
    load();
    r = real_cg(id, ts);
    if (r == 0 && ts && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) ts->tv_sec += offset();
    return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    int r;
    load();
    r = real_gtod(tv, tz);
    if (r == 0 && tv) tv->tv_sec += offset();
    return r;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
"""


def build_clock_shim(directory: Path) -> Path:
    """Compile :data:`CLOCK_SHIM` into ``directory``; :class:`NotInjected` without a C compiler.

    Why not libfaketime (``faketime``): its mode that leaves the monotonic clock alone
    (``FAKETIME_DONT_FAKE_MONOTONIC=1``, 0.9.10) makes every ``time.sleep`` of Python 3.11 fail
    with ``EINVAL`` (its ``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)``), so the server
    answers 500 for that reason alone; without that mode the monotonic clock jumps with the wall
    clock, which no NTP step does."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise NotInjected("no C compiler (cc) to build the clock shim; libfaketime cannot stand in: with the "
                          "monotonic clock left alone its 0.9.10 makes Python's time.sleep fail with EINVAL")
    src, lib = directory / "clock_shim.c", directory / "libfcl3clock.so"
    src.write_text(CLOCK_SHIM)
    r = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(src), "-ldl"], capture_output=True,
                       text=True)
    if r.returncode:
        raise NotInjected(f"the clock shim did not compile: {r.stderr.strip()[:300]}")
    return lib


class BadInput(Fault):
    how = ("issue 55's inputs (benchmarks.bad_inputs: records, CSV bodies, remembered predictions and labels, "
           "creates, forks, imports), sent by one more client beside the writers to a model of its own: each must "
           "get its 4xx, never a 5xx, and change nothing (the model's version and vocabulary, its remembered "
           "rows, the list of models)")
    hold = 0.0

    def __init__(self, backend: str):
        self.backend = backend
        self.name = f"bad-input-{backend}"

    def setup(self, run: Run) -> None:
        run.env["MAX_REMEMBERED_PER_MODEL"] = "50"
        if self.backend == "sqlite":
            use_sqlite(run)
        else:
            use_postgres(run, run.args.pg_admin_url, run.args.redis_url)

    def inject(self, run: Run) -> None:
        from benchmarks.bad_inputs import run_cases

        assert run.server is not None
        url = run.server.url
        with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {WRITE_KEY}"}) as writer, \
                httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {READ_KEY}"}) as reader:
            rows = run_cases(writer, reader, remember_cap=50)
        run.notes["bad_inputs"] = len(rows)
        run.notes["bad_input_5xx"] = sum(1 for r in rows if r["status"] >= 500)
        wrong = [r for r in rows if r["status"] != r["expect"] or r["changed"]]
        run.notes["bad_input_wrong"] = len(wrong)
        run.notes["bad_input_detail"] = rows

    def undo(self, run: Run) -> None:
        pass


FAULTS: dict[str, Callable[[], Fault]] = {
    "kill9-sqlite": lambda: Kill9("sqlite"),
    "kill9-postgres": lambda: Kill9("postgres"),
    "postgres-restart": PostgresRestart,
    "redis-restart": RedisRestart,
    "disk-full": DiskFull,
    "sqlite-removed": SqliteRemoved,
    "clock-sqlite": lambda: ClockStep("sqlite"),
    "clock-postgres": lambda: ClockStep("postgres"),
    "bad-input-sqlite": lambda: BadInput("sqlite"),
    "bad-input-postgres": lambda: BadInput("postgres"),
}


def wait_until(cond: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def run_fault(name: str, args, timing: Timing, logroot: Path, seed: int, status: Callable[[str], None]) -> dict:
    """One fault, set up, injected, undone and accounted for; its row of the results."""
    fault = FAULTS[name]()
    run = Run(name, args, timing, logroot / name)
    run.dir.mkdir(parents=True)
    run.env = {**base_env(args), **({"LOCK_TTL": str(args.lock_ttl)} if args.lock_ttl else {})}
    row: dict[str, Any] = {"fault": name, "how": fault.how, "workers": args.workers, "writers": args.writers,
                           "injected": False, "log": str(run.dir / "server.log")}
    t0 = time.monotonic()
    ledger = Ledger()
    load: Load | None = None
    probe_stop = threading.Event()
    try:
        try:
            fault.setup(run)
        except NotInjected as exc:
            row["not_injected"] = str(exc)
            return row
        status("starting")
        run.start_server()
        load = Load(run.server.url, args.writers, seed, ledger).start()

        def acked_after(t: float, writers_only: bool = False) -> float | None:
            times = [b.t_ack for b in ledger.acks() if b.t_ack >= t and (b.writer >= 0 or not writers_only)]
            return min(times) if times else None

        status("writing")
        wait_until(lambda: len(ledger.acks()) >= 2 * args.writers, 30)
        time.sleep(timing.warm)
        early = [b for b in ledger.acks() if b.writer >= 0][:5]  # sent again later with their keys
        resent: list[dict] | None = None
        windows = []
        cycles = fault.cycles_for(timing)
        for cycle in range(cycles):
            status(f"fault {cycle + 1}/{cycles}" if cycles > 1 else "fault")
            fault.cycle = cycle
            hold = fault.hold_for(timing)
            t_inject = time.monotonic()
            fault.inject(run)
            t_held = time.monotonic()
            if resent is None:
                resent = fault.during_hold(run, early, ledger)
            time.sleep(max(0.0, hold - (time.monotonic() - t_held)))
            status("undoing")
            fault.undo(run)
            t_end = time.monotonic()
            status("recovering")
            prober = threading.Thread(target=probe, args=(run.server.url, ledger, seed * 10 + cycle, probe_stop,
                                                          timing.recover_cap), daemon=True)
            prober.start()
            wait_until(lambda: acked_after(t_end, writers_only=True) is not None, timing.recover_cap)
            prober.join(timing.recover_cap)
            windows.append({"injected": t_inject, "end": t_end, "hold": hold, "first_ack": acked_after(t_end),
                            "first_writer_ack": acked_after(t_end, writers_only=True)})
            time.sleep(timing.after)
        row["injected"] = True
        if resent is None and not fault.store_replaced:  # keys in a removed store are gone with it
            status("resending")
            resent = resend(run.server.url, early, ledger)
        resent = resent or []
        status("stopping writers")
        row["writers_unfinished"] = load.stop(timing.join)
        row["worker_processes_at_end"] = len(run.server.worker_pids())
        status("reading back")
        store = read_back(run.db_url)
        before = [b for b in ledger.acks() if fault.went_with_store(b, windows)]
        gone = {id(b) for b in before}
        row.update(account([b for b in ledger.batches if id(b) not in gone], store, before,
                           [w["injected"] for w in windows]))
        if fault.store_replaced:
            row["removed_with_file"] = len(before)
            row["acked_while_removed"] = sum(1 for b in ledger.acks() if fault.went_with_store(b, windows) is False)
        row["acked_during_fault"] = sum(1 for b in ledger.acks() for w in windows
                                        if w["injected"] <= b.t_ack < w["end"])
        row["resent"] = len(resent)
        row["resent_applied"] = sum(1 for r in resent if r.get("replayed") is False)
        row["resent_failed"] = sum(1 for r in resent if "error" in r)
        if resent:
            row["resent_detail"] = resent

        def since(t, end):
            return None if t is None else round(t - end, 2)

        row["hold_s"] = [w["hold"] for w in windows] if len(windows) > 1 else windows[0]["hold"]
        rec = [since(w["first_ack"], w["end"]) for w in windows]
        row["recovery_s_each"] = rec
        row["recovery_s"] = None if any(r is None for r in rec) else max(rec)
        crec = [since(w["first_writer_ack"], w["end"]) for w in windows]
        row["client_recovery_s_each"] = crec
        row["client_recovery_s"] = None if any(r is None for r in crec) else max(crec)
        statuses = dict(sorted(ledger.statuses.items()))
        row["statuses"] = statuses
        row["transport_errors"] = dict(sorted(ledger.errors.items()))
        row["5xx"] = len(ledger.server_errors)
        row["5xx_not_503"] = sum(1 for _, k in ledger.server_errors if not k.endswith(" 503"))
        # answered 5xx although the service had already written again after the fault's end
        later: Counter[str] = Counter()
        for i, w in enumerate(windows):
            until = windows[i + 1]["injected"] if i + 1 < len(windows) else float("inf")
            if w["first_ack"] is not None:
                later.update(k for t, k in ledger.server_errors if w["first_ack"] <= t < until)
        row["5xx_after_recovery"] = dict(later)
        row["reads_ok"], row["reads_failed"] = ledger.reads_ok, dict(ledger.reads_failed)
        return row
    except Exception as exc:  # noqa: BLE001 - a fault that broke the harness is reported, the others run
        row["error"] = f"{type(exc).__name__}: {exc}"
        return row
    finally:
        probe_stop.set()
        if load is not None:
            load.stop(5.0)
        if run.server is not None:
            run.server.stop()
        for cleanup in reversed(run.cleanups):
            try:
                cleanup()
            except Exception as exc:  # noqa: BLE001
                row.setdefault("cleanup_errors", []).append(f"{type(exc).__name__}: {exc}")
        row.update({k: v for k, v in run.notes.items() if k not in row})
        row["seconds"] = round(time.monotonic() - t0, 1)


# ----------------------------------------------------------------------------- report
COLUMNS = [("fault", "fault", 16), ("acked", "acknowledged", 6), ("stored", "stored", 6),
           ("ack=stored", "ack_equals_stored", 10), ("lost", "lost", 4), ("dup", "duplicates", 3),
           ("unacked stored", "unacked_stored", 14), ("gave up", "gave_up", 7), ("5xx", "5xx", 4),
           ("5xx not 503", "5xx_not_503", 11), ("resent applied", "resent_applied", 14),
           ("5xx after recovery", "5xx_after_recovery", 18), ("recovery s", "recovery_s", 10),
           ("client recovery s", "client_recovery_s", 17), ("bad inputs", "bad_inputs", 10),
           ("bad 5xx", "bad_input_5xx", 7), ("bad wrong", "bad_input_wrong", 9), ("s", "seconds", 5)]


def table(rows: list[dict]) -> str:
    def cell(row, key):
        if key not in row and not row.get("injected"):
            return "-"
        v = row.get(key)
        if isinstance(v, dict):
            return str(sum(v.values()))
        if isinstance(v, bool):
            return "yes" if v else "NO"
        return "-" if v is None else str(v)

    head = " | ".join(title.ljust(w) for title, _, w in COLUMNS)
    lines = [head, "-" * len(head)]
    for row in rows:
        lines.append(" | ".join(cell(row, key).ljust(w) for _, key, w in COLUMNS))
        if row.get("not_injected"):
            lines.append(f"    not injected: {row['not_injected']}")
        if row.get("error"):
            lines.append(f"    harness error: {row['error']}")
        if row.get("gave_up_examples"):
            lines.append(f"    gave up: {row['gave_up_examples'][0]}")
        for lost in row.get("lost_detail", [])[:3]:
            lines.append(f"    lost: version {lost['version']} ({lost['task']}), sent {lost['sent_s']} s and "
                         f"acknowledged {lost['acked_s']} s from the (last) fault's start")
        applied = [r for r in row.get("resent_detail", []) if r.get("replayed") is False]
        if applied:
            lines.append(f"    sent again with its key and applied again: version {applied[0]['acked_version']} "
                         f"-> {applied[0]['version']} ({len(applied)} of {row['resent']})")
        for bad in [r for r in row.get("bad_input_detail", []) if r["status"] != r["expect"] or r["changed"]][:5]:
            lines.append(f"    bad input {bad['case']!r}: {bad['status']} (want {bad['expect']}), "
                         f"changed {bad['changed'] or 'nothing'}")
        if row.get("version_at_removal"):
            lines.append(f"    version in the file just before / after each unlink: {row['version_at_removal']}; "
                         f"{row.get('removed_with_file')} acknowledged batches went with it, "
                         f"{row.get('acked_while_removed')} acknowledged after it")
    return "\n".join(lines)


def healthy(row: dict) -> bool:
    """Nothing acknowledged was lost, nothing applied twice, recovered."""
    if not row.get("injected"):
        return "error" not in row
    return (row.get("lost") == 0 and row.get("duplicates") == 0 and row.get("resent_applied") == 0
            and row.get("recovery_s") is not None and not row.get("bad_input_wrong"))


def checkout(tree: Path) -> dict[str, Any]:
    """What the servers ran: the directory, and its commit with the files changed since (a git
    checkout), or the commit ``git archive`` wrote into it (``git archive HEAD | tar -x``:
    the files as committed, whatever is being edited in the checkout meanwhile)."""
    def git(*a: str) -> str:
        r = subprocess.run(["git", *a], cwd=tree, capture_output=True, text=True)
        return r.stdout.rstrip("\n") if r.returncode == 0 else ""

    out: dict[str, Any] = {"server_tree": str(tree)}
    if (tree / ".git").exists():
        out["commit"] = git("rev-parse", "--short", "HEAD") or None
        out["modified"] = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()]
    else:  # e.g. an archive of a commit: --server-commit names it
        out["commit"] = None
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.faults", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short phases, one kill cycle (under ~2 min)")
    ap.add_argument("--faults", default=",".join(FAULTS), help="comma-separated, of: " + ", ".join(FAULTS))
    ap.add_argument("--writers", type=int, default=3, help="writer threads (one fcl3.Client each)")
    ap.add_argument("--workers", type=int, default=2, help="uvicorn --workers of every server")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lock-ttl", type=float, default=None,
                    help="the servers' LOCK_TTL (default: the service's, 30 s; --quick: 10 s, so that a lock "
                    "left by a killed writer expires within the quick run)")
    ap.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/test",
                    help="the shared PostgreSQL server's URL: throwaway databases are made there (never stopped)")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0",
                    help="the shared Redis (a prefix of each run's own; never stopped)")
    ap.add_argument("--server-tree", type=Path, default=ROOT,
                    help="the directory uvicorn and the migrations run from (default: this checkout); e.g. "
                    "`git archive HEAD | tar -x -C DIR` so that edits in the checkout do not reach a run")
    ap.add_argument("--server-commit", default=None, help="the commit --server-tree holds (for the results)")
    ap.add_argument("--json", default=str(DEFAULT_JSON), help="write the results here")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.faults.split(",") if n.strip()]
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        ap.error(f"unknown fault(s) {unknown}; known: {', '.join(FAULTS)}")
    timing = QUICK if args.quick else FULL
    if args.lock_ttl is None and args.quick:
        args.lock_ttl = 10.0
    logroot = Path(tempfile.mkdtemp(prefix="fcl3-faults-"))
    results: dict[str, Any] = {
        "command": " ".join(["python -m benchmarks.faults", *(argv if argv is not None else sys.argv[1:])]),
        "machine": {**machine(), "uid": os.geteuid(), "loadavg_at_start": os.getloadavg()},
        "checkout": {**checkout(args.server_tree.resolve()),
                     **({"commit": args.server_commit} if args.server_commit else {})},
        "mode": "quick" if args.quick else "full",
        "setup": {"timing": timing.__dict__, "writers": args.writers, "workers": args.workers,
                  "rows_per_batch": ROWS, "features": D, "tasks": TASKS, "model": MODEL,
                  "client": "fcl3.Client, default retries (5; busy answers for 60 s), timeout 15 s",
                  "server": "uvicorn service.main:app, service defaults but the model name and API keys"
                  + (f", LOCK_TTL={args.lock_ttl:g}" if args.lock_ttl else ""),
                  "logs": str(logroot)},
        "faults": [],
    }
    t0 = time.monotonic()
    bar = progress_bar(total=len(names), desc="faults", unit="fault", enabled=not args.quiet)
    try:
        for i, name in enumerate(names):
            bar.set_description(name)
            row = run_fault(name, args, timing, logroot, args.seed + i, lambda s: bar.set_postfix_str(s, refresh=True))
            row["healthy"] = healthy(row)
            results["faults"].append(row)
            bar.update(1)
    finally:
        bar.close()
    results["seconds"] = round(time.monotonic() - t0, 1)
    results["machine"]["loadavg_at_end"] = os.getloadavg()  # the machine may be shared: the timings with it
    results["all_healthy"] = all(r["healthy"] for r in results["faults"])
    print(table(results["faults"]))
    print(f"\n{len(names)} fault(s) in {results['seconds']} s on {results['machine']['cores']} cores; "
          f"server logs: {logroot}")
    if args.json:
        print("results:", write_json(args.json, results))
    return results


if __name__ == "__main__":
    sys.exit(0 if main()["all_healthy"] else 1)
