"""Many models over real uvicorn processes on PostgreSQL + Redis: kill -9 then identical
answers for every model; two processes updating two models at once."""
from __future__ import annotations

import threading
import time

import httpx
import numpy as np
import pytest

import core

from .conftest import ESTIMATOR, PARAMS, regression_batch, unique_name

pytestmark = pytest.mark.slow

PROBE = np.random.default_rng(77).normal(size=(4, 4)).tolist()


def create(client: httpx.Client, name: str) -> None:
    r = client.post("/models", json={"name": name, "kind": "regression", "estimator": ESTIMATOR, "params": PARAMS})
    assert r.status_code == 201, r.text


def answers(client: httpx.Client, models: dict[str, list[str]]) -> dict:
    out = {}
    for name, tasks in models.items():
        for t in tasks:
            r = client.post(f"/models/{name}/predict", json={"task_id": t, "X": PROBE})
            assert r.status_code == 200, r.text
            out[name, t] = r.json()
        out[name] = client.get(f"/models/{name}").json()["version"]
    return out


def test_kill_9_then_identical_answers_for_every_model(server_env, tmp_path, spawn):
    server = spawn(server_env, log_path=tmp_path / "uvicorn.log").start()
    default = server_env["MODEL_NAME"]
    models = {default: [], unique_name("k9a"): [], unique_name("k9b"): [], unique_name("k9c"): []}
    rng = np.random.default_rng(30)
    with httpx.Client(base_url=server.url, timeout=30) as c:
        for name in list(models)[1:]:
            create(c, name)
        for i in range(12):
            name = list(models)[i % 4]
            task = f"t{i % 3}"
            X, y = regression_batch(rng, task=i)
            r = c.post(f"/models/{name}/tasks/{task}/data", json={"X": X, "y": y})
            assert r.status_code == 200, r.text
            if task not in models[name]:
                models[name].append(task)
        before = answers(c, models)
        assert c.post("/predict", json={"task_id": models[default][0], "X": PROBE}).json() == \
            before[default, models[default][0]]
    server.kill9()
    server.start()
    with httpx.Client(base_url=server.url, timeout=30) as c:
        assert answers(c, models) == before


def test_two_processes_update_two_models_at_once(server_env, tmp_path, spawn):
    """Process 1 streams batches into model A while process 2 streams into model B: no update
    refused or lost, each model's versions are exactly 1..N, and each equals the replay of
    its own batches (a task id means nothing across models)."""
    env = {**server_env, "LOCK_WAIT": "10"}
    s1 = spawn(env, log_path=tmp_path / "s1.log").start()
    s2 = spawn(env, log_path=tmp_path / "s2.log").start()
    a, b = unique_name("para"), unique_name("parb")
    with httpx.Client(base_url=s1.url, timeout=30) as c:
        create(c, a)
        create(c, b)
    n = 15
    sent: dict[str, list] = {a: [], b: []}
    versions: dict[str, list[int]] = {a: [], b: []}
    errors: list[str] = []
    barrier = threading.Barrier(2)
    spans: dict[str, tuple[float, float]] = {}

    def stream(url: str, name: str, seed: int):
        rng = np.random.default_rng(seed)
        with httpx.Client(base_url=url, timeout=30) as c:
            barrier.wait()
            t0 = time.monotonic()
            for i in range(n):
                task = f"t{i % 3}"  # the same task ids in both models
                X, y = regression_batch(rng, task=seed + i)
                r = c.post(f"/models/{name}/tasks/{task}/data", json={"X": X, "y": y})
                if r.status_code != 200:
                    errors.append(f"{name}: {r.status_code} {r.text}")
                    continue
                sent[name].append((task, X, y))
                versions[name].append(r.json()["version"])
            spans[name] = (t0, time.monotonic())

    threads = [threading.Thread(target=stream, args=(s1.url, a, 1)), threading.Thread(target=stream, args=(s2.url, b, 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert versions[a] == versions[b] == list(range(1, n + 1))
    (a0, a1), (b0, b1) = spans[a], spans[b]
    assert a0 < b1 and b0 < a1  # the two streams overlapped in time
    for name, other in ((a, s2), (b, s1)):  # each model, read through the other process
        replay = core.learner_class(ESTIMATOR)(kind="regression", **PARAMS)
        for task, X, y in sent[name]:
            replay.learn(task, np.array(X), np.array(y))
        with httpx.Client(base_url=other.url, timeout=30) as c:
            assert c.get(f"/models/{name}").json()["version"] == n
            for t in ("t0", "t1", "t2"):
                got = c.post(f"/models/{name}/predict", json={"task_id": t, "X": PROBE}).json()
                assert got["predictions"] == replay.predict(t, np.array(PROBE)).tolist()
