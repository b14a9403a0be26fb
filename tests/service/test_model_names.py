"""Model names that look like paths (".", "..", a leading ".", "/" or "\\") are refused with 422
at creation and on every route of a model, and change nothing (issue 22, row 7). Both backends."""
from __future__ import annotations

import numpy as np
import pytest

from .conftest import PARAMS, regression_batch

BAD_NAMES = [".", "..", ".hidden", "..x", "a/b", "a\\b"]
# as each reaches a route: "." and ".." percent-encoded (a URL would resolve them), "/" encoded
IN_PATH = {".": "%2E", "..": "%2E%2E", ".hidden": ".hidden", "..x": "..x", "a/b": "a%2Fb", "a\\b": "a%5Cb"}


def _batch():
    X, y = regression_batch(np.random.default_rng(5))
    return {"X": X, "y": y}


def _state(c):
    m = c.get("/model").json()
    return m["version"], m["n_tasks"], c.get("/models").json()["total"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_path_like_model_name_is_refused_at_creation(backend_client, name):
    c = backend_client
    before = _state(c)
    r = c.post("/models", json={"name": name, "kind": "regression", "params": PARAMS})
    assert r.status_code == 422 and "name" in r.text, r.text
    assert _state(c) == before


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_path_like_model_name_is_refused_on_every_route(backend_client, name):
    c = backend_client
    assert c.post("/tasks/t/data", json=_batch()).status_code == 200
    before = _state(c)
    seg = IN_PATH[name]
    batch = _batch()
    calls = [
        ("GET", f"/models/{seg}", {}), ("DELETE", f"/models/{seg}", {}), ("GET", f"/models/{seg}/state", {}),
        ("POST", f"/models/{seg}/state", {"content": c.get(f"/models/{c.get('/model').json()['name']}/state").content,
                                          "headers": {"content-type": "application/octet-stream"}}),
        ("POST", f"/models/{seg}/tasks/t/data", {"json": batch}),
        ("POST", f"/models/{seg}/tasks/t/evaluation", {"json": batch}),
        ("GET", f"/models/{seg}/tasks", {}), ("GET", f"/models/{seg}/tasks/t", {}),
        ("GET", f"/models/{seg}/evaluation", {}), ("GET", f"/models/{seg}/events?max_seconds=0.1", {}),
        ("GET", f"/models/{seg}/predict?task_id=t&x=0.1,0.2,0.3,0.4", {}),
        ("POST", f"/models/{seg}/predict", {"json": {"task_id": "t", "X": [[0.1, 0.2, 0.3, 0.4]]}}),
    ]
    for method, path, kwargs in calls:
        r = c.request(method, path, **kwargs)
        if "/" in name:  # %2F is decoded before routing: no route of a model matches
            assert r.status_code in (404, 405, 422), (method, path, r.status_code, r.text)
        else:
            assert r.status_code == 422, (method, path, r.status_code, r.text)
    r = c.post("/models", json={"name": "child", "fork": {"model": name}})
    assert r.status_code == 422, r.text
    assert _state(c) == before


def test_names_with_dots_inside_are_still_valid(backend_client):
    c = backend_client
    for name in ("a.b", "v1.0", "x..y", "-a", "_a.", "a.."):
        assert c.post("/models", json={"name": name, "kind": "regression", "params": PARAMS}).status_code == 201, name
        assert c.post(f"/models/{name}/tasks/t/data", json=_batch()).status_code == 200, name
        assert c.get(f"/models/{name}").json()["version"] == 1
