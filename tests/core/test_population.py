"""The population of task models (core.population) against independent computations:
EM's fixed point against statsmodels' MixedLM, the posterior mean and the pooled intercept
against Gaussian conditioning, logistic modes against scipy's optimiser, the population
family's evidence against the marginal likelihood of the rows."""
import numpy as np
import pytest
import statsmodels.api as sm
from scipy import optimize, stats
from scipy.linalg import null_space

import core.population as population
from core.evidence import GAUSSIAN_OMEGAS, LOGISTIC_OMEGAS, gaussian_fits, logistic_fits
from core.population import Population, fit_population, logistic_mode, pooled_intercept, posterior_mean


def _design(X):
    return np.hstack([X, np.ones((X.shape[0], 1))])


def _grouped(seed, T=40, n=(5, 15), m=(1.0, -0.5, 2.0), sd=(0.5, 0.3, 1.0), sigma=0.7):
    """Random intercept and slopes per group: ``(rows per task, statistics per task)``."""
    rng = np.random.default_rng(seed)
    rows, stats_ = [], []
    for _ in range(T):
        k = int(rng.integers(*n))
        X = rng.standard_normal((k, 2))
        theta = np.array(m) + np.array(sd) * rng.standard_normal(3)
        Xd = _design(X)
        y = Xd @ theta + sigma * rng.standard_normal(k)
        rows.append((X, y))
        stats_.append((k, Xd.T @ Xd, Xd.T @ y, float(y @ y)))
    return rows, stats_


def test_em_reaches_statsmodels_mixed_model_estimates():
    """With the noise at statsmodels' maximum-likelihood estimate, EM's fixed point is the
    maximum likelihood of the mean and covariance of the random intercept and slopes."""
    rows, tasks = _grouped(0)
    y = np.concatenate([r[1] for r in rows])
    exog = np.vstack([np.hstack([np.ones((len(r[1]), 1)), r[0]]) for r in rows])  # const first
    groups = np.concatenate([[i] * len(r[1]) for i, r in enumerate(rows)])
    fit = sm.MixedLM(y, exog, groups=groups, exog_re=exog).fit(reml=False, method="lbfgs")
    s2 = fit.scale
    pop = fit_population([(G / s2, q / s2) for _, G, q, _ in tasks], prior_weight=0.0, tol=1e-12, max_iter=30000,
                         objective_tol=0.0)
    order = [1, 2, 0]  # statsmodels' (const, x1, x2) as ours (x1, x2, bias)
    np.testing.assert_allclose(pop.mean, np.asarray(fit.fe_params)[order], atol=2e-3)
    np.testing.assert_allclose(pop.cov, np.asarray(fit.cov_re)[np.ix_(order, order)], atol=5e-3)


@pytest.mark.parametrize("rows", [(5, 15), (2, 4)])
def test_em_with_the_noise_reaches_statsmodels_mixed_model_estimates_noise_included(rows):
    """With one noise shared by every task (``pseudo_dof`` infinite), the variational EM of
    :func:`fit_gaussian_population` is the mixed model's EM: its fixed point is statsmodels'
    maximum likelihood of the mean, the covariance and the noise, on tasks of 5-15 rows and on
    tasks of 2-4 rows and three parameters, whose own fits have no residual to tell noise by."""
    rows_, tasks = _grouped(0 if rows == (5, 15) else 3, T=200, n=rows)
    y = np.concatenate([r[1] for r in rows_])
    exog = np.vstack([np.hstack([np.ones((len(r[1]), 1)), r[0]]) for r in rows_])
    groups = np.concatenate([[i] * len(r[1]) for i, r in enumerate(rows_)])
    fit = sm.MixedLM(y, exog, groups=groups, exog_re=exog).fit(reml=False, method="lbfgs")
    pop, w = population.fit_gaussian_population(tasks, pseudo_dof=np.inf, prior_weight=0.0, tol=1e-10,
                                                max_iter=30000, objective_tol=0.0)
    order = [1, 2, 0]
    assert pop.noise == pytest.approx(fit.scale, rel=1e-4)
    np.testing.assert_allclose(w, 1.0 / pop.noise)
    np.testing.assert_allclose(pop.mean, np.asarray(fit.fe_params)[order], atol=2e-4)
    np.testing.assert_allclose(pop.cov, np.asarray(fit.cov_re)[np.ix_(order, order)], atol=5e-4)


def test_each_tasks_noise_precision_is_its_variational_fixed_point():
    """:func:`noise_precisions` under a given population: each ``w_t`` equals ``(k + n_t) / (k
    s^2 + r_t)`` with ``r_t`` the expected residual under the task's Gaussian posterior at that
    precision, computed here directly (inverse, mean, trace); with ``pseudo_dof`` infinite,
    ``1 / s^2``."""
    _, tasks = _grouped(5, T=30, n=(2, 9))
    n, G, q, yy = (np.array(c, dtype=float) for c in zip(*tasks))
    pop = Population(np.array([1.0, -0.5, 2.0]), np.diag([0.3, 0.1, 0.9]), 0.4)
    w, s2 = population.noise_precisions(n, G, q, yy, pop, 10.0, tol=1e-12)
    assert s2 == 0.4
    P = np.linalg.inv(pop.cov)
    for t in range(len(n)):
        C = np.linalg.inv(w[t] * G[t] + P)
        mu = C @ (w[t] * q[t] + P @ pop.mean)
        r = yy[t] - 2 * mu @ q[t] + mu @ G[t] @ mu + np.trace(G[t] @ C)
        assert w[t] == pytest.approx((10.0 + n[t]) / (10.0 * s2 + r), rel=1e-9)
    np.testing.assert_array_equal(population.noise_precisions(n, G, q, yy, pop, np.inf)[0], 1.0 / 0.4)


def test_the_typical_noise_is_its_prior_where_the_tasks_cannot_tell_it():
    """A task of as many rows as coefficients cannot tell its noise from the slopes' spread:
    without the noise's prior (``noise_prior_tasks=0``) the fit heads for no noise at all and
    ends where its step limit stops it, another value from every start; with it, the fit is
    one noise of the order of the target's variance (the prior's 1) from any start."""
    _, tasks = _grouped(2, T=1, n=(3, 4))
    starts = (1e-3, 1.0, 30.0)
    bare = [population.fit_gaussian_population(tasks, noises=np.array([s]), noise_prior_tasks=0.0)[0].noise
            for s in starts]
    assert max(bare) < 1e-5 and max(bare) / min(bare) > 1.05  # where each stops: numpy 2.4.6, 1.29; before, 2+
    fits = [population.fit_gaussian_population(tasks, noises=np.array([s]))[0].noise for s in starts]
    np.testing.assert_allclose(fits, fits[0], rtol=1e-5)
    assert 0.3 < fits[0] <= 1.0


