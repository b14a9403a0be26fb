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


class Listener:
    """A live stream read in a thread, as a client reads it: each event with its arrival time,
    until ``until(events)`` holds (then the client hangs up), the stream ends or ``max_seconds``."""

    def __init__(self, client, name, last_event_id=None, until=None, max_seconds=30.0):
        self.events: list[dict] = []
        self.opened, self.done = threading.Event(), threading.Event()
        self.status = None
        headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
        self.client = client
        self._args = (client, f"/models/{name}/events", {"max_seconds": max_seconds}, headers, until)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.opened.wait(10), "the stream did not open"

    def _run(self):
        client, path, params, headers, until = self._args
        try:
            with client.stream("GET", path, params=params, headers=headers) as r:
                self.status = r.status_code
                self.opened.set()
                block: list[str] = []
                for line in r.iter_lines():
                    if line:
                        block.append(line)
                        continue
                    got = parse("\n".join(block))
                    block = []
                    for e in got:
                        e["at"] = time.monotonic()
                        self.events.append(e)
                    if got and until is not None and until(self.events):
                        return  # hang up
        finally:
            self.opened.set()
            self.done.set()

    def updates(self) -> list[dict]:
        return [e for e in self.events if e["event"] == "update"]

    def close_wait(self, timeout=20.0) -> "Listener":
        assert self.done.wait(timeout), f"the stream did not end; got {self.events}"
        return self


def last_is_evaluation_of(version):
    return lambda evs: evs[-1]["event"] == "evaluation" and evs[-1]["data"]["version"] == version


UPDATE_FIELDS = ("version", "task_id", "new_task", "new_representative", "n_representatives", "prequential")


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
    # no Last-Event-ID: from now on (not the 5 stored updates), live
    live = Listener(c, name, until=lambda evs: any(e["event"] == "update" for e in evs))
    time.sleep(0.5)  # the stream reads its position as it opens
    answer = learn(c, name, 1, seed=1)[0]
    live.close_wait()
    assert [(e["event"], e["id"]) for e in live.events] == [("update", "6")]
    assert live.events[0]["data"] == {k: answer[k] for k in UPDATE_FIELDS}
    assert [e["id"] for e in events(c, name, last_event_id=0)] == ["1", "2", "3", "4", "5", "6"]
    assert events(c, name, last_event_id=6) == []


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


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_live_stream_dropped_midway_and_resumed_gets_every_update_once_in_order(make_client, request, backend):
    """A client listens while updates are committed, hangs up after the third, misses three,
    reconnects with Last-Event-ID and gets the rest: every update exactly once, versions
    consecutive, each with its fields and its evaluation event."""
    c = make_client("postgres", _request=request) if backend == "postgres" else make_client()
    name = new_model(c)
    rng = np.random.default_rng(8)
    X, y = regression_batch(rng, task=0)
    assert c.post(f"/models/{name}/tasks/t0/evaluation", json={"X": X, "y": y}).status_code == 200
    n, drop, back = 9, 3, 6
    first = Listener(c, name, last_event_id=0, until=last_is_evaluation_of(drop))
    answers = learn(c, name, drop, seed=9)
    first.close_wait()  # hung up after update 3 and its evaluation event
    answers += learn(c, name, back - drop, seed=10)  # 4..6 while nobody listens
    resumed = Listener(c, name, last_event_id=first.updates()[-1]["id"], until=last_is_evaluation_of(n))
    answers += learn(c, name, n - back, seed=11)  # 7..9 live
    resumed.close_wait()
    got = first.events + resumed.events
    updates = [e for e in got if e["event"] == "update"]
    assert [e["id"] for e in updates] == [str(v) for v in range(1, n + 1)]  # once each, in order
    assert [e["id"] for e in resumed.updates()] == [str(v) for v in range(drop + 1, n + 1)]
    for e, a in zip(updates, answers):
        assert a["version"] == int(e["id"]) and e["data"] == {k: a[k] for k in UPDATE_FIELDS}
        assert (a["prequential"] is None) == (a["version"] <= 2)  # t0, t1 are new at versions 1 and 2
    # (the accuracy matrix's rows of the new tasks t0 and t1, stored in the background, send
    # evaluation events too, when they are stored: live only, not replayed)
    kinds = [(e["event"], e["data"].get("version"), e["data"].get("reason")) for e in got
             if e["data"].get("reason") != "matrix"]
    assert kinds == [k for v in range(1, n + 1) for k in (("update", v, None), ("evaluation", v, "update"))], kinds
    # a stream with nobody at the other end is gone: nothing is held for it
    deadline = time.monotonic() + 5
    while c.app.state.events.slots.count() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert c.app.state.events.slots.count() == 0


def test_nobody_listening_costs_no_event_work(make_client, monkeypatch):
    """Without a listener an update does no event work: its wake-up finds nobody, schedules
    nothing, reads nothing and starts no thread; with one listener the same updates are read
    and delivered; once it hangs up, nothing again."""
    from service.events import stream as events_mod

    c = make_client()
    name = new_model(c)
    hub = c.app.state.events
    reads = {"position": 0, "after": 0, "evaluation_event": 0}
    for method in reads:
        original = getattr(events_mod.Feed, method)

        def counted(self, *args, _original=original, _method=method):
            reads[_method] += 1
            return _original(self, *args)

        monkeypatch.setattr(events_mod.Feed, method, counted)
    wakes: list[int] = []  # the streams open at each wake-up
    wake = hub.wake

    def counted_wake(model_name):
        wakes.append(hub.slots.count())
        wake(model_name)

    monkeypatch.setattr(hub, "wake", counted_wake)
    learn(c, name, 1)

    def threads():  # (the request thread pool's idle workers come and go: not ours)
        return {t.ident for t in threading.enumerate() if not t.name.startswith("AnyIO worker")}

    started = threads()
    learn(c, name, 4, seed=1)
    assert wakes == [0] * 5  # one look-up per update, nobody to wake
    assert sum(reads.values()) == 0
    assert threads() <= started  # none started (a background one may have ended meanwhile)
    # one listener: the same updates are read from the log and delivered
    wakes.clear()
    live = Listener(c, name, last_event_id=5, until=lambda evs: len(evs) == 2)
    learn(c, name, 2, seed=2)
    live.close_wait()
    assert [e["id"] for e in live.events] == ["6", "7"]
    # (the last wake-up may come after the client hung up)
    assert len(wakes) == 2 and wakes[0] == 1 and reads["position"] >= 2 and reads["after"] >= 2
    # hung up: back to nothing
    deadline = time.monotonic() + 5
    while hub.slots.count() and time.monotonic() < deadline:
        time.sleep(0.05)
    before = dict(reads)
    wakes.clear()
    learn(c, name, 3, seed=3)
    assert wakes == [0, 0, 0] and reads == before


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
    for v in (1, 2):
        live = Listener(a, name, last_event_id=v - 1, until=lambda evs: any(e["event"] == "update" for e in evs),
                        max_seconds=30)
        time.sleep(1.0)  # the stream is idle, waiting
        assert live.events == []
        t0 = time.monotonic()
        learn(b, name, 1, seed=v)
        t1 = time.monotonic()
        live.close_wait()
        assert [e["id"] for e in live.events] == [str(v)]
        # woken by the other app's commit (data_version, twice a second), not by the 15 s
        # fallback read nor the end of the stream (30 s)
        latency = live.events[0]["at"] - t1
        assert live.events[0]["at"] >= t0 and latency < 2.0, latency
