"""The batch comparator CMTL against a brute-force minimisation of the same objective."""
import numpy as np
import pytest
from scipy.linalg import expm
from scipy.optimize import minimize

from benchmarks import cmtl


def _tasks(kind: str, T: int = 4, d: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = [np.array([1.0, -1.0, 0.5]), np.array([-1.0, 1.0, 0.0])]
    Xs = [rng.normal(size=(8 + 2 * t, d)) for t in range(T)]
    ys = [X @ (centres[t % 2] + 0.2 * rng.normal(size=d)) + 0.3 * rng.normal(size=len(X)) + 0.5
          for t, X in enumerate(Xs)]
    if kind == "classification":
        ys = [np.where(y > np.median(y), 1.0, -1.0) for y in ys]
    return Xs, ys


def _objective(Xs, ys, kind, W, b, M, rho1, rho2):
    """The objective written out again, term by term."""
    T = len(Xs)
    eta = rho2 / rho1
    total = 0.0
    for t in range(T):
        z = Xs[t] @ W[:, t] + b[t]
        total += np.mean(0.5 * (z - ys[t]) ** 2) if kind == "regression" else np.mean(np.log1p(np.exp(-ys[t] * z)))
    return total + rho1 * eta * (1 + eta) * np.trace(W @ np.linalg.inv(eta * np.eye(T) + M) @ W.T)


def _brute_force(Xs, ys, kind, rho1, rho2, k, starts=1):
    """SLSQP over (W, b, M = Q diag(g) Q') with Q = expm(A - A'), 0 <= g <= 1, sum g = k: no
    projection, no spectral closed form; the best of `starts` seeded random starts."""
    T, d = len(Xs), Xs[0].shape[1]
    iu = np.triu_indices(T, 1)
    na = len(iu[0])

    def unpack(v):
        W = v[: d * T].reshape(d, T)
        b = v[d * T: d * T + T]
        A = np.zeros((T, T))
        A[iu] = v[d * T + T: d * T + T + na]
        Q = expm(A - A.T)
        return W, b, Q @ np.diag(v[-T:]) @ Q.T

    rng = np.random.default_rng(1)
    best = None
    for _ in range(starts):
        v0 = np.concatenate([0.5 * rng.normal(size=d * T), np.zeros(T), rng.normal(size=na), np.full(T, k / T)])
        res = minimize(lambda v: _objective(Xs, ys, kind, *unpack(v), rho1, rho2), v0, method="SLSQP",
                       bounds=[(None, None)] * (d * T + T + na) + [(0.0, 1.0)] * T,
                       constraints=[{"type": "eq", "fun": lambda v: v[-T:].sum() - k}],
                       options={"maxiter": 2000, "ftol": 1e-14})
        if best is None or res.fun < best.fun:
            best = res
    return best.fun, unpack(best.x)


@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_solver_reaches_the_brute_force_minimum(kind):
    Xs, ys = _tasks(kind, T=3)
    fit = cmtl.solve(Xs, ys, kind, rho1=0.5, rho2=0.1, k=2, tol=1e-13, max_iter=50000)
    assert fit.converged
    # the objective it reports is the objective of what it returns
    assert fit.objective == pytest.approx(_objective(Xs, ys, kind, fit.W, fit.b, fit.M, 0.5, 0.1), rel=1e-10)
    # M is feasible
    lam = np.linalg.eigvalsh(fit.M)
    assert lam.min() > -1e-9 and lam.max() < 1 + 1e-9 and np.trace(fit.M) == pytest.approx(2.0)
    value, (W, b, M) = _brute_force(Xs, ys, kind, 0.5, 0.1, 2)
    assert fit.objective == pytest.approx(value, rel=1e-8, abs=1e-10)
    assert np.allclose(fit.W, W, atol=1e-4) and np.allclose(fit.b, b, atol=1e-4)


def test_projection_is_the_nearest_feasible_matrix():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(4, 4))
    S = A + A.T
    P = cmtl.project_spectral(S, 1.5)
    lam = np.linalg.eigvalsh(P)
    assert lam.min() > -1e-12 and lam.max() < 1 + 1e-12 and np.trace(P) == pytest.approx(1.5)
    # no feasible matrix is nearer: random feasible matrices (eigenvectors of S or not)
    for _ in range(200):
        Q, _ = np.linalg.qr(rng.normal(size=(4, 4)))
        g = rng.dirichlet(np.ones(4)) * 1.5
        if g.max() <= 1:
            F = (Q * g) @ Q.T
            assert np.linalg.norm(S - P) <= np.linalg.norm(S - F) + 1e-12


def test_learner_api_predicts_with_the_fit_of_all_tasks():
    Xs, ys = _tasks("regression", T=3)
    model = cmtl.CMTL(kind="regression", rho1=0.5, rho2=0.1, k=2, tol=1e-12, max_iter=20000)
    for t, (X, y) in enumerate(zip(Xs, ys)):
        r = model.learn(f"t{t}", X * 10 + 3, y)  # raw scale: standardised inside
        assert r.new_task and r.n_samples == len(y)
    pred = model.predict("t1", Xs[1] * 10 + 3)
    # the same problem standardised by hand and solved directly
    X = np.vstack(Xs) * 10 + 3
    m, s = X.mean(0), X.std(0)
    yall = np.concatenate(ys)
    ym, ysd = yall.mean(), yall.std()
    fit = cmtl.solve([(x * 10 + 3 - m) / s for x in Xs], [(y - ym) / ysd for y in ys], "regression",
                     0.5, 0.1, 2, tol=1e-12, max_iter=20000)
    expected = ym + ysd * (((Xs[1] * 10 + 3 - m) / s) @ fit.W[:, 1] + fit.b[1])
    assert np.allclose(pred, expected, atol=1e-6)
    assert model.fit_seconds > 0
    model.learn("t1", Xs[1][:2] * 10 + 3, ys[1][:2])  # more rows: the next prediction refits
    assert model._fit is None
    model.predict("t0", Xs[0][:1])
    assert model._fit is not None
