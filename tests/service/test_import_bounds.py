"""Crafted model files: a version past the bound (2^30), NaN or infinity in an array or in
the header's JSON are refused with 422 and nothing stored; a version at the bound imports and
still updates (issue 22, row 10). Both backends."""
from __future__ import annotations

import numpy as np
import pytest

from service.models.state_files import read_npz, to_npz

from .conftest import regression_batch, unique_name

MAX_IMPORTED_VERSION = 2**30  # service.models.lifecycle.MAX_IMPORTED_VERSION, as docs/operations.md documents it
NPZ = {"content-type": "application/octet-stream"}


@pytest.fixture
def exported(backend_client):
    """A learned model's file, read back: (client, state, service JSON)."""
    c = backend_client
    rng = np.random.default_rng(7)
    for task in ("a", "b"):
        X, y = regression_batch(rng)
        assert c.post(f"/tasks/{task}/data", json={"X": X, "y": y}).status_code == 200
    state, service = read_npz(c.get(f"/models/{c.get('/model').json()['name']}/state").content)
    return c, state, service


def _import(c, data: bytes):
    name = unique_name("imp")
    return name, c.post(f"/models/{name}/state", content=data, headers=NPZ)


def _refused(c, data: bytes, words: str) -> None:
    total = c.get("/models").json()["total"]
    name, r = _import(c, data)
    assert r.status_code == 422, (r.status_code, r.text)
    assert words in r.json()["detail"], r.text
    assert c.get(f"/models/{name}").status_code == 404
    assert c.get("/models").json()["total"] == total


@pytest.mark.parametrize("version", [2**63 - 1, 2**63, 2**70, 2**31 - 1, MAX_IMPORTED_VERSION + 1])
def test_a_version_past_the_bound_is_refused(exported, version):
    c, state, service = exported
    _refused(c, to_npz(state, {**service, "version": version}), "2^30")


def test_a_version_at_the_bound_imports_and_updates(exported):
    c, state, service = exported
    name, r = _import(c, to_npz(state, {**service, "version": MAX_IMPORTED_VERSION}))
    assert r.status_code == 201 and r.json()["version"] == MAX_IMPORTED_VERSION, r.text
    X, y = regression_batch(np.random.default_rng(8))
    u = c.post(f"/models/{name}/tasks/a/data", json={"X": X, "y": y})
    assert u.status_code == 200 and u.json()["version"] == MAX_IMPORTED_VERSION + 1, u.text
    assert c.get(f"/models/{name}").json()["version"] == MAX_IMPORTED_VERSION + 1


def test_task_counters_past_the_bound_are_not_stored(exported):
    c, state, service = exported
    tasks = {t: {**info, "n_batches": 2**70} for t, info in service["tasks"].items()}
    name, r = _import(c, to_npz(state, {**service, "tasks": tasks}))
    assert r.status_code == 201, r.text
    assert c.get(f"/models/{name}/tasks/a").json()["n_batches"] == 0


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_a_non_finite_library_or_task_array_is_refused(exported, value):
    c, state, service = exported
    key = next(k for k, a in state.arrays.items() if a.dtype.kind == "f" and a.size)
    bad = state.arrays[key].copy()
    bad.flat[0] = value
    _refused(c, to_npz(type(state)(**{**vars(state), "arrays": {**state.arrays, key: bad}}), service), "NaN or infinity")
    task = state.tasks["a"]
    tkey = next(k for k, a in task["arrays"].items() if a.dtype.kind == "f" and a.size)
    tbad = task["arrays"][tkey].copy()
    tbad.flat[0] = value
    tasks = {**state.tasks, "a": {**task, "arrays": {**task["arrays"], tkey: tbad}}}
    _refused(c, to_npz(type(state)(**{**vars(state), "tasks": tasks}), service), "NaN or infinity")


def test_nan_in_the_files_json_is_refused(exported):
    c, state, service = exported
    data = to_npz(state, {**service, "summary": {**service.get("summary", {}), "x": float("nan")}})
    _refused(c, data, "NaN is not a JSON value")
