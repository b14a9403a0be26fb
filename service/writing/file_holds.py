"""One process's holds of the update-lock files (:class:`service.writing.locks.FileLocks`, on
the ``filelock`` library) and their TTL: each hold is released once, by its holder or at its
TTL, whichever comes first,
and the TTLs of every hold of the process are kept by one daemon thread (starting a timer
thread for each hold costs about 1 ms per update). A hold that reaches its TTL is unlocked
while its update still runs: the version check decides which commit applies
(:mod:`service.writing.locks`).
"""

from __future__ import annotations

import logging
import os
import threading
import time

import filelock

# "service.locks": the logger name is part of each of its log lines (their "logger" field).
log = logging.getLogger("service.locks")


class FileHold:
    """One process's hold of a lock file (a :class:`filelock.FileLock` it acquired): released
    once, by its holder or by the timer that ends it at the TTL (:class:`HoldExpiries`),
    whichever comes first."""

    def __init__(self, lock: filelock.BaseFileLock, name: str):
        self.lock, self.name = lock, name
        self._guard = threading.Lock()
        self.expired = self.released = False

    def expire(self) -> None:
        with self._guard:
            if self.released or self.expired:
                return
            self.expired = True
            self.lock.release(force=True)
        log.warning(
            "update lock %r held past its TTL: unlocked while its update still runs; the version "
            "check decides which commit applies",
            self.name,
        )

    def release(self) -> None:
        with self._guard:
            if self.released:
                return
            self.released = True
            if not self.expired:
                self.lock.release(force=True)
        if self.expired:
            log.warning("update lock %r expired before release", self.name)


class HoldExpiries:
    """The TTLs of one process's file-lock holds, kept by one daemon thread (started by a hold
    when none runs; it ends after a minute with nothing held): it sleeps until the earliest
    deadline and ends the holds that reach it (:meth:`FileHold.expire`)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._holds: dict[FileHold, float] = {}  # hold -> its deadline (monotonic)
        self._wake = float("inf")  # when the thread wakes next (monotonic)
        self._thread: threading.Thread | None = None
        self._pid = 0

    def add(self, hold: FileHold, ttl: float) -> None:
        deadline = time.monotonic() + ttl
        with self._cond:
            self._holds[hold] = deadline
            if self._thread is None or self._pid != os.getpid():  # first hold (of this process, after a fork)
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, name="fcl3-lock-ttl", daemon=True)
                self._thread.start()
            elif deadline < self._wake:
                self._cond.notify()

    def discard(self, hold: FileHold) -> None:
        with self._cond:
            self._holds.pop(hold, None)

    def _run(self) -> None:
        idle = False
        while True:
            with self._cond:
                now = time.monotonic()
                due = [h for h, d in self._holds.items() if d <= now]
                for h in due:
                    del self._holds[h]
                if not due and not self._holds:
                    if idle:  # a whole wait with nothing held: ends (the next hold starts another)
                        self._thread, self._wake = None, float("inf")
                        return
                    idle = True
                else:
                    idle = False
                # Asleep at most 60 s: a hold added meanwhile ends no earlier than its TTL after now.
                self._wake = min(min(self._holds.values(), default=now + 60.0), now + 60.0)
                if not due:
                    self._cond.wait(self._wake - now)
            for h in due:
                h.expire()
