"""Group commit: batches of one model that queue while an update runs are learned in order in
one pass and committed in one transaction, each with its own version, answer, prequential
score and Idempotency-Key answer, as if committed one by one; every batch of a group but its
last with the stream-level refits deferred, which its stored row records, so that every
version is the replay of its stored batches, bit for bit."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import core
from service.learning import group_commit, updates

from service.learning.queue import Queued, WriteQueue
from service.models.learners import make_learner
from service.store.reads import ModelReader
from service.store.results import result_json
from service.evaluation.scores import prequential, scores

from .conftest import regression_batch


def _arrays_equal(a: core.ModelState, b: core.ModelState) -> None:
    assert a.meta == b.meta and a.params == b.params
    assert set(a.arrays) == set(b.arrays) and set(a.tasks) == set(b.tasks)
    for k in a.arrays:
        np.testing.assert_array_equal(a.arrays[k], b.arrays[k], err_msg=k)
    for t in a.tasks:
        assert a.tasks[t]["meta"] == b.tasks[t]["meta"]
        for k in a.tasks[t]["arrays"]:
            np.testing.assert_array_equal(a.tasks[t]["arrays"][k], b.tasks[t]["arrays"][k], err_msg=f"{t}/{k}")


def _grouped(model, calls, n_wait=None):
    """Run ``calls`` (each returns an answer or raises) in threads while the test holds the
    model's update lock, so that they all queue; release once every one is queued. Returns
    (answers or exceptions in call order, sizes of the groups committed)."""
    sizes = []
    real = model.writer.commit_group

    def counting(group, parts):
        sizes.append(len(group))
        return real(group, parts)

    model.writer.commit_group = counting
    out = [None] * len(calls)

    def run(i):
        try:
            out[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - returned to the test
            out[i] = exc

    q = model.queue
    try:
        with model.locks.hold(model.name):
            threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 10
            while True:
                with q.cond:
                    if len(q.items) >= (n_wait or len(calls)):
                        break
                assert time.monotonic() < deadline, "the batches never queued"
                time.sleep(0.005)
        for t in threads:
            t.join(30)
    finally:
        model.writer.commit_group = real
    return out, sizes


def _group_metric(c) -> tuple[float, float]:
    """(groups, batches) of ``fcl3_update_group_batches`` on /metrics."""
    values = {}
    for line in c.get("/metrics").text.splitlines():
        if line.startswith(("fcl3_update_group_batches_count ", "fcl3_update_group_batches_sum ")):
            name, _, value = line.partition(" ")
            values[name] = float(value)
    return values.get("fcl3_update_group_batches_count", 0.0), values.get("fcl3_update_group_batches_sum", 0.0)


def _replay(model, settings, upto=None):
    """The stored batches (up to version ``upto``) learned one by one in version order by a
    fresh learner, each with its refits deferred as stored: the reference learner and each
    batch's prequential scores and result."""
    learner = make_learner(settings)
    per_version = {}
    for b in model.reader.batches():
        if upto is not None and b["version"] > upto:
            break
        pre = prequential(learner, b["task_id"], b["X"], b["y"])
        nxt = learner.copy()
        res = nxt.learn(b["task_id"], b["X"], b["y"], defer_refits=b["refits_deferred"])
        per_version[b["version"]] = (scores(pre), result_json(res))
        learner = nxt
    return learner, per_version


