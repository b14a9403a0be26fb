"""Open event streams are capped per key (issue 22, row 13): MAX_EVENT_STREAMS_PER_KEY streams,
then 429 with Retry-After; a stream's slot is freed when it closes, however it closes."""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from .conftest import ESTIMATOR, PARAMS, unique_name

CAP = 3


class Stream:
    """One ``GET .../events`` read in a thread until :meth:`close` (the client hangs up)."""

    def __init__(self, client, path, headers=None):
        self.status = None
        self.opened, self.done, self._stop = threading.Event(), threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, args=(client, path, headers or {}), daemon=True)
        self.thread.start()
        assert self.opened.wait(10), "the stream did not open"

    def _run(self, client, path, headers):
        try:
            with client.stream("GET", path, params={"max_seconds": 60}, headers=headers) as r:
                self.status = r.status_code
                self.opened.set()
                for _ in r.iter_lines():  # keep-alives every EVENTS_HEARTBEAT
                    if self._stop.is_set():
                        return
        finally:
            self.opened.set()
            self.done.set()

    def close(self) -> None:
        self._stop.set()
        assert self.done.wait(10), "the stream did not end"


def new_model(c, headers=None) -> str:
    name = unique_name("cap")
    r = c.post("/models", json={"name": name, "kind": "regression", "estimator": ESTIMATOR, "params": PARAMS},
               headers=headers or {})
    assert r.status_code == 201, r.text
    return name


def wait_open(c, n, key=None, timeout=10.0):
    slots = c.app.state.events.slots
    deadline = time.monotonic() + timeout
    while slots.count(key) != n and time.monotonic() < deadline:
        time.sleep(0.02)
    assert slots.count(key) == n, slots.count(key)


def refused(r):
    assert r.status_code == 429, r.text
    assert r.headers["Retry-After"] == "1"
    detail = r.json()["detail"]
    assert "too many open event streams" in detail and f"MAX_EVENT_STREAMS_PER_KEY={CAP}" in detail


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_stream_past_the_cap_gets_429_and_closing_one_frees_its_slot(make_client, request, backend):
    c = make_client(backend, _request=request, MAX_EVENT_STREAMS_PER_KEY=CAP, EVENTS_HEARTBEAT=0.2)
    name = new_model(c)
    path = f"/models/{name}/events"
    streams = [Stream(c, path) for _ in range(CAP)]
    assert [s.status for s in streams] == [200] * CAP
    refused(c.get(path, params={"max_seconds": 1}))
    refused(c.get("/events", params={"max_seconds": 1}))  # the cap is per key, whatever the model
    streams[0].close()  # the client hangs up: its slot is freed
    wait_open(c, CAP - 1)
    again = Stream(c, path)
    assert again.status == 200
    refused(c.get(path, params={"max_seconds": 1}))
    for s in [*streams[1:], again]:
        s.close()
    wait_open(c, 0)


def test_streams_that_end_by_themselves_free_their_slots(make_client):
    """max_seconds, an unknown model (404), a HEAD request: none of them keeps a slot."""
    c = make_client(MAX_EVENT_STREAMS_PER_KEY=CAP, EVENTS_HEARTBEAT=0.2)
    name = new_model(c)
    for _ in range(CAP + 2):
        assert c.get(f"/models/{name}/events", params={"max_seconds": 0.1}).status_code == 200
        assert c.get(f"/models/{unique_name('nope')}/events").status_code == 404
        assert c.head(f"/models/{name}/events").status_code in (200, 405)
    wait_open(c, 0)
    streams = [Stream(c, f"/models/{name}/events") for _ in range(CAP)]
    assert [s.status for s in streams] == [200] * CAP
    for s in streams:
        s.close()


def test_the_cap_counts_each_api_key_apart(make_client):
    c = make_client(MAX_EVENT_STREAMS_PER_KEY=CAP, EVENTS_HEARTBEAT=0.2, API_WRITE_KEYS="writer-key-1",
                    API_READ_KEYS="reader-key-1,reader-key-2")
    name = new_model(c, {"Authorization": "Bearer writer-key-1"})
    path = f"/models/{name}/events"
    one, two = ({"Authorization": f"Bearer reader-key-{i}"} for i in (1, 2))
    streams = [Stream(c, path, one) for _ in range(CAP)]
    assert [s.status for s in streams] == [200] * CAP
    refused(c.get(path, params={"max_seconds": 1}, headers=one))
    refused(c.get(path, params={"max_seconds": 1}, headers={"Authorization": "bearer reader-key-1"}))
    other = Stream(c, path, two)  # another key has its own slots
    assert other.status == 200
    assert c.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401  # auth first
    for s in [*streams, other]:
        s.close()
    wait_open(c, 0)


def test_a_client_that_disconnects_frees_its_slot_on_a_real_server(server_env, spawn, tmp_path):
    """Over real sockets: clients that drop their connections (no clean end of the stream)
    give their slots back, and new streams are accepted."""
    server = spawn({**server_env, "MAX_EVENT_STREAMS_PER_KEY": str(CAP), "EVENTS_HEARTBEAT": "0.2"},
                   log_path=tmp_path / "server.log").start()
    with httpx.Client(base_url=server.url, timeout=10) as admin:
        name = new_model(admin)
        path = f"/models/{name}/events"
        for _round in range(3):
            clients, responses = [], []
            deadline = time.monotonic() + 10
            while len(responses) < CAP:  # the slots of the last round's clients come back
                cl = httpx.Client(base_url=server.url, timeout=10)
                r = cl.send(cl.build_request("GET", path), stream=True)
                if r.status_code == 200:
                    clients.append(cl)
                    responses.append(r)
                    continue
                assert r.status_code == 429 and time.monotonic() < deadline, r.status_code
                cl.close()
                time.sleep(0.1)
            extra = admin.get(path, params={"max_seconds": 1})
            assert extra.status_code == 429 and extra.headers["Retry-After"] == "1", extra.text
            for cl in clients:  # drop the connections without reading the stream to its end
                cl.close()
