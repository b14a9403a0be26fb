"""The update lock: one writer per model at a time, across machines (Redis), across the
processes of one machine (file locks: the embedded SQLite default, ``--workers N``) or in one
process.

The lock only keeps writers from wasting work on each other: it can expire while its holder
still runs (GC pause, slow solve), so it is *not* the write guard. The guard is the version
compare-and-set in :mod:`service.store.writes`, inside the commit's transaction.

**No update holds a lock past ``LOCK_TTL``**, on every backend: a hold ends ``LOCK_TTL``
seconds after it was acquired even if its holder still runs (Redis: the key's expiry; file
locks: a thread of the holding process unlocks the file; in-process locks: the next writer
takes the expired lock over). It is not renewed: an update that outlives it keeps computing,
another writer may then take the lock and commit first, and the late commit is refused by the
version check (409, "NOT applied", nothing stored: the client retries). The expired holder's
release is a no-op that logs a warning. The hyper-parameters' ranges (:mod:`core.params`)
bound the work of one update, so an update always ends, and a graceful shutdown waits for at
most the updates in flight.

**A holder that is gone** (killed with SIGKILL, its machine lost) leaves no wait behind: the
kernel drops a dead process's ``flock`` (file locks), and a Redis lock's value names its
holder (:class:`service.writing.lock_holders.Holders`: the process's lease of :mod:`service.writing.leases`,
the one its Idempotency-Key claims name), so a waiter that finds that holder gone deletes the
lock (a compare-and-delete of the exact value) and takes it at once. A live holder's lease is
held, so it is never taken over before its TTL; the one exception is a PostgreSQL lease lost
while its process lives (its connection cut, the database restarted), which is then the TTL
case above.

The three backends and the choice between them (:func:`make_locks`) are here; a file lock's
holds and their TTL are :mod:`service.writing.file_holds`, a Redis lock's holders
:mod:`service.writing.lock_holders`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import filelock

from service.db import sqlite_file
from service.writing.file_holds import FileHold, HoldExpiries
from service.writing.lock_holders import Holders

if TYPE_CHECKING:
    from redis.lock import Lock

    from service.config import Settings

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
    PostgreSQL without Redis in one process). A hold expires ``ttl`` seconds after it was
    acquired: a writer waiting then takes the lock over."""

    backend = "in-process"

    def __init__(self, ttl: float, wait: float):
        self.ttl, self.wait = ttl, wait
        self._held: dict[str, tuple[object, float]] = {}  # name -> (holder's token, expiry on the monotonic clock)
        self._changed = threading.Condition()

    @contextmanager
    def hold(self, name: str, ttl: float | None = None, wait: float | None = None) -> Iterator[None]:
        ttl = self.ttl if ttl is None else ttl
        wait = self.wait if wait is None else wait
        token = object()
        deadline = time.monotonic() + wait
        with self._changed:
            while True:
                now = time.monotonic()
                held = self._held.get(name)
                if held is None or held[1] <= now:
                    if held is not None:
                        log.warning(
                            "update lock %r held past its TTL (%gs): taken over; the version check "
                            "decides which commit applies",
                            name,
                            ttl,
                        )
                    self._held[name] = (token, now + ttl)
                    break
                if now >= deadline:
                    raise LockBusy(name, wait)
                self._changed.wait(min(deadline, held[1]) - now)
        try:
            yield
        finally:
            with self._changed:
                if self._held.get(name, (None,))[0] is token:
                    del self._held[name]
                    self._changed.notify_all()
                else:
                    log.warning("update lock %r expired before release", name)

    def ping(self) -> None:
        return None

    def close(self) -> None:
        return None


_SAFE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}$")


