"""Metrics (``GET /metrics``) and structured logs: what is counted and logged, and where."""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from .conftest import regression_batch
from .test_security import READ, WRITE, auth, batch


def metric(c, name: str, **labels) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for fam in text_string_to_metric_families(c.get("/metrics").text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def test_metrics(make_client):
    c = make_client(MAX_ROWS_PER_BATCH=20, API_WRITE_KEYS=WRITE, API_READ_KEYS=READ)
    before = {k: metric(c, *k) for k in [("fcl3_update_duration_seconds_count",), ("fcl3_predictions_total",),
                                         ("fcl3_lock_wait_seconds_count",)]}
    refused = {s: metric(c, "fcl3_refused_requests_total", reason=s) for s in ("401", "403", "404", "413", "422")}
    w = auth(WRITE)
    assert c.post("/tasks/a/data", json=batch(0), headers=w).status_code == 200
    assert c.post("/tasks/b/data", json=batch(1), headers=w).status_code == 200
    assert c.post("/predict", json={"task_id": "a", "X": [[0, 0, 0, 0]] * 3}, headers=w).status_code == 200
    assert c.get("/model").status_code == 401
    assert c.post("/tasks/a/data", json=batch(), headers=auth(READ)).status_code == 403
    assert c.get("/tasks/zzz", headers=w).status_code == 404
    assert c.post("/tasks/a/data", json=batch(n=21), headers=w).status_code == 413
    assert c.post("/tasks/a/data", json={"X": [[1]], "y": [1]}, headers=w).status_code == 422
    assert metric(c, "fcl3_update_duration_seconds_count") == before[("fcl3_update_duration_seconds_count",)] + 2
    assert metric(c, "fcl3_lock_wait_seconds_count") >= before[("fcl3_lock_wait_seconds_count",)] + 2
    assert metric(c, "fcl3_predictions_total") == before[("fcl3_predictions_total",)] + 3
    for status in refused:
        assert metric(c, "fcl3_refused_requests_total", reason=status) == refused[status] + 1, status
    name = c.app.state.settings.MODEL_NAME  # the gauges of the models a process holds, by name
    assert metric(c, "fcl3_model_version", model=name) == 2
    assert metric(c, "fcl3_tasks", model=name) == 2
    assert metric(c, "fcl3_representatives", model=name) == c.get("/model", headers=w).json()["n_representatives"]


def test_request_and_update_log_lines_with_request_id(make_client, capsys):
    c = make_client()
    capsys.readouterr()
    r = c.post("/tasks/t/data", json=batch(), headers={"X-Request-ID": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    req = [x for x in lines if x.get("event") == "request"]
    upd = [x for x in lines if x.get("event") == "update"]
    assert len(req) == 1 and len(upd) == 1, lines
    assert req[0]["method"] == "POST" and req[0]["path"] == "/tasks/t/data" and req[0]["status"] == 200
    assert req[0]["request_id"] == "abc-123" and req[0]["duration_ms"] > 0
    assert upd[0]["request_id"] == "abc-123"
    assert upd[0]["task"] == "t" and upd[0]["version"] == 1 and upd[0]["n_samples"] == 8
    assert isinstance(upd[0]["new_representative"], bool) and upd[0]["duration_ms"] > 0
    # the engine's own time and the time outside it (lock wait, load, scoring, commit) add up to the update's
    assert 0 < upd[0]["engine_ms"] <= upd[0]["duration_ms"] and upd[0]["outside_ms"] > 0
    assert upd[0]["engine_ms"] + upd[0]["outside_ms"] == pytest.approx(
        upd[0]["duration_ms"] + upd[0]["lock_wait_ms"], abs=0.05)
    # unsafe or too long ids are replaced by a generated one
    for bad in ("a b", "x" * 65, "<script>", "a/../b", "é".encode()):
        r = c.get("/healthz", headers={"X-Request-ID": bad})
        rid = r.headers["x-request-id"]
        assert rid != bad and len(rid) == 32
    assert len({c.get("/healthz").headers["x-request-id"] for _ in range(3)}) == 3


def test_logger_is_json_and_redacted(make_client, capsys):
    make_client(API_WRITE_KEYS=WRITE)
    logging.getLogger("service.test").warning("oops %s", WRITE)
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["level"] == "WARNING" and WRITE not in line["message"] and "***" in line["message"]


def test_gauges_follow_a_version_another_worker_wrote(make_client):
    """The gauges describe the version this process serves, also after a refresh."""
    writer = make_client()
    s = writer.app.state.settings
    reader = make_client(SQLITE_PATH=s.SQLITE_PATH, MODEL_NAME=s.MODEL_NAME)
    rng = np.random.default_rng(3)
    for task in ("a", "b", "a"):
        assert writer.post(f"/tasks/{task}/data", json=dict(zip("Xy", regression_batch(rng)))).status_code == 200
    assert reader.post("/predict", json={"task_id": "a", "X": [[0.0] * 4]}).json()["version"] == 3
    name = s.MODEL_NAME
    assert metric(reader, "fcl3_model_version", model=name) == 3 and metric(reader, "fcl3_tasks", model=name) == 2


def test_storage_modules_record_no_metrics_and_write_no_logs():
    """Reads and writes only read and write: observation is service.learning.updates' job."""
    import service.store.reads
    import service.store.writes

    for module in (service.store.reads, service.store.writes):
        names = vars(module)
        assert "metrics" not in names and "logging" not in names and "log" not in names, module.__name__
