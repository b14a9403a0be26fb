"""Every bad request gets a 4xx saying what is wrong and leaves the stored model unchanged."""
from __future__ import annotations

import json

import numpy as np
import pytest

from .conftest import regression_batch


@pytest.fixture
def seeded(backend_client):
    """A model with one learned task (d=4), plus a fingerprint of its stored state."""
    c = backend_client
    rng = np.random.default_rng(3)
    X, y = regression_batch(rng)
    assert c.post("/tasks/t/data", json={"X": X, "y": y}).status_code == 200
    return c


def fingerprint(c):
    m = c.get("/model").json()
    tasks = c.get("/tasks").json()["tasks"]
    pred = c.get("/predict", params={"task_id": "t", "x": "0.1,0.2,0.3,0.4"}).json()
    return (m["version"], m["n_batches"], m["n_tasks"], [(t["task_id"], t["n_samples"], t["version"]) for t in tasks],
            pred["predictions"])


def post_raw(c, task, text):
    return c.post(f"/tasks/{task}/data", content=text, headers={"content-type": "application/json"})


BAD_BATCHES = [
    # (name, raw JSON body, words the message must contain)
    ("wrong width", json.dumps({"X": [[1, 2, 3]], "y": [1]}), "features"),
    ("NaN", '{"X": [[1, 2, 3, NaN]], "y": [1]}', "nan"),
    ("infinity in X", '{"X": [[1, 2, 3, Infinity]], "y": [1]}', "inf"),
    ("infinity in y", '{"X": [[1, 2, 3, 4]], "y": [-Infinity]}', "inf"),
    ("huge number", '{"X": [[1, 2, 3, 1e999]], "y": [1]}', "inf"),
    ("empty batch", json.dumps({"X": [], "y": []}), "empty"),
    ("lengths differ", json.dumps({"X": [[1, 2, 3, 4], [1, 2, 3, 4]], "y": [1]}), "rows"),
    ("ragged rows", json.dumps({"X": [[1, 2, 3, 4], [1, 2]], "y": [1, 2]}), ""),
    ("string value", json.dumps({"X": [[1, 2, "a", 4]], "y": [1]}), "number"),
    ("numeric string", json.dumps({"X": [[1, 2, "3", 4]], "y": [1]}), "number"),
    ("boolean", json.dumps({"X": [[1, 2, True, 4]], "y": [1]}), "number"),
    ("null", json.dumps({"X": [[1, 2, None, 4]], "y": [1]}), "number"),
    ("X not a matrix", json.dumps({"X": [1, 2, 3, 4], "y": [1]}), "list"),
    ("unknown field", json.dumps({"X": [[1, 2, 3, 4]], "y": [1], "weights": [1]}), "extra"),
    ("missing y", json.dumps({"X": [[1, 2, 3, 4]]}), "missing"),
    ("not JSON", "{X: nope", "json"),
]


@pytest.mark.parametrize("name,body,words", BAD_BATCHES, ids=[b[0] for b in BAD_BATCHES])
@pytest.mark.parametrize("task", ["t", "new-task"])
def test_bad_batch_is_refused_and_changes_nothing(seeded, name, body, words, task):
    before = fingerprint(seeded)
    r = post_raw(seeded, task, body)
    assert r.status_code == 422, (name, r.status_code, r.text)
    assert words.lower() in r.text.lower(), r.text
    assert fingerprint(seeded) == before


def test_bad_labels_for_classification(make_client):
    c = make_client(FCL3_KIND="classification")
    X = [[0.0, 1.0], [1.0, 0.0], [2.0, 1.0]]
    ok = c.post("/tasks/a/data", json={"X": X, "y": [0, 1, 1]})
    assert ok.status_code == 200
    before = c.get("/model").json()["version"]
    for y, words in (([0, 2, 1], "labels"), ([0.5, 1, 0], "labels"), ([-1, 0, 1], "labels")):
        r = c.post("/tasks/b/data", json={"X": X, "y": y})
        assert r.status_code == 422 and words in r.json()["detail"], r.text
    r = c.post("/tasks/a/data", json={"X": X, "y": [-1, 1, 1]})  # task a came as {0, 1}
    assert r.status_code == 422 and "convention" in r.json()["detail"], r.text
    assert c.get("/model").json()["version"] == before
    assert c.get("/tasks").json()["count"] == 1


def test_unknown_task_is_404(seeded):
    before = fingerprint(seeded)
    assert seeded.get("/predict", params={"task_id": "nope", "x": "1,2,3,4"}).status_code == 404
    r = seeded.post("/predict", json={"task_id": "nope", "X": [[1, 2, 3, 4]]})
    assert r.status_code == 404 and "nope" in r.json()["detail"]
    assert seeded.get("/tasks/nope").status_code == 404
    assert fingerprint(seeded) == before


