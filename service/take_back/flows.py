"""``DELETE .../batches/{version}``: a batch taken back, at most once per ``Idempotency-Key``,
observed like an update (outcome ``taken_back``) with one log line. What the model becomes and
what is refused are :mod:`service.take_back`'s.

The replay runs off the update lock: from the newest usable checkpoint before the batch
(:mod:`service.take_back.checkpoints`) to the version read, on a snapshot no writer changes,
and the batches committed while it ran are learned on top, still off the lock
(:func:`caught_up`), and what the commit writes is made there, once (the rebuilt state and
the task rows it changes). Then the lock is taken to check that nothing moved and to commit
with the version compare-and-set. If batches were committed since the last catch-up, the
lock is let go and they are learned off it; after :data:`RELOCKS` such tries, under it
(:func:`service.take_back.rebuild.catch_up`: as many as an ordinary update's group, their
scores added to the prequential sums made off the lock). The rebuilt model's checkpoint is
stored after the lock's release, in a transaction of its own (:func:`checkpoint`). Writers of
the model go on meanwhile; if anything but batches moved (another take-back, say), the replay
is made again, and after :data:`ATTEMPTS` such tries under the lock, as a last resort.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import SQLAlchemyError

from service import metrics
from service.store.prepared import PreparedTakeBack
from service.take_back import checkpoints
from service.take_back.rebuild import TakeBackLog, catch_up, finished, take_back_hash
from service.take_back.rebuild import prepare as take_back_prepare
from service.writing import idempotent
from service.writing.idempotency import Claim, Replayed
from service.writing.outcomes import Held, locked, observed

if TYPE_CHECKING:
    from service.hosting import HostedModel

# "service.store": the logger name is part of each of its log lines (their "logger" field).
log = logging.getLogger("service.store")

#: Replays off the lock before one is made under it (each retried only if the model moved by
#: more than batches while it ran).
ATTEMPTS = 3
#: Catch-ups off the lock after a replay, while writers commit (:func:`caught_up`).
CATCH_UPS = 3
#: Times a take-back that finds batches committed since its last catch-up lets go of the lock
#: to learn them off it; the next time it learns them under the lock.
RELOCKS = 3


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


def caught_up(model: HostedModel, prepared: PreparedTakeBack) -> PreparedTakeBack | None:
    """``prepared`` brought, off the lock, to the version this process serves: the batches
    committed while it replayed learned on top (at most :data:`CATCH_UPS` rounds, while writers
    go on), so that under the lock only those committed since are left; then what its commit
    writes made once, on the version it reached (:func:`finished`). None when anything but
    batches moved (another take-back, say): it is prepared again."""
    for _ in range(CATCH_UPS):
        snap = model.reader.snapshot()
        caught = catch_up(model.reader, prepared, snap)
        if caught is None:
            return None
        done, prepared = caught is prepared, caught
        if done:
            break
    return finished(prepared, snap)


def take_back_batch(model: HostedModel, batch_version: int, claim: Claim | None = None) -> tuple[PreparedTakeBack, int]:
    """Rebuild the model without the batch off the update lock, then under it check that
    nothing moved and commit with the version compare-and-set (and ``claim``'s answer). When
    batches were committed since its last catch-up, it lets go of the lock and learns them off
    it (at most :data:`RELOCKS` times; then under it). Returns the prepared take-back and the
    new version. Observed like an update (outcome ``taken_back``) with one log line:
    ``duration_ms`` is the last hold of the lock, ``lock_holds`` how many times it was taken."""
    h = Held(time.perf_counter())
    parts = [TakeBackLog(model.name)] + ([claim] if claim is not None else [])
    prepared: PreparedTakeBack | None = None
    replays = holds = 0
    with observed(model, "taken_back", h.t0):
        while True:
            last_resort = replays == ATTEMPTS  # the model kept moving by more than batches
            if not last_resort:
                if prepared is None:
                    prepared = take_back_prepare(model.reader, model.reader.snapshot(), batch_version)
                    replays += 1
                prepared = caught_up(model, prepared)
                if prepared is None:
                    continue  # moved by more than batches: prepared again
            h.t0 = time.perf_counter()
            holds += 1
            with locked(model, h):
                if claim is not None:
                    model.keys.verify(claim)
                snap = model.reader.snapshot(check=True)
                if last_resort:  # replay under the lock
                    prepared = take_back_prepare(model.reader, snap, batch_version)
                    replays += 1
                else:
                    assert prepared is not None
                    if snap.version > prepared.base_version and holds <= RELOCKS:
                        continue  # batches (or more) since: caught up off the lock, once it is released
                    prepared = catch_up(model.reader, prepared, snap)  # None: prepared again
                if prepared is not None:
                    version = model.writer.commit_take_back(finished(prepared, snap), parts)
                    break
    assert prepared is not None
    done = time.perf_counter()
    metrics.UPDATE_SECONDS.observe(done - h.acquired)
    model.wake()
    stored = checkpoint(model, prepared, version)
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
            "task_rows_written": prepared.rows_written,
            "checkpoint": prepared.checkpoint,
            "replay_ms": round(prepared.replay_seconds * 1000, 2),
            "duration_ms": round((done - h.acquired) * 1000, 2),  # the lock's hold
            "lock_wait_ms": round((h.acquired - h.t0) * 1000, 2),
            "attempts": replays,
            "lock_holds": holds,
            "checkpoint_stored": stored,
            "checkpoint_ms": round((time.perf_counter() - done) * 1000, 2),  # after the lock's release
        },
    )
    return prepared, version


def checkpoint(model: HostedModel, p: PreparedTakeBack, version: int) -> bool:
    """The rebuilt model's checkpoint at the take-back's ``version``, made and stored after its
    commit, off the lock (:func:`service.take_back.checkpoints.store_committed`); whether it was
    stored. A database error loses the checkpoint, never the take-back: it is logged, and a
    later take-back replays from an older checkpoint."""
    assert p.state is not None  # exported for the commit
    data = checkpoints.state_file(p.state, version, p.summary, p.tasks)
    try:
        return checkpoints.store_committed(model.reader.bulk, model.name, version, p.info.get("created_at"), data)
    except SQLAlchemyError as exc:
        log.warning(
            "checkpoint not stored: %s",
            exc,
            extra={"event": "checkpoint_not_stored", "model": model.name, "version": version},
        )
        return False
