"""Learn a batch: ``POST .../tasks/{task_id}/data`` from the claim of its ``Idempotency-Key`` to its
answer, and a label request's batch (:mod:`service.labels.flows`), which takes the same path.

The batch joins its model's group commit (:mod:`service.learning.group_commit`: queued in this
process, learned under the update lock with the batches queued meanwhile, committed in one
transaction), and the request is answered once its group is committed, with the answer its
commit stored (:attr:`service.store.prepared.Prepared.answer`). What is observed here: the lock
wait and the update's time (``fcl3_lock_wait_seconds``, ``fcl3_update_duration_seconds``), its
outcome (:mod:`service.writing.outcomes`), one log line per committed update, and after the
commit, off the lock, the evaluation sets it rescores and the accuracy matrix's row it queues
(:mod:`service.evaluation`). :mod:`service.store` only reads and writes.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from service import metrics
from service.evaluation.jobs import Evaluated
from service.evaluation.scores import Transfer
from service.learning.group_commit import submit
from service.learning.queue import Queued
from service.store.prepared import Prepared
from service.writing import idempotent
from service.writing.idempotency import Claim, Replayed
from service.writing.idempotent import request_hash
from service.writing.outcomes import observed

if TYPE_CHECKING:
    from service.hosting import HostedModel
    from service.labels.batch import LabelBatch
    from service.records.rows import RecordsBatch

# "service.store": the logger name is part of each of its log lines (their "logger" field).
log = logging.getLogger("service.store")


def learn(
    model: HostedModel, task_id: str, X: Any, y: Any, key: str | None = None, records: RecordsBatch | None = None
) -> tuple[dict[str, Any], bool]:
    """Learn one batch and commit it, at most once per ``key`` (an ``Idempotency-Key``, see
    :mod:`service.writing.idempotent`): the answer (:class:`fcl3.schemas.UpdateOut`) and whether
    it is a replay of the first request's answer. ``records``: the batch as records (``X``
    None), encoded under the update lock; a retry is recognised by its records."""
    rows = records.canonical() if records is not None else X
    try:
        with idempotent.claimed(model, key, lambda: request_hash(task_id, rows, y)) as claim:
            prepared, _ = learn_batch(model, task_id, X, y, claim, records=records)
    except Replayed as replay:
        return idempotent.replayed(model, replay), True
    return prepared.answer, False


def learn_batch(
    model: HostedModel,
    task_id: str,
    X: Any,
    y: Any,
    claim: Claim | None = None,
    labels: LabelBatch | None = None,
    records: RecordsBatch | None = None,
) -> tuple[Prepared, int]:
    """Learn one batch and commit it; returns the prepared update and the new model version.
    With ``records`` (:class:`service.records.rows.RecordsBatch`), the batch is encoded under
    the lock and its new levels' columns are stored by its commit.
    With ``labels`` (a label request, :mod:`service.labels`), the batch is its remembered rows,
    loaded under the lock (``task_id``, ``X``, ``y`` are ignored), scored by the outputs they
    were served, and marked labelled by the commit.

    **Group commit** (:mod:`service.learning.group_commit`): the batch joins its model's queue
    in this process and is learned and committed with the batches queued meanwhile, each as if
    committed alone (its own version, batch row, answer, evaluation and ``Idempotency-Key``
    answer). Each request is answered only after the commit of its group.

    With ``claim`` (an ``Idempotency-Key`` held by this request), the claim is checked again
    under the lock and the answer is stored with the batch.
    Observed: lock wait (``fcl3_lock_wait_seconds``), update time, outcome; one log line per
    committed update (engine time and the time outside it: lock wait, load, scoring, commit).
    The model's evaluation is updated in the commit's transaction; the evaluation sets it
    rescores are scored just after the commit, off the lock, before it answers, by the request
    of that batch."""
    item = Queued(task_id, X, y, claim, labels, records)
    item.deadline = item.t0 + float(getattr(model.locks, "wait", 5.0))
    with observed(model, "committed", item.t0):
        try:
            submit(model, item)
        finally:
            if item.acquired:
                metrics.LOCK_WAIT_SECONDS.labels("acquired").observe(item.acquired - item.t0)
    prepared, version = item.prepared, item.version
    assert prepared is not None and version is not None  # submit raised otherwise
    t0, acquired, released = item.t0, item.acquired, item.released
    ev: Evaluated = prepared.evaluated
    rescoring = time.perf_counter()  # after its group's release and this request's wake-up
    if ev.rescore_job is not None:  # the evaluation sets, off the lock, before answering
        try:
            with model.shared.foreground:
                model.evaluation.rescore_sets(ev.rescore_job)
        except Exception as exc:  # noqa: BLE001 - the update is committed; those scores stay older
            log.warning(
                "evaluation sets of model %r not rescored at version %d: %s", model.name, version, type(exc).__name__
            )
    done = time.perf_counter()
    prepared.rescore_seconds, prepared.lock_held_seconds = done - rescoring, released - acquired
    metrics.UPDATE_SECONDS.observe(done - acquired)
    metrics.UPDATE_ENGINE_SECONDS.observe(prepared.engine_seconds)
    r = prepared.result
    log.info(
        "model update committed",
        extra={
            "event": "update",
            "model": model.name,
            "task": prepared.task_id,
            "version": version,
            "n_samples": int(prepared.X.shape[0]),
            "task_n_samples": int(r.n_samples),
            "new_task": bool(r.new_task),
            "new_representative": bool(r.new_representative),
            "n_representatives": int(r.n_representatives),
            "duration_ms": round((done - acquired) * 1000, 2),
            "lock_wait_ms": round((acquired - t0) * 1000, 2),
            "engine_ms": round(prepared.engine_seconds * 1000, 2),
            "outside_ms": round((done - t0 - prepared.engine_seconds) * 1000, 2),
            "prequential_ms": round(prepared.prequential_seconds * 1000, 2),
            "evaluation_ms": round(prepared.evaluation_seconds * 1000, 2),
            "rescore_after_commit_ms": round(prepared.rescore_seconds * 1000, 2),
            "lock_held_ms": round(prepared.lock_held_seconds * 1000, 2),
            "evaluation_rescored": ev.rescored,
            "group_size": item.group_size,
        },
    )
    _observe_evaluation(model, prepared.learner.kind, ev)
    model.wake()
    if ev.matrix_job is not None:  # the accuracy matrix's row, off the lock (service.evaluation.matrix)
        model.evaluation.matrix.submit(ev.matrix_job, lambda figures: _matrix_done(model, figures))
    return prepared, version


def _matrix_done(model: HostedModel, figures: Transfer) -> None:
    if figures.backward_transfer is not None:
        metrics.BACKWARD_TRANSFER.labels(model.name).set(figures.backward_transfer)
    model.wake()


def _observe_evaluation(model: HostedModel, kind: str, evaluated: Evaluated) -> None:
    """The gauges of the model-wide prequential error, its baseline and backward transfer."""
    if evaluated.overall:
        metrics.set_prequential(model.name, kind, evaluated.overall)
    if evaluated.transfer.backward_transfer is not None:
        metrics.BACKWARD_TRANSFER.labels(model.name).set(evaluated.transfer.backward_transfer)
