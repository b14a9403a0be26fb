"""Records instead of matrices (issue 24): a model's feature schema, records on .../data and
/predict, the per-model vocabulary of category levels, missing values, 422 naming the field
with nothing changed, export/import and fork with the vocabulary, and delete's cascade."""
from __future__ import annotations

import json

import numpy as np
import pytest
from sqlalchemy import func, select

import core
from fcl3.records import base_columns, check_records, encode, needed_columns, parse_schema

from .conftest import ESTIMATOR, PARAMS, unique_name

FEATURES = [{"name": "age", "type": "number"}, {"name": "urban", "type": "category"},
            {"name": "smoker", "type": "boolean", "nullable": True},
            {"name": "income", "type": "number", "nullable": True, "fill": 2.5}]


def new_model(c, features=FEATURES, kind="regression", **extra):
    name = unique_name("rec")
    r = c.post("/models", json={"name": name, "kind": kind, "estimator": ESTIMATOR, "params": dict(PARAMS),
                                "features": features, **extra})
    assert r.status_code == 201, r.text
    return name, r.json()


def records(rng, n, levels=("yes", "no")):
    out = []
    for i in range(n):
        out.append({"age": float(rng.normal(40, 10)), "urban": levels[i % len(levels)],
                    "smoker": None if i % 5 == 0 else bool(i % 2), "income": None if i % 4 == 0 else float(rng.normal())})
    return out


def target(recs):
    return [0.1 * r["age"] + (1.0 if r["urban"] == "yes" else -1.0) + (0.5 if r["smoker"] else 0.0) for r in recs]


def state(c, name):
    m = c.get(f"/models/{name}").json()
    return m["version"], c.get(f"/models/{name}/tasks").json()["tasks"], m["columns"]


def test_schema_at_creation_is_shown_and_in_openapi(backend_client):
    c = backend_client
    name, created = new_model(c)
    assert created["features"][0] == {"name": "age", "type": "number", "nullable": False, "fill": 0.0}
    assert created["features"][1] == {"name": "urban", "type": "category", "nullable": False}
    assert created["columns"] == ["age", "smoker", "smoker=null", "income", "income=null"]
    assert created["hyperparameters"]["grow_features"] is True
    got = c.get(f"/models/{name}").json()
    assert got["features"] == created["features"] and got["columns"] == created["columns"]
    doc = c.get("/openapi.json").json()
    spec = doc["components"]["schemas"]
    assert "features" in spec["ModelCreate"]["properties"] and "FeatureSpec" in spec
    assert "records" in spec["Batch"]["properties"] and "records" in spec["Batch"]["description"]
    predict = doc["paths"]["/predict"]["post"]["requestBody"]["content"]["application/json"]
    assert "records" in predict["schema"]["properties"] and "records" in predict["examples"]
    assert "unseen" in spec["PredictOut"]["properties"] and "columns" in spec["ModelOut"]["properties"]


@pytest.mark.parametrize("features, words", [
    ([{"name": "a", "type": "text"}], "type"),
    ([{"name": "a", "type": "number"}, {"name": "a", "type": "boolean"}], "twice"),
    ([{"name": "a", "type": "category", "fill": 1.0}], "fill"),
    ([], "at least 1"),
])
def test_bad_schemas_are_refused(backend_client, features, words):
    r = backend_client.post("/models", json={"name": unique_name("bad"), "kind": "regression", "features": features})
    assert r.status_code == 422 and words in r.text, r.text


def test_records_learn_and_predict_like_the_encoded_matrix(backend_client):
    """The service's answer equals the engine's on the matrix encoded independently here."""
    c = backend_client
    name, _ = new_model(c)
    rng = np.random.default_rng(0)
    batches = [("d1", records(rng, 12)), ("d2", records(rng, 10, ("no", "yes"))), ("d1", records(rng, 8, ("yes",))),
               ("d3", records(rng, 9, ("suburb", "no"))), ("d2", records(rng, 7, ("yes",)))]  # d3 grows the model
    engine = core.FCL3(kind="regression", grow_features=True, **PARAMS)
    schema = parse_schema(FEATURES)
    columns = []
    for task, recs in batches:
        r = c.post(f"/models/{name}/tasks/{task}/data", json={"records": recs, "y": target(recs)})
        assert r.status_code == 200, r.text
        levels = check_records(schema, recs)
        wanted = needed_columns(schema, levels)
        columns += [col for col in wanted if col not in columns]
        width = max(columns.index(col) for col in wanted) + 1
        X, _ = encode(schema, columns[:width], recs)
        engine.learn(task, X, target(recs))
    probe = records(rng, 5)
    X, _ = encode(schema, columns, probe)
    for task in ("d1", "d2", "d3"):
        r = c.post(f"/models/{name}/predict", json={"task_id": task, "records": probe})
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(r.json()["predictions"], engine.predict(task, X), rtol=1e-9, atol=1e-9)
        assert "unseen" not in r.json()
    # missing values: the fill and the indicator, never 0 silently
    assert X[0][columns.index(base_columns(schema)[3])] == 2.5  # income of row 0 is null -> fill
    assert X[0][columns.index(base_columns(schema)[4])] == 1.0  # and its indicator


