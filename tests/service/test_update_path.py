"""The cost of an update outside the engine: the statements of a commit, and the evaluation sets
rescored just after the commit, off the update lock (stored before the answer, never over a
later version's score)."""
from __future__ import annotations

import threading

import pytest
from sqlalchemy import event

from .conftest import count_pool_trips
from .test_evaluation import new_model, settle, stream


# ----------------------------------------------------------------------------- the commit
def test_statements_of_an_update(backend_client):
    """A known task's update on a model with evaluation: on PostgreSQL the version read (on
    SQLite, the exact version watch vouches for the version this process committed last), then
    one transaction (model row, task row, the row of the task whose evidence the update measured
    again, batch, evaluation state locked and read with the task's prequential sums, state
    written, task sums, log row, and on PostgreSQL the notification)."""
    c = backend_client
    name = new_model(c)
    batches, _ = stream(3, n_tasks=2, n_batches=3)
    for task, X, y in batches[:4]:
        c.post(f"/models/{name}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()}).raise_for_status()
    model = c.app.state.models.get(name)
    statements = []

    def seen(conn, cursor, statement, parameters, context, executemany):
        statements.append(statement.split()[0].upper())

    engines = {model.reader.engine, model.reader.bulk}
    for e in engines:
        event.listen(e, "before_cursor_execute", seen)
    try:
        task, X, y = batches[4]
        c.post(f"/models/{name}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()}).raise_for_status()
    finally:
        for e in engines:
            event.remove(e, "before_cursor_execute", seen)
    postgres = model.reader.engine.dialect.name == "postgresql"
    # (SELECT version); UPDATE models, UPDATE tasks (the task's), UPDATE tasks (the one measured
    # again), INSERT batches, UPDATE state RETURNING, UPDATE state, UPDATE prequential_tasks,
    # INSERT evaluation_log (+ SELECT pg_notify)
    assert statements.count("UPDATE") == 6 and statements.count("INSERT") == 2, statements
    assert statements.count("SELECT") == 2 * postgres, statements
    assert len(statements) == 8 + 2 * postgres, statements


def test_an_update_takes_one_trip_to_the_thread_pool(backend_client, monkeypatch):
    """POST .../data learns in the thread pool and its answer is validated on the event loop:
    one trip to the pool per update (a plain ``def`` endpoint takes a second one, for
    FastAPI's validation of its answer)."""
    c = backend_client
    name = new_model(c)
    batches, _ = stream(3, n_tasks=2, n_batches=3)
    for task, X, y in batches[:2]:
        c.post(f"/models/{name}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()}).raise_for_status()
    trips = count_pool_trips(monkeypatch)
    task, X, y = batches[2]
    r = c.post(f"/models/{name}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()})
    assert r.status_code == 200 and r.json()["version"] == 3, r.text
    assert len(trips) == 1, trips


# ----------------------------------------------------------------------------- rescoring after the commit
def evaluated_model(c, rescore_all=True):
    """A model whose 4 tasks hold evaluation rows, each learned once and scored at version 4."""
    name = new_model(c)
    batches, held = stream(9, n_tasks=4, n_batches=3)
    for t, (Xh, yh) in held.items():
        c.post(f"/models/{name}/tasks/{t}/evaluation", json={"X": Xh.tolist(), "y": yh.tolist()}).raise_for_status()
    for task, X, y in batches[:4]:
        c.post(f"/models/{name}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()}).raise_for_status()
    settle(c, name)
    return name, batches, c.app.state.models.get(name)


def post(c, name, batch):
    task, X, y = batch
    r = c.post(f"/models/{name}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()})
    assert r.status_code == 200, r.text
    return r.json()


def scored(c, name):
    return {t["task_id"]: t["scored_version"] for t in c.get(f"/models/{name}/evaluation").json()["tasks"]}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_other_sets_are_rescored_with_the_lock_released_before_the_answer(make_client, backend, request):
    c = make_client(backend, EVALUATION_RESCORE=2, _request=request)
    name, batches, model = evaluated_model(c)
    ev, calls = model.evaluation, []
    real = ev.rescore_sets

    def rescore_sets(job):
        with model.locks.hold(model.name, wait=0):  # LockBusy if the update still held it
            calls.append((job.version, sorted(job.sets)))
        return real(job)

    ev.rescore_sets = rescore_sets
    out = post(c, name, batches[6])  # t2 at version 5: its own set and two others, after the commit
    assert calls == [(5, ["t0", "t1", "t2"])]
    assert scored(c, name) == {"t0": 5, "t1": 5, "t2": 5, "t3": 4} and out["version"] == 5
    state = c.get(f"/models/{name}/evaluation").json()
    assert state["version"] == 5


def test_sets_being_rescored_are_not_chosen_again(make_client, monkeypatch):
    """An update that commits while another one's rescoring runs (the lock is free then)
    rescores other sets."""
    import service.evaluation.model_evaluation as evaluation

    c = make_client(EVALUATION_RESCORE=1)
    name, batches, model = evaluated_model(c)
    ev, real = model.evaluation, evaluation.score_rows
    blocked, release, jobs, inside = threading.Event(), threading.Event(), [], threading.local()

    def score_rows(learner, task_id, X, y):
        if getattr(inside, "rescoring", False) and not blocked.is_set():  # the first rescoring waits
            blocked.set()
            assert release.wait(20)
        return real(learner, task_id, X, y)

    def rescore_sets(job, real_rescore=ev.rescore_sets):
        jobs.append((job.version, sorted(job.sets)))
        inside.rescoring = True
        try:
            return real_rescore(job)
        finally:
            inside.rescoring = False

    monkeypatch.setattr(evaluation, "score_rows", score_rows)
    ev.rescore_sets = rescore_sets
    first = threading.Thread(target=post, args=(c, name, batches[6]))  # t2 at version 5, with t0
    first.start()
    try:
        assert blocked.wait(20)
        assert ev._pending == {"t0": 5, "t2": 5}
        post(c, name, batches[7])  # t3 at version 6: t0 is being rescored, so t1
    finally:
        release.set()
        first.join(30)
    assert jobs == [(5, ["t0", "t2"]), (6, ["t1", "t3"])]
    assert scored(c, name) == {"t0": 5, "t1": 6, "t2": 5, "t3": 6}
    assert ev._pending == {}


def test_a_late_rescoring_never_replaces_a_newer_score(backend_client):
    c = backend_client
    name, batches, model = evaluated_model(c)
    ev = model.evaluation
    jobs = []
    ev.rescore_sets = jobs.append
    post(c, name, batches[6])  # version 5: every other set pending, nothing stored
    del ev.rescore_sets
    post(c, name, batches[6])  # version 6: scored them all
    before = c.get(f"/models/{name}/evaluation").json()["tasks"]
    assert {t["task_id"]: t["scored_version"] for t in before} == {"t0": 6, "t1": 6, "t2": 6, "t3": 6}
    assert ev.rescore_sets(jobs[0]) == 0
    assert c.get(f"/models/{name}/evaluation").json()["tasks"] == before
    assert ev._pending == {}


def test_a_failed_rescoring_does_not_fail_the_update(make_client, capsys, monkeypatch):
    c = make_client(EVALUATION_RESCORE=3)
    name, batches, model = evaluated_model(c)

    class Gone:
        def begin(self):
            raise RuntimeError("database gone")

    monkeypatch.setattr(model.evaluation, "bulk", Gone())  # the rescoring's own transaction fails
    out = post(c, name, batches[6])
    assert out["version"] == 5 and c.get(f"/models/{name}").json()["version"] == 5
    assert scored(c, name) == {"t0": 4, "t1": 4, "t2": 4, "t3": 4}
    assert "not rescored at version 5: RuntimeError" in capsys.readouterr().err
    assert model.evaluation._pending == {}
