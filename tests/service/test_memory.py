"""What a worker keeps in memory between requests: one model version, one copy of its arrays;
and the process's malloc settings (:mod:`service.memory`).

The cached :class:`service.store.reads.Snapshot` holds the learner and nothing else of the model's
arrays. These tests check it without timing or RSS noise: they count the numpy bytes
reachable from the cached snapshot, and the snapshots still alive after many versions.
"""
from __future__ import annotations

import gc
import os
import platform
import subprocess
import sys
import weakref

import numpy as np
import pytest

from .conftest import ROOT, regression_batch
from .test_persistence import _post

SKIP_TYPES = (type, type(gc), type(len), type(lambda: 0))


def array_bytes(root) -> int:
    """Bytes of the distinct numpy buffers reachable from ``root`` (views counted once)."""
    seen, buffers, stack = set(), {}, [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, SKIP_TYPES):
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            base = obj
            while isinstance(base.base, np.ndarray):
                base = base.base
            buffers[base.__array_interface__["data"][0]] = base.nbytes
            continue
        stack.extend(gc.get_referents(obj))
    return sum(buffers.values())


def _stream(writer, reader, n: int, seed: int = 5):
    """``n`` updates through ``writer``; ``reader`` (another 'worker') predicts after each."""
    rng = np.random.default_rng(seed)
    probe = {"task_id": "t0", "X": [[0.1, 0.2, 0.3, 0.4]]}
    for i in range(n):
        _post(writer, f"t{i % 3}", *regression_batch(rng))
        assert reader.post("/predict", json=probe).status_code == 200


def test_the_cached_snapshot_holds_no_second_copy_of_the_model(make_client):
    writer = make_client()
    s = writer.app.state.settings
    reader = make_client(SQLITE_PATH=s.SQLITE_PATH, MODEL_NAME=s.MODEL_NAME)
    _stream(writer, reader, 30)
    for client in (writer, reader):  # the writer caches its own commit, the reader a refresh
        snap = client.app.state.model.reader.snapshot()
        held, learner = array_bytes(snap), array_bytes(snap.learner)
        assert learner > 0
        # Everything the snapshot holds is the learner's (an exported ModelState next to it would be ~2x).
        assert held <= learner * 1.05, (held, learner)


def test_a_regression_stream_stops_growing_once_its_tasks_exist(make_client):
    """A worker's cached model, and each stored task row, keep a fixed size however many rows
    the tasks learn (a regression task is kept as its sufficient statistics)."""
    writer = make_client()
    s = writer.app.state.settings
    reader = make_client(SQLITE_PATH=s.SQLITE_PATH, MODEL_NAME=s.MODEL_NAME)
    _stream(writer, reader, 6)  # every task exists, every code column the stream uses is in use
    sizes = []
    for _ in range(3):
        _stream(writer, reader, 15, seed=len(sizes))
        sizes.append([array_bytes(c.app.state.model.reader.snapshot().learner) for c in (writer, reader)])
    assert sizes[0] == sizes[1] == sizes[2], sizes
    assert writer.app.state.model.reader.snapshot().learner.tasks_["t0"].n_samples == 12 * (2 + 15)


def test_old_model_versions_are_released(make_client):
    """Each process keeps one cached version: earlier snapshots and their learners are freed."""
    writer = make_client()
    s = writer.app.state.settings
    reader = make_client(SQLITE_PATH=s.SQLITE_PATH, MODEL_NAME=s.MODEL_NAME)
    rng = np.random.default_rng(9)
    probe = {"task_id": "t0", "X": [[0.1, 0.2, 0.3, 0.4]]}
    refs = []
    for i in range(20):
        _post(writer, f"t{i % 3}", *regression_batch(rng))
        reader.post("/predict", json=probe)
        for client in (writer, reader):
            snap = client.app.state.model.reader.snapshot()
            refs += [weakref.ref(snap), weakref.ref(snap.learner)]
            del snap
    gc.collect()
    alive = {id(r()) for r in refs if r() is not None}
    assert len(alive) <= 4, f"{len(alive)} snapshots/learners still alive (expected one of each per process)"


def test_malloc_trim_is_rate_limited():
    from service import memory

    calls = []
    trimmer = memory.HeapTrimmer(10.0, libc=type("L", (), {"malloc_trim": staticmethod(lambda pad: calls.append(pad))})())
    ran = [trimmer.after_model_change(now=t) for t in (1000.0, 1001.0, 1009.9, 1010.0, 1010.5)]
    assert ran == [True, False, False, True, False] and calls == [0, 0]


