"""Empirical-Bayes task models (``task_models="empirical_bayes"``, the default) on whole
streams: no loss against tuned per-task learning where tasks share nothing, a clear gain
where they share environments, exact re-learning, old states, and the paper's rule."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sklearn.linear_model import RidgeCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from core import ELLA, FCL3, STL, load_state
from core.metrics import rmse


def _stream(n_tasks, d, n_train, envs, seed, noise=0.5, deviation=0.15):
    """Tasks ``(id, X_train, y_train, X_test, y_test)``: weights from ``envs`` unit centres plus
    a small deviation, or each its own (``envs=0``); per-task target offsets."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(envs, 1), d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    out = []
    for t in range(n_tasks):
        w = centres[t % envs] + deviation * rng.normal(size=d) / np.sqrt(d) if envs else rng.normal(size=d) / np.sqrt(d)
        X = rng.normal(size=(2 * n_train, d))
        y = rng.normal(0, 2) + X @ w + noise * rng.normal(size=2 * n_train)
        out.append((f"t{t}", X[:n_train], y[:n_train], X[n_train:], y[n_train:]))
    return out


def _ratio(model, tasks):
    """Mean test RMSE of ``model`` over tasks / that of per-task RidgeCV (exact leave-one-out)."""
    for tid, X, y, _, _ in tasks:
        model.learn(tid, X, y)
    ours = np.mean([rmse(yt, model.predict(tid, Xt)) for tid, _, _, Xt, yt in tasks])
    base = np.mean([rmse(yt, make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-6, 6, 25))).fit(X, y)
                         .predict(Xt)) for _, X, y, Xt, yt in tasks])
    return ours / base


def test_unrelated_tasks_match_tuned_per_task_learning():
    ratios = []
    for seed in range(3):
        model = FCL3()
        ratios.append(_ratio(model, _stream(20, 6, 15, envs=0, seed=seed)))
        assert model.task_family() == "ridge"  # no transfer where nothing is shared
    assert np.exp(np.mean(np.log(ratios))) < 1.03


def test_clustered_tasks_with_few_rows_beat_tuned_per_task_learning_clearly():
    ratios = []
    for seed in range(3):
        model = FCL3()
        ratios.append(_ratio(model, _stream(24, 8, 10, envs=3, seed=seed)))
        assert model.task_family() != "ridge"
    assert np.exp(np.mean(np.log(ratios))) < 0.8


def test_the_paper_rule_predicts_with_the_library_model():
    tasks = _stream(8, 5, 20, envs=2, seed=0)
    model = FCL3(task_models="paper")
    for tid, X, y, _, _ in tasks:
        model.learn(tid, X, y)
    rec = model.tasks_["t3"]
    np.testing.assert_allclose(model.theta("t3")[:-1], model.D_ @ rec.arrays["code"])
    assert model.task_family() == "paper"


@pytest.mark.parametrize("cls", [FCL3, ELLA, STL])
def test_relearning_the_latest_task_after_more_data_is_exact(cls):
    tasks = _stream(6, 5, 16, envs=2, seed=1)
    once, twice = cls(), cls()
    for tid, X, y, _, _ in tasks[:-1]:
        once.learn(tid, X, y)
        twice.learn(tid, X, y)
    tid, X, y, Xt, _ = tasks[-1]
    once.learn(tid, X, y)
    twice.learn(tid, X[:7], y[:7])
    twice.learn(tid, X[7:], y[7:])
    ev_once, ev_twice = once.tasks_[tid].meta["evidence"], twice.tasks_[tid].meta["evidence"]
    assert set(ev_once) == set(ev_twice)
    for name in ev_once:
        np.testing.assert_allclose(ev_twice[name], ev_once[name], rtol=1e-9, atol=1e-9)
    # the population is refitted on a schedule that counts updates (twice made one more), and
    # each update measures one more task's evidence again, which the stream's choice reads:
    # given the same population and choice, everything else is exact
    if hasattr(once, "population_"):
        twice.population_, twice.population_tasks_ = once.population_, once.population_tasks_
        twice.population_mean_cov_ = once.population_mean_cov_
    twice.stream_choice_ = once.stream_choice_
    twice._forget_derived()
    np.testing.assert_allclose(twice.predict(tid, Xt), once.predict(tid, Xt), rtol=1e-9, atol=1e-9)


