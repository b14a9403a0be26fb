"""What the service does with a hosted model, and where it is observed: start serving the
default model, learn a batch (lock -> prepare -> commit), predict, post evaluation rows and
read the evaluation. A model's lifecycle is :mod:`service.lifecycle`, the models a process
serves :mod:`service.registry`.

The model's metrics (update and lock-wait times, update outcomes, predictions, the gauges of
the served version) and its log lines are recorded here and in :mod:`service.lifecycle`:
:mod:`service.reads` and :mod:`service.writes` only read and write. Per-request metrics and
the access log are the middleware's (:class:`service.middleware.RequestContext`).
"""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import core

from . import evaluation_reads, metrics
from .evaluation import Evaluated
from .idempotency import Claim, IdempotencyKeys, KeyInFlight, KeyTakenOver, Replayed, request_hash
from .labels import LabelBatch, LabelRefused, RememberedPredictions, labels_hash, remember_rows
from .lifecycle import register_base_columns
from .locks import LockBusy
from .reads import ModelMissing, Snapshot, VersionBehind  # noqa: F401 - VersionBehind re-exported
from .registry import HostedModel, ModelRegistry  # noqa: F401 - service.main builds it from here
from .responses import result_json
from .scores import Transfer, scores
from .take_back import TakeBackLog, TakeBackRefused, prepare as take_back_prepare, take_back_hash
from .prepared import Prepared
from .write_queue import Queued, WriteQueue
from .writes import StaleWrite

# "service.store": the logger name is part of each of its log lines (their "logger" field).
log = logging.getLogger("service.store")


def start(model: HostedModel) -> None:
    """At start-up: create the model if it does not exist, load it, publish its gauges."""
    create(model)
    model.reader.snapshot()
    model.observe()


def create(model: HostedModel) -> None:
    """Create the model's row (version 0, unfitted) if it does not exist yet."""
    if model.writer.ensure_model():
        s = model.writer.model_settings
        register_base_columns(model, s)
        log.info("created model %r (%s, %s)", model.name, s["estimator"], s["kind"])


def learn(model: HostedModel, task_id: str, X, y, claim: Claim | None = None) -> tuple[core.UpdateResult, int]:
    """Learn one batch and commit it; returns the result and the new model version
    (:func:`learn_answer` for the whole answer, the prequential score included)."""
    prepared, version = learn_batch(model, task_id, X, y, claim)
    return prepared.result, version


def learn_answer(model: HostedModel, task_id: str, X, y) -> dict[str, Any]:
    """Learn one batch and commit it; the answer (:class:`fcl3.schemas.UpdateOut`)."""
    prepared, version = learn_batch(model, task_id, X, y)
    return _answer(prepared, version)


def _answer(prepared, version: int) -> dict[str, Any]:
    return {**result_json(prepared.result), "version": version,
            "prequential": scores(prepared.prequential)}


@dataclass
class _Held:
    """When the update lock was asked for and when it was held (``time.perf_counter``)."""

    t0: float
    acquired: float = 0.0


@contextmanager
def _outcome(model: HostedModel, done: str, t0: float):
    """A write's outcome (``fcl3_updates_total``: ``done`` when the block ends, else what was
    refused: replayed, key in flight, bad input, stale, lock busy), then the served gauges."""
    outcome = "error"
    try:
        yield
        outcome = done
    except Replayed:
        outcome = "replayed"
        raise
    except KeyInFlight:
        outcome = "key_in_flight"
        raise
    except (core.InputError, LabelRefused, TakeBackRefused):
        outcome = "bad_input"
        raise
    except StaleWrite:
        outcome = "stale"
        raise
    except LockBusy:
        outcome = "lock_busy"
        metrics.LOCK_WAIT_SECONDS.labels("busy").observe(time.perf_counter() - t0)
        raise
    finally:
        metrics.UPDATES.labels(outcome).inc()
        model.observe()


@contextmanager
def _held(model: HostedModel, done: str):
    """The model's update lock (with the process's foreground), observed: the lock wait
    (``fcl3_lock_wait_seconds``) and the write's outcome (:func:`_outcome`)."""
    held = _Held(time.perf_counter())
    with _outcome(model, done, held.t0):
        with model.locks.hold(model.name), model.shared.foreground:
            held.acquired = time.perf_counter()
            metrics.LOCK_WAIT_SECONDS.labels("acquired").observe(held.acquired - held.t0)
            yield held


#: The most batches one group commits (one transaction): its time under the update lock stays
#: far below ``LOCK_TTL`` and its first batch is not answered much later than alone.
MAX_GROUP = 64


