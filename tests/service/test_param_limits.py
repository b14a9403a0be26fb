"""Hyper-parameters out of their ranges are refused when a model is created (issue 22, row 3):
422 naming the parameter and its range, nothing stored, on both backends."""
from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx
import numpy as np
import pytest

import core
from service.models.state_files import to_npz

from .conftest import regression_batch, unique_name

#: (estimator, params, words of the answer): the issue's values first.
BAD = [
    ("FCL3", {"tol": -1, "max_outer_iter": 100_000_000}, ["max_outer_iter must be an integer in [0, 200]",
                                                          "tol must be a finite number in (0, 1]"]),
    ("FCL3", {"n_components": 100_000}, ["n_components must be an integer in [1, 50]"]),
    ("FCL3", {"tol": 0}, ["tol"]),
    ("FCL3", {"max_outer_iter": 201}, ["max_outer_iter"]),
    ("FCL3", {"max_outer_iter": 20.5}, ["max_outer_iter"]),
    ("FCL3", {"lambda2": 1e9}, ["lambda2"]),
    ("FCL3", {"ridge": 0}, ["ridge"]),
    ("FCL3", {"phi": "relu"}, ["phi must be one of 'identity', 'tanh'"]),
    ("FCL3", {"joint": 1}, ["joint must be true or false"]),
    ("FCL3", {"random_state": -1}, ["random_state"]),
    ("CL3", {"tol": -1}, ["CL3: tol"]),
    ("FCL3WithoutDecoder", {"n_components": 0}, ["n_components"]),
    ("ELLA", {"n_components": 51}, ["ELLA: n_components must be an integer in [1, 50]"]),
    ("ELLA", {"ridge": -1.0}, ["ridge"]),
    ("ELLA", {"code_l1": "big"}, ["code_l1"]),
    ("STL", {"mu": -1.0}, ["STL: mu must be a finite number in [0, 1,000,000]"]),
    ("STL", {"max_task_rows": 0}, ["max_task_rows"]),
    ("STL", {"standardize": "yes"}, ["standardize"]),
]


def total(c) -> int:
    return c.get("/models", params={"limit": 1}).json()["total"]


@pytest.mark.parametrize("estimator,params,words", BAD, ids=[f"{e}-{'-'.join(p)}" for e, p, _ in BAD])
def test_a_parameter_out_of_range_is_422_at_creation_and_nothing_is_created(backend_client, estimator, params, words):
    c = backend_client
    before = total(c)
    name = unique_name("bad")
    r = c.post("/models", json={"name": name, "kind": "regression", "estimator": estimator, "params": params})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    for w in words:
        assert w in detail, detail
    assert c.get(f"/models/{name}").status_code == 404
    assert total(c) == before
    assert c.post(f"/models/{name}/tasks/t/data", json=dict(zip("Xy", regression_batch(np.random.default_rng(0))))
                  ).status_code == 404


def test_the_ranges_allow_the_largest_values_and_the_model_learns(backend_client):
    c = backend_client
    name = unique_name("edge")
    r = c.post("/models", json={"name": name, "kind": "regression", "estimator": "FCL3",
                                "params": {"n_components": 50, "max_outer_iter": 200, "tol": 1e-300}})
    assert r.status_code == 201, r.text
    rng = np.random.default_rng(1)
    for i in range(3):
        X, y = regression_batch(rng, task=i)
        r = c.post(f"/models/{name}/tasks/t{i}/data", json={"X": X, "y": y})
        assert r.status_code == 200, r.text


def test_a_first_batch_too_wide_for_the_components_is_422_and_the_model_stays_empty(backend_client):
    """1,000 features at p = 5 would store a 200 MB decoder with every commit: refused."""
    c = backend_client
    name = unique_name("wide")
    assert c.post("/models", json={"name": name, "kind": "regression", "estimator": "FCL3",
                                   "params": {"n_components": 5}}).status_code == 201
    X = np.random.default_rng(2).normal(size=(3, 1000)).round(4).tolist()
    r = c.post(f"/models/{name}/tasks/t/data", json={"X": X, "y": [1.0, 2.0, 3.0]})
    assert r.status_code == 422, r.text
    assert "n_components" in r.json()["detail"] and "3,000" in r.json()["detail"]
    m = c.get(f"/models/{name}").json()
    assert m["version"] == 0 and m["n_tasks"] == 0


