import json
import os

import numpy as np

from benchmarks import paper as bench

TINY = {"STL": {"mu": [1e-2, 1e-1]}, "ELLA": {"n_components": [2, 3]},
        "FCL3": {"gamma": [0.5]}, "CL3": {"gamma": [0.5]}, "FCL3-woDecoder": {"gamma": [0.5]}}


def test_cli_disjoint_writes_json_and_plots(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "GRIDS", TINY)
    out = tmp_path / "r.json"
    models = ["STL", "ELLA-Rand", "ELLA-Info", "FCL3-Rand", "FCL3-OneByOne"]
    rc = bench.main(["--dataset", "disjoint", "--runs", "2", "--json", str(out), "--plots", str(tmp_path / "p"),
                     "--models", ",".join(models), "--quiet"])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["dataset"] == "disjoint" and data["metric"] == "rmse" and data["runs"] == 2
    assert list(data["models"]) == models
    for name, e in data["models"].items():
        assert np.isfinite(e["mean"]) and np.isfinite(e["se"]) and len(e["per_run"]) == 2
        assert e["update_ms_median"] > 0 and e["update_ms_max"] >= e["update_ms_median"]
        assert 0 < e["rmse_standardized"]["mean"] < 2
        if name.startswith("FCL3"):
            assert len(e["n_representatives"]["per_run"]) == 2 and len(e["representatives"]) == 2
    pngs = sorted(os.listdir(tmp_path / "p"))
    assert "disjoint_learned_tasks.png" in pngs and "disjoint_correlation.png" in pngs
    assert "disjoint_FCL3-Rand_assignment.png" in pngs
    for p in pngs:
        assert (tmp_path / "p" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_same_seed_same_results(monkeypatch):
    monkeypatch.setattr(bench, "GRIDS", TINY)
    a = bench.run_benchmark("disjoint", runs=1, seed=5, models=["STL", "ELLA-Rand"], progress=False)
    b = bench.run_benchmark("disjoint", runs=1, seed=5, models=["STL", "ELLA-Rand"], progress=False)
    for m in ("STL", "ELLA-Rand"):
        assert a["models"][m]["per_run"] == b["models"][m]["per_run"]
        assert a["models"][m]["params"] == b["models"][m]["params"]


def test_tuning_never_sees_test_half(monkeypatch):
    """The grid choice must not change when only the test halves change."""
    monkeypatch.setattr(bench, "GRIDS", TINY)
    seen = []
    orig = bench.mean_score

    def spy(model, kind, sets, ids=None):
        seen.append(id(sets))
        return orig(model, kind, sets, ids)

    ds = bench.load_dataset("disjoint", random_state=0)
    rng = np.random.default_rng([0, 0])
    train, test = bench.split_tasks(ds, rng)
    folds = [bench.split_validation(train, rng) for _ in range(2)]
    for fit, val in folds:
        for (Xt, _), (Xf, _), (Xv, _) in zip(train.values(), fit.values(), val.values()):
            assert len(Xf) + len(Xv) == len(Xt)
            rows = {r.tobytes() for r in Xt}
            assert all(r.tobytes() in rows for r in Xf) and all(r.tobytes() in rows for r in Xv)
    assert not all(np.array_equal(folds[0][1][t][0], folds[1][1][t][0]) for t in train)  # distinct splits
    monkeypatch.setattr(bench, "mean_score", spy)
    bench.tune("ELLA", "rand", "regression", folds, list(train), {"mu": 1e-2}, 0, TINY["ELLA"])
    assert set(seen) == {id(folds[0][1]), id(folds[1][1])}  # only validation parts are scored


def test_missing_data_dir_is_a_clear_error(tmp_path, capsys):
    rc = bench.main(["--dataset", "school", "--runs", "1", "--data-dir", str(tmp_path), "--quiet"])
    assert rc == 2
    assert "school/school.npz" in capsys.readouterr().err


def test_onebyone_order_follows_clusters():
    ds = bench.load_dataset("disjoint", random_state=0)
    rng = np.random.default_rng(0)
    train, _ = bench.split_tasks(ds, rng)
    order = bench.onebyone_order(ds, train, rng, 1e-2)
    cl = dict(zip(ds.task_ids, ds.clusters))
    labels = [cl[t] for t in order]
    assert sorted(order) == sorted(ds.task_ids)
    assert sum(a != b for a, b in zip(labels, labels[1:])) == 2  # three contiguous blocks
    ds.clusters = None  # k-means path on STL vectors
    order2 = bench.onebyone_order(ds, train, np.random.default_rng(0), 1e-2)
    assert sorted(order2) == sorted(ds.task_ids)


def test_no_tune_uses_the_classes_own_defaults(monkeypatch):
    """--no-tune builds every model with no parameters (its class's defaults): nothing tuned."""
    built = []
    orig = bench.build

    def spy(family, kind, params, seed):
        built.append((family, dict(params)))
        return orig(family, kind, params, seed)

    monkeypatch.setattr(bench, "build", spy)
    out = bench.run_benchmark("disjoint", runs=1, seed=0, models=["STL", "ELLA-Rand", "FCL3-Rand"],
                              tune_params=False, progress=False)
    assert sorted(f for f, _ in built) == ["ELLA", "FCL3", "STL"]  # one final fit each, no grid
    assert all(p == {} for _, p in built)
    assert all(e["params"] == [{}] for e in out["models"].values())


def test_grid_points_modify_the_defaults(monkeypatch):
    """A tuned model gets the grid point (plus STL's mu when its grid has none) and the paper's
    prediction rule, nothing else."""
    grids = {**TINY, "ELLA": {"n_components": [2, 3]}}
    monkeypatch.setattr(bench, "GRIDS", grids)
    out = bench.run_benchmark("disjoint", runs=1, seed=0, models=["ELLA-Rand"], progress=False)
    (params,) = out["models"]["ELLA-Rand"]["params"]
    assert set(params) == {"mu", "n_components", "task_models"} and params["mu"] in TINY["STL"]["mu"]
    assert params["task_models"] == "paper"


def test_unknown_model_is_a_clear_error(capsys):
    assert bench.main(["--dataset", "disjoint", "--runs", "1", "--models", "STL,Nope", "--quiet"]) == 2
    assert "Nope" in capsys.readouterr().err