def learn_batch(model: HostedModel, task_id: str, X, y, claim: Claim | None = None, labels: LabelBatch | None = None):
    """Learn one batch and commit it; returns the prepared update and the new model version.
    With ``labels`` (a label request, :mod:`service.labels`), the batch is its remembered rows,
    loaded under the lock (``task_id``, ``X``, ``y`` are ignored), scored by the outputs they
    were served, and marked labelled by the commit.

    **Group commit.** The batch joins its model's queue in this process
    (:class:`service.write_queue.WriteQueue`); one waiting request at a time leads: it takes the
    model's update lock, takes every batch queued by then (at most :data:`MAX_GROUP`; a label
    request alone), and under the lock refreshes to the stored version, learns them in arrival
    order, each on the learner the previous one left (a private copy each), scored before it is
    learned, and commits them in one transaction with one version compare-and-set
    (:meth:`service.writes.ModelWriter.commit_group`): batch ``i`` is model version
    ``base + i``, with its own batch row, answer, evaluation and ``Idempotency-Key`` answer, as
    if committed alone. A batch refused while it is learned (bad input, its key replayed or in
    flight, labels refused) is left out of the group, nothing of it applied; a claim taken over
    at the commit makes the group commit again batch by batch. Each request is answered only
    after the commit of its group. Across processes the update lock orders the groups, and
    the version sequence in the database is the order every replica agrees on.

    With ``claim`` (an ``Idempotency-Key`` held by this request, see :func:`learn_once`), the
    claim is checked again under the lock and the answer is stored with the batch.
    Observed: lock wait (``fcl3_lock_wait_seconds``), update time, outcome; one log line per
    committed update (engine time and the time outside it: lock wait, load, scoring, commit).
    The model's evaluation is updated in the commit's transaction (:mod:`service.evaluation`);
    the evaluation sets it rescores are scored just after the commit, off the lock, before it
    answers, by the request of that batch."""
    item = Queued(task_id, X, y, claim, labels)
    item.deadline = item.t0 + float(getattr(model.locks, "wait", 5.0))
    with _outcome(model, "committed", item.t0):
        try:
            _submit(model, item)
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
    if ev.matrix_job is not None:  # the accuracy matrix's row, off the lock (service.evaluation)
        model.evaluation.submit(ev.matrix_job, lambda figures: _matrix_done(model, figures))
    return prepared, version


def _submit(model: HostedModel, item: Queued) -> None:
    """Queue ``item`` and wait until it is committed or refused (then raise its error): led by
    another request of this process, or by this one when no other leads. Waiting behind
    another group counts as waiting for the update lock: a batch not yet taken into a group
    when its ``LOCK_WAIT`` is over leaves the queue with :class:`LockBusy` (503), as it would
    had it waited for the lock itself."""
    q = model.writer.queue
    with q.cond:
        q.items.append(item)
        while not item.done and (q.leading or item.taken):
            left = item.deadline - time.perf_counter()
            if left <= 0 and not item.taken:  # waited its LOCK_WAIT behind another group: 503
                q.items.remove(item)
                raise LockBusy(model.name, item.deadline - item.t0)
            q.cond.wait(left if not item.taken else None)
        lead = not item.done
        if lead:
            q.leading = True
    if lead:
        try:
            while not item.done:  # a group holds at most MAX_GROUP: ours may be in the next one
                _lead(model, q, item)
        finally:
            with q.cond:
                q.leading = False
                q.cond.notify_all()
    if item.error is not None:
        raise item.error


def _lead(model: HostedModel, q: WriteQueue, me: Queued) -> None:
    """One group: the update lock (waiting at most what is left of ``me``'s lock wait), the
    batches queued by then, learned and committed; each batch's outcome, after the release."""
    group: list[Queued] = []
    outcome: dict[Queued, tuple[Prepared | None, int | None, BaseException | None]] = {}
    error: BaseException | None = None
    try:
        with model.locks.hold(model.name, wait=max(me.deadline - time.perf_counter(), 0.0)), model.shared.foreground:
            acquired = time.perf_counter()
            with q.cond:
                group = q.take(MAX_GROUP)
            for item in group:
                item.acquired, item.group_size = acquired, len(group)
            _learn_group(model, group, outcome)
    except BaseException as exc:  # noqa: BLE001 - each batch without an outcome is answered with it
        error = exc
    released = time.perf_counter()
    for item in group or [me]:
        item.released = released
        prepared, version, err = outcome.get(item, (None, None, error))
        if prepared is None and err is None:
            err = RuntimeError("batch left without an outcome")  # not reached: every batch gets one
        q.finish(item, prepared, version, err)


