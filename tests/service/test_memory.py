"""What a worker keeps in memory between requests: one model version, one copy of its arrays.

Soak runs (``python -m service.loadtest``) showed worker RSS growing with every update. Part
of it was the service's own doing: the cached :class:`service.store.Snapshot` kept, next to
the learner, an exported ``ModelState`` holding every task's arrays (the raw rows included)
a second time. These tests pin that down without timing or RSS noise: they count the numpy
bytes reachable from the cached snapshot, and the snapshots still alive after many versions.
"""
from __future__ import annotations

import gc
import weakref

import numpy as np

from .conftest import regression_batch
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
        snap = client.app.state.store.snapshot()
        held, learner = array_bytes(snap), array_bytes(snap.learner)
        assert learner > 0
        # Everything the snapshot holds is the learner's; before the fix this was ~2x.
        assert held <= learner * 1.05, (held, learner)


def test_a_regression_stream_stops_growing_once_its_tasks_exist(make_client):
    """A worker's cached model, and each stored task row, keep a fixed size however many rows
    the tasks learn (engine state format 2; format 1 grew by every row, ~6 KB per 30 updates here)."""
    writer = make_client()
    s = writer.app.state.settings
    reader = make_client(SQLITE_PATH=s.SQLITE_PATH, MODEL_NAME=s.MODEL_NAME)
    _stream(writer, reader, 6)  # every task exists, every code column the stream uses is in use
    sizes = []
    for _ in range(3):
        _stream(writer, reader, 15, seed=len(sizes))
        sizes.append([array_bytes(c.app.state.store.snapshot().learner) for c in (writer, reader)])
    assert sizes[0] == sizes[1] == sizes[2], sizes
    assert writer.app.state.store.snapshot().learner.tasks_["t0"].n_samples == 12 * (2 + 15)


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
            snap = client.app.state.store.snapshot()
            refs += [weakref.ref(snap), weakref.ref(snap.learner)]
            del snap
    gc.collect()
    alive = {id(r()) for r in refs if r() is not None}
    assert len(alive) <= 4, f"{len(alive)} snapshots/learners still alive (expected one of each per process)"


def test_loadtest_reports_second_half_growth():
    """The soak's memory figure: slope over the second half only, and per committed update."""
    from service.loadtest import rss_summary

    # 100 MB, +10 MB/min during the first half (warm-up), then +1 MB/min; 2 updates per second.
    samples = [{"t": t, "rss_mb": 100 + (t / 6 if t < 300 else 50 + (t - 300) / 60), "anon_mb": 50, "threads": 3}
               for t in range(0, 601, 2)]
    acks = [t / 2 for t in range(1200)]
    out = rss_summary(samples, warmup=120, half=300, ack_times=acks)
    assert abs(out["second_half_mb_per_min"] - 1.0) < 1e-6
    assert out["slope_mb_per_min"] > 2  # the whole run's slope is dominated by the warm-up
    assert out["second_half_updates"] == 600  # acks at 300.0, 300.5, ..., 599.5 s
    assert abs(out["second_half_kb_per_update"] - 1024 * 5 / 600) < 1e-2
    assert out["second_half_anon_mb_per_min"] == 0.0 and out["threads_max"] == 3


def test_loadtest_plots_every_workers_rss(tmp_path):
    from service.loadtest import plot_rss

    samples = {f"api0/pid{i}": [{"t": t, "rss_mb": 160.0 + i, "anon_mb": 90.0, "threads": 9} for t in range(0, 61, 2)]
               for i in range(2)}
    run = {"topology": "1 process(es) x 2 worker(s)", "seconds": 60.0, "requests_per_s": 600.0,
           "consistency": {"acknowledged_updates": 1800}, "worker_rss_samples": samples}
    results = {"setup": {"estimator": "FCL3", "kind": "regression", "d": 8, "clients": 16, "update_fraction": 0.05},
               "runs": [run, run]}
    path = plot_rss(results, str(tmp_path / "rss.png"))
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_malloc_trim_is_rate_limited(monkeypatch):
    from service import memory

    if memory._GLIBC is None:
        import pytest

        pytest.skip("not glibc")
    calls = []
    monkeypatch.setattr(memory, "_last_trim", 0.0)
    monkeypatch.setattr(memory, "_GLIBC", type("L", (), {"malloc_trim": staticmethod(lambda pad: calls.append(pad))})())
    ran = [memory.trim_after_model_change(now=t) for t in (1000.0, 1001.0, 1009.9, 1010.0, 1010.5)]
    assert ran == [True, False, False, True, False] and calls == [0, 0]


def test_arena_cap_leaves_an_explicit_setting_alone(monkeypatch):
    from service import memory

    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert memory.limit_malloc_arenas() is None
    monkeypatch.setenv("MALLOC_ARENA_MAX", "")
    assert memory.limit_malloc_arenas() in (2, None)  # None off glibc
