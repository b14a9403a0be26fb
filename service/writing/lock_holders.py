"""Who holds a Redis update lock (:class:`service.writing.locks.RedisLocks`), written into the lock's
value, and whether that holder is gone, so that a waiter takes over at once the lock of a
process that died instead of waiting out its TTL. The holder is the process's lease of
:mod:`service.writing.leases`.
"""

from __future__ import annotations

import logging
import threading
import time

# "service.locks": the logger name is part of each of its log lines (their "logger" field).
log = logging.getLogger("service.locks")


class Holders:
    """Who holds a Redis lock, written into its value, and whether that holder is gone
    (:mod:`service.writing.leases`: ``g<lease>`` on PostgreSQL, the lease the Idempotency-Key claims
    name too; ``p<pid>-<start>@<machine>`` on SQLite). A holder that cannot be told (a value
    written before holders were recorded, another kind, the database down) is never gone:
    its lock lasts its TTL.

    A verdict "alive" is kept ``CHECK_EVERY`` seconds, shared by the waiters of this process."""

    CHECK_EVERY = 0.25

    def __init__(self, database_url: str | None):
        from service.writing.leases import Liveness

        self.liveness = Liveness(database_url)
        self.kind = self.liveness.kind
        self._alive: dict[str, float] = {}  # holder -> until when (monotonic) it counts as alive
        self._guard = threading.Lock()

    def holder(self) -> str:
        """This process as a holder ('' when it cannot be told: a lock of it then lasts its TTL)."""
        try:
            return self.liveness.holder()
        except Exception as exc:  # noqa: BLE001 - the database is down: the update fails anyway
            log.warning(
                "update lock holder unknown (%s): a lock of this process lasts its TTL if it dies",
                (str(getattr(exc, "orig", None) or exc).splitlines() or [type(exc).__name__])[0],
            )
        return ""

    def gone(self, holder: str) -> bool:
        """Whether ``holder`` (as :meth:`holder` writes it) is a process that is gone; False when
        it cannot be told."""
        if not holder or holder[0] != self.kind:
            return False
        with self._guard:
            if self._alive.get(holder, float("-inf")) > time.monotonic():
                return False
        try:
            gone = self.liveness.gone(holder)
        except Exception as exc:  # noqa: BLE001 - cannot be told now: wait
            log.warning("could not tell whether update lock holder %s is gone: %s", holder, exc)
            gone = False
        if not gone:
            with self._guard:
                if len(self._alive) > 1000:
                    self._alive.clear()
                self._alive[holder] = time.monotonic() + self.CHECK_EVERY
        return gone

    def close(self) -> None:
        self.liveness.close()
