"""Taking a batch back from a checkpoint, off the update lock: on streams that cross several
checkpoints, a batch before the oldest one, writers committing while the replay runs; the
model after it against an engine run in this process on the stream without that batch, bit
for bit; a checkpoint restored and learned on equals never having stopped; the schedule's bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sqlalchemy import create_engine, select

import core
from service.models import state_files
from service.store.tables import CheckpointRow
from service.take_back import checkpoints, flows

from .conftest import ESTIMATOR, PARAMS, regression_batch
from .test_take_back import create, engine_run, post, query_rows

EVERY = 5  # versions between checkpoints in these tests: a 40-batch stream crosses eight


def long_stream(seed: int, n: int, n_tasks: int = 3):
    rng = np.random.default_rng(seed)
    return [(f"t{i % n_tasks}", *regression_batch(rng, n=4, task=i % n_tasks)) for i in range(n)]


def exported(c, name) -> core.ModelState:
    r = c.get(f"/models/{name}/state")
    assert r.status_code == 200, r.text
    return state_files.read_npz(r.content)[0]


def assert_same_model(c, name, learner: core.LifelongLearner) -> None:
    """The served model equals ``learner``: every array of its exported state bit for bit,
    and every task's predictions."""
    got, want = exported(c, name), learner.get_state()
    assert list(got.tasks) == list(want.tasks)
    for k, a in want.arrays.items():
        np.testing.assert_array_equal(got.arrays[k], a, err_msg=k)
    for t, task in want.tasks.items():
        for k, a in task["arrays"].items():
            np.testing.assert_array_equal(got.tasks[t]["arrays"][k], a, err_msg=f"{t}/{k}")
    Xq = query_rows()
    for t in want.tasks:
        r = c.post(f"/models/{name}/predict", json={"task_id": t, "X": Xq})
        np.testing.assert_array_equal(np.asarray(r.json()["predictions"]), learner.predict(t, np.asarray(Xq)))


@pytest.fixture
def every(monkeypatch):
    monkeypatch.setattr(checkpoints, "EVERY", EVERY)
    return EVERY


def stored_checkpoints(c, name) -> list[int]:
    url = c.app.state.settings.database_url if hasattr(c.app.state, "settings") else None
    engine = c.app.state.hosting.engine if url is None else create_engine(url)
    with engine.connect() as conn:
        return sorted(
            conn.execute(select(CheckpointRow.version).where(CheckpointRow.model_name == name)).scalars().all()
        )


@pytest.mark.parametrize("back", [1, 3, 12, 38])
def test_a_take_back_on_a_long_stream_equals_the_engine_without_the_batch(backend_app, every, back):
    """40 batches (eight checkpoints written); take back the batch ``back`` versions from the
    end: 38 is before the oldest checkpoint, so its replay starts from the beginning."""
    c = backend_app()
    name = create(c)
    batches = long_stream(1, 40)
    for task, X, y in batches:
        post(c, name, task, X, y)
    bad = 41 - back
    r = c.delete(f"/models/{name}/batches/{bad}")
    assert r.status_code == 200, r.text
    assert r.json()["version"] == 41
    assert_same_model(c, name, engine_run([b for v, b in enumerate(batches, 1) if v != bad]))
    # later batches and a second take-back go on from the rebuilt model (and its checkpoint)
    more = long_stream(2, 7)
    for task, X, y in more:
        post(c, name, task, X, y)
    assert c.delete(f"/models/{name}/batches/39").status_code == 200
    kept = [b for v, b in enumerate(batches, 1) if v not in (bad, 39)] + more
    assert_same_model(c, name, engine_run(kept))


def test_the_replay_starts_from_the_newest_checkpoint_before_the_batch(backend_app, every, caplog):
    c = backend_app()
    name = create(c)
    for task, X, y in long_stream(3, 23):
        post(c, name, task, X, y)
    caplog.clear()
    assert c.delete(f"/models/{name}/batches/22").status_code == 200
    (line,) = [r for r in caplog.records if getattr(r, "event", None) == "take_back"]
    assert (line.checkpoint, line.n_replayed) == (20, 2)  # versions 21 and 23 on the checkpoint of 20
    assert c.delete(f"/models/{name}/batches/3").status_code == 200
    line = [r for r in caplog.records if getattr(r, "event", None) == "take_back"][-1]
    assert line.checkpoint == 0  # no checkpoint before 3: from the start


