"""fcl3.hosts: a client's requests spread over several hosts, failing over from a host that cannot
be reached; against real HTTP servers on loopback ports (and once against the real service)."""
from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from benchmarks.launcher import free_port
from fcl3 import AsyncClient, Client, ConnectionFailed
from fcl3.hosts import AsyncSpread, Hosts, Spread

from .conftest import UPDATE, WRITE_KEY


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the service

    def _any(self) -> None:
        server: Host = self.server.owner
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        seen = {"host": server.name, "method": self.command, "path": self.path, "Host": self.headers["Host"],
                "body": body.decode(), "key": self.headers.get("Idempotency-Key")}
        server.seen.append(seen)
        if server.hang.is_set():  # read the request, never answer (a host cut off, or stopped)
            server.stopped.wait(30)
            return
        if server.drop:  # read the request, die before answering
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        out = json.dumps(server.answer if server.answer is not None else seen).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = _any

    def setup(self) -> None:
        super().setup()
        self.server.owner.connections.append(self.connection)

    def log_message(self, *args) -> None:
        pass


class Host:
    """A real HTTP server on a loopback port: answers each request with what it saw (or with
    ``answer``); ``drop``: closes the connection after reading the request, answering nothing
    (a host dying mid-request); :meth:`stop` closes the port and every open connection, as a
    killed process; :meth:`start` serves again on the same port."""

    def __init__(self, name: str, port: int | None = None):
        self.name, self.port = name, port or free_port()
        self.seen: list[dict] = []
        self.connections: list[socket.socket] = []
        self.answer: dict | None = None
        self.drop = False
        self.hang, self.stopped = threading.Event(), threading.Event()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Host":
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _Handler)
        self._server.daemon_threads = True
        self._server.owner = self
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for c in self.connections:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        self.connections.clear()


@pytest.fixture
def hosts():
    made: list[Host] = []

    def make(n: int) -> list[Host]:
        new = [Host(f"h{len(made) + i}").start() for i in range(n)]
        made.extend(new)
        return new

    yield make
    for h in made:
        h.stop()


def dead_url() -> str:
    """A loopback port nothing listens on: connections are refused."""
    return f"http://127.0.0.1:{free_port()}"


def test_requests_go_to_each_host_in_turn_with_their_path_query_and_body(hosts):
    a, b, c = hosts(3)
    spread = Spread([a.url, b.url, c.url])
    with httpx.Client(base_url=spread.url, transport=spread, trust_env=False) as client:
        answers = [client.post(f"/models/m/tasks/t{i}/data?x={i}", content=f"body {i}").json() for i in range(9)]
    assert [r["host"] for r in answers] == ["h0", "h1", "h2"] * 3
    for i, r in enumerate(answers):
        host = {"h0": a, "h1": b, "h2": c}[r["host"]]
        assert (r["method"], r["path"], r["body"]) == ("POST", f"/models/m/tasks/t{i}/data?x={i}", f"body {i}")
        assert r["Host"] == f"127.0.0.1:{host.port}"  # the host's, not the client's base URL's
    assert spread.served == {a.url: 3, b.url: 3, c.url: 3} and spread.failovers == 0


def test_a_host_that_refuses_is_left_out_and_its_requests_go_to_the_next(hosts):
    a, b = hosts(2)
    dead = dead_url()
    spread = Spread([a.url, dead, b.url], cooldown=1.5)  # longer than 8 requests take on a loaded machine
    with httpx.Client(transport=spread, trust_env=False) as client:
        got = [client.get(spread.url + f"/predict?i={i}").json()["host"] for i in range(8)]
        assert got == ["h0", "h1", "h0", "h1", "h0", "h1", "h0", "h1"]  # the dead host's turn went to b
        assert spread.failovers == 1 and spread.hosts.errors[dead] == 1  # tried once, then left out
        assert spread.hosts.down() == [dead]
        time.sleep(1.6)  # its cooldown over: tried again, once
        assert [client.get(spread.url + "/predict").json()["host"] for _ in range(4)] == ["h0", "h1", "h0", "h1"]
    assert spread.failovers == 2 and spread.served == {a.url: 6, dead: 0, b.url: 6}


def test_a_host_that_comes_back_gets_its_turn_again(hosts):
    a, b = hosts(2)
    spread = Spread([a.url, b.url], cooldown=0.2)
    with httpx.Client(transport=spread, trust_env=False) as client:
        assert client.get(a.url + "/").json()["host"] == "h0"  # a kept-alive connection to a
        a.stop()  # a dies: its port closed, its connections cut
        assert [client.get(a.url + "/").json()["host"] for _ in range(3)] == ["h1"] * 3
        a.start()
        time.sleep(0.3)
        assert sorted(client.get(a.url + "/").json()["host"] for _ in range(4)) == ["h0", "h0", "h1", "h1"]


def test_a_host_that_hangs_gets_no_more_requests_while_it_holds_one(hosts):
    hung, ok = hosts(2)
    hung.hang.set()
    spread = Spread([hung.url, ok.url], cooldown=60)
    with httpx.Client(transport=spread, trust_env=False, timeout=3) as client:
        stuck: list[Exception] = []

        def first():
            try:
                client.get(hung.url + "/first")
            except httpx.TimeoutException as exc:
                stuck.append(exc)

        t = threading.Thread(target=first)
        t.start()
        deadline = time.monotonic() + 5
        while not hung.seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert spread.hosts.outstanding == {hung.url: 1, ok.url: 0}
        got = [client.get(hung.url + f"/next{i}").json()["host"] for i in range(6)]
        assert got == ["h1"] * 6  # the hung host's turns went to the other: it holds a request
        t.join(10)
    assert len(stuck) == 1 and isinstance(stuck[0], httpx.ReadTimeout)  # raised: the client decides
    assert spread.hosts.down() == [hung.url] and spread.hosts.outstanding == {hung.url: 0, ok.url: 0}
    assert [s["path"] for s in hung.seen] == ["/first"]


