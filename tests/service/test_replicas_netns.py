"""Replicas across hosts (issue 26 part 3): PostgreSQL + Redis in one network namespace, three
API hosts (uvicorn, 1, 2 and 1 workers) in namespaces of their own, the shipped client spreading
its batches over them (:class:`fcl3.hosts.Spread`), and one host killed with SIGKILL (its whole
process group) mid-stream. Nothing acknowledged is lost or learned twice, the client fails
over, and every surviving host predicts the same, bit for bit, at the final version.

The topology is :class:`benchmarks.netns.Topology`: traffic only between the run's own
addresses (a /24 of 10.231.0.0/16) and loopback. Needs root, ``ip netns``, PostgreSQL's server
binaries and ``redis-server``: skipped with the reason where any is missing
(``FCL3_REQUIRE_NETNS=1``: failed instead).
"""
from __future__ import annotations

import os
import shutil
import threading
import time
from collections import Counter

import numpy as np
import pytest

from benchmarks.faults import Batch, batch_label
from benchmarks.netns import Topology, unavailable
from benchmarks.replicas import (MODEL, ROWS, TASKS, Writers, batches_per_host, host_env, problems, read_back,
                                 replay_predictions)
from fcl3 import Client
from fcl3.hosts import Spread

N_BATCHES, KILL_AFTER, WRITERS = 60, 20, 3


@pytest.fixture
def topology(tmp_path):
    why = unavailable()
    if why:
        if os.environ.get("FCL3_REQUIRE_NETNS") == "1":
            pytest.fail(f"network namespaces required (FCL3_REQUIRE_NETNS=1) but: {why}", pytrace=False)
        pytest.skip(f"hosts in network namespaces: {why}")
    topo = Topology(workers=(1, 2, 1), env=host_env(MODEL))
    try:
        topo.start(timeout=90)
        yield topo
    finally:
        if topo.dir is not None:  # the hosts' logs, kept with the test's own files
            for log in [*topo.dir.glob("*.log"), *topo.dir.glob("pg/*.log")]:
                shutil.copy(log, tmp_path / log.name)
        topo.close()


@pytest.mark.slow
def test_kill_9_of_one_api_host_mid_stream_loses_nothing_and_replicas_agree(topology):
    t0 = time.monotonic()
    victim = topology.hosts[1]  # the host with two workers: its whole process group goes
    survivors = [h for h in topology.hosts if h is not victim]
    spread = Spread(topology.urls, cooldown=0.05)  # the dead host is tried again, and refused, before the stream ends
    busy, cut = batches_per_host(spread)
    with Client(spread.url, transport=spread, timeout=30, trust_env=False) as client:
        writers = Writers(client, MODEL, WRITERS, seed=26, total=N_BATCHES).start()
        reads = Reader(client, writers).start()
        deadline = time.monotonic() + 40
        while (len(writers.acks()) < KILL_AFTER or not busy[victim.index]) and time.monotonic() < deadline:
            time.sleep(0.001)  # after KILL_AFTER batches, while the victim holds a batch
        before = spread.served
        t_kill = time.monotonic()
        victim.kill9()
        assert not victim.running()
        left = writers.join(60)
        reads.stop()
        after = spread.served
    assert left == 0, "writers still running after 60 s"
    assert reads.failed == [] and reads.ok_after(t_kill) > 0  # predictions failed over too

    # Every batch was acknowledged: the client failed over from the dead host.
    sent, acks = writers.batches, writers.acks()
    assert [b.error for b in sent if b.error] == []
    assert len(acks) == N_BATCHES and before[victim.url] > 0
    assert after[victim.url] == before[victim.url], "the dead host answered after its kill"
    for h in survivors:
        assert after[h.url] > before[h.url]
    in_flight = [b for b in acks if b.t_sent < t_kill < b.t_ack]
    resent = [b for b in in_flight if b.attempts > 1]
    # Every request the kill cut, its batch resent and acknowledged: those in flight at the kill,
    # and those sent just after it on a kept-alive connection to the dead host before the client
    # put that host in cooldown.
    assert sum(b.attempts - 1 for b in acks) >= cut[victim.index]
    assert spread.failovers >= 1  # the victim's next turns were refused and moved on

    # Every acknowledged batch is stored exactly once, at the version it was acknowledged with.
    assert sorted(b.version for b in acks) == list(range(1, N_BATCHES + 1))
    store = read_back(topology.database_url, MODEL)
    assert problems(sent, store) == []

    # Every surviving host says the same, and predicts the same at the final version.
    per_task = Counter(b.task for b in acks)
    probe = np.random.default_rng(7).normal(size=(3, 4)).tolist()
    predictions = {}
    for h in survivors:
        with Client(h.url, timeout=30, trust_env=False) as c:
            model = c.get_model(MODEL)
            assert (model.version, model.n_batches, model.n_tasks) == (N_BATCHES, N_BATCHES, TASKS)
            tasks = {t.task_id: t for t in c.tasks(MODEL).tasks}
            assert {k: (t.n_batches, t.n_samples) for k, t in tasks.items()} == {
                k: (n, n * ROWS) for k, n in per_task.items()}
            for task in sorted(per_task):
                p = c.predict(MODEL, task, probe, min_version=N_BATCHES)
                assert p.version == N_BATCHES
                predictions.setdefault(task, {})[h.url] = p.predictions
    for task, by_host in predictions.items():
        first = next(iter(by_host.values()))
        assert all(p == first for p in by_host.values()), (task, by_host)
        assert replay_predictions(topology.database_url, MODEL, task, probe) == first
    print(f"\nreplicas: {N_BATCHES} batches over {len(topology.hosts)} hosts, {victim.url} killed after "
          f"{KILL_AFTER}; served before {before}, after {after}; failovers {spread.failovers}; "
          f"{len(reads.answered)} predictions answered ({reads.ok_after(t_kill)} after the kill); "
          f"{len(in_flight)} batches in flight at the kill, {cut[victim.index]} cut by it, {len(resent)} resent, "
          f"the last acknowledged {max((b.t_ack - t_kill for b in in_flight), default=0):.2f} s after it; "
          f"{time.monotonic() - t0:.1f} s")