def test_writers_that_commit_while_the_replay_runs_are_in_the_result(backend_app, every, monkeypatch):
    """Two batches are posted while the take-back replays (from the replay's own thread: the
    lock must be free); both are in the result, once each, after the take-back's catch-up."""
    c = backend_app()
    name = create(c)
    batches = long_stream(4, 17)
    for task, X, y in batches:
        post(c, name, task, X, y)
    during = long_stream(5, 2)
    answers = []
    real = flows.take_back_prepare

    def prepare_while_writing(reader, snap, batch_version):
        prepared = real(reader, snap, batch_version)
        if not answers:
            for task, X, y in during:
                r = c.post(
                    f"/models/{name}/tasks/{task}/data", json={"X": X, "y": y}, headers={"Idempotency-Key": task}
                )
                answers.append(r)
        return prepared

    monkeypatch.setattr(flows, "take_back_prepare", prepare_while_writing)
    r = c.delete(f"/models/{name}/batches/9")
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]  # no 503
    assert [a.json()["version"] for a in answers] == [18, 19]
    assert r.status_code == 200, r.text
    assert (r.json()["version"], r.json()["n_replayed"]) == (20, 13)  # 6..19 but 9 on the checkpoint of 5
    assert_same_model(c, name, engine_run([b for v, b in enumerate(batches, 1) if v != 9] + during))
    # a retried writer is answered from its first commit, not learned twice
    task, X, y = during[0]
    again = c.post(f"/models/{name}/tasks/{task}/data", json={"X": X, "y": y}, headers={"Idempotency-Key": task})
    assert again.status_code == 200 and again.json()["version"] == 18
    assert c.get(f"/models/{name}").json()["version"] == 20


def test_a_restored_checkpoint_learns_on_as_if_never_stopped():
    """The engine's state through a state file, restored and learning on (refits deferred or
    not), equals the learner that never stopped, array for array, bit for bit."""
    rng = np.random.default_rng(6)
    stream = [(f"t{i % 4}", *map(np.asarray, regression_batch(rng, n=3, task=i % 4)), i % 3 == 1) for i in range(30)]
    whole = core.LEARNERS[ESTIMATOR](kind="regression", **PARAMS)
    for t, X, y, defer in stream:
        whole.learn(t, X, y, defer_refits=defer)
    for cut in (1, 7, 14, 29):
        part = core.LEARNERS[ESTIMATOR](kind="regression", **PARAMS)
        for t, X, y, defer in stream[:cut]:
            part.learn(t, X, y, defer_refits=defer)
        restored = core.load_state(state_files.read_npz(state_files.to_npz(part.get_state()))[0])
        for t, X, y, defer in stream[cut:]:
            restored.learn(t, X, y, defer_refits=defer)
        a, b = whole.get_state(), restored.get_state()
        assert a.meta == b.meta
        for k in a.arrays:
            np.testing.assert_array_equal(a.arrays[k], b.arrays[k], err_msg=f"cut {cut}: {k}")
        for t in a.tasks:
            for k in a.tasks[t]["arrays"]:
                np.testing.assert_array_equal(a.tasks[t]["arrays"][k], b.tasks[t]["arrays"][k])


def test_the_schedule_keeps_a_logarithmic_number_and_reaches_every_version():
    every, keep, n = 1000, 4, 100_000
    have: list[int] = []
    for v in range(every, n + 1, every):
        have = sorted(checkpoints.kept([*have, v], every, keep))
        assert len(have) <= keep * (math.log2(v / every) + 2)
    assert have[-1] == n and have[0] <= 2 * every * 2 ** int(math.log2(n / every / keep) + 1)
    for back in (1, 10, 100, 1_000, 10_000, 50_000):
        batch = n - back + 1
        start = max((c for c in have if c < batch), default=0)
        assert batch - start <= max(every, 2 * back / keep) + every, (back, start)


def test_a_checkpoint_holding_a_batch_taken_back_later_is_not_used():
    tbs = [{"version": 30, "batch_version": 12}]
    assert [checkpoints.usable(c, tbs) for c in (10, 12, 20, 30, 35)] == [True, False, False, True, True]