def test_the_typical_noise_maximises_its_bound_with_its_prior():
    """At the fit, ``s^2`` maximises ``sum_t (k/2 log s^2 - k s^2 w_t / 2) + k A / 2 (log s^2 -
    s^2)`` given the returned precisions (scipy's bounded maximiser); with many tasks that tell
    their noise, it is within a few per cent of the noise the tasks were drawn with."""
    _, tasks = _grouped(4, T=300, n=(4, 9), sigma=0.7)
    k, A = population.NOISE_PSEUDO_DOF, 1.0
    pop, w = population.fit_gaussian_population(tasks, tol=1e-10, max_iter=30000, objective_tol=0.0,
                                                noise_prior_tasks=A)

    def bound(log_s2):
        s2 = np.exp(log_s2)
        return -(np.sum(k / 2 * log_s2 - k * s2 * w / 2) + k * A / 2 * (log_s2 - s2))

    best = optimize.minimize_scalar(bound, bounds=(-10, 5), method="bounded", options={"xatol": 1e-10})
    assert pop.noise == pytest.approx(np.exp(best.x), rel=1e-6)
    assert pop.noise == pytest.approx(0.7 ** 2, rel=0.1)


def test_a_fit_of_tasks_that_fit_their_rows_exactly_is_one_function_of_their_rows():
    """Twenty tasks of as many rows as coefficients: the fit (SQUAREM with its capped step)
    converges before its step limit to the tight fit's fixed point, and the same rows summed
    in another order (rounding's differences) give the same population."""
    rows, tasks = _grouped(6, T=20, n=(3, 4), sigma=0.05)
    calls = []
    real = population._em_step

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    population._em_step = counted
    try:
        pop, _ = population.fit_gaussian_population(tasks)
    finally:
        population._em_step = real
    assert len(calls) < population.EM_MAX_ITER
    tight, _ = population.fit_gaussian_population(tasks, tol=1e-11, max_iter=30000, objective_tol=0.0)
    np.testing.assert_allclose(pop.cov, tight.cov, rtol=1e-4, atol=1e-7)
    assert pop.noise == pytest.approx(tight.noise, rel=1e-4)
    again = []
    for X, y in rows:
        Xd = _design(X)[::-1]
        again.append((len(y), Xd.T @ Xd, Xd.T @ y[::-1], float(y[::-1] @ y[::-1])))
    other, _ = population.fit_gaussian_population(again)
    np.testing.assert_allclose(other.cov, pop.cov, rtol=1e-6, atol=1e-9)
    assert other.noise == pytest.approx(pop.noise, rel=1e-6)


def test_acceleration_keeps_the_fixed_point():
    """SQUAREM's fit equals plain EM's (many plain steps) to the tolerance."""
    _, tasks = _grouped(1)
    pseudo = [(G / 0.5, q / 0.5) for _, G, q, _ in tasks]
    fast = fit_population(pseudo, prior_weight=1.0, tol=1e-11, max_iter=30000, objective_tol=0.0)
    J, h = (np.array(c) for c in zip(*pseudo))
    x = Population.initial(3).to_array()[:-1]
    for _ in range(5000):
        x = population._em_step(x, J, h, 1.0)
    np.testing.assert_allclose(fast.mean, x[:3], atol=1e-6)
    np.testing.assert_allclose(fast.cov, x[3:].reshape(3, 3), atol=1e-6)


def _pseudo(seed, T=30, sd=(0.5, 0.3, 1.0), noise=0.5):
    _, tasks = _grouped(seed, T=T, sd=sd)
    J, h = (np.array(c) for c in zip(*[(G / noise, q / noise) for _, G, q, _ in tasks]))
    return J, h


def _random_population(rng, d):
    A = rng.standard_normal((d, d))
    return np.concatenate([rng.standard_normal(d), (A @ A.T / d + 0.1 * np.eye(d)).ravel()])


def test_em_log_posterior_is_the_tasks_marginal_likelihood_and_the_priors():
    """``_em_step``'s value, against scipy's densities: task t's rows say ``w_hat_t = J_t^-1 h_t
    ~ N(m, Sigma + J_t^-1)``, the mean's prior is ``N(0, mean_scale^2 I)``, the logistic
    spread's prior the Wishart of ``d + 2`` degrees of freedom and scale ``spread_scale I``, and
    the default's the inverse-Wishart density ``-nu/2 (log det Sigma + s tr(Sigma^-1))``. The
    difference is a constant of the data: equal at every population."""
    J, h = _pseudo(4)
    d = h.shape[1]
    w_hat = np.linalg.solve(J, h[:, :, None])[:, :, 0]
    rng = np.random.default_rng(5)

    def marginal(x):
        m, S = x[:d], x[d:].reshape(d, d)
        return sum(stats.multivariate_normal(m, S + np.linalg.inv(Jt)).logpdf(wt) for Jt, wt in zip(J, w_hat))

    def gaps(prior, **kw):
        out = []
        for _ in range(3):
            x = _random_population(rng, d)
            _, value = population._em_step(x, J, h, 1.0, value=True, **kw)
            out.append(value - marginal(x) - prior(x))
        return np.array(out)

    def inverse_wishart(x):
        S = x[d:].reshape(d, d)
        return -0.5 * (np.linalg.slogdet(S)[1] + population.PRIOR_SCALE * np.trace(np.linalg.inv(S)))

    def logistic_priors(x):
        return (stats.multivariate_normal(np.zeros(d), 4.0 * np.eye(d)).logpdf(x[:d])
                + stats.wishart(df=d + 2, scale=3.0 * np.eye(d)).logpdf(x[d:].reshape(d, d)))

    for g in (gaps(inverse_wishart), gaps(logistic_priors, mean_scale=2.0, spread_scale=3.0)):
        np.testing.assert_allclose(g - g[0], 0.0, atol=1e-8 * np.abs(g).max())


@pytest.mark.parametrize("kw", [{}, {"structure": "diagonal"}, {"structure": "isotropic"},
                                {"mean_scale": 2.0, "spread_scale": 3.0}])
def test_em_climbs_its_log_posterior_to_a_stationary_point(kw):
    """Every plain EM step raises the value (the objective the M-steps maximise, whatever the
    prior and structure), and the fixed point of the full structure is where the value's
    derivative along any symmetric change of the covariance, and of the mean, is zero."""
    J, h = _pseudo(6, T=12)
    d = h.shape[1]
    x = population.Population.initial(d).to_array()[:-1]
    values = []
    for _ in range(60):
        x, value = population._em_step(x, J, h, 1.0, value=True, **kw)
        values.append(value)
    assert np.all(np.diff(values) >= -1e-9 * np.abs(values).max())
    assert values[-1] > values[0]
    if kw.get("structure", "full") != "full":
        return
    pop = fit_population(list(zip(J, h)), tol=1e-13, max_iter=30000, objective_tol=0.0, with_mean_cov=False,
                         mean_scale=kw.get("mean_scale"), spread_scale=kw.get("spread_scale"))
    top = np.concatenate([pop.mean, pop.cov.ravel()])
    f = lambda v: population._em_step(v, J, h, 1.0, value=True, **kw)[1]
    rng = np.random.default_rng(7)
    for _ in range(3):
        B = rng.standard_normal((d, d))
        u = np.concatenate([rng.standard_normal(d), (B + B.T).ravel()])
        u /= np.abs(u).max()
        eps = 1e-5  # central differences: the third-order term is about 2e-4 here, rounding 1e-5
        slope = (f(top + eps * u) - f(top - eps * u)) / (2.0 * eps)
        curvature = (f(top + eps * u) - 2.0 * f(top) + f(top - eps * u)) / eps ** 2
        assert abs(slope) < 2e-3 and curvature < -1.0


