"""Labels that arrive later (issue 23, part 1): POST .../predict with "remember": true, then
POST .../labels; on SQLite and on PostgreSQL + Redis."""
from __future__ import annotations

import time

import numpy as np
import pytest
from sqlalchemy import select

from service.store.tables import remembered_t

from .conftest import count_pool_trips, regression_batch, unique_name


def create(c, name, kind="regression"):
    s = c.app.state.settings
    r = c.post("/models", json={"name": name, "kind": kind, "estimator": s.FCL3_ESTIMATOR, "params": s.FCL3_PARAMS})
    assert r.status_code == 201, r.text
    return f"/models/{name}"


def remember(c, prefix, task, X):
    r = c.post(f"{prefix}/predict", json={"task_id": task, "X": X, "remember": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["prediction_ids"]) == len(X) == len(set(body["prediction_ids"]))
    return body


def label(c, prefix, ids, y, key=None):
    headers = {"Idempotency-Key": key} if key is not None else {}
    return c.post(f"{prefix}/labels", json={"labels": [{"prediction_id": i, "y": v} for i, v in zip(ids, y)]},
                  headers=headers)


def version(c, prefix):
    return c.get(prefix if prefix else "/model").json()["version"]


def test_a_labelled_batch_is_the_batch_learned_directly(backend_client):
    """Remember then label learns exactly those rows: the model equals one that learned the same
    batch directly (same answers, same predictions), and the batch is stored like any other."""
    c = backend_client
    rng = np.random.default_rng(1)
    a, b = create(c, unique_name("a")), create(c, unique_name("b"))
    X1, y1 = regression_batch(rng, n=15)
    X2, y2 = regression_batch(rng, n=6)
    for p in (a, b):
        assert c.post(f"{p}/tasks/t/data", json={"X": X1, "y": y1}).status_code == 200
    served = remember(c, a, "t", X2)
    assert served["version"] == 1
    assert version(c, a) == 1  # remembering learns nothing
    got = label(c, a, served["prediction_ids"], y2)
    direct = c.post(f"{b}/tasks/t/data", json={"X": X2, "y": y2})
    assert got.status_code == 200 and direct.status_code == 200, got.text
    g, d = got.json(), direct.json()
    assert g["version"] == d["version"] == 2 and g["n_samples"] == d["n_samples"] == 21
    for k in ("code", "new_representative", "n_representatives", "outlier_probability"):
        assert g[k] == pytest.approx(d[k], abs=1e-12)
    Xq, _ = regression_batch(rng, n=8)
    pa = c.post(f"{a}/predict", json={"task_id": "t", "X": Xq}).json()["predictions"]
    pb = c.post(f"{b}/predict", json={"task_id": "t", "X": Xq}).json()["predictions"]
    np.testing.assert_allclose(pa, pb, rtol=0, atol=1e-12)
    assert c.get(f"{a}/tasks/t").json()["n_batches"] == 2


def test_a_label_request_takes_one_trip_to_the_thread_pool(backend_client, monkeypatch):
    """POST .../labels learns in the thread pool and its answer is validated on the event loop
    (a plain ``def`` endpoint takes a second trip to the pool, for FastAPI's validation)."""
    c = backend_client
    rng = np.random.default_rng(4)
    p = create(c, unique_name("trips"))
    X1, y1 = regression_batch(rng, n=15)
    X2, y2 = regression_batch(rng, n=3)
    assert c.post(f"{p}/tasks/t/data", json={"X": X1, "y": y1}).status_code == 200
    ids = remember(c, p, "t", X2)["prediction_ids"]
    trips = count_pool_trips(monkeypatch)
    r = label(c, p, ids, y2)
    assert r.status_code == 200 and r.json()["version"] == 2, r.text
    assert len(trips) == 1, trips


def test_the_prequential_score_is_the_served_prediction(backend_client):
    """The batch's prequential figures are the errors of the predictions served, even when the
    model moved between the prediction and the label (a recomputation would differ)."""
    c = backend_client
    rng = np.random.default_rng(2)
    p = create(c, unique_name("pq"))
    X1, y1 = regression_batch(rng, n=15)
    assert c.post(f"{p}/tasks/t/data", json={"X": X1, "y": y1}).status_code == 200
    X2, y2 = regression_batch(rng, n=7)
    served = remember(c, p, "t", X2)
    X3, y3 = regression_batch(rng, n=10)
    assert c.post(f"{p}/tasks/t/data", json={"X": X3, "y": y3}).json()["version"] == 2  # the model moves on
    moved = c.post(f"{p}/predict", json={"task_id": "t", "X": X2}).json()["predictions"]
    assert not np.allclose(moved, served["predictions"])
    got = label(c, p, served["prediction_ids"], y2).json()
    e = np.asarray(y2) - np.asarray(served["predictions"])
    assert got["version"] == 3
    assert got["prequential"]["n"] == 7
    assert got["prequential"]["rmse"] == pytest.approx(float(np.sqrt(np.mean(e ** 2))), rel=1e-12)
    assert got["prequential"]["mae"] == pytest.approx(float(np.mean(np.abs(e))), rel=1e-12)
    # the model's prequential figures and the evaluation log carry it too
    series = c.get(f"{p}/evaluation").json()["prequential"]
    assert series[-1]["version"] == 3 and series[-1]["batch"]["rmse"] == pytest.approx(got["prequential"]["rmse"])


def test_classification_scores_the_served_probabilities(make_client):
    c = make_client()
    rng = np.random.default_rng(3)
    p = create(c, unique_name("cls"), kind="classification")
    X = rng.normal(size=(30, 3))
    y = (X[:, 0] + 0.3 * rng.normal(size=30) > 0).astype(float)
    assert c.post(f"{p}/tasks/t/data", json={"X": X[:20].tolist(), "y": y[:20].tolist()}).status_code == 200
    served = remember(c, p, "t", X[20:].tolist())
    got = label(c, p, served["prediction_ids"], y[20:].tolist())
    assert got.status_code == 200, got.text
    prob = np.clip(np.asarray(served["probabilities"]), np.finfo(float).eps, 1 - np.finfo(float).eps)
    yy = y[20:]
    ll = -np.mean(np.where(yy == 1, np.log(prob), np.log1p(-prob)))
    s = got.json()["prequential"]
    assert s["log_loss"] == pytest.approx(ll, rel=1e-9)
    assert s["accuracy"] == pytest.approx(float(np.mean(np.asarray(served["predictions"]) == yy)))
    # a label the task refuses: 422, nothing learned, the row still waits
    waiting = remember(c, p, "t", X[:1].tolist())["prediction_ids"]
    assert label(c, p, waiting, [2.0]).status_code == 422
    assert label(c, p, waiting, [1.0]).json()["version"] == 3


def test_a_second_label_is_409_with_the_first_version(backend_client):
    c = backend_client
    rng = np.random.default_rng(4)
    X1, y1 = regression_batch(rng, n=12)
    assert c.post("/tasks/t/data", json={"X": X1, "y": y1}).status_code == 200
    X2, y2 = regression_batch(rng, n=4)
    ids = remember(c, "", "t", X2)["prediction_ids"]
    first = label(c, "", ids[:2], y2[:2])
    assert first.status_code == 200 and first.json()["version"] == 2
    again = label(c, "", ids[1:], y2[1:])  # one labelled, two waiting: nothing learned
    assert again.status_code == 409, again.text
    assert again.json()["version"] == 2 and again.json()["prediction_ids"] == [ids[1]]
    assert again.headers["X-Model-Version"] == "2"
    assert version(c, "") == 2
    assert label(c, "", ids[2:], y2[2:]).json()["version"] == 3  # the others still wait
    assert c.get("/tasks/t").json()["n_samples"] == 16


def test_unknown_expired_and_mixed_ids_change_nothing(backend_client, make_client, request):
    c = backend_client
    rng = np.random.default_rng(5)
    X1, y1 = regression_batch(rng, n=12)
    for task in ("t", "u"):
        assert c.post(f"/tasks/{task}/data", json={"X": X1, "y": y1}).status_code == 200
    X2, y2 = regression_batch(rng, n=3)
    ids = remember(c, "", "t", X2)["prediction_ids"]
    other = remember(c, "", "u", X2[:1])["prediction_ids"]
    v = version(c, "")
    unknown = "fffffffffff-0123456789abcdef"
    r = label(c, "", [ids[0], unknown], [1.0, 2.0])
    assert r.status_code == 404 and r.json()["prediction_ids"] == [unknown]
    past = "1-0123456789abcdef"  # an id whose expiry has passed (its row purged): 410, not 404
    r = label(c, "", [ids[0], past], [1.0, 2.0])
    assert r.status_code == 410 and r.json()["prediction_ids"] == [past]
    r = label(c, "", [ids[0], other[0]], [1.0, 2.0])
    assert r.status_code == 422 and "tasks" in r.json()["detail"]
    r = c.post("/labels", json={"labels": [{"prediction_id": "nope", "y": 1.0}]})  # no id has that form: unknown
    assert r.status_code == 404 and r.json()["prediction_ids"] == ["nope"], r.text
    for bad in ({"labels": []},
                {"labels": [{"prediction_id": ids[0], "y": 1.0}, {"prediction_id": ids[0], "y": 2.0}]},
                {"labels": [{"prediction_id": ids[0], "y": "1"}]}, {"labels": [{"prediction_id": ids[0]}]}):
        assert c.post("/labels", json=bad).status_code == 422, bad
    assert version(c, "") == v
    # another model's ids are unknown here
    p = create(c, unique_name("o"))
    assert c.post(f"{p}/tasks/t/data", json={"X": X1, "y": y1}).status_code == 200
    assert label(c, p, ids[:1], [1.0]).status_code == 404
    assert label(c, "", ids, y2).json()["version"] == v + 1  # after all that, every row still waits

    # expiry: PREDICTION_TTL on a service of its own, by the database's clock
    backend = "postgres" if c.app.state.settings.DATABASE_URL else "sqlite"
    kw = {"_request": request} if backend == "postgres" else {"SQLITE_PATH": c.app.state.settings.SQLITE_PATH + "-ttl"}
    short = make_client(backend, PREDICTION_TTL=0.5, **kw)
    assert short.post("/tasks/t/data", json={"X": X1, "y": y1}).status_code == 200
    ids = remember(short, "", "t", X2)["prediction_ids"]
    time.sleep(0.8)
    r = label(short, "", ids, y2)
    assert r.status_code == 410 and r.json()["prediction_ids"] == ids
    assert version(short, "") == 1
    fresh = remember(short, "", "t", X2)["prediction_ids"]  # purges the expired rows: still 410
    name = short.app.state.settings.MODEL_NAME
    with short.app.state.engine.connect() as conn:
        stored = set(conn.execute(select(remembered_t.c.prediction_id).where(remembered_t.c.model_name == name))
                     .scalars())
    assert stored == set(fresh)
    assert label(short, "", ids, y2).status_code == 410


def test_an_idempotent_retry_applies_once(backend_client):
    c = backend_client
    rng = np.random.default_rng(6)
    X1, y1 = regression_batch(rng, n=12)
    assert c.post("/tasks/t/data", json={"X": X1, "y": y1}).status_code == 200
    X2, y2 = regression_batch(rng, n=4)
    ids = remember(c, "", "t", X2)["prediction_ids"]
    first = label(c, "", ids, y2, key="labels-1")
    assert first.status_code == 200 and "Idempotent-Replayed" not in first.headers
    name = c.app.state.settings.MODEL_NAME
    for again in (label(c, "", ids, y2, key="labels-1"), label(c, f"/models/{name}", ids, y2, key="labels-1")):
        assert again.status_code == 200 and again.json() == first.json()
        assert again.headers["Idempotent-Replayed"] == "true"
    assert version(c, "") == 2 and c.get("/tasks/t").json()["n_samples"] == 16
    # the key with other labels, or as a batch's key: 422
    assert label(c, "", ids, [v + 1 for v in y2], key="labels-1").status_code == 422
    assert c.post("/tasks/t/data", json={"X": X2, "y": y2}, headers={"Idempotency-Key": "labels-1"}).status_code == 422
    # a refused request releases its key: the same key works once the request is right
    more = remember(c, "", "t", X2)["prediction_ids"]
    assert label(c, "", [more[0], "fffffffffff-0123456789abcdef"], [1.0, 1.0], key="labels-2").status_code == 404
    assert label(c, "", more, y2, key="labels-2").json()["version"] == 3


def test_remembered_rows_survive_a_restart(request, make_client, tmp_path):
    for backend in ("sqlite", "postgres"):
        kw = {"_request": request} if backend == "postgres" else {"SQLITE_PATH": str(tmp_path / "restart.db")}
        name = unique_name("restart")
        c = make_client(backend, MODEL_NAME=name, **kw)
        rng = np.random.default_rng(7)
        X1, y1 = regression_batch(rng, n=12)
        assert c.post("/tasks/t/data", json={"X": X1, "y": y1}).status_code == 200
        X2, y2 = regression_batch(rng, n=5)
        served = remember(c, "", "t", X2)
        c.__exit__(None, None, None)  # the process ends
        again = make_client(backend, MODEL_NAME=name, **kw)  # a new app on the same database
        got = label(again, "", served["prediction_ids"], y2)
        assert got.status_code == 200, got.text
        e = np.asarray(y2) - np.asarray(served["predictions"])
        assert got.json()["version"] == 2
        assert got.json()["prequential"]["rmse"] == pytest.approx(float(np.sqrt(np.mean(e ** 2))), rel=1e-12)


def test_the_rows_waiting_are_bounded_per_model(backend_client, make_client, request):
    c = backend_client
    backend = "postgres" if c.app.state.settings.DATABASE_URL else "sqlite"
    kw = {"_request": request} if backend == "postgres" else {"SQLITE_PATH": c.app.state.settings.SQLITE_PATH + "-cap"}
    small = make_client(backend, MAX_REMEMBERED_PER_MODEL=3, **kw)
    rng = np.random.default_rng(8)
    X1, y1 = regression_batch(rng, n=12)
    assert small.post("/tasks/t/data", json={"X": X1, "y": y1}).status_code == 200
    X2, y2 = regression_batch(rng, n=4)
    r = small.post("/predict", json={"task_id": "t", "X": X2, "remember": True})
    assert r.status_code == 413 and "MAX_REMEMBERED_PER_MODEL" in r.json()["detail"]
    old = remember(small, "", "t", X2[:2])["prediction_ids"]
    time.sleep(0.01)
    new = remember(small, "", "t", X2[2:])["prediction_ids"]  # 4 waiting: the oldest is dropped
    gone = label(small, "", old, y2[:2])
    assert gone.status_code == 410 and len(gone.json()["prediction_ids"]) == 1  # one of the oldest two (a tie)
    kept = [i for i in old if i not in gone.json()["prediction_ids"]]
    assert label(small, "", kept + new, y2[1:]).json()["version"] == 2
    # labelled rows do not count: three more fit
    assert len(remember(small, "", "t", X2[:3])["prediction_ids"]) == 3
    assert label(small, "", kept, y2[1:2]).status_code == 409


def test_the_routes_are_documented(make_client):
    c = make_client()
    doc = c.get("/openapi.json").json()
    for path in ("/labels", "/models/{name}/labels"):
        op = doc["paths"][path]["post"]
        assert {"404", "409", "410", "422"} <= set(op["responses"])
        assert op["responses"]["409"]["content"]["application/json"]["example"]["version"] == 12
        assert "Idempotency-Key" in [p["name"] for p in op["parameters"]]
    schemas = doc["components"]["schemas"]
    assert "prediction_ids" in schemas["PredictOut"]["properties"]
    assert schemas["LabelsRequest"]["properties"]["labels"]["examples"]
    body = doc["paths"]["/predict"]["post"]["requestBody"]["content"]["application/json"]
    assert "remember" in body["schema"]["properties"]
    assert body["examples"]["remember"]["value"]["remember"] is True


def test_remembered_rows_go_with_their_model(backend_client):
    """A deleted model's remembered rows are deleted with it: a model created again under its
    name does not know the old ids."""
    c = backend_client
    rng = np.random.default_rng(9)
    name = unique_name("gone")
    p = create(c, name)
    X1, y1 = regression_batch(rng, n=12)
    assert c.post(f"{p}/tasks/t/data", json={"X": X1, "y": y1}).status_code == 200
    ids = remember(c, p, "t", X1[:2])["prediction_ids"]
    assert c.delete(p).status_code == 204
    with c.app.state.engine.connect() as conn:
        assert not conn.execute(select(remembered_t.c.prediction_id).where(remembered_t.c.model_name == name)).all()
    assert label(c, p, ids, y1[:2]).status_code == 404  # the model itself is unknown
    create(c, name)
    assert c.post(f"{p}/tasks/t/data", json={"X": X1, "y": y1}).status_code == 200
    r = label(c, p, ids, y1[:2])
    assert r.status_code == 404 and r.json()["prediction_ids"] == ids
