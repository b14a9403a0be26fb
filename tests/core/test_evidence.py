"""The empirical-Bayes estimators of :mod:`core.evidence` against independent computations:
the exact Gaussian marginal likelihood (scipy), penalised least squares (lstsq), a Laplace
approximation built from scipy's optimiser and a finite-difference Hessian, and hand sums."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize
import scipy.special
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


def test_logistic_evidence_is_the_laplace_approximation_at_every_centre():
    Xd, y = _logistic(n=200)
    d = Xd.shape[1] - 1
    far = np.array([1.5, -2.0, 0.8])  # where an expansion at the centre-0 mode would be poor
    E, TH = ev.logistic_fits(Xd, y, np.vstack([np.zeros(d), far]), None, 0.0)
    np.testing.assert_allclose(E[1], E[0], rtol=1e-9)  # the centre 0 again
    np.testing.assert_allclose(TH[1], TH[0], atol=1e-6)
    Xc = Xd[:, :-1] - Xd[:, :-1].mean(0)
    for j in (2, 4, 8):
        om = ev.LOGISTIC_OMEGAS[j] / (0.25 * np.trace(Xc.T @ Xc) / d)
        logZ0, _ = _brute_laplace(Xd, y, np.eye(d) / om, np.zeros(d))
        logZ1, mode1 = _brute_laplace(Xd, y, np.eye(d) / om, far)
        assert (E[2, j] - E[0, j]) == pytest.approx(logZ1 - logZ0, abs=1e-4)
        np.testing.assert_allclose(TH[2, j], mode1, atol=1e-5)


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


def test_family_priors_are_each_familys_omega_prior_over_every_task():
    fams = (ev.RIDGE, ev.Family("mixture", centred_on_representatives=True))
    rng = np.random.default_rng(0)
    curves = [{"ridge": list(rng.normal(size=4)), "mixture": list(rng.normal(size=4) + 0.8)} for _ in range(6)]
    priors = ev.family_priors(curves, fams, 4)
    for f in ("ridge", "mixture"):
        np.testing.assert_allclose(priors[f], ev.omega_prior(np.array([c[f] for c in curves]))[0])
    # a task without the family counts as ridge's curve; numbers (states written before curves
    # were kept) are flat curves
    with_missing = ev.family_priors(curves + [{"ridge": curves[0]["ridge"]}], fams, 4)
    np.testing.assert_allclose(with_missing["mixture"], ev.omega_prior(
        np.array([c["mixture"] for c in curves] + [curves[0]["ridge"]]))[0])
    flat = ev.family_priors([{"ridge": 1.0, "mixture": 2.0}] * 3, fams, 4)
    np.testing.assert_allclose(np.exp(flat["mixture"]), 0.25)
    assert ev.family_priors([], fams, 4) == {}


def _npmle_scipy(E):
    """The stream's log marginal likelihood maximised over the simplex by scipy's SLSQP."""
    top = E.max(axis=1, keepdims=True)
    lik = np.exp(E - top)
    J = E.shape[1]
    res = scipy.optimize.minimize(
        lambda p: -np.sum(np.log(lik @ p + 1e-300)), np.full(J, 1.0 / J),
        jac=lambda p: -(lik / (lik @ p + 1e-300)[:, None]).sum(axis=0), bounds=[(0.0, 1.0)] * J,
        constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1.0, "jac": lambda p: np.ones(J)}],
        method="SLSQP", options={"ftol": 1e-15, "maxiter": 2000})
    return -res.fun + top.sum()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_omega_prior_is_the_maximum_likelihood_mixing_distribution(seed):
    rng = np.random.default_rng(seed)
    T, J = 40, 9
    # evidence curves like the real ones: each task peaked near its own omega, with noise
    peaks = rng.choice([2, 3, 6], size=T)
    E = -0.8 * (np.arange(J)[None, :] - peaks[:, None]) ** 2 + rng.normal(scale=0.5, size=(T, J)) + 30 * rng.normal(size=(T, 1))
    log_pi, total = ev.omega_prior(E, smoothing=0.0)
    pi = np.exp(log_pi)
    assert pi.sum() == pytest.approx(1.0) and np.all(pi >= 0)
    # the value it reports is the stream's log marginal likelihood at pi, by hand
    by_hand = sum(np.log(np.sum(pi * np.exp(E[t]))) for t in range(T))
    assert total == pytest.approx(by_hand, rel=1e-12, abs=1e-9)
    # and within the tolerance of the maximum found independently (never above it)
    best = _npmle_scipy(E)
    assert best - ev.OMEGA_PRIOR_TOL - 1e-6 <= total <= best + 1e-6
    # the maximiser's optimality conditions: no grid point has a derivative above T
    lik = np.exp(E - E.max(axis=1, keepdims=True))
    grad = lik.T @ (1.0 / (lik @ pi))
    assert np.max(grad) <= T * (1 + 1e-2)


def test_omega_prior_of_one_task_is_its_own_best_omega():
    E = np.array([[-3.0, 1.0, 4.0, 2.0]])
    log_pi, total = ev.omega_prior(E, smoothing=0.0)
    assert total == pytest.approx(4.0, abs=ev.OMEGA_PRIOR_TOL)
    assert int(np.argmax(log_pi)) == 2 and np.exp(log_pi[2]) > 0.99
    # with the default Dirichlet prior one task cannot outweigh the grid's a priori counts
    pi = np.exp(ev.omega_prior(E)[0])
    assert int(np.argmax(pi)) == 2 and pi[2] < 0.5 and np.all(pi > 0.1)


@pytest.mark.parametrize("smoothing", [0.3, 1.0, 4.0])
def test_smoothed_omega_prior_is_the_dirichlet_map_estimate(smoothing):
    """Against scipy's SLSQP on the same penalised objective, and against the MAP's fixed point
    ``pi_j = (sum_t P(omega_j | task t) + a) / (T + J a)`` (the EM step for a Dirichlet(1 + a)
    prior), which characterises the maximiser independently of how it was found."""
    rng = np.random.default_rng(int(10 * smoothing))
    T, J = 30, 8
    E = rng.normal(scale=3.0, size=(T, J)) + 20 * rng.normal(size=(T, 1))
    log_pi, total = ev.omega_prior(E, smoothing=smoothing)
    pi = np.exp(log_pi)
    lik = np.exp(E - E.max(axis=1, keepdims=True))
    R = lik * pi
    R /= R.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(pi, (R.sum(axis=0) + smoothing) / (T + J * smoothing), rtol=1e-6)

    def neg(p):
        return -(np.sum(np.log(lik @ p)) + smoothing * np.sum(np.log(p)))

    res = scipy.optimize.minimize(neg, np.full(J, 1.0 / J), bounds=[(1e-12, 1.0)] * J, method="SLSQP",
                                  constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1.0}],
                                  options={"ftol": 1e-15, "maxiter": 2000})
    assert neg(pi) <= res.fun + 1e-7
    np.testing.assert_allclose(pi, res.x, atol=1e-4)
    assert total == pytest.approx(np.sum(np.log(np.exp(E) @ pi)), rel=1e-12)


def test_omega_prior_warm_started_from_a_shorter_stream_reaches_the_same_maximum(monkeypatch):
    """A stream that gained a task starts its Newton steps from its previous ``pi``: the same
    maximiser as from the uniform ``pi`` (to rounding, the fixed point of the MAP's EM step),
    in fewer steps; a start that is not a distribution on the grid is ignored."""
    rng = np.random.default_rng(11)
    T, J = 40, 12
    E = rng.normal(scale=3.0, size=(T, J)) + 20 * rng.normal(size=(T, 1))
    previous, _ = ev.omega_prior(E[:-1])
    solves = []
    real_solve = np.linalg.solve
    monkeypatch.setattr(ev.np.linalg, "solve", lambda *a: solves.append(1) or real_solve(*a))
    cold, cold_total = ev.omega_prior(E)
    cold_steps = len(solves)
    solves.clear()
    warm, warm_total = ev.omega_prior(E, start=previous)
    assert len(solves) < cold_steps
    np.testing.assert_allclose(np.exp(warm), np.exp(cold), rtol=0, atol=1e-12)
    assert warm_total == pytest.approx(cold_total, rel=1e-12)
    pi = np.exp(warm)
    R = np.exp(E - E.max(axis=1, keepdims=True)) * pi
    R /= R.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(pi, (R.sum(axis=0) + 1.0) / (T + J), rtol=1e-10)
    for bad in (previous[:-1], np.full(J, np.nan), np.full(J, -np.inf)):
        np.testing.assert_array_equal(ev.omega_prior(E, start=bad)[0], cold)


@pytest.mark.parametrize("smoothing", [0.0, 1.0])
def test_omega_priors_side_by_side_equal_each_stream_alone(smoothing):
    """Streams stacked in one call (each family's curves, :func:`core.evidence.family_priors`)
    get what each gets alone: their Newton steps, line searches and stopping are their own,
    including a stream that starts at its maximum (done after one step) beside ones that start
    far from it, a start that is not a distribution, and a stream with an edge of the grid."""
    rng = np.random.default_rng(4)
    T, J = 25, 11
    streams = [rng.normal(scale=s, size=(T, J)) + 20 * rng.normal(size=(T, 1)) for s in (0.5, 3.0, 8.0, 3.0)]
    streams[3][:, :4] -= 40.0  # most of the grid out of reach
    at_max, _ = ev.omega_prior(streams[1], smoothing=smoothing)
    starts = [None, at_max, np.full(J, np.nan), np.log(np.full(J, 1.0 / J))]
    alone = [ev.omega_prior(E, smoothing=smoothing, start=s) for E, s in zip(streams, starts)]
    log_pi, totals = ev.omega_priors(np.array(streams), smoothing=smoothing, starts=starts)
    for f, (lp, total) in enumerate(alone):
        np.testing.assert_allclose(log_pi[f], lp, rtol=1e-12, atol=1e-12)
        assert totals[f] == pytest.approx(total, rel=1e-13)
    # and the stacked call is not each stream's first Newton step: it reaches the maximiser
    pi = np.exp(log_pi[2])
    R = np.exp(streams[2] - streams[2].max(axis=1, keepdims=True)) * pi
    R /= R.sum(axis=1, keepdims=True)
    if smoothing:
        np.testing.assert_allclose(pi, (R.sum(axis=0) + smoothing) / (T + J * smoothing), rtol=1e-8)
    with pytest.raises(ValueError):
        ev.omega_priors(np.zeros((2, 0, J)))


def test_omega_prior_finds_the_omega_a_stream_shares():
    """Tasks whose slopes are drawn from N(0, omega0 sigma^2 I) (weak signal, few rows): the
    stream's maximum-likelihood prior puts its mass next to omega0, while half the tasks alone
    choose the lower edge of the grid (omega -> 0, "the task is its prior's centre")."""
    rng = np.random.default_rng(5)
    d, n, T = 6, 12, 150
    j0 = 8  # omegas are relative to tr(G) / d
    curves, best = [], []
    for _ in range(T):
        X = rng.normal(size=(n, d))
        Xd = np.hstack([X, np.ones((n, 1))])
        Xc = X - X.mean(0)
        omega0 = ev.GAUSSIAN_OMEGAS[j0] / (np.trace(Xc.T @ Xc) / d)
        y = 1.0 + X @ (np.sqrt(omega0) * rng.normal(size=d)) + rng.normal(size=n)
        E, _ = ev.gaussian_fits(n, Xd.T @ Xd, Xd.T @ y, float(y @ y), np.zeros((1, d)), None, 0.0)
        curves.append(E[0])
        best.append(int(np.argmax(E[0])))
    pi = np.exp(ev.omega_prior(np.array(curves), smoothing=0.0)[0])
    assert pi[j0 - 1:j0 + 2].sum() > 0.9
    assert np.mean(np.array(best) == 0) > 0.3
    # the Dirichlet prior keeps every omega the tasks cannot tell apart from omega0's smaller
    # neighbours (their curves are flat there) and still rules out the larger ones
    pi = np.exp(ev.omega_prior(np.array(curves))[0])
    J = pi.size
    assert pi[:j0 + 2].sum() > 0.75 and np.all(pi[j0 + 4:] < 1.0 / J)


def test_posterior_fit_integrates_omega_out():
    rng = np.random.default_rng(3)
    curve = ev.Curve(rng.normal(size=6), rng.normal(size=(6, 4)))
    log_prior = np.log(rng.dirichlet(np.ones(6)))
    fit = ev.posterior_fit(curve, log_prior)
    w = np.exp(curve.log_evidence + log_prior)
    assert fit.log_evidence == pytest.approx(np.log(w.sum()))
    np.testing.assert_allclose(fit.theta, (w[:, None] * curve.theta).sum(axis=0) / w.sum())
    uniform = ev.posterior_fit(curve)
    np.testing.assert_allclose(uniform.theta, ev.posterior_fit(curve, np.full(6, -np.log(6))).theta)


def test_family_curves_match_the_per_centre_fits():
    X, y, Xd = _regression(n=20)
    data = (X.shape[0], Xd.T @ Xd, Xd.T @ y, float(y @ y))
    centres = np.array([[1.0, 0.0, -1.0, 0.5], [0.0, 2.0, 0.0, 0.0]])
    lib = ev.Library(np.ones((4, 2)), centres, np.log(np.array([0.25, 0.75])))
    fams = (ev.RIDGE, ev.Family("mixture", centred_on_representatives=True))
    curves = ev.family_curves("regression", data, lib, fams)
    E, TH = ev.gaussian_fits(*data, np.vstack([np.zeros((1, 4)), centres]), None, 0.0)
    np.testing.assert_allclose(curves["ridge"].log_evidence, E[0])
    np.testing.assert_allclose(curves["ridge"].theta, TH[0])
    for j in range(E.shape[1]):
        w = np.exp(E[1:, j] - E[1:, j].max()) * np.array([0.25, 0.75])
        assert curves["mixture"].log_evidence[j] == pytest.approx(
            E[1:, j].max() + np.log(w.sum()))
        np.testing.assert_allclose(curves["mixture"].theta[j], (w[:, None] * TH[1:, j]).sum(0) / w.sum())
    fits = ev.family_fits("regression", data, lib, fams)
    j = int(np.argmax(curves["mixture"].log_evidence))
    np.testing.assert_allclose(fits["mixture"].theta, curves["mixture"].theta[j])


@pytest.mark.parametrize("n", [3, 20])  # fewer rows than slopes: G rank-deficient
@pytest.mark.parametrize("shared_slopes", [False, True])
def test_both_population_families_are_the_fits_of_their_own_centres(n, shared_slopes):
    """``population`` (centred on the population's mean) and ``mixture_population`` (on the
    environments' centres, under the population's covariance) share one call of
    :func:`gaussian_fits`: each curve is exactly what a call with its own centres gives."""
    from core.population import Population

    X, y, Xd = _regression(n=n)
    data = (X.shape[0], Xd.T @ Xd, Xd.T @ y, float(y @ y))
    rng = np.random.default_rng(5)
    A = rng.normal(size=(4, 4))
    pop = Population(rng.normal(size=4), A @ A.T + 0.1 * np.eye(4), 0.7)
    centres = np.array([[1.0, 0.0, -1.0, 0.5], [0.0, 2.0, 0.0, 0.0]])
    weights = np.log(np.array([0.25, 0.75]))
    lib = ev.Library(None, centres, weights, population=pop, shared_slopes=shared_slopes)
    fams = (ev.POPULATION, ev.Family("mixture_population", centred_on_representatives=True, population_shape=True))
    for means in (True, False):
        curves = ev.family_curves("regression", data, lib, fams, posterior_means=means)
        factor = np.linalg.cholesky(pop.cov / pop.noise)
        E, TH = ev.gaussian_fits(*data, pop.mean[None, :], None, 0.0, factor, posterior_means=means)
        assert np.array_equal(curves["population"].log_evidence, E[0])
        assert (curves["population"].theta is None) if not means else np.array_equal(curves["population"].theta, TH[0])
        if shared_slopes:  # the library says the slopes are shared: no environments' shape
            assert "mixture_population" not in curves
            continue
        E, TH = ev.gaussian_fits(*data, centres, None, 0.0, factor, posterior_means=means)
        expected = ev.mixed_curve(E, TH, weights)
        assert np.array_equal(curves["mixture_population"].log_evidence, expected.log_evidence)
        if means:
            assert np.array_equal(curves["mixture_population"].theta, expected.theta)


def test_families_the_library_cannot_define_are_left_out():
    X, y, Xd = _regression()
    data = (X.shape[0], Xd.T @ Xd, Xd.T @ y, float(y @ y))
    fams = (ev.RIDGE, ev.Family("mixture", centred_on_representatives=True), ev.Family("subspace", rho=10.0))
    assert set(ev.family_fits("regression", data, None, fams)) == {"ridge"}
    lib = ev.Library(np.ones((4, 2)), np.empty((0, 4)), np.empty(0))
    assert set(ev.family_fits("regression", data, lib, fams)) == {"ridge", "subspace"}


@pytest.mark.parametrize("smoothing", [0.0, 1.0])
def test_a_flat_curve_leaves_the_omega_prior_unchanged(smoothing):
    """A task stored with one number per family (older states) is a flat curve: its term in
    the stream's likelihood does not depend on pi, so pi is unchanged and the total grows by
    exactly that number."""
    rng = np.random.default_rng(7)
    E = rng.normal(scale=2.0, size=(12, 6))
    log_pi, total = ev.omega_prior(E, smoothing=smoothing)
    log_pi2, total2 = ev.omega_prior(np.vstack([E, np.full(6, -4.5)]), smoothing=smoothing)
    np.testing.assert_allclose(np.exp(log_pi2), np.exp(log_pi), atol=2e-3 if smoothing == 0 else 1e-7)
    assert total2 == pytest.approx(total - 4.5, abs=ev.OMEGA_PRIOR_TOL if smoothing == 0 else 1e-9)
    np.testing.assert_allclose(ev._evidence_curve(-4.5, 6), np.full(6, -4.5))
    assert ev._evidence_curve([1.0, 2.0], 6) is None  # a curve of another grid is ignored


def _brute_laplace_proper(Xd, y, Kinv, m, a_mean, a_var):
    """Laplace log evidence with the intercept's prior N(a_mean, a_var): scipy's optimiser and
    a finite-difference Hessian, the full prior's normaliser included (2 pi constants dropped)."""
    d = Xd.shape[1] - 1

    def neg(theta):
        z = Xd @ theta
        r = theta[:-1] - m
        return np.sum(np.logaddexp(0, z) - y * z) + 0.5 * r @ Kinv @ r + 0.5 * (theta[-1] - a_mean) ** 2 / a_var

    t = scipy.optimize.minimize(neg, np.zeros(d + 1), method="BFGS", options={"gtol": 1e-10}).x
    h, Hess = 1e-4, np.empty((d + 1, d + 1))
    for i in range(d + 1):
        for j in range(d + 1):
            e_i, e_j = np.eye(d + 1)[i] * h, np.eye(d + 1)[j] * h
            Hess[i, j] = (neg(t + e_i + e_j) - neg(t + e_i - e_j) - neg(t - e_i + e_j) + neg(t - e_i - e_j)) / (4 * h * h)
    return -neg(t) + 0.5 * np.linalg.slogdet(Kinv)[1] - 0.5 * np.log(a_var) - 0.5 * np.linalg.slogdet(Hess)[1], t


def test_logistic_evidence_with_a_proper_intercept_prior_is_the_laplace_approximation():
    Xd, y = _logistic(n=30, seed=2)
    d = Xd.shape[1] - 1
    E, TH = ev.logistic_fits(Xd, y, np.empty((0, d)), None, 0.0, np.eye(d), intercept=(0.7, 0.5))
    for j in (2, 6, 10):
        logZ, mode = _brute_laplace_proper(Xd, y, np.eye(d) / ev.LOGISTIC_OMEGAS[j], np.zeros(d), 0.7, 0.5)
        np.testing.assert_allclose(TH[0, j], mode, atol=1e-5)
        assert E[0, j] == pytest.approx(logZ, abs=1e-4)


def test_a_proper_intercept_prior_bounds_the_evidence_of_a_separable_task():
    """Two rows, one of each class, one slope separates them: with the flat intercept the
    evidence keeps growing with omega; with a proper one it stays a log probability."""
    Xd, y = np.array([[-1.0, 1.0], [1.0, 1.0]]), np.array([0.0, 1.0])
    flat, _ = ev.logistic_fits(Xd, y, np.empty((0, 1)), None, 0.0, np.eye(1))
    proper, _ = ev.logistic_fits(Xd, y, np.empty((0, 1)), None, 0.0, np.eye(1), intercept=(0.0, 1.0))
    assert flat[0, -1] > flat[0, 6] + 1.0
    # a probability of two labels: at most 1 (the Laplace value of a proper model is close)
    assert flat[0, -1] > 0.5 and np.all(proper[0] < 0.0) and proper[0, -1] < proper[0].max() + 1e-9


@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_own_scale_family_ignores_each_columns_scale_and_offset(kind):
    """The own_scale family's evidence and predictions do not change when a task's columns
    are rescaled and shifted (what a per-task StandardScaler makes true); ridge's do."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(14, 3))
    y = X @ [1.0, -0.5, 0.3] + 0.3 * rng.normal(size=14)
    if kind == "classification":
        y = (y > 0).astype(float)
    # offsets too for squared loss; logistic's intercept prior is nearly flat (precision
    # 1e-8), not flat, so its evidence moves slightly with a large shift at the weakest priors
    Xs = X * [1e-2, 1.0, 30.0] + ([5.0, -2.0, 100.0] if kind == "regression" else 0.0)

    def curves(A):
        Ad = np.hstack([A, np.ones((14, 1))])
        data = (14, Ad.T @ Ad, Ad.T @ y, float(y @ y)) if kind == "regression" else (Ad, y)
        c = ev.family_curves(kind, data, None, (ev.RIDGE, ev.OWN_SCALE))
        return {k: (v.log_evidence, v.theta @ Ad.T if kind == "regression" else None, Ad) for k, v in c.items()}
    a, b = curves(X), curves(Xs)
    np.testing.assert_allclose(a["own_scale"][0] - a["own_scale"][0][0], b["own_scale"][0] - b["own_scale"][0][0],
                               atol=1e-6)
    if kind == "regression":
        np.testing.assert_allclose(a["own_scale"][1], b["own_scale"][1], rtol=1e-6, atol=1e-8)
    assert np.max(np.abs((a["ridge"][0] - a["ridge"][0][0]) - (b["ridge"][0] - b["ridge"][0][0]))) > 1e-2


def test_own_scale_posterior_mean_is_a_ridge_on_the_standardised_columns():
    """At ``omega`` the own_scale posterior mean is scikit-learn's Ridge(alpha = n / omega) on
    StandardScaler'd columns, mapped back."""
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import StandardScaler
    rng = np.random.default_rng(5)
    X = rng.normal(size=(20, 3)) * [0.1, 3.0, 40.0] + [1.0, -5.0, 60.0]
    y = X @ [2.0, 0.3, 0.01] + 0.5 * rng.normal(size=20)
    Xd = np.hstack([X, np.ones((20, 1))])
    c = ev.family_curves("regression", (20, Xd.T @ Xd, Xd.T @ y, float(y @ y)), None, (ev.OWN_SCALE,))["own_scale"]
    for j in (5, 13, 20):
        sc = StandardScaler().fit(X)
        r = Ridge(alpha=20 / ev.GAUSSIAN_OMEGAS[j]).fit(sc.transform(X), y)
        np.testing.assert_allclose(c.theta[j, :-1], r.coef_ / sc.scale_, rtol=1e-6)


def test_logistic_evidence_of_a_task_of_a_few_rows_is_exact():
    """A task of two rows with a proper intercept prior: its evidence at each omega is the
    exact marginal likelihood and its curve's parameters the posterior mean (importance
    sampling from the prior, a million draws), not Laplace's values at the mode."""
    Xd = np.array([[-0.4, 1.2, 1.0], [0.9, -0.3, 1.0]])
    y = np.array([1.0, 1.0])
    d = 2
    E, TH = ev.logistic_fits(Xd, y, np.empty((0, d)), None, 0.0, np.eye(d), intercept=(0.7, 0.5))
    rng = np.random.default_rng(0)
    for j in (2, 6, 10):
        omega = ev.LOGISTIC_OMEGAS[j]
        draws = np.column_stack([np.sqrt(omega) * rng.standard_normal((1_000_000, d)),
                                 0.7 + np.sqrt(0.5) * rng.standard_normal(1_000_000)])
        lik = np.exp(-np.sum(np.logaddexp(0.0, -(draws @ Xd.T)), axis=1))
        assert E[0, j] == pytest.approx(np.log(lik.mean()), abs=3e-3)
        np.testing.assert_allclose(TH[0, j], lik @ draws / lik.sum(), atol=2e-2)
        laplace, _ = _brute_laplace_proper(Xd, y, np.eye(d) / omega, np.zeros(d), 0.7, 0.5)
        if j == 10:  # a wide prior: the mode is far from the mean and Laplace is off
            assert abs(laplace - np.log(lik.mean())) > 0.05


def test_logistic_evidence_of_a_one_row_task_is_finite_and_comparable():
    """A task of one row has no spread to scale ``omega`` by: its ridge evidence is that of
    standardised columns over one row, not hundreds of nats down as with an infinite prior
    variance (before: -339 nats for every omega); it agrees with a direct integral over the
    logit (scipy's quad)."""
    from core.evidence import LOGISTIC_OMEGAS, logistic_fits
    X = np.array([[0.7, -1.2, 1.0]])
    y = np.array([1.0])
    E, _ = logistic_fits(X, y, np.empty((0, 2)), None, 0.0, None, (0.5, 2.0))
    assert np.all(np.isfinite(E)) and E.max() > -3.0
    # the logit z = x'beta + b ~ N(0.5, omega/0.25 * |x|^2 + 2): p(y=1) by scipy's quad
    from scipy import integrate
    for j, om in enumerate(LOGISTIC_OMEGAS):
        sd = np.sqrt(om / 0.25 * float(X[0, :2] @ X[0, :2]) + 2.0)
        p = integrate.quad(lambda z: scipy.stats.norm.pdf(z, 0.5, sd) * scipy.special.expit(z), -np.inf, np.inf)[0]
        # the adaptive quadrature (10 points at the posterior mode) is exact to 1e-3 nats
        # where the logit's prior spread is moderate; far out on the grid the likelihood is a
        # step on the grid's scale and it is off by up to 0.1 nats (a known limit)
        assert abs(E[0, j] - np.log(p)) < (1e-3 if om <= 1.0 else 0.15)


def _tally(batches):
    """Sums and sums of products of per-batch scores, as a learner keeps them."""
    names = batches[0].keys()
    scores = {f: sum(b[f] for b in batches) for f in names}
    products = {f: {g: sum(b[f] * b[g] for b in batches) for g in names} for f in names}
    return scores, products, len(batches)


def test_prequential_margins_are_the_paired_differences_and_their_standard_error():
    rng = np.random.default_rng(3)
    fams = (ev.RIDGE, ev.POPULATION, ev.Family("mixture", centred_on_representatives=True))
    batches = [{"ridge": rng.normal(), "population": rng.normal() + 0.3, "mixture": rng.normal()} for _ in range(40)]
    margins = ev.prequential_margins(*_tally(batches), fams, "population")
    for f in ("ridge", "mixture"):
        d = np.array([b[f] - b["population"] for b in batches])
        assert margins[f][0] == pytest.approx(d.sum(), rel=1e-12)
        assert margins[f][1] == pytest.approx(np.sqrt(len(d)) * d.std(ddof=0), rel=1e-9)
    assert margins["population"] == (0.0, 0.0)


def test_the_prequential_family_needs_a_margin_beyond_its_noise_over_the_reference():
    """With a margin of ``z`` standard errors given (two here)."""
    fams = (ev.RIDGE, ev.POPULATION, ev.Family("mixture", centred_on_representatives=True))
    refs = ("population", "ridge")
    rng = np.random.default_rng(4)
    noise = rng.normal(size=(50, 3))
    # mixture ahead on the sum, by much less than its noise: the reference stays
    close = [{"ridge": -2 + a, "population": -1 + b, "mixture": -1 + 0.02 + c} for a, b, c in noise]
    assert ev.prequential_family(*_tally(close)[:1], fams, refs, *_tally(close)[1:], z=2.0) == "population"
    # ahead by many standard errors: mixture
    clear = [{"ridge": -2 + a, "population": -1 + b, "mixture": b} for a, b, c in noise]
    assert ev.prequential_family(*_tally(clear)[:1], fams, refs, *_tally(clear)[1:], z=2.0) == "mixture"
    # between the references no margin: the larger sum, however close
    refs_close = [{"ridge": -1 + 0.01 + b, "population": -1 + b, "mixture": -5 + c} for a, b, c in noise]
    assert ev.prequential_family(*_tally(refs_close)[:1], fams, refs, *_tally(refs_close)[1:], z=2.0) == "ridge"
    # the best of those that beat the default clearly
    both = [{"ridge": 1.0 + b + 0.1 * a, "population": b, "mixture": 0.5 + b} for a, b, c in noise]
    assert ev.prequential_family(*_tally(both)[:1], fams, refs, *_tally(both)[1:], z=2.0) == "ridge"
    # no scores yet, or one batch: the first reference the learner has; a missing family is ridge's
    assert ev.prequential_family(None, fams, refs) == "population"
    assert ev.prequential_family(*_tally(clear[:1])[:1], fams, refs, *_tally(clear[:1])[1:]) == "population"
    assert ev.prequential_family({}, fams[::2], refs) == "ridge"
    only = [{"ridge": 1.0 + a, "mixture": a} for a, b, c in noise]  # the population scores as ridge: a tie
    assert ev.prequential_family(*_tally(only)[:1], fams, refs, *_tally(only)[1:]) == "population"


@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_the_evidence_alone_is_the_evidence_of_the_full_curves(kind):
    """``posterior_means=False`` (what a learner records for every batch) gives every family's
    evidence equal, bit for bit, to the curves with their posterior means, on a learned library
    with representatives, a basis and a population."""
    from core.fcl3 import FCL3

    from .helpers import basis_tasks

    m = FCL3(kind=kind, random_state=0, n_components=3)
    for tid, X, y in basis_tasks(n_tasks=8, d=4, n=20, seed=4, kind=kind):
        m.learn(tid, X, y)
    for tid in m.task_ids[:3]:
        record = m.tasks_[tid]
        library = m._safe_library(tid, record)
        args = (kind, m._evidence_data(record), library, m._families, m._intercept_prior(), m.grow_features)
        full, alone = ev.family_curves(*args), ev.family_curves(*args, posterior_means=False)
        assert set(full) == set(alone) and len(full) >= 4
        for name, curve in full.items():
            np.testing.assert_array_equal(alone[name].log_evidence, curve.log_evidence, err_msg=name)
            if kind == "regression":
                assert alone[name].theta is None


def test_an_exact_fits_evidence_does_not_depend_on_how_its_rows_were_summed():
    """Ten noiseless rows, twenty slopes, a wide prior (``R = 1e4 I``, as a population of tiny
    noise gives): the fit is exact, ``G`` rank-deficient, and the task's statistics summed at
    once or as a first row plus the rest give the same evidence at every ``omega`` (rounding's
    eigenvalues and residual, taken as they came, made them differ by 5 nats)."""
    rng = np.random.default_rng(4)
    X = np.hstack([rng.standard_normal((10, 20)), np.ones((10, 1))])
    y = X[:, :20] @ rng.standard_normal(20) + 0.3
    whole = (10, X.T @ X, X.T @ y, float(y @ y))
    parts = (10, np.outer(X[0], X[0]) + X[1:].T @ X[1:], X[0] * y[0] + X[1:].T @ y[1:], float(y[0] ** 2 + y[1:] @ y[1:]))
    centres, R = np.zeros((1, 20)), 1e4 * np.eye(20)
    E_whole, _ = ev.gaussian_fits(*whole, centres, None, 0.0, R)
    E_parts, _ = ev.gaussian_fits(*parts, centres, None, 0.0, R)
    np.testing.assert_allclose(E_parts, E_whole, rtol=0, atol=1e-5)
