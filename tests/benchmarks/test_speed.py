import json
import os

from benchmarks import speed

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