def test_every_task_model_follows_the_library():
    tasks = _stream(10, 5, 10, envs=2, seed=2)
    model = FCL3()
    for tid, X, y, _, _ in tasks[:-3]:
        model.learn(tid, X, y)
    before = model.theta("t0")
    for task in tasks[-3:]:  # 7 -> 10 tasks: the population's schedule refits it too
        model.learn(*task[:3])
    assert model.task_family() != "ridge" and not np.allclose(model.theta("t0"), before)
    copy = model.copy()  # a copy learns without changing what the original predicts
    after = model.theta("t0")
    copy.learn("extra", tasks[0][1], tasks[0][2] + 5.0)
    np.testing.assert_array_equal(model.theta("t0"), after)


def test_a_regression_task_without_yy_keeps_the_library_model():
    """States older than format 3 kept no y'y: such a task is predicted with the paper's rule,
    even after more data, and the rest of the model is unaffected."""
    tasks = _stream(6, 4, 12, envs=2, seed=3)
    model = FCL3()
    for tid, X, y, _, _ in tasks:
        model.learn(tid, X, y)
    state = model.get_state()
    for task in state.tasks.values():
        del task["arrays"]["yy"]
    state.format_version = 2
    old = load_state(state)
    np.testing.assert_allclose(old.theta("t1"), old._theta("t1"))
    old.learn("t1", tasks[1][1], tasks[1][2])
    assert np.isnan(old.tasks_["t1"].data.yy) and old.tasks_["t1"].meta["evidence"] is None
    np.testing.assert_allclose(old.theta("t1"), old._theta("t1"))


def test_classification_unrelated_tasks_predict_as_the_ridge_and_clustered_ones_transfer():
    """The family the stream's batches scored best predicts held-out rows of unrelated tasks as
    well as each task alone (``ridge``) does, to 2 % of the log loss, and transfers on clustered
    tasks: not ``ridge``, and better than it."""
    rng = np.random.default_rng(0)
    d = 5
    centres = rng.normal(size=(2, d)) * 2.0
    for envs in (0, 2):
        model = FCL3(kind="classification")
        held_out = []
        for t in range(16):
            w = rng.normal(size=d) * 2.0 if envs == 0 else centres[t % 2] + 0.2 * rng.normal(size=d)
            X, Xt = rng.normal(size=(30, d)), rng.normal(size=(300, d))
            y, yt = ((rng.random(len(A)) < 1 / (1 + np.exp(-A @ w))).astype(float) for A in (X, Xt))
            model.learn(f"c{t}", X, y)
            held_out.append((f"c{t}", Xt, yt))
        assert np.all(np.isfinite(model.predict_proba("c0", X)))

        def log_loss(m):
            p = [np.clip(m.predict_proba(tid, Xt), 1e-12, 1 - 1e-12) for tid, Xt, _ in held_out]
            return -np.mean([np.mean(np.log(np.where(yt == 1, q, 1 - q))) for (_, _, yt), q in zip(held_out, p)])

        ridge = model.copy()
        ridge.stream_choice_ = {**model.stream_choice_, "family": "ridge"}
        ridge._forget_derived()
        if envs == 0:
            assert log_loss(model) <= 1.02 * log_loss(ridge)
        else:
            assert model.task_family() != "ridge" and log_loss(model) < log_loss(ridge)