def _learn_group(model: HostedModel, group: list[Queued], outcome: dict) -> None:
    """Under the update lock: learn ``group`` in order on the stored version and commit the
    batches that were learned in one transaction; ``outcome[item]`` = (prepared, version, None)
    or (None, None, the error that refused it). An error of the whole group (the database, a
    stale version) is raised."""
    snap = _current(model)
    ready: list[tuple[Queued, Prepared, list]] = []
    for item in group:
        try:
            if item.claim is not None:
                model.keys.verify(item.claim)  # Replayed / KeyInFlight: another request has the key
            task_id, X, y, served = item.task_id, item.X, item.y, None
            parts: list = [model.evaluation]
            if item.labels is not None:
                task_id, X, y, served = item.labels.load()  # LabelRefused: nothing happened
                parts.append(item.labels)
            if item.claim is not None:
                parts.append(item.claim)
            prepared = model.writer.prepare(snap, task_id, X, y, served)  # InputError: this batch only
            if item.labels is not None:
                prepared.source = "labels"
        except Exception as exc:  # noqa: BLE001 - refused: this batch only, nothing of it applied
            outcome[item] = (None, None, exc)
            continue
        ready.append((item, prepared, parts))
        snap = Snapshot(snap.version + 1, prepared.learner,
                        {**snap.info, "version": snap.version + 1, "summary": prepared.summary})
    if not ready:
        return
    try:
        if len(ready) == 1:
            versions = [model.writer.commit(ready[0][1], ready[0][2])]
        else:
            versions = model.writer.commit_group([p for _, p, _ in ready], [parts for _, _, parts in ready])
    except KeyTakenOver:  # one batch's key was taken over: rolled back; each batch alone, own outcome
        if len(ready) == 1:
            raise
        for item, _, _ in ready:
            try:
                _learn_group(model, [item], outcome)
            except KeyTakenOver as exc:  # taken over again: that batch only
                outcome[item] = (None, None, exc)
        return
    for (item, prepared, _), version in zip(ready, versions):
        outcome[item] = (prepared, version, None)


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


def learn_once(model: HostedModel, task_id: str, X, y, key: str) -> tuple[dict[str, Any], bool]:
    """Learn one batch at most once per ``key`` (``Idempotency-Key``) of ``model``: returns the
    answer (the body of the 200) and whether it is a replay of the first request's answer.

    The key is claimed before the update lock (a key already answered is replayed, a key used
    with another task or body is :class:`service.idempotency.KeyMismatch` (422), a key whose
    first request still runs is :class:`service.idempotency.KeyInFlight` (409)), checked again
    under the lock, and its answer is stored by the commit that stores the batch. An update
    that fails releases the claim (at once, or as soon as the database answers again). See
    :mod:`service.idempotency`."""
    return _once(model, key, request_hash(task_id, X, y), lambda claim: learn_batch(model, task_id, X, y, claim))


def _once(model: HostedModel, key: str, h: str, run, answer=None) -> tuple[dict[str, Any], bool]:
    """``run(claim)`` (a :func:`learn_batch`, or a :func:`take_back_batch`) at most once per
    ``key`` of ``model`` for the request of hash ``h``: the answer (``answer(prepared, version)``,
    by default an update's) and whether it is a replay (see :func:`learn_once`)."""
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
    return (answer or _answer)(prepared, version), False


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


def predict(model: HostedModel, task_id: str, X, min_version: int | None = None, snap=None
            ) -> tuple[list[float], list[float] | None, int]:
    """Predictions of the served version, at least ``min_version`` (never waits for the update
    lock), or of ``snap`` (a snapshot :meth:`ModelReader.fresh` just returned); counted.
    :class:`VersionBehind` (409) when the stored model is below ``min_version``."""
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


def label(model: HostedModel, ids: list[str], y: list[float], key: str | None = None) -> tuple[dict[str, Any], bool]:
    """Learn the remembered rows ``ids`` with their labels ``y`` as one batch of their task
    (:mod:`service.labels`; at most once per ``key`` when given): the answer
    (:class:`fcl3.schemas.UpdateOut`) and whether it is a replay."""
    batch = LabelBatch(RememberedPredictions(model.reader.engine, model.name), list(ids), list(y))
    if key is None:
        prepared, version = learn_batch(model, "", None, None, labels=batch)
        return _answer(prepared, version), False
    return _once(model, key, labels_hash(ids, y), lambda claim: learn_batch(model, "", None, None, claim, batch))


def labels_summary(model: HostedModel) -> dict[str, Any]:
    """The body of ``GET .../labels`` (:class:`fcl3.schemas.LabelsOut`)."""
    version = model.reader.require()
    return RememberedPredictions(model.reader.engine, model.name).summary(version)


