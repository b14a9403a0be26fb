"""Process liveness: this process as a *holder*, a short string written into what it holds (an
Idempotency-Key claim's ``owner``, a Redis update lock's value), and whether the process a
holder names is gone, so that what it held is taken over at once instead of at its TTL.

Holders:

* ``g<lease>`` (hex), on PostgreSQL: the process holds the session-level advisory lock
  ``(LEASE_SPACE, lease)`` on a connection of its own (:class:`PgLease`). The server drops it
  the moment the process dies (its socket closes) or the database restarts, so a lease nobody
  holds (``pg_try_advisory_xact_lock`` succeeds) names a process that is gone, from any machine.
  A lease lost while its process lives is taken again under a new id.
* ``p<pid>-<start>@<machine>`` (hex), on SQLite: the process id and its start time (clock
  ticks since boot, ``/proc``), judged only on the same machine and pid namespace
  (:func:`machine`): gone when no such process lives, it is a zombie, or its pid was given to
  another process. Without ``@<machine>`` (the claims' form: their ``owner`` column has 32
  characters) it is judged on this machine, where the SQLite file is.
* Anything else (a value written before holders existed, another kind): never gone, so what it
  holds lasts its TTL.

A process holds one lease per database, whoever asks: every :class:`Liveness` of that database
shares one :class:`PgLease`, hence one connection (:meth:`PgLease.of`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Connection, create_engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.pool import NullPool

log = logging.getLogger("service.leases")

#: The first key of the advisory locks that are process leases on PostgreSQL ("FCL3").
LEASE_SPACE = 0x46434C33
#: The ``application_name`` of the lease connections (libpq drivers), to count them in ``pg_stat_activity``.
APPLICATION_NAME = "fcl3-lease"


# ----------------------------------------------------------------------------- one machine
def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat``); None where
    there is no ``/proc``; :class:`ProcessLookupError` if there is no such process or it is a
    zombie (dead, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            raise ProcessLookupError(pid) from None
        return None
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) ": state is field 3, starttime 22
    if fields[0] in (b"Z", b"X", b"x"):
        raise ProcessLookupError(pid)
    return int(fields[19])


def process_gone(pid: int, start: int) -> bool:
    """Whether process ``pid`` that started at ``start`` (0: unknown) is gone from this machine:
    no such process, a zombie, or another process given the same pid since."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: it exists, as another user
        pass
    try:
        started = process_start(pid)
    except ProcessLookupError:
        return True
    return started is not None and start != 0 and started != start


@functools.cache
def machine() -> str:
    """This machine and pid namespace (a short hash of the kernel's boot id and the namespace's
    inode): the scope in which a process id names one process. Fixed for the process's life."""
    parts: list[str] = []
    reads: tuple[Callable[[], str], ...] = (
        lambda: Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
        lambda: os.readlink("/proc/self/ns/pid"),
    )
    for read in reads:
        try:
            parts.append(read())
        except OSError:
            parts.append("?")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:12]


@functools.lru_cache(maxsize=1)
def _process_tag(pid: int) -> str:
    """``p<pid>-<start>`` (hex) of the process ``pid`` (called with this process's own, so a
    forked child, whose pid differs, gets its own)."""
    try:
        start = process_start(pid) or 0
    except ProcessLookupError:  # pragma: no cover - we exist
        start = 0
    return f"p{pid:x}-{start:x}"


def local_holder(scoped: bool = True) -> str:
    """This process on one machine: ``p<pid>-<start>`` (hex), followed by ``@<machine>`` if ``scoped``."""
    tag = _process_tag(os.getpid())
    return f"{tag}@{machine()}" if scoped else tag


def local_gone(holder: str) -> bool:
    """Whether the process of a ``p<pid>-<start>[@<machine>]`` holder is gone (False when it
    cannot be told: another machine, a malformed holder, this process)."""
    process, at, where = holder.partition("@")
    if (at and where != machine()) or process == local_holder(scoped=False):
        return False
    pid, dash, start = process[1:].partition("-")
    try:
        return bool(dash) and process_gone(int(pid, 16), int(start, 16))
    except ValueError:
        return False


