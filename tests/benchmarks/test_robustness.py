import json

import numpy as np
import pytest

from benchmarks import robustness as rb
from benchmarks.common import json_clean
from core import STL


def _stl(kind, seed):
    return STL(kind=kind, random_state=seed)


# ------------------------------------------------------------------ families
def test_suite_spans_what_users_send():
    fams = rb.FAMILIES.values()
    assert len(rb.FAMILIES) >= 20
    assert {f.kind for f in fams} == {"regression", "classification"}
    assert {(f.shared, f.rows) for f in fams} == {("none", "few"), ("none", "plenty"),
                                                  ("clustered", "few"), ("clustered", "plenty")}
    ds = [f.d for f in fams]
    assert min(ds) <= 3 and max(ds) >= 100
    ratios = [f.n_train / f.d for f in fams]
    assert min(ratios) <= 0.5 and max(ratios) >= 20
    assert {f.options.get("envs", 0) for f in fams} >= {0, 1, 10}
    assert any(f.batch_range[1] >= 5 for f in fams) and {f.options.get("order", "random") for f in fams} == {
        "random", "cluster"}
    assert {f.options.get("noise") for f in fams if f.kind == "regression"} >= {"none", "heavy"}
    for f in fams:
        assert f.name and f.description and f.shared in ("none", "clustered")
        assert f.rows == ("few" if f.n_train < 3 * f.d else "plenty")
        assert f.n_tasks <= 40 and (f.n_tasks >= 20 or f.d >= 100)


