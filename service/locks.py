"""The update lock: one writer per model at a time, across processes (Redis) or in one
process (embedded default).

The lock only keeps writers from wasting work on each other: it can expire while its holder
still runs (GC pause, slow solve), so it is *not* the write guard. The guard is the version
compare-and-set in :mod:`service.writes`, inside the commit's transaction.
"""
from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
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
    """In-process locks: correct for a single process (the embedded SQLite default)."""

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


def make_locks(settings) -> LocalLocks | RedisLocks:
    if settings.REDIS_URL:
        return RedisLocks(settings.REDIS_URL, settings.REDIS_PREFIX, settings.LOCK_TTL, settings.LOCK_WAIT)
    return LocalLocks(settings.LOCK_TTL, settings.LOCK_WAIT)