@pytest.mark.parametrize("n_tasks", [3, 12])
def test_a_group_equals_its_batches_learned_one_by_one_as_stored(backend_app, n_tasks):
    c = backend_app(LOCK_WAIT=20)
    model = c.app.state.model
    rng = np.random.default_rng(7)
    warm = [(f"t{i % 3}", *regression_batch(rng, task=i)) for i in range(3)]
    for task, X, y in warm:
        updates.learn(model, task, X, y)[0]
    batches = [(f"t{i % n_tasks}", *regression_batch(rng, n=1 + i % 3, task=i)) for i in range(12)]
    calls = [lambda b=b: updates.learn(model, *b)[0] for b in batches]
    answers, sizes = _grouped(model, calls)
    assert not [a for a in answers if isinstance(a, Exception)], answers
    assert max(sizes) > 1  # at least one real group
    versions = sorted(a["version"] for a in answers)
    assert versions == list(range(4, 16))  # one version per batch, none lost or doubled

    # every batch of a group but its last deferred the refits; a batch alone did not
    stored = model.reader.batches()
    expected = [False] * 3
    for size in sizes:
        expected += [True] * (size - 1) + [False]
    assert [b["refits_deferred"] for b in stored] == expected
    settings = c.app.state.settings.model_settings()
    reference, per_version = _replay(model, settings)
    # each answer is the one the batch gets learned alone as stored: same result, same
    # prequential scores (against the version before it)
    for a in answers:
        pre, res = per_version[a["version"]]
        assert {k: a[k] for k in res} == res
        assert a["prequential"] == pre
    # the served model and the stored one (read afresh) equal the replay, bit for bit
    _arrays_equal(model.reader.snapshot().learner.get_state(), reference.get_state())
    fresh = ModelReader(model.reader.engine, model.name).snapshot()
    assert fresh.version == 15
    _arrays_equal(fresh.learner.get_state(), reference.get_state())
    # the stored counters: every batch counted once
    m = c.get("/model").json()
    assert m["version"] == 15 and m["n_batches"] == 15
    tasks = {t["task_id"]: t for t in c.get("/tasks", params={"limit": 1000}).json()["tasks"]}
    for tid, rec in reference.tasks_.items():
        assert tasks[tid]["n_samples"] == rec.n_samples
    counts = {}
    for task, _, _ in warm + batches:
        counts[task] = counts.get(task, 0) + 1
    for tid, n in counts.items():
        assert c.get(f"/tasks/{tid}").json()["n_batches"] == n
    # the evaluation: one prequential entry per version, each the batch's own scores
    assert len(c.get("/evaluation").json()["prequential"]) == 15
    # a fork at a version inside a group is the replay up to it (its last batch's refits
    # still deferred), bit for bit
    mid = next(v for v, b in zip(range(1, 16), stored) if b["refits_deferred"])
    r = c.post("/models", json={"name": f"{model.name}-fork", "fork": {"model": model.name, "version": mid}})
    assert r.status_code == 201, r.text
    forked = ModelReader(model.reader.engine, f"{model.name}-fork").snapshot()
    assert forked.version == mid
    _arrays_equal(forked.learner.get_state(), _replay(model, settings, upto=mid)[0].get_state())
    fork_batches = ModelReader(model.reader.engine, f"{model.name}-fork").batches()
    assert [b["refits_deferred"] for b in fork_batches] == expected[:mid]
    # a take-back of a deferred batch rebuilds the model from the others, each as stored
    r = c.delete(f"/batches/{mid}")
    assert r.status_code == 200, r.text
    rebuilt = make_learner(settings)
    for b in stored:
        if b["version"] != mid:
            rebuilt.learn(b["task_id"], b["X"], b["y"], defer_refits=b["refits_deferred"])
    _arrays_equal(ModelReader(model.reader.engine, model.name).snapshot().learner.get_state(), rebuilt.get_state())
    # without the deferral the same batches give another learned state (the refits' schedules,
    # the evidence measured, the stream's prequential sums): the flag is what the replay needs
    plain = make_learner(settings)
    for b in stored:
        plain.learn(b["task_id"], b["X"], b["y"])
    with pytest.raises(AssertionError):
        _arrays_equal(plain.get_state(), reference.get_state())


def _with_late_batches(model, first, late):
    """Learn the batches ``first`` queued together (:func:`_grouped`) while the batches ``late``
    arrive during the first one's learning (each from a thread of its own, all queued before it
    is learned). Returns (answers to ``first``, answers to ``late``, the size of every group
    committed meanwhile, in order)."""
    q = model.queue
    late_answers = []
    threads = [threading.Thread(target=lambda b=b: late_answers.append(updates.learn(model, *b)[0]))
               for b in late]
    real_prepare, real_commit = group_commit.prepare, model.writer.commit_group
    sizes = []

    def prepare(*args, **kwargs):
        if not threads[0].is_alive() and not late_answers:  # the group's first batch: the late ones queue
            for t in threads:
                t.start()
            deadline = time.monotonic() + 10
            while True:
                with q.cond:
                    if len(q.items) >= len(late):
                        break
                assert time.monotonic() < deadline, "the late batches never queued"
                time.sleep(0.005)
        return real_prepare(*args, **kwargs)

    def commit_group(group, parts):
        sizes.append(len(group))
        return real_commit(group, parts)

    group_commit.prepare, model.writer.commit_group = prepare, commit_group
    try:
        answers, _ = _grouped(model, [lambda b=b: updates.learn(model, *b)[0] for b in first])
        for t in threads:
            t.join(30)
    finally:
        group_commit.prepare, model.writer.commit_group = real_prepare, real_commit
    assert not [a for a in answers if isinstance(a, Exception)], answers
    return answers, late_answers, sizes


