"""Service benchmark over HTTP on loopback: the service beside a bare FastAPI route, in one run.

    python -m benchmarks.service [--embedded | --postgres] [--workers 2] [--rounds 3] [--seconds 2]
                                 [--updates 200] [--tasks 20] [--rows 20] [--d 10] [--json out.json]

For each setup (both by default): the embedded default (an SQLite file, file locks, one
uvicorn worker) and PostgreSQL + Redis (a throwaway database made on ``--pg-admin-url`` and
dropped at the end, ``--workers`` uvicorn workers), it starts ``uvicorn service.main:app``
and, with the same uvicorn command and worker count, the bare route
(``benchmarks.bare_app:app``: a plain FastAPI app whose one route returns a constant), then:

* **updates**, one client, ``--updates`` batches over ``--tasks`` tasks: latency p50/p99
  over HTTP, beside the bare engine's ``learn`` on the same batches in the same order, and
  the server's own split read from ``/metrics`` before and after: time in the engine
  (``fcl3_update_engine_seconds``), the rest of the update (load, scoring, commit:
  ``fcl3_update_duration_seconds`` minus the engine), the lock wait, and what is left for HTTP;
* **requests/s**, ``--concurrency`` keep-alive connections, ``--seconds`` each, in
  ``--rounds`` interleaved rounds (bare route, ``/healthz``, GET /predict of one row, POST
  /predict of 1 and of 100 rows; the order reversed every other round): the ratio of each to
  the bare route in the same round, and POST 100 rows ÷ 1 row in time per request, with the
  spread over rounds; the server's CPU time per request and the load generator's CPU share;
* **updates/s with one and with two models** (PostgreSQL + Redis only): two client threads
  post batches for ``--update-seconds``, both to one model, then one model each, alternated
  over ``--update-rounds``; each client's connection is placed on its own uvicorn worker
  (its socket's owner is looked up in /proc), so that the two cases differ only in the
  number of models (the update locks are per model). Committed updates/s, the ratio, the
  CPU of each worker, of the client and of the whole machine;
* **group commit**, ``--group-clients`` concurrent clients sending one-row batches to one and
  to two models, ``--group-seconds`` each: committed updates/s, p50/p99, batches per group,
  server CPU per update, each model first taught ``--group-warm`` batches (so that every case
  measures it past the start of its stream), beside the engine alone on the same kind of
  stream, before and after the table;
* **a sequential client at School size** (``--school-batches``): median HTTP update ÷
  median engine update on the same batches, in turns of 20 batches (the engine alone,
  then over HTTP);
* **bytes per commit** at each of ``--bytes-tasks`` tasks.

The load generator is a minimal asyncio HTTP/1.1 client (keep-alive), so that it costs as
little CPU as possible: it shares the machine with the servers, and its share is reported.
"""
from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

import core

from .common import add_backend_options, http_request, machine, pct, percentile, progress_bar
from .launcher import Server, create_throwaway_database, drop_throwaway_backend, migrate, redis_prefix

BARE_APP = "benchmarks.bare_app:app"


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


# ----------------------------------------------------------------------------- processes
def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all cores, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return sum(v) - idle, sum(v)


class Usage:
    """CPU used meanwhile by some processes, by this process (the load generator) and by the
    whole machine."""

    def __init__(self, pids: list[int]):
        self.pids = pids
        self.t0 = time.perf_counter()
        self.own0 = time.process_time()
        self.cpu0 = {p: cpu_seconds(p) for p in pids}
        self.busy0 = machine_busy()

    def stop(self) -> dict:
        wall = time.perf_counter() - self.t0
        busy, total = machine_busy()
        cpu = {p: cpu_seconds(p) - c for p, c in self.cpu0.items()}
        return {"wall_s": wall, "server_cpu_s": sum(cpu.values()), "worker_cpu_s": cpu,
                "client_cpu_share": (time.process_time() - self.own0) / wall,
                "machine_busy_share": (busy - self.busy0[0]) / max(total - self.busy0[1], 1)}


# ----------------------------------------------------------------------------- requests/s
async def _http_loop(host, port, request: bytes, deadline, counts, idx):
    reader, writer = await asyncio.open_connection(host, port)
    n = bad = 0
    try:
        while time.perf_counter() < deadline:
            status, _ = await http_request(reader, writer, request)
            n += 1
            bad += status != 200
    finally:
        writer.close()
    counts[idx] = (n, bad)


def get_rps(host, port, path, seconds, concurrency, body: bytes | None = None, pids: list[int] | None = None) -> dict:
    """GET ``path`` (POST ``body`` to it if given) on ``concurrency`` keep-alive connections
    for ``seconds``: requests/s, and with ``pids`` (the server's) its CPU per request."""
    if body is None:
        request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    else:
        request = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body

    async def run():
        counts = [None] * concurrency
        deadline = time.perf_counter() + seconds
        await asyncio.gather(*[_http_loop(host, port, request, deadline, counts, i) for i in range(concurrency)])
        return counts

    usage = Usage(pids or [])
    counts = asyncio.run(run())
    use = usage.stop()
    total = sum(c[0] for c in counts)
    out = {"requests": total, "non_200": sum(c[1] for c in counts), "seconds": round(use["wall_s"], 3),
           "rps": round(total / use["wall_s"], 1), "client_cpu_share": round(use["client_cpu_share"], 2)}
    if pids:
        out["server_cpu_us_per_request"] = round(use["server_cpu_s"] / max(total, 1) * 1e6, 1)
    return out


# ----------------------------------------------------------------------------- /metrics
def scrape(url: str) -> dict[str, float]:
    """Prometheus text -> {"name{labels}": value} (comments skipped)."""
    text = httpx.get(url + "/metrics", timeout=30).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            try:
                out[key] = float(value)
            except ValueError:
                pass
    return out


