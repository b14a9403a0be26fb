"""The paper's remaining experiments: significance tests, task orders, CMTL in Table 2,
sensitivity and runtime."""
import itertools
import json

import numpy as np
import pytest
from scipy import stats

from benchmarks import paper as bench
from benchmarks import paper_report, runtime, sensitivity
from benchmarks.datasets import make_disjoint

TINY = {"STL": {"mu": [1e-1]}, "ELLA": {"n_components": [2]}, "FCL3": {"gamma": [0.5]},
        "CL3": {"gamma": [0.5]}, "FCL3-woDecoder": {"gamma": [0.5]},
        "CMTL": {"rho1": [0.1, 1.0], "rho2": [0.1], "k": [2]}}


def _small(name, data_dir=None, random_state=0):
    """A small Disjoint (3 clusters x 3 tasks, d = 12) in place of every data set: fast tests."""
    return make_disjoint(tasks_per_cluster=3, n_features=12, n_shared=6, n_samples=30, random_state=random_state)


@pytest.fixture
def small_data(monkeypatch):
    for module in (bench, sensitivity, runtime):
        monkeypatch.setattr(module, "load_dataset", _small)


def _wilcoxon_exact(d):
    """Two-sided exact signed-rank p-value by enumerating every sign pattern (no ties)."""
    r = stats.rankdata(np.abs(d))
    w = r[d > 0].sum()
    null = [sum(r[i] for i in range(len(d)) if s[i]) for s in itertools.product([0, 1], repeat=len(d))]
    mean = r.sum() / 2
    return np.mean([abs(x - mean) >= abs(w - mean) - 1e-9 for x in null])


def test_paired_tests_match_independent_computations():
    a = np.array([10.0, 10.2, 9.9, 10.1, 10.05, 9.95, 10.3])
    b = a + np.array([0.3, 0.1, -0.05, 0.2, 0.15, 0.4, 0.12])
    out = bench.paired_tests(list(a), list(b), "regression")
    d = b - a
    t = d.mean() / (d.std(ddof=1) / np.sqrt(len(d)))
    assert out["t_p"] == pytest.approx(2 * stats.t.sf(abs(t), len(d) - 1), rel=1e-9)
    assert out["wilcoxon_p"] == pytest.approx(_wilcoxon_exact(d), rel=1e-9)
    assert out["wins"] == 6 and out["n"] == 7 and out["mean_difference"] == pytest.approx(d.mean())
    # classification: higher is better, so the reference wins where the other is lower
    assert bench.paired_tests(list(a), list(b), "classification")["wins"] == 1
    none = bench.paired_tests([1.0, 2.0], [1.0, 2.0], "regression")
    assert none["t_p"] is None and none["wilcoxon_p"] is None


def test_adversarial_order_presents_the_least_similar_task_next():
    ds = bench.load_dataset("disjoint", random_state=0)
    train, _, _, _ = bench.run_splits(ds, 0, 0, 1)
    order = bench.adversarial_order(ds, train, np.random.default_rng(0), 0.1)
    assert sorted(order) == sorted(ds.task_ids)
    V = dict(zip(ds.task_ids, bench.stl_directions(ds, train, 0.1)))
    for i in range(1, len(order)):
        centre = np.mean([V[t] for t in order[:i]], axis=0)
        centre /= np.linalg.norm(centre)
        sims = {t: float(V[t] @ centre) for t in order[i:]}
        assert sims[order[i]] == pytest.approx(min(sims.values()))
    # Disjoint's clusters are nearly orthogonal: the first three tasks come from three clusters
    cl = dict(zip(ds.task_ids, ds.clusters))
    assert len({cl[t] for t in order[:3]}) == 3