def test_a_batch_that_queues_while_its_group_is_learned_joins_it(backend_app):
    """Two batches queued, a third arrives while the first is learned: it joins the group
    before its last batch is learned, so the group commits three, the first two with the
    refits deferred and the one learned last without, as the replay of the stored batches."""
    c = backend_app(LOCK_WAIT=20)
    model = c.app.state.model
    rng = np.random.default_rng(11)
    updates.learn(model, "t0", *regression_batch(rng))[0]
    batches = [(f"t{i % 2}", *regression_batch(rng, task=i)) for i in range(3)]
    before = _group_metric(c)
    answers, late_answer, sizes = _with_late_batches(model, batches[:2], batches[2:])
    assert sizes == [3]
    after = _group_metric(c)  # /metrics: one more group, of three batches
    assert (after[0] - before[0], after[1] - before[1]) == (1, 3)
    assert [a["version"] for a in answers] + [late_answer[0]["version"]] == [2, 3, 4]
    assert [b["refits_deferred"] for b in model.reader.batches()] == [False, True, True, False]
    reference, per_version = _replay(model, c.app.state.settings.model_settings())
    for a in answers + late_answer:
        pre, res = per_version[a["version"]]
        assert {k: a[k] for k in res} == res and a["prequential"] == pre
    _arrays_equal(ModelReader(model.reader.engine, model.name).snapshot().learner.get_state(), reference.get_state())


def test_batches_join_a_group_up_to_max_group(backend_app, monkeypatch):
    """With ``MAX_GROUP`` = 3, two batches queued and three more arriving while the first is
    learned: the group takes one of them (three in all), the other two wait for the next group;
    every batch committed once, in consecutive versions."""
    monkeypatch.setattr(group_commit, "MAX_GROUP", 3)
    c = backend_app(LOCK_WAIT=20)
    model = c.app.state.model
    rng = np.random.default_rng(12)
    updates.learn(model, "t0", *regression_batch(rng))[0]
    batches = [(f"t{i % 2}", *regression_batch(rng, task=i)) for i in range(5)]
    answers, late_answers, sizes = _with_late_batches(model, batches[:2], batches[2:])
    assert sizes[0] == 3 and sum(sizes) == 5 and max(sizes) <= 3
    assert sorted(a["version"] for a in answers + late_answers) == [2, 3, 4, 5, 6]
    reference, _ = _replay(model, c.app.state.settings.model_settings())
    _arrays_equal(ModelReader(model.reader.engine, model.name).snapshot().learner.get_state(), reference.get_state())


def test_bad_input_fails_only_its_batch(backend_app):
    c = backend_app(LOCK_WAIT=20)
    model = c.app.state.model
    rng = np.random.default_rng(8)
    updates.learn(model, "t0", *regression_batch(rng))[0]
    good = [("t0", *regression_batch(rng)), ("t1", *regression_batch(rng, task=1)), ("t0", *regression_batch(rng))]
    X, y = regression_batch(rng, d=5)  # another width
    calls = [lambda b=good[0]: updates.learn(model, *b)[0],
             lambda: updates.learn(model, "t1", X, y)[0],
             lambda b=good[1]: updates.learn(model, *b)[0],
             lambda: updates.learn(model, "t2", [[1.0, float("nan"), 0, 0]], [1.0])[0],
             lambda b=good[2]: updates.learn(model, *b)[0]]
    answers, sizes = _grouped(model, calls)
    bad = [a for a in answers if isinstance(a, Exception)]
    assert len(bad) == 2 and all(isinstance(e, core.InputError) for e in bad)
    assert sorted(a["version"] for a in answers if not isinstance(a, Exception)) == [2, 3, 4]
    assert sizes == [3]
    stored = model.reader.batches()
    assert [b["version"] for b in stored] == [1, 2, 3, 4]
    assert "t2" not in {b["task_id"] for b in stored}
    reference, _ = _replay(model, c.app.state.settings.model_settings())
    _arrays_equal(ModelReader(model.reader.engine, model.name).snapshot().learner.get_state(), reference.get_state())
    # over HTTP the bad batch answers 422 and changes nothing
    r = c.post("/tasks/t1/data", json={"X": X, "y": y})
    assert r.status_code == 422 and c.get("/model").json()["version"] == 4


