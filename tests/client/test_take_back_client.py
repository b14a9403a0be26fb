"""Taking a batch back through the client and ``fcl3 take-back`` (issue 23, part 2), against
real services (SQLite, and PostgreSQL + Redis), and the retry of a lost answer (scripted)."""
from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest
from click.testing import CliRunner

from fcl3 import APIError, AsyncClient, Client, Conflict, NotFound
from fcl3.cli import main
from tests.service.conftest import PARAMS

from .conftest import WRITE_KEY, Script, scripted

TAKE_BACK = {"version": 4, "batch_version": 2, "task_id": "b", "n_samples": 12, "task_removed": True,
             "task_n_samples": 0, "n_replayed": 2, "n_representatives": 1}


def batch(rng, n=12, d=4):
    X = rng.normal(size=(n, d))
    return X, X @ np.linspace(-1, 1, d) + 0.1 * rng.normal(size=n)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _three_batches(c, name, rng):
    c.create_model(name, "regression", params=PARAMS)
    for task in "aba":
        c.learn(name, task, *batch(rng))


def test_a_retry_of_a_batch_taken_back_since_raises_gone(service, model_name):
    """Issue 55: the key's batch was taken back after its answer: the retry is refused (410,
    ``Gone``, saying by which version), nothing learned again."""
    from fcl3 import Gone

    rng = np.random.default_rng(2)
    with Client(service.url, api_key=WRITE_KEY) as c:
        _three_batches(c, model_name, rng)
        X, y = batch(rng)
        first = c.learn(model_name, "c", X, y, idempotency_key="gone-1")
        c.take_back(model_name, first.version)
        with pytest.raises(Gone) as exc:
            c.learn(model_name, "c", X, y, idempotency_key="gone-1")
        assert exc.value.status == 410 and exc.value.headers["X-Model-Version"] == str(first.version + 1)
        assert f"taken back by version {first.version + 1}" in exc.value.message
        assert c.get_model(model_name).version == first.version + 1


@pytest.mark.slow
def test_the_client_takes_a_batch_back(service, model_name):
    rng = np.random.default_rng(1)
    with Client(service.url, api_key=WRITE_KEY) as c:
        _three_batches(c, model_name, rng)
        out = c.take_back(model_name, 2, idempotency_key="tb-1")
        assert out.model_dump() == {**TAKE_BACK, "n_representatives": out.n_representatives}
        assert c.take_back(model_name, 2, idempotency_key="tb-1") == out  # the retry: its first answer
        with pytest.raises(APIError) as exc:
            c.take_back(model_name, 2)  # a new key: taken back already
        assert exc.value.status == 410 and exc.value.headers["X-Model-Version"] == "4"
        with pytest.raises(NotFound):
            c.take_back(model_name, 9)
        with pytest.raises(ValueError):
            c.take_back(model_name, 0)
        c.fork_model(f"{model_name}-f", model_name, 4)
        with pytest.raises(Conflict) as exc:
            c.take_back(f"{model_name}-f", 1)
        assert "forked" in exc.value.message
        m = c.get_model(model_name)
        assert m.version == 4 and m.n_tasks == 1 and m.n_batches == 2


@pytest.mark.slow
def test_the_async_client_takes_a_batch_back(service, model_name):
    rng = np.random.default_rng(2)
    with Client(service.url, api_key=WRITE_KEY) as c:
        _three_batches(c, model_name, rng)

    async def go():
        async with AsyncClient(service.url, api_key=WRITE_KEY) as c:
            return await c.take_back(model_name, 2)

    assert asyncio.run(go()).batch_version == 2


@pytest.mark.slow
def test_fcl3_take_back(service, model_name):
    conn = ["--url", service.url, "--api-key", WRITE_KEY]
    with Client(service.url, api_key=WRITE_KEY) as c:
        _three_batches(c, model_name, np.random.default_rng(3))
    r = run("take-back", model_name, 3, "--idempotency-key", "cli-tb", *conn)
    assert r.exit_code == 0, r.output
    assert (f"took back batch 3 of model '{model_name}' (12 rows): version 4, 2 batches replayed; task 'a' keeps "
            "12 rows") in r.output
    assert run("take-back", model_name, 3, "--idempotency-key", "cli-tb", *conn).exit_code == 0
    r = run("take-back", model_name, 3, *conn)
    assert r.exit_code == 1 and "410" in r.output and "taken back by version 4" in r.output
    r = run("take-back", model_name, 0, *conn)
    assert r.exit_code == 2
    assert "VERSION" in run("take-back", "--help").output


def test_a_lost_answer_is_resent_with_the_same_key():
    s = Script(httpx.ReadError("connection lost after the request was sent"),
               httpx.Response(200, json=TAKE_BACK, headers={"Idempotent-Replayed": "true"}))
    with scripted(s) as c:
        assert c.take_back("m", 2).version == 4
    keys = [r.headers["Idempotency-Key"] for r in s.requests]
    assert len(keys) == 2 and keys[0] == keys[1] and all(r.method == "DELETE" for r in s.requests)
    assert s.requests[0].url.path == "/models/m/batches/2"


def test_a_key_in_flight_is_waited_out_and_a_refusal_is_final(sleeps):
    busy = httpx.Response(409, json={"detail": "in flight"}, headers={"Retry-After": "1"})
    s = Script(busy, httpx.Response(200, json=TAKE_BACK))
    with scripted(s) as c:
        assert c.take_back("m", 2).batch_version == 2
    s = Script(httpx.Response(409, json={"detail": "forked", "fork": {"model": "p", "version": 3}}))
    with scripted(s) as c, pytest.raises(Conflict):
        c.take_back("m", 2)
    assert len(s.requests) == 1