def update_split(before: dict[str, float], after: dict[str, float], updates: int) -> dict:
    """Mean per committed update, in ms, from two scrapes: engine, the rest of the update
    (load, scoring, commit), lock wait. ``None`` for a histogram the server does not have."""
    def delta(name):
        if name not in after:
            return None
        return after[name] - before.get(name, 0.0)

    n = delta("fcl3_update_duration_seconds_count") or updates
    duration = delta("fcl3_update_duration_seconds_sum")
    engine = delta("fcl3_update_engine_seconds_sum")
    lock = delta('fcl3_lock_wait_seconds_sum{outcome="acquired"}')
    ms = lambda v: None if v is None else round(v / max(n, 1) * 1e3, 3)  # noqa: E731
    return {"updates": int(n), "service_update_ms": ms(duration), "engine_ms": ms(engine),
            "outside_engine_ms": None if duration is None or engine is None else ms(duration - engine),
            "lock_wait_ms": ms(lock),
            "note": None if engine is not None else "fcl3_update_engine_seconds is not exposed by this server"}


# ----------------------------------------------------------------------------- updates/s
def socket_owner(server_port: int, client_port: int, pids: list[int]) -> int | None:
    """The process (of ``pids``) holding the server end of the loopback connection from
    ``client_port``, found through /proc/net/tcp and the processes' file descriptors."""
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if int(f[1].rsplit(":", 1)[1], 16) == server_port and int(f[2].rsplit(":", 1)[1], 16) == client_port:
                inode = f[9]
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                        return pid
                except OSError:
                    pass
        except OSError:
            pass
    return None


def worker_for(i: int, pids: list[int]) -> int | None:
    """The worker that serves client ``i``: ``pids[i mod n]`` (the even split a round-robin
    balancer in front of the workers gives), or None (any) when there is one worker."""
    return pids[i % len(pids)] if len(pids) > 1 else None


class Writer(threading.Thread):
    """One client: posts pre-encoded batches to one model on a keep-alive connection held by
    the worker ``pid`` until ``deadline``."""

    def __init__(self, port: int, bodies: list[tuple[str, bytes]], pid: int | None, pids: list[int]):
        super().__init__(daemon=True)
        self.port, self.bodies, self.pids = port, bodies, pids
        self.placed_on: int | None = None
        self.conn = self._connect(pid)
        self.deadline = 0.0
        self.committed = self.other = 0
        self.latency_ms: list[float] = []
        self.error: BaseException | None = None

    def _post(self, conn, path: str, body: bytes) -> int:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        return r.status

    def _connect(self, pid):
        """A connection served by ``pid`` (up to 50 tries: the kernel picks the worker)."""
        for _ in range(50):
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            conn.connect()
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            owner = socket_owner(self.port, conn.sock.getsockname()[1], self.pids)
            if pid is None or owner == pid:
                self.placed_on = owner
                return conn
            conn.close()
        raise RuntimeError(f"could not get a connection served by worker {pid}")

    def run(self):
        i = 0
        try:
            while time.perf_counter() < self.deadline:
                path, body = self.bodies[i % len(self.bodies)]
                i += 1
                t0 = time.perf_counter()
                status = self._post(self.conn, path, body)
                if status == 200:
                    self.committed += 1
                    self.latency_ms.append((time.perf_counter() - t0) * 1e3)
                else:
                    self.other += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            self.error = exc
        finally:
            self.conn.close()


def run_writers(writers: list, pids: list[int], seconds: float) -> dict:
    """Run ``writers`` together for ``seconds``; the CPU use of the run (:class:`Usage`).
    A writer's error is raised once all have stopped."""
    usage = Usage(pids)
    deadline = time.perf_counter() + seconds
    for w in writers:
        w.deadline = deadline
        w.start()
    for w in writers:
        w.join()
    use = usage.stop()
    for w in writers:
        if w.error is not None:
            raise w.error
    return use


def update_rate(port: int, models: list[str], bodies: dict[str, list[tuple[str, bytes]]], seconds: float,
                pids: list[int]) -> dict:
    """Clients ``i`` posting to ``models[i]`` (on worker :func:`worker_for` ``(i)``) for ``seconds``."""
    writers = [Writer(port, bodies[m], worker_for(i, pids), pids) for i, m in enumerate(models)]
    url = f"http://127.0.0.1:{port}"
    before = scrape(url)
    use = run_writers(writers, pids, seconds)
    committed = sum(w.committed for w in writers)
    split = update_split(before, scrape(url), committed)
    lat = [v for w in writers for v in w.latency_ms]
    return {"models": models, "committed": committed, "not_committed": sum(w.other for w in writers),
            "committed_per_s": round(committed / use["wall_s"], 2),
            "update_ms_p50": round(percentile(lat, 50), 2) if lat else None,
            "server_split_mean": split,
            "clients_on_workers": [w.placed_on for w in writers],
            "worker_cpu_share": {str(p): round(c / use["wall_s"], 2) for p, c in use["worker_cpu_s"].items()},
            "client_cpu_share": round(use["client_cpu_share"], 2),
            "machine_busy_share": round(use["machine_busy_share"], 2)}


#: ``/metrics`` series of the group commits: groups (transactions) and the batches they committed.
GROUPS, GROUPED = "fcl3_update_group_batches_count", "fcl3_update_group_batches_sum"
#: One-row batches each model of the group-commit table (and the engine alone beside it) learns
#: before any clock starts, so that every case measures a model at the same place in its
#: stream: early on, FCL3's update costs more (the population's warm-started refit takes 36-66
#: EM steps over the first 75 updates of 4 tasks and 6 after 250, docs/speed.md), and a case
#: run on a fresh model (1 client x 1 model, 2 clients x 2 models) would measure that, not
#: the service.
WARM_BATCHES = 250
#: Tasks of each model of the group-commit table (and of the engine alone beside it).
GROUP_TASKS = 4


def warm_count(warm_batches: int, n_tasks: int) -> int:
    """Batches learned before the clock starts: ``warm_batches``, and at least one per task (a
    new task's first batch is not scored, and costs what a known task's does not)."""
    return max(warm_batches, n_tasks)


