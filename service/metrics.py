"""Prometheus metrics (``GET /metrics``).

One process: prometheus-client's default registry. Several uvicorn workers: set
``PROMETHEUS_MULTIPROC_DIR`` to an empty directory writable by every worker (before they
start; clear it at each deployment) and ``/metrics`` aggregates the workers' files.

The served-model gauges (``fcl3_model_version``, ``fcl3_tasks``, ``fcl3_representatives``)
carry a ``model`` label: one series per model this process holds (the default one and at most
``MODEL_CACHE_SIZE`` others), from its cached snapshot; across workers the maximum is reported.
"""

from __future__ import annotations

import functools
import os
from typing import Any

MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
if MULTIPROC_DIR:  # must exist before the metrics below are made
    os.makedirs(MULTIPROC_DIR, exist_ok=True)

from prometheus_client import (  # noqa: E402
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

MULTIPROC = bool(MULTIPROC_DIR)

_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

UPDATE_SECONDS = Histogram(
    "fcl3_update_duration_seconds",
    "Time of a model update: load, learn and commit (lock wait excluded).",
    buckets=_FAST,
)
UPDATE_ENGINE_SECONDS = Histogram(
    "fcl3_update_engine_seconds",
    "Time of a model update inside the engine (learn()); the rest of "
    "fcl3_update_duration_seconds is outside it: load, scoring, evaluation, commit.",
    buckets=_FAST,
)
LOCK_WAIT_SECONDS = Histogram(
    "fcl3_lock_wait_seconds", "Time an update waited for the model's lock.", ["outcome"], buckets=_FAST
)
UPDATE_GROUP_BATCHES = Histogram(
    "fcl3_update_group_batches",
    "Batches committed by one group commit (one transaction): its count is the groups, its sum the batches.",
    buckets=(1, 2, 4, 8, 16, 32, 64),
)
UPDATES = Counter("fcl3_updates_total", "Model updates by outcome.", ["outcome"])
PREDICTIONS = Counter("fcl3_predictions_total", "Rows predicted (predictions served).")
PREDICTION_REQUESTS = Counter("fcl3_prediction_requests_total", "Prediction requests answered.")
REFUSED = Counter("fcl3_refused_requests_total", "Requests refused, by HTTP status.", ["reason"])
REQUESTS = Counter("fcl3_http_requests_total", "HTTP requests by method and status.", ["method", "status"])
REQUEST_SECONDS = Histogram("fcl3_http_request_duration_seconds", "HTTP request time.", ["method"], buckets=_FAST)
# The models this process serves, by name: the default one and those in its cache (at most
# 1 + MODEL_CACHE_SIZE series per gauge and process; an evicted model's series are removed).
MODEL_VERSION = Gauge(
    "fcl3_model_version", "Version of a model this process serves.", ["model"], multiprocess_mode="max"
)
TASKS = Gauge("fcl3_tasks", "Tasks a served model has learned.", ["model"], multiprocess_mode="max")
REPRESENTATIVES = Gauge(
    "fcl3_representatives", "Representative tasks of a served model.", ["model"], multiprocess_mode="mostrecent"
)

# Online evaluation (service.evaluation), per model; "metric": rmse (regression) or log_loss.
PREQUENTIAL_ERROR = Gauge(
    "fcl3_prequential_error",
    "Model-wide prequential error over every scored batch (rmse or log_loss).",
    ["model", "metric"],
    multiprocess_mode="mostrecent",
)
PREQUENTIAL_BASELINE_ERROR = Gauge(
    "fcl3_prequential_baseline_error",
    "The same error of the tasks' own single-task models (the baseline).",
    ["model", "metric"],
    multiprocess_mode="mostrecent",
)
BACKWARD_TRANSFER = Gauge(
    "fcl3_backward_transfer",
    "Backward transfer over the accuracy matrix of the evaluation sets (positive: later tasks improved earlier ones).",
    ["model"],
    multiprocess_mode="mostrecent",
)

# Remembered predictions (service.labels), per model: the rows kept after the last prediction
# that remembered some ("pending": waiting for their label; "done": labelled or dropped, kept
# without arrays until they expire), and each state's bound (MAX_REMEMBERED_PER_MODEL).
REMEMBERED_ROWS = Gauge(
    "fcl3_remembered_rows",
    "Remembered prediction rows a model stores, by state (pending; done: labelled or dropped).",
    ["model", "state"],
    multiprocess_mode="mostrecent",
)
REMEMBERED_BOUND = Gauge(
    "fcl3_remembered_rows_bound",
    "The most remembered rows a model stores in each state (MAX_REMEMBERED_PER_MODEL).",
    multiprocess_mode="max",
)

REFUSED_STATUSES = {401, 403, 404, 409, 413, 415, 422, 503}


@functools.lru_cache(maxsize=256)
def _children(method: str, status: int) -> tuple[Any, ...]:
    """The labelled children of the per-request metrics for ``method`` and ``status``, looked up
    once: ``labels()`` costs more than the increment itself, and every request pays it."""
    return (
        REQUESTS.labels(method, str(status)),
        REQUEST_SECONDS.labels(method),
        REFUSED.labels(str(status)) if status in REFUSED_STATUSES else None,
    )


def observe_status(method: str, status: int, seconds: float) -> None:
    children = _children(method, status)
    children[0].inc()
    children[1].observe(seconds)
    if children[2] is not None:
        children[2].inc()


def set_model(model: str, version: int, n_tasks: int, n_representatives: int) -> None:
    """The served-model gauges of ``model``."""
    MODEL_VERSION.labels(model).set(version)
    TASKS.labels(model).set(n_tasks)
    REPRESENTATIVES.labels(model).set(n_representatives)


def forget_served(model: str) -> None:
    """Drop the served-model gauges of ``model`` (no longer held by this process)."""
    for gauge in (MODEL_VERSION, TASKS, REPRESENTATIVES):
        try:
            gauge.remove(model)
        except KeyError:
            pass


def exposition() -> tuple[bytes, str]:
    if MULTIPROC:
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # prometheus-client's
    else:
        registry = REGISTRY
    return generate_latest(registry), CONTENT_TYPE_LATEST


def set_prequential(model: str, kind: str, overall: dict[str, Any]) -> None:
    """The prequential gauges of ``model`` from its overall Scores JSON."""
    metric = "rmse" if kind == "regression" else "log_loss"
    PREQUENTIAL_ERROR.labels(model, metric).set(overall[metric])
    PREQUENTIAL_BASELINE_ERROR.labels(model, metric).set(overall["baseline_" + metric])


def set_remembered(model: str, pending: int, done: int) -> None:
    """The remembered-row gauges of ``model``."""
    REMEMBERED_ROWS.labels(model, "pending").set(pending)
    REMEMBERED_ROWS.labels(model, "done").set(done)


def forget_model(model: str) -> None:
    """Drop the per-model gauges of a deleted model."""
    forget_served(model)
    for gauge, labels in (
        (REMEMBERED_ROWS, [(model, "pending"), (model, "done")]),
        (PREQUENTIAL_ERROR, [(model, "rmse"), (model, "log_loss")]),
        (PREQUENTIAL_BASELINE_ERROR, [(model, "rmse"), (model, "log_loss")]),
        (BACKWARD_TRANSFER, [(model,)]),
    ):
        for values in labels:
            try:
                gauge.remove(*values)
            except KeyError:
                pass
