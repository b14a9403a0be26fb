"""A take-back's checkpoint, stored after its commit and off the update lock: stored at the
take-back's version and used by the next take-back; never stored for a model made again under
the name (another lineage), nor once a batch it holds was taken back, nor over a checkpoint
there already, and no newer one deleted; a take-back whose checkpoint cannot be stored is
committed all the same and the next one replays from an older checkpoint, bit for bit. And the
schedule: one checkpoint per bucket over the newest 1,000 versions."""

from __future__ import annotations

import contextlib
import math
import threading

import numpy as np
import pytest
from sqlalchemy.exc import OperationalError

from service.take_back import checkpoints, flows

from .test_take_back import create, engine_run, post
from .test_take_back_checkpoints import assert_same_model, every, long_stream, stored_checkpoints  # noqa: F401


def hosted(c, name):
    return c.app.state.models.get(name)


def test_the_checkpoint_is_stored_after_the_commit_off_the_lock_and_used_next(backend_app, every, monkeypatch, caplog):
    c = backend_app()
    name = create(c)
    batches = long_stream(31, 23)
    for task, X, y in batches:
        post(c, name, task, X, y)
    holder: list[int | None] = [None]
    seen: list[tuple[int, bool, int]] = []
    real_locked, real_store = flows.locked, checkpoints.store_committed

    @contextlib.contextmanager
    def locked(m, h):
        with real_locked(m, h) as held:
            holder[0] = threading.get_ident()
            try:
                yield held
            finally:
                holder[0] = None

    def store_committed(engine, model_name, version, created_at, data):
        version_now = c.get(f"/models/{model_name}").json()["version"]
        seen.append((version, holder[0] == threading.get_ident(), version_now))
        return real_store(engine, model_name, version, created_at, data)

    monkeypatch.setattr(flows, "locked", locked)
    monkeypatch.setattr(checkpoints, "store_committed", store_committed)
    assert c.delete(f"/models/{name}/batches/22").status_code == 200
    assert seen == [(24, False, 24)]  # after the commit of version 24, the lock released
    assert 24 in stored_checkpoints(c, name) and 20 in stored_checkpoints(c, name)
    (line,) = [r for r in caplog.records if getattr(r, "event", None) == "take_back"]
    assert line.checkpoint_stored is True
    caplog.clear()
    assert c.delete(f"/models/{name}/batches/23").status_code == 200
    (line,) = [r for r in caplog.records if getattr(r, "event", None) == "take_back"]
    assert (line.checkpoint, line.n_replayed) == (20, 1)  # 24 holds 23; 21 on the checkpoint of 20
    caplog.clear()
    post(c, name, *long_stream(32, 1)[0])  # version 26
    assert c.delete(f"/models/{name}/batches/26").status_code == 200
    (line,) = [r for r in caplog.records if getattr(r, "event", None) == "take_back"]
    assert (line.checkpoint, line.n_replayed) == (25, 0)  # the checkpoint the take-back before stored
    kept = [b for v, b in enumerate(batches, 1) if v not in (22, 23)]
    assert_same_model(c, name, engine_run(kept))


