"""Each solver against an independent computation (scipy or brute force)."""
import subprocess
import sys

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize

from core.solvers import (_lasso_objective, cholesky_solve, fista_quadratic_l1, lasso_gram, least_squares,
                          project_simplex, simplex_assignment, soft_threshold, solve_ridge_ball, solve_rows_in_ball)

SIMPLEX = {"type": "eq", "fun": lambda z: z.sum() - 1.0}


def slsqp(fun, x0, constraints=(), bounds=None, jac=None):
    res = scipy.optimize.minimize(fun, x0, method="SLSQP", jac=jac, constraints=constraints, bounds=bounds,
                                  options={"ftol": 1e-14, "maxiter": 2000})
    assert res.success, res.message
    return res.x


@pytest.mark.parametrize("seed", range(8))
def test_simplex_projection_matches_qp(seed):
    rng = np.random.default_rng(seed)
    v = rng.normal(scale=[0.1, 1.0, 3.0][seed % 3], size=rng.integers(1, 9))
    z = project_simplex(v)
    # independent: the KKT threshold tau solves sum(max(v - tau, 0)) = 1, found by root finding
    tau = scipy.optimize.brentq(lambda t: np.maximum(v - t, 0).sum() - 1, v.min() - 1, v.max(), xtol=1e-15)
    ref = np.maximum(v - tau, 0)
    assert z.min() >= 0 and abs(z.sum() - 1) < 1e-12
    np.testing.assert_allclose(z, ref, atol=1e-6)


def test_simplex_projection_brute_force_small():
    # brute force over a fine grid of the 2-simplex
    v = np.array([0.3, -0.2, 0.9])
    grid = [(a, b, 1 - a - b) for a in np.linspace(0, 1, 401) for b in np.linspace(0, 1, 401) if a + b <= 1]
    best = min(grid, key=lambda z: np.sum((np.array(z) - v) ** 2))
    np.testing.assert_allclose(project_simplex(v), best, atol=3e-3)


def lasso_objective(H, g, lam):
    return lambda x: x @ H @ x - 2 * g @ x + lam * np.abs(x).sum()