def test_a_new_level_grows_the_vocabulary_and_changes_no_stored_prediction(backend_client):
    c = backend_client
    name, _ = new_model(c)
    rng = np.random.default_rng(1)
    for task in ("a", "b"):
        recs = records(rng, 12)
        assert c.post(f"/models/{name}/tasks/{task}/data", json={"records": recs, "y": target(recs)}).status_code == 200
    probe = [{"age": 30.0, "urban": "yes", "smoker": True, "income": 1.0},
             {"age": 50.0, "urban": "suburb", "smoker": False, "income": None}]
    before = c.post(f"/models/{name}/predict", json={"task_id": "a", "records": probe}).json()
    assert before["unseen"] == {"urban": ["suburb"]}
    assert "urban=suburb" not in c.get(f"/models/{name}").json()["columns"]  # predicting registers nothing
    # a third task brings the level "suburb": a new column for the engine
    recs = records(rng, 12, ("suburb", "yes"))
    r = c.post(f"/models/{name}/tasks/c/data", json={"records": recs, "y": target(recs)})
    assert r.status_code == 200, r.text
    cols = c.get(f"/models/{name}").json()["columns"]
    assert cols[-1] == "urban=suburb" and c.get(f"/models/{name}").json()["d"] == len(cols)
    after = c.post(f"/models/{name}/predict", json={"task_id": "c", "records": probe}).json()
    assert "unseen" not in after
    # the growth alone changes no stored task's prediction (tests/core/test_feature_growth.py);
    # the update that brought it moved the library, as any update does


@pytest.mark.parametrize("bad, field", [
    ({"age": 30.0, "urban": "yes", "smoker": True, "income": 1.0, "height": 2}, "height"),  # unknown name
    ({"age": "thirty", "urban": "yes", "smoker": True, "income": 1.0}, "age"),  # wrong type
    ({"age": 30.0, "urban": "yes", "smoker": 1, "income": 1.0}, "smoker"),  # 1 is not a boolean
    ({"age": 30.0, "urban": 2.5, "smoker": True, "income": 1.0}, "urban"),  # a float is not a level
    ({"urban": "yes", "smoker": True, "income": 1.0}, "age"),  # required field missing
    ({"age": None, "urban": "yes", "smoker": True, "income": 1.0}, "age"),  # required field null
    ({"age": 30.0, "urban": "new-level", "smoker": True, "income": float("nan")}, "income"),  # NaN is not a number
])
def test_bad_records_are_422_naming_the_field_and_change_nothing(backend_client, bad, field):
    c = backend_client
    name, _ = new_model(c)
    rng = np.random.default_rng(2)
    recs = records(rng, 6)
    assert c.post(f"/models/{name}/tasks/t/data", json={"records": recs, "y": target(recs)}).status_code == 200
    before = state(c, name)
    body = [*records(rng, 2), bad]
    r = c.post(f"/models/{name}/tasks/t/data", content=json.dumps({"records": body, "y": [1.0, 2.0, 3.0]},
                                                                      allow_nan=True),
               headers={"content-type": "application/json"})
    if r.status_code == 422 and "field" in r.json():
        assert r.json()["field"] == field and r.json()["row"] == 2 and field in r.json()["detail"], r.text
    else:  # NaN is refused by the JSON parser of the request itself
        assert r.status_code == 422, r.text
    p = c.post(f"/models/{name}/predict", content=json.dumps({"task_id": "t", "records": [bad]}, allow_nan=True),
               headers={"content-type": "application/json"})
    assert p.status_code == 422, p.text
    assert state(c, name) == before  # version, tasks and vocabulary unchanged


