import numpy as np
import pytest

from benchmarks.datasets import ENV_VAR, load_dataset, load_real, make_disjoint


def test_disjoint_shape_seed_and_structure():
    a, b, c = make_disjoint(random_state=1), make_disjoint(random_state=1), make_disjoint(random_state=2)
    assert a.n_tasks == 30 and a.n_features == 40 and a.kind == "regression"
    assert all(X.shape == (50, 40) and y.shape == (50,) for X, y in a.tasks)
    np.testing.assert_array_equal(a.clusters, np.repeat([0, 1, 2], 10))
    for (Xa, ya), (Xb, yb) in zip(a.tasks, b.tasks):
        np.testing.assert_array_equal(Xa, Xb)
        np.testing.assert_array_equal(ya, yb)
    assert not np.allclose(a.true_weights, c.true_weights)
    W = a.true_weights
    # disjoint centres: cluster c's weights are zero on the other clusters' blocks
    support = [set(np.nonzero(np.any(W[a.clusters == k] != 0, axis=0))[0]) for k in range(3)]
    shared = set(range(20))
    for i in range(3):
        for j in range(i + 1, 3):
            assert support[i] & support[j] == shared
    C = np.corrcoef(W)
    same = a.clusters[:, None] == a.clusters[None, :]
    assert C[same & ~np.eye(30, dtype=bool)].mean() > 0.8 > 0.2 > np.abs(C[~same]).mean()


def test_disjoint_noise_level():
    clean = make_disjoint(noise=0.0, random_state=3)
    noisy = make_disjoint(noise=1.0, random_state=3)  # noise is relative to the signal std
    sig = np.std(np.concatenate([y for _, y in clean.tasks]))
    assert noisy.info["noise_std"] == pytest.approx(sig)
    for (X, y), w in zip(clean.tasks, clean.true_weights):
        np.testing.assert_allclose(X @ w, y)


def _write_npz(path, kind="regression", n_tasks=3, d=4):
    rng = np.random.default_rng(0)
    arrays = {"n_tasks": np.int64(n_tasks), "kind": np.str_(kind), "task_ids": np.arange(1, n_tasks + 1),
              "feature_names": np.array([f"f{i}" for i in range(d)])}
    for i in range(n_tasks):
        arrays[f"X_{i}"] = rng.normal(size=(5 + i, d))
        arrays[f"y_{i}"] = rng.integers(0, 2, 5 + i).astype(float)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)


def test_loader_reads_npz_from_dir_and_env(tmp_path, monkeypatch):
    _write_npz(tmp_path / "landmine" / "landmine.npz", kind="classification")
    ds = load_real("landmine", tmp_path)
    assert ds.kind == "classification" and ds.n_tasks == 3 and ds.task_ids == ["1", "2", "3"]
    assert ds.tasks[2][0].shape == (7, 4) and ds.clusters is None
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert load_dataset("landmine").n_tasks == 3


def test_loader_error_names_file_and_directory(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    with pytest.raises(FileNotFoundError) as exc:
        load_real("school", tmp_path)
    msg = str(exc.value)
    assert "school/school.npz" in msg and str(tmp_path.resolve()) in msg
    with pytest.raises(ValueError):
        load_real("smartmeter", tmp_path)