def test_every_host_down_raises_the_connection_error():
    spread = Spread([dead_url(), dead_url()])
    with httpx.Client(transport=spread, trust_env=False) as client:
        with pytest.raises(httpx.ConnectError):
            client.get(spread.url + "/healthz")
    assert spread.failovers == 1 and sum(spread.hosts.errors.values()) == 2
    with Client(spread.url, transport=Spread(spread.hosts.urls), retries=0, trust_env=False) as c:
        with pytest.raises(ConnectionFailed):
            c.healthz()


def test_a_host_dying_mid_request_is_not_resent_by_the_transport(hosts):
    a, b = hosts(2)
    a.drop = True
    spread = Spread([a.url, b.url])
    with httpx.Client(transport=spread, trust_env=False) as client:
        with pytest.raises(httpx.RemoteProtocolError):  # it may have been applied: the caller decides
            client.post(a.url + "/models/m/predict", content=b"{}")
    assert len(a.seen) == 1 and b.seen == [] and spread.failovers == 0
    assert spread.hosts.down() == [a.url]  # but a is left out of the next requests


def test_the_client_resends_a_batch_to_the_next_host_with_its_key_and_never_a_remembering_prediction(hosts, sleeps):
    a, b = hosts(2)
    a.drop, b.answer = True, UPDATE
    spread = Spread([a.url, b.url], cooldown=0)  # a is never left out: every other request goes to it
    with Client(spread.url, transport=spread, trust_env=False) as c:
        got = c.learn_batch("m", "a", [[1.0, 2.0]], [3.0], idempotency_key="key-1")
        assert got.update.version == 1 and got.attempts == 2
        assert [s["key"] for s in a.seen + b.seen] == ["key-1", "key-1"]  # the same batch, resent to b
        assert a.seen[0]["body"] == b.seen[0]["body"]
        with pytest.raises(ConnectionFailed, match="not resent"):
            c.predict("m", "a", [[1.0, 2.0]], remember=True)  # rows remembered once at most: never resent
    assert len(a.seen) == 2 and len(b.seen) == 1


def test_async_spread_goes_round_robin_and_fails_over(hosts):
    a, b = hosts(2)
    dead = dead_url()

    async def scenario():
        spread = AsyncSpread([a.url, dead, b.url])
        async with httpx.AsyncClient(transport=spread, trust_env=False) as client:
            got = await asyncio.gather(*(client.get(a.url + f"/x?i={i}") for i in range(6)))
        return spread, [r.json()["host"] for r in got]

    spread, got = asyncio.run(scenario())  # the six picked before any failed: the dead host's went on to b
    assert sorted(got) == ["h0"] * 2 + ["h1"] * 4
    assert spread.failovers == 2 and spread.served == {a.url: 2, dead: 0, b.url: 4}


def test_the_async_client_learns_through_the_spread(hosts, sleeps):
    a, b = hosts(2)
    a.drop, b.answer = True, UPDATE

    async def scenario():
        spread = AsyncSpread([a.url, b.url])
        async with AsyncClient(spread.url, transport=spread, trust_env=False) as c:
            return await c.learn_batch("m", "a", [[1.0]], [2.0], idempotency_key="key-2")

    got = asyncio.run(scenario())
    assert got.update.version == 1 and got.attempts == 2 and b.seen[0]["key"] == "key-2"


def test_a_cancelled_request_is_not_left_outstanding(hosts):
    hung, = hosts(1)
    hung.hang.set()

    async def scenario():
        spread = AsyncSpread([hung.url])
        async with httpx.AsyncClient(transport=spread, trust_env=False) as client:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(client.get(hung.url + "/"), 0.5)
        return spread

    spread = asyncio.run(scenario())
    assert spread.hosts.outstanding == {hung.url: 0} and spread.hosts.down() == []


@pytest.mark.parametrize("urls, message", [
    ([], "at least one"),
    (["http://127.0.0.1:8000/api"], "origin"),
    (["http://127.0.0.1:8000/?x=1"], "origin"),
    (["ftp://127.0.0.1"], "http"),
])
def test_hosts_are_http_origins(urls, message):
    with pytest.raises(ValueError, match=message):
        Hosts(urls)


def test_against_the_service_one_host_down(sqlite_service, model_name):
    """The real service behind two names of its own and a dead port: every call answered, the
    dead host tried once and left out."""
    live = sqlite_service.url
    twin = live.replace("127.0.0.1", "localhost")
    dead = dead_url()
    spread = Spread([live, dead, twin], cooldown=60)
    with Client(spread.url, WRITE_KEY, transport=spread, trust_env=False) as c:
        c.create_model(model_name, "regression")
        versions = [c.learn(model_name, f"t{i % 2}", [[float(i), 1.0], [1.0, float(-i)]], [float(i), 0.5]).version
                    for i in range(6)]
        p = c.predict(model_name, "t0", [[1.0, 2.0]], min_version=6)
    assert versions == [1, 2, 3, 4, 5, 6] and p.version == 6
    assert spread.failovers == 1 and spread.served[dead] == 0
    assert spread.served[str(httpx.URL(live))] == spread.served[str(httpx.URL(twin))] == 4