def test_cmtl_tuned_beside_the_online_learners_with_p_values(monkeypatch, tmp_path, small_data):
    monkeypatch.setattr(bench, "GRIDS", TINY)
    out = tmp_path / "r.json"
    rc = bench.main(["--dataset", "disjoint", "--runs", "2", "--val-splits", "1", "--no-curves", "--quiet",
                     "--models", "STL,FCL3-Rand,CMTL", "--orders", "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert list(data["models"]) == ["STL", "FCL3-Rand", "CMTL", "FCL3-Adversarial", "ELLA-OneByOne",
                                    "ELLA-Adversarial"]
    c = data["models"]["CMTL"]
    assert all(set(p) == {"rho1", "rho2", "k"} for p in c["params"])  # no paper rule, no mu
    assert c["update_ms_median"] is None and all(s > 0 for s in c["learn_s_per_run"])
    assert 0.4 < c["rmse_standardized"]["mean"] < 1.0
    sig = data["significance"]
    assert sig["reference"] == "FCL3-Rand" and "FCL3-Rand" not in sig["tests"]
    ref = np.array(data["models"]["FCL3-Rand"]["per_run"])
    for m, t in sig["tests"].items():
        assert t["mean_difference"] == pytest.approx(np.mean(np.array(data["models"][m]["per_run"]) - ref))
    assert set(data["order_tests"]) == {"FCL3-Adversarial vs FCL3-Rand"}  # ELLA-Rand not run
    # the order variants take their -Rand model's tuning (ELLA-Rand tuned though not reported)
    assert data["models"]["FCL3-Adversarial"]["params"] == data["models"]["FCL3-Rand"]["params"]
    assert all(len(u) == 9 for u in data["models"]["STL"]["update_ms_per_run"])
    # the report reads the same JSON back: tables, the order figure
    rc = paper_report.main([str(out), str(out), "--quiet", "--json", str(tmp_path / "t.json"),
                            "--order-plot", str(tmp_path / "o.png")])
    assert rc == 0 and (tmp_path / "o.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    tables = json.loads((tmp_path / "t.json").read_text())
    assert len(tables) == 2 and tables[0]["significance"] == sig
    assert tables[0]["models"]["CMTL"] == {"mean": c["mean"], "se": c["se"]}
    assert "| CMTL |" in paper_report.table2([data]) and "| CMTL |" in paper_report.p_values([data])


def test_sensitivity_scores_are_the_models_test_errors(tmp_path, small_data):
    grids = {"lambda2": [0.1, 1.0], "gamma": [0.5], "mu": [0.1], "n_components": [5]}
    res = sensitivity.run_sensitivity("disjoint", runs=1, grids=grids, progress=False)
    d = res["defaults"]
    assert d == {"lambda2": 1.0, "gamma": 0.5, "mu": 0.1, "n_components": 5}
    ds = _small("disjoint")
    train, test, _, order = bench.run_splits(ds, 0, 0, 1)
    for rule, extra in sensitivity.RULES.items():
        model = bench.FCL3(kind="regression", random_state=0, lambda2=0.1, **extra)
        bench.run_stream(model, train, order, "regression")
        (row,) = [r for r in res["rules"][rule]["curves"]["lambda2"] if r["value"] == 0.1]
        assert row["per_run"] == [pytest.approx(bench.mean_score(model, "regression", test))]
        default = res["rules"][rule]["default"]["per_run"]
        assert all(r["per_run"] == default for p in ("gamma", "mu", "n_components")
                   for r in res["rules"][rule]["curves"][p])
    path = sensitivity.write_plot(res, str(tmp_path / "s.png"))
    assert open(path, "rb").read()[:8] == b"\x89PNG\r\n\x1a\n"


def test_runtime_times_every_model_and_plots(tmp_path, small_data):
    res = runtime.run_runtime("disjoint", ["STL", "CMTL"], {"CMTL": {"rho1": 1.0, "rho2": 0.1, "k": 2}},
                              repeats=2, progress=False)
    assert len(res["models"]["STL"]["total_s"]) == 2 and res["models"]["STL"]["total_s_median"] > 0
    assert len(res["models"]["STL"]["update_ms_median_by_tasks_learned"]) == 9
    assert "update_ms_median_by_tasks_learned" not in res["models"]["CMTL"]
    assert res["models"]["CMTL"]["params"] == {"rho1": 1.0, "rho2": 0.1, "k": 2}
    for p in runtime.write_plots([res, res], str(tmp_path)):
        assert open(p, "rb").read()[:8] == b"\x89PNG\r\n\x1a\n"
