"""A write's outcome and its wait for the update lock, counted: ``fcl3_updates_total`` by
outcome (committed, taken back, or what refused it), ``fcl3_lock_wait_seconds`` (acquired or
busy), then the served-model gauges. Every write of a hosted model (a batch, a label request,
a take-back) is observed through :func:`observed` or :func:`held`, so that each counts the same.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import core
from service import metrics
from service.refusals import Refused
from service.store.writes import StaleWrite
from service.writing.idempotency import KeyInFlight, Replayed
from service.writing.locks import LockBusy

if TYPE_CHECKING:
    from service.hosting import HostedModel


@dataclass
class Held:
    """When the update lock was asked for and when it was held (``time.perf_counter``)."""

    t0: float
    acquired: float = 0.0


@contextmanager
def observed(model: HostedModel, done: str, t0: float) -> Iterator[None]:
    """A write's outcome (``fcl3_updates_total``: ``done`` when the block ends, else what was
    refused: replayed, key in flight, bad input, stale, lock busy), then the served gauges."""
    outcome = "error"
    try:
        yield
        outcome = done
    except Replayed as replay:
        outcome = "replayed"
        replay.counted = True
        raise
    except KeyInFlight:
        outcome = "key_in_flight"
        raise
    except (core.InputError, Refused):
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
def held(model: HostedModel, done: str) -> Iterator[Held]:
    """The model's update lock (with the process's foreground), observed: the lock wait
    (``fcl3_lock_wait_seconds``) and the write's outcome (:func:`observed`)."""
    h = Held(time.perf_counter())
    with observed(model, done, h.t0), locked(model, h):
        yield h


@contextmanager
def locked(model: HostedModel, h: Held) -> Iterator[Held]:
    """The model's update lock (with the process's foreground), its wait counted from ``h.t0``
    (``fcl3_lock_wait_seconds``), inside a write already :func:`observed`; ``h.acquired`` set."""
    with model.locks.hold(model.name), model.shared.foreground:
        h.acquired = time.perf_counter()
        metrics.LOCK_WAIT_SECONDS.labels("acquired").observe(h.acquired - h.t0)
        yield h