def test_idempotency_keys_in_a_group_are_answered_once_and_replayed(backend_app):
    c = backend_app(LOCK_WAIT=20)
    model = c.app.state.model
    rng = np.random.default_rng(9)
    batches = [(f"t{i % 2}", *regression_batch(rng, task=i)) for i in range(6)]
    calls = [lambda i=i, b=b: updates.learn(model, *b, key=f"k-{i}") for i, b in enumerate(batches)]
    answers, sizes = _grouped(model, calls)
    assert not [a for a in answers if isinstance(a, Exception)], answers
    assert max(sizes) > 1
    assert sorted(a[0]["version"] for a in answers) == [1, 2, 3, 4, 5, 6]
    assert not any(replayed for _, replayed in answers)
    for i, (task, X, y) in enumerate(batches):  # the same request again: the first answer, nothing applied
        r = c.post(f"/tasks/{task}/data", json={"X": X, "y": y}, headers={"Idempotency-Key": f"k-{i}"})
        assert r.status_code == 200 and r.headers.get("Idempotent-Replayed") == "true"
        assert r.json() == answers[i][0]
    assert c.get("/model").json()["version"] == 6


def test_a_key_taken_over_in_a_group_commits_the_others_alone(backend_app):
    """A claim taken over while its group is learned rolls the group's transaction back; the
    other batches are committed one by one and that batch is not applied by its request."""
    c = backend_app(LOCK_WAIT=20)
    model = c.app.state.model
    rng = np.random.default_rng(10)
    batches = [(f"t{i % 2}", *regression_batch(rng, task=i)) for i in range(4)]
    real_prepare = group_commit.prepare
    stolen = []

    def prepare(snap, task_id, X, y, served=None, defer_refits=False):
        out = real_prepare(snap, task_id, X, y, served, defer_refits)
        if X == batches[1][1] and not stolen:  # another request takes key k-1 over meanwhile
            from sqlalchemy import text
            with model.reader.engine.begin() as conn:
                conn.execute(text("UPDATE idempotency_keys SET owner = 'someone.else' WHERE model_name = :m AND "
                                  "key = 'k-1'"), {"m": model.name})
            stolen.append(1)
        return out

    group_commit.prepare = prepare
    try:
        calls = [lambda i=i, b=b: updates.learn(model, *b, key=f"k-{i}") for i, b in enumerate(batches)]
        answers, sizes = _grouped(model, calls)
    finally:
        group_commit.prepare = real_prepare
    assert stolen and max(sizes) > 1
    from service.writing.idempotency import KeyInFlight
    assert isinstance(answers[1], KeyInFlight)
    ok = [a for i, a in enumerate(answers) if i != 1]
    assert sorted(a[0]["version"] for a in ok) == [1, 2, 3]
    assert sorted(b["task_id"] for b in model.reader.batches()) == sorted(batches[i][0] for i in (0, 2, 3))


def test_concurrent_http_clients_lose_and_double_nothing(backend_app):
    """8 clients, one-row batches to one model over HTTP: every acknowledged batch stored once
    at its answered version, and the model equals them learned one by one."""
    c = backend_app(LOCK_WAIT=20)
    rng = np.random.default_rng(11)
    per_client = [[(f"t{(i + j) % 4}", *regression_batch(rng, n=1, task=i + j)) for j in range(8)] for i in range(8)]
    acks, errors = [], []

    def client(batches):
        for task, X, y in batches:
            r = c.post(f"/tasks/{task}/data", json={"X": X, "y": y})
            (acks if r.status_code == 200 else errors).append((task, X, y, r))

    threads = [threading.Thread(target=client, args=(b,)) for b in per_client]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, [r.text for *_, r in errors]
    model = c.app.state.model
    stored = {b["version"]: b for b in model.reader.batches()}
    assert sorted(stored) == list(range(1, 65))
    for task, X, y, r in acks:
        b = stored[r.json()["version"]]
        assert b["task_id"] == task and np.array_equal(b["X"], np.asarray(X)) and np.array_equal(b["y"], np.asarray(y))
    reference, per_version = _replay(model, c.app.state.settings.model_settings())
    for *_, r in acks:
        assert r.json()["prequential"] == per_version[r.json()["version"]][0]
    _arrays_equal(ModelReader(model.reader.engine, model.name).snapshot().learner.get_state(), reference.get_state())


