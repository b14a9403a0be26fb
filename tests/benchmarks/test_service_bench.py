"""The service benchmark's parts that need no PostgreSQL: the bare route, the split of an
update's time read from /metrics, a short run on the embedded default; the SQL statements of
a sequential stream timed on the embedded default (``benchmarks.commit_statements``)."""
from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from benchmarks import service
from benchmarks.bare_app import app as bare_app


def test_bare_route_is_a_plain_fastapi_app():
    assert [m for m in bare_app.user_middleware] == []
    with TestClient(bare_app) as c:
        r = c.get("/")
        assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_update_split_from_two_scrapes():
    before = {"fcl3_update_duration_seconds_count": 10, "fcl3_update_duration_seconds_sum": 1.0,
              "fcl3_update_engine_seconds_sum": 0.2, 'fcl3_lock_wait_seconds_sum{outcome="acquired"}': 0.01}
    after = {"fcl3_update_duration_seconds_count": 20, "fcl3_update_duration_seconds_sum": 1.5,
             "fcl3_update_engine_seconds_sum": 0.3, 'fcl3_lock_wait_seconds_sum{outcome="acquired"}': 0.03}
    s = service.update_split(before, after, 10)
    assert s["updates"] == 10 and s["service_update_ms"] == 50.0 and s["engine_ms"] == 10.0
    assert s["outside_engine_ms"] == 40.0 and s["lock_wait_ms"] == 2.0 and s["note"] is None
    missing = {k: v for k, v in after.items() if "engine" not in k}
    s = service.update_split(before, missing, 10)
    assert s["engine_ms"] is None and s["outside_engine_ms"] is None and "not exposed" in s["note"]


def test_embedded_short_run(tmp_path, capsys):
    out = tmp_path / "bench.json"
    res = service.main(["--embedded", "--updates", "8", "--tasks", "2", "--rows", "5", "--d", "3", "--seconds", "0.3",
                        "--rounds", "2", "--concurrency", "2", "--estimator", "STL", "--json", str(out), "--quiet",
                        "--group-seconds", "0.3", "--group-clients", "1,2", "--group-warm", "9", "--school-batches", "25",
                        "--bytes-tasks", "20,60"])
    assert json.loads(out.read_text()) == res
    (run,) = res["runs"].values()
    assert run["setup"] == {**run["setup"], "database": "sqlite", "lock": "file", "uvicorn_workers": 1}
    assert run["non_200"] == 0 and "updates_per_s" not in run
    for name in ("bare_route", "healthz", "get_predict_1_row", "post_predict_1_row", "post_predict_100_rows"):
        assert len(run["requests_per_s"][name]["rounds"]) == 2 and run["requests_per_s"][name]["min"] > 0
        assert run["server_cpu_us_per_request"][name]["median"] > 0
    r = run["ratios"]
    assert r["get_predict_vs_bare_route"]["min"] <= r["get_predict_vs_bare_route"]["median"]
    assert r["post_100_rows_vs_1_row_time"]["median"] > 0
    split = run["update_ms"]["server_split_mean"]
    assert split["updates"] == 8 and split["engine_ms"] is not None and split["outside_engine_ms"] >= 0
    # group commit: every case committed something, latencies reported, beside the engine alone
    assert set(run["group_commit"]) == {"1x1", "2x1", "1x2", "2x2"}
    # each model learned the 9 warm-up batches before its first case's clock started
    assert run["group_commit_warm_batches"] == 9
    assert run["group_commit"]["1x1"]["versions_at_start"] == {"gc-1": 9}
    assert run["group_commit"]["2x2"]["versions_at_start"]["gc-2"] == 9
    for case in run["group_commit"].values():
        assert case["committed"] > 0 and case["not_committed"] == 0 and case["p99_ms"] >= case["p50_ms"] > 0
        assert 1 <= case["mean_group"] <= case["clients"]  # batches per group commit, from /metrics
        assert case["clients_per_worker"] == [case["clients"]]  # one worker serves them all
    assert run["engine_one_row_ceiling"]["updates_per_s"] > 0
    school = run["school_sequential"]
    assert school["batches"] == 25 and school["ratio_http_vs_engine_p50"] > 0  # two turns of SCHOOL_CHUNK
    sizes = res["bytes_per_commit"]["sqlite"]
    assert set(sizes) == {"20", "60"} and all(v["known_task_commit_bytes"] > 0 for v in sizes.values())
    table = capsys.readouterr().out
    assert "GET /predict ÷ bare route" in table and "embedded (1 worker)" in table
    assert "group commit 2 clients x 2 models" in table and "bytes written per commit" in table


def test_commit_statements_short_run(tmp_path, capsys):
    from benchmarks import commit_statements

    out = tmp_path / "statements.json"
    res = commit_statements.main(["--batches", "12", "--json", str(out)])
    assert json.loads(out.read_text()) == res
    assert res["database"] == "sqlite" and res["updates"] == 12 and res["throwaway_database"] is None
    assert res["command"] == f"python -m benchmarks.commit_statements --batches 12 --json {out}"
    kinds = res["statements"]
    # every update rewrites the model row and commits once; every batch gets its row
    model_row = next(k for k in kinds if k.startswith("UPDATE models SET version"))
    assert kinds[model_row]["count"] == 12 and kinds["COMMIT"]["count"] == 12
    assert kinds["INSERT INTO batches"]["count"] == 12
    assert res["sql_per_update_ms"] == pytest.approx(sum(v["per_update_ms"] for v in kinds.values()), abs=0.01)
    assert 0 < res["engine_p50_ms"] and 0 < res["request_p50_ms"]
    assert "UPDATE models SET version" in capsys.readouterr().out


def test_statement_kind():
    from benchmarks.commit_statements import statement_kind

    assert statement_kind("UPDATE tasks SET version=?, meta=? WHERE tasks.model_name = ?") == \
        "UPDATE tasks SET version, meta"
    assert statement_kind("INSERT INTO batches (model_name, version) VALUES (?, ?)") == "INSERT INTO batches"
    assert statement_kind("SELECT models.version FROM models WHERE x") == "SELECT models.version FROM models"
