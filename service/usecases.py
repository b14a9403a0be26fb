"""What the service does with its model, and where it is observed: start serving it, learn a
batch (lock -> prepare -> commit), predict.

The model's metrics (update and lock-wait times, update outcomes, predictions, the gauges of
the served version) and its log lines are recorded here and nowhere else: :mod:`service.reads`
and :mod:`service.writes` only read and write. Per-request metrics and the access log are the
middleware's (:class:`service.middleware.RequestContext`).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from sqlalchemy import Engine

import core

from . import metrics
from .locks import LocalLocks, LockBusy, RedisLocks
from .reads import ModelMissing, ModelReader, Snapshot
from .writes import ModelWriter, StaleWrite

# "service.store": the logger name is part of each of its log lines (their "logger" field).
log = logging.getLogger("service.store")


@dataclass(frozen=True)
class HostedModel:
    """The model one process serves: its cached reads, its guarded writes, its update lock."""

    reader: ModelReader
    writer: ModelWriter
    locks: LocalLocks | RedisLocks

    @classmethod
    def open(cls, engine: Engine, locks: LocalLocks | RedisLocks, name: str, model_settings: dict,
             bulk_engine: Engine | None = None) -> HostedModel:
        """The model ``name`` on ``engine`` (``bulk_engine`` for its large transfers; see
        :data:`service.db.BULK_POOL_SIZE`), created with ``model_settings`` if it is missing."""
        reader = ModelReader(engine, name, bulk_engine)
        return cls(reader, ModelWriter(reader, model_settings), locks)

    @property
    def name(self) -> str:
        return self.reader.name


def start(model: HostedModel) -> None:
    """At start-up: create the model if it does not exist, load it, publish its gauges."""
    create(model)
    model.reader.snapshot()
    _observe_served(model.reader)


def create(model: HostedModel) -> None:
    """Create the model's row (version 0, unfitted) if it does not exist yet."""
    if model.writer.ensure_model():
        s = model.writer.model_settings
        log.info("created model %r (%s, %s)", model.name, s["estimator"], s["kind"])


def learn(model: HostedModel, task_id: str, X, y) -> tuple[core.UpdateResult, int]:
    """Learn one batch and commit it; returns the result and the new model version.

    Under the model's update lock: refresh to the stored version (creating the model first if
    its row is missing), learn on a private copy, commit with the version compare-and-set.
    Observed: lock wait (``fcl3_lock_wait_seconds``), update time, outcome; one log line per
    committed update."""
    t0 = time.perf_counter()
    acquired = None
    outcome = "error"
    try:
        with model.locks.hold(model.name):
            acquired = time.perf_counter()
            metrics.LOCK_WAIT_SECONDS.labels("acquired").observe(acquired - t0)
            prepared = model.writer.prepare(_current(model), task_id, X, y)
            version = model.writer.commit(prepared)
        outcome = "committed"
    except core.InputError:
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
        _observe_served(model.reader)
    done = time.perf_counter()
    metrics.UPDATE_SECONDS.observe(done - acquired)
    r = prepared.result
    log.info("model update committed", extra={
        "event": "update", "model": model.name, "task": task_id, "version": version,
        "n_samples": int(prepared.X.shape[0]), "task_n_samples": int(r.n_samples), "new_task": bool(r.new_task),
        "new_representative": bool(r.new_representative), "n_representatives": int(r.n_representatives),
        "duration_ms": round((done - acquired) * 1000, 2), "lock_wait_ms": round((acquired - t0) * 1000, 2)})
    return r, version


def predict(reader: ModelReader, task_id: str, X) -> tuple[list[float], list[float] | None, int]:
    """Predictions of the served version (never waits for the update lock); counted."""
    try:
        preds, probs, version = reader.predict(task_id, X)
    finally:
        _observe_served(reader)
    metrics.PREDICTION_REQUESTS.inc()
    metrics.PREDICTIONS.inc(len(preds))
    return preds, probs, version


def _current(model: HostedModel) -> Snapshot:
    """The stored version for a writer: a missing model row is created (writes may write)."""
    try:
        return model.reader.snapshot()
    except ModelMissing:
        create(model)
        return model.reader.snapshot()


def _observe_served(reader: ModelReader) -> None:
    """The gauges of the version this process serves (its cached snapshot)."""
    snap = reader.cached
    if snap is None:
        return
    summary = snap.info.get("summary") or {}
    n_reps = summary.get("n_representatives", len(summary.get("representatives") or []))
    metrics.set_model(snap.version, len(snap.learner.task_ids), int(n_reps))