@pytest.mark.parametrize("cls", [FCL3, ELLA, STL])
def test_a_task_model_is_its_posterior_mean_under_the_streams_prior_over_omega(cls):
    """Every task is predicted with its posterior mean, omega integrated out under the prior the
    whole stream's evidence curves estimate (core.evidence.omega_prior), computed here from
    the stored curves independently of the learner's cache."""
    from core import evidence as ev
    from core.population import noise_precisions, posterior_mean

    tasks = _stream(12, 5, 12, envs=2, seed=4)
    model = cls()
    for tid, X, y, _, _ in tasks:
        model.learn(tid, X, y)
    name = model.task_family()
    curves = [model.tasks_[t].meta["evidence"] for t in model.task_ids]
    log_pi, _ = ev.omega_prior(np.array([c.get(name, c["ridge"]) for c in curves]))
    family = next(f for f in model._families if f.name == name)
    for tid in ("t0", "t7"):
        record = model.tasks_[tid]
        library = None if name == "ridge" else model._safe_library(tid, record)
        d = record.data
        curve = ev.family_curves("regression", (d.n, d.gram, d.moment, d.yy), library, (family,))[name]
        w = np.exp(curve.log_evidence + log_pi - np.max(curve.log_evidence + log_pi))
        want = (w[:, None] * curve.theta).sum(0) / w.sum()
        pop = model._population()
        # the task's noise under the population (core.population.noise_precisions)
        noise = 1.0 / noise_precisions(np.array([d.n]), d.gram[None], d.moment[None], np.array([d.yy]), pop)[0][0]
        if family.centred_on_population:  # the fitted mixed model's posterior mean
            want = posterior_mean(d.gram / noise, d.moment / noise, pop)
        elif model._keeps_population:  # the intercept pooled with its marginal prior
            precision = d.n / noise
            want[-1] = (precision * want[-1] + pop.mean[-1] / pop.cov[-1, -1]) / (precision + 1.0 / pop.cov[-1, -1])
        np.testing.assert_allclose(model.theta(tid), want, rtol=1e-9, atol=1e-12)


def test_states_that_kept_one_evidence_number_per_family_still_predict():
    """States written before evidence curves were kept hold each task's largest evidence per
    family: a number counts as a flat curve (it leaves the priors over ``omega`` uniform), the
    family is the first reference until batches are scored, predictions stay finite, and a
    later update stores a curve beside them."""
    tasks = _stream(10, 5, 12, envs=2, seed=6)
    model = FCL3()
    for tid, X, y, _, _ in tasks[:-1]:
        model.learn(tid, X, y)
    state = model.get_state()
    for task in state.tasks.values():
        task["meta"]["evidence"] = {k: float(np.max(v)) for k, v in task["meta"]["evidence"].items()}
    del state.meta["stream_choice"]  # such states kept no choice: it is made from the numbers
    old = load_state(state)
    # such states kept no choice and no scores: the first reference until batches are scored
    expected = "population" if old.population_tasks_ else "ridge"
    assert old.task_family() == expected
    assert np.all(np.isfinite(old.predict("t1", tasks[1][3])))
    old.learn(*tasks[-1][:3])
    assert isinstance(old.tasks_[tasks[-1][0]].meta["evidence"]["ridge"], list)
    assert np.all(np.isfinite(old.predict("t1", tasks[1][3])))