def test_the_log_posterior_rule_stops_a_crawl_near_the_top():
    """Tasks whose columns are rare 0/1 indicators and whose slopes are all alike: the
    covariance's small variances, which the data hardly inform, make EM crawl (parameters
    moving by 1e-4 a step long after the value has stopped rising); the rule on the log
    posterior stops it in a third of the steps, at a value within a thousandth of a nat per
    task of EM's fixed point."""
    rng = np.random.default_rng(0)
    T, d, mean = 40, 9, rng.standard_normal(9)
    J, h = [], []
    for _ in range(T):
        k = int(rng.integers(10, 40))
        X = np.hstack([(rng.random((k, d - 1)) < 0.05).astype(float), np.ones((k, 1))])
        y = X @ (mean + np.append(np.zeros(d - 1), rng.standard_normal())) + rng.standard_normal(k)
        J.append(X.T @ X)
        h.append(X.T @ y)
    J, h = np.array(J), np.array(h)
    counted = {"steps": 0}
    step = population._em_step

    def counting(*a, **k):
        counted["steps"] += 1
        return step(*a, **k)

    value = lambda p: step(np.concatenate([p.mean, p.cov.ravel()]), J, h, 1.0, value=True)[1]
    top = fit_population(list(zip(J, h)), tol=1e-13, max_iter=60000, objective_tol=0.0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(population, "_em_step", counting)
        fit_population(list(zip(J, h)), objective_tol=0.0)
        crawl_steps, counted["steps"] = counted["steps"], 0
        stopped = fit_population(list(zip(J, h)))
    assert crawl_steps >= 100 and counted["steps"] <= crawl_steps / 2.5
    assert value(top) - 1e-3 * T <= value(stopped) <= value(top) + 1e-9 * T


def test_task_noises_shrink_in_log_space_toward_the_typical_noise():
    rss, dof = np.array([10.0, 4000.0, 0.0, 1.0]), np.array([10.0, 40.0, 0.0, 1.0])
    noises, typical = population.task_noises(rss, dof, pseudo_dof=10.0)
    own = rss[[0, 1, 3]] / dof[[0, 1, 3]]
    assert typical == pytest.approx(np.exp(np.sum(dof[[0, 1, 3]] * np.log(own)) / 51.0))
    assert noises[2] == pytest.approx(typical)  # no rows of its own: the typical value
    assert noises[1] == pytest.approx(np.exp((40 * np.log(100.0) + 10 * np.log(typical)) / 50))
    assert noises[0] < noises[1]  # orders of magnitude apart stay apart


def test_posterior_mean_is_gaussian_conditioning():
    rng = np.random.default_rng(2)
    X, y = _design(rng.standard_normal((6, 2))), rng.standard_normal(6)
    pop = Population(np.array([0.3, -1.0, 0.5]), np.array([[1.0, 0.2, 0], [0.2, 0.5, 0.1], [0, 0.1, 2.0]]), 0.7)
    got = posterior_mean(X.T @ X / pop.noise, X.T @ y / pop.noise, pop)
    # independent: the joint Gaussian of (theta, y), conditioned on y
    S_yy = X @ pop.cov @ X.T + pop.noise * np.eye(6)
    want = pop.mean + pop.cov @ X.T @ np.linalg.solve(S_yy, y - X @ pop.mean)
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_pooled_intercept_is_the_conditional_posterior():
    pop = Population(np.array([0.3, -1.0, 0.5]), np.array([[1.0, 0.2, 0.3], [0.2, 0.5, 0.1], [0.3, 0.1, 2.0]]), 0.7)
    slopes = np.array([0.1, 0.4])
    # the intercept's conditional prior given the slopes, by Gaussian conditioning
    S = pop.cov
    mean_c = pop.mean[2] + S[2, :2] @ np.linalg.solve(S[:2, :2], slopes - pop.mean[:2])
    var_c = S[2, 2] - S[2, :2] @ np.linalg.solve(S[:2, :2], S[:2, 2])
    assert pop.intercept_given(slopes) == pytest.approx((mean_c, var_c))
    # n rows with residual mean r (given the slopes) and noise s2: the posterior of the intercept
    n, r, s2 = 7, 1.3, 0.7
    want = (n * r / s2 + mean_c / var_c) / (n / s2 + 1 / var_c)
    assert pooled_intercept(r, n / s2, pop, slopes) == pytest.approx(want)
    assert pooled_intercept(r, 1e12, pop, slopes) == pytest.approx(r)  # a huge task keeps its own
    # without slopes: the intercept's marginal prior
    assert pooled_intercept(r, n / s2, pop, None) == pytest.approx((n * r / s2 + 0.5 / 2.0) / (n / s2 + 1 / 2.0))


def test_population_round_trips_as_an_array():
    pop = Population(np.array([0.3, -1.0]), np.array([[1.0, 0.2], [0.2, 0.5]]), 0.7)
    back = Population.from_array(pop.to_array())
    np.testing.assert_array_equal(back.mean, pop.mean)
    np.testing.assert_array_equal(back.cov, pop.cov)
    assert back.noise == pop.noise
    assert back.slopes().cov.shape == (1, 1)


def test_logistic_mode_matches_scipy():
    rng = np.random.default_rng(1)
    X = _design(rng.standard_normal((30, 2)))
    y = (rng.random(30) < 0.4).astype(float)
    centre, P = np.array([0.5, -0.2]), np.array([[2.0, 0.3], [0.3, 1.0]])
    w, H = logistic_mode(X, y, centre, P)

    def f(v):
        z = X @ v
        r = v[:-1] - centre
        return np.sum(np.logaddexp(0, z) - y * z) + 0.5 * r @ P @ r + 0.5e-8 * v[-1] ** 2
    ref = optimize.minimize(f, np.zeros(3), method="BFGS", options={"gtol": 1e-10}).x
    np.testing.assert_allclose(w, ref, atol=1e-5)
    p = 1 / (1 + np.exp(-(X @ w)))
    want = (X.T * (p * (1 - p))) @ X
    want[:-1, :-1] += P
    want[-1, -1] += 1e-8
    np.testing.assert_allclose(H, want, rtol=1e-8)


def test_population_evidence_is_the_marginal_likelihood():
    """gaussian_fits with a given factor: the evidence differences over omega are those of the
    centred rows' marginal likelihood with sigma^2 profiled (the constants cancel)."""
    rng = np.random.default_rng(5)
    X, y = rng.standard_normal((9, 2)), rng.standard_normal(9)
    Xd = _design(X)
    pop = Population(np.array([0.4, -0.3]), np.array([[0.5, 0.1], [0.1, 0.3]]), 0.8)
    R = np.linalg.cholesky(pop.cov / pop.noise)
    E, _ = gaussian_fits(9, Xd.T @ Xd, Xd.T @ y, float(y @ y), pop.mean[None, :], None, 0.0, R)
    Q = null_space(np.ones((1, 9)))
    Xq, yq = Q.T @ X, Q.T @ y
    direct = []
    for om in GAUSSIAN_OMEGAS:
        V = np.eye(8) + om * Xq @ (pop.cov / pop.noise) @ Xq.T
        r = yq - Xq @ pop.mean
        quad = r @ np.linalg.solve(V, r)
        direct.append(-0.5 * 8 * np.log(quad / 8) - 0.5 * np.linalg.slogdet(V)[1])
    np.testing.assert_allclose(E[0] - E[0, 0], np.array(direct) - direct[0], atol=1e-8)


def test_logistic_population_evidence_is_laplace():
    rng = np.random.default_rng(6)
    X = _design(rng.standard_normal((25, 2)))
    y = (rng.random(25) < 0.5).astype(float)
    pop = Population(np.array([0.3, 0.1]), np.array([[0.6, 0.1], [0.1, 0.4]]))
    E, TH = logistic_fits(X, y, pop.mean[None, :], None, 0.0, np.linalg.cholesky(pop.cov))

    def laplace(j):
        K = LOGISTIC_OMEGAS[j] * pop.cov
        w = TH[1, j]
        p = 1 / (1 + np.exp(-(X @ w)))
        H = (X.T * (p * (1 - p))) @ X
        H[:-1, :-1] += np.linalg.inv(K)
        z = X @ w
        return (-np.sum(np.logaddexp(0, z) - y * z) + stats.multivariate_normal(pop.mean, K).logpdf(w[:-1])
                - 0.5 * np.linalg.slogdet(H)[1])
    # E drops the constants common to every omega: compare differences between omegas
    assert E[1, 9] - E[1, 6] == pytest.approx(laplace(9) - laplace(6), abs=1e-6)
    assert E[1, 3] - E[1, 6] == pytest.approx(laplace(3) - laplace(6), abs=1e-6)


def _logistic_tasks(seed, T=30, n=(2, 6), mean=(-0.8, 1.2), sd=(0.4, 0.6)):
    """Logistic tasks of a few rows each, slope and intercept drawn per task."""
    rng = np.random.default_rng(seed)
    tasks = []
    for _ in range(T):
        k = int(rng.integers(*n))
        X = _design(rng.standard_normal((k, 1)))
        theta = np.array(mean) + np.array(sd) * rng.standard_normal(2)
        y = (rng.random(k) < 1 / (1 + np.exp(-(X @ theta)))).astype(float)
        tasks.append((X, y))
    return tasks


def test_logistic_pseudo_observation_is_the_likelihoods_second_order_expansion():
    """At w the quadratic ``-1/2 t'Jt + h't`` has the log-likelihood's gradient and Hessian
    (finite differences)."""
    from core.population import logistic_pseudo_observation
    rng = np.random.default_rng(3)
    X, y = _design(rng.standard_normal((7, 2))), (rng.random(7) < 0.5).astype(float)
    w = rng.standard_normal(3)
    J, h = logistic_pseudo_observation(X, y, w)
    loglik = lambda v: -np.sum(np.logaddexp(0, X @ v) - y * (X @ v))
    eps = 1e-6
    grad = np.array([(loglik(w + eps * e) - loglik(w - eps * e)) / (2 * eps) for e in np.eye(3)])
    np.testing.assert_allclose(h - J @ w, grad, atol=1e-6)
    eps = 1e-4
    hess = np.array([[(loglik(w + eps * a + eps * b) - loglik(w + eps * a - eps * b) - loglik(w - eps * a + eps * b)
                       + loglik(w - eps * a - eps * b)) / (4 * eps * eps) for b in np.eye(3)] for a in np.eye(3)])
    np.testing.assert_allclose(-J, hess, atol=1e-6)


@pytest.mark.parametrize("rows, slack", [((2, 4), 1e-6), ((2, 7), 0.02)])
def test_logistic_population_maximises_its_marginal_objective(rows, slack):
    """On tasks of two or three rows (their marginal likelihood exact, EM exact) the
    population is a maximum of the marginal likelihood: no perturbation of the mean or the
    covariance (scipy's Nelder-Mead from it) finds more. With tasks of more rows (Laplace's
    expansion, whose EM fixed point ignores how the modes move with the population) it is
    within ``slack`` nats per task of one."""
    from core.population import fit_logistic_population, marginal_objective
    tasks = _logistic_tasks(0, n=rows)
    pop = fit_logistic_population(tasks, tol=1e-8)
    best = marginal_objective(tasks, pop)[0]

    def negative(v):
        L = np.array([[np.exp(v[2]), 0.0], [v[3], np.exp(v[4])]])
        return -marginal_objective(tasks, Population(v[:2], L @ L.T))[0]
    L0 = np.linalg.cholesky(pop.cov)
    v0 = np.array([*pop.mean, np.log(L0[0, 0]), L0[1, 0], np.log(L0[1, 1])])
    res = optimize.minimize(negative, v0, method="Nelder-Mead", options={"xatol": 1e-6, "fatol": 1e-9, "maxiter": 4000})
    assert -res.fun <= best + 1e-6 + slack * len(tasks)
    assert -res.fun > best - 1e-6  # Nelder-Mead started from it


def test_logistic_population_mean_is_the_pooled_fit_when_tasks_agree():
    """Tasks drawn with no spread between them: the population mean is close to one pooled
    logistic regression (scipy) over every row, and its spread is small. (Tasks of two or three
    binary rows alone cannot show whether tasks differ: their spread is then the prior's.)"""
    from core.population import fit_logistic_population
    tasks = _logistic_tasks(1, T=300, n=(8, 12), sd=(0.0, 0.0))
    X, y = np.vstack([t[0] for t in tasks]), np.concatenate([t[1] for t in tasks])
    pooled = optimize.minimize(lambda v: np.sum(np.logaddexp(0, X @ v) - y * (X @ v)), np.zeros(2), method="BFGS").x
    pop = fit_logistic_population(tasks)
    np.testing.assert_allclose(pop.mean, pooled, atol=0.1)
    assert np.all(np.linalg.eigvalsh(pop.cov) < 0.1)


def test_logistic_population_stays_finite_on_separable_rows():
    """A few one-row tasks whose pooled rows are separable: the mean's prior keeps it finite."""
    from core.population import LOGISTIC_MEAN_SCALE, fit_logistic_population
    xs, ys = [-1.5, -0.3, 0.9, 0.9, 0.9], [0.0, 0.0, 1.0, 1.0, 1.0]
    pop = fit_logistic_population([(_design(np.array([[x]])), np.array([y])) for x, y in zip(xs, ys)])
    assert np.all(np.isfinite(pop.to_array()))
    assert np.all(np.abs(pop.mean) < 3 * LOGISTIC_MEAN_SCALE)


def test_logistic_modes_with_a_precision_per_centre_match_one_at_a_time():
    rng = np.random.default_rng(4)
    X, y = _design(rng.standard_normal((12, 2))), (rng.random(12) < 0.4).astype(float)
    C = rng.standard_normal((4, 2))
    P = np.array([np.eye(2) * s for s in (0.01, 0.3, 1.0, 50.0)])
    W, H = population.logistic_modes(X, y, C, P)
    for k in range(4):
        w, h = logistic_mode(X, y, C[k], P[k])
        np.testing.assert_allclose(W[k], w, atol=1e-8)
        np.testing.assert_allclose(H[k], h, rtol=1e-8)


def test_logistic_modes_of_tasks_with_their_own_rows_match_scipy_task_by_task():
    rng = np.random.default_rng(6)
    X = np.array([_design(rng.standard_normal((9, 2))) for _ in range(5)])  # (k, n, d + 1)
    y = (rng.random((5, 9)) < 0.4).astype(float)
    C = rng.standard_normal((5, 3))
    P = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.1], [0.0, 0.1, 0.5]])
    W, H = population.logistic_modes(X, y, C, P, W0=rng.standard_normal((5, 3)))
    for k in range(5):
        def f(v):
            z = X[k] @ v
            return np.sum(np.logaddexp(0, z) - y[k] * z) + 0.5 * (v - C[k]) @ P @ (v - C[k])
        ref = optimize.minimize(f, np.zeros(3), method="BFGS", options={"gtol": 1e-10}).x
        np.testing.assert_allclose(W[k], ref, atol=1e-5)
        p = 1 / (1 + np.exp(-(X[k] @ W[k])))
        np.testing.assert_allclose(H[k], (X[k].T * (p * (1 - p))) @ X[k] + P, rtol=1e-8)


