"""The multilevel suite: data specs, split protocol, baselines on synthetic hierarchical data,
the on-disk cache, the learner runner and the command line."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from benchmarks import multilevel as ml
from benchmarks import multilevel_baselines as mb
from benchmarks import multilevel_data as md


def _dataset(kind="regression", sizes=(4, 5, 6, 9, 12), d=2, seed=0, name="toy") -> md.Dataset:
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=(n, d)) for n in sizes]
    y = [(rng.random(n) < 0.5).astype(float) if kind == "classification" else rng.normal(size=n) for n in sizes]
    return md.Dataset(name, kind, [f"x{j}" for j in range(d)], [f"g{t}" for t in range(len(sizes))], X, y,
                      0 if kind == "regression" else None)


def _hierarchical(kind, n_groups, n_rows, beta, sd_intercept, sd_slope=0.0, noise=1.0, seed=0) -> md.Dataset:
    """Rows ``y = b0_g + x'(beta + u_g) + noise`` (regression) or Bernoulli of its logit."""
    rng = np.random.default_rng(seed)
    beta = np.asarray(beta, dtype=float)
    X, y = [], []
    for _ in range(n_groups):
        A = rng.normal(size=(n_rows, len(beta)))
        slope = beta.copy()
        slope[0] += sd_slope * rng.normal()
        f = 1.0 + sd_intercept * rng.normal() + A @ slope
        if kind == "regression":
            y.append(f + noise * rng.normal(size=n_rows))
        else:
            y.append((rng.random(n_rows) < 1 / (1 + np.exp(-f))).astype(float))
        X.append(A)
    return md.Dataset(f"synthetic-{kind}", kind, [f"x{j}" for j in range(len(beta))],
                      [f"g{g}" for g in range(n_groups)], X, y, 0 if kind == "regression" else None)


# ============================================================================ specs and loading
def test_specs_name_only_the_issues_data_sets():
    assert set(md.SPECS) == {"ScotsSec", "bdf", "Gcsemv", "egsingle", "egsingle_child", "star", "star_pupil",
                             "InstEval", "InstEval_student", "VerbAgg", "ohio", "bacteria", "respiratory"}
    for spec in md.SPECS.values():
        assert spec.why and spec.kind in ("regression", "classification")
        # a random slope for regression, but where each task has two training rows
        assert (spec.slope is not None) == (spec.kind == "regression" and spec.name != "star_pupil")
        assert spec.min_rows >= 4


@pytest.mark.parametrize("name", ["egsingle_child", "star_pupil", "InstEval_student"])
def test_the_many_small_tasks_regime_has_thousands_of_tasks_of_at_most_ten_training_rows(name):
    ds = md.load(name)
    assert len(ds.task_ids) >= 1000
    assert max(len(y) for y in ds.y) // 2 <= 10  # the protocol trains on floor(n / 2) rows


def test_max_rows_keeps_a_seeded_subset_of_each_groups_rows_the_same_for_every_load():
    df = pd.DataFrame({"g": ["a"] * 9 + ["b"] * 3, "x": np.arange(12.0), "y": np.arange(12.0) * 2})
    spec = md.Spec("t", "p", "i", "regression", ("g",), "y", numeric=("x",), slope="x", min_rows=3, max_rows=5)
    ds, again = md.build(spec, df), md.build(spec, df)
    assert [len(y) for y in ds.y] == [5, 3]
    np.testing.assert_array_equal(ds.X[0], again.X[0])
    assert np.all(np.diff(ds.X[0][:, 0]) > 0) and set(ds.X[0][:, 0]) <= set(range(9))
    np.testing.assert_array_equal(ds.y[0], 2 * ds.X[0][:, 0])


@pytest.mark.parametrize("name", list(md.SPECS))
def test_every_covariate_varies_inside_some_group_and_groups_are_big_enough(name):
    ds = md.load(name)
    spec = md.SPECS[name]
    assert len(ds.task_ids) >= 40 and all(len(y) >= spec.min_rows for y in ds.y)
    within = np.zeros(len(ds.columns), dtype=bool)
    for X in ds.X:
        within |= X.std(axis=0) > 0
    assert within.all(), [c for c, w in zip(ds.columns, within) if not w]
    if ds.kind == "classification":
        assert set(np.unique(np.concatenate(ds.y))) == {0.0, 1.0}