# ----------------------------------------------------------------------------- PostgreSQL
class PgLease:
    """This process's lease on one PostgreSQL database: the session advisory lock
    ``(LEASE_SPACE, id)`` held on a connection of its own (autocommit), which also asks
    whether other leases are held. One per database and process (:meth:`of`), shared by
    its users; the connection is closed when the last one lets go.

    The connection is checked at most every ``CHECK_EVERY`` seconds when the lease is asked
    for, and a lost lease is taken again under a new id; after a failed connect, none is tried
    for ``CHECK_EVERY`` seconds (the database was down a moment ago: fail fast)."""

    CHECK_EVERY = 1.0
    CONNECT_TIMEOUT = 2

    _shared: dict[str, PgLease] = {}
    _shared_guard = threading.Lock()

    @classmethod
    def of(cls, url: str | URL) -> PgLease:
        """The lease of this process on the database at ``url`` (made once)."""
        url = make_url(url)
        key = url.render_as_string(hide_password=False)
        with cls._shared_guard:
            if key not in cls._shared:
                cls._shared[key] = cls(url)
            return cls._shared[key]

    def __init__(self, url: URL):
        libpq = url.get_driver_name() in ("psycopg", "psycopg2")
        args = {"connect_timeout": self.CONNECT_TIMEOUT, "application_name": APPLICATION_NAME} if libpq else {}
        self._own = create_engine(url, poolclass=NullPool, connect_args=args)
        self._conn: Connection | None = None
        self._pid = 0
        self._checked = self._failed = float("-inf")
        self._guard = threading.Lock()
        self._users = 0
        self.id: int | None = None

    def use(self) -> None:
        """One more user (the lease is taken when first asked for)."""
        with self._guard:
            self._users += 1

    def let_go(self) -> None:
        """One user less; the last one closes the connection (the lease is then free: gone)."""
        with self._guard:
            self._users = max(self._users - 1, 0)
            if self._users == 0:
                self._drop()

    def holder(self) -> str:
        """``g<id>`` of the lease this process holds now (taken first if need be; a database
        error if it cannot be)."""
        with self._guard:
            self._hold()
            return f"g{self.id:x}"

    def _hold(self) -> None:
        if self._conn is not None and self._pid != os.getpid():  # forked: the parent's socket
            self._conn = self.id = None
        if self._conn is not None and time.monotonic() - self._checked >= self.CHECK_EVERY:
            try:
                self._conn.exec_driver_sql("SELECT 1")
                self._checked = time.monotonic()
            except DBAPIError:
                log.warning("lease %s lost (the database dropped its connection): taking a new one", self.id)
                self._drop()
        if self._conn is not None:
            return
        if time.monotonic() - self._failed < self.CHECK_EVERY:
            raise OperationalError(
                "connect (process lease)",
                None,
                ConnectionError("the database did not answer the lease's connect a moment ago"),
            )
        try:
            conn = self._own.connect().execution_options(isolation_level="AUTOCOMMIT")
        except Exception:
            self._failed = time.monotonic()
            raise
        try:
            for _ in range(16):
                lease = secrets.randbelow(2**31 - 2) + 1
                if conn.exec_driver_sql(f"SELECT pg_try_advisory_lock({LEASE_SPACE}, {lease})").scalar():
                    self._conn, self.id, self._pid, self._checked = conn, lease, os.getpid(), time.monotonic()
                    return
            raise RuntimeError("no free lease id after 16 tries")  # pragma: no cover - 16 ids in 2^31 all taken
        except BaseException:
            conn.close()
            raise

    def gone(self, lease: int, conn: Connection | None = None) -> bool:
        """Whether nobody holds the lease ``lease`` (its process is gone); ours is held. Asked in
        the transaction of ``conn`` if given (the transaction lock, if granted, lasts until it
        ends), else on the lease's own connection (it ends with the statement)."""
        if not 0 < lease < 2**31:
            return False
        query = f"SELECT pg_try_advisory_xact_lock({LEASE_SPACE}, {lease})"
        if conn is not None:
            if lease == self.id and self._conn is not None:
                return False
            return bool(conn.exec_driver_sql(query).scalar())
        with self._guard:
            self._hold()
            if lease == self.id:  # ours (its session would be granted it again)
                return False
            try:
                assert self._conn is not None  # held by _hold()
                return bool(self._conn.exec_driver_sql(query).scalar())
            except Exception:
                self._drop()  # taken again by the next call
                raise

    def _drop(self) -> None:
        conn, self._conn, self.id = self._conn, None, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - a dead connection
                pass


# ----------------------------------------------------------------------------- either
class Liveness:
    """One user's view of this process's liveness on the database at ``database_url`` (the
    claims of :mod:`service.writing.idempotency`, the update locks of :mod:`service.writing.locks`).
    ``kind``: ``"g"`` on PostgreSQL, ``"p"`` elsewhere, None without a database (no holder).
    :meth:`close` ends this user's share of the lease; using it again takes a share again."""

    def __init__(self, database_url: str | URL | None):
        url = make_url(database_url) if database_url else None
        self.kind = None if url is None else "g" if url.get_backend_name() == "postgresql" else "p"
        self._url = url
        self._lease: PgLease | None = None
        self._guard = threading.Lock()

    def lease(self) -> PgLease:
        """The shared lease, this user counted among its users."""
        with self._guard:
            if self._lease is None:
                assert self._url is not None  # a lease is asked for only on PostgreSQL
                lease = PgLease.of(self._url)
                lease.use()
                self._lease = lease
            return self._lease

    def holder(self, scoped: bool = True) -> str:
        """This process as a holder: ``g<lease>`` on PostgreSQL (a database error if the lease
        cannot be taken), else :func:`local_holder` (``scoped``: with ``@<machine>``); '' without
        a database."""
        if self.kind == "g":
            return self.lease().holder()
        return local_holder(scoped) if self.kind == "p" else ""

    def gone(self, holder: str, conn: Connection | None = None) -> bool:
        """Whether the process of ``holder`` (as written by :meth:`holder`) is gone; False when
        it cannot be told. On PostgreSQL asked in the transaction of ``conn`` if given, else on
        the lease's connection; a database error if it cannot be asked."""
        if not holder or holder[0] != self.kind:
            return False
        if self.kind == "p":
            return local_gone(holder)
        try:
            lease = int(holder[1:], 16)
        except ValueError:
            return False
        return self.lease().gone(lease, conn)

    def close(self) -> None:
        """This user lets go of the lease (closed when it was the last)."""
        with self._guard:
            lease, self._lease = self._lease, None
        if lease is not None:
            lease.let_go()