def test_laplace_marginal_likelihood_of_tasks_of_several_sizes_matches_a_direct_computation():
    """Tasks of more than QUADRATURE_ROWS rows (of 4, 6 and 9 rows, in mixed order): the
    marginal objective is the log priors plus each task's Laplace approximation at its mode,
    the modes found by scipy here."""
    from core.population import QUADRATURE_ROWS, _log_prior, marginal_objective
    rng = np.random.default_rng(7)
    sizes = [6, 4, 9, 4, 6, 9, 6]
    assert min(sizes) > QUADRATURE_ROWS
    tasks = [(_design(rng.standard_normal((n, 2))), (rng.random(n) < 0.5).astype(float)) for n in sizes]
    pop = Population(np.array([0.4, -0.3, 0.2]), np.array([[1.0, 0.2, 0.1], [0.2, 0.8, 0.0], [0.1, 0.0, 0.6]]))
    prec = np.linalg.inv(pop.cov)
    want = _log_prior(pop)
    for X, y in tasks:
        def f(v):
            z = X @ v
            return np.sum(np.logaddexp(0, z) - y * z) + 0.5 * (v - pop.mean) @ prec @ (v - pop.mean)
        w = optimize.minimize(f, np.zeros(3), method="BFGS", options={"gtol": 1e-10}).x
        p = 1 / (1 + np.exp(-(X @ w)))
        H = (X.T * (p * (1 - p))) @ X + prec
        want += -f(w) + 0.5 * np.linalg.slogdet(prec)[1] - 0.5 * np.linalg.slogdet(H)[1]
    total, modes, sites = marginal_objective(tasks, pop)
    np.testing.assert_allclose(total, want, rtol=0, atol=1e-8)
    for (X, y), w, (J, h) in zip(tasks, modes, sites):
        p = 1 / (1 + np.exp(-(X @ w)))
        np.testing.assert_allclose(J, (X.T * (p * (1 - p))) @ X, rtol=1e-12)
        np.testing.assert_allclose(h, J @ w + X.T @ (y - p), rtol=1e-12, atol=1e-12)


