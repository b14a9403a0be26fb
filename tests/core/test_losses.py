"""Single-task fits and half-Hessians against finite differences and scipy."""
import numpy as np
import pytest
import scipy.optimize

from core.losses import fit_single_task, half_hessian, objective


def data(kind, seed=0, n=60, d=4):
    rng = np.random.default_rng(seed)
    X = np.hstack([rng.normal(size=(n, d)), np.ones((n, 1))])
    w = rng.normal(size=d + 1)
    if kind == "regression":
        return X, X @ w + rng.normal(scale=0.3, size=n)
    return X, (rng.random(n) < 1 / (1 + np.exp(-X @ w))).astype(float)


@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_half_hessian_matches_finite_differences(kind):
    X, y = data(kind)
    mu = 0.05
    w0 = np.random.default_rng(1).normal(size=X.shape[1])
    grad = lambda w: scipy.optimize.approx_fprime(w, lambda v: objective(kind, X, y, v, mu), 1e-6)
    # central differences of the objective give the Hessian
    eps = 1e-4
    d = X.shape[1]
    H = np.zeros((d, d))
    f = lambda v: objective(kind, X, y, v, mu)
    for i in range(d):
        for j in range(d):
            ei, ej = np.eye(d)[i] * eps, np.eye(d)[j] * eps
            H[i, j] = (f(w0 + ei + ej) - f(w0 + ei - ej) - f(w0 - ei + ej) + f(w0 - ei - ej)) / (4 * eps**2)
    np.testing.assert_allclose(half_hessian(kind, X, w0, mu), H / 2, atol=1e-5)
    assert grad(w0).shape == (d,)


@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_single_task_fit_is_the_minimiser(kind):
    X, y = data(kind, seed=3)
    mu = 0.01
    w, omega = fit_single_task(kind, X, y, mu, tol=1e-10)
    ref = scipy.optimize.minimize(lambda v: objective(kind, X, y, v, mu), np.zeros(X.shape[1]),
                                  method="BFGS", options={"gtol": 1e-10}).x
    np.testing.assert_allclose(w, ref, atol=1e-4)
    np.testing.assert_allclose(omega, half_hessian(kind, X, w, mu))


def test_bias_is_not_penalised_for_squared_loss():
    rng = np.random.default_rng(0)
    X = np.hstack([rng.normal(size=(50, 2)), np.ones((50, 1))])
    y = 100.0 + X[:, 0]
    w, _ = fit_single_task("regression", X, y, mu=10.0)
    assert abs(w[-1] - 100.0) < 0.5  # a penalised bias would be pulled far toward 0


def test_single_class_logistic_task_stays_finite():
    X = np.hstack([np.random.default_rng(0).normal(size=(20, 3)), np.ones((20, 1))])
    w, omega = fit_single_task("classification", X, np.ones(20), mu=0.01)
    assert np.all(np.isfinite(w)) and np.all(np.isfinite(omega))


def test_task_row_reservoir_keeps_every_row_with_equal_probability():
    """Algorithm R: after n rows (sent in uneven batches) each is kept with probability m/n."""
    from core.state import TaskRows

    m, sizes = 20, [7, 30, 1, 50, 12]  # 100 rows
    n, trials = sum(sizes), 3000
    counts = np.zeros(n)
    rng = np.random.default_rng(1)
    for _ in range(trials):
        kept, start = TaskRows(np.zeros((0, 1)), np.zeros(0), 0), 0
        for b in sizes:
            idx = np.arange(start, start + b, dtype=float)
            kept = kept.merged(TaskRows(idx[:, None], idx, b), m, rng)
            start += b
        assert kept.X.shape == (m, 1) and kept.n == n and len(set(kept.y)) == m
        np.testing.assert_array_equal(kept.X[:, 0], kept.y)  # rows stay whole
        counts[kept.y.astype(int)] += 1
    p = m / n
    sd = np.sqrt(trials * p * (1 - p))
    assert np.all(np.abs(counts - trials * p) < 4.5 * sd), counts  # each row: binomial(trials, m/n)
    # early and late rows alike (a replacement bug favours one end): group means within 1 %
    assert abs(counts[:50].mean() - counts[50:].mean()) < 0.02 * trials * p
