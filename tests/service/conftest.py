"""Fixtures for the service tests.

* SQLite (embedded default) tests always run.
* PostgreSQL (127.0.0.1:5432, user postgres, trust auth) and Redis (127.0.0.1:6379) tests
  use a throwaway database made for this session and a unique Redis key prefix. When a
  server is absent they are skipped with the reason printed — unless ``CI`` or
  ``FCL3_REQUIRE_SERVICES=1`` is set, where its absence is a failure.
"""
from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import anyio.to_thread
import httpx
import numpy as np
import pytest

import core
from benchmarks.launcher import PgCluster, RedisProcess, Server, find_pg_bindir, free_port

ROOT = Path(__file__).resolve().parents[2]
PG_HOST, PG_PORT = os.environ.get("FCL3_TEST_PGHOST", "127.0.0.1"), int(os.environ.get("FCL3_TEST_PGPORT", "5432"))
REDIS_URL = os.environ.get("FCL3_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
ESTIMATOR = os.environ.get("FCL3_TEST_ESTIMATOR", "FCL3" if hasattr(core, "FCL3") else "STL")
# Small, fast hyper-parameters (the service passes them through unchanged).
PARAMS = {"n_components": 3, "max_outer_iter": 10} if ESTIMATOR == "FCL3" else {}

REQUIRE = bool(os.environ.get("CI")) or os.environ.get("FCL3_REQUIRE_SERVICES") == "1"


def _missing(what: str, why: str):
    msg = f"{what} not available ({why})"
    if REQUIRE:
        pytest.fail(msg + " — required because CI or FCL3_REQUIRE_SERVICES is set", pytrace=False)
    print(f"\nSKIP: {msg}", file=sys.stderr)
    pytest.skip(msg)


def pg_url(dbname: str) -> str:
    return f"postgresql+psycopg://postgres@{PG_HOST}:{PG_PORT}/{dbname}"


@contextmanager
def pg_admin():
    import psycopg

    with psycopg.connect(host=PG_HOST, port=PG_PORT, user="postgres", dbname="test",
                         connect_timeout=3, autocommit=True) as conn:
        yield conn


def create_pg_database(prefix: str = "fcl3_test") -> str:
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_pg_database(name: str) -> None:
    with pg_admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def postgres_server():
    try:
        with pg_admin() as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001
        _missing(f"PostgreSQL at {PG_HOST}:{PG_PORT}", str(exc).strip().splitlines()[0])
    return True


@pytest.fixture(scope="session")
def pg_database(postgres_server):
    """A throwaway database for this session, migrated to head; dropped at the end."""
    from alembic import command

    from service.db import alembic_config

    name = create_pg_database()
    url = pg_url(name)
    command.upgrade(alembic_config(url), "head")
    yield url
    drop_pg_database(name)


@pytest.fixture(scope="session")
def redis_server():
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except Exception as exc:  # noqa: BLE001
        _missing(f"Redis at {REDIS_URL}", str(exc))
    prefix = f"fcl3test:{os.getpid()}:{uuid.uuid4().hex[:8]}:"
    yield client, prefix
    for key in client.scan_iter(match=prefix + "*"):
        client.delete(key)
    client.close()


def unique_name(prefix: str = "m") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def make_settings(**overrides):
    from service.config import Settings

    values = dict(MODEL_NAME=unique_name(), FCL3_ESTIMATOR=ESTIMATOR, FCL3_PARAMS=dict(PARAMS),
                  FCL3_KIND="regression", DATABASE_URL=None, REDIS_URL=None)
    values.update(overrides)
    return Settings(_env_file=None, **values)


@pytest.fixture
def make_client(tmp_path):
    """Factory: ``make_client(backend="sqlite"|"postgres", **settings)`` -> a TestClient
    running the real app (lifespan included) on its own model name."""
    from fastapi.testclient import TestClient

    from service.main import create_app

    clients = []

    def factory(backend: str = "sqlite", **overrides):
        if backend == "postgres":
            request = overrides.pop("_request")
            url = request.getfixturevalue("pg_database")
            _, prefix = request.getfixturevalue("redis_server")
            overrides.setdefault("DATABASE_URL", url)
            overrides.setdefault("REDIS_URL", REDIS_URL)
            overrides.setdefault("REDIS_PREFIX", prefix)
        else:
            overrides.pop("_request", None)
            overrides.setdefault("SQLITE_PATH", str(tmp_path / "fcl3.db"))
        settings = make_settings(**overrides)
        client = TestClient(create_app(settings))
        client.__enter__()
        clients.append(client)
        return client

    yield factory
    for c in clients:
        c.__exit__(None, None, None)


@pytest.fixture(params=["sqlite", "postgres"])
def backend_client(request, make_client):
    """The app on the embedded default and on PostgreSQL + Redis."""
    if request.param == "postgres":
        return make_client("postgres", _request=request)
    return make_client("sqlite")


@pytest.fixture(params=["sqlite", "postgres"])
def backend_app(request, make_client):
    """``backend_app(**settings)``: the app with these settings on the embedded default, or on
    PostgreSQL + Redis; ``backend_app.backend`` names which."""
    def make(**overrides):
        if request.param == "postgres":
            return make_client("postgres", _request=request, **overrides)
        return make_client("sqlite", **overrides)

    make.backend = request.param
    return make


# ----------------------------------------------------------------------------- processes
# Server (a real ``uvicorn service.main:app`` subprocess) and free_port come from
# benchmarks.launcher: one launcher for the tests and the benchmarks.


@pytest.fixture
def server_env(request):
    """Environment for a uvicorn subprocess on PostgreSQL + Redis with its own model."""
    url = request.getfixturevalue("pg_database")
    _, prefix = request.getfixturevalue("redis_server")
    import json

    return {"DATABASE_URL": url, "REDIS_URL": REDIS_URL, "REDIS_PREFIX": prefix,
            "MODEL_NAME": unique_name("proc"), "FCL3_ESTIMATOR": ESTIMATOR, "FCL3_KIND": "regression",
            "FCL3_PARAMS": json.dumps(PARAMS), "AUTO_CREATE_SCHEMA": "false"}


def count_pool_trips(monkeypatch) -> list[str]:
    """The calls to the thread pool (``anyio.to_thread.run_sync``, which Starlette's and
    FastAPI's ``run_in_threadpool`` use) from now on, appended as they are made."""
    trips: list[str] = []
    to_pool = anyio.to_thread.run_sync

    async def counted(func, *args, **kwargs):
        trips.append(repr(func))
        return await to_pool(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    return trips


def regression_batch(rng, n: int = 12, d: int = 4, task: int = 0):
    import numpy as np

    w = np.linspace(-1, 1, d) * (1 + task % 3)
    X = rng.normal(size=(n, d))
    y = X @ w + 0.1 * rng.normal(size=n)
    return X.tolist(), y.tolist()


class TcpProxy:
    """A loopback TCP forwarder that can be cut and restored, to play a server going down.
    Its first ``drop`` connections forward the request but close instead of passing on the
    answer: a connection lost after the server got (and applied) the request."""

    def __init__(self, target_host: str, target_port: int, drop: int = 0):
        import threading

        self.target = (target_host, target_port)
        self.port = free_port()
        self.drop = drop
        self.connections = 0
        self._threading = threading
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "TcpProxy":
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(64)
        self._listener = ls
        self._threading.Thread(target=self._accept, args=(ls,), daemon=True).start()
        return self

    def _accept(self, ls):
        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return
            self.connections += 1
            dropping = self.connections <= self.drop
            try:
                upstream = socket.create_connection(self.target, timeout=3)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b, drop in ((client, upstream, False), (upstream, client, dropping)):
                self._threading.Thread(target=self._pipe, args=(a, b, drop), daemon=True).start()

    @staticmethod
    def _pipe(src, dst, drop: bool = False):
        try:
            while data := src.recv(65536):
                if drop:  # the answer arrived: lose it
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self) -> None:
        """Refuse new connections and cut every open one."""
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


@pytest.fixture
def spawn():
    """Factory for :class:`Server`; every server it made is stopped at teardown, even on failure."""
    made: list[Server] = []

    def factory(*args, **kwargs) -> Server:
        server = Server(*args, **kwargs)
        made.append(server)
        return server

    yield factory
    for server in made:
        server.stop()


# ----------------------------------------------------------------------------- throwaway servers
@pytest.fixture
def redis_process():
    """A redis-server of this test's own (skipped, with the reason, when the binary is missing)."""
    import shutil

    if shutil.which("redis-server") is None:
        _missing("redis-server binary", "not on PATH")
    server = RedisProcess().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_cluster():
    """A PostgreSQL cluster of this test's own, migrated to head (skipped when initdb is missing)."""
    bindir = find_pg_bindir()
    if bindir is None:
        _missing("PostgreSQL server binaries", "no /usr/lib/postgresql/*/bin/initdb")
    cluster = PgCluster(bindir, max_connections=100).init()
    try:
        cluster.start()
        from alembic import command

        from service.db import alembic_config

        command.upgrade(alembic_config(cluster.url()), "head")
        yield cluster
    finally:
        cluster.cleanup()


def concurrent_writers(url: str, n_clients: int, per_client: int, seed: int, retry: tuple[int, ...] = (),
                       timeout: float = 60, join: float = 180):
    """``n_clients`` threads each post ``per_client`` regression batches to tasks ``c0..c3``
    of the default model at ``url`` (client ``i`` writes task ``c{i % 4}``). A status in
    ``retry`` is retried (up to 20 times; nothing was applied); any other non-200 ends that
    client with an error. Returns ``(acks, sent, errors)``: each client's acknowledged
    versions in order, its rows acknowledged, and the errors."""
    import threading  # only the concurrent writers use threads

    acks: dict[int, list[int]] = {i: [] for i in range(n_clients)}
    sent: dict[int, int] = {i: 0 for i in range(n_clients)}
    errors: list[str] = []

    def client_loop(i: int):
        rng = np.random.default_rng(seed + i)
        with httpx.Client(base_url=url, timeout=timeout) as client:
            for _ in range(per_client):
                X, y = regression_batch(rng, n=5 + i, task=i)
                for _attempt in range(20):
                    r = client.post(f"/tasks/c{i % 4}/data", json={"X": X, "y": y})
                    if r.status_code not in retry:
                        break
                    time.sleep(0.05)
                if r.status_code != 200:
                    errors.append(f"client {i}: {r.status_code} {r.text}")
                    return
                acks[i].append(r.json()["version"])
                sent[i] += len(y)

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join)
    return acks, sent, errors