def test_a_group_whose_model_moved_is_refused_whole_and_applies_nothing(backend_app):
    """Fencing: another writer commits while a group is learned (the group's lock expired):
    the group's compare-and-set fails, every batch of it is refused (409), nothing applied."""
    from service.db import make_engine
    from service.writing.locks import make_locks
    from service.hosting import HostedModel
    from service.store.writes import StaleWrite

    c = backend_app(LOCK_WAIT=20)
    model = c.app.state.model
    settings = c.app.state.settings
    rng = np.random.default_rng(12)
    updates.learn(model, "t0", *regression_batch(rng))[0]
    other = HostedModel.open(make_engine(settings), make_locks(settings), settings.MODEL_NAME,
                             settings.model_settings())
    real_prepare = group_commit.prepare
    moved = []

    def prepare(snap, task_id, X, y, served=None, defer_refits=False):
        out = real_prepare(snap, task_id, X, y, served, defer_refits)
        if not moved:  # another writer commits version 2 meanwhile, without the lock
            snap_b = other.reader.snapshot(check=True)
            other.writer.commit(real_prepare(snap_b, "t9", *regression_batch(rng, task=9)), [other.evaluation])
            moved.append(1)
        return out

    group_commit.prepare = prepare
    try:
        batches = [(f"t{i % 2}", *regression_batch(rng, task=i)) for i in range(4)]
        answers, sizes = _grouped(model, [lambda b=b: updates.learn(model, *b)[0] for b in batches])
    finally:
        group_commit.prepare = real_prepare
        other.reader.engine.dispose()
    assert sizes == [4]
    assert all(isinstance(a, StaleWrite) for a in answers), answers
    assert [(b["version"], b["task_id"]) for b in model.reader.batches()] == [(1, "t0"), (2, "t9")]
    assert c.get("/model").json()["version"] == 2


@pytest.mark.parametrize("shape", ["mixed", "new_then_known"])
def test_a_group_led_by_a_new_task_with_evaluation_sets_writes_what_one_by_one_writes(backend_app, shape):
    """The group's evaluation is written once (``ModelEvaluation.in_commits``): a group whose
    first batch is a new task (not scored) and whose later ones are known tasks, new tasks (two
    accuracy-matrix rows due) and a task new at the group's start, with evaluation sets, stores
    the same log, task figures and matrix rows as the same batches posted one by one (the
    group's deferred refits turned off here, so that the learners are equal: what the deferral
    does is the first test's)."""
    rng = np.random.default_rng(11)
    warm = [(f"t{i}", *regression_batch(rng, task=i)) for i in (0, 1, 0)]  # t0 with stored prequential sums
    rows = {t: regression_batch(rng, n=6, task=i) for i, t in enumerate(["t0", "t1", "n0"])}
    group = [("n0", *regression_batch(rng, task=5)), ("t0", *regression_batch(rng, n=2)),
             ("t1", *regression_batch(rng, n=3, task=1)), ("n1", *regression_batch(rng, task=6)),
             ("n0", *regression_batch(rng, n=2, task=5)), ("t0", *regression_batch(rng))]
    if shape == "new_then_known":  # one scored task, not the group's first
        group = group[:2]
    apps = []
    for grouped in (True, False):
        c = backend_app(LOCK_WAIT=20)
        model = c.app.state.model
        for task, X, y in warm:
            assert c.post(f"/tasks/{task}/data", json={"X": X, "y": y}).status_code == 200
        for task, (X, y) in rows.items():
            assert c.post(f"/tasks/{task}/evaluation", json={"X": X, "y": y}).status_code == 200
        if grouped:
            real_prepare = group_commit.prepare
            group_commit.prepare = lambda *a, defer_refits=False: real_prepare(*a)
            try:
                answers, sizes = _grouped(model, [lambda b=b: updates.learn(model, *b)[0] for b in group])
            finally:
                group_commit.prepare = real_prepare
            assert sizes == [len(group)] and not [a for a in answers if isinstance(a, Exception)], answers
        else:
            answers = [updates.learn(model, *b)[0] for b in group]
        assert sorted(a["version"] for a in answers) == list(range(len(warm) + 1, len(warm) + 1 + len(group)))
        model.evaluation.matrix.wait_idle()
        apps.append(c)
    g, s = (a.get("/evaluation").json() for a in apps)
    assert g["prequential"] == s["prequential"] and g["tasks"] == s["tasks"]
    assert g["accuracy_matrix"] == s["accuracy_matrix"] and len(g["accuracy_matrix"]["rows"]) >= 1
    for task in {t for t, _, _ in warm + group}:
        a, b = (c.get(f"/tasks/{task}").json() for c in apps)
        assert {k: v for k, v in a.items() if not k.endswith("_at")} == {k: v for k, v in b.items() if not k.endswith("_at")}


