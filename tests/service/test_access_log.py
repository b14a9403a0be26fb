"""The access line of every request (``service.logs.access``): rendered straight to JSON and
written once per turn of the event loop when the ``service`` loggers write only to the
service's own handler, through :mod:`logging` otherwise. Both give the same line."""
from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service import logs

TS = re.compile(r'^\{"ts": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", ')


class ServerStderr:
    """Stderr a line-buffered file, as a server's is, with the service's handler the only
    destination of ``service`` records. pytest sets its own stderr and attaches its capture
    handlers to every non-propagating logger at each test phase, so a test calls
    :meth:`take` in its body."""

    def __init__(self, monkeypatch, path):
        self.monkeypatch, self.path = monkeypatch, path
        self.stream = open(path, "w", buffering=1, encoding="utf-8")

    def take(self) -> "ServerStderr":
        logs.configure("INFO")
        self.monkeypatch.setattr(logging.getLogger("service"), "handlers", [logs._installed])
        self.monkeypatch.setattr(sys, "stderr", self.stream)
        return self

    def read(self) -> str:
        return self.path.read_text(encoding="utf-8")


@pytest.fixture
def server_stderr(monkeypatch, tmp_path):
    out = ServerStderr(monkeypatch, tmp_path / "stderr")
    yield out
    out.stream.close()


def _through_logging(method, path, status, duration_ms, rid, client) -> str:
    """The line logging's own path gives for the same request."""
    token = logs.request_id.set(rid)
    try:
        record = logs.access_log.makeRecord("service.access", logging.INFO, "(unknown file)", 0, "request", (),
                                            None, extra={"event": "request", "method": method, "path": path,
                                                         "status": status, "duration_ms": duration_ms,
                                                         "client": client})
        return logs.JsonFormatter().format(record)
    finally:
        logs.request_id.reset(token)


def _without_ts(line: str) -> str:
    assert TS.match(line), line
    return TS.sub("{", line)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=st.sampled_from(["GET", "POST", "DELETE", "PATCH", "M-SEARCH", "X!#$%&'*+.^_`|~"]),
       path=st.text(max_size=40), status=st.sampled_from([200, 404, 422, 499, 500, 503]),
       duration_ms=st.floats(0, 1e6, allow_nan=False), rid=st.from_regex(r"\A[A-Za-z0-9._:-]{1,64}\Z"),
       client=st.one_of(st.none(), st.ip_addresses().map(str), st.text(max_size=20)))
def test_the_rendered_line_is_the_formatted_record(server_stderr, method, path, status, duration_ms, rid, client):
    before = len(server_stderr.take().read())
    logs.access(method, path, status, duration_ms, rid, client)  # outside an event loop: written at once
    line = server_stderr.read()[before:]
    assert line.endswith("\n") and line.count("\n") == 1
    assert _without_ts(line[:-1]) == _without_ts(_through_logging(method, path, status, duration_ms, rid, client))
    parsed = json.loads(line)
    assert (parsed["method"], parsed["path"], parsed["status"], parsed["request_id"], parsed["client"]) == (
        method, path, status, rid, client)


def test_lines_wait_for_the_next_turn_of_the_loop_and_keep_their_order(server_stderr):
    sole_handler = server_stderr.take().read
    other = logging.getLogger("service.test")

    async def scenario():
        logs.access("GET", "/predict", 200, 0.1, "a")
        logs.access("GET", "/predict", 200, 0.2, "b")
        assert sole_handler() == ""  # held in the stream's buffer: one write for both
        await asyncio.sleep(0)
        assert [json.loads(x)["request_id"] for x in sole_handler().splitlines()] == ["a", "b"]
        logs.access("GET", "/healthz", 200, 0.3, "c")
        other.warning("through logging")  # flushes the held line first: the order is kept
        lines = [json.loads(x) for x in sole_handler().splitlines()]
        assert [x.get("request_id", x["message"]) for x in lines] == ["a", "b", "c", "through logging"]
        await asyncio.sleep(0)
        assert len(sole_handler().splitlines()) == 4

    asyncio.run(scenario())


def test_any_other_handler_filter_or_level_gets_the_record(server_stderr, monkeypatch):
    sole_handler = server_stderr.take().read
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    access = logging.getLogger("service.access")
    keep = Keep()
    access.addHandler(keep)
    try:
        logs.access("GET", "/predict", 200, 0.5, "rid-1")
    finally:
        access.removeHandler(keep)
    assert [(r.getMessage(), r.method, r.path, r.status, r.duration_ms) for r in records] == [
        ("request", "GET", "/predict", 200, 0.5)]
    assert json.loads(sole_handler())["request_id"] == "rid-1"  # and the service's handler its line

    dropped = logging.Filter("nothing")  # a filter on the access logger or on the handler: it decides
    for where in (access, logs._installed):
        where.addFilter(dropped)
        try:
            logs.access("GET", "/predict", 200, 0.5, "rid-2")
        finally:
            where.removeFilter(dropped)
    assert "rid-2" not in sole_handler()

    monkeypatch.setattr(logs._installed, "level", logging.WARNING)  # the handler's level
    logs.access("GET", "/predict", 200, 0.5, "rid-3")
    assert "rid-3" not in sole_handler()


def test_no_line_below_the_log_level(server_stderr):
    sole_handler = server_stderr.take().read
    logs.configure("WARNING")
    try:
        logs.access("GET", "/predict", 200, 0.5, "rid-4")
    finally:
        logs.configure("INFO")
    assert sole_handler() == ""


