"""The empirical-Bayes estimators of :mod:`core.evidence` against independent computations:
the exact Gaussian marginal likelihood (scipy), penalised least squares (lstsq), a Laplace
approximation built from scipy's optimiser and a finite-difference Hessian, and hand sums."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize
import scipy.stats

from core import evidence as ev


def _regression(n=15, d=4, seed=0, noise=0.3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * [1.0, 2.0, 0.5, 1.5][:d] + 0.3
    y = 2.0 + X @ rng.normal(size=d) + noise * rng.normal(size=n)
    Xd = np.hstack([X, np.ones((n, 1))])
    return X, y, Xd


def _prior(d, basis, rho, omega):
    R = ev._prior_factor(d, basis, rho)
    return omega * (R @ R.T)


@pytest.mark.parametrize("rho", [0.0, 3.0])
def test_gaussian_evidence_is_the_exact_marginal_likelihood(rho):
    X, y, Xd = _regression()
    n, d = X.shape
    rng = np.random.default_rng(1)
    basis, centres = rng.normal(size=(d, 2)), np.vstack([np.zeros(d), rng.normal(size=d)])
    E, TH = ev.gaussian_fits(n, Xd.T @ Xd, Xd.T @ y, float(y @ y), centres, basis, rho)
    G = np.cov(X.T, bias=True) * n
    omegas = ev.GAUSSIAN_OMEGAS / (np.trace(G) / d)
    # an orthonormal basis of the complement of the constant vector integrates the intercept out
    H = scipy.linalg.null_space(np.ones((1, n)))
    z, Z = H.T @ y, H.T @ X
    for i, m in enumerate(centres):
        brute = []
        for om in omegas[[3, 10, 17]]:
            C = np.eye(n - 1) + Z @ _prior(d, basis, rho, om) @ Z.T
            r = z - Z @ m
            sigma2 = r @ np.linalg.solve(C, r) / (n - 1)  # sigma^2 profiled out
            brute.append(scipy.stats.multivariate_normal(Z @ m, sigma2 * C).logpdf(z))
        # equal up to the constant (n-1)/2 (log 2 pi + 1), the same for every omega and centre
        np.testing.assert_allclose(E[i, [3, 10, 17]] - np.array(brute), 0.5 * (n - 1) * (np.log(2 * np.pi) + 1),
                                   rtol=1e-9)


def test_gaussian_posterior_mean_is_the_penalised_least_squares_fit():
    X, y, Xd = _regression()
    n, d = X.shape
    rng = np.random.default_rng(2)
    basis, m = rng.normal(size=(d, 2)), rng.normal(size=d)
    E, TH = ev.gaussian_fits(n, Xd.T @ Xd, Xd.T @ y, float(y @ y), m[None, :], basis, 2.0)
    om = ev.GAUSSIAN_OMEGAS[9] / (np.trace(np.cov(X.T, bias=True) * n) / d)
    Kinv = np.linalg.inv(_prior(d, basis, 2.0, om))
    # min ||y - b - X t||^2 + (t - m)' Kinv (t - m), the intercept b unpenalised, by lstsq
    L = np.linalg.cholesky(Kinv)
    A = np.vstack([Xd, np.hstack([L.T, np.zeros((d, 1))])])
    rhs = np.concatenate([y, L.T @ m])
    np.testing.assert_allclose(TH[0, 9], np.linalg.lstsq(A, rhs, rcond=None)[0], rtol=1e-8, atol=1e-10)


def _logistic(n=80, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = np.array([1.5, -1.0, 0.5])[:d]
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ w - 0.4)))).astype(float)
    return np.hstack([X, np.ones((n, 1))]), y


def _brute_laplace(Xd, y, Kinv, m):
    """Laplace log evidence with a flat intercept prior, from scipy's optimiser and a central
    finite-difference Hessian, dropping the same constants as core.evidence."""
    d = Xd.shape[1] - 1

    def neg(theta):
        z = Xd @ theta
        r = theta[:-1] - m
        return np.sum(np.logaddexp(0, z) - y * z) + 0.5 * r @ Kinv @ r

    res = scipy.optimize.minimize(neg, np.zeros(d + 1), method="BFGS", options={"gtol": 1e-10})
    t = res.x
    h, Hess = 1e-4, np.empty((d + 1, d + 1))
    for i in range(d + 1):
        for j in range(d + 1):
            e_i, e_j = np.eye(d + 1)[i] * h, np.eye(d + 1)[j] * h
            Hess[i, j] = (neg(t + e_i + e_j) - neg(t + e_i - e_j) - neg(t - e_i + e_j) + neg(t - e_i - e_j)) / (4 * h * h)
    # log Z = -neg(t) - 1/2 log det(K) - 1/2 log det(Hess) + const
    logZ = -neg(t) + 0.5 * np.linalg.slogdet(Kinv)[1] - 0.5 * np.linalg.slogdet(Hess)[1]
    return logZ, t


def test_logistic_evidence_is_the_laplace_approximation():
    Xd, y = _logistic()
    d = Xd.shape[1] - 1
    E, TH = ev.logistic_fits(Xd, y, np.empty((0, d)), None, 0.0)
    Xc = Xd[:, :-1] - Xd[:, :-1].mean(0)
    omegas = ev.LOGISTIC_OMEGAS / (0.25 * np.trace(Xc.T @ Xc) / d)
    got, want = [], []
    for j in (2, 6, 10):
        logZ, mode = _brute_laplace(Xd, y, np.eye(d) / omegas[j], np.zeros(d))
        np.testing.assert_allclose(TH[0, j], mode, atol=1e-5)
        got.append(E[0, j])
        want.append(logZ)
    np.testing.assert_allclose(np.diff(got), np.diff(want), atol=1e-4)


def test_logistic_centre_expansion_is_exact_at_the_expansion_point_and_close_nearby():
    Xd, y = _logistic(n=200)
    d = Xd.shape[1] - 1
    near = np.array([0.05, -0.05, 0.02])
    E, TH = ev.logistic_fits(Xd, y, np.vstack([np.zeros(d), near]), None, 0.0)
    np.testing.assert_allclose(E[1], E[0], rtol=1e-12)  # centre 0 is the expansion point
    np.testing.assert_allclose(TH[1], TH[0], atol=1e-12)
    Xc = Xd[:, :-1] - Xd[:, :-1].mean(0)
    om = ev.LOGISTIC_OMEGAS[4] / (0.25 * np.trace(Xc.T @ Xc) / d)
    logZ0, _ = _brute_laplace(Xd, y, np.eye(d) / om, np.zeros(d))
    logZ1, mode1 = _brute_laplace(Xd, y, np.eye(d) / om, near)
    # the second-order expansion: the evidence difference to 1 % and the mode to a small error
    assert abs((E[2, 4] - E[0, 4]) - (logZ1 - logZ0)) < 0.01 * abs(logZ1 - logZ0)
    np.testing.assert_allclose(TH[2, 4], mode1, atol=1e-3)


def test_mixture_is_the_weighted_sum_of_its_centres():
    rng = np.random.default_rng(0)
    E, TH = rng.normal(size=(3, 5)), rng.normal(size=(3, 5, 4))
    logw = np.log(np.array([0.2, 0.3, 0.5]))
    fit = ev.best_fit(E, TH, logw)
    totals = [np.log(np.sum(np.exp(E[:, j] + logw))) for j in range(5)]
    j = int(np.argmax(totals))
    assert fit.log_evidence == pytest.approx(totals[j])
    post = np.exp(E[:, j] + logw) / np.sum(np.exp(E[:, j] + logw))
    np.testing.assert_allclose(fit.theta, sum(p * TH[k, j] for k, p in enumerate(post)))
    single = ev.best_fit(E[:1], TH[:1])
    assert single.log_evidence == E[0].max() and np.array_equal(single.theta, TH[0, np.argmax(E[0])])


def test_family_choice_needs_strong_pooled_evidence():
    fams = (ev.RIDGE, ev.Family("mixture", centred_on_representatives=True))
    tasks = [{"ridge": 0.0, "mixture": 1.0}, {"ridge": 0.0, "mixture": 1.0}]
    assert ev.choose_family(tasks, fams) == "ridge"  # log Bayes factor 2 < 3
    tasks.append({"ridge": 0.0, "mixture": 1.5})
    assert ev.choose_family(tasks, fams) == "mixture"  # 3.5 >= 3
    # a task without the family counts as ridge: no evidence either way
    assert ev.choose_family(tasks + [{"ridge": -5.0}], fams) == "mixture"
    assert ev.choose_family([{"ridge": 0.0, "mixture": -10.0}] * 3, fams) == "ridge"
    assert ev.choose_family([], fams) == "ridge"


def test_families_the_library_cannot_define_are_left_out():
    X, y, Xd = _regression()
    data = (X.shape[0], Xd.T @ Xd, Xd.T @ y, float(y @ y))
    fams = (ev.RIDGE, ev.Family("mixture", centred_on_representatives=True), ev.Family("subspace", rho=10.0))
    assert set(ev.family_fits("regression", data, None, fams)) == {"ridge"}
    lib = ev.Library(np.ones((4, 2)), np.empty((0, 4)), np.empty(0))
    assert set(ev.family_fits("regression", data, lib, fams)) == {"ridge", "subspace"}
