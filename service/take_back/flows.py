"""``DELETE .../batches/{version}``: a batch taken back under the model's update lock, at most
once per ``Idempotency-Key``, observed like an update (outcome ``taken_back``) with one log
line. What the model becomes and what is refused are :mod:`service.take_back`'s.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from service import metrics
from service.store.prepared import PreparedTakeBack
from service.take_back.rebuild import TakeBackLog, take_back_hash
from service.take_back.rebuild import prepare as take_back_prepare
from service.writing import idempotent
from service.writing.idempotency import Claim, Replayed
from service.writing.outcomes import held

if TYPE_CHECKING:
    from service.hosting import HostedModel

# "service.store": the logger name is part of each of its log lines (their "logger" field).
log = logging.getLogger("service.store")


def take_back(model: HostedModel, batch_version: int, key: str | None = None) -> tuple[dict[str, Any], bool]:
    """Take the batch of ``batch_version`` back (:mod:`service.take_back`; at most once per
    ``key`` when given): the answer (:class:`fcl3.schemas.TakeBackOut`) and whether it is a replay."""
    try:
        with idempotent.claimed(model, key, lambda: take_back_hash(batch_version)) as claim:
            prepared, _ = take_back_batch(model, batch_version, claim)
    except Replayed as replay:
        return idempotent.replayed(model, replay, batch=False), True
    assert prepared.answer is not None  # set by its commit
    return prepared.answer, False


def take_back_batch(model: HostedModel, batch_version: int, claim: Claim | None = None) -> tuple[PreparedTakeBack, int]:
    """Under the model's update lock: refresh to the stored version, rebuild the model without
    the batch by replay, commit it with the version compare-and-set (and ``claim``'s answer).
    Returns the prepared take-back and the new version. Observed like an update (outcome
    ``taken_back``) with one log line."""
    with held(model, "taken_back") as h:
        if claim is not None:
            model.keys.verify(claim)
        snap = model.reader.snapshot(check=True)
        prepared = take_back_prepare(model.reader, snap, batch_version)
        parts = [TakeBackLog(model.name)] + ([claim] if claim is not None else [])
        version = model.writer.commit_take_back(prepared, parts)
    t0, acquired = h.t0, h.acquired
    done = time.perf_counter()
    metrics.UPDATE_SECONDS.observe(done - acquired)
    log.info(
        "batch taken back",
        extra={
            "event": "take_back",
            "model": model.name,
            "task": prepared.task_id,
            "version": version,
            "batch_version": batch_version,
            "n_samples": prepared.n_samples,
            "task_removed": prepared.task_removed,
            "n_replayed": prepared.n_replayed,
            "replay_ms": round(prepared.replay_seconds * 1000, 2),
            "duration_ms": round((done - acquired) * 1000, 2),
            "lock_wait_ms": round((acquired - t0) * 1000, 2),
        },
    )
    model.wake()
    return prepared, version