def test_an_imported_state_with_parameters_out_of_range_is_refused(backend_client):
    """A crafted model file cannot bring in what POST /models refuses."""
    c = backend_client
    learner = core.FCL3(n_components=2)
    rng = np.random.default_rng(3)
    learner.learn("t", *map(np.array, regression_batch(rng)))
    state = learner.get_state()
    state.params = {**state.params, "tol": -1, "max_outer_iter": 100_000_000}
    name = unique_name("imp")
    data = to_npz(state, {"model": name, "version": 1})
    before = total(c)
    r = c.post(f"/models/{name}/state", content=data, headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 422, r.text
    assert "max_outer_iter" in json.dumps(r.json())
    assert c.get(f"/models/{name}").status_code == 404 and total(c) == before


def test_sigterm_during_the_longest_updates_the_ranges_allow_ends_the_server_promptly(server_env, spawn, tmp_path):
    """The issue's model kept an update running for ever, so SIGTERM never ended the server.
    With every parameter at the costly end of its range, updates keep ending: SIGTERM in the
    middle of a stream of them stops the server gracefully within seconds."""
    server = spawn(server_env, log_path=tmp_path / "server.log").start()
    name = unique_name("slow")
    answered: list[int] = []
    with httpx.Client(base_url=server.url, timeout=60) as c:
        r = c.post("/models", json={"name": name, "kind": "regression", "estimator": "FCL3", "params": {
            "n_components": 50, "max_outer_iter": 200, "tol": 1e-300, "gamma": 0.0, "z_init": "uniform"}})
        assert r.status_code == 201, r.text

        def writer():
            rng = np.random.default_rng(4)
            with httpx.Client(base_url=server.url, timeout=60) as w:
                for i in range(1000):
                    try:
                        r = w.post(f"/models/{name}/tasks/t{i}/data",
                                   json=dict(zip("Xy", regression_batch(rng, task=i))))
                    except httpx.HTTPError:
                        return
                    if r.status_code != 200:
                        return
                    answered.append(i)

        th = threading.Thread(target=writer, daemon=True)
        th.start()
        deadline = time.monotonic() + 60
        while len(answered) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(answered) >= 5
    t0 = time.monotonic()
    os.killpg(server.proc.pid, signal.SIGTERM)
    server.proc.wait(30)
    assert time.monotonic() - t0 < 15
    assert server.proc.returncode in (0, -signal.SIGTERM)
    th.join(10)


def test_a_model_stored_with_a_parameter_out_of_range_still_reads_but_refuses_updates(backend_client):
    """A model stored before the ranges existed (the issue's tol = -1): its reads go on; an
    update is refused with 422 naming the parameter, instead of running for ever under the lock."""
    from service.store.writes import NewModel

    c = backend_client
    name = unique_name("old")
    rng = np.random.default_rng(6)
    learner = core.FCL3(n_components=2)
    learner.learn("t", *map(np.array, regression_batch(rng)))
    learner.tol, learner.max_outer_iter = -1, 100_000_000  # as stored before the ranges existed
    settings = {"estimator": "FCL3", "kind": "regression", "params": learner.get_params(), "d": None}
    settings["params"].pop("kind")
    c.app.state.models.get(name).writer.create(NewModel(learner, settings, version=1))
    probe = regression_batch(rng)[0]
    assert c.post(f"/models/{name}/predict", json={"task_id": "t", "X": probe}).status_code == 200
    assert c.get(f"/models/{name}").status_code == 200
    t0 = time.monotonic()
    r = c.post(f"/models/{name}/tasks/t/data", json=dict(zip("Xy", regression_batch(rng))))
    assert r.status_code == 422 and "max_outer_iter must be an integer in [0, 200]" in r.json()["detail"], r.text
    assert time.monotonic() - t0 < 5
    assert c.get(f"/models/{name}").json()["version"] == 1
