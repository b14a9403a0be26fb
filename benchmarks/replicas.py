"""Replicas across hosts (issue 26 part 3): API hosts in network namespaces of their own on one
PostgreSQL + Redis host, a client spreading its requests over them, one host killed with SIGKILL
mid-stream, another cut off the network::

    python -m benchmarks.replicas [--hosts 3] [--writers 8] [--seconds 8] [--models 1,4] [--no-partition]
                                  [--json PATH] [--quick]

The topology is :class:`benchmarks.netns.Topology` (root only; says why and exits 2 where
network namespaces are not allowed): each API host runs ``uvicorn service.main:app`` with one
worker, PostgreSQL a throwaway cluster of its own (``fsync=on``), Redis a server of its own.
The client is the shipped :class:`fcl3.Client` over :class:`fcl3.hosts.Spread` (round robin,
failover), one client shared by every writer thread.

1. **Scaling**: for each number of models in ``--models`` (1 and 4) and 1, 2, ... ``--hosts`` API
   hosts, ``--writers`` threads send small labelled batches (8 rows, 4 features, 4 tasks) for
   ``--seconds``, thread ``i`` to model ``i % models`` (new models each case); then as many
   threads ask for predictions of them for half as long. Printed: updates/s and their latency
   p50/p99 (one ``learn_batch`` call, its retries included), the hosts' own means per batch
   (``/metrics``: waiting for the model's lock, the update under it, the engine's part),
   predictions/s and p50/p99, every host's share of the answers, and whether each model's stored
   batches are exactly the acknowledged ones.
2. **kill -9**: the writers on every host, one host's process group killed with SIGKILL after a
   third of ``--seconds``, the stream going on for the rest. Printed: requests the transport
   moved to another host (``failovers``: connection refused), batches resent by the client after
   the connection was cut under them (``resent``), the longest time a batch in flight at the kill
   took to be acknowledged after it (``recovery_s``), the longest gap between two
   acknowledgements around the kill (``stall_s``), and whether the stored batches are exactly the
   acknowledged ones (:func:`benchmarks.faults.account`, read straight from the database).
   The kill waits for a moment the host holds a batch; ``cut``: the batches whose connection it cut.
3. **A network cut** (3 hosts or more; ``--no-partition`` skips it): the writers on the hosts the
   kill left, a client timeout of 15 s; one host's link taken down while it holds a batch (its
   processes run on, its connections stay open on the database's side: no FIN, no RST). Printed:
   when the first batch sent after the cut was acknowledged (``first_new_ack_s``), the longest gap
   between acknowledgements from the cut on (``stall_s``), what the writers gave up with, and
   whether the stored batches are exactly the acknowledged ones. A holder cut off keeps its
   PostgreSQL lease, so its update lock lasts ``LOCK_TTL`` (30 s by default): expect a stall that
   long when the cut host held the lock.

The helpers (:class:`Writers`, :func:`problems`, :func:`replay_predictions`; :func:`read_back` is the fault suite's)
are shared with tests/service/test_replicas_netns.py.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import datetime, timezone
from typing import Any

import numpy as np

from benchmarks.common import machine, pct, write_json
from benchmarks.faults import Batch, account, read_back

D, ROWS, TASKS = 4, 8, 4
#: Small, fast hyper-parameters (the tests' own).
PARAMS = {"n_components": 3, "max_outer_iter": 10}
MODEL = "replicas"


def host_env(model: str = MODEL, **extra: str) -> dict[str, str]:
    """The API hosts' model settings (the database, Redis and schema come from the topology)."""
    return {"MODEL_NAME": model, "FCL3_ESTIMATOR": "FCL3", "FCL3_KIND": "regression",
            "FCL3_PARAMS": json.dumps(PARAMS), "LOG_LEVEL": "WARNING", **extra}


