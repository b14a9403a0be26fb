"""GET .../events (issue 13 part 4): Server-Sent Events of committed updates and evaluation
changes; replay from Last-Event-ID, reset, live delivery across processes, clean shutdown."""
from __future__ import annotations

import json
import threading
import time

import httpx
import numpy as np
import pytest

from .conftest import ESTIMATOR, PARAMS, regression_batch, unique_name


def parse(text: str) -> list[dict]:
    """SSE blocks -> [{"id", "event", "data"}] (comments skipped)."""
    out = []
    for block in text.split("\n\n"):
        fields = {}
        for line in block.splitlines():
            if line.startswith(":") or not line:
                continue
            key, _, value = line.partition(": ")
            fields[key] = value
        if fields:
            out.append({"id": fields.get("id"), "event": fields["event"], "data": json.loads(fields["data"])})
    return out


def new_model(client) -> str:
    name = unique_name("evt")
    assert client.post("/models", json={"name": name, "kind": "regression", "estimator": ESTIMATOR,
                                        "params": PARAMS}).status_code == 201
    return name


def learn(client, name, n, seed=0, tasks=2):
    rng = np.random.default_rng(seed)
    answers = []
    for i in range(n):
        X, y = regression_batch(rng, task=i % tasks)
        r = client.post(f"/models/{name}/tasks/t{i % tasks}/data", json={"X": X, "y": y})
        assert r.status_code == 200, r.text
        answers.append(r.json())
    return answers


def events(client, name, last_event_id=None, seconds=0.3):
    headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
    r = client.get(f"/models/{name}/events", params={"max_seconds": seconds}, headers=headers)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    return parse(r.text)


def test_replay_from_last_event_id(backend_client):
    c = backend_client
    name = new_model(c)
    answers = learn(c, name, 5)
    got = events(c, name, last_event_id=2)
    assert [e["event"] for e in got] == ["update"] * 3  # no evaluation sets: no evaluation events
    assert [e["id"] for e in got] == ["3", "4", "5"]
    for e, a in zip(got, answers[2:]):
        assert e["data"] == {k: a[k] for k in ("version", "task_id", "new_task", "new_representative",
                                               "n_representatives", "prequential")}
    assert events(c, name) == []  # no Last-Event-ID: from now on
    assert [e["id"] for e in events(c, name, last_event_id=0)] == ["1", "2", "3", "4", "5"]
    assert events(c, name, last_event_id=5) == []


@pytest.mark.parametrize("bad", ["abc", "99", "-1"])
def test_an_unknown_last_event_id_gets_a_reset(make_client, bad):
    c = make_client()
    name = new_model(c)
    learn(c, name, 2)
    got = events(c, name, last_event_id=bad)
    assert got[0]["event"] == "reset" and got[0]["data"]["version"] == 2 and got[0]["id"] is None
    assert len(got) == 1


def test_updates_that_are_not_stored_as_events_get_a_reset(make_client):
    c = make_client()
    name = new_model(c)
    learn(c, name, 3)
    fork = unique_name("fork")
    assert c.post("/models", json={"name": fork, "fork": {"model": name, "version": 3}}).status_code == 201
    got = events(c, fork, last_event_id=1)  # the fork was rebuilt, its versions 2..3 have no events
    assert [e["event"] for e in got] == ["reset"] and got[0]["data"]["version"] == 3
    learn(c, fork, 1, seed=1)
    assert [e["id"] for e in events(c, fork, last_event_id=3)] == ["4"]
    assert c.get(f"/models/{unique_name('nope')}/events", params={"max_seconds": 0.1}).status_code == 404  # unknown model


def test_live_events_and_evaluation_events(make_client):
    c = make_client()
    name = new_model(c)
    learn(c, name, 2)
    got: list[str] = []

    def listen():
        got.append(c.get(f"/models/{name}/events", params={"max_seconds": 5}).text)

    th = threading.Thread(target=listen)
    th.start()
    time.sleep(0.7)
    rng = np.random.default_rng(3)
    X, y = regression_batch(rng, task=0)
    r = c.post(f"/models/{name}/tasks/t0/evaluation", json={"X": X, "y": y})
    assert r.status_code == 200
    time.sleep(0.3)
    answer = learn(c, name, 1, seed=4)[0]
    X, y = regression_batch(rng, task=1)
    assert c.post(f"/models/{name}/tasks/new/data", json={"X": X, "y": y}).json()["new_task"]
    th.join(10)
    evs = parse(got[0])
    kinds = [(e["event"], e["id"], e["data"].get("reason")) for e in evs]
    assert kinds == [("evaluation", None, "rows"), ("update", "3", None), ("evaluation", None, "update"),
                     ("update", "4", None), ("evaluation", None, "update"), ("evaluation", None, "matrix")], kinds
    assert evs[0]["data"]["task_id"] == "t0" and evs[0]["data"]["n_tasks"] == 1
    assert evs[1]["data"]["prequential"] == answer["prequential"]
    assert evs[2]["data"]["version"] == 3
    # the accuracy matrix's row of the new task, computed just after its update
    assert evs[5]["data"]["task_id"] == "new" and evs[5]["data"]["version"] == 4
    assert c.app.state.watch.events.listeners() == 0  # nobody listening: nothing held


@pytest.mark.slow
def test_events_across_processes_and_clean_shutdown(server_env, tmp_path, spawn):
    """A stream served by one process sees the updates committed by another (PostgreSQL
    LISTEN/NOTIFY); at SIGTERM the stream ends and the server exits promptly."""
    a = spawn(server_env, log_path=tmp_path / "a.log").start()
    b = spawn(server_env, log_path=tmp_path / "b.log").start()
    rng = np.random.default_rng(5)
    lines: list[str] = []
    opened = threading.Event()
    ended = threading.Event()

    def listen():
        with httpx.Client(base_url=a.url, timeout=30) as client:
            with client.stream("GET", "/events") as r:
                opened.set()
                for line in r.iter_lines():
                    lines.append(line)
        ended.set()

    th = threading.Thread(target=listen, daemon=True)
    th.start()
    assert opened.wait(10)
    time.sleep(0.5)
    with httpx.Client(base_url=b.url, timeout=30) as client:
        X, y = regression_batch(rng)
        t0 = time.monotonic()
        v = client.post("/tasks/x/data", json={"X": X, "y": y}).json()["version"]
    deadline = time.monotonic() + 10
    while f"id: {v}" not in lines and time.monotonic() < deadline:
        time.sleep(0.02)
    assert f"id: {v}" in lines, lines
    latency = time.monotonic() - t0
    assert latency < 3, latency
    t1 = time.monotonic()
    a.stop(timeout=15)
    assert ended.wait(5)
    assert time.monotonic() - t1 < 5  # not the SIGKILL after 15 s: the stream closed itself
    assert a.proc.returncode in (0, -15)  # uvicorn re-raises the SIGTERM it handled once shut down


def test_a_stream_sees_the_commits_of_another_process_on_sqlite(make_client):
    """Two apps on one SQLite file (as two workers): the stream of one wakes up on the other's
    commit through PRAGMA data_version."""
    a, b = make_client(), make_client()
    name = new_model(b)
    got: list[str] = []
    th = threading.Thread(target=lambda: got.append(a.get(f"/models/{name}/events",
                                                          params={"max_seconds": 4}).text))
    th.start()
    time.sleep(0.8)
    t0 = time.monotonic()
    learn(b, name, 1)
    th.join(10)
    assert [e["id"] for e in parse(got[0])] == ["1"]
    assert time.monotonic() - t0 < 4
