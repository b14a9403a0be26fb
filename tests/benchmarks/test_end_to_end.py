"""Short real runs of the service benchmark and the load test (uvicorn on PostgreSQL + Redis).

Skipped, with the reason, when PostgreSQL or Redis is absent, unless ``CI`` or
``FCL3_REQUIRE_SERVICES=1`` is set (then their absence is a failure)."""
import json
import os

import pytest

pytestmark = pytest.mark.slow

PG_ADMIN = os.environ.get("FCL3_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("FCL3_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="module")
def backends():
    import psycopg
    import redis

    try:
        with psycopg.connect(PG_ADMIN, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:  # noqa: BLE001
        msg = f"PostgreSQL ({PG_ADMIN}) or Redis ({REDIS_URL}) not available: {str(exc).strip()[:200]}"
        if os.environ.get("CI") or os.environ.get("FCL3_REQUIRE_SERVICES") == "1":
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    return ["--pg-admin-url", PG_ADMIN, "--redis-url", REDIS_URL]


def databases(prefix: str) -> set[str]:
    """The databases named ``prefix*`` (other test sessions make and drop their own meanwhile)."""
    import psycopg

    with psycopg.connect(PG_ADMIN) as conn:
        return {r[0] for r in conn.execute("SELECT datname FROM pg_database") if r[0].startswith(prefix)}


def test_service_benchmark_short_run(backends, tmp_path, capsys):
    from benchmarks import service

    out = tmp_path / "bench.json"
    res = service.main(["--postgres", "--updates", "12", "--tasks", "3", "--rows", "5", "--d", "4", "--seconds", "0.3",
                        "--rounds", "1", "--update-seconds", "0.5", "--update-rounds", "1", "--concurrency", "2",
                        "--estimator", "STL", "--json", str(out), "--quiet", *backends])
    assert json.loads(out.read_text()) == res
    assert res["command"].startswith("python -m benchmarks.service ")
    assert res["setup"]["updates"] == 12 and res["setup"]["estimator"] == "STL"
    (run,) = res["runs"].values()
    assert run["setup"]["database"] == "postgresql" and run["setup"]["uvicorn_workers"] == 2
    u = run["update_ms"]
    assert 0 < u["bare_engine_p50"] <= u["bare_engine_p99"] and 0 < u["http_p50"] <= u["http_p99"]
    split = u["server_split_mean"]
    assert split["updates"] == 12 and split["service_update_ms"] > 0 and split["lock_wait_ms"] >= 0
    assert run["non_200"] == 0 and all(v["median"] > 0 for v in run["requests_per_s"].values())
    assert run["ratios"]["get_predict_vs_bare_route"]["median"] > 0
    ups = run["updates_per_s"]
    assert ups["one_model"]["median"] > 0 and ups["two_models"]["median"] > 0
    (rnd,) = ups["rounds"]
    for case in ("one_model", "two_models"):  # each client on its own worker
        on = rnd[case]["clients_on_workers"]
        assert len(set(on)) == 2 and None not in on, rnd[case]
    for case in run["group_commit"].values():  # clients split evenly over the two workers
        c = case["clients"]
        assert case["clients_per_worker"] == [c - c // 2, c // 2], case
    assert "GET /predict ÷ bare route" in capsys.readouterr().out
    assert run["setup"]["throwaway_database"] not in databases("fcl3_bench_")  # dropped


def test_commit_statements_postgres(backends):
    from benchmarks import commit_statements

    res = commit_statements.main(["--postgres", "--batches", "8", "--quiet", *backends])
    assert res["database"] == "postgresql" and res["updates"] == 8
    kinds = res["statements"]
    assert kinds["COMMIT"]["count"] == 8 and kinds["INSERT INTO batches"]["count"] == 8
    assert any(k.startswith("SELECT pg_notify") for k in kinds)  # the other processes' version watch
    assert res["throwaway_database"] not in databases("fcl3_statements_")  # dropped


def test_loadtest_short_run(backends, tmp_path):
    from benchmarks import loadtest

    out, plot = tmp_path / "load.json", tmp_path / "rss.png"
    res = loadtest.main(["--seconds", "3", "--topologies", "1x1", "--clients", "2", "--tasks", "2", "--rows", "4",
                         "--d", "3", "--update-fraction", "0.3", "--rss-every", "0.5", "--estimator", "STL",
                         "--json", str(out), "--plot", str(plot), "--quiet", *backends])
    (run,) = res["runs"]
    assert run["consistency"]["zero_lost_updates"], run["consistency"]
    assert run["consistency"]["acknowledged_updates"] > 2 and run["predictions_per_s"] > 0
    assert run["metrics_exposed"]
    (rss,) = run["worker_rss"].values()
    assert rss["samples"] >= 2 and rss["max_mb"] > 0
    assert json.loads(out.read_text())["runs"][0]["consistency"] == run["consistency"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert run["throwaway_database"] not in databases("fcl3_load_")  # dropped


def test_models_benchmark_short_run(backends, tmp_path):
    from benchmarks import models

    out = tmp_path / "models.json"
    assert models.main(["--small", "6", "--large", "0", "--predictions", "20", "--cache-size", "4",
                        "--json", str(out), "--quiet", *backends]) == 0
    res = json.loads(out.read_text())
    small = res["groups"]["small"]
    assert small["models"] == 6 and res["cache_size"] == 4
    assert 0 < small["predict_ms"]["p50"] <= small["predict_ms"]["p99"] and small["predict_per_s"] > 0
    assert small["worker_rss_mb"]["all_loaded"] > 0
    assert res["throwaway_database"] not in databases("fcl3_models_")  # dropped


def test_evaluation_benchmark_short_run(tmp_path, capsys):
    """Both models see the same stream; only the evaluated one rescores sets and gets matrix
    rows (the embedded default: no server needed)."""
    from benchmarks import evaluation

    out = tmp_path / "evaluation.json"
    res = evaluation.main(["--embedded", "--tasks", "6", "--updates", "8", "--eval-rows", "5", "--rescore", "2",
                           "--json", str(out), "--quiet"])
    assert json.loads(out.read_text())["results"] == json.loads(json.dumps(res["results"]))
    evaluated, control = res["results"]["evaluated"], res["results"]["control"]
    for phase, n in (("new", 6), ("known", 8)):
        assert evaluated[phase]["update_total"]["n"] == control[phase]["update_total"]["n"] == n
        assert control[phase]["rescored_median"] == 0 and control[phase]["rescore_after_commit"]["median_ms"] == 0
    assert evaluated["known"]["rescored_median"] == 3  # its own task's set and --rescore others
    assert res["matrix_rows_background"]["n"] == 6 and res["post_evaluation_rows"]["n"] == 6
    capsys.readouterr()