def test_refit_is_due_on_growth_or_on_updates_of_known_tasks():
    from core.population import refit_due
    assert not refit_due(100, 10, 110)
    assert refit_due(100, 10, 125)       # the tasks grew by a quarter
    assert refit_due(100, 25, 100)       # a quarter as many updates of known tasks
    assert not refit_due(100, 24, 124)


def test_small_task_posteriors_match_brute_force_integration():
    """The exact (quadrature) marginal likelihood, posterior mean and covariance of a task of
    two or three logistic rows match an independent computation: importance sampling from
    the prior with two million draws (rows repeated, so the logits' covariance is singular,
    included)."""
    from core.population import small_task_posteriors
    rng = np.random.default_rng(0)
    for n, repeated in ((1, False), (2, False), (2, True), (3, False)):
        X = _design(rng.standard_normal((n, 2)))
        if repeated:
            X[1] = X[0]
        y = (rng.random(n) < 0.5).astype(float)
        A = rng.standard_normal((3, 3))
        pop = Population(rng.standard_normal(3), A @ A.T + 0.3 * np.eye(3))
        log_z, mean, cov = small_task_posteriors(X[None], y[None], pop.mean, pop.cov, points=20)
        draws = rng.multivariate_normal(pop.mean, pop.cov, size=2_000_000)
        lik = np.exp(-np.sum(np.logaddexp(0.0, -(2 * y - 1) * (draws @ X.T)), axis=1))
        w = lik / lik.sum()
        m = w @ draws
        c = (draws - m).T @ ((draws - m) * w[:, None])
        assert abs(log_z[0] - np.log(lik.mean())) < 2e-3
        np.testing.assert_allclose(mean[0], m, atol=1e-2)
        np.testing.assert_allclose(cov[0], c, atol=2e-2)


def test_moment_sites_give_back_the_posterior():
    """The Gaussian site of a small task, combined with the prior, has the task's exact
    posterior mean and covariance, and is positive semi-definite."""
    from core.population import moment_sites, small_task_posteriors
    rng = np.random.default_rng(1)
    X = np.stack([_design(rng.standard_normal((2, 2))) for _ in range(5)])
    y = (rng.random((5, 2)) < 0.5).astype(float)
    pop = Population(np.array([0.3, -0.2, 0.5]), np.diag([0.5, 2.0, 1.5]))
    _, means, covs = small_task_posteriors(X, y, pop.mean, pop.cov)
    J, h = moment_sites(means, covs, pop)
    P = np.linalg.inv(pop.cov)
    for t in range(5):
        assert np.all(np.linalg.eigvalsh(J[t]) > -1e-10)
        np.testing.assert_allclose(np.linalg.inv(J[t] + P), covs[t], atol=1e-8)
        np.testing.assert_allclose(np.linalg.solve(J[t] + P, h[t] + P @ pop.mean), means[t], atol=1e-8)


def test_logistic_population_finds_the_intercepts_spread_of_tasks_of_two_rows():
    """Tasks of two binary rows with intercepts of standard deviation 1.5 and one shared slope:
    the population's intercept variance is near the maximum-likelihood estimate of a
    random-intercept model integrated by quadrature (scipy), where the Laplace approximation
    puts it near zero."""
    from core.population import fit_logistic_population
    rng = np.random.default_rng(5)
    tasks = []
    for _ in range(300):
        X = _design(rng.standard_normal((2, 1)))
        theta = np.array([0.5, 0.8 + 1.5 * rng.standard_normal()])
        tasks.append((X, (rng.random(2) < 1 / (1 + np.exp(-(X @ theta)))).astype(float)))
    ml = _quadrature_random_intercept(tasks)
    pop = fit_logistic_population(tasks)
    assert abs(np.sqrt(pop.cov[1, 1]) - np.exp(ml[2])) < 0.3
    np.testing.assert_allclose(pop.mean, ml[:2], atol=0.2)


