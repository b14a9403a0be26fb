"""Idempotency keys of ``POST .../tasks/{task_id}/data`` (header ``Idempotency-Key``), and
likewise of ``POST .../labels`` and ``DELETE .../batches/{version}`` (their own request hashes:
:func:`service.labels.labels_hash`, :func:`service.take_back.take_back_hash`).

A key belongs to one model (``(model_name, key)`` is the primary key of ``idempotency_keys``).
The life of a key, around the update of :func:`service.writing.idempotent.learn_once`::

    claim (own transaction, before the update lock):
        no row                 -> INSERT (hash, owner = this request, response NULL)
        other hash             -> KeyMismatch (422): the key was used for another task or body
        a response             -> Replayed: answer it again, apply nothing
        no response, its holder alive and the claim younger than the claim TTL (LOCK_TTL)
                               -> KeyInFlight (409): the first request is still running
        no response, its holder gone, or the claim older than the claim TTL
                               -> take it over (owner = this request, compare-and-set)
    under the update lock:      verify the claim is still ours (else replay / 409)
    commit (the batch's own transaction):
        UPDATE idempotency_keys SET response, version WHERE owner = this request AND response IS NULL
        (0 rows: the claim was taken over -> KeyTakenOver, the whole commit is rolled back)
    failure before the commit:  the claim is released (DELETE ... WHERE owner = this request),
                                or, if the database does not answer, as soon as it answers again

So a key's response exists iff its batch is committed, and a batch is applied at most once
per key: the key's row is written by the commit that stores the batch, guarded by the owner
compare-and-set. Taking a claim over is therefore always safe; who is judged gone only
decides how soon a retry proceeds.

**Holders.** A claim's ``owner`` is ``<holder>.<request>``: the holder names the process
(:mod:`service.writing.leases`: ``g<lease>`` on PostgreSQL, the lease the update locks name too;
``p<pid>-<start>`` on SQLite), so that a retry tells a first request still running from one
whose process is gone, and takes the claim over at once in that case. A claim this process
could not release (a database error inside the request, and the release failing too) is
*abandoned* (:meth:`IdempotencyKeys.abandon`): a retry reaching this process takes it over at
once, and it is released as soon as the database answers again (every claim tries first; a
thread retries every ``RELEASE_EVERY`` seconds), so a retry reaching another process proceeds
then.

The claim TTL stays the outer bound: a claim older than that is taken over even if its holder
lives (a hung request), and a claim whose holder cannot be told (an owner written before
holders existed) waits for it.

**Time** is the database's, never this process's: ``touched_at`` is stamped and compared in
SQL (:func:`db_now`: ``now()`` on PostgreSQL, ``strftime(..., 'now')`` on SQLite), so a step of
the process's wall clock neither expires a live claim nor purges a key early. Rows are purged
``IDEMPOTENCY_TTL`` after their last touch (at start-up and on writes, at most every
``IDEMPOTENCY_PURGE_EVERY`` seconds per process, counted on the monotonic clock).
"""

from __future__ import annotations

import functools
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Insert,
    Update,
    bindparam,
    delete,
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError

import core
from service.store.commit import Commit, CommitParticipant
from service.store.tables import keys_t
from service.store.writes import StaleWrite
from service.writing.leases import Liveness

log = logging.getLogger("service.store")

#: Seconds between two attempts to release the claims this process abandoned.
RELEASE_EVERY = 0.25


class KeyMismatch(core.InputError):
    """The key was first used with another task or body (422)."""


class KeyInFlight(Exception):
    """The first request with this key is still running (409 with Retry-After)."""


class KeyTakenOver(StaleWrite):
    """At commit, the claim belonged to another request (this one's was judged abandoned): rolled back."""


class Replayed(Exception):
    """The key's batch is already committed: ``response`` is the first answer (nothing applied).
    ``counted``: the write's outcome counted it already (:mod:`service.writing.outcomes`)."""

    def __init__(self, response: dict[str, Any]):
        super().__init__("replayed")
        self.response = response
        self.counted = False


