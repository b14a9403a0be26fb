"""The client quotes every path segment, so that no name or task id can change the route:
``Client.learn("..", ...)`` wrote to the default model (``/models/../tasks/t/data`` is
``/tasks/t/data`` once a URL is resolved); issue 22, row 7. Both backends."""
from __future__ import annotations

import httpx
import numpy as np
import pytest

from fcl3 import Client, InvalidInput
from fcl3._calls import model_path, segment

from tests.service.conftest import PARAMS

from .conftest import WRITE_KEY


@pytest.mark.parametrize("value,sent", [(".", "%2E"), ("..", "%2E%2E"), ("a/b", "a%2Fb"), ("a?b#c", "a%3Fb%23c"),
                                        ("a b", "a%20b"), ("..x", "..x"), ("x.y", "x.y")])
def test_a_segment_is_quoted_and_never_a_dot_segment(value, sent):
    assert segment(value) == sent
    url = httpx.URL("http://h" + model_path(value) + "/tasks/t/data")
    assert url.raw_path == f"/models/{sent}/tasks/t/data".encode()  # not resolved away


@pytest.mark.parametrize("name", [".", "..", ".hidden"])
def test_learning_into_a_path_like_model_name_is_refused_and_changes_no_model(service, name):
    X = np.random.default_rng(0).normal(size=(6, 3))
    with Client(service.url, api_key=WRITE_KEY) as c:
        models = {m.name: m.version for m in c.list_models(limit=1000).models}
        default = httpx.get(f"{service.url}/model", headers={"Authorization": f"Bearer {WRITE_KEY}"}).json()
        with pytest.raises(InvalidInput):
            c.learn(name, "t", X, X.sum(axis=1))
        assert {m.name: m.version for m in c.list_models(limit=1000).models} == models
        again = httpx.get(f"{service.url}/model", headers={"Authorization": f"Bearer {WRITE_KEY}"}).json()
        assert again["version"] == default["version"]


def test_a_task_named_dot_dot_is_a_task_of_its_model(service, model_name):
    X = np.random.default_rng(1).normal(size=(6, 3))
    with Client(service.url, api_key=WRITE_KEY) as c:
        c.create_model(model_name, kind="regression", params=PARAMS)
        assert c.learn(model_name, "..", X, X.sum(axis=1)).task_id == ".."
        assert c.task(model_name, "..").n_samples == 6