def test_records_on_a_model_without_schema_and_x_on_a_model_with_one(backend_client):
    c = backend_client
    plain = unique_name("plain")
    assert c.post("/models", json={"name": plain, "kind": "regression", "estimator": ESTIMATOR,
                                   "params": dict(PARAMS)}).status_code == 201
    r = c.post(f"/models/{plain}/tasks/t/data", json={"records": [{"a": 1.0}], "y": [1.0]})
    assert r.status_code == 422 and "no feature schema" in r.text
    r = c.post(f"/models/{plain}/tasks/t/data", json={"X": [[1.0]], "records": [{"a": 1.0}], "y": [1.0]})
    assert r.status_code == 422 and "either X" in r.text
    r = c.post(f"/models/{plain}/tasks/t/data", json={"X": None, "y": [1.0]})
    assert r.status_code == 422 and "either X" in r.text
    name, _ = new_model(c)  # X null beside records, as the OpenAPI document's required X allows
    r = c.post(f"/models/{name}/tasks/t/data", json={"X": None, "records": [{"age": 1.0, "urban": "a"}], "y": [1.0]})
    assert r.status_code == 200, r.text
    name, created = new_model(c)
    width = len(created["columns"])
    r = c.post(f"/models/{name}/tasks/t/data", json={"X": [[1.0] * (width + 1)], "y": [1.0]})
    assert r.status_code == 422 and r.json()["field"] == "X", r.text
    assert c.get(f"/models/{name}").json()["version"] == 0


def test_the_vocabulary_goes_with_export_import_fork_and_delete(backend_client):
    c = backend_client
    name, _ = new_model(c)
    rng = np.random.default_rng(3)
    recs = records(rng, 12, ("yes", "no", "maybe"))
    assert c.post(f"/models/{name}/tasks/t/data", json={"records": recs, "y": target(recs)}).status_code == 200
    cols = c.get(f"/models/{name}").json()["columns"]
    probe = records(rng, 3, ("maybe", "yes"))
    want = c.post(f"/models/{name}/predict", json={"task_id": "t", "records": probe}).json()["predictions"]
    data = c.get(f"/models/{name}/state").content
    copy = unique_name("imp")
    r = c.post(f"/models/{copy}/state", content=data, headers={"content-type": "application/octet-stream"})
    assert r.status_code in (200, 201), r.text
    got = c.get(f"/models/{copy}").json()
    assert got["columns"] == cols and got["features"] == c.get(f"/models/{name}").json()["features"]
    assert c.post(f"/models/{copy}/predict", json={"task_id": "t", "records": probe}).json()["predictions"] == want
    fork = unique_name("fork")
    assert c.post("/models", json={"name": fork, "fork": {"model": name}}).status_code == 201
    assert c.get(f"/models/{fork}").json()["columns"] == cols
    np.testing.assert_allclose(c.post(f"/models/{fork}/predict", json={"task_id": "t", "records": probe}
                                      ).json()["predictions"], want, rtol=1e-9)
    assert c.delete(f"/models/{name}").status_code in (200, 204)
    from service.store.tables import columns_t
    with c.app.state.engine.connect() as conn:
        n = conn.execute(select(func.count()).select_from(columns_t).where(columns_t.c.model_name == name)).scalar()
    assert n == 0  # ON DELETE CASCADE


def test_a_retried_records_batch_is_replayed(backend_client):
    c = backend_client
    name, _ = new_model(c)
    rng = np.random.default_rng(4)
    first_batch = records(rng, 10)
    assert c.post(f"/models/{name}/tasks/t/data", json={"records": first_batch, "y": target(first_batch)}
                  ).status_code == 200
    recs = records(rng, 10)
    h = {"Idempotency-Key": "k-" + unique_name()}
    first = c.post(f"/models/{name}/tasks/t/data", json={"records": recs, "y": target(recs)}, headers=h)
    again = c.post(f"/models/{name}/tasks/t/data", json={"records": recs, "y": target(recs)}, headers=h)
    assert again.status_code == 200 and again.headers.get("Idempotent-Replayed") == "true", again.text
    assert again.json()["version"] == first.json()["version"]