def test_a_served_request_writes_its_line(make_client, server_stderr):
    c = make_client()
    sole_handler = server_stderr.take().read
    r = c.get("/healthz", headers={"X-Request-ID": "served-1"})
    assert r.status_code == 200
    c.portal.call(asyncio.sleep, 0)  # the app's loop takes its next turn
    lines = [json.loads(x) for x in sole_handler().splitlines()]
    served = [x for x in lines if x.get("request_id") == "served-1"]
    assert len(served) == 1 and served[0]["path"] == "/healthz" and served[0]["status"] == 200
    assert served[0]["logger"] == "service.access" and served[0]["duration_ms"] > 0
    assert served[0]["client"] == "testclient"  # the peer's address as the server gives it


def test_uvicorn_serves_one_json_line_per_request_and_no_plain_one(tmp_path):
    """Under uvicorn with its own access log on (its default, at --log-level info), the service
    turns it off and writes one JSON line per request; a SIGTERM flushes the last ones."""
    import urllib.request

    from benchmarks.launcher import Server

    log = tmp_path / "server.log"
    server = Server({"SQLITE_PATH": str(tmp_path / "fcl3.db"), "DATABASE_URL": "", "REDIS_URL": ""},
                    log_path=log, ready_path="/healthz", access_log=True, log_level="info").start(60)
    try:
        for i in range(5):
            req = urllib.request.Request(server.url + "/healthz", headers={"X-Request-ID": f"uv-{i}"})
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.status == 200
    finally:
        server.stop()
    lines = log.read_text().splitlines()
    ours = [json.loads(x) for x in lines if x.startswith("{") and '"uv-' in x]
    assert sorted(x["request_id"] for x in ours) == [f"uv-{i}" for i in range(5)]
    assert all(x["event"] == "request" and x["path"] == "/healthz" and x["client"] == "127.0.0.1" for x in ours)
    assert not [x for x in lines if '"GET /healthz HTTP/1.1" 200' in x], lines  # uvicorn's own line
    assert any("uvicorn's access log is off" in x for x in lines)


class _Writes(io.RawIOBase):
    """A raw stream that keeps every write it is given, as the system calls a pipe would get."""

    def __init__(self):
        self.writes: list[bytes] = []

    def writable(self):
        return True

    def write(self, data):
        self.writes.append(bytes(data))
        return len(data)


def test_no_write_holds_more_than_pipe_buf_or_part_of_a_line(monkeypatch):
    """Many requests answered in one turn of the loop, and a line through logging among them:
    every write is whole lines, at most PIPE_BUF bytes of held ones (atomic on a pipe that
    several workers share), and nothing is lost or reordered."""
    import io as _io
    import select

    raw = _Writes()
    stream = _io.TextIOWrapper(_io.BufferedWriter(raw), encoding="utf-8", line_buffering=True)
    logs.configure("INFO")
    monkeypatch.setattr(logging.getLogger("service"), "handlers", [logs._installed])
    monkeypatch.setattr(sys, "stderr", stream)

    async def one_turn():
        for i in range(60):
            logs.access("GET", "/predict", 200, 0.1, f"r{i}")
            if i == 30:
                logging.getLogger("service.test").warning("in between")
        await asyncio.sleep(0)

    asyncio.run(one_turn())
    assert len(raw.writes) > 3  # batched, not one write per line, nor one for all
    held_writes = [w for w in raw.writes if b"in between" not in w]
    assert [w.count(b"\n") for w in raw.writes if b"in between" in w] == [1]  # a write of its own
    assert all(len(w) <= select.PIPE_BUF for w in held_writes)
    assert all(w.endswith(b"\n") for w in raw.writes)
    lines = [json.loads(x) for x in b"".join(raw.writes).decode().splitlines()]
    assert [x.get("request_id", x["message"]) for x in lines] == (
        [f"r{i}" for i in range(31)] + ["in between"] + [f"r{i}" for i in range(31, 60)])


@pytest.mark.parametrize("broken", ["none", "closed", "broken pipe"])
def test_an_unwritable_stderr_loses_the_line_and_never_fails_the_request(make_client, monkeypatch, broken):
    """As logging's own handlers: a stderr that is gone, closed or a broken pipe costs the log
    line, not the request (nor the requests after it)."""
    import os

    c = make_client()
    logs.configure("INFO")
    monkeypatch.setattr(logging.getLogger("service"), "handlers", [logs._installed])
    if broken == "none":
        stream = None
    elif broken == "closed":
        stream = io.TextIOWrapper(io.BufferedWriter(_Writes()), line_buffering=True)
        stream.close()
    else:
        read_end, write_end = os.pipe()
        os.close(read_end)  # nobody reads: a write raises BrokenPipeError
        stream = open(write_end, "w", buffering=1)
    monkeypatch.setattr(sys, "stderr", stream)
    for _ in range(3):  # on the loop (held, then flushed) and through the route
        assert c.get("/healthz").status_code == 200
        assert c.get("/predict", params={"task_id": "nope", "x": "1"}).status_code == 404
    c.portal.call(asyncio.sleep, 0)
    logs.access("GET", "/", 200, 0.1, "outside-a-loop")  # written at once: lost, no error
    monkeypatch.undo()
    if broken == "broken pipe":
        try:
            stream.close()
        except OSError:
            pass