def test_each_app_trims_its_own_heap_after_its_models_change(tmp_path):
    """The models of one app tell the app's trimmer (service.hosting.Shared) when their cached
    version changes; nothing of it is a process global."""
    import core
    from service import memory
    from service.config import Settings
    from service.db import make_engine, upgrade_schema
    from service.writing.locks import LocalLocks
    from service.hosting import HostedModel, Shared
    from service.learning.updates import learn_batch
    from service.store.writes import NewModel

    class Counting(memory.HeapTrimmer):
        def __init__(self):
            super().__init__(0.0, libc=type("L", (), {"malloc_trim": staticmethod(lambda pad: None)})())
            self.told = 0

        def after_model_change(self, now=None):
            self.told += 1
            return super().after_model_change(now)

    one, other = Shared(heap=Counting()), Shared(heap=Counting())
    settings = Settings(_env_file=None, SQLITE_PATH=str(tmp_path / "fcl3.db"), DATABASE_URL=None, REDIS_URL=None)
    engine = make_engine(settings)
    upgrade_schema(engine)
    model = HostedModel.open(engine, LocalLocks(30.0, 5.0), "m", settings.model_settings(), shared=one)
    model.writer.create(NewModel(core.LEARNERS["FCL3"](kind="regression"), settings.model_settings()))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, 3))
    learn_batch(model, "t", X, X.sum(axis=1))
    assert one.heap.told >= 1 and other.heap.told == 0


class FakeLibc:
    """Records mallopt calls; ``accept`` is what mallopt returns (1: success)."""

    def __init__(self, accept: int = 1):
        self.accept, self.calls = accept, []

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return self.accept


@pytest.fixture
def fake_glibc(monkeypatch):
    from service import memory

    libc = FakeLibc()
    monkeypatch.setattr(memory, "_glibc", lambda: libc)
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    return libc


def test_arena_cap_is_applied_when_the_environment_does_not_set_one(fake_glibc, monkeypatch):
    from service import memory

    assert memory.limit_malloc_arenas() == 2
    assert fake_glibc.calls == [(memory.M_ARENA_MAX, 2)]
    monkeypatch.setenv("MALLOC_ARENA_MAX", "  ")  # blank is unset
    assert memory.limit_malloc_arenas(3) == 3
    assert fake_glibc.calls[-1] == (memory.M_ARENA_MAX, 3)


def test_arena_cap_leaves_an_explicit_setting_alone(fake_glibc, monkeypatch):
    from service import memory

    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert memory.limit_malloc_arenas() is None
    assert fake_glibc.calls == []


def test_arena_cap_is_not_applied_under_jemalloc_or_when_refused(fake_glibc, monkeypatch):
    from service import memory

    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
    assert memory.limit_malloc_arenas() is None and fake_glibc.calls == []
    monkeypatch.delenv("LD_PRELOAD")
    fake_glibc.accept = 0
    assert memory.limit_malloc_arenas() is None and fake_glibc.calls == [(memory.M_ARENA_MAX, 2)]


def _arena_cap_in_a_fresh_process(**env) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("MALLOC_ARENA_MAX", "LD_PRELOAD")}
    r = subprocess.run([sys.executable, "-c", "from service.memory import limit_malloc_arenas as f; print(f())"],
                       cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_arena_cap_on_the_real_glibc():
    """A fresh process: glibc's mallopt accepts the cap (returns 2) unless MALLOC_ARENA_MAX is set."""
    assert _arena_cap_in_a_fresh_process() == "2"
    assert _arena_cap_in_a_fresh_process(MALLOC_ARENA_MAX="4") == "None"


FREEZE_PROBE = """
import gc, os, sys, tempfile, time
os.environ.update({"DATABASE_URL": "", "REDIS_URL": "", "SQLITE_PATH": os.path.join(tempfile.mkdtemp(), "f.db"),
                   "LOG_LEVEL": "WARNING"})
from fastapi.testclient import TestClient
from service.main import create_app
before = gc.get_freeze_count()
with TestClient(create_app()) as client:
    assert client.get("/healthz").status_code == 200
    first = gc.get_freeze_count()
    t0 = time.perf_counter(); gc.collect(); full_ms = (time.perf_counter() - t0) * 1e3
with TestClient(create_app()) as client:  # a second app in the same process
    assert client.get("/healthz").status_code == 200
    second = gc.get_freeze_count()
print(before, first, second, len(gc.get_objects()), round(full_ms, 1))
"""


def test_startup_heap_is_frozen_once_per_process():
    """A fresh process: the first app's start-up moves what is alive to the permanent
    generation (most of the tracked objects), a second app's start-up leaves it alone."""
    r = subprocess.run([sys.executable, "-c", FREEZE_PROBE], cwd=ROOT, env=dict(os.environ), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    before, first, second, tracked, _ = r.stdout.split()
    # frozen objects freed meanwhile leave the count; nothing of the second app joins it
    assert int(before) == 0 and int(first) > 50_000 and int(second) <= int(first)
    assert int(tracked) < int(first) // 4  # a full collection scans a small part of the heap