def test_a_new_level_for_a_known_task_is_learned_scored_and_its_retry_replayed(backend_client):
    """A known task's batch with a new level grows the model: it is scored first by the model
    before it (the new column at weight 0: what /predict answered for those records), and the
    same request sent again after another batch grew the model further is replayed (its rows
    end at its own last column, whatever the model's width)."""
    c = backend_client
    name, _ = new_model(c)
    rng = np.random.default_rng(6)
    recs, other = records(rng, 10), records(rng, 8)
    assert c.post(f"/models/{name}/tasks/t/data", json={"records": recs, "y": target(recs)}).status_code == 200
    assert c.post(f"/models/{name}/tasks/u/data", json={"records": other, "y": target(other)}).status_code == 200
    more = records(rng, 6, ("yes", "rural"))
    before = c.post(f"/models/{name}/predict", json={"task_id": "t", "records": more}).json()
    assert before["unseen"] == {"urban": ["rural"]}
    want_rmse = float(np.sqrt(np.mean((np.array(before["predictions"]) - target(more)) ** 2)))
    h = {"Idempotency-Key": "k-" + unique_name()}
    r = c.post(f"/models/{name}/tasks/t/data", json={"records": more, "y": target(more)}, headers=h)
    assert r.status_code == 200, r.text
    # scored by the model before it, which reads the new level's column at weight 0
    assert r.json()["prequential"]["n"] == 6 and r.json()["prequential"]["rmse"] == pytest.approx(want_rmse, rel=1e-9)
    version, tasks, columns = state(c, name)
    assert columns[-1] == "urban=rural" and {t["task_id"]: t["n_samples"] for t in tasks} == {"t": 16, "u": 8}
    wider = records(rng, 5, ("suburb", "no"))
    assert c.post(f"/models/{name}/tasks/t/data", json={"records": wider, "y": target(wider)}).status_code == 200
    again = c.post(f"/models/{name}/tasks/t/data", json={"records": more, "y": target(more)}, headers=h)
    assert again.status_code == 200 and again.headers.get("Idempotent-Replayed") == "true", again.text
    assert again.json()["version"] == r.json()["version"] and state(c, name)[0] == version + 1
    declared = [{**f, "levels": ["yes", "no", "rural"]} if f["name"] == "urban" else f for f in FEATURES]
    name2, created = new_model(c, declared)
    assert created["columns"][-3:] == ["urban=yes", "urban=no", "urban=rural"]


def test_take_back_of_a_records_batch_gives_the_model_without_it(backend_client):
    c = backend_client
    name, _ = new_model(c)
    rng = np.random.default_rng(5)
    a, b = records(rng, 12), records(rng, 12, ("new", "yes"))
    assert c.post(f"/models/{name}/tasks/t/data", json={"records": a, "y": target(a)}).status_code == 200
    probe = records(rng, 3)
    want = c.post(f"/models/{name}/predict", json={"task_id": "t", "records": probe}).json()["predictions"]
    v = c.post(f"/models/{name}/tasks/u/data", json={"records": b, "y": target(b)}).json()["version"]
    r = c.delete(f"/models/{name}/batches/{v}")
    assert r.status_code == 200, r.text
    got = c.post(f"/models/{name}/predict", json={"task_id": "t", "records": probe}).json()["predictions"]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_a_csv_upload_is_the_same_batch_as_its_records(backend_client):
    c = backend_client
    a, _ = new_model(c)
    b, _ = new_model(c)
    rows = [{"age": 31.5, "urban": "yes", "smoker": True, "income": None},
            {"age": 20.0, "urban": "no", "smoker": None, "income": 1.5},
            {"age": 44.0, "urban": "yes", "smoker": False, "income": -0.5}]
    y = [1.0, 2.0, 0.5]
    text = "age,urban,smoker,income,y\n31.5,yes,true,,1\n20,no,,1.5,2\n44,yes,false,-0.5,0.5\n"
    r = c.post(f"/models/{a}/tasks/t/data", content=text, headers={"content-type": "text/csv"})
    assert r.status_code == 200, r.text
    assert c.post(f"/models/{b}/tasks/t/data", json={"records": rows, "y": y}).status_code == 200
    probe = {"task_id": "t", "records": rows}
    assert (c.post(f"/models/{a}/predict", json=probe).json()["predictions"]
            == c.post(f"/models/{b}/predict", json=probe).json()["predictions"])
    assert c.get(f"/models/{a}").json()["columns"] == c.get(f"/models/{b}").json()["columns"]
    before = state(c, a)
    r = c.post(f"/models/{a}/tasks/t/data", content="age,urban,smoker,income,y\nold,yes,true,1,1\n",
               headers={"content-type": "text/csv"})
    assert r.status_code == 422 and r.json()["field"] == "age", r.text
    r = c.post(f"/models/{a}/tasks/t/data", content="age,urban\n1,yes\n", headers={"content-type": "text/csv"})
    assert r.status_code == 422 and "'y'" in r.text, r.text
    assert state(c, a) == before
    spec = c.get("/openapi.json").json()["paths"]["/models/{name}/tasks/{task_id}/data"]["post"]["requestBody"]
    assert {"application/json", "text/csv"} <= set(spec["content"])