@pytest.mark.parametrize("params,words", [
    ({"task_id": "t", "x": "1,2,3"}, "features"),
    ({"task_id": "t", "x": "1,2,abc,4"}, "not a number"),
    ({"task_id": "t", "x": "1,2,,4"}, "not a number"),
    ({"task_id": "t", "x": "1,2,nan,4"}, "nan"),
    ({"task_id": "t", "x": "1,2,inf,4"}, "inf"),
    ({"task_id": "t"}, "missing"),
    ({"x": "1,2,3,4"}, "missing"),
], ids=["width", "non-numeric", "empty cell", "nan", "inf", "no x", "no task"])
def test_bad_get_predict(seeded, params, words):
    r = seeded.get("/predict", params=params)
    assert r.status_code == 422, r.text
    assert words in r.text.lower()


@pytest.mark.parametrize("body,words", [
    ({"task_id": "t", "X": [[1, 2, 3]]}, "features"),
    ({"task_id": "t", "X": []}, "empty"),
    ({"task_id": "t", "X": [[1, 2, "x", 4]]}, "number"),
    ({"task_id": "t", "X": [[1, 2, 3, 4]], "extra": 1}, "extra"),
], ids=["width", "empty", "non-numeric", "unknown field"])
def test_bad_post_predict(seeded, body, words):
    r = seeded.post("/predict", json=body)
    assert r.status_code == 422, r.text
    assert words in r.text.lower()


@pytest.mark.parametrize("path,body", [
    ("/predict", '{"task_id": "\\ud800", "X": [[1, 2, 3, 4]]}'),
    ("/models", '{"name": "m\\udfff"}'),
    ("/tasks/t/data", '{"X": [[1, 2, 3, 4]], "y": [1], "\\ud800": 1}'),
])
def test_a_lone_surrogate_is_a_422(seeded, path, body):
    """JSON may escape half a UTF-16 pair (``\\ud800``), which no UTF-8 text can hold: the 422
    says why in the error envelope, where a plain UTF-8 encoding of an echo would fail (500)."""
    before = fingerprint(seeded)
    r = seeded.post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    text = r.json()["detail"].lower()
    assert "unicode" in text or "escape" in text, r.text
    assert fingerprint(seeded) == before


def test_over_large_body_is_413(make_client):
    c = make_client(MAX_BODY_BYTES=2000)
    X = [[1.0, 2.0, 3.0, 4.0]] * 200
    r = c.post("/tasks/big/data", json={"X": X, "y": [1.0] * 200})
    assert r.status_code == 413 and "MAX_BODY_BYTES" in r.json()["detail"]
    # Streamed without Content-Length (chunked): also refused.
    body = json.dumps({"X": X, "y": [1.0] * 200}).encode()
    r = c.post("/tasks/big/data", content=iter([body[i:i + 500] for i in range(0, len(body), 500)]),
               headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert c.get("/model").json()["version"] == 0
    ok = c.post("/tasks/small/data", json={"X": X[:5], "y": [1.0, 2.0, 3.0, 4.0, 5.0]})
    assert ok.status_code == 200


def test_task_listing_offsets_up_to_the_database_limit(backend_client):
    """A huge offset is a 422, not a 500 from the database; the largest one it takes works."""
    c = backend_client
    assert c.post("/tasks/a/data", json={"X": [[0.0, 1.0], [1.0, 0.0]], "y": [0.5, 1.5]}).status_code == 200
    top = c.get("/tasks", params={"offset": 2**63 - 1})
    assert top.status_code == 200 and top.json()["count"] == 0, top.text
    for offset in (2**63, 10**30):
        r = c.get("/tasks", params={"offset": offset})
        assert r.status_code == 422 and "offset" in r.text, r.text
    assert c.get("/tasks", params={"offset": 0}).json()["count"] == 1


def test_evaluation_offsets_up_to_the_database_limit(backend_client):
    """``GET /evaluation``'s two offsets are bounded like the listings': a huge one is a 422 that
    names it, not a 500 from the database binding an integer wider than 64 bits; the largest
    one it takes gives an empty page."""
    c = backend_client
    assert c.post("/tasks/a/data", json={"X": [[0.0, 1.0], [1.0, 0.0]], "y": [0.5, 1.5]}).status_code == 200
    for name in ("offset", "matrix_offset"):
        top = c.get("/evaluation", params={name: 2**63 - 1})
        assert top.status_code == 200, top.text
        for offset in (2**63, 10**30):
            r = c.get("/evaluation", params={name: offset})
            assert r.status_code == 422 and name in r.text, r.text
    assert c.get("/evaluation", params={"offset": 2**63 - 1}).json()["prequential"] == []
