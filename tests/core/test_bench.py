import json
import os

import numpy as np
import pytest

from core import bench

TINY = {"STL": {"mu": [1e-2, 1e-1]}, "ELLA": {"n_components": [2, 3]},
        "FCL3": {"gamma": [0.5]}, "CL3": {"gamma": [0.5]}, "FCL3-woDecoder": {"gamma": [0.5]}}


def test_cli_disjoint_writes_json_and_plots(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "GRIDS", TINY)
    out = tmp_path / "r.json"
    models = ["STL", "ELLA-Rand", "ELLA-Info"] + (["FCL3-Rand", "FCL3-OneByOne"] if bench.FCL3 is not None else [])
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
    if bench.FCL3 is not None:
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


def test_speed_mode_small(tmp_path):
    speed = bench.speed_benchmark(configs=[(6, 2, 8)], n_samples=20, models=["ELLA-Rand"], progress=False)
    e = speed["configs"][0]["models"]["ELLA-Rand"]
    assert len(e["update_ms"]) == 8 and e["update_ms_median"] > 0
    assert os.path.exists(bench.plot_speed(speed, str(tmp_path)))


def test_speed_mode_times_a_real_data_stream(tmp_path):
    from tests.core.test_data import _write_npz

    _write_npz(tmp_path / "school" / "school.npz", kind="regression", n_tasks=4, d=5)
    speed = bench.speed_benchmark(configs=[], models=["FCL3-Rand"], progress=False, datasets=("school",),
                                  data_dir=str(tmp_path), dataset_components=(2,))
    (cfg,) = speed["configs"]
    assert cfg["data"] == "school" and cfg["n_features"] == 5 and cfg["n_components"] == 2
    e = cfg["models"]["FCL3-Rand"]
    assert len(e["update_ms"]) == 4 and e["update_cpu_ms_median"] >= 0 and 1 <= e["n_active_components"] <= 2
    assert "school" in bench.format_speed(speed)


def test_speed_mode_names_a_missing_data_set_before_timing_anything(tmp_path, capsys):
    code = bench.main(["--speed", "--speed-data", "school", "--data-dir", str(tmp_path), "--quiet",
                       "--models", "FCL3-Rand"])
    assert code == 2
    err = capsys.readouterr().err
    assert "school" in err and str(tmp_path) in err