# ----------------------------------------------------------------------------- the client side
class Writers:
    """``n`` threads sending labelled batches of ``model`` through ``client`` (one client
    shared, every batch with an Idempotency-Key of its own) until :meth:`stop` or until
    ``total`` batches were sent; every batch sent is noted (:class:`benchmarks.faults.Batch`).
    ``model`` may be a list: thread ``i`` writes to ``model[i % len(model)]``."""

    def __init__(self, client, model: str | list[str], n: int, seed: int = 0, total: int | None = None):
        self.models = [model] if isinstance(model, str) else list(model)
        self.client, self.n, self.total = client, n, total
        self.seed = seed
        self.batches: list[Batch] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self.weights = {f"t{t}": np.random.default_rng(1000 + t).normal(size=D) for t in range(TASKS)}
        self.threads = [threading.Thread(target=self._write, args=(i,), daemon=True) for i in range(n)]

    def start(self) -> "Writers":
        for t in self.threads:
            t.start()
        return self

    def _next(self, i: int, rng) -> Batch | None:
        with self.lock:
            if self._stop.is_set() or (self.total is not None and len(self.batches) >= self.total):
                return None
            k = len(self.batches)
            task = f"t{k % TASKS}"
            X = rng.normal(size=(ROWS, D))
            y = X @ self.weights[task] + 0.1 * rng.normal(size=ROWS)
            b = Batch(i, task, X.tolist(), y.tolist(), str(uuid.uuid4()), time.monotonic())
            self.batches.append(b)
            return b

    def _write(self, i: int) -> None:
        rng = np.random.default_rng(self.seed * 100 + i)
        model = self.models[i % len(self.models)]
        while (b := self._next(i, rng)) is not None:
            b.t_sent = time.monotonic()
            try:
                res = self.client.learn_batch(model, b.task, b.X, b.y, idempotency_key=b.key)
            except Exception as exc:  # noqa: BLE001 - what the client gave up with is a result
                b.error = f"{type(exc).__name__}: {str(exc)[:300]}"
                self._stop.wait(0.2)
            else:
                b.t_ack = time.monotonic()
                b.version, b.replayed, b.attempts = res.update.version, res.replayed, res.attempts

    def acks(self) -> list[Batch]:
        with self.lock:
            return [b for b in self.batches if b.version is not None]

    def stop(self, join: float = 60.0) -> int:
        """Stop sending; wait up to ``join`` s for the calls in flight; how many threads still run."""
        self._stop.set()
        return self.join(join)

    def join(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return sum(t.is_alive() for t in self.threads)


def batches_per_host(spread) -> tuple[Counter, Counter]:
    """Batches (``POST .../data``) each host holds right now, and batches each host dropped after
    they were sent (the connection cut under them), by host index, kept up to date by ``spread``
    (a request is routed, then answered or failed, in one thread)."""
    from fcl3.errors import NOT_SENT

    hosts, busy, cut, lock, current = spread.hosts, Counter(), Counter(), threading.Lock(), threading.local()
    route, answered, failed = hosts.route, hosts.answered, hosts.failed

    def routed(request, i):
        route(request, i)
        current.batch = request.method == "POST" and request.url.path.endswith("/data")
        with lock:
            busy[i] += current.batch

    def done(i, *exc):
        with lock:
            busy[i] -= current.batch
            cut[i] += bool(exc) and current.batch and not isinstance(exc[0], NOT_SENT)
        (failed if exc else answered)(i, *exc)

    hosts.route, hosts.answered, hosts.failed = routed, done, done
    return busy, cut


# ----------------------------------------------------------------------------- the store


def problems(sent: list[Batch], store: dict[str, Any]) -> list[str]:
    """What is wrong between the batches sent and the store, in words (empty: every acknowledged
    batch stored exactly once, at the version it was acknowledged with, nothing else stored, and
    the model's version and its tasks' counts agree)."""
    a = account(sent, store)
    out = [f"{a[k]} {what}" for k, what in (
        ("lost", "acknowledged batches not stored"), ("duplicates", "batches stored more than once"),
        ("acked_version_mismatch", "acknowledged batches stored at another version"),
        ("unacked_stored", "batches stored but never acknowledged"),
        ("stored_unknown", "stored batches nobody sent")) if a[k]]
    if not a["counts_agree"]:
        out.append(f"counts disagree: model version {a['model_version']}, {a['stored']} batches stored, "
                   f"tasks say {a['task_batches']} batches and {a['task_rows']} rows")
    if a["acknowledged"] != a["stored"]:
        out.append(f"{a['acknowledged']} acknowledged, {a['stored']} stored")
    return out


def replay_predictions(db_url: str, model: str, task: str, X) -> list[float]:
    """The model rebuilt from its stored batches by a fresh learner (its stored settings), then
    its predictions for ``X``."""
    from service.config import Settings
    from service.db import make_engine
    from service.models.learners import make_learner
    from service.store.reads import ModelReader

    settings = Settings(_env_file=None, DATABASE_URL=db_url, MODEL_NAME=model)
    reader = ModelReader(make_engine(settings, pool_size=1), model)
    try:
        learner = make_learner(reader.model_info()["settings"])
        for b in reader.batches():
            learner.learn(b["task_id"], b["X"], b["y"], defer_refits=b["refits_deferred"])
    finally:
        reader.engine.dispose()
    return learner.predict(task, np.asarray(X)).tolist()


# ----------------------------------------------------------------------------- the benchmark
#: The hosts' histograms read after each case (per batch: waiting for the model's lock, the
#: update under it, the engine's part of that).
SERVER_FIGURES = {"lock_wait": 'fcl3_lock_wait_seconds_{}{{outcome="acquired"}}',
                  "update": "fcl3_update_duration_seconds_{}", "engine": "fcl3_update_engine_seconds_{}"}


def server_figures(urls: list[str]) -> dict[str, float]:
    """Sums and counts of :data:`SERVER_FIGURES` over the hosts' ``/metrics`` (one worker each)."""
    import httpx

    out: dict[str, float] = {}
    for url in urls:
        text = httpx.get(url + "/metrics", timeout=10, trust_env=False).text
        values = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
        for name, pattern in SERVER_FIGURES.items():
            for part in ("sum", "count"):
                out[f"{name}_{part}"] = out.get(f"{name}_{part}", 0.0) + float(values.get(pattern.format(part), 0))
    return out


def _server_means(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    means = {}
    for name in SERVER_FIGURES:
        n = after[f"{name}_count"] - before[f"{name}_count"]
        total = after[f"{name}_sum"] - before[f"{name}_sum"]
        means[f"server_{name}_ms_mean"] = round(1000 * total / n, 2) if n else None
    return means


def _latencies(batches: list[Batch]) -> list[float]:
    return [(b.t_ack - b.t_sent) * 1000 for b in batches if b.t_ack is not None]


def _shares(before: dict[str, int], after: dict[str, int]) -> list[int]:
    return [after[u] - before.get(u, 0) for u in after]


def scaling(topo, k: int, n_models: int, writers: int, seconds: float, seed: int) -> dict[str, Any]:
    """Updates then predictions of ``n_models`` new models through ``k`` of the topology's hosts."""
    from fcl3 import Client
    from fcl3.hosts import Spread

    models = [f"scale-{k}-{n_models}-{m}" for m in range(n_models)]
    spread = Spread(topo.urls[:k])
    with Client(spread.url, transport=spread, timeout=60, trust_env=False) as client:
        for model in models:
            client.create_model(model, "regression", params=PARAMS)
        created, figures = spread.served, server_figures(topo.urls[:k])
        w = Writers(client, models, writers, seed=seed).start()
        time.sleep(seconds)
        w.stop()
        server = _server_means(figures, server_figures(topo.urls[:k]))
        acks = w.acks()
        t0, t1 = min(b.t_sent for b in w.batches), max(b.t_ack for b in acks)
        served_updates = spread.served
        lat = _latencies(acks)
        reads = _reads(client, models, writers, seconds / 2, seed)
    found = [problems([b for b in w.batches if b.writer % n_models == m], read_back(topo.database_url, model))
             for m, model in enumerate(models)]
    return {"hosts": k, "models": n_models, "writers": writers, "updates": len(acks),
            "gave_up": sum(b.error is not None for b in w.batches),
            "updates_per_s": round(len(acks) / (t1 - t0), 1), "update_p50_ms": pct(lat, 50),
            "update_p99_ms": pct(lat, 99), **server, "update_shares": _shares(created, served_updates), **reads,
            "read_shares": _shares(served_updates, spread.served), "problems": [p for f in found for p in f]}


def _reads(client, models: list[str], n: int, seconds: float, seed: int) -> dict[str, Any]:
    lat: list[float] = []
    failed = [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def read(i: int) -> None:
        rng = np.random.default_rng(seed * 1000 + i)
        while time.monotonic() < stop:
            X = rng.normal(size=(2, D)).tolist()
            t = time.monotonic()
            try:
                client.predict(models[i % len(models)], f"t{rng.integers(TASKS)}", X)
            except Exception:  # noqa: BLE001
                with lock:
                    failed[0] += 1
                continue
            with lock:
                lat.append((time.monotonic() - t) * 1000)

    threads = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(n)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"predictions_per_s": round(len(lat) / (time.monotonic() - t0), 1), "predict_p50_ms": pct(lat, 50),
            "predict_p99_ms": pct(lat, 99), "predictions_failed": failed[0]}


def kill_run(topo, victim: int, writers: int, seconds: float, seed: int) -> dict[str, Any]:
    """The writers on every host; host ``victim`` killed with SIGKILL a third of the way."""
    from fcl3 import Client
    from fcl3.hosts import Spread

    model = "kill9"
    spread = Spread(topo.urls)
    with Client(spread.url, transport=spread, timeout=60, trust_env=False) as client:
        client.create_model(model, "regression", params=PARAMS)
        busy, cut = batches_per_host(spread)
        w = Writers(client, model, writers, seed=seed).start()
        time.sleep(seconds / 3)
        deadline = time.monotonic() + 10
        while not busy[victim] and time.monotonic() < deadline:
            time.sleep(0.001)  # while the victim holds a batch
        before = spread.served
        t_kill = time.monotonic()
        topo.hosts[victim].kill9()
        time.sleep(seconds * 2 / 3)
        left = w.stop()
        after = spread.served
    acks = w.acks()
    in_flight = [b for b in acks if b.t_sent < t_kill < b.t_ack]
    around = sorted(b.t_ack for b in acks if t_kill - 5 < b.t_ack)
    gaps = [b - a for a, b in zip(around, around[1:]) if b > t_kill]
    store = read_back(topo.database_url, model)
    url = topo.hosts[victim].url
    return {"hosts": len(topo.hosts), "writers": writers, "killed": url, "updates": len(acks),
            "gave_up": sum(b.error is not None for b in w.batches), "threads_left": left,
            "failovers": spread.failovers, "cut": cut[victim], "resent": sum(b.attempts > 1 for b in in_flight),
            "in_flight_at_kill": len(in_flight),
            "recovery_s": round(max((b.t_ack - t_kill for b in in_flight), default=0.0), 3),
            "stall_s": round(max(gaps, default=0.0), 3),
            "served_by_killed_after_kill": after[url] - before[url],
            "shares_before": list(before.values()), "shares_after": _shares(before, after),
            "update_p50_ms": pct(_latencies(acks), 50), "update_p99_ms": pct(_latencies(acks), 99),
            "problems": problems(w.batches, store)}


def partition_run(topo, victim: int, live: list[int], writers: int, seconds: float, seed: int,
                  timeout: float = 15.0) -> dict[str, Any]:
    """The writers on hosts ``live``; host ``victim``'s link taken down while it holds a batch;
    the writes go on until a batch sent after the cut is acknowledged (at most 120 s), then for
    ``seconds`` / 3 more. The client's timeout is ``timeout``."""
    from fcl3 import Client
    from fcl3.hosts import Spread

    model = "partition"
    spread = Spread([topo.hosts[i].url for i in live])
    busy, _ = batches_per_host(spread)
    with Client(spread.url, transport=spread, timeout=timeout, trust_env=False) as client:
        client.create_model(model, "regression", params=PARAMS)
        w = Writers(client, model, writers, seed=seed).start()
        time.sleep(seconds / 3)
        deadline = time.monotonic() + 10
        while not busy[live.index(victim)] and time.monotonic() < deadline:
            time.sleep(0.001)
        t_cut = time.monotonic()
        topo.cut(topo.hosts[victim])
        deadline = t_cut + 120
        while not any(b.t_sent > t_cut for b in w.acks()) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(seconds / 3)
        left = w.stop(join=2 * timeout + 10)
    acks = w.acks()
    after = sorted(b.t_ack for b in acks if b.t_ack > t_cut)
    gaps = [b - a for a, b in zip([t_cut, *after], after)]
    url = topo.hosts[victim].url
    return {"hosts": len(live), "writers": writers, "cut": url, "client_timeout_s": timeout,
            "lock_ttl_s": float(topo.env.get("LOCK_TTL", 30.0)), "updates": len(acks), "threads_left": left,
            "first_new_ack_s": round(min((b.t_ack - t_cut for b in acks if b.t_sent > t_cut), default=float("nan")), 2),
            "stall_s": round(max(gaps, default=0.0), 2),
            "in_flight_at_cut": sum(b.t_sent < t_cut < (b.t_ack or float("inf")) for b in w.batches),
            "gave_up": dict(Counter(b.error.split(":")[0] for b in w.batches if b.error)),
            "errors_by_host": spread.hosts.errors, "failovers": spread.failovers,
            "problems": problems(w.batches, read_back(topo.database_url, model))}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.netns import Topology, unavailable

    ap = argparse.ArgumentParser(prog="python -m benchmarks.replicas", description=__doc__.split("\n\n")[0].rstrip(":") + ".")
    ap.add_argument("--hosts", type=int, default=3, help="API hosts (1 uvicorn worker each)")
    ap.add_argument("--writers", type=int, default=8, help="client threads (writers, then readers)")
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each phase's writes")
    ap.add_argument("--models", default="1,4", help="models written at once, comma-separated cases")
    ap.add_argument("--quick", action="store_true", help="2 hosts, 4 writers, 3 s phases, one model")
    ap.add_argument("--no-partition", action="store_true", help="skip the network cut (it lasts LOCK_TTL, 30 s)")
    ap.add_argument("--json", help="write the figures there too")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr (the JSON still on stdout)")
    args = ap.parse_args(argv)
    if args.quick:
        args.hosts, args.writers, args.seconds, args.models = 2, 4, 3.0, "1"

    def say(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    why = unavailable()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    command = "python -m benchmarks.replicas " + " ".join(argv if argv is not None else sys.argv[1:])
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    out: dict[str, Any] = {"command": command.strip(), "started": started, "machine": machine(),
                           "load_average_before": os.getloadavg(), "scaling": []}
    with Topology(workers=(1,) * args.hosts, env=host_env(), fsync=True) as topo:
        out["topology"] = {"subnet": str(topo.subnet), "hosts": topo.urls, "database": topo.db_address}
        say(f"hosts {', '.join(topo.urls)}; PostgreSQL + Redis on {topo.db_address}")
        for n_models, k in [(m, k) for m in map(int, args.models.split(",")) for k in range(1, args.hosts + 1)]:
            r = scaling(topo, k, n_models, args.writers, args.seconds, seed=k)
            out["scaling"].append(r)
            say(f"{k} host(s), {n_models} model(s): {r['updates_per_s']} updates/s (p50 {r['update_p50_ms']} ms, "
                f"p99 {r['update_p99_ms']} ms; shares {r['update_shares']}; on the hosts, mean lock wait "
                f"{r['server_lock_wait_ms_mean']} ms, update {r['server_update_ms_mean']} ms, engine "
                f"{r['server_engine_ms_mean']} ms), {r['predictions_per_s']} predictions/s "
                f"(p50 {r['predict_p50_ms']} ms, p99 {r['predict_p99_ms']} ms; shares {r['read_shares']})"
                f"{'; PROBLEMS: ' + '; '.join(r['problems']) if r['problems'] else ''}")
        if args.hosts >= 2:
            r = kill_run(topo, args.hosts - 1, args.writers, args.seconds * 1.5, seed=99)
            out["kill9"] = r
            say(f"kill -9 of {r['killed']}: {r['updates']} updates, {r['failovers']} requests failed over, "
                f"{r['resent']} of {r['in_flight_at_kill']} batches in flight resent, recovery {r['recovery_s']} s, "
                f"stall {r['stall_s']} s, gave up {r['gave_up']}; "
                f"{'exactly once' if not r['problems'] else 'PROBLEMS: ' + '; '.join(r['problems'])}")
        if args.hosts >= 3 and not args.no_partition:
            live = list(range(args.hosts - 1))  # the hosts the kill left
            r = partition_run(topo, live[-1], live, args.writers, args.seconds * 1.5, seed=7)
            out["partition"] = r
            say(f"link of {r['cut']} cut: first batch sent after the cut acknowledged {r['first_new_ack_s']} s "
                f"after it, longest gap between acknowledgements {r['stall_s']} s (LOCK_TTL {r['lock_ttl_s']:g} s, "
                f"client timeout {r['client_timeout_s']:g} s), {r['updates']} updates, gave up {r['gave_up']}; "
                f"{'exactly once' if not r['problems'] else 'PROBLEMS: ' + '; '.join(r['problems'])}")
    out["seconds"] = round(time.monotonic() - t0, 1)
    out["load_average_after"] = os.getloadavg()
    print(json.dumps(out, indent=1))
    if args.json:
        write_json(args.json, out)
    runs = [*out["scaling"], out.get("kill9", {"problems": []}), out.get("partition", {"problems": []})]
    return 1 if any(r["problems"] for r in runs) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