class FileLocks:
    """Cross-process locks of one machine: one lock file per model in ``directory`` (next to
    the SQLite database), held with the ``filelock`` library (an ``flock`` on Unix).

    Writers of every process queue on it for at most ``wait`` seconds, then :class:`LockBusy`
    (503 + Retry-After): a waiter tries again whenever a release wakes it, and at least every
    :attr:`POLL` seconds. Between tries it waits on the model's wake FIFO (``<model>.wake``
    beside the lock file, opened for reading and writing so that it never reads an end of
    file); a release writes one byte to it when a waiter has it open (none: the open fails at
    once and nothing is written), so a lock freed by another process is taken at once instead
    of up to a poll later. The kernel releases a lock when its process
    dies; a holder that lives on past ``ttl`` seconds has its lock unlocked by its own process
    (one thread per process keeps every hold's TTL, :mod:`service.writing.file_holds`; the module
    notes say what follows). Threads of one process first queue on an in-process lock (with
    the same TTL), so at most one of them waits on the file."""

    backend = "file"
    #: The longest a waiter sleeps between two tries when no release wakes it (seconds).
    POLL = 0.01

    def __init__(self, directory: str | Path, ttl: float, wait: float):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ttl, self.wait = ttl, wait
        self._local = LocalLocks(ttl, wait)
        self._expiries = HoldExpiries()

    def path(self, name: str) -> Path:
        stem = (
            name if _SAFE_NAME.match(name) else "h-" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
        )
        return self.directory / f"{stem}.lock"

    def wake_path(self, name: str) -> Path:
        """The FIFO a release of ``name``'s lock writes to, on which its waiters wait."""
        return self.path(name).with_suffix(".wake")

    def _acquire(self, name: str, deadline: float, wait: float) -> filelock.BaseFileLock:
        """``name``'s lock file, held by a lock of its own (one per hold: a hold that outlives its
        TTL and the hold that follows it never share one); :class:`LockBusy` after ``deadline``."""
        lock = filelock.FileLock(self.path(name), thread_local=False, preserve_lock_file=True)
        wake = None
        try:
            while True:
                try:
                    lock.acquire(blocking=False)
                    return lock
                except filelock.Timeout:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise LockBusy(name, wait) from None
                    if wake is None:  # then try again at once: a release before the FIFO was open woke no one
                        wake = self._open_wake(name)
                        continue
                    self._sleep(wake, min(self.POLL, left))
        finally:
            if wake is not None and wake >= 0:
                os.close(wake)

    def _open_wake(self, name: str) -> int:
        """This waiter's end of ``name``'s wake FIFO (made if missing), or -1 where FIFOs are
        not available (the waiter then polls)."""
        path = self.wake_path(name)
        try:
            try:
                os.mkfifo(path, 0o600)
            except FileExistsError:
                pass
            fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        except OSError:
            return -1
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):  # something else by that name: poll
            os.close(fd)
            return -1
        return fd

    @staticmethod
    def _sleep(wake: int, seconds: float) -> None:
        """Until a release writes to ``wake`` (then its bytes are read) or ``seconds`` pass."""
        if wake < 0:
            time.sleep(seconds)
            return
        import select

        poll = select.poll()  # not select.select: a descriptor may be above FD_SETSIZE in a busy server
        poll.register(wake, select.POLLIN)
        if poll.poll(seconds * 1000):
            try:
                os.read(wake, 4096)
            except BlockingIOError:  # another waiter read it first
                pass

    def _wake(self, name: str) -> None:
        """One byte to ``name``'s wake FIFO if a waiter has it open: the waiters try now."""
        try:
            fd = os.open(self.wake_path(name), os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no waiter; ENOENT: none ever waited
            return
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, b"\0")
        except OSError:  # full: the waiters have bytes to read already
            pass
        finally:
            os.close(fd)

    @contextmanager
    def hold(self, name: str, ttl: float | None = None, wait: float | None = None) -> Iterator[None]:
        ttl = self.ttl if ttl is None else ttl
        wait = self.wait if wait is None else wait
        deadline = time.monotonic() + wait
        with self._local.hold(name, ttl=ttl, wait=wait):
            held = FileHold(self._acquire(name, deadline, wait), name)
            self._expiries.add(held, ttl)
            try:
                yield
            finally:
                self._expiries.discard(held)
                held.release()
                self._wake(name)

    def ping(self) -> None:
        if not self.directory.is_dir():
            raise LockBackendDown(f"lock directory {self.directory} is missing")

    def close(self) -> None:
        return None


#: Delete KEYS[1] if its value is exactly ARGV[1]: 1 if deleted.
_DELETE_IF = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""


