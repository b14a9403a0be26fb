"""The prediction routes' fast path (service.api.routes.predict.PredictRoute) answers exactly
what the declared routes answer: the same statuses, bodies and error messages, the same
metrics; it is on for the four prediction routes, and off when it cannot stand in for a
route's dependencies."""
from __future__ import annotations

import json

from urllib.parse import parse_qsl

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from fastapi import APIRouter, Depends, FastAPI
from fastapi.testclient import TestClient

from service.api.routes import predict as predict_routes

from .conftest import regression_batch

WRITE, READ = "fast-write-key", "fast-read-key"


class Spy:
    """Counts the requests the fast path answered, and those it ran in the thread pool."""

    def __init__(self, monkeypatch):
        self.fast = self.threadpool = self.shortcut = 0
        fast, pool, answer = predict_routes._fast, predict_routes.run_in_threadpool, predict_routes._shortcut_answer

        async def counting_fast(request, **kwargs):
            response = await fast(request, **kwargs)
            self.fast += 1
            return response

        def counting_shortcut(*args):
            content = answer(*args)
            if content is not None:
                self.fast += 1
                self.shortcut += 1
            return content

        async def counting_pool(*args, **kwargs):
            self.threadpool += 1
            return await pool(*args, **kwargs)

        monkeypatch.setattr(predict_routes, "_fast", counting_fast)
        monkeypatch.setattr(predict_routes, "_shortcut_answer", counting_shortcut)
        monkeypatch.setattr(predict_routes, "run_in_threadpool", counting_pool)


def declared(client: TestClient):
    """Turn the fast path off (any dependency override does) for the requests in the block."""

    class Off:
        def __enter__(self):
            client.app.dependency_overrides[_unused] = _unused

        def __exit__(self, *exc):
            client.app.dependency_overrides.pop(_unused, None)

    return Off()


def _unused():  # pragma: no cover - never called
    return None


def both(client: TestClient, method: str, url: str, **kwargs):
    """The answer of the fast path and of the declared route to the same request."""
    fast = client.request(method, url, **kwargs)
    with declared(client):
        slow = client.request(method, url, **kwargs)
    return fast, slow


def same(fast, slow):
    assert fast.status_code == slow.status_code, (fast.text, slow.text)
    assert fast.headers["content-type"] == slow.headers["content-type"]
    if fast.headers["content-type"].startswith("application/json"):
        assert fast.json() == slow.json()  # the same numbers, to the last bit
    else:
        assert fast.text == slow.text
    for header in ("www-authenticate", "retry-after"):
        assert fast.headers.get(header) == slow.headers.get(header)


@pytest.fixture
def seeded(make_client):
    c = make_client()
    rng = np.random.default_rng(3)
    for task in ("t", "u"):
        X, y = regression_batch(rng)
        assert c.post(f"/tasks/{task}/data", json={"X": X, "y": y}).status_code == 200
    return c


ROW = "0.1,0.2,0.3,0.4"
GETS = [
    {"task_id": "t", "x": ROW},
    {"task_id": "t", "x": [ROW, "1,2,3,4", "-1e300,0,0,1e-300"]},
    {"task_id": "t", "x": ROW, "min_version": "0"},
    {"task_id": "t", "x": ROW, "min_version": "2"},
    {"task_id": "t", "x": ROW, "min_version": "007"},
    {"task_id": "t", "x": ROW, "min_version": "3"},  # past the stored version: 409
    {"task_id": "t", "x": ROW, "min_version": "99999999999999999999999"},
    {"task_id": "t", "x": ROW, "min_version": "-1"},
    {"task_id": "t", "x": ROW, "min_version": "abc"},
    {"task_id": "t", "x": ROW, "min_version": ""},
    {"task_id": "t", "x": ROW, "min_version": " 1"},
    {"task_id": "nope", "x": ROW},
    {"task_id": "", "x": ROW},
    {"task_id": "t" * 201, "x": ROW},
    {"task_id": ["u", "t"], "x": ROW},
    {"task_id": "t", "x": "1,2,3"},
    {"task_id": "t", "x": "1,2,abc,4"},
    {"task_id": "t", "x": "1,2,,4"},
    {"task_id": "t", "x": "1,2,nan,4"},
    {"task_id": "t", "x": "1,2,inf,4"},
    {"task_id": "t", "x": "1,2,1e999,4"},
    {"task_id": "t", "x": ""},
    {"task_id": "t"},
    {"x": ROW},
    {"task_id": "t", "x": ROW, "other": "1"},
]


