"""Idempotency keys of ``POST .../tasks/{task_id}/data`` (header ``Idempotency-Key``).

A key belongs to one model (``(model_name, key)`` is the primary key of ``idempotency_keys``).
The life of a key, around the update of :func:`service.usecases.learn_once`::

    claim (own transaction, before the update lock):
        no row                 -> INSERT (hash, owner = this request, response NULL)
        other hash             -> KeyMismatch (422): the key was used for another task or body
        a response             -> Replayed: answer it again, apply nothing
        no response, recent    -> KeyInFlight (409): the first request is still running
        no response, older than the claim TTL (LOCK_TTL): abandoned (its process died)
                               -> take it over (owner = this request, compare-and-set)
    under the update lock:      verify the claim is still ours (else replay / 409)
    commit (the batch's own transaction):
        UPDATE idempotency_keys SET response, version WHERE owner = this request AND response IS NULL
        (0 rows: the claim was taken over -> KeyTakenOver, the whole commit is rolled back)
    failure before the commit:  the claim is released (DELETE ... WHERE owner = this request)

So a key's response exists iff its batch is committed, and a batch is applied at most once
per key: the key's row is written by the commit that stores the batch, guarded by the owner
compare-and-set. Rows are purged ``IDEMPOTENCY_TTL`` after their last touch (at start-up and
on writes, at most every ``IDEMPOTENCY_PURGE_EVERY`` seconds per process).
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
from sqlalchemy import Engine, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

import core

from .tables import IdempotencyKeyRow
from .writes import Commit, StaleWrite

keys_t = IdempotencyKeyRow.__table__

#: 1-255 printable ASCII characters (space included).
KEY_PATTERN = re.compile(r"^[\x20-\x7e]{1,255}$")


class KeyMismatch(core.InputError):
    """The key was first used with another task or body (422)."""


class KeyInFlight(Exception):
    """The first request with this key is still running (409 with Retry-After)."""


class KeyTakenOver(StaleWrite):
    """At commit, the claim belonged to another request (this one's had expired): rolled back."""


class Replayed(Exception):
    """The key's batch is already committed: ``response`` is the first answer (nothing applied)."""

    def __init__(self, response: dict[str, Any]):
        super().__init__("replayed")
        self.response = response


@dataclass(frozen=True)
class Claim:
    """This request holds ``key`` of ``model_name`` (as ``owner``) until its commit or release."""

    model_name: str
    key: str
    owner: str
    request_hash: str

    def in_commit(self, conn, commit: Commit) -> None:
        """As a participant of the update's commit: store its answer under the key
        (:meth:`IdempotencyKeys.record`)."""
        IdempotencyKeys.record(conn, self, commit.version, commit.answer, commit.at)


def check_key(key: str) -> str:
    """The key, or :class:`core.InputError` (422) saying what is wrong with it."""
    if not KEY_PATTERN.match(key):
        if not key:
            why = "it is empty"
        elif len(key) > 255:
            why = f"it has {len(key)} characters"
        else:
            bad = next(c for c in key if not 0x20 <= ord(c) <= 0x7E)
            why = f"it holds the character {bad!r}"
        raise core.InputError(f"bad Idempotency-Key header: {why}; a key is 1-255 printable ASCII characters "
                              "(e.g. a UUID)")
    return key


def request_hash(task_id: str, X: Any, y: Any) -> str:
    """SHA-256 of the task id and the parsed batch (so the JSON's spacing, key order and number
    spelling — ``1`` or ``1.0`` — do not matter)."""
    h = hashlib.sha256(b"fcl3-batch-v1\0")
    h.update(task_id.encode("utf-8", "surrogatepass") + b"\0")
    for part in (X, y):
        try:
            a = np.ascontiguousarray(np.asarray(part, dtype=np.float64))
            h.update(repr(a.shape).encode() + b"\0" + a.tobytes())
        except (ValueError, TypeError):  # ragged rows (refused later anyway): canonical JSON
            h.update(b"json\0" + json.dumps(part, separators=(",", ":")).encode())
    return h.hexdigest()


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _aware(t: datetime) -> datetime:
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t


def _shown(key: str) -> str:
    return repr(key if len(key) <= 60 else key[:57] + "...")


class IdempotencyKeys:
    """The keys of every model on ``engine``. ``ttl``: how long a key is kept after its last
    touch (``IDEMPOTENCY_TTL``); ``claim_ttl``: after how long a claim with no response is
    abandoned (``LOCK_TTL``); ``purge_every``: at most one purge per that many seconds."""

    def __init__(self, engine: Engine, ttl: float = 86400.0, claim_ttl: float = 30.0, purge_every: float = 300.0):
        self.engine, self.ttl, self.claim_ttl, self.purge_every = engine, ttl, claim_ttl, purge_every
        self._last_purge = float("-inf")
        self._guard = threading.Lock()

    # ------------------------------------------------------------------ before the lock
    def claim(self, model_name: str, key: str, req_hash: str) -> Claim:
        """Claim ``key`` for this request; raises :class:`Replayed`, :class:`KeyMismatch` or
        :class:`KeyInFlight` instead when the key is already used."""
        owner = uuid.uuid4().hex
        for _ in range(5):
            now = _now()
            try:
                with self.engine.begin() as conn:
                    row = conn.execute(select(keys_t).where(keys_t.c.model_name == model_name,
                                                            keys_t.c.key == key)).first()
                    if row is None:
                        conn.execute(insert(keys_t).values(model_name=model_name, key=key, request_hash=req_hash,
                                                           owner=owner, touched_at=now))
                        return Claim(model_name, key, owner, req_hash)
                    self._answer_used(row, model_name, key, req_hash, now)
                    # abandoned by a request that never committed: take it over (compare-and-set)
                    res = conn.execute(update(keys_t).where(
                        keys_t.c.model_name == model_name, keys_t.c.key == key, keys_t.c.owner == row.owner,
                        keys_t.c.response.is_(None)).values(owner=owner, request_hash=req_hash, touched_at=now))
                    if res.rowcount == 1:
                        return Claim(model_name, key, owner, req_hash)
            except IntegrityError:
                pass  # inserted by a concurrent request meanwhile: look again
        raise KeyInFlight(self._in_flight_message(model_name, key))

    def _answer_used(self, row, model_name: str, key: str, req_hash: str, now: datetime) -> None:
        """A row of another request: raise what it means (returns only if it is abandoned)."""
        if row.request_hash != req_hash:
            raise KeyMismatch(f"Idempotency-Key {_shown(key)} was already used on model {model_name!r} with "
                              "another request (a different task id or batch): use a new key for a new batch")
        if row.response is not None:
            raise Replayed(row.response)
        if _aware(row.touched_at) > now - timedelta(seconds=self.claim_ttl):
            raise KeyInFlight(self._in_flight_message(model_name, key))

    def _in_flight_message(self, model_name: str, key: str) -> str:
        return (f"a request with Idempotency-Key {_shown(key)} is still running on model {model_name!r}: "
                "retry later with the same key to get its answer (nothing was applied by this request)")

    # ------------------------------------------------------------------ under the lock
    def verify(self, claim: Claim) -> None:
        """Under the update lock: the claim is still this request's (else :class:`Replayed`
        or :class:`KeyInFlight`). A claim purged meanwhile is claimed again."""
        with self.engine.begin() as conn:
            row = conn.execute(select(keys_t).where(keys_t.c.model_name == claim.model_name,
                                                    keys_t.c.key == claim.key)).first()
            if row is not None and row.owner == claim.owner and row.response is None:
                return
            if row is not None:
                if row.response is not None and row.request_hash == claim.request_hash:
                    raise Replayed(row.response)
                raise KeyInFlight(self._in_flight_message(claim.model_name, claim.key))
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(keys_t).values(model_name=claim.model_name, key=claim.key,
                                                   request_hash=claim.request_hash, owner=claim.owner,
                                                   touched_at=_now()))
        except IntegrityError:
            raise KeyInFlight(self._in_flight_message(claim.model_name, claim.key)) from None

    def after_takeover(self, claim: Claim) -> None:
        """After :class:`KeyTakenOver`: raise :class:`Replayed` if the other request committed,
        else :class:`KeyInFlight`."""
        with self.engine.connect() as conn:
            row = conn.execute(select(keys_t.c.response, keys_t.c.request_hash).where(
                keys_t.c.model_name == claim.model_name, keys_t.c.key == claim.key)).first()
        if row is not None and row.response is not None and row.request_hash == claim.request_hash:
            raise Replayed(row.response)
        raise KeyInFlight(self._in_flight_message(claim.model_name, claim.key))

    # ------------------------------------------------------------------ in the commit
    @staticmethod
    def record(conn, claim: Claim, version: int, response: dict[str, Any], now: datetime) -> None:
        """In the commit's transaction: store the answer; :class:`KeyTakenOver` if the claim
        is no longer this request's (the caller's transaction then rolls back)."""
        res = conn.execute(update(keys_t).where(
            keys_t.c.model_name == claim.model_name, keys_t.c.key == claim.key, keys_t.c.owner == claim.owner,
            keys_t.c.response.is_(None)).values(version=version, response=response, touched_at=now))
        if res.rowcount != 1:
            raise KeyTakenOver(f"Idempotency-Key {_shown(claim.key)} of model {claim.model_name!r} was taken over by "
                               "another request while this one ran; this batch was NOT applied by this request")

    # ------------------------------------------------------------------ clean-up
    def release(self, claim: Claim) -> None:
        """Drop an unanswered claim (the update failed: a retry may use the key at once)."""
        with self.engine.begin() as conn:
            conn.execute(delete(keys_t).where(keys_t.c.model_name == claim.model_name, keys_t.c.key == claim.key,
                                              keys_t.c.owner == claim.owner, keys_t.c.response.is_(None)))

    @staticmethod
    def delete_model(conn, model_name: str) -> None:
        """In a model's deletion: its keys go with it."""
        conn.execute(delete(keys_t).where(keys_t.c.model_name == model_name))

    def purge(self) -> int:
        """Delete every key (of every model) not touched for ``ttl`` seconds; how many."""
        cutoff = _now() - timedelta(seconds=self.ttl)
        with self.engine.begin() as conn:
            n = conn.execute(delete(keys_t).where(keys_t.c.touched_at < cutoff)).rowcount
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
