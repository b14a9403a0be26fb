"""Hosts on one Linux machine: network namespaces joined by a bridge, PostgreSQL + Redis on one,
``uvicorn service.main:app`` on the others (issue 26: replicas proven across hosts).

One run's topology (``S``: a /24 of 10.231.0.0/16 that no address or route of the machine
overlaps, picked at random; ``<run>``: this process's pid and 6 random hex digits)::

    root namespace (the test or benchmark)       fcl3n-<run>-db                    fcl3n-<run>-h<i>
    f3n<hex> 10.231.S.254/24  ====veth====  up0 -+- br0 10.231.S.1/24          eth0 10.231.S.(10+i)/24
                                                 |  PostgreSQL :5432, Redis :6379      uvicorn :8000
                                                 +- h<i> ============veth=================+

Every link is a veth pair into the bridge ``br0`` of the database namespace: one network, no
routing and no forwarding anywhere, nothing added to the root namespace but its veth end and
that end's /24 (the kernel's connected route, gone with the link). Traffic goes only between
these addresses. PostgreSQL is a cluster of its own (``initdb`` in a temporary directory, run as
the ``postgres`` user, trust authentication for the /24 only, ``fsync`` as asked), Redis a
``redis-server`` of its own without persistence; the schema is migrated once, from the root
namespace, before any API host starts (``AUTO_CREATE_SCHEMA=false`` on the hosts).

:meth:`Topology.close` ends every process the run started (each API host's process group, the
PostgreSQL cluster, Redis, then anything else left in its namespaces), deletes its namespaces
and link and removes its temporary directory; it is safe to call at any point of
:meth:`Topology.start` and more than once. A run killed with SIGKILL leaves its namespaces
behind: ``python -m benchmarks.netns --clean`` removes those whose creating process is gone
(names ``fcl3n-<pid>-...``; a live process's are left alone). Names are unique per run, so a
leftover never breaks the next run.

Needs root (``ip netns``), iproute2, PostgreSQL's server binaries and ``redis-server``:
:func:`unavailable` says what is missing.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .launcher import ROOT, find_pg_bindir, http_status

PREFIX = "fcl3n"
DB_PORT, REDIS_PORT, API_PORT = 5432, 6379, 8000
DATABASE = "fcl3"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip() or r.returncode}")
    return r


def unavailable() -> str | None:
    """Why namespaced hosts cannot run here (a sentence), or None when they can."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are Linux only (this is {sys.platform})"
    if os.geteuid() != 0:
        return "not root: creating network namespaces (ip netns add) needs root"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    if find_pg_bindir() is None:
        return "PostgreSQL's server binaries (/usr/lib/postgresql/*/bin/initdb) are not installed"
    if shutil.which("redis-server") is None:
        return "redis-server is not installed"
    if shutil.which("runuser") is None:
        return "runuser is not installed (PostgreSQL runs as the postgres user)"
    probe = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(3)}-probe"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"`ip netns add` is not allowed here: {r.stderr.strip()}"
    try:
        r = _ip("-n", probe, "link", "add", "br0", "type", "bridge", check=False)
        if r.returncode != 0:
            return f"no bridge in a network namespace: {r.stderr.strip()}"
        r = _ip("-n", probe, "link", "add", "name", "a", "type", "veth", "peer", "name", "b", check=False)
        if r.returncode != 0:
            return f"no veth pairs: {r.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.231.0.0/16 that overlaps none of the machine's addresses and routes."""
    used = []
    for args in (["-j", "-4", "route", "show", "table", "all"], ["-j", "-4", "addr"]):
        for entry in json.loads(_ip(*args).stdout or "[]"):
            nets = [entry.get("dst")] + [f"{a['local']}/{a['prefixlen']}" for a in entry.get("addr_info", [])]
            for n in nets:
                if n and n != "default":
                    try:
                        used.append(ipaddress.ip_network(n, strict=False))
                    except ValueError:
                        pass
    candidates = [ipaddress.ip_network(f"10.231.{s}.0/24") for s in range(1, 255)]
    free = [c for c in candidates if not any(c.overlaps(u) for u in used)]
    if not free:
        raise RuntimeError("no free /24 in 10.231.0.0/16")
    return free[secrets.randbelow(len(free))]


