"""The population of slopes (core.population) against independent computations: the E-step
against Gaussian conditioning and scipy's optimiser, EM's fixed point against a direct
maximisation of the mixed model's marginal likelihood over the rows."""
import numpy as np
import pytest
from scipy import optimize, stats
from scipy.linalg import null_space

from core.evidence import GAUSSIAN_OMEGAS, LOGISTIC_OMEGAS, gaussian_fits, logistic_fits
from core.population import (Population, PopulationSums, TaskTerms, fit_population, gaussian_terms,
                             logistic_mode, logistic_terms)


def _design(X):
    return np.hstack([X, np.ones((X.shape[0], 1))])


def _random_slopes(seed, T=25, d=2, n=(6, 20), m=(1.0, -0.5), tau=0.6, sigma=0.8):
    rng = np.random.default_rng(seed)
    tasks, rows = [], []
    for _ in range(T):
        k = int(rng.integers(*n))
        X = rng.standard_normal((k, d))
        beta = np.array(m) + tau * rng.standard_normal(d)
        y = rng.normal() * 2 + X @ beta + sigma * rng.standard_normal(k)
        Xd = _design(X)
        tasks.append((k, Xd.T @ Xd, Xd.T @ y, float(y @ y)))
        rows.append((X, y))
    return tasks, rows


def test_gaussian_e_step_is_gaussian_conditioning():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((7, 3))
    y = rng.standard_normal(7)
    pop = Population(np.array([0.3, -1.0, 0.5]), np.array([[1.0, 0.2, 0], [0.2, 0.5, 0.1], [0, 0.1, 2.0]]), 0.7)
    Xd = _design(X)
    terms = gaussian_terms(7, Xd.T @ Xd, Xd.T @ y, float(y @ y), pop)
    # independent: centre the rows (flat intercept), condition the Gaussian prior on them
    Xc, yc = X - X.mean(0), y - y.mean()
    prec = np.linalg.inv(pop.cov) + Xc.T @ Xc / pop.noise
    C = np.linalg.inv(prec)
    mu = C @ (np.linalg.solve(pop.cov, pop.mean) + Xc.T @ yc / pop.noise)
    np.testing.assert_allclose(terms.mu, mu, rtol=1e-10)
    np.testing.assert_allclose(terms.second, C + np.outer(mu, mu), rtol=1e-10)
    # expected residual sum of squares by sampling the posterior
    draws = rng.multivariate_normal(mu, C, size=200_000)
    rss = np.mean(np.sum((yc[None, :] - draws @ Xc.T) ** 2, axis=1))
    assert terms.rss == pytest.approx(rss, rel=5e-3)
    assert terms.dof == 6


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
    terms = logistic_terms(X, y, Population(centre, np.linalg.inv(P)))
    np.testing.assert_allclose(terms.mu, w[:-1])
    Hs = H[:-1, :-1] - np.outer(H[:-1, -1], H[-1, :-1]) / H[-1, -1]
    np.testing.assert_allclose(terms.second - np.outer(terms.mu, terms.mu), np.linalg.inv(Hs), rtol=1e-8)


def _centred_loglik(rows, m, cov, noise):
    """The mixed model's log likelihood of the rows with each task's intercept integrated out
    under a flat prior: the rows projected on the complement of the constant."""
    total = 0.0
    for X, y in rows:
        Q = null_space(np.ones((1, len(y))))  # orthonormal, (n, n-1)
        Xq, yq = Q.T @ X, Q.T @ y
        total += stats.multivariate_normal(Xq @ m, noise * np.eye(len(yq)) + Xq @ cov @ Xq.T).logpdf(yq)
    return total


