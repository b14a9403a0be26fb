import json
import os

import numpy as np
import pytest

from benchmarks import speed
from core.fcl3 import FCL3
from core.stl import STL

from .test_datasets import _write_npz


def test_speed_mode_small(tmp_path):
    result = speed.speed_benchmark(configs=[(6, 2, 8)], n_samples=20, models=["ELLA-Rand"], progress=False)
    e = result["configs"][0]["models"]["ELLA-Rand"]
    assert len(e["update_ms"]) == 8 and e["update_ms_median"] > 0
    assert os.path.exists(speed.plot_speed(result, str(tmp_path)))


def test_speed_mode_times_a_real_data_stream(tmp_path):
    _write_npz(tmp_path / "school" / "school.npz", kind="regression", n_tasks=4, d=5)
    result = speed.speed_benchmark(configs=[], models=["FCL3-Rand"], progress=False, datasets=("school",),
                                  data_dir=str(tmp_path), dataset_components=(2,))
    (cfg,) = result["configs"]
    assert cfg["data"] == "school" and cfg["n_features"] == 5 and cfg["n_components"] == 2
    e = cfg["models"]["FCL3-Rand"]
    assert len(e["update_ms"]) == 4 and e["update_cpu_ms_median"] >= 0 and 1 <= e["n_active_components"] <= 2
    assert "school" in speed.format_speed(result)


def test_speed_mode_names_a_missing_data_set_before_timing_anything(tmp_path, capsys):
    code = speed.main(["--speed-data", "school", "--data-dir", str(tmp_path), "--quiet", "--models", "FCL3-Rand"])
    assert code == 2
    err = capsys.readouterr().err
    assert "school" in err and str(tmp_path) in err


