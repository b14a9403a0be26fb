"""Request bodies and headers cost nothing before the key is checked, and time out (issue 22,
row 1): the key a route needs is checked from the headers before any of the body is read
(401/403, the connection closed), a declared length over the limit is 413 unread, a body idle
past BODY_TIMEOUT is 408, and headers not complete after HEADER_TIMEOUT close the connection
(``fcl3 serve``'s protocol, service.server). In process on both backends, over real sockets
against ``fcl3 serve`` on SQLite (the timeouts do not depend on the store)."""
from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import anyio
import numpy as np
import pytest

from benchmarks.launcher import Server

from .conftest import regression_batch

WRITE, READ = "w-key-bodies-0123456789", "r-key-bodies-9876543210"


def auth(key: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {key}".encode())]


def batch_body(seed: int = 0) -> bytes:
    X, y = regression_batch(np.random.default_rng(seed))
    return json.dumps({"X": X, "y": y}).encode()


def call(client, method: str, path: str, chunks: list[bytes], headers: list[tuple[bytes, bytes]] = (),
         length: int | None = None, chunked: bool = False) -> tuple[int, dict, bytes, int]:
    """One request straight into the running app (on its event loop): ``(status, headers, body,
    receive calls)``. The body is ``chunks``, announced by a Content-Length (``length``, else
    their total) or, ``chunked``, by Transfer-Encoding."""
    declared = sum(map(len, chunks)) if length is None else length
    framing = (b"transfer-encoding", b"chunked") if chunked else (b"content-length", str(declared).encode())
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": "", "client": ("127.0.0.1", 50000), "server": ("testserver", 80), "state": {},
             "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"), framing, *headers]}
    pending, calls, sent = list(chunks), [0], []

    async def receive():
        calls[0] += 1
        if pending:
            return {"type": "http.request", "body": pending.pop(0), "more_body": bool(pending)}
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    async def run():
        await client.app(scope, receive, send)

    client.portal.call(run)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body, calls[0]


@pytest.fixture(params=["sqlite", "postgres"])
def keyed(request, make_client):
    """The app with a write and a read key, on the embedded default and on PostgreSQL + Redis."""
    extra = {"_request": request} if request.param == "postgres" else {}
    return make_client(request.param, API_WRITE_KEYS=WRITE, API_READ_KEYS=READ, MAX_BODY_BYTES=100_000, **extra)


@pytest.mark.parametrize("path", ["/tasks/a/data", "/models/x/tasks/a/data", "/models", "/models/x/state"])
def test_a_body_is_not_read_before_the_key_is_checked(keyed, path):
    c = keyed
    body = batch_body()
    for headers, status in (([], 401), (auth("not-a-key"), 401), (auth(READ), 403),
                            ([(b"authorization", f"Basic {WRITE}".encode())], 401)):
        got, out, text, calls = call(c, "POST", path, [body], headers)
        assert (got, calls) == (status, 0), (path, headers, got, text)  # refused unread
        assert out["connection"] == "close" and "detail" in json.loads(text)
        if status == 401:
            assert out["www-authenticate"] == "Bearer"
    status, _, text, calls = call(c, "POST", "/tasks/a/data", [body], auth(WRITE))
    assert status == 200 and calls >= 1, text
    assert c.get("/model", headers={"Authorization": f"Bearer {WRITE}"}).json()["version"] == 1


def test_a_read_key_passes_to_a_read_route_with_a_body(keyed):
    c = keyed
    assert call(c, "POST", "/tasks/a/data", [batch_body()], auth(WRITE))[0] == 200
    query = json.dumps({"task_id": "a", "X": [[0.0] * 4]}).encode()
    status, _, _, calls = call(c, "POST", "/predict", [query])
    assert (status, calls) == (401, 0)
    status, _, text, calls = call(c, "POST", "/predict", [query], auth(READ))
    assert status == 200 and calls >= 1 and len(json.loads(text)["predictions"]) == 1


def test_a_declared_length_over_the_limit_is_413_unread(keyed):
    status, out, text, calls = call(keyed, "POST", "/tasks/a/data", [b"{}"], auth(WRITE), length=100_001)
    assert (status, calls) == (413, 0) and b"MAX_BODY_BYTES" in text and out["connection"] == "close"


def test_a_streamed_body_over_the_limit_is_413_and_nothing_learned(keyed):
    c = keyed
    body = batch_body()
    pad = b" " * 60_000  # JSON whitespace: a valid body, only too long
    status, out, text, calls = call(c, "POST", "/tasks/b/data", [body[:-1], pad, pad, body[-1:]], auth(WRITE),
                                    chunked=True)
    assert status == 413 and b"MAX_BODY_BYTES" in text and calls == 3 and out["connection"] == "close"  # 4th unread
    tasks = c.get("/tasks", headers={"Authorization": f"Bearer {WRITE}"}).json()
    assert "b" not in [t["task_id"] for t in tasks["tasks"]]


def test_an_idle_body_is_408(make_client):
    c = make_client(API_WRITE_KEYS=WRITE, BODY_TIMEOUT=0.2)
    scope_body = batch_body()
    sent = []

    async def run():
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/tasks/a/data", "raw_path": b"/tasks/a/data", "query_string": b"",
                 "root_path": "", "client": ("127.0.0.1", 1), "server": ("t", 80), "state": {},
                 "headers": [(b"content-type", b"application/json"),
                             (b"content-length", str(len(scope_body)).encode()), *auth(WRITE)]}
        first = True

        async def receive():
            nonlocal first
            if first:
                first = False
                return {"type": "http.request", "body": scope_body[:10], "more_body": True}
            await anyio.sleep(30)  # the client stalls
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        with anyio.fail_after(5):
            await c.app(scope, receive, send)

    t0 = time.monotonic()
    c.portal.call(run)
    assert time.monotonic() - t0 < 3
    assert sent[0]["status"] == 408 and b"BODY_TIMEOUT" in sent[1]["body"]
    assert (b"connection", b"close") in sent[0]["headers"]
    assert c.get("/model", headers={"Authorization": f"Bearer {WRITE}"}).json()["version"] == 0