@pytest.mark.parametrize("params", GETS, ids=[json.dumps(p)[:60] for p in GETS])
def test_get_answers_as_declared(seeded, params):
    same(*both(seeded, "GET", "/predict", params=params))


X4 = [[0.1, 0.2, 0.3, 0.4]]
POSTS = [
    {"task_id": "t", "X": X4},
    {"task_id": "t", "X": np.resize(np.linspace(-3, 3, 40), (100, 4)).tolist()},
    {"task_id": "t", "X": [[1, 2, 3, 4]]},
    {"task_id": "nope", "X": X4},
    {"task_id": "t", "X": [[1, 2, 3]]},
    {"task_id": "t", "X": [[1, 2, 3, 4], [1, 2]]},
    {"task_id": "t", "X": []},
    {"task_id": "t", "X": [[1, 2, "x", 4]]},
    {"task_id": "t", "X": [[1, 2, "3", 4]]},
    {"task_id": "t", "X": [[1, 2, True, 4]]},
    {"task_id": "t", "X": [[1, 2, None, 4]]},
    {"task_id": "t", "X": [1, 2, 3, 4]},
    {"task_id": "t", "X": X4, "extra": 1},
    {"task_id": "", "X": X4},
    {"task_id": 5, "X": X4},
    {"X": X4},
    {"task_id": "t"},
    [1, 2],
]
RAW_POSTS = [
    '{"task_id": "t", "X": [[1, 2, 3, NaN]]}',
    '{"task_id": "t", "X": [[1, 2, 3, Infinity]]}',
    '{"task_id": "t", "X": [[1, 2, 3, 1e999]]}',
    '{"task_id": "t", "X": [[1, 2, 3, 1%s]]}' % ("0" * 400),
    '{"task_id": "u", "X": [[1, 2, 3, 4]], "task_id": "t"}',
    '{"task_id": "t", "X": [[1, 2, 3, 4]]',
    "{X: nope",
    "",
    "null",
    '"t"',
    # where JSON decoders are known to differ (the fast path decodes with msgspec, the route with pydantic)
    '{"task_id": "t", "X": [[1, 2, 3, 4]], "X": [[4, 3, 2, 1]]}',
    '{"task_id": "t", "X": [[1, 2, 3, 123456789012345678901234567890]]}',
    '{"task_id": "t", "X": [[1, 2, 3, -9223372036854775809]]}',
    '{"task_id": "t", "X": [[1, 2, 3, 1e-400]]}',
    '{"task_id": "t", "X": [[1, 2, 3, -0]]}',
    '{"task_id": "t", "X": [[1, 2, 3, 01]]}',
    '{"task_id": "t", "X": [[1, 2, 3, 1.]]}',
    '{"task_id": "t", "X": [[1, 2, 3, .5]]}',
    '{"task_id": "t", "X": [[1, 2, 3, 4]],}',
    '{"task_id": "t", "X": [[1, 2, 3, 4]]} x',
    '\ufeff{"task_id": "t", "X": [[1, 2, 3, 4]]}',
    '{"task_id": "\\ud800", "X": [[1, 2, 3, 4]]}',
    '{"task_id": "\\u0000", "X": [[1, 2, 3, 4]]}',
    '{"task_id": "%s", "X": [[1, 2, 3, 4]]}' % ("\u00e9" * 200),
    '{"task_id": "%s", "X": [[1, 2, 3, 4]]}' % ("\u00e9" * 201),
    '{"task_id": "t", "X": [[]]}',
    '{"task_id": "t", "X": [[[1, 2, 3, 4]]]}',
    '{"task_id": "t", "X": [[1, 2, 3, 4], []]}',
]