def test_every_tasks_evidence_is_measured_again_within_as_many_updates_as_tasks():
    """Each update measures one more task's evidence again, in the tasks' order (the task it
    learns skipped), names it among the tasks it changed and the tasks it measured again, and
    leaves the rest of its record as it was (its arrays the same objects); the measurement is
    the one the task's evidence gets when it is learned again."""
    tasks = _stream(8, 5, 12, envs=2, seed=3)
    model = FCL3()
    for tid, X, y, _, _ in tasks:
        model.learn(tid, X, y)
    seen = []
    rng = np.random.default_rng(0)
    for _ in range(len(tasks)):
        before = model.tasks_
        X = rng.standard_normal((3, 5))
        result = model.learn("t0", X, X[:, 0])
        (other,) = result.changed_tasks
        assert result.remeasured_tasks == (other,)
        seen.append(other)
        now, then = model.tasks_[other], before[other]
        assert now.data is then.data and now.w is then.w and now.omega is then.omega
        assert now.arrays.keys() == then.arrays.keys() and all(now.arrays[k] is then.arrays[k] for k in now.arrays)
        # the same measurement as learning it again would make, against the same state
        probe = model.copy()
        stored = model.tasks_[other]
        fresh = dataclasses.replace(stored, meta={k: v for k, v in stored.meta.items() if k != "evidence"})
        probe.tasks_ = probe.tasks_.set(other, fresh)  # records are shared: never written
        population = probe._population_without(stored)
        probe._record_evidence(other, probe._safe_library(other, stored, population), population)
        for name, curve in model.tasks_[other].meta["evidence"].items():
            np.testing.assert_allclose(curve, probe.tasks_[other].meta["evidence"][name], rtol=1e-9)
    assert set(seen) == {tid for tid, *_ in tasks} - {"t0"}


def test_the_population_object_lasts_as_long_as_its_arrays():
    """``_population()`` gives one object while the learner's population arrays are the same
    (what it computes of itself is computed once), and the population of the new arrays once
    a refit replaces them."""
    from core.population import Population

    tasks = _stream(6, 5, 12, envs=2, seed=4)
    model = FCL3()
    for tid, X, y, _, _ in tasks:
        model.learn(tid, X, y)
    first = model._population()
    assert model._population() is first and model.copy()._population() is first
    rng = np.random.default_rng(1)
    X = rng.standard_normal((4, 5))
    model.learn("t1", X, X[:, 0])  # a model of six tasks refits its population at every update
    second = model._population()
    assert second is not first
    expected = Population.from_array(model.population_)
    assert np.array_equal(second.mean, expected.mean) and np.array_equal(second.cov, expected.cov)
    assert second.mean_cov is model.population_mean_cov_


def _profiled_log_density(X, y, centre, K):
    """``log p(y)`` of rows ``X`` (slopes' columns) with a flat intercept, slopes ``~ N(centre,
    sigma^2 K)`` and ``sigma^2`` profiled, less ``(n - 1)/2 (log 2 pi + 1)`` (the constant
    :func:`core.evidence.gaussian_fits` leaves out): scipy's normal density in the rows'
    centred coordinates at the profiled ``sigma^2``."""
    import scipy.linalg
    import scipy.stats

    n = len(y)
    H = scipy.linalg.null_space(np.ones((1, n)))
    Z, z = H.T @ X, H.T @ y
    C = np.eye(n - 1) + Z @ K @ Z.T
    r = z - Z @ centre
    sigma2 = r @ np.linalg.solve(C, r) / (n - 1)
    return float(scipy.stats.multivariate_normal(Z @ centre, sigma2 * C).logpdf(z)) + 0.5 * (n - 1) * (
        np.log(2 * np.pi) + 1)


from core.population import NOISE_PSEUDO_DOF  # noqa: E402


def _learnt_for_scores(seed=8):
    tasks = _stream(12, 3, 12, envs=2, seed=seed)
    model = FCL3(standardize=False)
    for tid, X, y, _, _ in tasks:
        model.learn(tid, X[:6], y[:6])
    assert model.population_tasks_
    return model, tasks