def test_mean_covariance_is_the_inverse_information_of_the_mean():
    """For tasks with invertible precisions the mean's covariance is ``(sum_t (Sigma +
    J_t^-1)^-1)^-1`` computed with explicit inverses, and a Monte Carlo check of the
    generalised-least-squares mean over draws of the tasks agrees; a direction no task
    informs gets a variance far above every informed one."""
    from core.population import mean_covariance
    rng = np.random.default_rng(7)
    d, T = 3, 40
    A = rng.standard_normal((d, d))
    pop = Population(np.zeros(d), A @ A.T / d + 0.2 * np.eye(d))
    Js = []
    for _ in range(T):
        B = rng.standard_normal((6, d))
        Js.append(B.T @ B)
    Js = np.array(Js)
    W = np.array([np.linalg.inv(pop.cov + np.linalg.inv(J)) for J in Js])
    expected = np.linalg.inv(W.sum(axis=0))
    np.testing.assert_allclose(mean_covariance(Js, pop), expected, rtol=1e-8, atol=1e-12)
    # Monte Carlo: each task's own estimate is N(m, Sigma + J^-1); the GLS mean's spread
    L = [np.linalg.cholesky(pop.cov + np.linalg.inv(J)) for J in Js]
    draws = []
    for _ in range(4000):
        est = np.array([l @ rng.standard_normal(d) for l in L])
        draws.append(expected @ np.einsum("tij,tj->i", W, est))
    np.testing.assert_allclose(np.cov(np.array(draws).T), expected, rtol=0.1, atol=1e-3)
    # tasks that never see the last coordinate: its mean is unknown
    Js_blind = Js.copy()
    Js_blind[:, -1, :] = 0.0
    Js_blind[:, :, -1] = 0.0
    V = mean_covariance(Js_blind, pop)
    assert V[-1, -1] > 1e6 * V[0, 0]
    assert np.all(np.isfinite(V))


def test_predictive_population_adds_the_means_uncertainty():
    pop = Population(np.zeros(2), np.eye(2) * 0.5, 1.0, np.diag([0.1, 2.0]))
    pred = pop.predictive()
    np.testing.assert_allclose(pred.cov, np.diag([0.6, 2.5]))
    np.testing.assert_allclose(pop.slopes().predictive().cov, [[0.6]])
    assert Population(np.zeros(2), np.eye(2)).predictive().cov is not None


def _quadrature_random_intercept(tasks, points=40):
    """The maximum-likelihood random-intercept logistic model (shared slope, ``N(b, s^2)``
    intercepts) by Gauss-Hermite quadrature over each task's intercept and scipy's
    Nelder-Mead: ``(slope, mean intercept, log s)``."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(points)

    def negative(v):
        b = v[1] + np.exp(v[2]) * nodes
        total = 0.0
        for X, y in tasks:
            z = X[:, :1] * v[0] + b[None, :]
            total += np.log(weights @ np.exp(-np.sum(np.logaddexp(0, z) - y[:, None] * z, axis=0)) / np.sqrt(2 * np.pi))
        return -total
    return optimize.minimize(negative, np.array([0.0, 0.0, 0.0]), method="Nelder-Mead",
                             options={"xatol": 1e-6, "fatol": 1e-8, "maxiter": 4000}).x


def _shared_slope_tasks(seed, T=300, n=2, slope=0.5, intercept_sd=1.5):
    rng = np.random.default_rng(seed)
    tasks = []
    for _ in range(T):
        X = _design(rng.standard_normal((n, 1)))
        theta = np.array([slope, 0.8 + intercept_sd * rng.standard_normal()])
        tasks.append((X, (rng.random(n) < 1 / (1 + np.exp(-(X @ theta)))).astype(float)))
    return tasks


def test_shared_slopes_population_is_the_random_intercept_maximum_likelihood():
    """With shared slopes the logistic population of tasks of two binary rows is the
    maximum-likelihood random-intercept model computed independently (quadrature over the
    intercept, Nelder-Mead over the slope, the mean intercept and its spread), to within the
    weak priors' pull; its slopes keep only :data:`SHARED_SLOPE_VARIANCE`."""
    from core.population import SHARED_SLOPE_VARIANCE, fit_logistic_population, population_structure
    tasks = _shared_slope_tasks(5)
    ml = _quadrature_random_intercept(tasks)
    pop = fit_logistic_population(tasks, structure="shared_slopes", tol=1e-8)
    assert population_structure(pop) == "shared_slopes"
    assert pop.cov[0, 0] == SHARED_SLOPE_VARIANCE and pop.cov[0, 1] == 0.0
    np.testing.assert_allclose(pop.mean, ml[:2], atol=0.02)
    assert abs(np.sqrt(pop.cov[1, 1]) - np.exp(ml[2])) < 0.05


def test_fit_shared_slopes_maximises_the_sites_marginal_likelihood():
    """The shared-slopes step is the maximum over ``(m, v)`` of the Gaussian sites' marginal
    likelihood written with explicit inverses (``N(h_t; J_t m, J_t + J_t Sigma J_t)`` up to
    terms free of ``m`` and ``Sigma``, for invertible ``J_t``) plus the priors: scipy's
    Nelder-Mead from it finds no more."""
    from core.population import LOGISTIC_MEAN_SCALE, LOGISTIC_SPREAD_SCALE, SHARED_SLOPE_VARIANCE, fit_shared_slopes
    rng = np.random.default_rng(2)
    sites = []
    for _ in range(50):
        A = rng.standard_normal((2, 2))
        J = A @ A.T + 0.3 * np.eye(2)
        theta = np.array([0.7, -0.4 + 1.2 * rng.standard_normal()])
        sites.append((J, J @ theta + np.linalg.cholesky(J) @ rng.standard_normal(2)))

    def objective(v):
        cov = np.diag([SHARED_SLOPE_VARIANCE, np.exp(v[2])])
        total = 0.0
        for J, h in sites:  # the site says w = J^-1 h ~ N(theta, J^-1), theta ~ N(m, Sigma)
            w = np.linalg.solve(J, h)
            total += stats.multivariate_normal(v[:2], cov + np.linalg.inv(J)).logpdf(w) - 0.5 * np.linalg.slogdet(J)[1]
        return total + 0.5 * np.log(np.linalg.det(cov)) - 0.5 * np.trace(cov) / LOGISTIC_SPREAD_SCALE \
            - 0.5 * v[:2] @ v[:2] / LOGISTIC_MEAN_SCALE ** 2
    pop = fit_shared_slopes(sites)
    v0 = np.array([*pop.mean, np.log(pop.cov[1, 1])])
    res = optimize.minimize(lambda v: -objective(v), v0, method="Nelder-Mead",
                            options={"xatol": 1e-8, "fatol": 1e-10, "maxiter": 4000})
    assert -res.fun <= objective(v0) + 1e-6
    np.testing.assert_allclose(res.x, v0, atol=1e-3)


@pytest.mark.parametrize("slope_sd, correlation, expected",
                         [(0.0, 0.0, "shared_slopes"), (2.0, 0.0, "diagonal"), (2.0, 0.95, "full")])
