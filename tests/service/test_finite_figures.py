"""A batch whose errors overflow float64 (values of 1e154 after a normal batch) is learned,
unscored: no infinite figure is stored (PostgreSQL's JSON cannot hold one: it answered 500) or
answered (SQLite answered `"rmse": null`, against the schema), and every answer conforms to the
OpenAPI schema, on both backends (issue 22, rows 4 and 5)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import schemathesis

from service.evaluation.scores import RegressionSums, add_sums, scores

from .conftest import PARAMS, unique_name

HUGE = {"X": [[1e154, 1e154, 1.0], [1.0, 2.0, 3.0]], "y": [1.0, 2.0]}


def _normal_batch(seed: int = 0, n: int = 20) -> dict:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return {"X": X.tolist(), "y": (X @ np.array([3.0, 3.0, 1.0])).tolist()}


def _finite_figures(value) -> None:
    """Every number in a JSON value is finite, and no Scores figure is null."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k in ("rmse", "mae", "baseline_rmse", "baseline_mae", "log_loss", "accuracy"):
                assert isinstance(v, (int, float)) and math.isfinite(v), (k, v)
            _finite_figures(v)
    elif isinstance(value, list):
        for v in value:
            _finite_figures(v)


@pytest.fixture
def overflowed(backend_client):
    """A model that learned a normal batch of task t, then was sent the overflowing batch."""
    c = backend_client
    name = unique_name("fig")
    assert c.post("/models", json={"name": name, "kind": "regression", "params": PARAMS}).status_code == 201
    assert c.post(f"/models/{name}/tasks/t/data", json=_normal_batch()).status_code == 200
    r = c.post(f"/models/{name}/tasks/t/data", json=HUGE)
    return c, name, r


def test_an_overflowing_batch_is_never_a_500_and_stores_no_infinite_figure(overflowed):
    c, name, r = overflowed
    assert r.status_code in (200, 422), r.text  # PostgreSQL: 500 (JSON Infinity)
    version = c.get(f"/models/{name}").json()["version"]
    assert version == (2 if r.status_code == 200 else 1)
    if r.status_code == 200:
        assert r.json()["prequential"] is None  # not scored: its errors are not finite
    # A later batch is scored as usual, and the model's figures stay finite.
    after = c.post(f"/models/{name}/tasks/t/data", json=_normal_batch(seed=1, n=5))
    assert after.status_code == 200, after.text
    assert after.json()["prequential"] is not None and after.json()["prequential"]["n"] == 5
    overall = c.get(f"/models/{name}").json()["prequential"]["overall"]
    assert overall is not None and overall["n"] == 5
    _finite_figures(overall)


def test_every_answer_after_an_overflowing_batch_conforms_to_the_schema(overflowed):
    c, name, r = overflowed
    assert r.status_code != 500, r.text
    schema = schemathesis.openapi.from_asgi("/openapi.json", c.app)
    if r.status_code == 200:
        schema["/models/{name}/tasks/{task_id}/data"]["POST"].validate_response(r)
    for template, path in [("/models/{name}", f"/models/{name}"), ("/models/{name}/tasks", f"/models/{name}/tasks"),
                           ("/models/{name}/tasks/{task_id}", f"/models/{name}/tasks/t"),
                           ("/models/{name}/evaluation", f"/models/{name}/evaluation")]:
        answer = c.get(path)
        assert answer.status_code == 200, (path, answer.text)
        schema[template]["GET"].validate_response(answer)
        _finite_figures(answer.json())


def test_sums_stay_finite_and_figures_of_infinite_sums_are_not_shown():
    ok = RegressionSums(2, 4.0, 2.0, 8.0, 4.0)
    huge = RegressionSums(2, 1.5e308, 1e154, 1.5e308, 1e154)
    assert add_sums(ok, huge) == ok + huge
    assert add_sums(ok + huge, huge) == ok + huge  # would overflow: the batch is left out
    assert scores(RegressionSums(2, math.inf, 1.0, 1.0, 1.0)) is None  # e.g. stored before sums were kept finite
    assert scores(ok) == {"n": 2, "rmse": math.sqrt(2.0), "mae": 1.0, "baseline_rmse": 2.0, "baseline_mae": 2.0}
