"""A write at most once per ``Idempotency-Key``: the key claimed before the update lock, the
first request's answer replayed to a retry, the claim released when the write fails. The keys'
store and their life are :mod:`service.writing.idempotency`; here a write (a batch, a label request, a
take-back) is run under its key, observed like any other.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from service import metrics
from service.writing.idempotency import Claim, IdempotencyKeys, KeyInFlight, KeyTakenOver, Replayed, request_hash
from service.learning.updates import learn_batch, purge_keys, update_answer

if TYPE_CHECKING:
    from service.hosting import HostedModel

# "service.store": the logger name is part of each of its log lines (their "logger" field).
log = logging.getLogger("service.store")


def learn_once(model: HostedModel, task_id: str, X, y, key: str) -> tuple[dict[str, Any], bool]:
    """Learn one batch at most once per ``key`` (``Idempotency-Key``) of ``model``: returns the
    answer (the body of the 200) and whether it is a replay of the first request's answer.

    The key is claimed before the update lock (a key already answered is replayed, a key used
    with another task or body is :class:`service.writing.idempotency.KeyMismatch` (422), a key whose
    first request still runs is :class:`service.writing.idempotency.KeyInFlight` (409)), checked again
    under the lock, and its answer is stored by the commit that stores the batch. An update
    that fails releases the claim (at once, or as soon as the database answers again). See
    :mod:`service.writing.idempotency`."""
    return once(model, key, request_hash(task_id, X, y), lambda claim: learn_batch(model, task_id, X, y, claim))


def once(model: HostedModel, key: str, h: str, run, answer=None) -> tuple[dict[str, Any], bool]:
    """``run(claim)`` (a :func:`service.learning.updates.learn_batch`, or a
    :func:`service.take_back.flows.take_back_batch`) at most once per ``key`` of ``model``
    for the request of hash ``h``: the answer (``answer(prepared, version)``, by default an
    update's) and whether it is a replay (see :func:`learn_once`)."""
    keys = model.keys
    purge_keys(keys, every=True)
    try:
        claim = keys.claim(model.name, key, h)
    except Replayed as r:
        return _replayed(model, key, r.response), True
    except KeyInFlight:
        metrics.UPDATES.labels("key_in_flight").inc()
        raise
    try:
        prepared, version = run(claim)
    except Replayed as r:  # another request took the key over and committed (counted by learn)
        _release(keys, claim)
        return _replayed(model, key, r.response, count=False), True
    except KeyTakenOver:
        try:
            keys.after_takeover(claim)
        except Replayed as r:
            return _replayed(model, key, r.response), True
        raise AssertionError("unreachable")  # after_takeover always raises
    except BaseException:
        _release(keys, claim)
        raise
    return (answer or update_answer)(prepared, version), False


def _replayed(model: HostedModel, key: str, response: dict[str, Any], count: bool = True) -> dict[str, Any]:
    if count:
        metrics.UPDATES.labels("replayed").inc()
    log.info("idempotent replay", extra={"event": "update_replayed", "model": model.name,
                                         "task": response.get("task_id"), "version": response.get("version")})
    return response


def _release(keys: IdempotencyKeys, claim: Claim) -> None:
    """Release the failed request's claim; if the database does not answer, abandon it
    (released as soon as the database answers again, see :meth:`IdempotencyKeys.abandon`)."""
    try:
        keys.release(claim)
    except Exception as exc:  # noqa: BLE001 - the request's own error is the one to answer
        keys.abandon(claim)
        log.warning("could not release Idempotency-Key claim on model %r (%s): released as soon as the database "
                    "answers again", claim.model_name, type(exc).__name__)