def test_build_drops_missing_rows_small_groups_and_one_hots_with_the_first_level_dropped():
    df = pd.DataFrame({
        "g": ["a"] * 5 + ["b"] * 4 + ["c"] * 2, "h": [1] * 11,
        "x": [1.0, 2.0, np.nan, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 1.0, 2.0],
        "c": ["u", "v", "w", "u", "v", "w", "u", "v", "w", "u", "v"],
        "y": ["yes", "no", "yes", "yes", "no", "no", "yes", "no", "yes", "no", "yes"],
    })
    spec = md.Spec("t", "p", "i", "classification", ("g", "h"), "y", numeric=("x",), categorical=("c",),
                   positive="yes", min_rows=4)
    ds = md.build(spec, df)
    assert ds.columns == ["x", "c=v", "c=w"]
    assert ds.task_ids == ["g/h=a/1", "g/h=b/1"]  # a loses its missing row (4 left), c has 2 rows
    np.testing.assert_array_equal(ds.X[0], [[1, 0, 0], [2, 1, 0], [4, 0, 0], [5, 1, 0]])
    np.testing.assert_array_equal(ds.y[0], [1, 0, 1, 0])


# ============================================================================ protocol
def test_split_is_fifty_fifty_in_two_batches_with_each_first_batch_first():
    ds = _dataset(sizes=(4, 5, 7, 10, 31, 6))
    sp = md.make_split(ds, 3)
    for t, y in enumerate(ds.y):
        n = len(y)
        tr, te = sp.train[t], sp.test[t]
        assert len(tr) == n // 2 and len(te) == n - n // 2 and len(tr) >= 1 and len(te) >= 1
        assert sorted(np.concatenate([tr, te]).tolist()) == list(range(n))
        b0, b1 = sp.batches[t]
        assert len(b0) >= 1 and len(b1) >= 1 and len(b0) >= len(b1)
        assert sorted(np.concatenate([b0, b1]).tolist()) == list(range(len(tr)))
    assert sorted(sp.order) == [(t, k) for t in range(len(ds.y)) for k in (0, 1)]
    pos = {tb: i for i, tb in enumerate(sp.order)}
    assert all(pos[(t, 0)] < pos[(t, 1)] for t in range(len(ds.y)))
    streamed = list(sp.stream())
    assert len(streamed) == 2 * len(ds.y)
    assert sum(len(y) for _, _, y in streamed) == sum(len(y) // 2 for y in ds.y)


def test_split_is_reproducible_per_seed_and_differs_between_seeds():
    ds = _dataset(sizes=(8,) * 20)
    a, b, c = md.make_split(ds, 0), md.make_split(ds, 0), md.make_split(ds, 1)
    assert a.order == b.order and all(np.array_equal(x, y) for x, y in zip(a.train, b.train))
    assert a.order != c.order and not all(np.array_equal(x, y) for x, y in zip(a.train, c.train))


def test_split_refuses_tasks_too_small_for_two_batches():
    with pytest.raises(ValueError, match="needs >= 4"):
        md.make_split(_dataset(sizes=(3, 6)), 0)


def test_first_row_only_stream_cuts_the_first_batch_and_sends_the_rest_right_after():
    sp = md.make_split(_dataset(sizes=(20, 12, 8)), 0)
    usual, cut = list(sp.stream()), list(sp.stream(first_row_only=True))
    assert len(cut) == len(usual) + 1
    assert cut[0][0] == cut[1][0] == usual[0][0] and len(cut[0][2]) == 1
    np.testing.assert_array_equal(np.vstack([cut[0][1], cut[1][1]]), usual[0][1])
    for u, c in zip(usual[1:], cut[2:]):
        assert u[0] == c[0] and np.array_equal(u[1], c[1])


# ============================================================================ baselines
def test_error_of_matches_sklearn_and_skips_one_class_tasks():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    ys = [np.array([0.0, 1, 1, 0]), np.array([1.0, 1]), np.array([1.0, 0, 0])]
    ss = [rng.normal(size=len(y)) for y in ys]
    out = mb.error_of("classification", ys, ss)
    want = np.mean([roc_auc_score(ys[0], ss[0]), roc_auc_score(ys[2], ss[2])])
    assert out["n_scored"] == 2 and out["mean_auc"] == pytest.approx(want) and out["error"] == pytest.approx(1 - want)
    reg = mb.error_of("regression", [np.array([1.0, 2]), np.array([3.0])], [np.array([1.0, 1]), np.array([5.0])])
    assert reg["error"] == pytest.approx(np.sqrt(5 / 3))


def test_error_of_keeps_each_tasks_part_of_the_error():
    ys = [np.array([0.0, 1, 1, 0]), np.array([1.0, 1]), np.array([1.0, 0, 0])]
    ss = [np.array([0.1, 0.9, 0.2, 0.3]), np.array([0.5, 0.4]), np.array([0.2, 0.6, 0.1])]
    out = mb.error_of("classification", ys, ss)
    assert out["per_task"] == [pytest.approx(0.75), None, pytest.approx(0.5)]
    ys = [np.array([1.0, 2]), np.array([3.0])]
    reg = mb.error_of("regression", ys, [np.array([1.0, 1]), np.array([5.0])])
    assert reg["per_task"] == [[1.0, 2], [4.0, 1]]
    sse, rows = np.sum(reg["per_task"], axis=0)
    assert np.sqrt(sse / rows) == pytest.approx(reg["error"])


def _seed_entry(learner_parts, baseline_parts):
    return {"learner": {"per_task": learner_parts}, "baselines": {b: {"per_task": p} for b, p in zip(mb.BASELINES, baseline_parts)}}


def test_bootstrap_resamples_the_tasks_paired_and_combines_seeds_geometrically():
    rng = np.random.default_rng(1)
    sse = rng.gamma(1.0, size=40)
    rows = rng.integers(1, 6, size=40)
    base = [[float(e), int(n)] for e, n in zip(sse, rows)]
    half = [[0.25 * e, n] for e, n in base]  # the learner's RMSE half the baseline's on any set of tasks
    twice = [[4.0 * e, n] for e, n in base]
    ci = ml.bootstrap_ratios("regression", [_seed_entry(half, [base, base, base])], 500)
    for k in (*mb.BASELINES, "best"):  # paired: every resample gives exactly 0.5 (unpaired: a wide interval)
        assert ci[k] == [pytest.approx(0.5), pytest.approx(0.5)]
    ci = ml.bootstrap_ratios("regression", [_seed_entry(half, [base] * 3), _seed_entry(twice, [base] * 3)], 500)
    assert ci["pooled"] == [pytest.approx(1.0), pytest.approx(1.0)]  # sqrt(0.5 * 2)
    # "best" divides by the smallest of the three resampled baseline errors, resample by resample
    ci = ml.bootstrap_ratios("regression", [_seed_entry(half, [base, twice, half])], 500)
    assert ci["per_task"][0] == pytest.approx(0.5) and ci["pooled"][1] == pytest.approx(0.25)
    assert ci["mixed"] == ci["best"] == [pytest.approx(1.0), pytest.approx(1.0)]
    # a resample on which a baseline makes no error has no ratio: left out, and counted
    perfect = [[0.0, n] if i < 20 else p for i, (p, (_, n)) in enumerate(zip(base, base))]
    ci = ml.bootstrap_ratios("regression", [_seed_entry(half, [base, base, perfect])], 500)
    assert ci["resamples"] == 500
    ci = ml.bootstrap_ratios("regression", [_seed_entry(half[:1], [base[:1], base[:1], [[0.0, 1]]])], 50)
    assert ci["resamples"] == 0 and ci["pooled"] is None


def test_bootstrap_interval_matches_the_enumerated_resampling_distribution():
    """Three scored tasks (one unscored, left out): all 27 equally likely resamples enumerated by
    hand give the ratio's exact distribution; the bootstrap's percentiles fall inside it."""
    import itertools

    learner, baseline = [0.9, None, 0.4, 0.7], [0.6, None, 0.5, 0.8]
    ratios = sorted((1 - np.mean([learner[i] for i in idx])) / (1 - np.mean([baseline[i] for i in idx]))
                    for idx in itertools.product([0, 2, 3], repeat=3))
    ci = ml.bootstrap_ratios("classification", [_seed_entry(learner, [baseline] * 3)], 20000, seed=3)
    lo_q = np.quantile(ratios, [0.01, 0.05], method="inverted_cdf")
    hi_q = np.quantile(ratios, [0.95, 0.99], method="inverted_cdf")
    assert lo_q[0] - 1e-12 <= ci["pooled"][0] <= lo_q[1] + 1e-12
    assert hi_q[0] - 1e-12 <= ci["pooled"][1] <= hi_q[1] + 1e-12


def test_mixed_regression_recovers_fixed_effects_and_beats_per_task_and_pooled():
    ds = _hierarchical("regression", 60, 10, beta=[2.0, -1.0, 0.5], sd_intercept=2.0, sd_slope=0.7, noise=1.0)
    sp = md.make_split(ds, 0)
    mixed, per, pooled = mb.mixed(sp), mb.per_task(sp), mb.pooled(sp)
    np.testing.assert_allclose(mixed["fixed_effects"], [2.0, -1.0, 0.5], atol=0.3)
    assert mixed["random_effects"] == "intercept + slope x0" and not mixed["fallback"]
    sd = np.sqrt(np.diag(mixed["cov_re"]))
    assert 1.2 < sd[0] < 3.0 and 0.3 < sd[1] < 1.2
    assert mixed["error"] < per["error"] and mixed["error"] < pooled["error"]


def test_pooled_beats_per_task_without_group_effects_and_per_task_wins_with_opposite_slopes():
    same = md.make_split(_hierarchical("regression", 30, 8, beta=[1.0, 1.0, 1.0, 1.0], sd_intercept=0.0), 0)
    assert mb.pooled(same)["error"] < mb.per_task(same)["error"]
    rng = np.random.default_rng(1)
    X = [rng.normal(size=(60, 1)) for _ in range(10)]
    y = [(1 if t % 2 else -1) * 3 * A[:, 0] + 0.3 * rng.normal(size=60) for t, A in enumerate(X)]
    opposite = md.make_split(md.Dataset("opp", "regression", ["x0"], [f"g{t}" for t in range(10)], X, y, 0), 0)
    assert mb.per_task(opposite)["error"] < 0.5 * mb.pooled(opposite)["error"]


def test_mixed_regression_falls_back_to_an_intercept_when_the_slope_model_fails(monkeypatch):
    ds = _hierarchical("regression", 30, 8, beta=[1.0, 0.5], sd_intercept=1.5, sd_slope=0.5, seed=2)
    sp = md.make_split(ds, 0)
    real = mb._fit_mixedlm
    calls = []

    def slope_fails(y, exog, groups, exog_re):
        calls.append(exog_re.shape[1])
        res, problem, notes = real(y, exog, groups, exog_re)
        return (res, "not converged", notes) if exog_re.shape[1] == 2 else (res, problem, notes)

    monkeypatch.setattr(mb, "_fit_mixedlm", slope_fails)
    out = mb.mixed(sp)
    assert calls == [2, 1] and out["fallback"] and out["random_effects"] == "intercept"
    assert [a["random_effects"] for a in out["attempts"]] == ["intercept + slope x0", "intercept"]
    assert np.asarray(out["cov_re"]).shape == (1, 1)
    monkeypatch.setattr(mb, "_fit_mixedlm", real)
    full = mb.mixed(sp)
    assert not full["fallback"] and full["error"] != pytest.approx(out["error"])


def test_mixed_regression_finds_the_optimum_where_gradient_methods_stall():
    # ScotsSec seed 1: BFGS / L-BFGS / CG fail or stop at an infinite likelihood (zero variance)
    out = mb.mixed(md.make_split(md.load("ScotsSec"), 1))
    assert not out["fallback"] and out["attempts"][0]["problem"] is None
    sd = np.sqrt(np.diag(out["cov_re"]))
    assert 0.2 < sd[0] < 1.5 and 0.0 < sd[1] < 0.3


def test_mixed_classification_recovers_fixed_effects_and_scores_like_the_truth():
    ds = _hierarchical("classification", 80, 16, beta=[1.5, -1.0], sd_intercept=1.0)
    sp = md.make_split(ds, 0)
    mixed, pooled = mb.mixed(sp), mb.pooled(sp)
    np.testing.assert_allclose(mixed["fixed_effects"], [1.5, -1.0], atol=0.45)
    assert 0.5 < mixed["intercept_sd"] < 2.0
    truth = mb.error_of("classification", [sp.testing(t)[1] for t in range(80)],
                        [sp.testing(t)[0] @ [1.5, -1.0] for t in range(80)])
    assert mixed["error"] <= truth["error"] + 0.03 and mixed["error"] <= pooled["error"] + 0.03


def test_baselines_are_cached_by_dataset_seed_and_split(tmp_path):
    sp = md.make_split(_hierarchical("regression", 12, 8, beta=[1.0], sd_intercept=1.0, sd_slope=0.3), 0)
    first = mb.baselines(sp, tmp_path)
    again = mb.baselines(sp, tmp_path)
    assert not first["cached"] and again["cached"]
    assert {b: again[b]["error"] for b in mb.BASELINES} == pytest.approx({b: first[b]["error"] for b in mb.BASELINES})
    assert len(list(tmp_path.iterdir())) == 1
    other = md.make_split(sp.dataset, 1)
    assert not mb.baselines(other, tmp_path)["cached"] and len(list(tmp_path.iterdir())) == 2
    assert mb.split_digest(other) != mb.split_digest(sp)


# ============================================================================ learner and suite
def test_run_learner_scores_the_test_halves_and_reports_failures():
    from core import STL
    from core.metrics import rmse

    ds = _hierarchical("regression", 10, 10, beta=[1.0, 2.0], sd_intercept=1.0)
    out = ml.run_learner(ds, 0, lambda kind, seed: STL(kind=kind, random_state=seed))
    sp = md.make_split(ds, 0)
    model = STL(kind="regression")
    for tid, X, y in sp.stream():
        model.learn(tid, X, y)
    want = np.sqrt(np.mean(np.concatenate([(sp.testing(t)[1] - model.predict(tid, sp.testing(t)[0])) ** 2
                                           for t, tid in enumerate(ds.task_ids)])))
    assert out["error"] == pytest.approx(want) and out["n_updates"] == 20
    ticks = []
    cut = ml.run_learner(ds, 0, lambda kind, seed: STL(kind=kind), first_row_only=True,
                         on_batch=lambda: ticks.append(1))
    assert cut["n_updates"] == 21 and len(ticks) == 20
    assert rmse(np.zeros(2), np.ones(2)) == 1.0

    def broken(kind, seed):
        raise RuntimeError("boom")

    bad = ml.run_learner(ds, 0, broken)
    assert bad["error"] == float("inf") and "boom" in bad["failure"]


def test_cli_quick_writes_table_json_and_figure(tmp_path, capsys):
    out_json, fig = tmp_path / "r.json", tmp_path / "f.png"
    rc = ml.main(["--datasets", "bacteria,Gcsemv", "--quick", "--quiet", "--first-batch", "--learner", "STL",
                  "--params", '{"mu": 0.5}', "--json", str(out_json), "--figure", str(fig),
                  "--cache-dir", str(tmp_path / "cache"), "--bootstrap", "200"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "bacteria" in text and "median" in text and "/best" in text
    assert "95 % intervals of the ratios (200 paired resamples" in text
    assert fig.stat().st_size > 10_000
    r = json.loads(out_json.read_text())
    assert r["suite"] == "multilevel" and r["learner"] == "STL" and r["params"] == {"mu": 0.5}
    assert r["seeds"] == [0] and r["quick"] and r["first_batch"]
    assert set(r["median_ratio"]) == {"per_task", "pooled", "mixed", "best"}
    for name, e in r["datasets"].items():
        assert e["n_tasks"] == ml.QUICK_TASKS
        assert set(e["error"]) == {"learner", "per_task", "pooled", "mixed"}
        s = e["seeds"]["0"]
        for b in mb.BASELINES:
            assert s["ratio"][b] == pytest.approx(s["learner"]["error"] / s["baselines"][b]["error"])
        best = min(s["baselines"][b]["error"] for b in mb.BASELINES)
        assert s["ratio"]["best"] == pytest.approx(s["learner"]["error"] / best)
        assert e["first_batch"]["ratio"] == pytest.approx(
            s["first_batch"]["first_row_only"]["error"] / s["learner"]["error"])
        if e["kind"] == "classification":
            assert 0 <= e["mean_auc"]["learner"] <= 1
        ci = e["ratio_ci95"]
        assert set(ci) == {"per_task", "pooled", "mixed", "best", "resamples"} and 0 < ci["resamples"] <= 200
        assert all(0 < ci[k][0] <= ci[k][1] for k in (*mb.BASELINES, "best"))
        assert "per_task" not in s["learner"] and "per_task" not in s["baselines"]["mixed"]  # resampled, not kept
    assert r["bootstrap"] == 200
    assert len(list((tmp_path / "cache").iterdir())) == 2


@pytest.mark.parametrize("argv, message", [
    (["--datasets", "iris"], "unknown data set"),
    (["--learner", "Nope"], "unknown learner"),
    (["--params", "[1]"], "JSON object"),
    (["--params", '{"no_such_arg": 1}'], "--params"),
    (["--seeds", "0"], "--seeds"),
    (["--bootstrap", "-1"], "--bootstrap"),
])
def test_cli_rejects_bad_arguments(argv, message, capsys):
    assert ml.main(argv + ["--quiet"]) == 2
    assert message in capsys.readouterr().err