# ----------------------------------------------------------------------------- take a batch back
def take_back(model: HostedModel, batch_version: int, key: str | None = None) -> tuple[dict[str, Any], bool]:
    """Take the batch of ``batch_version`` back (:mod:`service.take_back`; at most once per
    ``key`` when given): the answer (:class:`fcl3.schemas.TakeBackOut`) and whether it is a replay."""
    if key is None:
        prepared, _ = take_back_batch(model, batch_version)
        return prepared.answer, False
    return _once(model, key, take_back_hash(batch_version), lambda claim: take_back_batch(model, batch_version, claim),
                 answer=lambda prepared, version: prepared.answer)


def take_back_batch(model: HostedModel, batch_version: int, claim: Claim | None = None):
    """Under the model's update lock: refresh to the stored version, rebuild the model without
    the batch by replay, commit it with the version compare-and-set (and ``claim``'s answer).
    Returns the prepared take-back and the new version. Observed like an update (outcome
    ``taken_back``) with one log line."""
    with _held(model, "taken_back") as held:
        if claim is not None:
            model.keys.verify(claim)
        snap = model.reader.snapshot(check=True)
        prepared = take_back_prepare(model.reader, snap, batch_version)
        parts = [TakeBackLog(model.name)] + ([claim] if claim is not None else [])
        version = model.writer.commit_take_back(prepared, parts)
    t0, acquired = held.t0, held.acquired
    done = time.perf_counter()
    metrics.UPDATE_SECONDS.observe(done - acquired)
    log.info("batch taken back", extra={
        "event": "take_back", "model": model.name, "task": prepared.task_id, "version": version,
        "batch_version": batch_version, "n_samples": prepared.n_samples, "task_removed": prepared.task_removed,
        "n_replayed": prepared.n_replayed, "replay_ms": round(prepared.replay_seconds * 1000, 2),
        "duration_ms": round((done - acquired) * 1000, 2), "lock_wait_ms": round((acquired - t0) * 1000, 2)})
    model.wake()
    return prepared, version


# ----------------------------------------------------------------------------- online evaluation
def add_evaluation_rows(model: HostedModel, task_id: str, X, y) -> dict[str, Any]:
    """Store labelled rows as ``task_id``'s evaluation set (never learned: the model's version
    and the task's samples do not move), scored at once if the task is learned. Under the
    model's update lock (:class:`LockBusy`: 503), checked like a batch (``InputError``: 422,
    nothing stored). Returns the body of :class:`fcl3.schemas.EvaluationRowsOut`."""
    with model.locks.hold(model.name):
        snap = _current(model)
        d = (snap.info.get("settings") or {}).get("d")
        out = model.evaluation.add_rows(snap, task_id, X, y, d)
    log.info("evaluation rows stored", extra={"event": "evaluation_rows", "model": model.name, "task": task_id,
                                              "n_rows": out["n_rows"], "n_received": out["n_received"]})
    model.wake()
    return out


def evaluation_report(model: HostedModel, limit: int = 1000) -> dict[str, Any]:
    """The body of ``GET .../evaluation`` (:class:`fcl3.schemas.EvaluationOut`)."""
    snap = model.reader.snapshot()
    kind = snap.learner.kind
    out = evaluation_reads.report(model.reader.engine, model.name, kind, snap.version, snap.learner.task_ids, limit)
    if out["backward_transfer"] is not None:
        metrics.BACKWARD_TRANSFER.labels(model.name).set(out["backward_transfer"])
    return out


def task_evaluation(model: HostedModel, task_id: str, kind: str) -> dict[str, Any]:
    """``{"prequential", "evaluation"}`` of one task (cumulative prequential, held-out score)."""
    preq, ev = evaluation_reads.task_figures(model.reader.engine, model.name, task_id, kind)
    return {"prequential": preq, "evaluation": ev}


def model_prequential(model: HostedModel, kind: str) -> dict[str, Any]:
    """The model-wide prequential figures (:class:`fcl3.schemas.ModelPrequential`)."""
    out = evaluation_reads.model_figures(model.reader.engine, model.name, kind, model.shared.evaluation.window)
    if out["overall"]:
        metrics.set_prequential(model.name, kind, out["overall"])
    return out


def _current(model: HostedModel) -> Snapshot:
    """The stored version for a writer: a missing default model row is created (writes may
    write); any other missing model is unknown."""
    try:
        return model.reader.snapshot(check=True)
    except ModelMissing:
        if not model.default:
            raise
        create(model)
        return model.reader.snapshot(check=True)