@pytest.mark.parametrize("name", list(rb.FAMILIES))
def test_family_is_deterministic_and_has_declared_shapes(name):
    fam = rb.FAMILIES[name]
    a, b, c = fam(3), fam(3), fam(4)
    assert a.kind == fam.kind and len(a.tasks) == fam.n_tasks
    for ta, tb in zip(a.tasks, b.tasks):
        for attr in ("X_train", "y_train", "X_test", "y_test"):
            np.testing.assert_array_equal(getattr(ta, attr), getattr(tb, attr))
    assert a.order == b.order
    assert not np.array_equal(a.tasks[0].X_train, c.tasks[0].X_train)
    lo, hi = fam.batch_range
    seen = {}
    for ti, k in a.order:  # batches of a task arrive in order, each once
        assert k == seen.get(ti, 0)
        seen[ti] = k + 1
    for ti, task in enumerate(a.tasks):
        assert task.X_train.shape == task.X_test.shape == (fam.n_train, fam.d)
        assert task.y_train.shape == task.y_test.shape == (fam.n_train,)
        assert lo <= len(task.batches) <= hi and seen[ti] == len(task.batches)
        np.testing.assert_array_equal(np.concatenate(task.batches), np.arange(fam.n_train))
        assert np.all(np.isfinite(task.X_train)) and np.all(np.isfinite(task.y_train))
        assert (task.env >= 0) == (fam.shared == "clustered")
        if fam.kind == "classification":
            assert set(np.unique(np.r_[task.y_train, task.y_test])) <= {0.0, 1.0}
    if hi > 1 and fam.options.get("order", "random") == "random":  # interleaved with other tasks
        first = [ti for ti, _ in a.order[: len(a.order) // 2]]
        assert len(set(first)) > len(a.tasks) // 2
    if fam.options.get("order") == "cluster":
        envs = [a.tasks[ti].env for ti, _ in a.order]
        assert sum(e1 != e2 for e1, e2 in zip(envs, envs[1:])) == fam.options["envs"] - 1
    total = sum(len(t.batches) for t in a.tasks)
    assert len(a.order) == total
    quick = fam(3, quick=True)
    assert len(quick.tasks) < len(a.tasks)


def test_positive_rates_match_their_declaration():
    def rate(name):
        s = rb.FAMILIES[name](0)
        return np.mean(np.concatenate([np.r_[t.y_train, t.y_test] for t in s.tasks]))

    assert 0.4 < rate("clf_clustered") < 0.6
    assert 0.14 < rate("clf_imbalanced_batches") < 0.26
    assert 0.02 < rate("clf_rare") < 0.06


def test_clustered_tasks_share_weights_and_unrelated_ones_do_not():
    # least squares on the noiseless family recovers the weight vectors (d=3, 6 rows: unique fit)
    def weights(name):
        s = rb.FAMILIES[name](0)
        out = []
        for t in s.tasks:
            X = np.c_[np.ones(2 * len(t.y_train)), np.r_[t.X_train, t.X_test]]
            w = np.linalg.lstsq(X, np.r_[t.y_train, t.y_test], rcond=None)[0][1:]
            out.append((t.env, w / np.linalg.norm(w)))
        return out

    ws = weights("reg_d3_few")
    same = [a @ b for i, (e, a) in enumerate(ws) for f, b in ws[i + 1:] if e == f]
    assert np.median(same) > 0.8
    un = weights("reg_unrelated_d3")
    cos = [abs(a @ b) for i, (_, a) in enumerate(un) for _, b in un[i + 1:]]
    assert np.median(cos) < 0.8


# ------------------------------------------------------------------ baselines
def test_ridge_baseline_picks_the_brute_force_leave_one_out_alpha():
    rng = np.random.default_rng(7)
    n, d = 14, 4
    X = rng.normal(size=(n, d)) * [1.0, 10.0, 0.1, 3.0] + [5.0, -2.0, 100.0, 0.0]
    y = X @ [0.3, 0.05, 4.0, -0.2] + 1.5 + rng.normal(size=n)
    Z = (X - X.mean(0)) / X.std(0)  # StandardScaler on the whole training half
    loo = []
    for alpha in rb.ALPHAS:
        errs = []
        for i in range(n):
            keep = np.arange(n) != i
            A = np.c_[np.ones(n - 1), Z[keep]]
            P = alpha * np.eye(d + 1)
            P[0, 0] = 0.0  # the intercept is not penalised
            coef = np.linalg.solve(A.T @ A + P, A.T @ y[keep])
            errs.append(y[i] - coef[0] - Z[i] @ coef[1:])
        loo.append(np.mean(np.square(errs)))
    best = rb.ALPHAS[int(np.argmin(loo))]
    assert np.sort(loo)[1] > np.min(loo) * (1 + 1e-9)  # a unique minimum
    fit = rb.fit_baseline("regression", X, y)
    assert fit["param"] == pytest.approx(best) and not fit["fallback"]
    assert rb.ALPHAS[0] < best < rb.ALPHAS[-1]


def test_logistic_baseline_leaves_the_intercept_unpenalised():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = (rng.random(300) < 0.2).astype(float)
    clf = rb._logistic_cv(3)
    clf.Cs = [1e-8]
    clf.fit(X, y)
    p = y.mean()
    assert clf.intercept_[0] == pytest.approx(np.log(p / (1 - p)), abs=1e-3)
    assert np.max(np.abs(clf.coef_)) < 1e-5


def test_classification_baseline_falls_back_to_a_constant_with_one_positive():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(20, 3))
    y = np.zeros(20)
    y[4] = 1.0
    fit = rb.fit_baseline("classification", X, y)
    assert fit["fallback"] and fit["param"] is None
    s = fit["score"](rng.normal(size=(5, 3)))
    assert np.allclose(s, np.log(0.05 / 0.95))
    assert rb.task_error("classification", np.array([0, 1, 0, 1.0]), s[:4]) == pytest.approx(0.5)
    fit = rb.fit_baseline("classification", X, np.r_[np.ones(3), np.zeros(17)])
    assert not fit["fallback"] and fit["param"] in rb.CS


def test_ratio_and_geometric_mean():
    assert rb.ratio_of([1.0, 3.0, np.nan], [2.0, 2.0, np.nan]) == pytest.approx(1.0)
    assert rb.ratio_of([1.0, 1.0], [1.0, np.nan]) == pytest.approx(1.0)  # a task the baseline skips
    assert rb.ratio_of(None, [1.0]) == np.inf
    assert rb.geometric_mean([0.5, 2.0, 1.0]) == pytest.approx(1.0)
    assert rb.geometric_mean([1.0, np.inf]) == np.inf


# ------------------------------------------------------------------ criteria
def test_acceptance_criteria_on_hand_made_ratios():
    tags = {"u1": {"shared": "none", "rows": "few"}, "u2": {"shared": "none", "rows": "plenty"},
            "p1": {"shared": "clustered", "rows": "plenty"}, "p2": {"shared": "clustered", "rows": "plenty"},
            "f1": {"shared": "clustered", "rows": "few"}, "f2": {"shared": "clustered", "rows": "few"},
            "f3": {"shared": "clustered", "rows": "few"}}
    good = {"u1": 1.02, "u2": 0.9, "p1": 1.0, "p2": 0.5, "f1": 0.2, "f2": 0.75, "f3": 3.0}
    c = rb.acceptance(good, tags)
    assert [c[k]["passed"] for k in ("unrelated", "clustered_plenty", "clustered_few")] == [True, True, True]
    assert c["unrelated"]["value"] == 1.02 and c["clustered_few"]["value"] == 0.75
    assert sorted(c["clustered_few"]["families"]) == ["f1", "f2", "f3"]
    bad = dict(good, u2=1.03, p2=1.001, f1=0.8)
    c = rb.acceptance(bad, tags)
    assert [c[k]["passed"] for k in ("unrelated", "clustered_plenty", "clustered_few")] == [False, False, False]
    assert c["unrelated"]["worst_family"] == "u2" and c["clustered_plenty"]["worst_family"] == "p2"
    assert c["clustered_few"]["value"] == 0.8
    c = rb.acceptance(dict(good, f3=np.nan), tags)  # nan counts as the worst
    assert c["clustered_few"]["value"] == 0.75 and c["clustered_few"]["passed"]
    c = rb.acceptance(dict(good, u1=np.nan), tags)
    assert c["unrelated"]["passed"] is False
    c = rb.acceptance({"u1": 0.5}, {"u1": tags["u1"]})
    assert c["clustered_few"]["passed"] is None and c["clustered_few"]["families"] == []


# ------------------------------------------------------------------ the suite
def test_tiny_run_suite_with_stl():
    fams = ["reg_unrelated_few", "clf_clustered"]
    r = rb.run_suite(fams, seeds=(0, 1), models={"STL": _stl}, progress=False, quick=True)
    assert list(r["families"]) == fams and r["seeds"] == [0, 1]
    for name, e in r["families"].items():
        assert np.isfinite(e["ratio"]["STL"]) and e["ratio"]["STL"] > 0
        assert len(e["ratio_per_seed"]["STL"]) == 2
        assert e["ratio"]["STL"] == pytest.approx(np.sqrt(np.prod(e["ratio_per_seed"]["STL"])))
        s = e["seeds"]["0"]
        n = e["n_tasks_run"]
        assert len(s["baseline"]["errors"]) == len(s["models"]["STL"]["errors"]) == n
        assert s["baseline"]["chosen"]["n_fitted"] + s["baseline"]["chosen"]["n_fallback"] == n
        assert s["models"]["STL"]["learn_s"] > 0 and s["baseline"]["fit_s"] > 0
        assert s["models"]["STL"]["ratio"] == pytest.approx(
            np.nanmean(s["models"]["STL"]["errors"]) / np.nanmean(s["baseline"]["errors"]))
    assert set(r["summary"]["STL"]["criteria"]) == {"unrelated", "clustered_plenty", "clustered_few"}
    assert r["summary"]["STL"]["criteria"]["clustered_plenty"]["passed"] is None
    json.dumps(json_clean(r), allow_nan=False)
    assert "reg_unrelated_few" in rb.format_table(r)


def test_first_row_only_streams_the_same_rows_with_the_first_batch_cut():
    stream = rb.FAMILIES["reg_batches_offsets"](0, quick=True)
    usual, cut = list(stream.batches()), list(stream.batches(first_row_only=True))
    assert len(cut) == len(usual) + 1
    assert cut[0][0] == cut[1][0] == usual[0][0] and len(cut[0][2]) == 1
    np.testing.assert_array_equal(np.vstack([cut[0][1], cut[1][1]]), usual[0][1])
    for (ta, Xa, ya), (tb, Xb, yb) in zip(usual[1:], cut[2:]):
        assert ta == tb
        np.testing.assert_array_equal(Xa, Xb)
        np.testing.assert_array_equal(ya, yb)


def test_first_batch_ratio_is_the_cut_streams_mean_error_over_the_usual_one():
    r = rb.run_suite(["reg_unrelated_few"], seeds=(0,), models={"STL": _stl}, progress=False, quick=True,
                     first_batch=True)
    m = r["families"]["reg_unrelated_few"]["seeds"]["0"]["models"]["STL"]
    stream = rb.FAMILIES["reg_unrelated_few"](0, quick=True)
    cut = rb.run_model(_stl, stream, first_row_only=True)
    assert m["first_batch"]["ratio"] == pytest.approx(np.nanmean(cut["errors"]) / np.nanmean(m["errors"]))
    assert r["families"]["reg_unrelated_few"]["first_batch"]["STL"] == pytest.approx(m["first_batch"]["ratio"])
    assert r["summary"]["STL"]["first_batch"]["farthest_family"] == "reg_unrelated_few"
    assert "first batch cut to one row" in rb.format_table(r)


def test_a_failing_learner_gets_an_infinite_ratio():
    class Broken:
        def learn(self, *a):
            raise RuntimeError("boom")

    r = rb.run_suite(["reg_d3_few"], seeds=(0,), models={"STL": _stl, "Broken": lambda k, s: Broken()},
                     progress=False, quick=True)
    e = r["families"]["reg_d3_few"]
    assert e["ratio"]["Broken"] == np.inf and "boom" in e["seeds"]["0"]["models"]["Broken"]["failure"]
    assert r["summary"]["Broken"]["criteria"]["clustered_few"]["passed"] is False
    assert np.isfinite(e["ratio"]["STL"])


def test_cli_writes_json_and_plot(tmp_path, capsys):
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    code = rb.main(["--quick", "--families", "reg_d3_few,reg_unrelated_d3", "--models", "STL,FCL3",
                    "--params", '{"STL": {"mu": 1.0}}', "--json", str(out), "--plot", str(png), "--quiet"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "reg_d3_few" in printed and ("PASS" in printed or "FAIL" in printed)
    data = json.loads(out.read_text())
    assert data["seeds"] == [0] and data["models"]["STL"]["params"] == {"mu": 1.0}
    e = data["families"]["reg_d3_few"]
    assert e["tags"] == {"shared": "clustered", "rows": "few"}
    assert set(e["ratio"]) == {"STL", "FCL3"} and isinstance(e["fcl3_n_representatives"][0], int)
    assert {"median", "worst", "criteria"} <= set(data["summary"]["FCL3"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_rejects_unknown_names(capsys):
    assert rb.main(["--families", "nope", "--quiet"]) == 2
    assert rb.main(["--models", "Nope", "--quiet"]) == 2
    assert rb.main(["--params", '{"ELLA": {"mu": 1}}', "--models", "STL", "--quiet"]) == 2
    assert "nope" in capsys.readouterr().err


def test_cached_baselines_equal_fresh_ones_and_are_used_only_where_they_match(monkeypatch):
    """``--baselines``: a matching earlier result gives the very baseline a fresh fit gives, and
    no fit runs; another task count, ``quick`` setting or grid is fitted afresh."""
    fams = ["reg_d3_few", "clf_clustered"]
    first = json.loads(json.dumps(json_clean(rb.run_suite(fams, seeds=(0,), models={"STL": _stl},
                                                            progress=False, quick=True))))
    fits = []
    real = rb.run_baseline
    monkeypatch.setattr(rb, "run_baseline", lambda stream: fits.append(stream.family) or real(stream))
    again = rb.run_suite(fams, seeds=(0,), models={"STL": _stl}, progress=False, quick=True, baselines=first)
    assert fits == []
    for name in fams:
        assert again["families"][name]["seeds"]["0"]["baseline"]["errors"] == first["families"][name]["seeds"]["0"]["baseline"]["errors"]
        assert again["families"][name]["ratio"]["STL"] == pytest.approx(first["families"][name]["ratio"]["STL"])
    rb.run_suite(fams[:1], seeds=(0,), models={"STL": _stl}, progress=False, quick=False, baselines=first)
    assert fits == ["reg_d3_few"]  # other task counts (quick=False): fitted
    other_grid = json.loads(json.dumps(first))
    other_grid["baseline"]["regression"]["alphas"] = other_grid["baseline"]["regression"]["alphas"][:-1]
    rb.run_suite(fams[:1], seeds=(0,), models={"STL": _stl}, progress=False, quick=True, baselines=other_grid)
    assert fits == ["reg_d3_few", "reg_d3_few"]


def test_calibrated_families_give_each_task_its_own_feature_scales():
    """task_uneven: a column's spread differs between tasks by orders of magnitude."""
    stream = rb.FAMILIES["reg_unrelated_calibrated"](0)
    spreads = np.array([t.X_train.std(axis=0) for t in stream.tasks])  # (tasks, d)
    ratio = spreads.max(axis=0) / spreads.min(axis=0)
    assert np.all(ratio > 10.0)
    plain = rb.FAMILIES["reg_unrelated_few"](0)
    assert np.all(np.array([t.X_train.std(axis=0) for t in plain.tasks]).max(axis=0) < 5.0)


def test_the_intercepts_families_give_tasks_wide_intercepts_and_shift_and_scale_targets_or_features():
    """intercept_sd, target, features: a regression task's mean target sits around 300 and its
    tasks' means spread by about 50 * 5 (the intercepts' spread, 10 times the noise of 0.5),
    far more than a task's rows spread about their own mean; classification features sit
    around 300 with a spread of about 50."""
    stream = rb.FAMILIES["reg_clustered_intercepts"](0)
    y = [np.concatenate([t.y_train, t.y_test]) for t in stream.tasks]
    means = np.array([v.mean() for v in y])
    assert abs(np.median(means) - 300.0) < 150.0
    assert 100.0 < means.std() < 600.0 and np.median([v.std() for v in y]) < 0.5 * means.std()
    clf = rb.FAMILIES["clf_clustered_intercepts"](0)
    X = np.vstack([t.X_train for t in clf.tasks])
    assert np.all(np.abs(X.mean(axis=0) - 300.0) < 20.0) and np.all(np.abs(X.std(axis=0) - 50.0) < 10.0)
    rates = np.array([t.y_train.mean() for t in clf.tasks])
    assert rates.std() > 0.15  # the logit intercepts spread the tasks' positive rates