def test_a_new_tasks_batch_is_scored_by_its_prior_predictive_density():
    """A new task's first batch adds to each family's sum of new tasks' scores ``log sum_j
    pi_j p(y_B | omega_j)`` (up to a constant of the rows' number, the same for every family)
    under the family's prior as the stream had it: here from scipy's normal density for
    ``ridge`` and ``population``; the known tasks' sums are left as they were."""
    from scipy.special import logsumexp

    from core import evidence as ev

    model, _ = _learnt_for_scores()
    rng = np.random.default_rng(3)
    X = rng.normal(size=(5, 3))
    y = X @ np.array([1.0, -0.5, 0.2]) + 0.3 + 0.1 * rng.normal(size=5)
    population = model._population_without(None)
    log_pi = {name: np.asarray(v) for name, v in model.stream_choice_["priors"].items()}
    before = dict(model.stream_choice_["new"]["scores"])
    known = model.stream_choice_["known"]
    model.learn("new", X, y)
    assert model.stream_choice_["known"] == known
    Xc = X - X.mean(axis=0)
    unit = np.trace(Xc.T @ Xc) / X.shape[1]
    slopes = population.predictive().slopes()
    priors = {"ridge": (np.zeros(3), np.eye(3) / unit), "population": (slopes.mean, slopes.cov / slopes.noise)}
    for name, (c, K) in priors.items():
        want = logsumexp(log_pi[name] + np.array([_profiled_log_density(X, y, c, om * K) for om in ev.GAUSSIAN_OMEGAS]))
        got = model.stream_choice_["new"]["scores"][name] - before[name]
        assert got == pytest.approx(want, rel=1e-8, abs=1e-8), name


def test_a_known_regression_tasks_batch_is_scored_by_the_squared_error_of_what_each_family_serves():
    """A known task's batch adds to each family's score the Student t log density of its
    residuals ``y_B - X_B theta_f`` (``nu = k + n_P`` degrees of freedom, scale ``s_t^2``):
    ``theta_f`` the model the family serves from the task's earlier rows under the prior of
    before the batch (the population without the task, the stream's prior over ``omega``),
    ``s_t^2`` the task's noise under that population, the same for every family. Here
    ``theta_f`` is computed from the rows: the mixed model's posterior mean (``population``),
    and for ``ridge`` each ``omega``'s posterior mean weighted by its posterior (scipy's normal
    density of the earlier rows, noise profiled) with the intercept pooled with the
    population's; the squared error from the batch's rows."""
    from scipy.special import logsumexp

    from core import evidence as ev

    model, tasks = _learnt_for_scores()
    tid, X, y = tasks[0][:3]
    previous = model.tasks_[tid]
    population = model._population_without(previous)
    noise = model._task_noise(previous, population)
    log_pi = {name: np.asarray(v) for name, v in model.stream_choice_["priors"].items()}
    before = dict(model.stream_choice_["known"]["scores"])
    new = model.stream_choice_["new"]
    model.learn(tid, X[6:], y[6:])
    assert model.stream_choice_["new"] == new
    XP, yP = X[:6], y[:6]
    design = np.hstack([XP, np.ones((6, 1))])
    prec = np.linalg.inv(population.cov)
    served = {"population": np.linalg.solve(design.T @ design / noise + prec,
                                            design.T @ yP / noise + prec @ population.mean)}
    Xc, yc = XP - XP.mean(axis=0), yP - yP.mean()
    K = np.eye(3) / (np.trace(Xc.T @ Xc) / 3)
    lp = np.array([_profiled_log_density(XP, yP, np.zeros(3), om * K) for om in ev.GAUSSIAN_OMEGAS])
    post = np.exp(log_pi["ridge"] + lp - logsumexp(log_pi["ridge"] + lp))
    slopes = sum(w * np.linalg.solve(Xc.T @ Xc + np.linalg.inv(om * K), Xc.T @ yc)
                 for w, om in zip(post, ev.GAUSSIAN_OMEGAS))
    own = yP.mean() - XP.mean(axis=0) @ slopes
    mean, var = population.mean[-1], population.cov[-1, -1]
    served["ridge"] = np.append(slopes, (6 / noise * own + mean / var) / (6 / noise + 1 / var))
    import scipy.stats

    nu = NOISE_PSEUDO_DOF + 6  # the noise's posterior: the prior's degrees of freedom and the earlier rows
    got, want = {}, {}
    for name, theta in served.items():
        residual = y[6:] - np.hstack([X[6:], np.ones((6, 1))]) @ theta
        got[name] = model.stream_choice_["known"]["scores"][name] - before.get(name, 0.0)
        want[name] = scipy.stats.multivariate_t(np.zeros(6), noise * np.eye(6), df=nu).logpdf(residual)
    # scipy's density less the constant common to every family
    assert got["population"] - got["ridge"] == pytest.approx(want["population"] - want["ridge"], rel=1e-7, abs=1e-8)
    const = want["ridge"] - got["ridge"]
    assert const == pytest.approx(float(scipy.special.gammaln((nu + 6) / 2) - scipy.special.gammaln(nu / 2)
                                        - 3 * np.log(nu * noise * np.pi)), rel=1e-9)