# ----------------------------------------------------------------------------- over sockets
class Fcl3Serve(Server):
    """``fcl3 serve`` (service.server's protocol) as the launcher's server process."""

    def command(self) -> list[str]:
        return [str(Path(sys.executable).with_name("fcl3")), "serve", "--port", str(self.port), "--log-level", "warning"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("served")
    env = {"DATABASE_URL": "", "REDIS_URL": "", "SQLITE_PATH": str(tmp / "fcl3.db"), "MODEL_NAME": "bodies",
           "API_WRITE_KEYS": WRITE, "API_READ_KEYS": READ, "HEADER_TIMEOUT": "0.5", "BODY_TIMEOUT": "0.5",
           "FCL3_PARAMS": json.dumps({"n_components": 3, "max_outer_iter": 10})}
    server = Fcl3Serve(env, log_path=tmp / "serve.log", ready_path="/healthz")
    with server:
        yield server


def connect(server) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    s.settimeout(5)
    return s


def read_all(s: socket.socket, seconds: float = 5) -> bytes:
    """Everything the server sends until it closes the connection (at most ``seconds``)."""
    s.settimeout(seconds)
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return out


def read_response(s: socket.socket) -> bytes:
    """One whole response (headers and a Content-Length body) from a kept-alive connection."""
    out = b""
    while b"\r\n\r\n" not in out:
        out += s.recv(65536)
    top, _, body = out.partition(b"\r\n\r\n")
    length = int(next(v for k, _, v in (line.partition(b": ") for line in top.split(b"\r\n")[1:])
                      if k.lower() == b"content-length"))
    while len(body) < length:
        body += s.recv(65536)
    return top + b"\r\n\r\n" + body


def head(path: str, length: int, key: str | None = None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: t", "Content-Type: application/json", f"Content-Length: {length}"]
    if key:
        lines.append(f"Authorization: Bearer {key}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_anonymous_uploads_are_refused_before_their_body_and_cost_no_memory(served):
    before = rss_kb(served.proc.pid)
    socks, answers = [], []
    for _ in range(40):  # 40 anonymous clients announcing 15 MB each
        s = connect(served)
        s.sendall(head("/tasks/a/data", 15 * 1024 * 1024))
        socks.append(s)
    chunk = b" " * (256 * 1024)
    for s in socks:
        try:
            for _ in range(8):  # 2 MB each, if the server takes it
                s.sendall(chunk)
        except OSError:  # the server answered and closed: the rest is never read
            pass
    t0 = time.monotonic()
    for s in socks:
        answers.append(read_all(s, 5))
        s.close()
    assert time.monotonic() - t0 < 5
    assert all(a.startswith(b"HTTP/1.1 401 ") and b"connection: close" in a.lower() for a in answers), answers[0]
    assert rss_kb(served.proc.pid) - before < 30 * 1024  # buffering 40 x 2 MB would add 80 MB


def test_a_stalled_body_gets_408_and_the_connection_closes(served):
    body = batch_body()
    s = connect(served)
    s.sendall(head("/tasks/a/data", len(body), WRITE) + body[:20])
    t0 = time.monotonic()
    answer = read_all(s, 5)
    assert answer.startswith(b"HTTP/1.1 408 ") and b"BODY_TIMEOUT" in answer
    assert 0.4 < time.monotonic() - t0 < 3
    s = connect(served)  # a body sent in time still goes through
    s.sendall(head("/tasks/a/data", len(body), WRITE) + body)
    assert read_response(s).startswith(b"HTTP/1.1 200 ")
    s.close()


def test_slow_or_missing_headers_close_the_connection(served):
    silent = [connect(served) for _ in range(5)]
    partial = [connect(served) for _ in range(5)]
    for s in partial:
        s.sendall(b"POST /tasks/a/data HTTP/1.1\r\nHost: t\r\n")
    t0 = time.monotonic()
    for s in partial:
        s.sendall(b"X-Slow: 1\r\n")  # a byte now and then does not extend the deadline
    assert all(read_all(s, 5) == b"" for s in silent)
    assert all(read_all(s, 5).startswith(b"HTTP/1.1 408 ") for s in partial)
    assert time.monotonic() - t0 < 3
    for s in silent + partial:
        s.close()


def test_a_kept_alive_connection_gets_a_new_deadline_per_request(served):
    s = connect(served)  # the first request's deadline runs from the connection's opening
    for i in range(3):
        if i:
            time.sleep(0.4)  # idle between requests (under uvicorn's keep-alive timeout)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n")
        time.sleep(0.3)  # headers in two pieces, within HEADER_TIMEOUT
        s.sendall(b"\r\n")
        assert read_response(s).startswith(b"HTTP/1.1 200 ")
    s.close()


def test_headers_over_the_size_cap_get_431(served):
    s = connect(served)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: ")
    cut = False
    try:
        for _ in range(64):  # 4 MB of one header, if the server takes it
            s.sendall(b"a" * 65536)
    except OSError:
        cut = True  # refused on the way
    answer = read_all(s, 3)
    assert answer.startswith(b"HTTP/1.1 431 ") or (cut and answer == b""), answer[:100]  # a reset may beat the answer
    s = connect(served)  # a long query string under the cap is served
    s.sendall(b"GET /healthz?" + b"x=1&" * 8000 + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    assert read_response(s).startswith(b"HTTP/1.1 200 ")
    s.close()
