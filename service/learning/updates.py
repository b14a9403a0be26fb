"""Learn a batch and predict with a hosted model: the service's two hot paths, where they are
observed; and what the app does with the default model at start-up (create, load, gauges) and
with expired ``Idempotency-Key`` rows (purged at start-up and on writes).

A model's lifecycle is :mod:`service.models.lifecycle`, the models a process serves
:mod:`service.hosting`; the group commit a batch joins :mod:`service.learning.group_commit`; a batch at
most once per key :mod:`service.writing.idempotent`; labels, take-backs and evaluation rows
:mod:`service.labels.flows`, :mod:`service.take_back.flows` and
:mod:`service.evaluation.figures`.

The model's metrics (update and lock-wait times, update outcomes, predictions, the gauges of
the served version) and its log lines are recorded here and in the modules named above
(:mod:`service.writing.outcomes` counts every write's outcome): :mod:`service.store.reads` and
:mod:`service.store.writes` only read and write. Per-request metrics and the access log are the
middleware's (:class:`service.middleware.RequestContext`).
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import core

from service import metrics
from service.evaluation.jobs import Evaluated
from service.learning.group_commit import submit
from service.writing.idempotency import Claim, IdempotencyKeys
from service.labels.remembered import LabelBatch, remember_rows
from service.models.lifecycle import ensure_created
from service.api.responses import result_json
from service.evaluation.scores import Transfer, scores
from service.writing.outcomes import outcome
from service.learning.queue import Queued

if TYPE_CHECKING:
    from service.hosting import HostedModel

# "service.store": the logger name is part of each of its log lines (their "logger" field).
log = logging.getLogger("service.store")


def start(model: HostedModel) -> None:
    """At start-up: create the model if it does not exist, load it, publish its gauges."""
    ensure_created(model)
    model.reader.snapshot()
    model.observe()


def learn(model: HostedModel, task_id: str, X, y, claim: Claim | None = None) -> tuple[core.UpdateResult, int]:
    """Learn one batch and commit it; returns the result and the new model version
    (:func:`learn_answer` for the whole answer, the prequential score included)."""
    prepared, version = learn_batch(model, task_id, X, y, claim)
    return prepared.result, version


def learn_answer(model: HostedModel, task_id: str, X, y) -> dict[str, Any]:
    """Learn one batch and commit it; the answer (:class:`fcl3.schemas.UpdateOut`)."""
    prepared, version = learn_batch(model, task_id, X, y)
    return update_answer(prepared, version)


def update_answer(prepared, version: int) -> dict[str, Any]:
    """The answer to a committed batch (:class:`fcl3.schemas.UpdateOut`)."""
    return {**result_json(prepared.result), "version": version,
            "prequential": scores(prepared.prequential)}


def learn_batch(model: HostedModel, task_id: str, X, y, claim: Claim | None = None, labels: LabelBatch | None = None):
    """Learn one batch and commit it; returns the prepared update and the new model version.
    With ``labels`` (a label request, :mod:`service.labels`), the batch is its remembered rows,
    loaded under the lock (``task_id``, ``X``, ``y`` are ignored), scored by the outputs they
    were served, and marked labelled by the commit.

    **Group commit** (:mod:`service.learning.group_commit`): the batch joins its model's queue in this
    process and is learned and committed with the batches queued meanwhile, each as if
    committed alone (its own version, batch row, answer, evaluation and ``Idempotency-Key``
    answer). Each request is answered only after the commit of its group.

    With ``claim`` (an ``Idempotency-Key`` held by this request, see
    :func:`service.writing.idempotent.learn_once`), the claim is checked again under the lock
    and the answer is stored with the batch.
    Observed: lock wait (``fcl3_lock_wait_seconds``), update time, outcome; one log line per
    committed update (engine time and the time outside it: lock wait, load, scoring, commit).
    The model's evaluation is updated in the commit's transaction (:mod:`service.evaluation`);
    the evaluation sets it rescores are scored just after the commit, off the lock, before it
    answers, by the request of that batch."""
    item = Queued(task_id, X, y, claim, labels)
    item.deadline = item.t0 + float(getattr(model.locks, "wait", 5.0))
    with outcome(model, "committed", item.t0):
        try:
            submit(model, item)
        finally:
            if item.acquired:
                metrics.LOCK_WAIT_SECONDS.labels("acquired").observe(item.acquired - item.t0)
    prepared, version = item.prepared, item.version
    t0, acquired, released = item.t0, item.acquired, item.released
    task_id = prepared.task_id
    ev: Evaluated = prepared.evaluated
    rescoring = time.perf_counter()  # after its group's release and this request's wake-up
    if ev.rescore_job is not None:  # the evaluation sets, off the lock, before answering
        try:
            with model.shared.foreground:
                model.evaluation.rescore_sets(ev.rescore_job)
        except Exception as exc:  # noqa: BLE001 - the update is committed; those scores stay older
            log.warning("evaluation sets of model %r not rescored at version %d: %s", model.name, version,
                        type(exc).__name__)
    done = time.perf_counter()
    prepared.rescore_seconds, prepared.lock_held_seconds = done - rescoring, released - acquired
    metrics.UPDATE_SECONDS.observe(done - acquired)
    metrics.UPDATE_ENGINE_SECONDS.observe(prepared.engine_seconds)
    r = prepared.result
    log.info("model update committed", extra={
        "event": "update", "model": model.name, "task": task_id, "version": version,
        "n_samples": int(prepared.X.shape[0]), "task_n_samples": int(r.n_samples), "new_task": bool(r.new_task),
        "new_representative": bool(r.new_representative), "n_representatives": int(r.n_representatives),
        "duration_ms": round((done - acquired) * 1000, 2), "lock_wait_ms": round((acquired - t0) * 1000, 2),
        "engine_ms": round(prepared.engine_seconds * 1000, 2),
        "outside_ms": round((done - t0 - prepared.engine_seconds) * 1000, 2),
        "prequential_ms": round(prepared.prequential_seconds * 1000, 2),
        "evaluation_ms": round(prepared.evaluation_seconds * 1000, 2),
        "rescore_after_commit_ms": round(prepared.rescore_seconds * 1000, 2),
        "lock_held_ms": round(prepared.lock_held_seconds * 1000, 2), "evaluation_rescored": ev.rescored,
        "group_size": item.group_size})
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


def predict(model: HostedModel, task_id: str, X, min_version: int | None = None, snap=None
            ) -> tuple[list[float], list[float] | None, int]:
    """Predictions of the served version, at least ``min_version`` (never waits for the update
    lock), or of ``snap`` (a snapshot :meth:`ModelReader.fresh` just returned); counted.
    :class:`service.store.reads.VersionBehind` (409) when the stored model is below ``min_version``."""
    try:
        preds, probs, version = model.reader.predict(task_id, X, min_version, snap)
    except core.UnknownTaskError:
        raise core.UnknownTaskError(f"unknown task {task_id!r}: model {model.name!r} has not learned it") from None
    finally:
        model.observe()
    metrics.PREDICTION_REQUESTS.inc()
    metrics.PREDICTIONS.inc(len(preds))
    return preds, probs, version


def predict_remembered(model: HostedModel, task_id: str, X, min_version: int | None, snap, ttl: float, cap: int
                       ) -> tuple[list[float], list[float] | None, int, list[str]]:
    """:func:`predict`, and the rows remembered for a label that arrives later
    (:mod:`service.labels`): their prediction ids too, in row order."""
    if snap is None:
        snap = model.reader.snapshot(min_version, task=task_id)
    preds, probs, version = predict(model, task_id, X, min_version, snap)
    ids = remember_rows(model, task_id, X, snap, ttl, cap)
    log.info("predictions remembered", extra={"event": "predictions_remembered", "model": model.name,
                                              "task": task_id, "version": version, "n_rows": len(ids)})
    return preds, probs, version, ids


def purge_keys(keys: IdempotencyKeys, every: bool = False) -> None:
    """Delete the expired ``Idempotency-Key`` rows: now (start-up), or with ``every`` at most
    once per ``IDEMPOTENCY_PURGE_EVERY`` seconds (on writes). Never fails the caller."""
    try:
        n = keys.maybe_purge() if every else keys.purge()
    except Exception as exc:  # noqa: BLE001 - a purge must never fail a write
        log.warning("idempotency key purge failed: %s", type(exc).__name__)
        return
    if n:
        log.info("purged %d expired idempotency keys", n, extra={"event": "idempotency_purge"})
