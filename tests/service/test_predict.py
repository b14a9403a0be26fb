"""GET and POST /predict, on the default model and under /models/{name}: the answers, the read
key, the errors (FastAPI's 422 with ``loc``), ``min_version``, where the work runs, the metrics
and the OpenAPI description."""
from __future__ import annotations

import json
from urllib.parse import quote

import numpy as np
import pytest
from sqlalchemy import text

from service.api.routes import predict as predict_routes

from .conftest import regression_batch

WRITE, READ = "predict-write-key", "predict-read-key"
ROW = "0.1,0.2,0.3,0.4"
X4 = [[0.1, 0.2, 0.3, 0.4]]


@pytest.fixture
def seeded(make_client):
    """A regression model with tasks ``t`` (version 1) and ``u`` (version 2), d=4."""
    c = make_client()
    rng = np.random.default_rng(3)
    for task in ("t", "u"):
        X, y = regression_batch(rng)
        assert c.post(f"/tasks/{task}/data", json={"X": X, "y": y}).status_code == 200
    return c


def prefixes(c):
    return ["", f"/models/{c.app.state.settings.MODEL_NAME}"]


def engine_predictions(c, task: str, X) -> list[float]:
    snap = c.app.state.model.reader.snapshot(check=True)
    return snap.learner.predict(task, np.asarray(X, dtype=float)).tolist()


# ----------------------------------------------------------------------------- answers
def test_get_and_post_on_both_routes_answer_the_engines_predictions(seeded):
    X = [[0.1, 0.2, 0.3, 0.4], [1.0, 2.0, 3.0, 4.0], [-1e300, 0.0, 0.0, 1e-300]]
    expected = engine_predictions(seeded, "t", X)
    for prefix in prefixes(seeded):
        g = seeded.get(f"{prefix}/predict", params={"task_id": "t", "x": [",".join(map(repr, r)) for r in X]})
        p = seeded.post(f"{prefix}/predict", json={"task_id": "t", "X": X})
        for r in (g, p):
            assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
            assert r.json() == {"task_id": "t", "predictions": expected, "version": 2}  # to the last bit


def test_integers_are_read_as_floats(seeded):
    a = seeded.post("/predict", json={"task_id": "t", "X": [[1, 2, 3, 4]]}).json()
    b = seeded.post("/predict", json={"task_id": "t", "X": [[1.0, 2.0, 3.0, 4.0]]}).json()
    assert a == b


def test_a_classification_answer_has_probabilities(make_client):
    c = make_client()
    assert c.post("/models", json={"name": "other", "kind": "classification"}).status_code == 201
    X = [[0.0, 1.0], [1.0, 0.0], [2.0, 1.0], [0.5, 0.5]]
    assert c.post("/models/other/tasks/a/data", json={"X": X, "y": [0, 1, 1, 0]}).status_code == 200
    p = c.post("/models/other/predict", json={"task_id": "a", "X": X}).json()
    g = c.get("/models/other/predict", params={"task_id": "a", "x": ["0,1", "1,0", "2,1", "0.5,0.5"]}).json()
    assert p == g and len(p["probabilities"]) == 4 and all(0 <= v <= 1 for v in p["probabilities"])
    assert set(p["predictions"]) <= {0.0, 1.0}


def test_task_ids_are_encoded_as_json(make_client):
    c = make_client()
    X, y = regression_batch(np.random.default_rng(1))
    for task in ('q"uote\\back', "ünïcødé", "<b>&amp;", "\u2028"):  # (a tab is a control character: 422)
        assert c.post(f"/tasks/{quote(task, safe='')}/data", json={"X": X, "y": y}).status_code == 200
        assert c.get("/predict", params={"task_id": task, "x": ROW}).json()["task_id"] == task
        assert c.post("/predict", json={"task_id": task, "X": X4}).json()["task_id"] == task