def test_logistic_population_structure_follows_the_evidence(slope_sd, correlation, expected):
    """Tasks with one shared slope get the shared-slopes population; slopes that differ
    widely, independently of the intercepts, the diagonal one; slopes that move with the
    intercepts, the full one (150 tasks of 12 rows each, enough to show their spread)."""
    from core.population import choose_logistic_population, population_structure
    rng = np.random.default_rng(11)
    tasks = []
    for _ in range(150):
        X = _design(rng.standard_normal((12, 1)))
        a, b = rng.standard_normal(2)
        theta = np.array([0.5 + slope_sd * a, 0.3 + 1.5 * (correlation * a + np.sqrt(1 - correlation ** 2) * b)])
        tasks.append((X, (rng.random(12) < 1 / (1 + np.exp(-(X @ theta)))).astype(float)))
    assert population_structure(choose_logistic_population(tasks)) == expected


def test_diagonal_population_maximises_its_marginal_objective():
    """On tasks of two or three rows (exact marginal likelihood) the diagonal population is a
    maximum of the marginal objective over diagonal covariances: scipy's Nelder-Mead from it
    finds no more."""
    from core.population import fit_logistic_population, marginal_objective, population_structure
    tasks = _logistic_tasks(0, n=(2, 4))
    pop = fit_logistic_population(tasks, structure="diagonal", tol=1e-8)
    assert population_structure(pop) == "diagonal"
    best = marginal_objective(tasks, pop)[0]

    def negative(v):
        return -marginal_objective(tasks, Population(v[:2], np.diag(np.exp(v[2:]))))[0]
    v0 = np.array([*pop.mean, *np.log(np.diag(pop.cov))])
    res = optimize.minimize(negative, v0, method="Nelder-Mead", options={"xatol": 1e-6, "fatol": 1e-9, "maxiter": 4000})
    assert -res.fun <= best + 1e-6


