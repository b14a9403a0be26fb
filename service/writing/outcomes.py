"""A write's outcome and its wait for the update lock, counted: ``fcl3_updates_total`` by
outcome (committed, taken back, or what refused it), ``fcl3_lock_wait_seconds`` (acquired or
busy), then the served-model gauges. Every write of a hosted model (a batch, a label request,
a take-back) is observed through :func:`outcome` or :func:`held`, so that each counts the same.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import core

from service import metrics
from service.writing.idempotency import KeyInFlight, Replayed
from service.labels.remembered import LabelRefused
from service.writing.locks import LockBusy
from service.take_back.rebuild import TakeBackRefused
from service.store.writes import StaleWrite

if TYPE_CHECKING:
    from service.hosting import HostedModel


@dataclass
class Held:
    """When the update lock was asked for and when it was held (``time.perf_counter``)."""

    t0: float
    acquired: float = 0.0


@contextmanager
def outcome(model: HostedModel, done: str, t0: float):
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
def held(model: HostedModel, done: str):
    """The model's update lock (with the process's foreground), observed: the lock wait
    (``fcl3_lock_wait_seconds``) and the write's outcome (:func:`outcome`)."""
    h = Held(time.perf_counter())
    with outcome(model, done, h.t0):
        with model.locks.hold(model.name), model.shared.foreground:
            h.acquired = time.perf_counter()
            metrics.LOCK_WAIT_SECONDS.labels("acquired").observe(h.acquired - h.t0)
            yield h