def test_cli_writes_json_and_plot(tmp_path, monkeypatch):
    monkeypatch.setattr(speed, "SPEED_CONFIGS", [(5, 2, 6, 2)])
    _write_npz(tmp_path / "data" / "school" / "school.npz", kind="regression", n_tasks=3, d=4)
    out = tmp_path / "s.json"
    code = speed.main(["--json", str(out), "--plots", str(tmp_path / "p"), "--datasets", "school",
                       "--data-dir", str(tmp_path / "data"), "--models", "ELLA-Rand", "--quiet"])
    assert code == 0
    data = json.loads(out.read_text())["speed"]
    assert [c["data"] for c in data["configs"]] == ["synthetic", "school", "school"]
    assert [c["n_components"] for c in data["configs"]] == [2, 5, 20]
    assert all(list(c["models"]) == ["ELLA-Rand"] for c in data["configs"])
    assert (tmp_path / "p" / "speed.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unknown_or_basis_free_model_is_refused(capsys):
    assert speed.main(["--models", "Nope", "--quiet"]) == 2
    assert "Nope" in capsys.readouterr().err
    assert speed.main(["--models", "STL", "--quiet"]) == 2
    assert "STL" in capsys.readouterr().err


# ----------------------------------------------------------------------------- cost against the number of tasks
def _point(n, value, reached=True, **extra):
    point = {"n_tasks": n, "reached": reached}
    if reached:
        point.update({k: value for k in speed.RATIO_KEYS}, **extra)
    return point


def test_ratio_is_the_largest_reached_over_the_smallest():
    ratios = speed.cost_ratios([_point(100, 2.0), _point(1000, 3.0), _point(10000, 5.0), _point(100000, 0, False)])
    assert ratios["between"] == [100, 10000]
    assert ratios["new_update_ms"] == 2.5 and ratios["first_predict_ms_cpu"] == 2.5
    assert speed.cost_ratios([_point(100, 2.0), _point(1000, 0, False)])["new_update_ms"] is None


def _result(points, model=speed.TARGET_MODEL, tasks=(100, 100000)):
    return {"settings": {"tasks": list(tasks)},
            "models": {model: {"ratios": speed.cost_ratios(points)}}}


def test_target_needs_every_cost_within_the_ratio_at_the_largest_number():
    flat = [_point(100, 2.0), _point(100000, 2.9)]
    assert speed.target_verdict(_result(flat))["met"] is True
    steep = [_point(100, 2.0), _point(100000, 2.0)]
    steep[1]["first_predict_ms"] = 3.2
    verdict = speed.target_verdict(_result(steep))
    assert verdict["met"] is False and verdict["met_cpu"] is True and verdict["ratios"]["first_predict_ms"] == 1.6
    stopped = [_point(100, 2.0), _point(1000, 2.0), _point(100000, 0, False)]
    assert speed.target_verdict(_result(stopped, tasks=(100, 1000, 100000)))["met"] is None
    assert speed.target_verdict(_result(flat, model="STL"))["met"] is None


def test_tasks_are_reproducible_clustered_and_labelled():
    tasks = speed.ClusteredTasks("classification", n_features=4, n_rows=12, n_environments=3, seed=1)
    X, y = tasks.batch(7, batch=1)
    X2, y2 = speed.ClusteredTasks("classification", 4, 12, 3, seed=1).batch(7, batch=1)
    assert X.shape == (12, 4) and np.array_equal(X, X2) and np.array_equal(y, y2)
    assert set(np.unique(y)) <= {0.0, 1.0}
    assert not np.array_equal(tasks.batch(7, batch=0)[0], X)
    with pytest.raises(ValueError, match="kind"):
        speed.ClusteredTasks("ranking")


def test_measuring_leaves_the_grown_model_as_it_was():
    tasks = speed.ClusteredTasks(n_features=4, n_rows=8)
    model = FCL3(random_state=0)
    for t in range(6):
        model.learn(f"t{t}", *tasks.batch(t))
    before = model.get_state()
    costs = speed.measure_costs(model, tasks, 6, repeats=2, seed=0)
    after = model.get_state()
    assert after.meta["task_order"] == before.meta["task_order"] == [f"t{t}" for t in range(6)]
    for k, a in before.arrays.items():
        assert np.array_equal(a, after.arrays[k], equal_nan=True)
    for tid, ts in before.tasks.items():
        for k, a in ts["arrays"].items():
            assert np.array_equal(a, after.tasks[tid]["arrays"][k], equal_nan=True)
    assert all(len(costs["samples"][c]) == 2 and costs[c] > 0 for c in speed.COSTS)


def test_state_bytes_add_up_the_exported_state():
    tasks = speed.ClusteredTasks(n_features=3, n_rows=5)
    model = STL()
    for t in range(4):
        model.learn(f"t{t}", *tasks.batch(t))
    state = model.get_state()
    sizes = speed.state_bytes(model)
    assert sizes["state_bytes_global"] == sum(a.nbytes for a in state.arrays.values())
    assert sizes["state_bytes_tasks"] == sum(sum(np.asarray(a).nbytes for a in ts["arrays"].values())
                                             + len(json.dumps(ts["meta"], default=str)) for ts in state.tasks.values())


def test_growth_stops_at_max_seconds_and_says_where(tmp_path):
    result = speed.scaling_benchmark((1, 10 ** 6), models=["STL"], n_features=3, n_rows=5, repeats=1,
                                     max_seconds=0.3, progress=False)
    e = result["models"]["STL"]
    assert 1 <= e["stopped_at"] < 10 ** 6
    assert [c["n_tasks"] for c in e["checkpoints"]] == [1, 10 ** 6]
    assert e["checkpoints"][0]["reached"] and not e["checkpoints"][-1]["reached"]
    assert result["target"]["met"] is None
    assert "growth stopped at" in speed.format_scaling(result)
    assert e["checkpoints"][-1]["tasks_learned"] == e["stopped_at"]
    assert 0 <= e["checkpoints"][-1]["growth_cpu_ms_per_task"] and e["checkpoints"][-1]["growth_ms_per_task"] > 0
    assert os.path.exists(speed.plot_scaling(result, str(tmp_path / "stopped.png"), clock="wall"))
    with pytest.raises(ValueError, match="clock"):
        speed.plot_scaling(result, str(tmp_path / "x.png"), clock="sundial")


def test_cli_quick_writes_json_with_every_cost_and_a_figure(tmp_path):
    out, fig = tmp_path / "s.json", tmp_path / "f" / "speed.png"
    code = speed.main(["--quick", "--tasks", "3,6", "--features", "3", "--rows", "6",
                       "--json", str(out), "--figure", str(fig), "--quiet"])
    assert code == 0
    data = json.loads(out.read_text())["scaling"]
    assert data["settings"]["tasks"] == [3, 6] and data["settings"]["repeats"] == speed.QUICK["repeats"]
    assert data["settings"]["kind"] == "regression" and data["settings"]["n_features"] == 3
    assert list(data["models"]) == list(speed.SCALING_MODELS)
    for name, e in data["models"].items():
        assert e["stopped_at"] is None and [c["n_tasks"] for c in e["checkpoints"]] == [3, 6]
        for c in e["checkpoints"]:
            assert all(c[k] > 0 and c[k + "_cpu"] >= 0 for k in speed.COSTS)
            assert c["state_bytes_per_task"] * c["n_tasks"] == c["state_bytes_tasks"] > 0
            assert len(c["samples"]["new_update_ms"]) == speed.QUICK["repeats"]
        assert e["ratios"]["between"] == [3, 6]
        assert e["ratios"]["known_update_ms"] == e["checkpoints"][1]["known_update_ms"] / e["checkpoints"][0]["known_update_ms"]
    assert data["models"]["FCL3-Rand:paper"]["params"]["task_models"] == "paper"
    assert len(data["engine"]["commit"]) == 40 and data["machine"]["cores"] >= 1
    assert data["target"]["model"] == "FCL3-Rand" and data["target"]["met"] in (True, False)
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_refuses_bad_numbers_of_tasks(capsys):
    assert speed.main(["--tasks", "0,10", "--quiet"]) == 2
    assert "--tasks" in capsys.readouterr().err


# ----------------------------------------------------------------------------- cost against the number of features
def test_features_sweep_sets_every_learner_beside_the_paper_rule(tmp_path):
    result = speed.features_benchmark([3, 4], models=["FCL3-Rand", "FCL3-Rand:paper", "STL"], n_tasks=4,
                                      n_rows=6, n_environments=2, repeats=1, progress=False)
    assert [row["n_features"] for row in result["by_features"]] == [3, 4]
    for row in result["by_features"]:
        ref, fcl3 = row["models"]["FCL3-Rand:paper"], row["models"]["FCL3-Rand"]
        assert ref["over_reference"] == dict.fromkeys(speed.TARGET_COSTS, 1.0)
        for k in speed.TARGET_COSTS:
            assert fcl3["over_reference"][k] == pytest.approx(fcl3[k] / ref[k])
        assert fcl3["growth_slowest_ms"] >= fcl3["growth_median_ms"] > 0
        assert fcl3["slowest_over_median"] == pytest.approx(fcl3["growth_slowest_ms"] / fcl3["growth_median_ms"])
        assert fcl3["state_bytes_global"] > 0 and fcl3["state_bytes_per_task"] > 0
    verdict = result["target"]["by_features"]
    assert set(verdict) == {"3", "4"}
    for d, v in verdict.items():
        row = next(r for r in result["by_features"] if str(r["n_features"]) == d)
        ratios = row["models"]["FCL3-Rand"]["over_reference"]
        assert v["costs_met"] == all(r <= speed.FEATURES_TARGET_RATIO for r in ratios.values())
    text = speed.format_features(result)
    assert "x known" in text and "target at d = 4" in text
    assert open(speed.plot_features(result, str(tmp_path / "f.png")), "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_cli_features_writes_json_and_refuses_several_numbers_of_tasks(tmp_path, capsys):
    out = tmp_path / "f.json"
    assert speed.main(["--features", "3,4", "--tasks", "3", "--rows", "5", "--repeats", "1", "--quiet",
                       "--models", "FCL3-Rand:paper,ELLA-Rand:paper", "--json", str(out)]) == 0
    data = json.loads(out.read_text())["features"]
    assert data["settings"]["features"] == [3, 4] and data["settings"]["n_tasks"] == 3
    assert speed.main(["--features", "3,4", "--tasks", "3,5", "--quiet"]) == 2
    assert "one number of tasks" in capsys.readouterr().err
    assert speed.main(["--features", "3,x", "--quiet"]) == 2