def test_a_label_request_never_joins_a_group_under_way():
    """``WriteQueue.take``: a label request leads a group of its own, and batches queued behind
    it wait for the next group; a group under way takes the batches before it, never it."""
    q = WriteQueue()
    plain, after = Queued("t", [[1.0]], [1.0]), Queued("t", [[2.0]], [2.0])
    labels = Queued("t", None, None, labels=object())
    q.items = [plain, labels, after]
    with q.cond:
        assert q.take(64, joining=True) == [plain]
        assert q.take(64, joining=True) == []  # the label request heads the queue: nothing joins
        assert q.take(64) == [labels]  # the next group: the label request alone
        assert q.take(64) == [after]
    assert plain.taken and labels.taken and after.taken and not q.items


def test_a_group_writes_its_task_rows_in_one_statement_and_a_missing_row_refuses_it(backend_app):
    """A group over three known tasks updates the three task rows in one statement (and writes
    their prequential sums in one); when one of those rows is gone from the database (deleted behind
    the service's back) the whole group is refused (409), nothing of it applied."""
    from sqlalchemy import delete, event

    from service.store.tables import TaskRow
    from service.store.writes import StaleWrite

    c = backend_app(LOCK_WAIT=20)
    model = c.app.state.model
    rng = np.random.default_rng(21)
    for i in range(3):
        updates.learn(model, f"t{i}", *regression_batch(rng, task=i))[0]
    statements = []

    def seen(conn, cursor, statement, parameters, context, executemany):
        words = statement.split()
        table = {"UPDATE": words[1], "INSERT": words[2]}.get(words[0].upper())
        if table is not None:
            statements.append((words[0].upper(), table, len(parameters) if executemany else 1))

    event.listen(model.reader.bulk, "before_cursor_execute", seen)
    try:
        for sums in ("INSERT", "UPDATE"):  # the tasks' first scored batches insert their prequential sums
            statements.clear()
            batches = [(f"t{i % 3}", *regression_batch(rng, task=i)) for i in range(6)]
            answers, sizes = _grouped(model, [lambda b=b: updates.learn(model, *b)[0] for b in batches])
            assert sizes == [6] and not any(isinstance(a, Exception) for a in answers), answers
            assert [(k, n) for k, table, n in statements if table == "tasks"] == [("UPDATE", 3)], statements
            assert [(k, n) for k, table, n in statements if table == "prequential_tasks"] == [(sums, 3)], statements
    finally:
        event.remove(model.reader.bulk, "before_cursor_execute", seen)

    version = c.get("/model").json()["version"]
    with model.reader.bulk.begin() as conn:
        conn.execute(delete(TaskRow.__table__).where(TaskRow.__table__.c.task_id == "t1"))
    batches = [(f"t{i % 3}", *regression_batch(rng, task=i)) for i in range(3)]
    answers, sizes = _grouped(model, [lambda b=b: updates.learn(model, *b)[0] for b in batches])
    assert sizes == [3]
    assert all(isinstance(a, StaleWrite) for a in answers), answers
    assert c.get("/model").json()["version"] == version
    assert max(b["version"] for b in model.reader.batches()) == version