def test_two_writers_adding_columns_at_once_both_get_theirs_once(backend_app):
    """Two processes (two apps on one database) whose cached vocabularies are the same, stale
    view: each batch's new levels are placed under the update lock after the columns stored by
    then, so both get theirs, once; a level both bring is stored once."""
    one = backend_app()
    two = backend_app(MODEL_NAME=one.app.state.settings.MODEL_NAME)
    name, created = new_model(one)
    base = len(created["columns"])
    assert len(two.get(f"/models/{name}").json()["columns"]) == base  # two has read the vocabulary too
    rng = np.random.default_rng(3)
    a = records(rng, 6, levels=("north", "yes"))
    b = records(rng, 6, levels=("south", "north"))
    assert one.post(f"/models/{name}/tasks/t/data", json={"records": a, "y": target(a)}).status_code == 200
    assert two.post(f"/models/{name}/tasks/u/data", json={"records": b, "y": target(b)}).status_code == 200
    cols = one.get(f"/models/{name}").json()["columns"]
    assert cols[base:] == ["urban=north", "urban=yes", "urban=south"], cols
    assert two.get(f"/models/{name}").json()["columns"] == cols


def test_a_csv_prediction_is_the_prediction_of_its_records(backend_client):
    c = backend_client
    name, _ = new_model(c)
    rng = np.random.default_rng(7)
    recs = records(rng, 12)
    assert c.post(f"/models/{name}/tasks/t/data", json={"records": recs, "y": target(recs)}).status_code == 200
    rows = [{"age": 31.5, "urban": "yes", "smoker": True, "income": None},
            {"age": 20.0, "urban": "mars", "smoker": None, "income": 1.5}]
    want = c.post(f"/models/{name}/predict", json={"task_id": "t", "records": rows}).json()
    text = "age,urban,smoker,income\n31.5,yes,true,\n20,mars,,1.5\n"
    got = c.post(f"/models/{name}/predict", params={"task_id": "t"}, content=text, headers={"content-type": "text/csv"})
    assert got.status_code == 200, got.text
    assert got.json()["predictions"] == want["predictions"] and got.json()["unseen"] == {"urban": ["mars"]}
    r = c.post(f"/models/{name}/predict", content=text, headers={"content-type": "text/csv"})
    assert r.status_code == 422 and r.json()["field"] == "task_id", r.text
    r = c.post(f"/models/{name}/predict", params={"task_id": "t"}, content="age,urban,smoker,income\nx,yes,,\n",
               headers={"content-type": "text/csv"})
    assert r.status_code == 422 and r.json()["field"] == "age", r.text
    body = c.get("/openapi.json").json()["paths"]["/predict"]["post"]["requestBody"]["content"]
    assert {"application/json", "text/csv"} <= set(body)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_default_model_takes_its_schema_from_fcl3_features(make_client, request, backend):
    """FCL3_FEATURES is the default model's schema: it is created with its columns, learns
    and predicts records on the routes without a model name, like a model created with the
    same features by POST /models."""
    extra = {"_request": request} if backend == "postgres" else {}
    c = make_client(backend, FCL3_FEATURES=FEATURES, **extra)
    default = c.get("/model").json()
    assert [f["name"] for f in default["features"]] == [f["name"] for f in FEATURES]
    named, created = new_model(c)
    assert default["columns"] == created["columns"] and len(default["columns"]) >= len(FEATURES)
    rng = np.random.default_rng(8)
    recs, probe = records(rng, 10), records(rng, 3, ("no", "city"))
    assert c.post("/tasks/t/data", json={"records": recs, "y": target(recs)}).status_code == 200
    assert c.post(f"/models/{named}/tasks/t/data", json={"records": recs, "y": target(recs)}).status_code == 200
    got = c.post("/predict", json={"task_id": "t", "records": probe}).json()
    want = c.post(f"/models/{named}/predict", json={"task_id": "t", "records": probe}).json()
    assert got["unseen"] == want["unseen"] == {"urban": ["city"]}
    np.testing.assert_allclose(got["predictions"], want["predictions"], rtol=1e-12)
    assert c.get("/model").json()["columns"] == c.get(f"/models/{named}").json()["columns"]


def test_a_bad_fcl3_features_stops_the_start_naming_it():
    from pydantic import ValidationError

    from .conftest import make_settings

    with pytest.raises(ValidationError, match="FCL3_FEATURES"):
        make_settings(FCL3_FEATURES=[{"name": "age", "type": "colour"}])
    with pytest.raises(ValidationError, match="FCL3_FEATURES"):
        make_settings(FCL3_FEATURES=[{"name": "age", "type": "number"}], FCL3_D=3)
