"""Fixtures of the client and ``fcl3`` tests: real uvicorn services, started once per session.

* ``sqlite_service``: the embedded default (an SQLite file);
* ``postgres_service``: PostgreSQL + Redis (a throwaway database, a unique Redis prefix; skipped
  with the reason when absent, a failure under CI, as in tests/service);
* ``service``: both, one after the other (parametrized);
* ``fault_service``: the service with slow commits and ``LOCK_WAIT=0``, so that concurrent
  batches get 503 + Retry-After.

Every service has API keys (``WRITE_KEY``, ``READ_KEY``); models are made with small, fast
hyper-parameters (``PARAMS``), each test on models of its own names.
"""
from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks.launcher import Server, free_port
from tests.service.conftest import (  # noqa: F401 - fixtures used here
    ESTIMATOR, PARAMS, REDIS_URL, pg_database, postgres_server, redis_server, unique_name)

ROOT = Path(__file__).resolve().parents[2]
WRITE_KEY = "client-tests-write-key"
READ_KEY = "client-tests-read-key"
STREAM = ROOT / "examples" / "stream.csv"


@dataclass
class Service:
    backend: str
    server: Server

    @property
    def url(self) -> str:
        return self.server.url


def _env(**extra) -> dict:
    return {"API_WRITE_KEYS": WRITE_KEY, "API_READ_KEYS": READ_KEY, "FCL3_ESTIMATOR": ESTIMATOR,
            "FCL3_PARAMS": json.dumps(PARAMS), "FCL3_KIND": "regression", "MODEL_NAME": unique_name("default"),
            "LOG_LEVEL": "WARNING", "DATABASE_URL": "", "REDIS_URL": "", **extra}


@pytest.fixture(scope="session")
def sqlite_service(tmp_path_factory):
    d = tmp_path_factory.mktemp("sqlite-service")
    server = Server(_env(SQLITE_PATH=str(d / "fcl3.db")), log_path=d / "server.log", access_log=False)
    server.start(timeout=60)
    yield Service("sqlite", server)
    server.stop()


@pytest.fixture(scope="session")
def postgres_service(tmp_path_factory, pg_database, redis_server):
    _, prefix = redis_server
    d = tmp_path_factory.mktemp("postgres-service")
    server = Server(_env(DATABASE_URL=pg_database, REDIS_URL=REDIS_URL, REDIS_PREFIX=prefix, AUTO_CREATE_SCHEMA="false"),
                    log_path=d / "server.log", access_log=False)
    server.start(timeout=60)
    yield Service("postgres", server)
    server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def service(request) -> Service:
    return request.getfixturevalue(f"{request.param}_service")


@pytest.fixture(scope="session")
def fault_service(tmp_path_factory):
    """Commits that take 0.4 s while holding the update lock, and no waiting for the lock: a
    batch sent while another is being committed gets 503 with Retry-After."""
    d = tmp_path_factory.mktemp("fault-service")
    server = Server(_env(SQLITE_PATH=str(d / "fcl3.db"), LOCK_WAIT="0", FCL3_FAULT_COMMIT_DELAY="0.4"),
                    app="tests.service.fault_app:app", log_path=d / "server.log", access_log=False)
    server.start(timeout=60)
    yield Service("sqlite", server)
    server.stop()


@pytest.fixture
def model_name():
    return unique_name("c")


class DroppingProxy:
    """A loopback TCP proxy in front of ``target`` that, for its first ``drop`` connections,
    forwards the request but closes the connection instead of passing on the answer — a
    connection lost after the server got (and applied) the request. ``closed()`` refuses
    connections until ``open()``."""

    def __init__(self, target_port: int, drop: int = 0):
        self.target = ("127.0.0.1", target_port)
        self.port = free_port()
        self.drop = drop
        self.connections = 0
        self._listener: socket.socket | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def open(self) -> "DroppingProxy":
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(16)
        self._listener = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True).start()
        return self

    def close(self) -> None:
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            self._listener = None

    def _accept(self, ls: socket.socket) -> None:
        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return
            self.connections += 1
            dropping = self.connections <= self.drop
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, dropping), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket, drop: bool) -> None:
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
                s.close()
