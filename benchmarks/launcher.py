"""The uvicorn launcher shared by the benchmarks and the tests, and throwaway backends.

:class:`Server` runs ``uvicorn <app>`` as a subprocess (its own process group) on a free
loopback port, waits until it answers, stops it (SIGTERM, then SIGKILL) or kills it with
SIGKILL as a crash would, and can be started again on the same port.
:func:`create_throwaway_database` / :func:`drop_throwaway_backend` make and remove an empty
PostgreSQL database and a run's Redis keys; :func:`migrate` runs ``alembic upgrade head``;
:func:`inprocess_service_env` sets up either backend for an app run in the caller's process.

Standard library only (psycopg and redis are imported by the helpers that need them).
"""
from __future__ import annotations

import glob
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: The repository root: uvicorn and alembic run from here, so that ``service`` (and the tests'
#: own apps, e.g. ``tests.service.fault_app:app``) import from the checkout.
ROOT = Path(__file__).resolve().parents[1]

# Loopback only: never through a proxy set in the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url: str, timeout: float = 1.0) -> int | None:
    """The HTTP status of ``GET url``, or ``None`` when nothing answers."""
    try:
        with _OPENER.open(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, http.client.HTTPException):
        return None


class Server:
    """A real ``uvicorn <app>`` subprocess on ``127.0.0.1:<port>``.

    ``env`` is added to this process's environment. ``log_path``: the server's stdout and
    stderr are appended there (else discarded). ``ready_path``: the route that must answer 200
    before :meth:`start` returns (``/readyz``: database, schema and lock reachable;
    ``/healthz``: the process answers). ``access_log=False`` passes ``--no-access-log``.
    """

    def __init__(self, env: dict, workers: int = 1, port: int | None = None, log_path: Path | None = None,
                 app: str = "service.main:app", *, ready_path: str = "/readyz", access_log: bool = True,
                 log_level: str = "warning", cwd: str | os.PathLike = ROOT):
        self.app = app
        self.port = port or free_port()
        self.env = {**os.environ, **env}
        self.workers = workers
        self.log_path = log_path
        self.ready_path = ready_path
        self.access_log = access_log
        self.log_level = log_level
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "uvicorn", self.app, "--host", "127.0.0.1", "--port", str(self.port),
               "--workers", str(self.workers), "--log-level", self.log_level,
               "--http", "service.server:HttpProtocol"]
        return cmd if self.access_log else cmd + ["--no-access-log"]

    def start(self, timeout: float = 30.0) -> "Server":
        """Start the process and wait until ``ready_path`` answers 200. Raises
        :class:`RuntimeError` (naming the log file) if the process exits or is not ready in
        ``timeout`` seconds; in the latter case it is stopped first."""
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(self.command(), cwd=self.cwd, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            if out is not subprocess.DEVNULL:
                out.close()  # the child holds its own copy
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"uvicorn exited with {self.proc.returncode}; log: {self.log_path}")
            if http_status(self.url + self.ready_path) == 200:
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"uvicorn did not become ready in {timeout}s; log: {self.log_path}")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL the whole process group (master and workers), as a crash would."""
        if self.running():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group; SIGKILL it if it has not exited after ``timeout`` s."""
        if self.running():
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def worker_pids(self) -> list[int]:
        """The processes serving the app (see :func:`worker_pids`)."""
        return worker_pids(self.proc.pid) if self.running() else []

    def wait_workers(self, timeout: float = 10.0) -> list[int]:
        """Wait until ``workers`` worker processes exist (``--workers`` > 1 starts them after
        the master answers); returns their pids."""
        deadline = time.monotonic() + timeout
        pids = self.worker_pids()
        while self.workers > 1 and len(pids) < self.workers and time.monotonic() < deadline:
            time.sleep(0.1)
            pids = self.worker_pids()
        return pids

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ----------------------------------------------------------------------------- processes
def children(pid: int) -> list[int]:
    """Direct child processes of ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def worker_pids(master: int) -> list[int]:
    """uvicorn --workers N: the master's children running the app (not the resource tracker etc.)."""
    kids = []
    for pid in children(master):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"multiprocessing.resource_tracker" not in cmd and b"semaphore_tracker" not in cmd:
            kids.append(pid)
    return kids or [master]  # --workers 1: the master serves