@pytest.mark.parametrize("body", POSTS, ids=[json.dumps(b)[:60] for b in POSTS])
def test_post_answers_as_declared(seeded, body):
    same(*both(seeded, "POST", "/predict", json=body))


@pytest.mark.parametrize("raw", RAW_POSTS)
@pytest.mark.parametrize("ctype", ["application/json", "application/json; charset=utf-8", "text/plain", None])
def test_raw_post_answers_as_declared(seeded, raw, ctype):
    headers = {} if ctype is None else {"content-type": ctype}
    same(*both(seeded, "POST", "/predict", content=raw.encode(), headers=headers))


_cell = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-2**70, 2**70), st.booleans(), st.none(), st.text(max_size=3))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.fixed_dictionaries(
    {"task_id": st.one_of(st.sampled_from(["t", "u", "nope", ""]), st.text(max_size=3)),
     "X": st.one_of(st.lists(st.lists(st.floats(-1e6, 1e6), min_size=4, max_size=4), min_size=1, max_size=3),
                    st.lists(st.lists(_cell, max_size=5), max_size=3))},
    optional={"other": st.integers()}))
def test_any_post_answers_as_declared(seeded, body):
    same(*both(seeded, "POST", "/predict", json=body))


def test_post_with_min_version(seeded):
    for mv in ("1", "2", "3", "x"):
        same(*both(seeded, "POST", f"/predict?min_version={mv}", json={"task_id": "t", "X": X4}))


def test_named_models_answer_as_declared(make_client):
    c = make_client()
    assert c.post("/models", json={"name": "other", "kind": "classification"}).status_code == 201
    X = [[0.0, 1.0], [1.0, 0.0], [2.0, 1.0], [0.5, 0.5]]
    assert c.post("/models/other/tasks/a/data", json={"X": X, "y": [0, 1, 1, 0]}).status_code == 200
    fast, slow = both(c, "POST", "/models/other/predict", json={"task_id": "a", "X": X})
    same(fast, slow)
    assert "probabilities" in fast.json() and len(fast.json()["probabilities"]) == 4
    same(*both(c, "GET", "/models/other/predict", params={"task_id": "a", "x": ["0,1", "1,0"]}))
    same(*both(c, "GET", "/models/missing/predict", params={"task_id": "a", "x": "0,1"}))
    same(*both(c, "GET", "/models/bad name!/predict", params={"task_id": "a", "x": "0,1"}))
    same(*both(c, "POST", "/models/missing/predict", json={"task_id": "a", "X": X}))


def test_regression_answer_has_no_probabilities(seeded):
    r = seeded.get("/predict", params={"task_id": "t", "x": ROW})
    assert r.status_code == 200 and set(r.json()) == {"task_id", "predictions", "version"}


def test_task_id_is_encoded_as_json(make_client):
    c = make_client()
    X, y = regression_batch(np.random.default_rng(1))
    tasks = ['q"uote\\back', "ünïcødé", "tab\tline", "<b>&amp;", "\u2028"]
    for task in tasks:
        from urllib.parse import quote

        assert c.post(f"/tasks/{quote(task, safe='')}/data", json={"X": X, "y": y}).status_code == 200
    for task in tasks:
        fast, slow = both(c, "GET", "/predict", params={"task_id": task, "x": ROW})
        assert fast.status_code == 200 and fast.json()["task_id"] == task
        same(fast, slow)
        same(*both(c, "POST", "/predict", json={"task_id": task, "X": X4}))


@pytest.mark.parametrize("auth", [None, f"Bearer {READ}", f"Bearer {WRITE}", "Bearer nope", f"bearer {READ}",
                                  f"Basic {READ}", "Bearer", f"Bearer  {READ}  ", READ])
def test_keys_are_checked_as_declared(make_client, auth):
    c = make_client(API_WRITE_KEYS=WRITE, API_READ_KEYS=READ)
    X, y = regression_batch(np.random.default_rng(2))
    assert c.post("/tasks/t/data", json={"X": X, "y": y}, headers={"Authorization": f"Bearer {WRITE}"}).status_code == 200
    headers = {} if auth is None else {"Authorization": auth}
    same(*both(c, "GET", "/predict", params={"task_id": "t", "x": ROW}, headers=headers))
    same(*both(c, "POST", "/predict", json={"task_id": "t", "X": X4}, headers=headers))