def test_a_checkpoint_is_stored_only_for_the_model_committed(backend_app, every):
    """The fence of a checkpoint stored after its commit: the model row of that name must be the
    one committed (``created_at``) at that version or past it, with no batch the checkpoint holds
    taken back since; a checkpoint there already stays, and no newer one is deleted."""
    c = backend_app()
    name = create(c)
    for task, X, y in long_stream(33, 12):
        post(c, name, task, X, y)
    model = hosted(c, name)
    engine, created = model.reader.bulk, model.reader.model_info()["created_at"]
    data = checkpoints.state_file(model.reader.snapshot().learner.get_state(), 12, {}, {})
    assert stored_checkpoints(c, name) == [5, 10]
    assert not checkpoints.store_committed(engine, name, 13, created, data)  # not a committed version
    assert not checkpoints.store_committed(engine, name, 10, created, data)  # one there already
    assert checkpoints.store_committed(engine, name, 12, created, data)
    assert checkpoints.store_committed(engine, name, 4, created, data)  # the newer ones (5, 10, 12) stay
    assert not checkpoints.store_committed(engine, name, 8, created, data)  # not kept: its bucket has 5
    assert stored_checkpoints(c, name) == [4, 5, 10, 12]
    assert c.delete(f"/models/{name}/batches/11").status_code == 200  # version 13: 12 holds batch 11
    assert stored_checkpoints(c, name) == [4, 5, 10, 13]
    assert not checkpoints.store_committed(engine, name, 12, created, data)  # 12 holds batch 11
    # the model made again under its name: the old one's checkpoints are never stored for it
    assert c.delete(f"/models/{name}").status_code in (200, 204)
    name2 = create(c, name)
    for task, X, y in long_stream(34, 9):
        post(c, name2, task, X, y)
    assert not checkpoints.store_committed(engine, name, 7, created, data)
    assert 7 not in stored_checkpoints(c, name)


def test_a_take_back_whose_checkpoint_is_not_stored_is_committed(backend_app, every, monkeypatch):
    """The database refuses the checkpoint after the commit (a crash there is the same): the
    take-back is answered and served, and the checkpoint holding its batch, left, is never used;
    the next one replays from an older checkpoint, exactly, and its write deletes it."""
    c = backend_app()
    name = create(c)
    batches = long_stream(35, 18)
    for task, X, y in batches:
        post(c, name, task, X, y)

    def refused(*_args, **_kwargs):
        raise OperationalError("INSERT INTO checkpoints", {}, Exception("disk I/O error"))

    monkeypatch.setattr(checkpoints, "store_committed", refused)
    r = c.delete(f"/models/{name}/batches/12")
    assert r.status_code == 200, r.text
    assert r.json()["version"] == 19
    assert stored_checkpoints(c, name) == [5, 10, 15]  # 15 holds batch 12
    monkeypatch.undo()
    monkeypatch.setattr(checkpoints, "EVERY", 5)
    r = c.delete(f"/models/{name}/batches/18")
    assert (r.status_code, r.json()["n_replayed"]) == (200, 6)  # 11, 13..17 on the checkpoint of 10
    assert stored_checkpoints(c, name) == [5, 10, 20]
    assert_same_model(c, name, engine_run([b for v, b in enumerate(batches, 1) if v not in (12, 18)]))


@pytest.mark.parametrize("n", [1_000, 5_000, 100_000])
def test_the_schedule_keeps_one_per_bucket_over_the_newest_thousand(n):
    """An update's checkpoint every 100 versions: a batch of the newest 1,000 versions has one at
    most ``EVERY`` versions before it. With take-backs' between them (each deleting those that
    hold its batch): at most one per bucket but the newest, at most
    ``DENSE + 2 + KEEP (log2(n / EVERY) + 2)`` in all, and the same bound for the batches before
    every batch taken back."""
    every = checkpoints.EVERY
    for take_backs in (False, True):
        rng = np.random.default_rng(n)
        have: list[int] = []
        oldest = n + 1  # the oldest batch taken back: the checkpoints after it were deleted
        for v in range(1, n + 1):
            if v % every == 0:
                have = sorted(checkpoints.kept([*have, v]))
            elif take_backs and v > n - 3 * every and rng.random() < 0.02:  # a recent batch taken back by v
                batch = v - int(rng.integers(1, 30))
                oldest = min(oldest, batch)
                have = sorted(checkpoints.kept([c for c in have if c < batch] + [v]))
            buckets = [c // every for c in have[:-1]]
            assert len(set(buckets)) == len(buckets), have
        assert len(have) <= checkpoints.DENSE + 2 + checkpoints.KEEP * (math.log2(n / every) + 2)
        assert not take_backs or oldest <= n
        for back in range(1, 1001):
            batch = n - back + 1
            start = max((c for c in have if c < batch), default=0)
            if batch <= oldest:
                assert batch - start <= every, (take_backs, back, start, have)
