"""A write at most once per ``Idempotency-Key``: the key claimed before the update lock, the
first request's answer replayed to a retry, the claim released when the write fails. The keys'
store and their life are :mod:`service.writing.idempotency`; here a write (a batch, a label
request, a take-back) runs in :func:`claimed`, observed like any other::

    try:
        with claimed(model, key, lambda: request_hash(...)) as claim:
            prepared, version = <the write>(model, ..., claim)   # the claim checked under the lock
    except Replayed as replay:
        return replayed(model, replay), True                     # the first request's answer
    return prepared.answer, False
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import select

import core
from service import metrics
from service.refusals import Refused
from service.store.tables import batches_t
from service.writing.idempotency import Claim, IdempotencyKeys, KeyInFlight, KeyTakenOver, Replayed

if TYPE_CHECKING:
    from service.hosting import HostedModel

# "service.store": the logger name is part of each of its log lines (their "logger" field).
log = logging.getLogger("service.store")


#: 1-255 printable ASCII characters (space included).
KEY_PATTERN = re.compile(r"^[\x20-\x7e]{1,255}$")


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
        raise core.InputError(
            f"bad Idempotency-Key header: {why}; a key is 1-255 printable ASCII characters (e.g. a UUID)"
        )
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


@contextmanager
def claimed(model: HostedModel, key: str | None, request_hash: Callable[[], str]) -> Iterator[Claim | None]:
    """The block run with ``key`` of ``model`` claimed for the request of hash ``request_hash()``
    (``key`` None: run as it is, with no claim). A key already answered raises :class:`Replayed`
    (its first answer, nothing applied), a key used with another request
    :class:`service.writing.idempotency.KeyMismatch` (422), a key whose first request still runs
    :class:`KeyInFlight` (409). The claim is checked again under the lock by the write, and its
    answer is stored by the commit that stores the write; a write that fails releases the claim
    (at once, or as soon as the database answers again)."""
    if key is None:
        yield None
        return
    keys = model.keys
    purge_expired(keys, every=True)
    try:
        claim = keys.claim(model.name, key, request_hash())
    except KeyInFlight:
        metrics.UPDATES.labels("key_in_flight").inc()
        raise
    try:
        yield claim
    except Replayed:  # another request took the key over and committed (counted by the write's outcome)
        _release(keys, claim)
        raise
    except KeyTakenOver:
        keys.after_takeover(claim)  # raises Replayed (the other request committed) or KeyInFlight
        raise
    except BaseException:
        _release(keys, claim)
        raise


class BatchTakenBack(Refused):
    """A retry with the key of a batch that was taken back since (410): nothing applied."""

    status = 410
    version_field = "taken_back_by"


def replayed(model: HostedModel, replay: Replayed, batch: bool = True) -> dict[str, Any]:
    """The first request's answer, counted (unless the write's outcome counted it) and logged;
    with ``batch`` (the answer of a batch learned), :class:`BatchTakenBack` instead when that
    batch was taken back since."""
    response = replay.response
    if batch and isinstance(response.get("version"), int):
        by = taken_back_by(model, response["version"])
        if by is not None:
            raise BatchTakenBack(
                f"this Idempotency-Key's batch (version {response['version']} of model {model.name!r}) was "
                f"taken back by version {by}; nothing was applied: to learn the batch again, send it with "
                "a new Idempotency-Key",
                batch_version=response["version"],
                taken_back_by=by,
            )
    if not replay.counted:
        metrics.UPDATES.labels("replayed").inc()
    log.info(
        "idempotent replay",
        extra={
            "event": "update_replayed",
            "model": model.name,
            "task": response.get("task_id"),
            "version": response.get("version"),
        },
    )
    return response


def taken_back_by(model: HostedModel, version: int) -> int | None:
    """The version of the take-back of the batch of ``version`` of ``model`` (None: not taken back)."""
    with model.reader.engine.connect() as conn:
        by = conn.execute(
            select(batches_t.c.taken_back).where(batches_t.c.model_name == model.name, batches_t.c.version == version)
        ).scalar()
    return int(by) if by is not None else None


def purge_expired(keys: IdempotencyKeys, every: bool = False) -> None:
    """Delete the expired ``Idempotency-Key`` rows: now (start-up), or with ``every`` at most
    once per ``IDEMPOTENCY_PURGE_EVERY`` seconds (on writes). Never fails the caller."""
    try:
        n = keys.maybe_purge() if every else keys.purge()
    except Exception as exc:  # noqa: BLE001 - a purge must never fail a write
        log.warning("idempotency key purge failed: %s", type(exc).__name__)
        return
    if n:
        log.info("purged %d expired idempotency keys", n, extra={"event": "idempotency_purge"})


def _release(keys: IdempotencyKeys, claim: Claim) -> None:
    """Release the failed request's claim; if the database does not answer, abandon it
    (released as soon as the database answers again, see :meth:`IdempotencyKeys.abandon`)."""
    try:
        keys.release(claim)
    except Exception as exc:  # noqa: BLE001 - the request's own error is the one to answer
        keys.abandon(claim)
        log.warning(
            "could not release Idempotency-Key claim on model %r (%s): released as soon as the database answers again",
            claim.model_name,
            type(exc).__name__,
        )