@dataclass
class ApiHost:
    """One API host: its namespace, address and uvicorn process (a process group of its own)."""

    index: int
    netns: str
    address: str
    workers: int
    log: Path
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.address}:{API_PORT}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL the host's whole process group (uvicorn's master and workers), as a crash."""
        if self.running():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@dataclass
class Topology:
    """A database host and ``len(workers)`` API hosts (``workers[i]`` uvicorn workers on host
    ``i``), each in its own network namespace (see the module's docstring). ``env``: the API
    hosts' settings beyond the database, Redis and schema ones (``MODEL_NAME``, ``FCL3_*``,
    ``LOCK_TTL``...); ``fsync``: PostgreSQL's (off: faster, not crash-safe, the tests')."""

    workers: tuple[int, ...] = (1, 1)
    env: dict[str, str] = field(default_factory=dict)
    fsync: bool = False
    run: str = field(default_factory=lambda: f"{os.getpid()}-{secrets.token_hex(3)}")

    def __post_init__(self):
        self.hexid = self.run.rsplit("-", 1)[1]
        self.db_ns = f"{PREFIX}-{self.run}-db"
        self.root_link = f"f3n{self.hexid}"
        self.namespaces: list[str] = []
        self.dir: Path | None = None
        self.subnet: ipaddress.IPv4Network | None = None
        self.hosts: list[ApiHost] = []
        self.redis: subprocess.Popen | None = None
        self.pg_bindir = find_pg_bindir()
        self.pg_started = False

    # --------------------------------------------------------------------------- addresses
    def _addr(self, last: int) -> str:
        return str(self.subnet.network_address + last)

    @property
    def db_address(self) -> str:
        return self._addr(1)

    @property
    def database_url(self) -> str:
        return f"postgresql+psycopg://postgres@{self.db_address}:{DB_PORT}/{DATABASE}"

    @property
    def redis_url(self) -> str:
        return f"redis://{self.db_address}:{REDIS_PORT}/0"

    @property
    def urls(self) -> list[str]:
        return [h.url for h in self.hosts]

    def host_env(self) -> dict[str, str]:
        """The API hosts' environment: this process's, the run's settings, the backends'."""
        return {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **self.env,
                "DATABASE_URL": self.database_url, "REDIS_URL": self.redis_url, "AUTO_CREATE_SCHEMA": "false"}

    # --------------------------------------------------------------------------- start
    def start(self, timeout: float = 90.0) -> "Topology":
        """Namespaces and links, PostgreSQL, Redis, the schema, then every API host (started
        together, each answering ``/readyz``). On failure everything made so far is removed."""
        try:
            self.dir = Path(tempfile.mkdtemp(prefix=f"{PREFIX}-{self.run}-"))
            os.chmod(self.dir, 0o711)  # the postgres user reaches its cluster below it
            self.subnet = free_subnet()
            self._network()
            self._postgres()
            self._redis()
            self._schema()
            self._api_hosts(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self.namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _network(self) -> None:
        plen = str(self.subnet.prefixlen)
        self._netns(self.db_ns)
        _ip("-n", self.db_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.db_ns, "addr", "add", f"{self.db_address}/{plen}", "dev", "br0")
        _ip("-n", self.db_ns, "link", "set", "br0", "up")
        _ip("link", "add", self.root_link, "type", "veth", "peer", "name", "up0", "netns", self.db_ns)
        _ip("-n", self.db_ns, "link", "set", "up0", "master", "br0", "up")
        _ip("addr", "add", f"{self._addr(254)}/{plen}", "dev", self.root_link)
        _ip("link", "set", self.root_link, "up")
        for i, w in enumerate(self.workers):
            ns = f"{PREFIX}-{self.run}-h{i}"
            self._netns(ns)
            _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", f"h{i}", "netns", self.db_ns)
            _ip("-n", self.db_ns, "link", "set", f"h{i}", "master", "br0", "up")
            address = self._addr(10 + i)
            _ip("-n", ns, "addr", "add", f"{address}/{plen}", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            self.hosts.append(ApiHost(i, ns, address, w, self.dir / f"api{i}.log"))

    def _as_postgres(self, *cmd: str, netns: str | None = None) -> subprocess.CompletedProcess:
        full = ["runuser", "-u", "postgres", "--", *cmd]
        if netns:
            full = ["ip", "netns", "exec", netns, *full]
        r = subprocess.run(full, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:2])}: {(r.stderr or r.stdout).strip()}")
        return r

    def _postgres(self) -> None:
        pg = self.dir / "pg"
        pg.mkdir()
        shutil.chown(pg, "postgres", "postgres")
        data = pg / "data"
        self._as_postgres(str(self.pg_bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                          "--no-sync")
        with open(data / "pg_hba.conf", "a") as f:  # the run's hosts only
            f.write(f"\nhost all all {self.subnet} trust\n")
        opts = (f"-p {DB_PORT} -k {pg} -c listen_addresses={self.db_address} -c max_connections=300 "
                f"-c fsync={'on' if self.fsync else 'off'}")
        self.pg_started = True  # from here on, close() stops it
        self._as_postgres(str(self.pg_bindir / "pg_ctl"), "-D", str(data), "-l", str(pg / "pg.log"), "-o", opts,
                          "-w", "-t", "60", "start", netns=self.db_ns)

    def _redis(self) -> None:
        import redis

        self.redis = subprocess.Popen(
            ["ip", "netns", "exec", self.db_ns, shutil.which("redis-server"), "--bind", self.db_address,
             "--port", str(REDIS_PORT), "--save", "", "--appendonly", "no", "--protected-mode", "no",
             "--daemonize", "no", "--dir", str(self.dir)],
            stdout=open(self.dir / "redis.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True)
        client = redis.Redis(host=self.db_address, port=REDIS_PORT, socket_connect_timeout=1)
        deadline = time.monotonic() + 20
        try:
            while True:
                try:
                    client.ping()
                    return
                except redis.exceptions.ConnectionError:
                    if time.monotonic() > deadline or self.redis.poll() is not None:
                        raise RuntimeError(f"redis-server did not answer; its log ends:\n"
                                           f"{_tail(self.dir / 'redis.log')}") from None
                    time.sleep(0.05)
        finally:
            client.close()

    def _schema(self) -> None:
        import psycopg

        with psycopg.connect(host=self.db_address, port=DB_PORT, user="postgres", dbname="postgres",
                             connect_timeout=5, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
        r = subprocess.run([sys.executable, "-m", "alembic", "upgrade", "head"], cwd=ROOT,
                           env={**os.environ, "DATABASE_URL": self.database_url}, capture_output=True, text=True,
                           timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"alembic upgrade head: {r.stderr.strip()[-2000:]}")

    def _api_hosts(self, timeout: float) -> None:
        for h in self.hosts:
            self.start_host(h, wait=False)
        for h in self.hosts:
            self.wait_ready(h, timeout)

    def start_host(self, h: ApiHost, wait: bool = True, timeout: float = 60.0) -> None:
        """Start (or start again) host ``h``'s uvicorn in its namespace."""
        cmd = ["ip", "netns", "exec", h.netns, sys.executable, "-m", "uvicorn", "service.main:app",
               "--host", h.address, "--port", str(API_PORT), "--workers", str(h.workers), "--log-level", "warning",
               "--no-access-log", "--http", "service.server:HttpProtocol"]
        with open(h.log, "ab") as out:
            h.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.host_env(), stdout=out, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        if wait:
            self.wait_ready(h, timeout)

    def wait_ready(self, h: ApiHost, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if h.proc.poll() is not None:
                raise RuntimeError(f"API host {h.index} exited with {h.proc.returncode}; its log ends:\n{_tail(h.log)}")
            if http_status(h.url + "/readyz", timeout=2.0) == 200:
                return
            time.sleep(0.2)
        raise RuntimeError(f"API host {h.index} not ready in {timeout:g} s; its log ends:\n{_tail(h.log)}")

    def cut(self, h: ApiHost) -> None:
        """Take host ``h``'s network link down: its processes run on, nothing reaches them and
        nothing leaves (no FIN, no RST: its connections stay open on the other side)."""
        _ip("-n", h.netns, "link", "set", "eth0", "down")

    # --------------------------------------------------------------------------- stop
    def close(self) -> None:
        """End every process of the run, delete its namespaces and link, remove its directory."""
        for h in self.hosts:
            if h.running():
                try:
                    os.killpg(h.proc.pid, signal.SIGKILL)
                    h.proc.wait(10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
        if self.pg_started and self.dir is not None:
            subprocess.run(["runuser", "-u", "postgres", "--", str(self.pg_bindir / "pg_ctl"), "-D",
                            str(self.dir / "pg" / "data"), "-m", "immediate", "-w", "stop"],
                           capture_output=True, timeout=60)
            self.pg_started = False
        if self.redis is not None and self.redis.poll() is None:
            os.killpg(self.redis.pid, signal.SIGKILL)
            self.redis.wait(10)
        for ns in reversed(self.namespaces):
            _end_namespace(ns)
        self.namespaces.clear()
        if _ip("link", "show", self.root_link, check=False).returncode == 0:
            _ip("link", "del", self.root_link, check=False)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> "Topology":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def _tail(path: Path, n: int = 3000) -> str:
    """The end of a log file (the run's directory goes with :meth:`Topology.close`)."""
    try:
        return path.read_bytes()[-n:].decode(errors="replace")
    except OSError:
        return "(no log)"


def _end_namespace(ns: str) -> None:
    """SIGKILL whatever still runs in ``ns`` (only this module starts processes there), then delete it."""
    for _ in range(3):
        pids = [int(p) for p in _ip("netns", "pids", ns, check=False).stdout.split()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    _ip("netns", "del", ns, check=False)


def clean_stale() -> list[str]:
    """Delete the namespaces, links and directories of runs whose process is gone (a run killed
    with SIGKILL cannot clean up after itself); the names deleted."""
    pattern = re.compile(rf"^{PREFIX}-(\d+)-([0-9a-f]{{6}})-")
    gone = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        m = pattern.match(name)
        if not m or Path(f"/proc/{m.group(1)}").exists():
            continue
        _end_namespace(name)
        _ip("link", "del", f"f3n{m.group(2)}", check=False)
        for d in Path(tempfile.gettempdir()).glob(f"{PREFIX}-{m.group(1)}-{m.group(2)}-*"):
            shutil.rmtree(d, ignore_errors=True)
        gone.append(name)
    return gone


if __name__ == "__main__":  # pragma: no cover
    if "--clean" in sys.argv[1:]:
        print("\n".join(clean_stale()) or "nothing to clean")
    else:
        print(unavailable() or "network namespaces available")