def test_em_reaches_the_maximum_likelihood_of_the_mixed_model():
    tasks, rows = _random_slopes(3)
    pop = fit_population(tasks, "regression", iterations=2000, prior_weight=0.0, tol=1e-12)

    def negative(theta):
        m = theta[:2]
        Lc = np.array([[np.exp(theta[2]), 0.0], [theta[3], np.exp(theta[4])]])
        return -_centred_loglik(rows, m, Lc @ Lc.T, np.exp(theta[5]))
    L0 = np.linalg.cholesky(pop.cov)
    start = np.array([*pop.mean, np.log(L0[0, 0]), L0[1, 0], np.log(L0[1, 1]), np.log(pop.noise)])
    best = optimize.minimize(negative, start + 0.2, method="Nelder-Mead",
                             options={"maxiter": 20000, "xatol": 1e-9, "fatol": 1e-10})
    assert -negative(start) >= -best.fun - 1e-4  # EM's fixed point is the maximum
    assert -negative(start) > -negative(start + 0.05) + 1e-6  # and a strict one: a test that can fail
    np.testing.assert_allclose(pop.mean, best.x[:2], atol=2e-3)
    # the estimates are near the truth (m = (1, -0.5), Sigma = 0.36 I, sigma^2 = 0.64)
    np.testing.assert_allclose(pop.mean, [1.0, -0.5], atol=0.35)
    assert 0.4 < pop.noise < 0.9


def test_sums_round_trip_and_remove_a_task_exactly():
    tasks, _ = _random_slopes(4, T=5)
    pop = Population.initial(2)
    terms = [gaussian_terms(*t, pop) for t in tasks]
    sums = PopulationSums.empty(2)
    for t in terms:
        sums = sums.plus(t)
    again = PopulationSums.from_array(sums.to_array(), 2)
    np.testing.assert_allclose(again.to_array(), sums.to_array())
    without = sums.plus(terms[2], -1.0)
    direct = PopulationSums.empty(2)
    for i, t in enumerate(terms):
        if i != 2:
            direct = direct.plus(TaskTerms.from_array(t.to_array(), 2))
    np.testing.assert_allclose(without.to_array(), direct.to_array(), atol=1e-12)
    assert without.population().mean == pytest.approx(direct.mu / 4)


def test_population_evidence_is_the_marginal_likelihood():
    """gaussian_fits with a given factor: the evidence differences over omega are those of the
    centred rows' marginal likelihood with sigma^2 profiled (the constants cancel)."""
    rng = np.random.default_rng(5)
    X, y = rng.standard_normal((9, 2)), rng.standard_normal(9)
    Xd = _design(X)
    pop = Population(np.array([0.4, -0.3]), np.array([[0.5, 0.1], [0.1, 0.3]]), 0.8)
    R = np.linalg.cholesky(pop.cov / pop.noise)
    E, TH = gaussian_fits(9, Xd.T @ Xd, Xd.T @ y, float(y @ y), pop.mean[None, :], None, 0.0, R)
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
    E, TH = E[1:], TH[1:]  # row 0 is the centre 0
    j = 6
    om = LOGISTIC_OMEGAS[j]
    K = om * pop.cov

    def log_joint(v):  # log p(y | v) + log N(v_nb; m, K), flat intercept
        z = X @ v
        return -np.sum(np.logaddexp(0, z) - y * z) + stats.multivariate_normal(pop.mean, K).logpdf(v[:-1])
    w = TH[0, j]
    # Laplace: log p(y) = log_joint(w) + (d+1)/2 log 2 pi - 1/2 log det H (+ the flat intercept's constant)
    p = 1 / (1 + np.exp(-(X @ w)))
    H = (X.T * (p * (1 - p))) @ X
    H[:-1, :-1] += np.linalg.inv(K)
    laplace = log_joint(w) + 1.5 * np.log(2 * np.pi) - 0.5 * np.linalg.slogdet(H)[1]
    # E drops the constants common to every omega: compare two omegas' differences
    k = 9
    w2 = TH[0, k]
    K2 = LOGISTIC_OMEGAS[k] * pop.cov
    p2 = 1 / (1 + np.exp(-(X @ w2)))
    H2 = (X.T * (p2 * (1 - p2))) @ X
    H2[:-1, :-1] += np.linalg.inv(K2)
    z2 = X @ w2
    laplace2 = (-np.sum(np.logaddexp(0, z2) - y * z2) + stats.multivariate_normal(pop.mean, K2).logpdf(w2[:-1])
                + 1.5 * np.log(2 * np.pi) - 0.5 * np.linalg.slogdet(H2)[1])
    assert E[0, k] - E[0, j] == pytest.approx(laplace2 - laplace, abs=1e-6)