def _penalised_logistic_mode(X, y, centre, precision):
    """The mode of ``sum log p(y | X theta) - 1/2 (theta - centre)' P (theta - centre)`` by
    scipy's BFGS (an optimiser independent of the engine's Newton), and its Hessian."""
    import scipy.optimize
    from scipy.special import expit

    def f(theta):
        z = X @ theta
        r = theta - centre
        return np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * r @ precision @ r

    def g(theta):
        return X.T @ (expit(X @ theta) - y) + precision @ (theta - centre)

    theta = scipy.optimize.minimize(f, centre, jac=g, method="BFGS", options={"gtol": 1e-11, "maxiter": 10_000}).x
    p = expit(X @ theta)
    return theta, f(theta), (X.T * (p * (1 - p))) @ X + precision


def _logistic_log_likelihood(X, y, theta):
    z = X @ theta
    return float(-np.sum(np.logaddexp(0.0, z) - y * z))


def test_a_known_logistic_batchs_score_is_the_log_likelihood_of_the_model_each_family_serves():
    """A known classification task's batch adds to each family's score the log-likelihood of
    its labels under the model the family serves from the task's earlier rows (the prior of
    before the batch: the population without the task; every per-task scale set by all its
    rows' design), not the Bayesian predictive, which a wide posterior pulls toward 1/2.
    Here the models are computed with scipy's BFGS: the mixed model's mode under the
    population, and the ridge family's posterior mean over ``omega`` (each ``omega``'s mode
    weighted by its Laplace evidence and the stream's prior over ``omega``)."""
    from core import evidence as ev

    rng = np.random.default_rng(3)
    d, m = 3, rng.normal(size=3)
    model = FCL3(kind="classification", standardize=False)
    tasks = []
    for t in range(14):
        X = rng.normal(size=(12, d))
        y = (rng.random(12) < 1 / (1 + np.exp(-(X @ (m + 0.5 * rng.normal(size=d)) + 0.3)))).astype(float)
        tasks.append((f"t{t}", X, y))
        model.learn(f"t{t}", X[:6], y[:6])
    tid, X, y = tasks[0]
    previous = model.tasks_[tid]
    population = model._population_without(previous)
    log_pi = np.asarray(model.stream_choice_["priors"]["ridge"])
    before = dict(model.stream_choice_["known"]["scores"])
    model.learn(tid, X[6:], y[6:])
    assert model.population_tasks_ and population is not None
    D = np.hstack([X, np.ones((12, 1))])
    P, B = slice(0, 6), slice(6, 12)
    got = {f: model.stream_choice_["known"]["scores"][f] - before.get(f, 0.0) for f in ("population", "ridge")}

    theta_pop = _penalised_logistic_mode(D[P], y[P], population.mean, np.linalg.inv(population.cov))[0]
    assert got["population"] == pytest.approx(_logistic_log_likelihood(D[B], y[B], theta_pop), rel=1e-6)

    Xc = X - X.mean(axis=0)
    unit = 0.25 * np.trace(Xc.T @ Xc) / d  # the omega grid's unit: all the task's rows' design
    intercept = population.predictive()
    b_mean, b_var = float(intercept.mean[-1]), float(intercept.cov[-1, -1])
    thetas, log_w = [], []
    for omega in ev.LOGISTIC_OMEGAS / unit:
        precision = np.diag([1 / omega] * d + [1 / b_var])
        centre = np.array([0.0] * d + [b_mean])
        theta, value, H = _penalised_logistic_mode(D[P], y[P], centre, precision)
        thetas.append(theta)  # Laplace: -value + log det(P)/2 - log det(H)/2, constants aside
        log_w.append(-value + 0.5 * np.linalg.slogdet(precision)[1] - 0.5 * np.linalg.slogdet(H)[1])
    w = np.exp(log_pi + np.array(log_w) - np.max(log_pi + np.array(log_w)))
    theta_ridge = (w / w.sum()) @ np.array(thetas)
    assert got["ridge"] == pytest.approx(_logistic_log_likelihood(D[B], y[B], theta_ridge), rel=1e-5)
    # and not the Bayesian predictive: the evidence of all the rows less that of the earlier ones
    bayes = model._curves(model._evidence_data(model.tasks_[tid]), None, population)["ridge"]
    assert abs(got["ridge"] - (ev.log_sum_exp(log_pi + bayes) - ev.log_sum_exp(log_pi + np.asarray(
        model._curves(model._evidence_data(previous), None, population,
                      design=model._evidence_data(model.tasks_[tid]))["ridge"])))) > 1e-3