class RedisLocks:
    """A Redis key per model, set if absent with the TTL as its expiry (never renewed); its
    value is ``<holder>.<random>`` (:class:`Holders`). A waiter tries again whenever a release
    wakes it, and at least every :attr:`POLL` seconds, for at most ``wait`` seconds: between
    tries it blocks on the model's wake list (``BLPOP``), to which every release pushes one
    entry, so a lock freed by another process is taken within a round trip instead of up to a
    poll later (the list holds at most that one entry and expires after :attr:`WAKE_TTL`, so
    an entry no one waited for wakes at most one later waiter once, which then simply tries).
    Every ``Holders.CHECK_EVERY`` seconds a waiter also asks whether the lock's holder is
    gone, and if so deletes the lock (compare-and-delete of the value it read, in Lua: a lock
    taken meanwhile by another is left alone) and tries again at once.

    Acquire and release happen in one ``with`` in one thread (redis-py ``Lock``,
    ``thread_local`` tokens); the release is redis-py's compare-and-delete of our value."""

    backend = "redis"
    #: The longest a waiter sleeps between two tries when no release wakes it (seconds).
    POLL = 0.01
    #: How long a wake entry that no waiter took stays in the list (milliseconds).
    WAKE_TTL = 100

    def __init__(self, url: str, prefix: str, ttl: float, wait: float, database_url: str | None = None):
        import redis

        self._redis_mod = redis
        self.client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5, health_check_interval=30)
        self.prefix, self.ttl, self.wait = prefix, ttl, wait
        self.holders = Holders(database_url)
        self._delete_if = self.client.register_script(_DELETE_IF)

    def key(self, name: str) -> str:
        return f"{self.prefix}lock:{name}"

    def wake_key(self, name: str) -> str:
        """The list a release of ``name``'s lock pushes to, on which its waiters block."""
        return f"{self.prefix}lock-wake:{name}"

    def _acquire(self, lock: Lock, name: str, wait: float) -> None:
        """Take ``lock`` within ``wait`` seconds (taking over a gone holder's), else :class:`LockBusy`."""
        holder = self.holders.holder()
        token = f"{holder}.{uuid.uuid4().hex}" if holder else uuid.uuid4().hex
        deadline = time.monotonic() + wait
        next_check = time.monotonic()
        while True:
            if lock.acquire(blocking=False, token=token):
                return
            now = time.monotonic()
            if self.holders.kind is not None and now >= next_check:
                next_check = now + Holders.CHECK_EVERY
                if self._take_over_if_gone(lock.name, name):
                    continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise LockBusy(name, wait)
            self.client.blpop([self.wake_key(name)], timeout=min(self.POLL, left))

    def _take_over_if_gone(self, key: str, name: str) -> bool:
        """Delete the lock ``key`` if its holder is gone; whether it was deleted."""
        value = self.client.get(key)
        if value is None:
            return True  # released meanwhile: try at once
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        holder, dot, _ = text.rpartition(".")
        if not dot or not self.holders.gone(holder):
            return False
        if not self._delete_if(keys=[key], args=[value]):
            return False  # expired or released meanwhile, perhaps taken by another: look again
        log.warning(
            "update lock %r of a process that is gone (%s) taken over at once (LOCK_TTL not waited for)",
            name,
            holder,
            extra={"event": "lock_takeover", "model": name, "holder": holder},
        )
        return True

    @contextmanager
    def hold(self, name: str, ttl: float | None = None, wait: float | None = None) -> Iterator[None]:
        errors = self._redis_mod.exceptions
        wait = self.wait if wait is None else wait
        lock = self.client.lock(self.key(name), timeout=self.ttl if ttl is None else ttl, sleep=0.01)
        try:
            self._acquire(lock, name, wait)
        except (errors.ConnectionError, errors.TimeoutError) as exc:
            raise LockBackendDown(f"redis unavailable: {exc}") from exc
        try:
            yield
        finally:
            try:
                lock.release()
                self._wake(name)
            except errors.LockNotOwnedError:
                # It expired while we worked; the version check already decided the commit.
                log.warning("update lock %s expired before release", self.key(name))
            except (errors.ConnectionError, errors.TimeoutError) as exc:
                log.warning("could not release update lock %s: %s (it expires by itself)", self.key(name), exc)

    def _wake(self, name: str) -> None:
        """One entry in ``name``'s wake list (one round trip): a waiter blocked on it tries now.
        Lost if Redis is unreachable: waiters then try at their next poll."""
        errors = self._redis_mod.exceptions
        key = self.wake_key(name)
        try:
            with self.client.pipeline(transaction=True) as pipe:
                pipe.delete(key)
                pipe.rpush(key, 1)
                pipe.pexpire(key, self.WAKE_TTL)
                pipe.execute()
        except (errors.ConnectionError, errors.TimeoutError):
            pass

    def ping(self) -> None:
        errors = self._redis_mod.exceptions
        try:
            self.client.ping()
        except (errors.ConnectionError, errors.TimeoutError) as exc:
            raise LockBackendDown(f"redis unavailable: {exc}") from exc

    def close(self) -> None:
        self.client.close()
        self.holders.close()


def make_locks(settings: Settings) -> LocalLocks | FileLocks | RedisLocks:
    """Redis when ``REDIS_URL`` is set; else file locks next to the SQLite file (the embedded
    default: safe for ``--workers N`` on one machine); else (in-memory SQLite, or PostgreSQL
    without Redis) in-process locks, right for one process only."""
    if settings.REDIS_URL:
        return RedisLocks(
            settings.REDIS_URL, settings.REDIS_PREFIX, settings.LOCK_TTL, settings.LOCK_WAIT, settings.database_url
        )
    path = sqlite_file(settings.database_url)
    if path is not None:
        return FileLocks(path.with_name(path.name + ".locks"), settings.LOCK_TTL, settings.LOCK_WAIT)
    return LocalLocks(settings.LOCK_TTL, settings.LOCK_WAIT)