def group_commit_matrix(port: int, pids: list[int], clients: tuple[int, ...], models: tuple[int, ...],
                        seconds: float, n_tasks: int, d: int, say=lambda *a: None, estimator: str = "FCL3",
                        params: dict | None = None, warm_batches: int = WARM_BATCHES) -> dict:
    """Committed updates/s and latency with ``c`` concurrent clients sending ONE-ROW batches,
    spread over ``m`` models (client ``i`` to model ``i % m``), for each ``c`` of ``clients``
    and ``m`` of ``models``, ``seconds`` each. Client ``i``'s keep-alive connection is served
    by worker :func:`worker_for` ``(i)``: left to the kernel, the split varies from run to run
    (8 clients of one model: all on one worker, which commits them in groups of 8 and never
    reloads, or 5 and 3, or 4 and 4, whose workers take the model's lock in turns and each
    reloads the other's version), and so does the figure. The models are ``gc-1``, ``gc-2``, ... (created here,
    each taught ``warm_batches`` batches over its tasks, one client, before the clock starts)."""
    names = [f"gc-{k + 1}" for k in range(max(models))]
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
        for name in names:
            r = client.post("/models", json={"name": name, "kind": "regression", "estimator": estimator,
                                             "params": params or {}})
            assert r.status_code in (201, 409), r.text
    per_client = max(64, int(seconds * 400))
    warm = warm_count(warm_batches, n_tasks)
    bodies = {name: batch_bodies(name, n_tasks, 1, d, warm + per_client * max(clients), 10 + k)
              for k, name in enumerate(names)}
    for name in names:  # every task learned, and the model past the start of its stream
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            for path, body in bodies[name][:warm]:
                client.post(path, content=body, headers={"Content-Type": "application/json"}).raise_for_status()
        bodies[name] = bodies[name][warm:]
    out = {}
    for m in models:
        for c in clients:
            say(f"  group commit: {c} clients, {m} model(s) ...")
            client_bodies = [bodies[names[i % m]][i * per_client:(i + 1) * per_client] for i in range(c)]
            writers = [Writer(port, b, worker_for(i, pids), pids) for i, b in enumerate(client_bodies)]
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
                at_start = {n: client.get(f"/models/{n}").json()["version"] for n in names[:m]}
            before = scrape(f"http://127.0.0.1:{port}")
            use = run_writers(writers, pids, seconds)
            after = scrape(f"http://127.0.0.1:{port}")
            groups = after.get(GROUPS, 0.0) - before.get(GROUPS, 0.0)
            lat = [v for w in writers for v in w.latency_ms]
            committed = sum(w.committed for w in writers)
            out[f"{c}x{m}"] = {"clients": c, "models": m, "versions_at_start": at_start, "committed": committed,
                               "not_committed": sum(w.other for w in writers),
                               "mean_group": round((after.get(GROUPED, 0.0) - before.get(GROUPED, 0.0)) / groups, 2)
                               if groups else None,
                               "committed_per_s": round(committed / use["wall_s"], 1),
                               "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
                               "server_cpu_ms_per_update": round(use["server_cpu_s"] * 1e3 / committed, 2)
                               if committed else None,
                               "machine_busy_share": round(use["machine_busy_share"], 2),
                               "clients_per_worker": [sum(w.placed_on == p for w in writers) for p in pids]}
    return out


def batch_bodies(model: str, n_tasks: int, rows: int, d: int, n: int, seed: int) -> list[tuple[str, bytes]]:
    prefix = "" if model is None else f"/models/{model}"
    return [(f"{prefix}/tasks/{t}/data", json.dumps({"X": X.tolist(), "y": y.tolist()}).encode())
            for t, X, y in make_stream(n, n_tasks, rows, d, seed)]


