"""``POST /models`` refuses what the engine would refuse later (issue 22, row 3): a ``d`` too
large for ``n_components`` is 422 at creation with nothing stored, and a fork of a model whose
stored settings are out of today's ranges (stored before the ranges existed) is 422, not 500.
On SQLite and on PostgreSQL + Redis."""
from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import update

import core
from core.params import MAX_SYSTEM_SIZE
from service.store.tables import models_t

from .conftest import regression_batch, unique_name


@pytest.fixture(params=["sqlite", "postgres"])
def client(request, make_client):
    if request.param == "postgres":
        return make_client("postgres", _request=request)
    return make_client("sqlite")


def stored_names(c) -> list[str]:
    return [m["name"] for m in c.get("/models", params={"limit": 1000}).json()["models"]]


@pytest.mark.parametrize("estimator", ["FCL3", "ELLA"])
def test_a_d_too_large_for_n_components_is_refused_at_creation(client, estimator):
    if estimator not in core.LEARNERS:
        pytest.skip(f"{estimator} is not in core")
    name = unique_name("big")
    r = client.post("/models", json={"name": name, "kind": "regression", "estimator": estimator,
                                     "params": {"n_components": 50}, "d": 1000})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "unknowns" in detail and f"{MAX_SYSTEM_SIZE:,}" in detail and "n_components" in detail, detail
    assert client.get(f"/models/{name}").status_code == 404  # nothing stored
    assert name not in stored_names(client)


def test_a_d_that_fits_is_created_and_learns(client):
    name = unique_name("fits")
    r = client.post("/models", json={"name": name, "kind": "regression", "estimator": "FCL3",
                                     "params": {"n_components": 3, "max_outer_iter": 10}, "d": 4})
    assert r.status_code == 201, r.text
    X, y = regression_batch(np.random.default_rng(1), d=4)
    assert client.post(f"/models/{name}/tasks/t/data", json={"X": X, "y": y}).status_code == 200


def test_a_learner_without_a_size_check_takes_any_d(client):
    """STL has no shared system to bound: its ``d`` is not checked against one."""
    name = unique_name("stl")
    r = client.post("/models", json={"name": name, "kind": "regression", "estimator": "STL", "d": 5000})
    assert r.status_code == 201, r.text


def _store_out_of_range_settings(c, name: str, params: dict) -> None:
    """Write ``params`` into the stored settings of ``name``, as a model stored before the
    parameter ranges existed has them."""
    engine = c.app.state.engine
    with engine.begin() as conn:
        settings = conn.execute(models_t.select().where(models_t.c.name == name)).mappings().one()["settings"]
        settings = {**settings, "params": {**settings["params"], **params}}
        conn.execute(update(models_t).where(models_t.c.name == name).values(settings=settings))


@pytest.mark.parametrize("with_batches", [False, True])
def test_forking_a_model_stored_with_out_of_range_params_is_422(client, with_batches):
    parent, child = unique_name("old"), unique_name("child")
    r = client.post("/models", json={"name": parent, "kind": "regression", "estimator": "FCL3",
                                     "params": {"n_components": 3, "max_outer_iter": 10}})
    assert r.status_code == 201, r.text
    if with_batches:
        X, y = regression_batch(np.random.default_rng(2))
        assert client.post(f"/models/{parent}/tasks/t/data", json={"X": X, "y": y}).status_code == 200
    _store_out_of_range_settings(client, parent, {"max_outer_iter": 100_000_000})
    r = client.post("/models", json={"name": child, "fork": {"model": parent}})
    assert r.status_code == 422, r.text  # before: 500 (model configuration error)
    detail = r.json()["detail"]
    assert f"model {parent!r} cannot be forked" in detail and "max_outer_iter" in detail, detail
    assert client.get(f"/models/{child}").status_code == 404  # nothing stored
    assert client.get(f"/models/{parent}").status_code == 200  # the parent is left as it was


def test_forking_a_model_whose_batches_its_stored_settings_now_refuse_is_422(client):
    """Stored settings in range, but too large a system for the stored batches' features (the
    size bound came later): the replay is refused, 422 naming the batch."""
    parent, child = unique_name("wide"), unique_name("child")
    assert client.post("/models", json={"name": parent, "kind": "regression", "estimator": "FCL3",
                                        "params": {"n_components": 3, "max_outer_iter": 10}}).status_code == 201
    X, y = regression_batch(np.random.default_rng(3), d=100)
    assert client.post(f"/models/{parent}/tasks/t/data", json={"X": X, "y": y}).status_code == 200
    _store_out_of_range_settings(client, parent, {"n_components": 50})  # 101 x 50 unknowns
    r = client.post("/models", json={"name": child, "fork": {"model": parent}})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert f"model {parent!r} cannot be forked" in detail and "batch 1" in detail and "unknowns" in detail, detail
    assert client.get(f"/models/{child}").status_code == 404