def test_population_without_a_task_is_the_others_gls_mean_and_one_em_step():
    """Squared loss: the population without task t has exactly the generalised least-squares
    mean of the other tasks given the fitted covariance, and that mean's covariance (computed
    here from the others' ``(Sigma + J_s^-1)^-1``), and the covariance of one EM step over the
    other tasks from the fit (core.population._em_step on them); and it is much nearer the
    population refitted on the others to convergence than the fit with t is."""
    from core.population import PRIOR_WEIGHT, _em_step, without_task
    _, stats_ = _grouped(3, T=15)
    tasks = [(g / 0.49, m / 0.49) for _, g, m, _ in stats_]
    full = fit_population(tasks, tol=1e-13, max_iter=3000, objective_tol=0.0)
    for t in (0, 6, 14):
        others = tasks[:t] + tasks[t + 1:]
        out = without_task(full, tasks[t], len(tasks))
        J, h = np.array([a for a, _ in others]), np.array([b for _, b in others])
        W = np.linalg.inv(full.cov + np.linalg.inv(J))
        gls = np.linalg.solve(W.sum(0), np.einsum("tij,tjk,tk->i", W, np.linalg.inv(J), h))
        np.testing.assert_allclose(out.mean, gls, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(out.mean_cov, np.linalg.inv(W.sum(0)), rtol=1e-8, atol=1e-12)
        step = _em_step(np.concatenate([full.mean, full.cov.ravel()]), J, h, PRIOR_WEIGHT)
        np.testing.assert_allclose(out.cov, step[3:].reshape(3, 3), rtol=1e-8, atol=1e-12)
        refit = fit_population(others, full, tol=1e-13, max_iter=3000, objective_tol=0.0)
        assert np.abs(out.mean - refit.mean).max() < 0.5 * np.abs(full.mean - refit.mean).max()
        assert np.abs(out.cov - refit.cov).max() < 0.8 * np.abs(full.cov - refit.cov).max()


@pytest.mark.parametrize("structure", ["full", "diagonal", "shared_slopes"])
def test_logistic_population_without_a_task_is_nearer_the_refit_without_it(structure):
    """Logistic loss, each structure: the population without task t keeps its structure, and
    its mean is several times nearer the population refitted on the other tasks from scratch
    than the fit with t is (its covariance, one EM step, moves a little that way)."""
    from core.population import (LOGISTIC_SPREAD_SCALE, fitted_logistic_population, marginal_objective,
                                 population_structure, without_task)
    tasks = _logistic_tasks(0, T=30, n=(4, 12), sd=(0.8, 1.0))
    full = fitted_logistic_population(tasks, structure=structure, tol=1e-10, rounds=200)[0]
    gains = []
    for t in (0, 7, 19):
        others = tasks[:t] + tasks[t + 1:]
        refit = fitted_logistic_population(others, structure=structure, tol=1e-10, rounds=200)[0]
        site = marginal_objective([tasks[t]], full)[2][0]
        out = without_task(full, site, len(tasks), spread_scale=LOGISTIC_SPREAD_SCALE)
        assert population_structure(out) == structure
        gains.append(np.abs(full.mean - refit.mean).max() / np.abs(out.mean - refit.mean).max())
    assert min(gains) > 1.5 and np.median(gains) > 5.0


def test_logistic_random_slopes_need_more_rows_than_random_effects():
    """Slopes that differ widely (the diagonal structure, with rows to show it) are shared when
    the tasks have no more rows than a random-slopes model has random effects (lme4's check)."""
    from core.population import choose_logistic_population, population_structure
    rng = np.random.default_rng(11)

    def tasks(rows):
        out = []
        for _ in range(150):
            X = _design(rng.standard_normal((rows, 1)))
            theta = np.array([0.5 + 2.0 * rng.standard_normal(), 0.3 + 1.5 * rng.standard_normal()])
            out.append((X, (rng.random(rows) < 1 / (1 + np.exp(-(X @ theta)))).astype(float)))
        return out
    assert population_structure(choose_logistic_population(tasks(12))) == "diagonal"
    assert population_structure(choose_logistic_population(tasks(2))) == "shared_slopes"


def _logistic_tasks_of_slopes(seed, slope_sds, T=40, n=(8, 16), intercept=(0.3, 0.8)):
    """Logistic tasks with one slope per entry of ``slope_sds`` (mean 0.4 each, spread by the
    entry) and a random intercept (mean, sd)."""
    rng = np.random.default_rng(seed)
    sds = np.asarray(slope_sds, dtype=float)
    tasks = []
    for _ in range(T):
        k = int(rng.integers(*n))
        X = _design(rng.standard_normal((k, sds.size)))
        theta = np.append(0.4 + sds * rng.standard_normal(sds.size), intercept[0] + intercept[1] * rng.standard_normal())
        tasks.append((X, (rng.random(k) < 1 / (1 + np.exp(-(X @ theta)))).astype(float)))
    return tasks


def test_isotropic_population_maximises_its_marginal_objective():
    """On tasks of two or three rows (exact marginal likelihood) the isotropic population (one
    variance for every slope) is a maximum of the marginal objective over such covariances:
    scipy's Nelder-Mead from it finds no more."""
    from core.population import fit_logistic_population, marginal_objective, population_structure
    tasks = _logistic_tasks_of_slopes(4, [0.7, 0.7], T=60, n=(2, 4))
    pop = fit_logistic_population(tasks, structure="isotropic", tol=1e-9, rounds=200)
    assert population_structure(pop) == "isotropic"

    def negative(v):
        return -marginal_objective(tasks, Population(v[:3], np.diag(np.exp(v[[3, 3, 4]]))))[0]
    v0 = np.array([*pop.mean, np.log(pop.cov[0, 0]), np.log(pop.cov[2, 2])])
    res = optimize.minimize(negative, v0, method="Nelder-Mead", options={"xatol": 1e-7, "fatol": 1e-10, "maxiter": 6000})
    assert -res.fun <= -negative(v0) + 1e-5


@pytest.mark.parametrize("slope_sds, expected", [([1.0, 1.0, 1.0], "isotropic"), ([0.1, 0.1, 2.5], "diagonal")])
def test_logistic_population_structure_tells_equal_spreads_from_unequal(slope_sds, expected):
    """Slopes of one spread get the isotropic population (two variances where the diagonal one
    spends four); slopes of very different spreads the diagonal one (300 tasks of 20-30 rows)."""
    from core.population import choose_logistic_population, population_structure
    tasks = _logistic_tasks_of_slopes(5, slope_sds, T=300, n=(20, 30))
    assert population_structure(choose_logistic_population(tasks)) == expected


def test_logistic_population_without_a_task_keeps_the_isotropic_structure():
    """The isotropic population without a task stays isotropic, and its mean is nearer the
    population refitted on the other tasks than the fit with the task is."""
    from core.population import (LOGISTIC_SPREAD_SCALE, fitted_logistic_population, marginal_objective,
                                 population_structure, without_task)
    tasks = _logistic_tasks_of_slopes(7, [0.8, 0.8], T=30, n=(4, 12))
    full = fitted_logistic_population(tasks, structure="isotropic", tol=1e-10, rounds=200)[0]
    for t in (0, 11):
        refit = fitted_logistic_population(tasks[:t] + tasks[t + 1:], structure="isotropic", tol=1e-10, rounds=200)[0]
        out = without_task(full, marginal_objective([tasks[t]], full)[2][0], len(tasks), spread_scale=LOGISTIC_SPREAD_SCALE)
        assert population_structure(out) == "isotropic"
        assert np.abs(out.mean - refit.mean).max() < 0.5 * np.abs(full.mean - refit.mean).max()


def test_the_population_without_the_only_task_with_a_feature_is_refused():
    """A feature only task 0 has (its column zero in every other task): without task 0 the
    mean has no information in that direction, and the difference of informations that would
    give it is rounding; the population without any other task is computed."""
    from core.population import without_task
    _, stats_ = _grouped(5, T=12)
    tasks = []
    for i, (_, g, m, _) in enumerate(stats_):
        G, h = np.zeros((4, 4)), np.zeros(4)
        keep = [0, 1, 2, 3] if i == 0 else [0, 1, 3]
        G[np.ix_(keep, keep)] = np.insert(np.insert(g, 2, 1.0, axis=0), 2, 1.0, axis=1)[np.ix_(keep, keep)]
        h[keep] = np.insert(m, 2, 1.0)[keep]
        tasks.append((G / 0.49, h / 0.49))
    full = fit_population(tasks)
    with pytest.raises(np.linalg.LinAlgError):
        without_task(full, tasks[0], len(tasks))
    assert np.all(np.isfinite(without_task(full, tasks[1], len(tasks)).mean))


def test_the_mean_information_is_the_inverse_of_the_means_covariance():
    """``Population.mean_information``: ``F = mean_cov^-1`` and its largest eigenvalue, as
    scipy computes them, once per population object."""
    import scipy.linalg

    rng = np.random.default_rng(2)
    A = rng.normal(size=(5, 5))
    pop = Population(np.zeros(5), np.eye(5), 1.0, A @ A.T + np.eye(5))
    F, top = pop.mean_information
    np.testing.assert_allclose(F, scipy.linalg.inv(pop.mean_cov), rtol=1e-10, atol=1e-12)
    assert top == pytest.approx(scipy.linalg.eigvalsh(scipy.linalg.inv(pop.mean_cov))[-1], rel=1e-10)
    assert pop.mean_information[0] is F


def _wide_tasks(seed, T=12, D=21, rows=(2, 8)):
    """Tasks of fewer rows than parameters (bias last): ``(n, X'X, X'y, y'y)`` each."""
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal(D)
    out = []
    for _ in range(T):
        k = int(rng.integers(*rows))
        Xd = _design(rng.standard_normal((k, D - 1)))
        y = Xd @ (theta + 0.3 * rng.standard_normal(D)) + 0.5 * rng.standard_normal(k)
        out.append((k, Xd.T @ Xd, Xd.T @ y, float(y @ y)))
    return out


def test_the_factored_e_step_is_the_inverted_one():
    """Woodbury's form of every task's posterior (tasks of fewer rows than parameters, of
    different ranks) against the posterior covariances inverted one by one: their sum, the
    means, ``tr(J C)`` and ``sum log det(J + P)``."""
    tasks = _wide_tasks(0)
    n, gram, moment, yy = (np.array(c, dtype=float) for c in zip(*tasks))
    T, D = moment.shape
    F = population.gram_factors(gram)
    assert F is not None and F.shape[1] == int(n.max()) < D
    np.testing.assert_allclose(F.transpose(0, 2, 1) @ F, gram, atol=1e-10)
    rng = np.random.default_rng(1)
    Z = rng.standard_normal((D, D))
    cov, mean, w = Z @ Z.T / D + 0.1 * np.eye(D), rng.standard_normal(D), rng.uniform(0.5, 3.0, T)
    J, h = gram * w[:, None, None], moment * w[:, None]
    C = np.array([np.linalg.inv(Jt + np.linalg.inv(cov)) for Jt in J])
    mu = np.array([Ct @ (ht + np.linalg.solve(cov, mean)) for Ct, ht in zip(C, h)])
    logdet = sum(np.linalg.slogdet(Jt + np.linalg.inv(cov))[1] for Jt in J)
    post = population._factor_posteriors(mean, cov, F, w, h, logdet=True)
    np.testing.assert_allclose(post.cov_sum, C.sum(axis=0), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(post.means, mu, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(post.information_trace, np.einsum("tij,tji->t", J, C), rtol=1e-8)
    assert post.logdet_precision == pytest.approx(logdet, rel=1e-10)


def test_a_population_of_tasks_of_few_rows_is_the_same_fitted_either_way(monkeypatch):
    """The population over tasks of fewer rows than parameters, fitted with the factored
    E-step, is the one fitted with every posterior inverted (the same fixed point, to the
    fit's tolerance)."""
    tasks = _wide_tasks(2, T=15)
    factored, w_factored = population.fit_gaussian_population(tasks)
    monkeypatch.setattr(population, "gram_factors", lambda gram: None)
    inverted, w_inverted = population.fit_gaussian_population(tasks)
    np.testing.assert_allclose(factored.mean, inverted.mean, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(factored.cov, inverted.cov, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(w_factored, w_inverted, rtol=1e-6)
    assert factored.noise == pytest.approx(inverted.noise, rel=1e-6)
