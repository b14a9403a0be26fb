"""The update lock: one writer per model at a time, across machines (Redis), across the
processes of one machine (file locks: the embedded SQLite default, ``--workers N``) or in one
process.

The lock only keeps writers from wasting work on each other: it can expire while its holder
still runs (GC pause, slow solve), so it is *not* the write guard. The guard is the version
compare-and-set in :mod:`service.writes`, inside the commit's transaction.
"""
from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

log = logging.getLogger("service.locks")


class LockBusy(Exception):
    """The lock was not free within ``wait`` seconds (answered with 503 + Retry-After)."""

    def __init__(self, name: str, wait: float):
        super().__init__(f"another update of this model is running (lock {name!r} not free after {wait:g}s); retry")
        self.wait = wait


class LockBackendDown(Exception):
    """The lock service (Redis) cannot be reached."""


class LocalLocks:
    """In-process locks: correct for a single process (an in-memory SQLite database, or
    PostgreSQL without Redis in one process)."""

    backend = "in-process"

    def __init__(self, ttl: float, wait: float):
        self.ttl, self.wait = ttl, wait
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    @contextmanager
    def hold(self, name: str, ttl: float | None = None, wait: float | None = None) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(name, threading.Lock())
        wait = self.wait if wait is None else wait
        if not lock.acquire(timeout=wait):
            raise LockBusy(name, wait)
        try:
            yield
        finally:
            lock.release()

    def ping(self) -> None:
        return None

    def close(self) -> None:
        return None


_SAFE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}$")


class FileLocks:
    """Cross-process locks of one machine: one lock file per model in ``directory`` (next to
    the SQLite database), held with ``flock`` through the ``filelock`` library.

    Writers of every process queue on it (polling every 10 ms) for at most ``wait`` seconds,
    then :class:`LockBusy` (503 + Retry-After). The kernel releases a lock when its process
    dies, so a crashed holder never blocks the others and no TTL is needed (``ttl`` is kept
    for the idempotency claims, see :mod:`service.idempotency`). Threads of one process first
    queue on an in-process lock, so at most one of them polls the file."""

    backend = "file"

    def __init__(self, directory: str | Path, ttl: float, wait: float):
        import filelock

        self._filelock = filelock
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ttl, self.wait = ttl, wait
        self._local = LocalLocks(ttl, wait)
        self._files: dict[str, object] = {}
        self._guard = threading.Lock()

    def path(self, name: str) -> Path:
        stem = name if _SAFE_NAME.match(name) else "h-" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
        return self.directory / f"{stem}.lock"

    def _file(self, name: str):
        with self._guard:
            lock = self._files.get(name)
            if lock is None:  # thread_local: each thread acquires with its own descriptor
                lock = self._files[name] = self._filelock.FileLock(str(self.path(name)), thread_local=True)
            return lock

    @contextmanager
    def hold(self, name: str, ttl: float | None = None, wait: float | None = None) -> Iterator[None]:
        wait = self.wait if wait is None else wait
        deadline = time.monotonic() + wait
        with self._local.hold(name, wait=wait):
            lock = self._file(name)
            try:
                lock.acquire(timeout=max(0.0, deadline - time.monotonic()), poll_interval=0.01)
            except self._filelock.Timeout:
                raise LockBusy(name, wait) from None
            try:
                yield
            finally:
                lock.release()

    def ping(self) -> None:
        if not self.directory.is_dir():
            raise LockBackendDown(f"lock directory {self.directory} is missing")

    def close(self) -> None:
        return None


class RedisLocks:
    """redis-py ``Lock`` per model: ``timeout`` = TTL, ``blocking_timeout`` = how long to wait.

    Acquire and release happen in one ``with`` in one thread (``thread_local`` tokens)."""

    backend = "redis"

    def __init__(self, url: str, prefix: str, ttl: float, wait: float):
        import redis

        self._redis_mod = redis
        self.client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5, health_check_interval=30)
        self.prefix, self.ttl, self.wait = prefix, ttl, wait

    def key(self, name: str) -> str:
        return f"{self.prefix}lock:{name}"

    @contextmanager
    def hold(self, name: str, ttl: float | None = None, wait: float | None = None) -> Iterator[None]:
        errors = self._redis_mod.exceptions
        wait = self.wait if wait is None else wait
        lock = self.client.lock(self.key(name), timeout=self.ttl if ttl is None else ttl,
                                blocking_timeout=wait, sleep=0.01)
        try:
            acquired = lock.acquire()
        except (errors.ConnectionError, errors.TimeoutError) as exc:
            raise LockBackendDown(f"redis unavailable: {exc}") from exc
        if not acquired:
            raise LockBusy(name, wait)
        try:
            yield
        finally:
            try:
                lock.release()
            except errors.LockNotOwnedError:
                # It expired while we worked; the version check already decided the commit.
                log.warning("update lock %s expired before release", self.key(name))
            except (errors.ConnectionError, errors.TimeoutError) as exc:
                log.warning("could not release update lock %s: %s (it expires by itself)", self.key(name), exc)

    def ping(self) -> None:
        errors = self._redis_mod.exceptions
        try:
            self.client.ping()
        except (errors.ConnectionError, errors.TimeoutError) as exc:
            raise LockBackendDown(f"redis unavailable: {exc}") from exc

    def close(self) -> None:
        self.client.close()


def make_locks(settings) -> LocalLocks | FileLocks | RedisLocks:
    """Redis when ``REDIS_URL`` is set; else file locks next to the SQLite file (the embedded
    default: safe for ``--workers N`` on one machine); else (in-memory SQLite, or PostgreSQL
    without Redis) in-process locks, right for one process only."""
    if settings.REDIS_URL:
        return RedisLocks(settings.REDIS_URL, settings.REDIS_PREFIX, settings.LOCK_TTL, settings.LOCK_WAIT)
    path = sqlite_file(settings.database_url)
    if path is not None:
        return FileLocks(path.with_name(path.name + ".locks"), settings.LOCK_TTL, settings.LOCK_WAIT)
    return LocalLocks(settings.LOCK_TTL, settings.LOCK_WAIT)


def sqlite_file(url: str) -> Path | None:
    """The database file of an SQLite URL (``None``: not SQLite, or in memory)."""
    if not url.startswith("sqlite"):
        return None
    from sqlalchemy.engine import make_url

    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database).resolve()