@dataclass(frozen=True)
class Claim(CommitParticipant[Any]):
    """This request holds ``key`` of ``model_name`` (as ``owner``) until its commit or release."""

    model_name: str
    key: str
    owner: str
    request_hash: str

    def in_commit(self, conn: Connection, commit: Commit[Any]) -> None:
        """As a participant of the update's commit: store its answer under the key
        (:meth:`IdempotencyKeys.record`)."""
        IdempotencyKeys.record(conn, self, commit.version, commit.answer)


def db_now(dialect: str, shift: float = 0.0) -> ColumnElement[Any]:
    """The database's clock ``shift`` seconds later (earlier if negative), as SQL: ``now()`` on
    PostgreSQL; on SQLite ``strftime(..., 'now')`` in the text form SQLAlchemy stores there
    (``YYYY-MM-DD HH:MM:SS.ffffff``), so that comparisons and the index hold."""
    if dialect == "sqlite":
        return func.strftime("%Y-%m-%d %H:%M:%f000", "now", f"{shift:+.6f} seconds")
    now = func.now()
    return now + timedelta(seconds=shift) if shift else now


# The statements of a claim's life, built once (building them cost more than a round trip):
# the key is ``w_model``/``w_key``, the owner compared ``w_owner``; the SET clause of
# ``_stamped`` comes from the parameters given to ``execute`` (column names), and
# ``touched_at`` is always the database's clock.
_KEY = (keys_t.c.model_name == bindparam("w_model"), keys_t.c.key == bindparam("w_key"))
_OURS = (*_KEY, keys_t.c.owner == bindparam("w_owner"), keys_t.c.response.is_(None))
_ROW = select(keys_t).where(*_KEY)
_ANSWER = select(keys_t.c.response, keys_t.c.request_hash).where(*_KEY)
_RELEASE = delete(keys_t).where(*_OURS)


@functools.cache
def _stamped(dialect: str) -> tuple[Insert, Update]:
    """``(INSERT, UPDATE ... WHERE the claim is the owner's and unanswered)``, each stamping
    ``touched_at`` with the database's clock."""
    now = db_now(dialect)
    return insert(keys_t).values(touched_at=now), update(keys_t).where(*_OURS).values(touched_at=now)


def _key(claim: Claim, owner: str | None = None) -> dict[str, str]:
    return {"w_model": claim.model_name, "w_key": claim.key, "w_owner": claim.owner if owner is None else owner}


def _row(claim: Claim) -> dict[str, str]:
    return {"model_name": claim.model_name, "key": claim.key, "request_hash": claim.request_hash, "owner": claim.owner}


def _shown(key: str) -> str:
    return repr(key if len(key) <= 60 else key[:57] + "...")