@pytest.mark.parametrize("seed", range(6))
def test_fista_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    p = 6
    B = rng.normal(size=(10, p))
    H = B.T @ B / 10 + 0.05 * np.eye(p)
    g = rng.normal(size=p)
    lam = [0.0, 0.3, 1.0][seed % 3]
    x = fista_quadratic_l1(H, g, lam)
    # independent: split x = u - v with u, v >= 0 makes the problem smooth (L-BFGS-B)
    f = lambda uv: (uv[:p] - uv[p:]) @ H @ (uv[:p] - uv[p:]) - 2 * g @ (uv[:p] - uv[p:]) + lam * uv.sum()
    res = scipy.optimize.minimize(f, np.zeros(2 * p), method="L-BFGS-B", bounds=[(0, None)] * (2 * p),
                                  options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10000})
    ref = res.x[:p] - res.x[p:]
    obj = lasso_objective(H, g, lam)
    assert obj(x) <= obj(ref) + 1e-9
    np.testing.assert_allclose(x, ref, atol=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_fista_returns_the_exact_minimiser_found_by_enumerating_sign_patterns(seed):
    """The lasso's minimiser is, for some pattern of signs (-1, 0, +1 per coordinate), the
    solution of ``H_SS x_S = g_S - lam/2 sign_S`` that meets the optimality conditions; trying
    all 3^p patterns finds it independently. FISTA's answer equals it to rounding, not merely
    to its stopping tolerance."""
    import itertools

    rng = np.random.default_rng(100 + seed)
    p = 6
    B = rng.normal(size=(9, p))
    H = B.T @ B / 9 + 0.02 * np.eye(p)
    g = rng.normal(size=p)
    lam = [0.2, 0.6, 1.2, 0.05][seed]
    best = None
    for pattern in itertools.product((-1, 0, 1), repeat=p):
        signs = np.array(pattern, dtype=float)
        S = np.flatnonzero(signs)
        z = np.zeros(p)
        if S.size:
            z[S] = np.linalg.solve(H[np.ix_(S, S)], g[S] - 0.5 * lam * signs[S])
            if np.any(np.sign(z[S]) != signs[S]):
                continue
        grad = 2 * (H @ z - g)
        if np.all(np.abs(grad[signs == 0]) <= lam + 1e-12):
            best = z
            break
    assert best is not None
    np.testing.assert_allclose(fista_quadratic_l1(H, g, lam), best, rtol=0, atol=1e-13)


def test_fista_gives_exact_zeros_for_large_l1():
    H = np.eye(3)
    g = np.array([0.1, -0.2, 2.0])
    x = fista_quadratic_l1(H, g, lam=1.0)  # closed form: soft_threshold(g, lam / 2)
    np.testing.assert_allclose(x, [0.0, 0.0, 1.5], atol=1e-9)
    np.testing.assert_allclose(x, soft_threshold(g, 0.5), atol=1e-9)
    assert x[0] == 0.0 and x[1] == 0.0


def test_soft_threshold_is_the_prox_of_the_l1_norm():
    v = np.array([-3.0, -0.5, 0.0, 0.2, 1.0, 4.0])
    np.testing.assert_array_equal(soft_threshold(v, 1.0), [-2.0, 0.0, 0.0, 0.0, 0.0, 3.0])
    rng = np.random.default_rng(0)
    for _ in range(5):
        u, t = rng.normal(size=4), float(rng.uniform(0.1, 2.0))
        ref = scipy.optimize.minimize(lambda x: 0.5 * (x - u) @ (x - u) + t * np.abs(x).sum(), u,
                                      method="Powell", options=dict(xtol=1e-12, ftol=1e-14)).x
        np.testing.assert_allclose(soft_threshold(u, t), ref, atol=1e-6)


def paper_admm(costs, lambda2, alpha, rho, beta=None, relaxation=1.0, max_iter=20000, tol=1e-12):
    """The paper's ADMM for the ``Z`` step (Algorithm 3, the appendix's sign typos fixed), on
    the problem with the ``rho`` term: split ``Z = J`` with ``f(Z) = alpha ||Z||_1 + rho/2
    ||Z||^2`` and ``g(J) = lambda2 <costs, J> + indicator_simplex(J)``, scaled form, penalty
    ``beta`` (default ``rho``), over-relaxed by ``relaxation`` (Boyd et al. 2011, 3.4.3), from
    the uniform ``Z``."""
    beta = rho if beta is None else beta
    k = costs.size
    J, U = np.full(k, 1.0 / k), np.zeros(k)
    for _ in range(max_iter):
        Z = soft_threshold(beta * J - U, alpha) / (rho + beta)
        relaxed = relaxation * Z + (1.0 - relaxation) * J
        J_new = project_simplex(relaxed + (U - lambda2 * costs) / beta)
        U = U + beta * (relaxed - J_new)
        done = np.sum((Z - J_new) ** 2) <= tol * tol and np.sum((J_new - J) ** 2) <= (tol / beta) ** 2
        J = J_new
        if done:
            return J
    raise AssertionError("ADMM did not converge")


@pytest.mark.parametrize("relaxation, beta", [(1.8, None), (1.0, None), (1.0, 1.0)])
@pytest.mark.parametrize("seed", range(6))
def test_the_z_step_is_the_point_the_papers_admm_and_scipy_reach(seed, relaxation, beta):
    rng = np.random.default_rng(seed)
    k = rng.integers(2, 7)
    costs = rng.uniform(0, 2, size=k)
    lambda2, alpha, rho = [(1.0, 1e-3, 0.1), (0.5, 0.2, 1.0), (2.0, 0.0, 0.05)][seed % 3]
    z = simplex_assignment(costs, lambda2, rho)
    np.testing.assert_allclose(z, paper_admm(costs, lambda2, alpha, rho, beta=beta, relaxation=relaxation),
                               atol=1e-9)
    obj = lambda x: lambda2 * costs @ x + alpha * np.abs(x).sum() + rho / 2 * x @ x
    ref = slsqp(obj, np.full(k, 1 / k), SIMPLEX, [(0, 1)] * k)
    assert obj(z) <= obj(ref) + 1e-12
    np.testing.assert_allclose(z, ref, atol=1e-5)
    # no feasible point does better: the objective at random points of the simplex
    for p in rng.dirichlet(np.ones(k), size=200):
        assert obj(z) <= obj(p) + 1e-12


def test_the_z_step_with_a_small_rho_is_the_hard_assignment_of_the_papers_lp():
    costs = np.array([0.7, 0.2, 0.5, 0.9])
    np.testing.assert_array_equal(simplex_assignment(costs, lambda2=1.0, rho=1e-4), [0, 1, 0, 0])
    np.testing.assert_allclose(paper_admm(costs, 1.0, 1e-3, 1e-4), [0, 1, 0, 0], atol=1e-8)


def test_the_z_step_refuses_costs_that_are_not_finite():
    with pytest.raises(FloatingPointError):
        simplex_assignment(np.array([0.1, np.nan]), 1.0, 0.1)


@pytest.mark.parametrize("n", [1, 3, 10, 60])
def test_cholesky_solve_is_scipys_cho_solve(n):
    rng = np.random.default_rng(n)
    B = rng.normal(size=(n + 2, n))
    A, b = B.T @ B + 0.1 * np.eye(n), rng.normal(size=n)
    expected = scipy.linalg.cho_solve(scipy.linalg.cho_factor(A), b)
    np.testing.assert_array_equal(cholesky_solve(A.copy(), b), expected)  # the same LAPACK calls
    np.testing.assert_allclose(A @ cholesky_solve(A.copy(), b, overwrite_a=True), b, rtol=1e-10, atol=1e-10)


def test_cholesky_solve_refuses_a_matrix_that_is_not_positive_definite():
    with pytest.raises(np.linalg.LinAlgError):
        cholesky_solve(np.diag([1.0, -1.0, 2.0]), np.ones(3))


@pytest.mark.parametrize("max_norm", [None, 0.5])
def test_ridge_ball_solve_matches_scipy(max_norm):
    rng = np.random.default_rng(1)
    shape = (3, 2)
    B = rng.normal(size=(8, 6))
    A = B.T @ B / 8 + 0.1 * np.eye(6)
    b = rng.normal(size=6) * 3
    W = solve_ridge_ball(A, b, shape, max_norm, axis=0)
    obj = lambda x: x @ A @ x - 2 * b @ x
    if max_norm is None:
        np.testing.assert_allclose(W.reshape(-1, order="F"), np.linalg.solve(A, b), rtol=1e-10)
        return

    # independent: scipy's interior-point trust-region method on the same problem, exact derivatives
    # (SLSQP's line search stalls near this optimum at tight tolerances)
    def columns(x):
        return np.sum(x.reshape(shape, order="F") ** 2, axis=0)

    def columns_jac(x):
        J = np.zeros((shape[1], x.size))
        for j in range(shape[1]):
            J[j, j * shape[0]:(j + 1) * shape[0]] = 2.0 * x[j * shape[0]:(j + 1) * shape[0]]
        return J
    ball = scipy.optimize.NonlinearConstraint(columns, -np.inf, max_norm**2, jac=columns_jac,
                                              hess=lambda x, v: 2.0 * np.repeat(v, shape[0]) * np.eye(x.size))
    res = scipy.optimize.minimize(obj, np.zeros(6), jac=lambda x: 2.0 * (A @ x - b), hess=lambda x: 2.0 * A,
                                  method="trust-constr", constraints=[ball],
                                  options={"gtol": 1e-12, "xtol": 1e-14, "maxiter": 5000})
    ref = res.x
    assert np.all(np.linalg.norm(W, axis=0) <= max_norm + 1e-9)
    assert obj(W.reshape(-1, order="F")) <= obj(ref) + 1e-7
    np.testing.assert_allclose(W.reshape(-1, order="F"), ref, atol=1e-4)


def test_rows_in_ball_matches_scipy():
    rng = np.random.default_rng(2)
    B = rng.normal(size=(9, 4))
    G = B.T @ B / 9 + 0.05 * np.eye(4)
    R = rng.normal(size=(3, 4)) * 2
    L = solve_rows_in_ball(G, R, 0.7)
    for i in range(3):
        # a convex problem: the KKT conditions certify the minimiser, whatever computed it
        li = L[i]
        nu = (R[i] - G @ li) @ li / (li @ li)  # the multiplier that best explains stationarity
        assert nu >= -1e-10 and li @ li <= 0.49 * (1 + 1e-9)
        np.testing.assert_allclose((G + nu * np.eye(4)) @ li, R[i], atol=1e-8)  # stationarity
        assert abs(nu * (li @ li - 0.49)) < 1e-8  # complementary slackness
        # and an independent solver agrees
        obj = lambda l: l @ G @ l - 2 * R[i] @ l
        ball = scipy.optimize.NonlinearConstraint(lambda l: l @ l, 0, 0.49, jac=lambda l: 2 * l,
                                                  hess=lambda l, v: 2 * v[0] * np.eye(4))
        ref = scipy.optimize.minimize(obj, np.zeros(4), jac=lambda l: 2 * G @ l - 2 * R[i], hess=lambda l: 2 * G,
                                      method="trust-constr", constraints=[ball],
                                      options={"gtol": 1e-12, "xtol": 1e-14, "maxiter": 5000}).x
        np.testing.assert_allclose(li, ref, atol=1e-5)
    np.testing.assert_allclose(solve_rows_in_ball(G, R, None), np.linalg.solve(G, R.T).T, rtol=1e-10)


def kronecker_sum(rng, d, p, T):
    A = np.zeros((d * p, d * p))
    for _ in range(T):
        s, u = rng.normal(size=p), rng.normal(size=p)
        X = rng.normal(size=(max(3, d // 2), d)) * rng.uniform(0.3, 3.0, d)  # tasks' Hessians differ
        A += np.kron(np.outer(s, s) + 0.5 * np.outer(u, u), X.T @ X / len(X) + 0.01 * np.eye(d))
    return A


@pytest.mark.parametrize("warm", [False, True])
def test_kronecker_pcg_matches_the_direct_solve(warm):
    from core.solvers import kronecker_sum_pcg

    rng = np.random.default_rng(3)
    d, p, T = 9, 4, 12
    A, b = kronecker_sum(rng, d, p, T), rng.normal(size=d * p)
    ref = np.linalg.solve(A / T + 1e-3 * np.eye(d * p), b)
    x0 = ref + 1e-3 * rng.normal(size=ref.size) if warm else None
    x = kronecker_sum_pcg(A, 1.0 / T, 1e-3, b, (d, p), x0=x0)
    np.testing.assert_allclose(x, ref, rtol=1e-9, atol=1e-10)


def test_kronecker_pcg_falls_back_to_cholesky_when_it_runs_out_of_iterations():
    from core.solvers import kronecker_sum_pcg

    rng = np.random.default_rng(4)
    d, p, T = 7, 3, 6
    A, b = kronecker_sum(rng, d, p, T), rng.normal(size=d * p)
    x = kronecker_sum_pcg(A, 1.0 / T, 1e-3, b, (d, p), max_iter=1)
    np.testing.assert_allclose(x, np.linalg.solve(A / T + 1e-3 * np.eye(d * p), b), rtol=1e-9)


def test_kronecker_pcg_is_exact_when_the_system_is_beyond_float32_range():
    """The float32 inner solves overflow; the float64 fallback must still give the minimiser."""
    from core.solvers import kronecker_sum_pcg

    rng = np.random.default_rng(6)
    d, p, T = 6, 3, 5
    A, b = 1e40 * kronecker_sum(rng, d, p, T), 1e40 * rng.normal(size=d * p)
    x = kronecker_sum_pcg(A, 1.0 / T, 1e-3, b, (d, p))
    np.testing.assert_allclose(x, np.linalg.solve(A / T + 1e-3 * np.eye(d * p), b), rtol=1e-8)


def test_kronecker_pcg_refines_float32_solves_to_float64_accuracy():
    """An ill-conditioned system (condition ~1e8) needs float64 residuals: one float32 solve
    alone would stop near 1e-7 relative error."""
    from core.solvers import kronecker_sum_pcg

    rng = np.random.default_rng(7)
    d, p, T = 10, 5, 20
    A, b = kronecker_sum(rng, d, p, T), rng.normal(size=d * p)
    ridge = 1e-8
    ref = np.linalg.solve(A / T + ridge * np.eye(d * p), b)
    x = kronecker_sum_pcg(A, 1.0 / T, ridge, b, (d, p), rtol=1e-12)
    residual = b - (A / T @ x + ridge * x)
    assert np.linalg.norm(residual) <= 1e-12 * np.linalg.norm(b) * 10
    np.testing.assert_allclose(x, ref, rtol=1e-4)


def test_plus_kron_terms_returns_the_sum_and_its_float32_copy_and_leaves_a_alone():
    from core.solvers import plus_kron_terms

    rng = np.random.default_rng(8)
    d, p = 5, 4
    A = rng.normal(size=(d * p, d * p))
    before = A.copy()
    terms = [(rng.normal(size=(p, p)), rng.normal(size=(d, d)), 1.0),
             (rng.normal(size=(p, p)), rng.normal(size=(d, d)), -0.5)]
    terms[0][0][2] = 0.0
    new, low = plus_kron_terms(A, terms, low_precision=True)
    expected = A + np.kron(terms[0][0], terms[0][1]) - 0.5 * np.kron(terms[1][0], terms[1][1])
    np.testing.assert_allclose(new, expected, rtol=1e-14, atol=1e-13)
    assert low.dtype == np.float32 and np.array_equal(np.tril(low), np.tril(new.astype(np.float32)))
    assert np.array_equal(A, before)
    assert plus_kron_terms(A, terms)[1] is None


# ----------------------------------------------------------------------------- ELLA's lasso
def _scipy_lasso(Q, c, lam):
    k = c.size

    def f(uv):
        return _lasso_objective(Q, c, lam, uv[:k] - uv[k:])

    def g(uv):
        gr = 2 * (Q @ (uv[:k] - uv[k:]) - c)
        return np.concatenate([gr + lam, -gr + lam])

    r = scipy.optimize.minimize(f, np.zeros(2 * k), jac=g, method="L-BFGS-B", bounds=[(0, None)] * (2 * k),
                                options=dict(ftol=1e-15, gtol=1e-12, maxiter=20000))
    return r.x[:k] - r.x[k:], r.fun


def _brute_force_lasso(Q, c, lam):
    """Exact lasso for small k: try every sign pattern, keep consistent stationary points."""
    import itertools

    k = c.size
    best, best_f = np.zeros(k), _lasso_objective(Q, c, lam, np.zeros(k))
    for signs in itertools.product((-1, 0, 1), repeat=k):
        sg = np.array(signs, dtype=float)
        idx = np.nonzero(sg)[0]
        if idx.size == 0:
            continue
        s = np.zeros(k)
        s[idx] = np.linalg.solve(Q[np.ix_(idx, idx)], c[idx] - 0.5 * lam * sg[idx])
        if np.all(np.sign(s[idx]) == sg[idx]):
            f = _lasso_objective(Q, c, lam, s)
            if f < best_f:
                best, best_f = s, f
    return best


@pytest.mark.parametrize("seed", range(40))
def test_lasso_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    k, d = int(rng.integers(1, 7)), int(rng.integers(2, 10))
    L = rng.normal(size=(d, k))
    if seed % 4 == 0 and k > 1:
        L[:, 0] = 2 * L[:, -1]  # collinear columns: singular Q
    B = rng.normal(size=(d, d))
    omega = B @ B.T / d + 0.01 * np.eye(d)
    w = rng.normal(size=d)
    Q, c, lam = L.T @ omega @ L, L.T @ omega @ w, 10 ** rng.uniform(-5, 0.5)
    s = lasso_gram(Q, c, lam)
    ref_s, ref_f = _scipy_lasso(Q, c, lam)
    f = _lasso_objective(Q, c, lam, s)
    assert f <= ref_f + 1e-8 * max(1.0, abs(ref_f))
    # and it is the encoding ELLA v1.0 states: ||w - L s||^2_Omega + lam ||s||_1 (up to a constant)
    direct = (w - L @ s) @ omega @ (w - L @ s) + lam * np.abs(s).sum()
    assert direct == pytest.approx(f + w @ omega @ w, rel=1e-9, abs=1e-9)
    if np.linalg.cond(Q) < 1e6:  # unique minimiser: compare with exact enumeration of sign patterns
        np.testing.assert_allclose(s, _brute_force_lasso(Q, c, lam), rtol=1e-7, atol=1e-9)


def test_lasso_zero_when_l1_large():
    Q = np.array([[2.0, 0.3], [0.3, 1.0]])
    c = np.array([0.5, -0.2])
    assert np.all(lasso_gram(Q, c, 10.0) == 0.0)


def test_solvers_raise_floating_point_error_on_non_finite_systems():
    G = np.eye(3)
    G[0, 1] = G[1, 0] = np.inf
    with pytest.raises(FloatingPointError):
        solve_rows_in_ball(G, np.ones((2, 3)), 1.0)
    with pytest.raises(FloatingPointError):
        solve_rows_in_ball(np.eye(3), np.full((2, 3), np.nan), None)
    A = np.eye(4)
    A[3, 0] = np.nan  # below the diagonal: the Cholesky factor (upper) never reads it
    with pytest.raises(FloatingPointError):
        solve_ridge_ball(A, np.full(4, 10.0), (2, 2), max_norm=0.5)


def test_least_squares_is_the_minimum_norm_solution():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(5, 3)) @ rng.normal(size=(3, 5))  # rank 3 of 5: no unique solution
    b = rng.normal(size=5)
    expected = scipy.linalg.lstsq(A, b, lapack_driver="gelsy")[0]  # another LAPACK driver
    np.testing.assert_allclose(least_squares(A, b), expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_least_squares_refuses_a_non_finite_system_instead_of_hanging(bad):
    """In a child process with a timeout: numpy's own ``lstsq`` never returns on one."""
    script = (f"import numpy as np\nfrom core.solvers import least_squares\nA = np.eye(5)\nA[0, 0] = np.{bad}\n"
              "try:\n    least_squares(A, np.ones(5))\nexcept FloatingPointError:\n    print('refused')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "refused", out.stdout + out.stderr