# ----------------------------------------------------------------------------- throwaway backends
def create_throwaway_database(pg_admin_url: str, tag: str) -> tuple[str, str]:
    """Create an empty PostgreSQL database for one run (on the server of ``pg_admin_url``, a
    libpq URL); returns (name, SQLAlchemy URL)."""
    import psycopg

    dbname = f"fcl3_{tag}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    return dbname, "postgresql+psycopg://" + pg_admin_url.split("://", 1)[1].rsplit("/", 1)[0] + f"/{dbname}"


def redis_prefix(tag: str) -> str:
    """A unique Redis key prefix for one run."""
    return f"fcl3{tag}:{uuid.uuid4().hex[:8]}:"


@contextmanager
def inprocess_service_env(env: dict[str, str], tmp: Path, tag: str, postgres: bool = False,
                          pg_admin_url: str = "", redis_url: str = "") -> Iterator[str | None]:
    """``env`` and the backend's settings in ``os.environ`` for the block, for a service app made
    in this process: a SQLite file in ``tmp``, or with ``postgres`` a throwaway database (named
    after ``tag``, migrated) with Redis locks under a key prefix of its own. The environment is
    restored and the database dropped afterwards. Yields the database's name (None: SQLite)."""
    env = {"DATABASE_URL": "", "REDIS_URL": "", "SQLITE_PATH": str(tmp / "fcl3.db"), **env}
    dbname = prefix = None
    if postgres:
        dbname, url = create_throwaway_database(pg_admin_url, tag)
        prefix = redis_prefix(tag)
        env.update({"DATABASE_URL": url, "REDIS_URL": redis_url, "REDIS_PREFIX": prefix,
                    "AUTO_CREATE_SCHEMA": "false"})
    saved = {k: os.environ.get(k) for k in env}
    try:
        if dbname is not None:
            migrate({**os.environ, **env})
        os.environ.update(env)
        yield dbname
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if dbname is not None:
            drop_throwaway_backend(pg_admin_url, dbname, redis_url, prefix)


def drop_throwaway_backend(pg_admin_url: str, dbname: str, redis_url: str, prefix: str) -> None:
    """Drop the run's database and delete its Redis keys (best effort for Redis)."""
    import psycopg

    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    try:
        import redis

        r = redis.Redis.from_url(redis_url)
        for key in r.scan_iter(match=prefix + "*"):
            r.delete(key)
    except Exception:  # noqa: BLE001
        pass


def migrate(env: dict, cwd: str | os.PathLike = ROOT) -> None:
    """``alembic upgrade head`` on the database of ``env["DATABASE_URL"]`` (``env`` is the
    whole environment of the subprocess)."""
    subprocess.run([sys.executable, "-m", "alembic", "upgrade", "head"], cwd=cwd, env=env, check=True,
                   capture_output=True)


# ----------------------------------------------------------------------------- throwaway servers
def find_pg_bindir() -> Path | None:
    """The newest ``/usr/lib/postgresql/*/bin`` holding ``initdb``, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: [int(v) if v.isdigit() else 0
                                                                                 for v in Path(p).parts[-3].split(".")])
    return Path(found[-1]).parent if found else None


class PgCluster:
    """A throwaway PostgreSQL cluster: ``initdb`` in a temporary directory (its socket there
    too), a spare loopback port, no fsync; run as ``postgres`` when we are root (initdb refuses
    root). Stopped and started again on the same port (the tests' and the fault suite's)."""

    def __init__(self, bindir: Path, max_connections: int = 200):
        self.bindir = bindir
        self.max_connections = max_connections
        self.dir = Path(tempfile.mkdtemp(prefix="fcl3-pg-"))
        self.data, self.log = self.dir / "data", self.dir / "pg.log"
        self.port = free_port()
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120)

    def init(self) -> "PgCluster":
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        return self

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections={self.max_connections}"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, dbname: str = "postgres") -> str:
        """The SQLAlchemy URL of database ``dbname`` of the cluster."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{dbname}"

    def cleanup(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisProcess:
    """A ``redis-server`` of its own on a spare loopback port, no persistence: stopped and
    restarted by a test or a fault run (the machine's shared Redis is never touched)."""

    def __init__(self):
        self.binary = shutil.which("redis-server")
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisProcess":
        import redis

        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--daemonize", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        client = redis.Redis.from_url(self.url, socket_connect_timeout=1)
        deadline = time.monotonic() + 10
        try:
            while True:
                try:
                    client.ping()
                    return self
                except redis.exceptions.ConnectionError:
                    if time.monotonic() > deadline or self.proc.poll() is not None:
                        raise
                    time.sleep(0.05)
        finally:
            client.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
