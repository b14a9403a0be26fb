"""Labels that arrive later through the client and the ``fcl3`` command (issue 23, part 1),
against real services (SQLite, and PostgreSQL + Redis)."""
from __future__ import annotations

import asyncio
import csv
import json
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner

from fcl3 import APIError, AsyncClient, Client, Conflict, NotFound
from fcl3.cli import main
from tests.service.conftest import PARAMS

from .conftest import STREAM, WRITE_KEY

pytestmark = pytest.mark.slow


def batch(rng, n=12, d=4):
    X = rng.normal(size=(n, d))
    return X, X @ np.linspace(-1, 1, d) + 0.1 * rng.normal(size=n)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_the_client_remembers_and_labels(service, model_name):
    rng = np.random.default_rng(1)
    with Client(service.url, api_key=WRITE_KEY) as c:
        c.create_model(model_name, "regression", params=PARAMS)
        X, y = batch(rng)
        c.learn(model_name, "t", X, y)
        X2, y2 = batch(rng, n=5)
        plain = c.predict(model_name, "t", X2)
        assert plain.prediction_ids is None
        served = c.predict(model_name, "t", X2, remember=True)
        assert len(served.prediction_ids) == 5 and served.predictions == plain.predictions
        first = c.label_batch(model_name, dict(zip(served.prediction_ids, y2)), idempotency_key="lab-1")
        assert not first.replayed and first.update.version == 2 and first.update.n_samples == 17
        e = y2 - np.asarray(served.predictions)
        assert first.update.prequential.rmse == pytest.approx(float(np.sqrt(np.mean(e ** 2))), rel=1e-12)
        again = c.label_batch(model_name, list(zip(served.prediction_ids, y2)), idempotency_key="lab-1")
        assert again.replayed and again.update == first.update
        with pytest.raises(Conflict) as exc:  # labelled already: not retried, the version that learned it
            c.label(model_name, [(served.prediction_ids[0], 1.0)])
        assert exc.value.headers["X-Model-Version"] == "2" and "version 2" in exc.value.message
        with pytest.raises(NotFound):
            c.label(model_name, {"fffffffffff-0123456789abcdef": 1.0})
        with pytest.raises(APIError) as exc:
            c.label(model_name, {"1-0123456789abcdef": 1.0})
        assert exc.value.status == 410
        with pytest.raises(ValueError):
            c.label(model_name, {})
        assert c.get_model(model_name).version == 2


def test_the_async_client_remembers_and_labels(service, model_name):
    rng = np.random.default_rng(2)

    async def go():
        async with AsyncClient(service.url, api_key=WRITE_KEY) as c:
            await c.create_model(model_name, "regression", params=PARAMS)
            X, y = batch(rng)
            await c.learn(model_name, "t", X, y)
            X2, y2 = batch(rng, n=3)
            served = await c.predict(model_name, "t", X2, remember=True)
            return served, await c.label(model_name, zip(served.prediction_ids, y2))

    served, update = asyncio.run(go())
    assert update.version == 2 and update.prequential.n == 3


def test_fcl3_predict_remember_then_label(service, model_name, tmp_path):
    conn = ["--url", service.url, "--api-key", WRITE_KEY]
    assert run("models", "create", model_name, "--kind", "regression", "--params", json.dumps(PARAMS), *conn).exit_code == 0
    data = tmp_path / "a.csv"
    data.write_text("x1,x2,y\n" + "".join(f"{i},{i % 3},{2 * i - i % 3}\n" for i in range(12)))
    assert run("learn", model_name, "a", data, *conn).exit_code == 0
    rows = tmp_path / "p.csv"
    rows.write_text("x1,x2\n1,1\n2,2\n3,0\n")
    r = run("predict", model_name, "a", rows, "--remember", *conn)
    assert r.exit_code == 0, r.output
    lines = list(csv.reader(r.stdout.splitlines()))
    assert lines[0] == ["prediction_id", "prediction"] and len(lines) == 4
    labels = tmp_path / "labels.csv"
    labels.write_text("prediction_id,y\n" + "".join(f"{pid},{2 * k}\n" for k, (pid, _) in enumerate(lines[1:], 1)))
    r = run("label", model_name, labels, "--idempotency-key", "cli-lab", *conn)
    assert r.exit_code == 0, r.output
    assert "learned 3 labelled rows of task 'a': version 2, 15 samples; served predictions: rmse" in r.output
    r = run("label", model_name, labels, "--idempotency-key", "cli-lab", *conn)
    assert r.exit_code == 0 and "already applied" in r.output and "version 2" in r.output
    r = run("label", model_name, labels, *conn)  # a new key: the ids are labelled already
    assert r.exit_code == 1 and "409" in r.output and "labelled already" in r.output
    bad = tmp_path / "bad.csv"
    bad.write_text("prediction_id,y\nx,1\nx,2\n")
    r = run("label", model_name, bad, "--url", "http://127.0.0.1:9", "--retries", "0")
    assert r.exit_code == 2 and "bad.csv:3: column 1 (prediction_id): prediction id 'x' again" in r.output


def test_fcl3_replay_with_delayed_labels(service, model_name):
    """--delay 0 scores each batch as a plain replay does (predicted by the model just before
    its labels); --delay N learns every row once with predictions N batches old; a rerun
    applies nothing."""
    base = ["replay", STREAM, "--url", service.url, "--api-key", WRITE_KEY, "--params", json.dumps(PARAMS),
            "--json", "--quiet", "--batch-size", "10"]
    per_task = Counter(r["task"] for r in csv.DictReader(open(STREAM)))
    out = {}
    for tag, extra in (("plain", []), ("d0", ["--delay", "0"]), ("d5", ["--delay", "5"])):
        r = run(*base, "--model", f"{model_name}-{tag}", *extra)
        assert r.exit_code == 0, r.output
        out[tag] = json.loads(r.stdout)
        s = out[tag]
        assert s["rows"] == 240 and s["version"] == s["batches"] and s["replayed_batches"] == 0
        with Client(service.url, api_key=WRITE_KEY) as c:
            assert {t.task_id: t.n_samples for t in c.tasks(f"{model_name}-{tag}").tasks} == dict(per_task)
    assert out["d0"]["delay"] == 0 and out["d0"]["labelled_batches"] == out["d0"]["batches"] - out["d0"]["tasks"]
    assert out["d0"]["prequential"]["n"] == out["plain"]["prequential"]["n"]
    assert out["d0"]["prequential"]["rmse"] == pytest.approx(out["plain"]["prequential"]["rmse"], rel=1e-9)
    assert out["d5"]["prequential"]["n"] == out["plain"]["prequential"]["n"]
    assert out["d5"]["prequential"]["rmse"] != pytest.approx(out["plain"]["prequential"]["rmse"], rel=1e-9)
    again = json.loads(run(*base, "--model", f"{model_name}-d5", "--delay", "5").stdout)
    assert again["replayed_batches"] == again["batches"] and again["version"] == out["d5"]["version"]
    text = run(*[a for a in base if a != "--json"], "--model", f"{model_name}-d5", "--delay", "5").output
    assert "delayed labels   0 batches predicted first, labelled 5 batches later" in text
    assert f"batches          {again['batches']} (0 learned now, {again['batches']} already applied)" in text


def test_the_new_commands_have_help():
    r = run("label", "--help")
    assert r.exit_code == 0 and "prediction_id" in r.output
    assert "--delay" in run("replay", "--help").output and "--remember" in run("predict", "--help").output