class Reader(threading.Thread):
    """Predictions of task t0 through the writers' client, one after the other, from t0's first
    acknowledged batch until :meth:`stop` (with ``min_version`` that batch's version: a replica
    whose cache has not yet heard of the commit reads the stored version first, instead of
    answering 404 for a task it has not seen); when each was answered, and what failed."""

    def __init__(self, client: Client, writers: Writers):
        super().__init__(daemon=True)
        self.client, self.writers = client, writers
        self.answered: list[float] = []
        self.failed: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not (learned := [b.version for b in self.writers.acks() if b.task == "t0"]):
            if self._halt.wait(0.01):
                return
        X = np.random.default_rng(3).normal(size=(2, 4)).tolist()
        while not self._halt.is_set():
            try:
                self.client.predict(MODEL, "t0", X, min_version=min(learned))
                self.answered.append(time.monotonic())
            except Exception as exc:  # noqa: BLE001 - any failure is the finding
                self.failed.append(f"{type(exc).__name__}: {exc}")
            self._halt.wait(0.02)

    def start(self) -> "Reader":
        super().start()
        return self

    def stop(self) -> None:
        self._halt.set()
        self.join(30)

    def ok_after(self, t: float) -> int:
        return sum(a > t for a in self.answered)


def _sent(task: str, seed: int, version: int | None) -> Batch:
    rng = np.random.default_rng(seed)
    b = Batch(0, task, rng.normal(size=(ROWS, 4)).tolist(), rng.normal(size=ROWS).tolist(), f"k{seed}", 0.0)
    b.version, b.t_ack = version, (1.0 if version else None)
    return b


def _stored(batches: list[tuple[Batch, int]]) -> dict:
    rows = [{"version": v, "task": b.task, "n": ROWS, "label": batch_label(b.task, b.X, b.y)} for b, v in batches]
    tasks = Counter(r["task"] for r in rows)
    return {"model_version": len(rows), "tasks": [(t, n * ROWS, n) for t, n in tasks.items()], "batches": rows}


def test_the_accounting_catches_a_doubled_a_lost_and_a_misplaced_batch():
    """What the test above asserts can fail: a batch learned twice, an acknowledged batch
    missing, or one stored at another version than it was acknowledged with."""
    a, b, c = _sent("t0", 1, 1), _sent("t1", 2, 2), _sent("t0", 3, 3)
    assert problems([a, b, c], _stored([(a, 1), (b, 2), (c, 3)])) == []
    assert "1 batches stored more than once" in problems([a, b, c], _stored([(a, 1), (b, 2), (c, 3), (b, 4)]))
    lost = problems([a, b, c], _stored([(a, 1), (b, 2)]))
    assert "1 acknowledged batches not stored" in lost and "3 acknowledged, 2 stored" in lost
    assert "2 acknowledged batches stored at another version" in problems([a, b, c], _stored([(a, 1), (c, 2), (b, 3)]))
    unacked = _sent("t1", 4, None)
    assert "1 batches stored but never acknowledged" in problems([a, b, c, unacked],
                                                                 _stored([(a, 1), (b, 2), (c, 3), (unacked, 4)]))