# ----------------------------------------------------------------------------- the keys
class IdempotencyKeys:
    """The keys of every model on ``engine``. ``ttl``: how long a key is kept after its last
    touch (``IDEMPOTENCY_TTL``); ``claim_ttl``: after how long a claim with no response is
    abandoned even if its holder lives (``LOCK_TTL``); ``purge_every``: at most one purge per
    that many seconds."""

    def __init__(self, engine: Engine, ttl: float = 86400.0, claim_ttl: float = 30.0, purge_every: float = 300.0):
        self.engine, self.ttl, self.claim_ttl, self.purge_every = engine, ttl, claim_ttl, purge_every
        self.dialect = engine.dialect.name
        self._last_purge = float("-inf")
        self._clock = (time.time(), time.monotonic())  # to tell a stepped wall clock (see purge)
        self._guard = threading.Lock()
        self.liveness = Liveness(engine.url)
        self._abandoned: dict[str, Claim] = {}
        self._pending = threading.Lock()
        self._releaser: threading.Thread | None = None
        self._find = select(
            keys_t.c.owner,
            keys_t.c.request_hash,
            keys_t.c.response,
            (keys_t.c.touched_at < db_now(self.dialect, -claim_ttl)).label("expired"),
        ).where(*_KEY)
        self._insert, self._set = _stamped(self.dialect)
        event.listen(engine, "engine_disposed", self._disposed)

    def _disposed(self, engine: Engine) -> None:
        self.liveness.close()  # our share of the lease; the next claim takes one again

    def holder(self) -> str:
        """This process, as the holder of the claims it makes (no ``@<machine>``: it must fit
        the 32 characters of ``owner`` with the request's token, and SQLite is on one machine)."""
        return self.liveness.holder(scoped=False)

    # ------------------------------------------------------------------ before the lock
    def claim(self, model_name: str, key: str, req_hash: str) -> Claim:
        """Claim ``key`` for this request; raises :class:`Replayed`, :class:`KeyMismatch` or
        :class:`KeyInFlight` instead when the key is already used. A database error leaves
        the claim abandoned (it may have been written)."""
        self.flush()
        holder = self.holder()
        claim = Claim(model_name, key, f"{holder}.{secrets.token_hex(16)}"[:32], req_hash)
        try:
            for _ in range(5):
                try:
                    with self.engine.begin() as conn:
                        if self._claim(conn, claim):
                            return claim
                except IntegrityError:
                    pass  # inserted by a concurrent request meanwhile: look again
        except DBAPIError:
            self.abandon(claim)
            raise
        raise KeyInFlight(self._in_flight_message(model_name, key))

    def _claim(self, conn: Connection, claim: Claim) -> bool:
        row = conn.execute(self._find, _key(claim)).first()
        if row is None:
            conn.execute(self._insert, _row(claim))
            return True
        if row.request_hash != claim.request_hash:
            raise KeyMismatch(
                f"Idempotency-Key {_shown(claim.key)} was already used on model {claim.model_name!r} "
                "with another request (a different task id or batch): use a new key for a new batch"
            )
        if row.response is not None:
            raise Replayed(row.response)
        if not row.expired and not self.gone(conn, row.owner):
            raise KeyInFlight(self._in_flight_message(claim.model_name, claim.key))
        # its request can no longer commit (or ran past the claim TTL): take it over (compare-and-set)
        res = conn.execute(
            self._set, {**_key(claim, row.owner), "owner": claim.owner, "request_hash": claim.request_hash}
        )
        if res.rowcount != 1:
            return False
        self._forget(row.owner)
        log.info(
            "Idempotency-Key claim taken over",
            extra={
                "event": "idempotency_takeover",
                "model": claim.model_name,
                "holder": row.owner.partition(".")[0],
                "expired": bool(row.expired),
            },
        )
        return True

    def gone(self, conn: Connection, owner: str) -> bool:
        """Whether the request that holds a claim as ``owner`` can no longer commit: this process
        abandoned it, or its process is gone (see the module's *Holders*). In a transaction of
        ``conn``; False when it cannot be told."""
        if owner in self._abandoned:
            return True
        holder, dot, _ = owner.partition(".")
        return bool(dot) and self.liveness.gone(holder, conn)

    def _in_flight_message(self, model_name: str, key: str) -> str:
        return (
            f"a request with Idempotency-Key {_shown(key)} is still running on model {model_name!r}: "
            "retry later with the same key to get its answer (nothing was applied by this request)"
        )

    # ------------------------------------------------------------------ under the lock
    def verify(self, claim: Claim) -> None:
        """Under the update lock: the claim is still this request's (else :class:`Replayed`
        or :class:`KeyInFlight`). A claim purged meanwhile is claimed again."""
        with self.engine.begin() as conn:
            row = conn.execute(_ROW, _key(claim)).first()
            if row is not None and row.owner == claim.owner and row.response is None:
                return
            if row is not None:
                if row.response is not None and row.request_hash == claim.request_hash:
                    raise Replayed(row.response)
                raise KeyInFlight(self._in_flight_message(claim.model_name, claim.key))
        try:
            with self.engine.begin() as conn:
                conn.execute(self._insert, _row(claim))
        except IntegrityError:
            raise KeyInFlight(self._in_flight_message(claim.model_name, claim.key)) from None

    def after_takeover(self, claim: Claim) -> None:
        """After :class:`KeyTakenOver`: raise :class:`Replayed` if the other request committed,
        else :class:`KeyInFlight`."""
        with self.engine.connect() as conn:
            row = conn.execute(_ANSWER, _key(claim)).first()
        if row is not None and row.response is not None and row.request_hash == claim.request_hash:
            raise Replayed(row.response)
        raise KeyInFlight(self._in_flight_message(claim.model_name, claim.key))

    # ------------------------------------------------------------------ in the commit
    @staticmethod
    def record(conn: Connection, claim: Claim, version: int, response: dict[str, Any]) -> None:
        """In the commit's transaction: store the answer (stamped by the database's clock);
        :class:`KeyTakenOver` if the claim is no longer this request's (the caller's
        transaction then rolls back)."""
        res = conn.execute(_stamped(conn.dialect.name)[1], {**_key(claim), "version": version, "response": response})
        if res.rowcount != 1:
            raise KeyTakenOver(
                f"Idempotency-Key {_shown(claim.key)} of model {claim.model_name!r} was taken over by "
                "another request while this one ran; this batch was NOT applied by this request"
            )

    # ------------------------------------------------------------------ clean-up
    def release(self, claim: Claim) -> None:
        """Drop an unanswered claim (the update failed: a retry may use the key at once)."""
        with self.engine.begin() as conn:
            conn.execute(_RELEASE, _key(claim))
        self._forget(claim.owner)

    def abandon(self, claim: Claim) -> None:
        """A claim this process could not release (the database did not answer): a retry
        reaching this process takes it over at once, and it is released as soon as the
        database answers again (by the next claim, or a thread retrying every
        ``RELEASE_EVERY`` seconds). Releasing a claim that was never written, or whose batch
        did commit, deletes nothing."""
        with self._pending:
            self._abandoned[claim.owner] = claim
            if self._releaser is None:
                self._releaser = threading.Thread(
                    target=self._release_abandoned, name="fcl3-claim-release", daemon=True
                )
                self._releaser.start()

    def _forget(self, owner: str) -> None:
        if owner in self._abandoned:
            with self._pending:
                self._abandoned.pop(owner, None)

    def flush(self) -> bool:
        """Release the claims this process abandoned; whether none is left."""
        with self._pending:
            claims = list(self._abandoned.values())
        for claim in claims:
            try:
                self.release(claim)
            except Exception:  # noqa: BLE001 - the database still fails: later
                return False
            log.info(
                "abandoned Idempotency-Key claim released",
                extra={"event": "idempotency_release", "model": claim.model_name},
            )
        return True

    def _release_abandoned(self) -> None:
        while True:
            time.sleep(RELEASE_EVERY)
            self.flush()
            with self._pending:
                if not self._abandoned:
                    self._releaser = None
                    return

    @staticmethod
    def delete_model(conn: Connection, model_name: str) -> None:
        """In a model's deletion: its keys go with it."""
        conn.execute(delete(keys_t).where(keys_t.c.model_name == model_name))

    def clock_step(self) -> float:
        """How far the wall clock has been stepped forward since this process started (its
        advance beyond the monotonic clock's; 0 under a second, an NTP slew's order)."""
        wall, mono = self._clock
        step = (time.time() - wall) - (time.monotonic() - mono)
        return step if step >= 1.0 else 0.0

    def purge(self) -> int:
        """Delete every key (of every model) not touched for ``ttl`` seconds by the database's
        clock; how many. The age allowed grows by :meth:`clock_step`: on SQLite the database's
        clock is the host's, and a clock stepped days ahead would otherwise make every key look
        expired, and a retry a second later a new request applied twice."""
        age = self.ttl + self.clock_step()
        with self.engine.begin() as conn:
            n = conn.execute(delete(keys_t).where(keys_t.c.touched_at < db_now(self.dialect, -age))).rowcount
        self._last_purge = time.monotonic()
        return int(n or 0)

    def maybe_purge(self) -> int | None:
        """:meth:`purge` if the last one is ``purge_every`` seconds old (one caller at a time)."""
        if time.monotonic() - self._last_purge < self.purge_every or not self._guard.acquire(blocking=False):
            return None
        try:
            if time.monotonic() - self._last_purge < self.purge_every:
                return None
            return self.purge()
        finally:
            self._guard.release()
