"""Taking a batch back (issue 23, part 2): DELETE .../batches/{version} on SQLite and on
PostgreSQL + Redis; the model after it against an engine run in this process on the stream
without that batch; refusals that change nothing; SIGKILL around the commit."""
from __future__ import annotations

import json
import threading
import time

import httpx
import numpy as np
import pytest
from sqlalchemy import create_engine, select

import core
from service.store.tables import BatchRow, EvaluationLogRow, IdempotencyKeyRow, ModelRow, TakeBackRow

from .conftest import ESTIMATOR, PARAMS, regression_batch, unique_name

#: Predictions after taking the poisoned batch back vs before it: the model is rebuilt by exact
#: replay of the same batches in the same order, so they agree bit for bit; allowed: 1e-9.
TOLERANCE = 1e-9


def create(c, name=None):
    name = name or unique_name("tb")
    r = c.post("/models", json={"name": name, "kind": "regression", "estimator": ESTIMATOR, "params": PARAMS})
    assert r.status_code == 201, r.text
    return name


def post(c, name, task, X, y, key=None):
    headers = {"Idempotency-Key": key} if key else {}
    r = c.post(f"/models/{name}/tasks/{task}/data", json={"X": X, "y": y}, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()["version"]


def predict(c, name, task, X):
    r = c.post(f"/models/{name}/predict", json={"task_id": task, "X": X})
    assert r.status_code == 200, r.text
    return np.asarray(r.json()["predictions"])


def stream(seed: int, n_tasks: int = 4, rounds: int = 2):
    """``(task, X, y)`` batches of ``n_tasks`` related regression tasks, ``rounds`` each."""
    rng = np.random.default_rng(seed)
    return [(f"t{t}", *regression_batch(rng, n=12, task=t)) for _ in range(rounds) for t in range(n_tasks)]


def poisoned(seed: int):
    """One row of task t0 whose second feature is 1e6 (the bad batch of the issue)."""
    rng = np.random.default_rng(seed)
    X, y = regression_batch(rng, n=1, task=0)
    X[0][1] = 1e6
    return X, y


def query_rows(seed: int = 99, n: int = 10):
    return regression_batch(np.random.default_rng(seed), n=n)[0]


def engine_run(batches) -> core.LifelongLearner:
    """An independent run of the engine on ``batches``, with the settings the models have."""
    learner = core.LEARNERS[ESTIMATOR](kind="regression", **PARAMS)
    for task, X, y in batches:
        learner.learn(task, np.asarray(X, dtype=float), np.asarray(y, dtype=float))
    return learner


def model(c, name):
    r = c.get(f"/models/{name}")
    assert r.status_code == 200, r.text
    return r.json()


# ----------------------------------------------------------------------------- the poisoned task
def test_the_poisoned_task_predicts_as_before_the_bad_batch_once_it_is_taken_back(backend_app):
    c = backend_app()
    name = create(c)
    for task, X, y in stream(1, rounds=1):  # 48 rows: the bad row arrives during the scaling's warm-up
        post(c, name, task, X, y)
    Xq = query_rows()
    before = predict(c, name, "t0", Xq)
    figures = model(c, name)["prequential"], c.get(f"/models/{name}/tasks/t0").json()["prequential"]
    bad = post(c, name, "t0", *poisoned(2))
    assert model(c, name)["prequential"]["overall"]["rmse"] > 1e3  # the bad row's own score (the only one)
    poisoned_preds = predict(c, name, "t0", Xq)
    # the bad row moves the task's predictions far from what they were (by 0.86 against a spread
    # of 2.66 with the stream's family, the mixed model, here), which the take-back undoes
    assert np.max(np.abs(poisoned_preds - before)) > 0.25 * np.ptp(before)
    r = c.delete(f"/models/{name}/batches/{bad}", headers={"Idempotency-Key": "take-back-1"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out == {"version": bad + 1, "batch_version": bad, "task_id": "t0", "n_samples": 1, "task_removed": False,
                   "task_n_samples": 12, "n_replayed": bad - 1, "n_representatives": out["n_representatives"]}
    # the bad batch's own prequential score no longer counts: the figures are those before it (none)
    assert (model(c, name)["prequential"], c.get(f"/models/{name}/tasks/t0").json()["prequential"]) == figures
    after = predict(c, name, "t0", Xq)
    diff = float(np.max(np.abs(after - before)))
    print(f"\n{backend_app.backend}: before {np.round(before[:4], 4)} poisoned {np.round(poisoned_preds[:4], 4)} "
          f"after {np.round(after[:4], 4)}; max |after - before| = {diff:.3g} (tolerance {TOLERANCE:g})")
    assert diff <= TOLERANCE
    m = model(c, name)
    assert m["version"] == bad + 1 and m["n_batches"] == bad - 1
    assert c.get(f"/models/{name}/tasks/t0").json()["n_samples"] == 12


def test_taking_a_batch_back_equals_the_engine_on_the_stream_without_it(backend_app):
    """Batches after the bad one (of its task and of others) are kept: the model equals, bit for
    bit, an engine run here on the stream without the bad batch, and differs from the run with it."""
    c = backend_app()
    name = create(c)
    first, later = stream(3, rounds=1), stream(4, rounds=2)
    bad_X, bad_y = poisoned(5)
    for task, X, y in first:
        post(c, name, task, X, y)
    bad = post(c, name, "t0", bad_X, bad_y)
    for task, X, y in later:
        post(c, name, task, X, y)
    Xq = query_rows()
    with_bad = engine_run(first + [("t0", bad_X, bad_y)] + later)
    for t in ("t0", "t1", "t2", "t3"):
        np.testing.assert_allclose(predict(c, name, t, Xq), with_bad.predict(t, np.asarray(Xq)), rtol=0, atol=1e-9)
    overall_with = model(c, name)["prequential"]["overall"]
    assert c.delete(f"/models/{name}/batches/{bad}").status_code == 200
    # the prequential figures: every stored batch score but the bad one's, added up here
    with c.app.state.engine.connect() as conn:
        logged = conn.execute(select(EvaluationLogRow.version, EvaluationLogRow.batch).where(
            EvaluationLogRow.model_name == name, EvaluationLogRow.batch.is_not(None))).all()
    assert bad not in {v for v, _ in logged} and len(logged) == len(first) + len(later) - 4  # first batches unscored
    n, se = sum(b["n"] for _, b in logged), sum(b["se"] for _, b in logged)
    overall = model(c, name)["prequential"]["overall"]
    assert overall["n"] == n == overall_with["n"] - 1 and overall["rmse"] == pytest.approx(np.sqrt(se / n), rel=1e-12)
    assert overall_with["rmse"] > 10 * overall["rmse"]
    without = engine_run(first + later)
    worst = 0.0
    for t in ("t0", "t1", "t2", "t3"):
        got, want = predict(c, name, t, Xq), without.predict(t, np.asarray(Xq))
        worst = max(worst, float(np.max(np.abs(got - want))))
        np.testing.assert_array_equal(got, want)
    assert float(np.max(np.abs(without.predict("t0", np.asarray(Xq)) - with_bad.predict("t0", np.asarray(Xq))))) > 0.1
    print(f"\n{backend_app.backend}: max |service - engine without the batch| = {worst:g}")
    # the take-back is a version with its own event
    events = c.get(f"/models/{name}/events", params={"max_seconds": 0.2}, headers={"Last-Event-ID": str(bad)})
    assert '"taken_back":{"batch_version":%d' % bad in events.text


def test_the_only_batch_of_a_task_takes_the_task_with_it_in_every_process(make_client, tmp_path):
    """A process that had the task cached (another app on the same database) stops serving it."""
    a = make_client(SQLITE_PATH=str(tmp_path / "shared.db"))
    b = make_client(SQLITE_PATH=str(tmp_path / "shared.db"))
    name = create(a)
    versions = {task: post(a, name, task, X, y) for task, X, y in stream(6, n_tasks=3, rounds=1)}
    Xq = query_rows()
    assert predict(b, name, "t2", Xq).shape == (10,)  # b caches the model with t2
    r = a.delete(f"/models/{name}/batches/{versions['t2']}")
    assert r.status_code == 200 and r.json()["task_removed"] and r.json()["task_n_samples"] == 0
    for c in (a, b):
        assert c.post(f"/models/{name}/predict", json={"task_id": "t2", "X": Xq}).status_code == 404
        assert c.get(f"/models/{name}/tasks/t2").status_code == 404
    want = engine_run(stream(6, n_tasks=2, rounds=1))
    for c in (a, b):
        np.testing.assert_array_equal(predict(c, name, "t1", Xq), want.predict("t1", np.asarray(Xq)))
    assert model(b, name)["n_tasks"] == 2
    # b caches; a takes t1 back (t1 gone) and learns a new task: b's cache has as many tasks as the model
    X, y = regression_batch(np.random.default_rng(16), task=2)
    assert a.delete(f"/models/{name}/batches/{versions['t1']}").json()["task_removed"]
    post(a, name, "t9", X, y)
    want = engine_run([b_ for b_ in stream(6, n_tasks=1, rounds=1)] + [("t9", X, y)])
    for c in (b, a):
        assert c.post(f"/models/{name}/predict", json={"task_id": "t1", "X": Xq}).status_code == 404
        np.testing.assert_array_equal(predict(c, name, "t9", Xq), want.predict("t9", np.asarray(Xq)))


# ----------------------------------------------------------------------------- once, and refusals
def test_a_retried_take_back_is_applied_once(backend_app):
    c = backend_app()
    name = create(c)
    for task, X, y in stream(7, rounds=1):
        post(c, name, task, X, y)
    first = c.delete(f"/models/{name}/batches/2", headers={"Idempotency-Key": "tb-k"})
    again = c.delete(f"/models/{name}/batches/2", headers={"Idempotency-Key": "tb-k"})
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    plain = c.delete(f"/models/{name}/batches/2")  # no key: told it is done, and by which version
    assert plain.status_code == 410 and plain.json()["taken_back_by"] == 5 and plain.headers["X-Model-Version"] == "5"
    other = c.delete(f"/models/{name}/batches/3", headers={"Idempotency-Key": "tb-k"})  # the key of another request
    assert other.status_code == 422
    assert model(c, name)["version"] == 5
    with c.app.state.engine.connect() as conn:
        rows = conn.execute(select(TakeBackRow.batch_version, TakeBackRow.version)
                            .where(TakeBackRow.model_name == name)).all()
        marked = conn.execute(select(BatchRow.version, BatchRow.taken_back).where(BatchRow.model_name == name)
                              .order_by(BatchRow.version)).all()
    assert [tuple(r) for r in rows] == [(2, 5)]
    assert [tuple(r) for r in marked] == [(1, None), (2, 5), (3, None), (4, None)]


def _unchanged(c, name, task, Xq, version, preds):
    assert model(c, name)["version"] == version
    np.testing.assert_array_equal(predict(c, name, task, Xq), preds)


def test_refusals_say_why_and_change_nothing(backend_app):
    c = backend_app()
    name = create(c)
    for task, X, y in stream(8, rounds=1):
        post(c, name, task, X, y)
    assert c.delete(f"/models/{name}/batches/1").status_code == 200  # version 5 takes batch 1 back
    Xq = query_rows()
    preds = predict(c, name, "t1", Xq)
    cases = [(6, 404, "has no batch 6"), (5, 404, "is not a batch: it took back batch 1"),
             (1, 410, "taken back already, by version 5")]
    for version, status, why in cases:
        r = c.delete(f"/models/{name}/batches/{version}")
        assert r.status_code == status and why in r.json()["detail"], r.text
        _unchanged(c, name, "t1", Xq, 5, preds)
    for bad in ("0", "-1", "x", str(2**31)):
        assert c.delete(f"/models/{name}/batches/{bad}").status_code == 422
    assert c.delete(f"/models/{unique_name('nope')}/batches/1").status_code == 404

    # a fork: its inherited batches are refused, its own are taken back
    fork = unique_name("fork")
    assert c.post("/models", json={"name": fork, "fork": {"model": name, "version": 5}}).status_code == 201
    np.testing.assert_array_equal(predict(c, fork, "t1", Xq), preds)  # a fork of a model with a take-back
    r = c.delete(f"/models/{fork}/batches/3")
    assert r.status_code == 409 and "forked from it at version 5" in r.json()["detail"], r.text
    assert r.json()["fork"] == {"model": name, "version": 5}
    _unchanged(c, fork, "t1", Xq, 5, preds)
    X, y = regression_batch(np.random.default_rng(9), task=1)
    own = post(c, fork, "t1", X, y)
    assert c.delete(f"/models/{fork}/batches/{own}").status_code == 200
    np.testing.assert_array_equal(predict(c, fork, "t1", Xq), preds)

    # an imported model keeps no batches from before its import: nothing to replay them from;
    # its import is a checkpoint, so a batch it learned since can be taken back
    exported = c.get(f"/models/{name}/state")
    imported = unique_name("imp")
    assert c.post(f"/models/{imported}/state", content=exported.content).status_code == 201
    post(c, imported, "t1", X, y)
    r = c.delete(f"/models/{imported}/batches/2")
    assert r.status_code == 409 and "imported from a file at version 5" in r.json()["detail"], r.text
    assert model(c, imported)["version"] == 6
    assert c.delete(f"/models/{imported}/batches/6").status_code == 200
    np.testing.assert_array_equal(predict(c, imported, "t1", Xq), preds)


def test_the_default_model_route(backend_app):
    c = backend_app()
    rng = np.random.default_rng(10)
    for t in range(2):
        X, y = regression_batch(rng, task=t)
        assert c.post(f"/tasks/t{t}/data", json={"X": X, "y": y}).status_code == 200
    r = c.delete("/batches/2")
    assert r.status_code == 200 and r.json()["version"] == 3 and r.json()["task_removed"]
    assert c.get("/model").json()["n_tasks"] == 1


def test_taking_back_the_only_batch_leaves_a_model_with_nothing_learned(backend_app):
    """The model is then what a new one is (unfitted), at a new version; it learns again."""
    c = backend_app()
    name = create(c)
    X, y = regression_batch(np.random.default_rng(17), task=0)
    post(c, name, "t0", X, y)
    r = c.delete(f"/models/{name}/batches/1")
    assert r.status_code == 200, r.text
    assert r.json() == {"version": 2, "batch_version": 1, "task_id": "t0", "n_samples": 12, "task_removed": True,
                        "task_n_samples": 0, "n_replayed": 0, "n_representatives": 0}
    m = model(c, name)
    assert (m["version"], m["n_tasks"], m["n_batches"], m["representatives"]) == (2, 0, 0, [])
    assert c.post(f"/models/{name}/predict", json={"task_id": "t0", "X": X}).status_code == 404
    assert post(c, name, "t0", X, y) == 3
    np.testing.assert_array_equal(predict(c, name, "t0", X), engine_run([("t0", X, y)]).predict("t0", np.asarray(X)))


# ----------------------------------------------------------------------------- SIGKILL
def _env(backend: str, request, tmp_path) -> dict:
    if backend == "postgres+redis":
        return {**request.getfixturevalue("server_env"), "LOCK_TTL": "60", "OPENBLAS_NUM_THREADS": "1"}
    return {"SQLITE_PATH": str(tmp_path / "fcl3.db"), "MODEL_NAME": unique_name("kill"), "FCL3_ESTIMATOR": ESTIMATOR,
            "FCL3_KIND": "regression", "FCL3_PARAMS": json.dumps(PARAMS), "DATABASE_URL": "", "REDIS_URL": "",
            "LOCK_TTL": "60", "OPENBLAS_NUM_THREADS": "1"}


def _reached(engine, name: str, when: str, bad: int) -> bool:
    """Whether the take-back sleeps now: before its commit (its key claimed, nothing stored) or
    after it (the model at the take-back's version)."""
    with engine.connect() as conn:
        if when == "before":
            return conn.execute(select(IdempotencyKeyRow.key).where(IdempotencyKeyRow.model_name == name,
                                                                    IdempotencyKeyRow.key == "kill-k")).first() is not None
        return conn.execute(select(ModelRow.version).where(ModelRow.name == name)).scalar() == bad + 1


def _send(url: str, path: str, key: str) -> None:
    try:
        httpx.delete(url + path, headers={"Idempotency-Key": key}, timeout=60)
    except httpx.HTTPError:
        pass  # its server dies before answering


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres+redis"])
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_take_back_survives_sigkill_around_its_commit(backend, when, request, tmp_path, spawn):
    """A server is killed with SIGKILL just before the take-back's commit (nothing stored) or
    just after it (stored, not answered). A restarted server answers the retry with the same
    key exactly once, and the poisoned task predicts as before the bad batch."""
    env = _env(backend, request, tmp_path)
    first = spawn(env, log_path=tmp_path / "first.log").start()
    with httpx.Client(base_url=first.url, timeout=30) as c:
        for task, X, y in stream(11, rounds=1):
            assert c.post(f"/tasks/{task}/data", json={"X": X, "y": y}).status_code == 200
        Xq = query_rows()
        before = np.asarray(c.post("/predict", json={"task_id": "t0", "X": Xq}).json()["predictions"])
        X, y = poisoned(12)
        bad = c.post("/tasks/t0/data", json={"X": X, "y": y}).json()["version"]
    first.stop()
    delay = {"before": {"FCL3_FAULT_COMMIT_DELAY": "60"}, "after": {"FCL3_FAULT_AFTER_COMMIT_DELAY": "60"}}[when]
    doomed = spawn({**env, **delay}, app="tests.service.fault_app:app", log_path=tmp_path / "doomed.log").start()
    threading.Thread(target=_send, args=(doomed.url, f"/batches/{bad}", "kill-k"), daemon=True).start()
    url = env.get("DATABASE_URL") or f"sqlite:///{env['SQLITE_PATH']}"
    engine = create_engine(url)
    try:
        deadline = time.monotonic() + 30
        while not _reached(engine, env["MODEL_NAME"], when, bad):
            assert time.monotonic() < deadline, f"the take-back never reached its sleep {when} the commit"
            time.sleep(0.05)
    finally:
        engine.dispose()
    time.sleep(0.3)
    doomed.kill9()

    server = spawn(env, log_path=tmp_path / "server.log").start()
    with httpx.Client(base_url=server.url, timeout=60) as c:
        assert c.get("/model").json()["version"] == (bad + 1 if when == "after" else bad)
        r = c.delete(f"/batches/{bad}", headers={"Idempotency-Key": "kill-k"})
        assert r.status_code == 200, r.text
        assert r.json()["version"] == bad + 1
        assert ("Idempotent-Replayed" in r.headers) == (when == "after")
        again = c.delete(f"/batches/{bad}", headers={"Idempotency-Key": "kill-k"})
        assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
        assert c.delete(f"/batches/{bad}").status_code == 410
        m = c.get("/model").json()
        assert m["version"] == bad + 1 and m["n_batches"] == bad - 1
        after = np.asarray(c.post("/predict", json={"task_id": "t0", "X": Xq}).json()["predictions"])
    diff = float(np.max(np.abs(after - before)))
    print(f"\n{backend}, SIGKILL {when} the commit: max |after - before the bad batch| = {diff:.3g}")
    assert diff <= TOLERANCE


# ----------------------------------------------------------------------------- GET .../labels
def test_labels_summary_counts_pending_predictions_and_labels_received(backend_app):
    """Per task: predictions remembered and not labelled yet, and the label batches learned (a
    label batch taken back no longer counts); counted here from what the test sent."""
    c = backend_app()
    name = create(c)
    for task, X, y in stream(13, n_tasks=2, rounds=1):
        post(c, name, task, X, y)
    empty = c.get(f"/models/{name}/labels").json()
    assert empty == {"model": name, "version": 2, "pending": 0, "label_batches": 0, "labelled_rows": 0, "tasks": []}
    Xq = query_rows(n=5)
    ids0 = c.post(f"/models/{name}/predict", json={"task_id": "t0", "X": Xq, "remember": True}).json()["prediction_ids"]
    ids1 = c.post(f"/models/{name}/predict", json={"task_id": "t1", "X": Xq[:3], "remember": True}).json()["prediction_ids"]
    r = c.post(f"/models/{name}/labels", json={"labels": [{"prediction_id": i, "y": 1.0} for i in ids0[:2]]})
    assert r.status_code == 200 and r.json()["version"] == 3
    r = c.post(f"/models/{name}/labels", json={"labels": [{"prediction_id": ids1[0], "y": 0.5}]})
    assert r.status_code == 200 and r.json()["version"] == 4
    got = c.get(f"/models/{name}/labels").json()
    assert got == {"model": name, "version": 4, "pending": 5, "label_batches": 2, "labelled_rows": 3, "tasks": [
        {"task_id": "t0", "pending": 3, "label_batches": 1, "labelled_rows": 2},
        {"task_id": "t1", "pending": 2, "label_batches": 1, "labelled_rows": 1}]}
    assert c.delete(f"/models/{name}/batches/3").status_code == 200
    after = c.get(f"/models/{name}/labels").json()
    assert after["label_batches"] == 1 and after["tasks"][0] == {"task_id": "t0", "pending": 3, "label_batches": 0,
                                                                 "labelled_rows": 0}
    points = {p["version"]: p for p in c.get(f"/models/{name}/evaluation").json()["prequential"]}
    assert points[3]["source"] == "labels" and points[2]["source"] is None
    assert points[5]["taken_back"] == {"batch_version": 3, "n_samples": 2, "task_removed": False}
    assert c.get(f"/models/{unique_name('nope')}/labels").status_code == 404


def test_openapi_documents_the_new_routes_with_examples(make_client):
    doc = make_client().get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    for path in ("/batches/{version}", "/models/{name}/batches/{version}"):
        op = doc["paths"][path]["delete"]
        assert op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/TakeBackOut")
        for status, field in (("404", "batch_version"), ("409", "fork"), ("410", "taken_back_by")):
            assert field in op["responses"][status]["content"]["application/json"]["example"], status
        params = {p["name"]: p for p in op["parameters"]}
        assert "Idempotency-Key" in params and params["version"]["schema"]["minimum"] == 1
        assert params["version"]["schema"]["examples"] == [7]
    assert schemas["TakeBackOut"]["examples"][0]["batch_version"] == 7
    for path in ("/labels", "/models/{name}/labels"):
        op = doc["paths"][path]["get"]
        assert op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/LabelsOut")
    assert schemas["LabelsOut"]["examples"][0]["tasks"][0]["pending"] == 5
    assert "taken_back" in schemas["PrequentialPoint"]["properties"]
    assert "taken_back" in doc["paths"]["/events"]["get"]["description"]