def test_the_last_of_a_repeated_parameter_or_key_counts(seeded):
    assert seeded.get("/predict", params=[("task_id", "nope"), ("task_id", "t"), ("x", ROW)]).status_code == 200
    body = '{"task_id": "nope", "X": [[1, 2, 3, 4]], "task_id": "t"}'
    r = seeded.post("/predict", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json()["task_id"] == "t"


# ----------------------------------------------------------------------------- the read key
@pytest.mark.parametrize("authorization", [None, f"Bearer {READ}", f"Bearer {WRITE}", "Bearer nope", f"bearer {READ}",
                                           f"Basic {READ}", "Bearer", f"Bearer  {READ}  ", READ])
def test_the_read_key_is_checked_as_on_every_read_route(make_client, authorization):
    """The prediction routes accept and refuse exactly the keys ``GET /tasks`` does (the
    project's ``require_read``): 401 with ``WWW-Authenticate: Bearer`` when refused."""
    c = make_client(API_WRITE_KEYS=WRITE, API_READ_KEYS=READ)
    X, y = regression_batch(np.random.default_rng(2))
    assert c.post("/tasks/t/data", json={"X": X, "y": y}, headers={"Authorization": f"Bearer {WRITE}"}).status_code == 200
    headers = {} if authorization is None else {"Authorization": authorization}
    reference = c.get("/tasks", headers=headers)
    name = c.app.state.settings.MODEL_NAME
    for prefix in ("", f"/models/{name}"):
        for r in (c.get(f"{prefix}/predict", params={"task_id": "t", "x": ROW}, headers=headers),
                  c.post(f"{prefix}/predict", json={"task_id": "t", "X": X4}, headers=headers),
                  c.get(f"{prefix}/predict", params={"task_id": "t"}, headers=headers)):  # a bad request too
            if reference.status_code == 401:
                assert r.status_code == 401 and r.json() == reference.json(), r.text
                assert r.headers["www-authenticate"] == "Bearer"
            else:
                assert r.status_code in (200, 422), r.text


# ----------------------------------------------------------------------------- errors
def envelope(r) -> dict:
    """The 422's error envelope: ``detail`` in words, ``field`` and ``row`` where there are any."""
    assert r.status_code == 422, r.text
    body = r.json()
    assert isinstance(body["detail"], str) and "Value error" not in body["detail"], body
    return body


@pytest.mark.parametrize("params,field,words", [
    ({"x": ROW}, "task_id", "task_id is missing"),
    ({"task_id": "t"}, "x", "x is missing"),
    ({"task_id": "", "x": ROW}, "task_id", "at least 1 character"),
    ({"task_id": "t" * 201, "x": ROW}, "task_id", "at most 200 characters"),
    ({"task_id": "t", "x": ROW, "min_version": "-1"}, "min_version", "greater than or equal to 0"),
    ({"task_id": "t", "x": ROW, "min_version": "abc"}, "min_version", "valid integer"),
    ({"task_id": "t", "x": ROW, "min_version": ""}, "min_version", "valid integer"),
])
def test_a_bad_query_is_a_422_naming_its_parameter(seeded, params, field, words):
    error = envelope(seeded.get("/predict", params=params))
    assert error["field"] == field and words in error["detail"], error


@pytest.mark.parametrize("x,words", [
    ("1,2,3", "features"), ("1,2,abc,4", "x[0] value 2 is not a number: 'abc'"), ("1,2,,4", "is not a number"),
    ("1,2,nan,4", "nan"), ("1,2,inf,4", "inf"), ("1,2,1e999,4", "inf"), ("", "is not a number"),
])
def test_bad_rows_in_the_query_are_422_saying_why(seeded, x, words):
    r = seeded.get("/predict", params={"task_id": "t", "x": x})
    assert r.status_code == 422 and words in r.json()["detail"].lower(), r.text


@pytest.mark.parametrize("body,field,row,words", [
    ({"X": X4}, "task_id", None, "task_id is missing"),
    ({"task_id": "t"}, "X", None, "X is missing"),
    ({"task_id": "", "X": X4}, "task_id", None, "at least 1 character"),
    ({"task_id": 5, "X": X4}, "task_id", None, "valid string"),
    ({"task_id": "t", "X": X4, "extra": 1}, "extra", None, "Extra inputs are not permitted"),
    ({"task_id": "t", "X": [[1, 2, "3", 4]]}, "X", 0, "X[0][2]: Input should be a valid number"),
    ({"task_id": "t", "X": [[1, 2, True, 4]]}, "X", 0, "X[0][2]"),
    ({"task_id": "t", "X": [[1, 2, None, 4]]}, "X", 0, "X[0][2]"),
    ({"task_id": "t", "X": [1, 2, 3, 4]}, "X", 0, "X[0]: Input should be a valid array"),
    ({"task_id": "t", "X": []}, "X", None, "X is empty"),
    ([1, 2], None, None, "Input should be an object"),
])
def test_a_bad_body_is_a_422_naming_its_field_and_row(seeded, body, field, row, words):
    error = envelope(seeded.post("/predict", json=body))
    assert error.get("field") == field and error.get("row") == row and words in error["detail"], error


@pytest.mark.parametrize("raw,ctype,status,words", [
    ('{"task_id": "t", "X": [[1, 2, 3, 4]]', "application/json", 422, "not valid JSON"),
    ("{X: nope", "application/json", 422, "not valid JSON"),
    ("\xff", "application/json", 422, "not valid JSON"),
    ('{"task_id": "t", "X": [[1, 2, 3, 4]]}', "text/plain", 415, "send application/json or text/csv"),
    ("", "application/json", 422, "a request body is required"),
])
def test_a_body_that_is_not_json_is_refused_saying_why(seeded, raw, ctype, status, words):
    r = seeded.post("/predict", content=raw.encode("latin-1"), headers={"content-type": ctype})
    assert r.status_code == status and words in r.json()["detail"], r.text


def test_a_body_without_a_content_type_is_refused_with_the_remedy(seeded):
    r = seeded.post("/predict", content=json.dumps({"task_id": "t", "X": X4}).encode(), headers={"content-type": ""})
    assert r.status_code == 415, r.text
    assert "without a Content-Type" in r.json()["detail"] and "application/json" in r.json()["detail"]


def test_a_json_media_type_with_parameters_or_a_suffix_is_json(seeded):
    for ctype in ("application/json; charset=utf-8", "application/vnd.api+json"):
        r = seeded.post("/predict", content=json.dumps({"task_id": "t", "X": X4}), headers={"content-type": ctype})
        assert r.status_code == 200, (ctype, r.text)


@pytest.mark.parametrize("raw,words", [
    ('{"task_id": "t", "X": [[1, 2, 3, NaN]]}', "nan"),
    ('{"task_id": "t", "X": [[1, 2, 3, Infinity]]}', "inf"),
    ('{"task_id": "t", "X": [[1, 2, 3, 1e999]]}', "inf"),
    ('{"task_id": "t", "X": [[1, 2, 3]]}', "features"),
    ('{"task_id": "t", "X": [[1, 2, 3, 4], [1, 2]]}', ""),
])
def test_rows_the_engine_refuses_are_422(seeded, raw, words):
    r = seeded.post("/predict", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422 and words in r.text.lower(), r.text


def test_unknown_task_model_and_bad_model_name(seeded):
    for r in (seeded.get("/predict", params={"task_id": "nope", "x": ROW}),
              seeded.post("/predict", json={"task_id": "nope", "X": X4})):
        assert r.status_code == 404 and "nope" in r.json()["detail"]
    for r in (seeded.get("/models/missing/predict", params={"task_id": "t", "x": ROW}),
              seeded.post("/models/missing/predict", json={"task_id": "t", "X": X4})):
        assert r.status_code == 404 and "missing" in r.json()["detail"], r.text
    for r in (seeded.get("/models/bad name!/predict", params={"task_id": "t", "x": ROW}),
              seeded.post("/models/bad name!/predict", json={"task_id": "t", "X": X4})):
        error = envelope(r)
        assert error["field"] == "name" and error["detail"].startswith("name must be 1-100 characters"), error


def test_other_methods_are_405(seeded):
    assert seeded.put("/predict", json={"task_id": "t", "X": X4}).status_code == 405
    assert seeded.delete("/predict").status_code == 405


# ----------------------------------------------------------------------------- min_version
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_min_version(seeded, method):
    def ask(mv):
        if method == "GET":
            return seeded.get("/predict", params={"task_id": "t", "x": ROW, "min_version": mv})
        return seeded.post(f"/predict?min_version={mv}", json={"task_id": "t", "X": X4})

    for mv in ("0", "2", "002"):
        assert ask(mv).status_code == 200 and ask(mv).json()["version"] == 2
    r = ask("3")
    assert r.status_code == 409 and "3" in r.json()["detail"]
    assert ask("99999999999999999999999").status_code in (409, 422)


# ----------------------------------------------------------------------------- where the work runs
class Pool:
    """Counts the requests answered in the thread pool."""

    def __init__(self, monkeypatch):
        self.calls = 0
        run = predict_routes.run_in_threadpool

        async def counting(*args, **kwargs):
            self.calls += 1
            return await run(*args, **kwargs)

        monkeypatch.setattr(predict_routes, "run_in_threadpool", counting)


def test_large_requests_and_stale_models_go_to_the_thread_pool(seeded, monkeypatch):
    pool = Pool(monkeypatch)
    assert seeded.get("/predict", params={"task_id": "t", "x": ROW}).status_code == 200
    assert pool.calls == 0  # after this process's own write, SQLite's exact watch vouches for it
    with seeded.app.state.engine.begin() as conn:  # a commit by another connection moves the watch
        conn.execute(text("CREATE TABLE another_writer (x INTEGER)"))
    assert seeded.get("/predict", params={"task_id": "t", "x": ROW}).status_code == 200
    assert pool.calls == 1  # the version to check: in the thread pool
    assert seeded.get("/predict", params={"task_id": "t", "x": ROW}).status_code == 200
    assert seeded.post("/predict", json={"task_id": "t", "X": X4}).status_code == 200
    assert pool.calls == 1  # small, model current: on the event loop
    n = predict_routes.INLINE_BYTES // 20  # each row is at least 20 bytes of JSON
    big = seeded.post("/predict", json={"task_id": "t", "X": [[0.123456789, 0.2, 0.3, 0.4]] * n})
    assert big.status_code == 200 and len(big.json()["predictions"]) == n and pool.calls == 2
    many = seeded.get("/predict", params={"task_id": "t", "x": [ROW] * (predict_routes.INLINE_VALUES // 4 + 1)})
    assert many.status_code == 200 and pool.calls == 3
    r = seeded.get("/predict", params={"task_id": "t", "x": ROW, "min_version": "3"})  # a version to check
    assert r.status_code == 409 and pool.calls == 4


def test_one_look_at_the_watch_per_request(seeded, monkeypatch):
    """An inline prediction reads the version watch once (to decide where to run) and is
    answered from that very snapshot; writers always look."""
    reader = seeded.app.state.model.reader
    assert seeded.get("/predict", params={"task_id": "t", "x": ROW}).status_code == 200  # checks the version
    looks = []
    token = reader.watch.token
    monkeypatch.setattr(reader.watch, "token", lambda name: looks.append(name) or token(name))
    assert seeded.get("/predict", params={"task_id": "t", "x": ROW}).status_code == 200
    assert seeded.post("/predict", json={"task_id": "t", "X": X4}).status_code == 200
    assert len(looks) == 2
    assert reader.snapshot(check=True) is not None and len(looks) == 3  # writers always look


def test_reader_fresh_says_when_no_query_is_needed(seeded):
    reader = seeded.app.state.model.reader
    assert seeded.get("/predict", params={"task_id": "t", "x": ROW}).status_code == 200
    snap = reader.fresh()
    assert snap is not None and snap is reader.cached
    assert reader.fresh(min_version=snap.version) is snap
    assert reader.fresh(min_version=snap.version + 1) is None
    X, y = regression_batch(np.random.default_rng(9))
    assert seeded.post("/tasks/t/data", json={"X": X, "y": y}).status_code == 200
    fresh = reader.fresh()  # the write moved the watch's token or the cache: no stale "fresh"
    assert fresh is None or fresh.version == snap.version + 1


# ----------------------------------------------------------------------------- metrics, log, OpenAPI
def metric(c, name: str) -> float:
    return sum(float(line.split()[-1]) for line in c.get("/metrics").text.splitlines() if line.startswith(name + " "))


def test_predictions_are_counted_and_logged(seeded, caplog):
    before = (metric(seeded, "fcl3_predictions_total"), metric(seeded, "fcl3_prediction_requests_total"))
    caplog.set_level("INFO", logger="service.access")
    caplog.clear()
    for prefix in prefixes(seeded):
        r = seeded.get(f"{prefix}/predict", params={"task_id": "t", "x": [ROW, ROW]}, headers={"X-Request-ID": "p-1"})
        assert r.status_code == 200 and r.headers["x-request-id"] == "p-1"
        assert seeded.post(f"{prefix}/predict", json={"task_id": "t", "X": X4 * 3}).status_code == 200
    assert seeded.get("/predict", params={"task_id": "nope", "x": ROW}).status_code == 404  # not a prediction
    after = (metric(seeded, "fcl3_predictions_total"), metric(seeded, "fcl3_prediction_requests_total"))
    assert after == (before[0] + 10, before[1] + 4)
    lines = [(rec.method, rec.path, rec.status) for rec in caplog.records if rec.name == "service.access"
             and "predict" in rec.path]
    name = seeded.app.state.settings.MODEL_NAME
    assert lines == [("GET", "/predict", 200), ("POST", "/predict", 200), ("GET", f"/models/{name}/predict", 200),
                     ("POST", f"/models/{name}/predict", 200), ("GET", "/predict", 404)]


def test_openapi_describes_the_four_operations(make_client):
    spec = make_client(API_READ_KEYS=READ).get("/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    for path, head in (("/predict", []), ("/models/{name}/predict", ["name"])):
        get, post = spec["paths"][path]["get"], spec["paths"][path]["post"]
        assert [p["name"] for p in get["parameters"]] == head + ["min_version", "task_id", "x"]
        assert [p["name"] for p in post["parameters"]] == head + ["min_version"]
        x = next(p for p in get["parameters"] if p["name"] == "x")
        assert x["in"] == "query" and x["required"] and x["schema"]["type"] == "array"
        body = post["requestBody"]["content"]["application/json"]["schema"]
        assert body["required"] == ["task_id", "X"] and body["additionalProperties"] is False
        assert "requestBody" not in get
        for op in (get, post):
            assert op["security"] and all(next(iter(s)) in schemes for s in op["security"])
            assert {"200", "401", "404", "409", "413", "422"} <= set(op["responses"])
            ok = op["responses"]["200"]["content"]["application/json"]["schema"]
            assert ok == {"$ref": "#/components/schemas/PredictOut"}