def test_a_copy_with_another_family_predicts_with_it_and_the_margins_explain_the_choice():
    """``with_task_family`` serves the family asked for and leaves the learner as it was; with
    the stream's own family it predicts what the learner does. ``family_margins`` gives the
    default and every family's lead and standard error, from which the choice follows."""
    model, tasks = _learnt_for_scores()
    for tid, X, y, _, _ in tasks:
        model.learn(tid, X[6:], y[6:])
    tid, X = tasks[0][0], tasks[0][3]
    before = model.predict(tid, X)
    same = model.with_task_family(model.task_family())
    assert np.array_equal(same.predict(tid, X), model.predict(tid, X))
    other = next(f.name for f in model._families if f.name != model.task_family())
    moved = model.with_task_family(other)
    assert moved.task_family() == other and not np.allclose(moved.predict(tid, X), model.predict(tid, X))
    assert np.array_equal(model.predict(tid, X), before)
    with pytest.raises(ValueError, match="family must be one of"):
        model.with_task_family("nope")
    report = model.family_margins()
    assert report["family"] == model.task_family()
    leads = {f: m["lead"] / m["se"] if m["se"] > 0 else np.inf * np.sign(m["lead"])
             for f, m in report["margins"].items() if f not in model._reference_families}
    ahead = [f for f, t in leads.items() if t > report["threshold"] and report["margins"][f]["lead"] > 0]
    want = max(ahead, key=lambda f: report["margins"][f]["lead"]) if ahead else report["default"]
    assert report["family"] == want
    assert report["margins"][report["default"]] == {"lead": 0.0, "se": 0.0}


def test_a_stream_choice_stored_with_one_set_of_sums_reads_them_as_the_new_tasks():
    """A state from before the known and new tasks' sums were kept apart goes on from its sums:
    they are the new tasks', the next batch adds to its kind."""
    model, tasks = _learnt_for_scores()
    new = model.stream_choice_["new"]
    legacy = {k: v for k, v in model.stream_choice_.items() if k not in ("known", "new")}
    model.stream_choice_ = {**legacy, **new}
    assert model.family_margins()["batches"] == new["batches"]
    tid, X, y = tasks[0][:3]
    model.learn(tid, X[6:], y[6:])
    assert model.stream_choice_["new"] == new and model.stream_choice_["known"]["batches"] == 1
