"""The access line of every request (``service.logs.access``): an ordinary ``service.access``
record, rendered once by the service's JSON formatter, one line on stderr per request."""
from __future__ import annotations

import io
import json
import logging
import re
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service import logs

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
FIELDS = ["ts", "level", "logger", "message", "request_id", "event", "method", "path", "status", "duration_ms",
          "client"]


class Records(logging.Handler):
    """Keeps the records it is given."""

    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def stderr(monkeypatch):
    """``take()``: the service's handler as the only destination of ``service`` records, writing
    to a StringIO as stderr (returned). pytest sets its own stderr and its capture handlers at
    each test phase, so a test takes stderr in its body."""
    def take() -> io.StringIO:
        logs.configure("INFO")
        out = io.StringIO()
        monkeypatch.setattr(logging.getLogger("service"), "handlers", [logs.installed()])
        monkeypatch.setattr(sys, "stderr", out)
        return out

    return take


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=st.sampled_from(["GET", "POST", "DELETE", "PATCH", "M-SEARCH", "X!#$%&'*+.^_`|~"]),
       path=st.text(max_size=40), status=st.sampled_from([200, 404, 422, 499, 500, 503]),
       duration_ms=st.floats(0, 1e6, allow_nan=False), rid=st.from_regex(r"\A[A-Za-z0-9._:-]{1,64}\Z"),
       client=st.one_of(st.none(), st.ip_addresses().map(str), st.text(max_size=20)))
def test_one_json_line_per_request_with_its_fields(stderr, method, path, status, duration_ms, rid, client):
    out = stderr()
    logs.access(method, path, status, duration_ms, rid, client)
    line = out.getvalue()
    assert line.endswith("\n") and line.count("\n") == 1
    parsed = json.loads(line)
    assert list(parsed) == FIELDS and TS.match(parsed["ts"])
    assert (parsed["level"], parsed["logger"], parsed["message"], parsed["event"]) == (
        "INFO", "service.access", "request", "request")
    assert (parsed["method"], parsed["path"], parsed["status"], parsed["duration_ms"], parsed["request_id"],
            parsed["client"]) == (method, path, status, duration_ms, rid, client)


def test_the_line_is_the_formatters_rendering_of_the_record(stderr):
    """One rendering: what stderr gets is what the JSON formatter makes of the record that any
    other handler gets."""
    out = stderr()
    keep = Records()
    logs.access_log.addHandler(keep)
    try:
        logs.access("GET", "/predict", 200, 0.5, "rid-1", "10.0.0.1")
    finally:
        logs.access_log.removeHandler(keep)
    (record,) = keep.records
    assert (record.getMessage(), record.method, record.path, record.status, record.duration_ms) == (
        "request", "GET", "/predict", 200, 0.5)
    assert out.getvalue() == logs.installed().formatter.format(record) + "\n"


def test_filters_and_levels_are_loggings(stderr, monkeypatch):
    out = stderr()
    dropped = logging.Filter("nothing")
    for where in (logs.access_log, logs.installed()):
        where.addFilter(dropped)
        try:
            logs.access("GET", "/predict", 200, 0.5, "rid-2")
        finally:
            where.removeFilter(dropped)
    monkeypatch.setattr(logs.installed(), "level", logging.WARNING)  # the handler's level
    logs.access("GET", "/predict", 200, 0.5, "rid-3")
    assert out.getvalue() == ""


def test_no_line_below_the_log_level(stderr):
    out = stderr()
    logs.configure("WARNING")
    try:
        logs.access("GET", "/predict", 200, 0.5, "rid-4")
        logging.getLogger("service.test").info("not this either")
        logging.getLogger("service.test").warning("but this")
    finally:
        logs.configure("INFO")
    assert [json.loads(x)["message"] for x in out.getvalue().splitlines()] == ["but this"]


def test_every_line_carries_the_request_id_and_is_redacted(stderr):
    out = stderr()
    logs.configure("INFO", redact=lambda s: s.replace("s3cret", "***"))
    token = logs.request_id.set("req-9")
    try:
        logging.getLogger("service.test").warning("key s3cret", extra={"n": 3})
        try:
            raise RuntimeError("boom s3cret")
        except RuntimeError:
            logging.getLogger("service.test").exception("failed")
    finally:
        logs.request_id.reset(token)
        logs.configure("INFO")
    first, second = (json.loads(x) for x in out.getvalue().splitlines())
    assert (first["message"], first["request_id"], first["n"]) == ("key ***", "req-9", 3)
    assert "RuntimeError: boom ***" in second["exception"] and "s3cret" not in out.getvalue()


def test_a_served_request_writes_its_line(make_client, stderr):
    c = make_client()
    out = stderr()
    r = c.get("/healthz", headers={"X-Request-ID": "served-1"})
    assert r.status_code == 200
    served = [json.loads(x) for x in out.getvalue().splitlines() if "served-1" in x]
    assert len(served) == 1 and served[0]["path"] == "/healthz" and served[0]["status"] == 200
    assert served[0]["logger"] == "service.access" and served[0]["duration_ms"] > 0
    assert served[0]["client"] == "testclient"  # the peer's address as the server gives it


def test_uvicorn_serves_one_json_line_per_request_and_no_plain_one(tmp_path):
    """Under uvicorn with its own access log on (its default, at --log-level info), the service
    turns it off and writes one JSON line per request."""
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


class _Sink(io.RawIOBase):
    def writable(self):
        return True

    def write(self, data):
        return len(data)


@pytest.mark.parametrize("broken", ["none", "closed", "broken pipe"])
def test_an_unwritable_stderr_loses_the_line_and_never_fails_the_request(make_client, monkeypatch, broken):
    """As logging's own handlers: a stderr that is gone, closed or a broken pipe costs the log
    line, not the request (nor the requests after it)."""
    import os

    c = make_client()
    monkeypatch.setattr(logging.getLogger("service"), "handlers", [logs.installed()])
    if broken == "none":
        stream = None
    elif broken == "closed":
        stream = io.TextIOWrapper(io.BufferedWriter(_Sink()), line_buffering=True)
        stream.close()
    else:
        read_end, write_end = os.pipe()
        os.close(read_end)  # nobody reads: a write raises BrokenPipeError
        stream = open(write_end, "w", buffering=1)
    monkeypatch.setattr(sys, "stderr", stream)
    for _ in range(3):
        assert c.get("/healthz").status_code == 200
        assert c.get("/predict", params={"task_id": "nope", "x": "1"}).status_code == 404
    logs.access("GET", "/", 200, 0.1, "outside-a-loop")
    monkeypatch.undo()
    if broken == "broken pipe":
        try:
            stream.close()
        except OSError:
            pass


def test_a_string_utf8_cannot_hold_is_escaped(stderr):
    """A lone surrogate (JSON may carry one as ``\\ud800``) still gives one JSON line."""
    out = stderr()
    logs.access("GET", "/a\ud800b", 404, 0.5, "rid-5")
    (line,) = out.getvalue().splitlines()
    assert json.loads(line)["path"] == "/a\ud800b" and line.isascii()