def school_stream(max_batches: int | None = None) -> tuple[list[tuple[str, np.ndarray, np.ndarray]], str]:
    """School (139 tasks, 28 features) as a stream of batches: each task's rows in two halves,
    every first half, then every second half (the second batches are scored and touch known
    tasks). A synthetic stream of the same shape when the data file is missing."""
    try:
        from .datasets import load_real

        data = load_real("school")
        tasks, source = list(zip(data.task_ids, data.tasks)), "school"
    except FileNotFoundError:
        rng = np.random.default_rng(0)
        tasks = []
        for t in range(139):
            X = rng.normal(size=(110, 28))
            tasks.append((f"school-{t}", (X, X @ rng.normal(size=28) + rng.normal(size=110))))
        source = "synthetic (139 tasks x 110 rows x 28 features: School's shape)"
    # C order, as the server holds rows parsed from JSON: School's file holds columns, and a
    # product over columns rounds otherwise, so the engine alone would learn other numbers
    rows = np.ascontiguousarray
    first = [(t, rows(X[:len(X) // 2]), rows(y[:len(X) // 2])) for t, (X, y) in tasks]
    second = [(t, rows(X[len(X) // 2:]), rows(y[len(X) // 2:])) for t, (X, y) in tasks]
    stream = first + second
    return (stream if max_batches is None else stream[:max_batches]), source


#: Batches of School timed by the engine alone, then over HTTP, in turn (:func:`sequential_ratio`).
SCHOOL_CHUNK = 20


def sequential_ratio(port: int, estimator: str, params: dict, max_batches: int | None, rounds: int = 2) -> dict:
    """One sequential client streaming School into a new model over HTTP beside the bare engine
    learning the same batches: median HTTP update ÷ median engine update. The stream goes in
    chunks of :data:`SCHOOL_CHUNK` batches, each learned by the engine alone in a loop and then
    posted, so that both sides of a chunk are timed within a second of each other (a shared
    machine's speed drifts by tens of percent within minutes), while the engine keeps its
    caches warm from one batch to the next as in a loop of its own (one batch at a time, after
    a request each, it is about a quarter slower); ``rounds`` streams, each into a model of its
    own. Both learn the same numbers: the served model's predictions of the first task equal
    the engine's exactly."""
    stream, source = school_stream(max_batches)
    bodies = [json.dumps({"X": X.tolist(), "y": y.tolist()}).encode() for _, X, y in stream]
    eng, web = [], []
    for k in range(rounds):
        name = f"school-{k}-{os.getpid()}"
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            r = client.post("/models", json={"name": name, "kind": "regression", "estimator": estimator,
                                             "params": params})
            assert r.status_code == 201, r.text
        learner = core.LEARNERS[estimator](kind="regression", **params)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            for start in range(0, len(stream), SCHOOL_CHUNK):
                chunk = range(start, min(start + SCHOOL_CHUNK, len(stream)))
                for i in chunk:
                    task, X, y = stream[i]
                    t0 = time.perf_counter()
                    learner.learn(task, X, y)
                    eng.append((time.perf_counter() - t0) * 1e3)
                for i in chunk:
                    t0 = time.perf_counter()
                    c.request("POST", f"/models/{name}/tasks/{stream[i][0]}/data", bodies[i],
                              {"Content-Type": "application/json"})
                    resp = c.getresponse()
                    resp.read()
                    web.append((time.perf_counter() - t0) * 1e3)
                    assert resp.status == 200, resp.status
        finally:
            c.close()
        task, X, _ = stream[0]
        served = httpx.post(f"http://127.0.0.1:{port}/models/{name}/predict", timeout=120,
                            json={"task_id": task, "X": X.tolist()}).json()
        assert served["version"] == len(stream), served["version"]  # every batch committed, once
        assert np.array_equal(served["predictions"], learner.predict(task, X)), "the server learned other numbers"
    med_e, med_h = statistics.median(eng), statistics.median(web)
    return {"source": source, "batches": len(stream), "rounds": rounds, "engine_p50_ms": round(med_e, 2),
            "http_p50_ms": round(med_h, 2), "http_p99_ms": pct(web, 99), "engine_p99_ms": pct(eng, 99),
            "ratio_http_vs_engine_p50": round(med_h / med_e, 2),
            "outside_engine_p50_ms": round(med_h - med_e, 2)}


def engine_rate(estimator: str, params: dict, n_tasks: int, d: int, seconds: float,
                warm_batches: int = WARM_BATCHES) -> dict:
    """The bare engine learning one-row batches over ``n_tasks`` tasks, one after the other, for
    about ``seconds``, after ``warm_batches`` untimed ones: the ceiling of committed
    updates/s of ONE model at the place in its stream where the group-commit table measures it
    (its batches are learned in order, so a group commit saves everything but the learning)."""
    warm = warm_count(warm_batches, n_tasks)
    stream = make_stream(warm + max(64, int(seconds * 2000)), n_tasks, 1, d, seed=21)
    learner = core.LEARNERS[estimator](kind="regression", **params)
    for t, X, y in stream[:warm]:
        learner.learn(t, X, y)
    n, t0 = 0, time.perf_counter()
    times = []
    for t, X, y in stream[warm:]:
        t1 = time.perf_counter()
        learner.learn(t, X, y)
        times.append((time.perf_counter() - t1) * 1e3)
        n += 1
        if time.perf_counter() - t0 > seconds:
            break
    wall = time.perf_counter() - t0
    return {"updates_per_s": round(n / wall, 1), "p50_ms": pct(times, 50), "p99_ms": pct(times, 99)}


# ----------------------------------------------------------------------------- bytes per commit
class WrittenBytes:
    """Bytes of the parameters of every statement ``engines`` run while counting (what the
    service sends the database: arrays as their ``.npy``/zip bytes, JSON as its text, 8 per
    number or time), by statement kind (the table it writes)."""

    def __init__(self, *engines):
        from sqlalchemy import event

        from service.db import json_text  # the engines' JSON encoder

        self.json_text = json_text
        self.by_statement: dict[str, int] = {}
        self.on = False
        for e in engines:
            event.listen(e, "before_cursor_execute", self._count)

    def size(self, v) -> int:
        v = getattr(v, "obj", v)  # psycopg's Json / Binary wrappers
        if v is None:
            return 0
        if isinstance(v, (dict, list)):
            return len(self.json_text(v).encode())
        if isinstance(v, (bytes, bytearray, memoryview)):
            return len(v)
        if isinstance(v, str):
            return len(v.encode("utf-8", "surrogatepass"))
        return 8

    def _count(self, conn, cursor, statement, parameters, context, executemany):
        if not self.on:
            return
        rows = parameters if executemany else [parameters]
        n = 0
        for row in rows:
            values = row.values() if isinstance(row, dict) else (row or ())
            n += sum(self.size(v) for v in values)
        words = statement.split()
        kind = " ".join(words[:3]) if words else "?"
        self.by_statement[kind] = self.by_statement.get(kind, 0) + n

    def measure(self, fn) -> tuple[int, dict[str, int]]:
        """Bytes written by ``fn()``, in total and by statement."""
        self.by_statement, self.on = {}, True
        try:
            fn()
        finally:
            self.on = False
        return sum(self.by_statement.values()), dict(self.by_statement)


def synthetic_learner(n_tasks: int, d: int = 10, rows: int = 5, learned: int = 20, seed: int = 0):
    """An FCL3 regression learner with ``n_tasks`` tasks: ``learned`` learned from batches,
    the others copies of their states under new ids (learning 10,000 tasks one by one takes
    minutes: only the rows a commit writes are measured here, not the learning)."""
    import copy

    learner = core.LEARNERS["FCL3"](kind="regression")
    for t, X, y in make_stream(min(learned, n_tasks) * 2, min(learned, n_tasks), rows, d, seed):
        learner.learn(t, X, y)
    state = learner.get_state()
    real = list(state.tasks)
    for i in range(n_tasks - len(real)):
        state.tasks[f"copy-{i}"] = copy.deepcopy(state.tasks[real[i % len(real)]])
    state.meta["task_order"] = list(state.tasks)
    return core.load_state(state)


def bytes_per_commit(sizes: tuple[int, ...] = (100, 10_000), database_url: str | None = None, d: int = 10,
                     rows: int = 5) -> dict:
    """Bytes the service sends the database to commit one batch of a known task, and one of a
    new task, into a model of ``n`` tasks for each ``n`` of ``sizes`` (in-process: a
    :class:`service.hosting.HostedModel` on ``database_url``, by default a new SQLite file),
    with the bytes by statement."""
    from service.learning import updates
    from service.config import Settings
    from service.db import make_engine, upgrade_schema
    from service.writing.locks import LocalLocks
    from service.hosting import HostedModel
    from service.store.writes import NewModel

    tmp = Path(tempfile.mkdtemp(prefix="fcl3-bytes-"))
    url = database_url or f"sqlite:///{tmp / 'bytes.db'}"
    settings = Settings(_env_file=None, DATABASE_URL=url, REDIS_URL=None, FCL3_ESTIMATOR="FCL3", FCL3_KIND="regression")
    engine = make_engine(settings)
    upgrade_schema(engine)
    counter = WrittenBytes(engine)
    out = {}
    rng = np.random.default_rng(5)
    try:
        for n in sizes:
            name = f"bytes-{n}-{os.getpid()}-{time.monotonic_ns() % 10**9}"
            learner = synthetic_learner(n, d=d, rows=rows)
            model = HostedModel.open(engine, LocalLocks(30.0, 5.0), name, None, default=False)
            model.writer.create(NewModel(learner, settings.model_settings()))
            model.reader.snapshot()
            X = rng.normal(size=(rows, d))
            y = X.sum(axis=1)
            updates.learn_batch(model, "task-0", X, y)  # warm (first scoring, evaluation row)
            known, by_known = counter.measure(lambda: updates.learn_batch(model, "task-1", X, y))
            new, by_new = counter.measure(lambda: updates.learn_batch(model, f"new-{n}", X, y))
            out[str(n)] = {"tasks": n, "known_task_commit_bytes": known, "new_task_commit_bytes": new,
                           # what the model row's meta held before revision 0008, rewritten by every commit
                           "task_order_json_bytes": len(json.dumps(model.reader.snapshot().learner.task_ids)),
                           "known_task_by_statement": by_known, "new_task_by_statement": by_new}
            model.writer.delete()
    finally:
        engine.dispose()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# ----------------------------------------------------------------------------- one setup
def spread(values: list[float], ndigits: int = 3) -> dict:
    return {"median": round(statistics.median(values), ndigits), "min": round(min(values), ndigits),
            "max": round(max(values), ndigits), "rounds": [round(v, ndigits) for v in values]}


def run_setup(kind: str, workers: int, args, tmp: Path) -> dict:
    """One setup (``embedded`` or ``postgres``) from start to finish."""
    dbname = prefix = None
    if kind == "embedded":
        env = {"DATABASE_URL": "", "REDIS_URL": "", "SQLITE_PATH": str(tmp / f"fcl3-{workers}.db")}
    else:
        dbname, db_url = create_throwaway_database(args.pg_admin_url, "bench")
        prefix = redis_prefix("bench")
        env = {"DATABASE_URL": db_url, "REDIS_URL": args.redis_url, "REDIS_PREFIX": prefix,
               "AUTO_CREATE_SCHEMA": "false"}
    env.update({"FCL3_ESTIMATOR": args.estimator, "FCL3_PARAMS": args.params, "FCL3_KIND": "regression",
                "MODEL_NAME": "bench"})
    prom = None
    if workers > 1:  # /metrics sums the workers (docs/operations.md)
        prom = tempfile.mkdtemp(prefix="fcl3-bench-prom-")
        env["PROMETHEUS_MULTIPROC_DIR"] = prom
    full_env = {**os.environ, **env}
    log = tmp / f"uvicorn-{kind}.log"
    server = Server(env, workers=workers, log_path=log, access_log=False)
    bare = Server(env, workers=workers, log_path=tmp / f"bare-{kind}.log", app=BARE_APP, ready_path="/",
                  access_log=False)
    say = (lambda *a: print(*a, file=sys.stderr, flush=True)) if not args.quiet else (lambda *a: None)
    out: dict = {"setup": {"database": "sqlite" if kind == "embedded" else "postgresql",
                           "lock": "file" if kind == "embedded" else "redis", "uvicorn_workers": workers,
                           "server_log": str(log)}}
    if dbname is not None:
        out["setup"]["throwaway_database"] = dbname  # dropped at the end
    try:
        if kind != "embedded":
            migrate(full_env)
        server.start(timeout=60)
        bare.start(timeout=60)
        pids, bare_pids = server.wait_workers(), bare.wait_workers()
        base = server.url
        stream = make_stream(args.updates, args.tasks, args.rows, args.d)

        # 1. updates: the bare engine, then the same batches over HTTP, with the server's split
        learner = core.LEARNERS[args.estimator](kind="regression", **json.loads(args.params))
        engine_ms = []
        for task, X, y in progress_bar(stream, desc=f"{kind}: engine updates", enabled=not args.quiet):
            t0 = time.perf_counter()
            learner.learn(task, X, y)
            engine_ms.append((time.perf_counter() - t0) * 1e3)
        before = scrape(base)
        http_ms = []
        with httpx.Client(base_url=base, timeout=60) as client:
            for task, X, y in progress_bar(stream, desc=f"{kind}: HTTP updates", enabled=not args.quiet):
                body = {"X": X.tolist(), "y": y.tolist()}
                t0 = time.perf_counter()
                r = client.post(f"/tasks/{task}/data", json=body)
                http_ms.append((time.perf_counter() - t0) * 1e3)
                r.raise_for_status()
            after = scrape(base)
            final = client.get("/model").json()
            row = ",".join(repr(float(v)) for v in stream[0][1][0])
            served = client.get("/predict", params={"task_id": "task-0", "x": row}).json()["predictions"]
        assert final["version"] == args.updates, final
        assert np.allclose(served, learner.predict("task-0", stream[0][1][:1]), rtol=0, atol=0)
        split = update_split(before, after, args.updates)
        http_mean = statistics.fmean(http_ms)
        if split["service_update_ms"] is not None and split["lock_wait_ms"] is not None:
            split["http_and_rest_ms"] = round(http_mean - split["service_update_ms"] - split["lock_wait_ms"], 3)
        out["update_ms"] = {
            "http_p50": round(percentile(http_ms, 50), 2), "http_p99": round(percentile(http_ms, 99), 2),
            "http_mean": round(http_mean, 2),
            "bare_engine_p50": round(percentile(engine_ms, 50), 2),
            "bare_engine_p99": round(percentile(engine_ms, 99), 2),
            "bare_engine_mean": round(statistics.fmean(engine_ms), 2),
            "server_split_mean": split}

        # 2. requests/s, interleaved rounds, each against the bare route of the same round
        X1 = stream[0][1][:1]
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 1.0:
            learner.predict("task-0", X1)
            n += 1
        engine_pps = n / (time.perf_counter() - t0)
        body1 = json.dumps({"task_id": "task-0", "X": X1.tolist()}).encode()
        body100 = json.dumps({"task_id": "task-0", "X": np.resize(stream[0][1], (100, args.d)).tolist()}).encode()
        loads = [("bare_route", bare.port, "/", None, bare_pids),
                 ("healthz", server.port, "/healthz", None, pids),
                 ("get_predict_1_row", server.port, f"/predict?task_id=task-0&x={row}", None, pids),
                 ("post_predict_1_row", server.port, "/predict", body1, pids),
                 ("post_predict_100_rows", server.port, "/predict", body100, pids)]
        for name, port, path, body, p in loads:  # warm-up: every connection path once
            get_rps("127.0.0.1", port, path, 0.3, args.concurrency, body, p)
        rounds: list[dict] = []
        for k in range(args.rounds):
            say(f"{kind}: requests/s round {k + 1}/{args.rounds} ...")
            order = loads if k % 2 == 0 else loads[::-1]
            rounds.append({name: get_rps("127.0.0.1", port, path, args.seconds, args.concurrency, body, p)
                           for name, port, path, body, p in order})
        rps = {name: spread([r[name]["rps"] for r in rounds], 1) for name, *_ in loads}
        cpu = {name: spread([r[name]["server_cpu_us_per_request"] for r in rounds], 1) for name, *_ in loads}
        client = {name: spread([r[name]["client_cpu_share"] for r in rounds], 2) for name, *_ in loads}
        ratio = lambda a, b: spread([r[a]["rps"] / max(r[b]["rps"], 1e-9) for r in rounds])  # noqa: E731
        cpu_ratio = lambda a, b: spread([r[a]["server_cpu_us_per_request"]  # noqa: E731
                                         / max(r[b]["server_cpu_us_per_request"], 1e-9) for r in rounds])
        out["requests_per_s"] = rps
        out["server_cpu_us_per_request"] = cpu
        out["client_cpu_share"] = client
        out["non_200"] = sum(r[name]["non_200"] for r in rounds for name in r)
        out["bare_engine_predict_calls_per_s"] = round(engine_pps, 1)
        out["ratios"] = {
            "get_predict_vs_bare_route": ratio("get_predict_1_row", "bare_route"),
            "healthz_vs_bare_route": ratio("healthz", "bare_route"),
            "post_predict_1_row_vs_bare_route": ratio("post_predict_1_row", "bare_route"),
            # time per request: 100 rows / 1 row = (1-row requests/s) / (100-row requests/s)
            "post_100_rows_vs_1_row_time": ratio("post_predict_1_row", "post_predict_100_rows"),
            # the same comparisons in server CPU per request (less sensitive to the load generator
            # and to other processes on the machine): bare route's CPU ÷ GET /predict's, and
            # POST 100 rows' CPU ÷ 1 row's
            "bare_route_vs_get_predict_server_cpu": cpu_ratio("bare_route", "get_predict_1_row"),
            "post_100_rows_vs_1_row_server_cpu": cpu_ratio("post_predict_100_rows", "post_predict_1_row"),
        }

        # 3. group commit: 1, 2, 8 clients x 1, 2 models, one-row batches, beside the engine's ceiling
        if args.group_seconds > 0:
            params = json.loads(args.params)
            clients = tuple(int(v) for v in args.group_clients.split(","))
            say(f"{kind}: group commit ...")
            warm = out["group_commit_warm_batches"] = warm_count(args.group_warm, GROUP_TASKS)
            out["engine_one_row_ceiling"] = engine_rate(args.estimator, params, GROUP_TASKS, args.d,
                                                        args.group_seconds, warm)
            out["group_commit"] = group_commit_matrix(server.port, pids, clients, (1, 2), args.group_seconds,
                                                      GROUP_TASKS, args.d, say, args.estimator, params, warm)
            out["engine_one_row_ceiling_after"] = engine_rate(args.estimator, params, GROUP_TASKS, args.d,
                                                              args.group_seconds, warm)

        # 4. a sequential client at School size: median HTTP update / median engine update
        if args.school_batches != 0:
            say(f"{kind}: School, sequential ...")
            out["school_sequential"] = sequential_ratio(server.port, args.estimator, json.loads(args.params),
                                                        None if args.school_batches < 0 else args.school_batches)

        # 5. updates/s, one model vs two models (PostgreSQL + Redis)
        if kind != "embedded" and args.update_seconds > 0:
            with httpx.Client(base_url=base, timeout=60) as client:
                r = client.post("/models", json={"name": "bench-b", "kind": "regression", "estimator": args.estimator,
                                                 "params": json.loads(args.params)})
                assert r.status_code == 201, r.text
            per_model = max(8, int(args.update_seconds * 200))
            bodies = {"bench": batch_bodies(None, 4, args.rows, args.d, per_model, 1),
                      "bench-b": batch_bodies("bench-b", 4, args.rows, args.d, per_model, 2)}
            # every task of both models learned once before the clock starts
            update_rate(server.port, ["bench", "bench-b"], {m: b[:4] for m, b in bodies.items()}, 0.5, pids)
            cases = {"one_model": ["bench", "bench"], "two_models": ["bench", "bench-b"]}
            urounds: list[dict] = []
            for k in range(args.update_rounds):
                say(f"{kind}: updates/s round {k + 1}/{args.update_rounds} ...")
                order = list(cases.items()) if k % 2 == 0 else list(cases.items())[::-1]
                urounds.append({case: update_rate(server.port, models, bodies, args.update_seconds, pids)
                                for case, models in order})
            out["updates_per_s"] = {
                "clients": 2, "seconds_each": args.update_seconds,
                "one_model": spread([r["one_model"]["committed_per_s"] for r in urounds], 2),
                "two_models": spread([r["two_models"]["committed_per_s"] for r in urounds], 2),
                "ratio_two_vs_one": spread([r["two_models"]["committed_per_s"] / max(r["one_model"]["committed_per_s"],
                                                                                       1e-9) for r in urounds]),
                "rounds": urounds}
    finally:
        server.stop(timeout=15)
        bare.stop(timeout=15)
        if prom:
            shutil.rmtree(prom, ignore_errors=True)
        if kind != "embedded":
            drop_throwaway_backend(args.pg_admin_url, dbname, args.redis_url, prefix)
    return out


# ----------------------------------------------------------------------------- report
def table(results: dict) -> str:
    """The figures side by side: absolute values and ratios (median [min–max] over rounds)."""
    runs = results["runs"]
    names = list(runs)
    workers = {n: runs[n]["setup"]["uvicorn_workers"] for n in names}
    head = ["", *[f"{n} ({workers[n]} worker{'s' if workers[n] > 1 else ''})" for n in names]]
    rows = []

    def fmt(s, unit="", nd=0):
        if s is None:
            return "-"
        f = f"{{:,.{nd}f}}"
        return f"{f.format(s['median'])}{unit} [{f.format(s['min'])}–{f.format(s['max'])}]"

    def add(label, get):
        rows.append([label, *[get(runs[n]) for n in names]])

    add("bare route, requests/s", lambda r: fmt(r["requests_per_s"]["bare_route"]))
    add("/healthz, requests/s", lambda r: fmt(r["requests_per_s"]["healthz"]))
    add("GET /predict 1 row, requests/s", lambda r: fmt(r["requests_per_s"]["get_predict_1_row"]))
    add("POST /predict 1 row, requests/s", lambda r: fmt(r["requests_per_s"]["post_predict_1_row"]))
    add("POST /predict 100 rows, requests/s", lambda r: fmt(r["requests_per_s"]["post_predict_100_rows"]))
    add("GET /predict ÷ bare route", lambda r: fmt(r["ratios"]["get_predict_vs_bare_route"], nd=2))
    add("/healthz ÷ bare route", lambda r: fmt(r["ratios"]["healthz_vs_bare_route"], nd=2))
    add("POST 100 rows ÷ 1 row (time/request)", lambda r: fmt(r["ratios"]["post_100_rows_vs_1_row_time"], nd=2))
    cpu = lambda r, name: f"{r['server_cpu_us_per_request'][name]['median']:.0f}"  # noqa: E731
    add("server CPU/request: bare, GET /predict", lambda r: f"{cpu(r, 'bare_route')}, {cpu(r, 'get_predict_1_row')} µs")
    add("  bare ÷ GET /predict, server CPU", lambda r: fmt(r["ratios"]["bare_route_vs_get_predict_server_cpu"], nd=2))
    add("  POST 100 ÷ 1 row, server CPU", lambda r: fmt(r["ratios"]["post_100_rows_vs_1_row_server_cpu"], nd=2))
    add("load generator CPU (GET /predict)",
        lambda r: f"{r['client_cpu_share']['get_predict_1_row']['median']:.0%} of a core")
    add("update over HTTP p50 / p99", lambda r: f"{r['update_ms']['http_p50']:.1f} / {r['update_ms']['http_p99']:.1f} ms")
    add("bare engine update p50 / p99", lambda r: f"{r['update_ms']['bare_engine_p50']:.1f} / "
        f"{r['update_ms']['bare_engine_p99']:.1f} ms")

    def split(r):
        s = r["update_ms"]["server_split_mean"]
        if s["engine_ms"] is None:
            return f"update {s['service_update_ms']:.1f} ms (engine time not exposed)"
        return (f"engine {s['engine_ms']:.1f} + outside {s['outside_engine_ms']:.1f} + lock wait "
                f"{s['lock_wait_ms']:.2f} ms")
    add("server, mean per update", split)
    ups = lambda r, key, nd: fmt(r["updates_per_s"][key], nd=nd) if "updates_per_s" in r else "-"  # noqa: E731
    add("updates/s, 1 model (2 clients)", lambda r: ups(r, "one_model", 1))
    add("updates/s, 2 models (2 clients)", lambda r: ups(r, "two_models", 1))
    add("updates/s, 2 models ÷ 1 model", lambda r: ups(r, "ratio_two_vs_one", 2))

    def concurrent(r):
        if "updates_per_s" not in r:
            return "-"
        parts = []
        for case, label in (("one_model", "1 model"), ("two_models", "2 models")):
            s = [rnd[case]["server_split_mean"] for rnd in r["updates_per_s"]["rounds"]]

            def med(k, s=s):
                values = [x[k] for x in s if x[k] is not None]
                return statistics.median(values) if values else float("nan")
            parts.append(f"{label}: {med('service_update_ms'):.1f} + wait {med('lock_wait_ms'):.1f}")
        return "; ".join(parts) + " ms"
    add("  server per update, concurrent", concurrent)
    add("  machine CPU busy (1 / 2 models)", lambda r: "-" if "updates_per_s" not in r else " / ".join(
        f"{statistics.median(rnd[c]['machine_busy_share'] for rnd in r['updates_per_s']['rounds']):.0%}"
        for c in ("one_model", "two_models")))
    def ceiling(r):
        if "engine_one_row_ceiling" not in r:
            return "-"
        a, b = r["engine_one_row_ceiling"], r["engine_one_row_ceiling_after"]
        return f"{a['updates_per_s']:.0f} / {b['updates_per_s']:.0f} updates/s (before / after), p50 {a['p50_ms']:.1f} ms"
    add("engine alone, one-row batches, 1 model", ceiling)
    cases = sorted({k for r in runs.values() for k in r.get("group_commit", {})},
                   key=lambda k: (int(k.split("x")[1]), int(k.split("x")[0])))
    for case in cases:
        c, m = case.split("x")
        add(f"group commit {c} client{'s' if c != '1' else ''} x {m} model{'s' if m != '1' else ''}: "
            "updates/s, p50 / p99, server CPU/update, batches/group",
            lambda r, case=case: "-" if case not in r.get("group_commit", {}) else
            f"{r['group_commit'][case]['committed_per_s']:.0f}/s, {r['group_commit'][case]['p50_ms']:.1f} / "
            f"{r['group_commit'][case]['p99_ms']:.1f} ms, "
            f"{r['group_commit'][case].get('server_cpu_ms_per_update') or float('nan'):.2f} ms, "
            f"{r['group_commit'][case].get('mean_group') or float('nan'):.1f}"
            + (f", clients per worker {'+'.join(map(str, r['group_commit'][case]['clients_per_worker']))}"
               if len(r['group_commit'][case].get('clients_per_worker', ())) > 1 else "")
            + (f" ({r['group_commit'][case]['not_committed']} not 200)"
               if r['group_commit'][case]['not_committed'] else ""))

    def school(r):
        s = r.get("school_sequential")
        if not s:
            return "-"
        return (f"HTTP {s['http_p50_ms']:.1f} ms ÷ engine {s['engine_p50_ms']:.1f} ms = "
                f"{s['ratio_http_vs_engine_p50']:.2f} ({s['batches']} batches x {s['rounds']})")
    add("School, 1 sequential client: median update", school)
    widths = [max(len(str(row[i])) for row in [head, *rows]) for i in range(len(head))]
    line = lambda row: "  ".join(str(c).ljust(w) for c, w in zip(row, widths))  # noqa: E731
    out = [line(head), line(["-" * w for w in widths]), *map(line, rows)]
    if results.get("bytes_per_commit"):
        out.append("")
        out.append("bytes written per commit (parameters sent to the database), known task / new task:")
        for db, sizes in results["bytes_per_commit"].items():
            parts = [f"{v['tasks']:,} tasks: {v['known_task_commit_bytes']:,} / {v['new_task_commit_bytes']:,} B"
                     f" (task_order no longer written: {v['task_order_json_bytes']:,} B)" for v in sizes.values()]
            out.append(f"  {db}: " + "; ".join(parts))
    return "\n".join(out)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.service", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--embedded", action="store_true", help="only the embedded default (SQLite, file locks)")
    where.add_argument("--postgres", action="store_true", help="only PostgreSQL + Redis")
    ap.add_argument("--workers", type=int, default=2, help="uvicorn workers on PostgreSQL + Redis")
    ap.add_argument("--embedded-workers", type=int, default=1, help="uvicorn workers on the embedded default")
    ap.add_argument("--updates", type=int, default=200)
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--rows", type=int, default=20, help="rows per batch")
    ap.add_argument("--d", type=int, default=10, help="features")
    ap.add_argument("--seconds", type=float, default=2.0, help="duration of each requests/s measurement")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the requests/s measurements")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--update-seconds", type=float, default=4.0, help="duration of each updates/s measurement "
                    "(0: none)")
    ap.add_argument("--update-rounds", type=int, default=2, help="rounds of one model, then two models")
    ap.add_argument("--group-seconds", type=float, default=3.0, help="duration of each group-commit measurement "
                    "(clients x models, one-row batches; 0: none)")
    ap.add_argument("--group-clients", default="1,2,8", help="numbers of concurrent clients of the group-commit table")
    ap.add_argument("--group-warm", type=int, default=WARM_BATCHES,
                    help="one-row batches each model of the group-commit table (and the engine alone) learns "
                         "before its clock starts")
    ap.add_argument("--school-batches", type=int, default=-1, help="batches of the sequential School stream "
                    "(-1: all 278, 0: none)")
    ap.add_argument("--bytes-tasks", default="100,10000", help="model sizes (tasks) of the bytes-per-commit "
                    "measurement ('': none)")
    ap.add_argument("--estimator", default="FCL3")
    ap.add_argument("--params", default="{}", help="FCL3_PARAMS JSON")
    add_backend_options(ap)
    ap.add_argument("--json", default=None, help="write the results here (e.g. docs/results/service.json)")
    ap.add_argument("--quiet", action="store_true", help="no progress output")
    args = ap.parse_args(argv)
    if args.estimator not in core.LEARNERS:
        ap.error(f"--estimator {args.estimator!r}: choose from {', '.join(core.LEARNERS)}")
    json.loads(args.params)

    setups = []
    if not args.postgres:
        setups.append(("embedded", args.embedded_workers))
    if not args.embedded:
        setups.append(("postgres", args.workers))
    tmp = Path(tempfile.mkdtemp(prefix="fcl3-bench-"))
    results = {
        "command": "python -m benchmarks.service " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {**machine(), "loadavg_at_start": [round(v, 2) for v in os.getloadavg()]},
        "setup": {"updates": args.updates, "tasks": args.tasks, "rows_per_batch": args.rows, "d": args.d,
                  "estimator": args.estimator, "params": json.loads(args.params), "concurrency": args.concurrency,
                  "seconds_per_measurement": args.seconds, "rounds": args.rounds, "bare_route": BARE_APP},
        "runs": {},
    }
    for kind, workers in setups:
        results["runs"][kind] = run_setup(kind, workers, args, tmp)
    if args.bytes_tasks:
        sizes = tuple(int(v) for v in args.bytes_tasks.split(","))
        results["bytes_per_commit"] = {}
        for kind, _ in setups:
            if not args.quiet:
                print(f"{kind}: bytes per commit ...", file=sys.stderr, flush=True)
            if kind == "embedded":
                results["bytes_per_commit"]["sqlite"] = bytes_per_commit(sizes, d=args.d)
            else:
                dbname, db_url = create_throwaway_database(args.pg_admin_url, "bytes")
                try:
                    results["bytes_per_commit"]["postgresql"] = bytes_per_commit(sizes, db_url, d=args.d)
                finally:
                    drop_throwaway_backend(args.pg_admin_url, dbname, None, None)
    results["machine"]["loadavg_at_end"] = [round(v, 2) for v in os.getloadavg()]
    results["table"] = table(results)
    print(results["table"])
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