def test_fast_path_is_taken_and_counted(seeded, monkeypatch):
    """The four routes answer through the fast path (on the event loop: the model is current),
    and the prediction metrics count its answers as before."""
    spy = Spy(monkeypatch)
    text = seeded.get("/metrics").text

    def metric(text, name):
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))

    before = (metric(text, "fcl3_predictions_total"), metric(text, "fcl3_prediction_requests_total"))
    assert seeded.get("/predict", params={"task_id": "t", "x": [ROW, ROW]}).status_code == 200
    assert seeded.post("/predict", json={"task_id": "t", "X": X4 * 3}).status_code == 200
    name = seeded.app.state.settings.MODEL_NAME
    assert seeded.get(f"/models/{name}/predict", params={"task_id": "t", "x": ROW}).status_code == 200
    assert seeded.post(f"/models/{name}/predict", json={"task_id": "t", "X": X4}).status_code == 200
    assert spy.fast == 4
    text = seeded.get("/metrics").text
    after = (metric(text, "fcl3_predictions_total"), metric(text, "fcl3_prediction_requests_total"))
    assert after == (before[0] + 7, before[1] + 4)


def test_large_requests_and_stale_models_go_to_the_thread_pool(seeded, monkeypatch):
    spy = Spy(monkeypatch)
    assert seeded.get("/predict", params={"task_id": "t", "x": ROW}).status_code == 200
    assert spy.threadpool == 1  # the first read after a write checks the version: in the thread pool
    assert seeded.get("/predict", params={"task_id": "t", "x": ROW}).status_code == 200
    assert spy.threadpool == 1  # small, model current: on the event loop
    row = [0.123456789, 0.2, 0.3, 0.4]
    n = predict_routes.INLINE_BYTES // 20  # each row is at least 20 bytes of JSON
    big = seeded.post("/predict", json={"task_id": "t", "X": [row] * n})
    assert big.status_code == 200 and len(big.json()["predictions"]) == n
    assert spy.threadpool == 2
    many = seeded.get("/predict", params={"task_id": "t", "x": [ROW] * (predict_routes.INLINE_VALUES // 4 + 1)})
    assert many.status_code == 200 and spy.threadpool == 3
    # a version to check (min_version above the cached one: the reader must ask the database)
    r = seeded.get("/predict", params={"task_id": "t", "x": ROW, "min_version": "3"})
    assert r.status_code == 409 and spy.threadpool == 4
    assert spy.fast == 4  # the 409 is raised by the fast path's predict, as the declared route raises it


def test_unknown_dependency_turns_the_fast_path_off(make_client):
    """A prediction router included with a dependency the fast path does not know is answered
    as declared (the dependency runs)."""
    calls = []

    def audit():
        calls.append(1)

    c = make_client()
    app = FastAPI()
    app.state.__dict__.update(c.app.state.__dict__)
    app.include_router(predict_routes.router, dependencies=[Depends(audit)])
    X, y = regression_batch(np.random.default_rng(3))
    assert c.post("/tasks/t/data", json={"X": X, "y": y}).status_code == 200
    with TestClient(app) as other:
        r = other.get("/predict", params={"task_id": "t", "x": ROW})
        assert r.status_code == 200, r.text
        assert other.post("/predict", json={"task_id": "t", "X": X4}).status_code == 200
    assert len(calls) == 2


def test_plain_router_without_include_dependencies_keeps_the_fast_path(make_client, monkeypatch):
    spy = Spy(monkeypatch)
    c = make_client()
    app = FastAPI()
    app.state.__dict__.update(c.app.state.__dict__)
    router = APIRouter()
    router.include_router(predict_routes.router)
    app.include_router(router)
    X, y = regression_batch(np.random.default_rng(3))
    assert c.post("/tasks/t/data", json={"X": X, "y": y}).status_code == 200
    with TestClient(app) as other:
        assert other.get("/predict", params={"task_id": "t", "x": ROW}).status_code == 200
    assert spy.fast == 1


def test_reader_fresh_says_when_no_query_is_needed(seeded):
    reader = seeded.app.state.model.reader
    assert seeded.get("/predict", params={"task_id": "t", "x": ROW}).status_code == 200
    snap = reader.fresh()
    assert snap is not None and snap is reader.cached
    assert reader.fresh(min_version=snap.version) is snap
    assert reader.fresh(min_version=snap.version + 1) is None
    X, y = regression_batch(np.random.default_rng(9))
    assert seeded.post("/tasks/t/data", json={"X": X, "y": y}).status_code == 200
    # the write moved the watch's token (SQLite's data_version) or the cache: no stale "fresh"
    fresh = reader.fresh()
    assert fresh is None or fresh.version == snap.version + 1


def test_get_shortcut_keeps_request_id_log_and_metrics(seeded, monkeypatch, caplog):
    """A GET /predict answered before routing (service.middleware.RequestContext's shortcut)
    still gets its request id, its access log line and its request metrics."""
    spy = Spy(monkeypatch)
    assert seeded.get("/predict", params={"task_id": "t", "x": ROW}).status_code == 200  # checks the version
    text = seeded.get("/metrics").text

    def metric(text, name):
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))

    key = 'fcl3_http_requests_total{method="GET",status="200"}'
    before = metric(text, key)
    caplog.set_level("INFO", logger="service.access")
    caplog.clear()
    r = seeded.get("/predict", params={"task_id": "t", "x": ROW}, headers={"X-Request-ID": "shortcut-1"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "shortcut-1"
    assert spy.shortcut == 1  # answered before routing
    lines = [rec for rec in caplog.records if rec.name == "service.access"]
    assert [(rec.path, rec.status) for rec in lines] == [("/predict", 200)]
    assert metric(seeded.get("/metrics").text, key) == before + 2  # this request and the first /metrics
    name = seeded.app.state.settings.MODEL_NAME
    assert seeded.get(f"/models/{name}/predict", params={"task_id": "t", "x": ROW}).status_code == 200
    assert spy.shortcut == 2
    # not for POST, HEAD, a path with a trailing slash or another model's bad name
    assert seeded.post("/predict", json={"task_id": "t", "X": X4}).status_code == 200
    assert seeded.get("/predict/", params={"task_id": "t", "x": ROW}, follow_redirects=False).status_code in (307, 404)
    assert seeded.get("/models/bad name!/predict", params={"task_id": "t", "x": ROW}).status_code == 422
    assert spy.shortcut == 2


def test_one_look_at_the_watch_per_request(seeded, monkeypatch):
    """An inline prediction reads the version watch once (to decide where to run) and is
    answered from that very snapshot (handed to usecases.predict); writers always look."""
    reader = seeded.app.state.model.reader
    assert seeded.get("/predict", params={"task_id": "t", "x": ROW}).status_code == 200  # checks the version
    looks = []
    token = reader.watch.token
    monkeypatch.setattr(reader.watch, "token", lambda name: looks.append(name) or token(name))
    assert seeded.get("/predict", params={"task_id": "t", "x": ROW}).status_code == 200
    assert seeded.post("/predict", json={"task_id": "t", "X": X4}).status_code == 200
    assert len(looks) == 2
    assert reader.snapshot(check=True) is not None and len(looks) == 3  # writers always look


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=8), st.text(max_size=12)), max_size=6),
       st.sampled_from(["&", "&&", "&=&"]), st.booleans())
def test_query_pairs_split_as_parse_qsl(pairs, glue, raw):
    """The shortcut's query parser gives what starlette's parse_qsl gives, quoted or not."""
    from urllib.parse import quote

    def enc(text):
        return text if raw and all(c not in text for c in "&=%+#") else quote(text, safe=",")

    query = glue.join(f"{enc(k)}={enc(v)}" for k, v in pairs)
    try:
        raw_bytes = query.encode("latin-1")
    except UnicodeEncodeError:
        return  # a query string arrives as latin-1 bytes
    assert predict_routes._query_pairs(raw_bytes) == parse_qsl(query, keep_blank_values=True)
