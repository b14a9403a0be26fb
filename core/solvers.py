"""Every numeric solver the learners are built from, each small enough to test against scipy.

* :func:`project_simplex` — Euclidean projection onto the probability simplex
  (Duchi, Shalev-Shwartz, Singer & Chandra 2008, the O(K log K) sort-based algorithm).
* :func:`soft_threshold` — the proximal operator of the l1 norm.
* :func:`fista` — accelerated proximal gradient with restart (FISTA, Beck & Teboulle 2009),
  used by :func:`fista_quadratic_l1` (``min_x x'Hx - 2 g'x + lam ||x||_1``, the FCL3 ``s``
  step) and by :func:`solve_ridge_ball`.
* :func:`simplex_assignment` — the FCL3 ``Z`` step's minimiser, in closed form (the point
  the paper's ADMM, Algorithm 3, converges to).
* :func:`plus_kron_terms` and :func:`kronecker_sum_pcg` — FCL3's decoder statistics and the
  mixed-precision conjugate-gradient solve of its large decoder systems.
* :func:`solve_ridge_ball` — the library updates: a ridge-regularised quadratic in a matrix
  whose columns (or rows) must stay in a ball.
* :func:`solve_rows_in_ball` — FCL3's encoder update: one trust-region problem per row.
* :func:`lasso_gram` — ELLA's sparse code: an exact lasso in Gram form.
* :func:`least_squares` — the minimum-norm least-squares fallback of a singular solve.

Where a non-finite value would reach a scipy routine that checks for one, or a LAPACK routine
that never returns on one, the solver raises :class:`FloatingPointError` itself (a typed
error the learners turn into ``InputError``).
"""
from __future__ import annotations

import math

import numpy as np
import scipy.linalg
import scipy.linalg.blas
import scipy.linalg.lapack
import scipy.optimize


def least_squares(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.linalg.lstsq(a, b)``'s minimum-norm solution; :class:`FloatingPointError` when
    ``a`` or ``b`` holds NaN or inf, on which LAPACK's ``gelsd`` (numpy 2.4's OpenBLAS 0.3.31)
    loops forever instead of failing."""
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise FloatingPointError("least-squares system is not finite")
    return np.linalg.lstsq(a, b, rcond=None)[0]


def project_simplex(v: np.ndarray) -> np.ndarray:
    """Return ``argmin_{z >= 0, sum z = 1} ||z - v||``: the sort-based O(K log K) algorithm."""
    v = np.asarray(v, dtype=float)
    if not np.isfinite(v).all():
        raise FloatingPointError("simplex projection of a non-finite vector")
    return _project_simplex(v)


def _project_simplex(v: np.ndarray) -> np.ndarray:
    """:func:`project_simplex` without the input check (for loops that check once)."""
    u = np.sort(v)[::-1]
    css = np.cumsum(u)
    css -= 1.0
    ranks = _RANKS[: v.size] if v.size <= _RANKS.size else np.arange(1.0, v.size + 1.0)
    rho = (u * ranks > css).nonzero()[0][-1]
    return np.maximum(v - css[rho] / (rho + 1.0), 0.0)


_RANKS = np.arange(1.0, 257.0)  # 1..256: u_j > (css_j) / j  <=>  j * u_j > css_j


#: :func:`fista_quadratic_l1` solves for the exact minimiser on a support only where the
#: smallest eigenvalue of ``H`` there is above this fraction of the largest.
EXACT_MIN_CONDITION = 1e-10


def soft_threshold(v: np.ndarray, t: float) -> np.ndarray:
    """Proximal operator of ``t ||.||_1``."""
    return np.sign(v) * np.maximum(np.abs(v) - t, 0.0)


def fista(forward, x0: np.ndarray, converged, max_iter: int = 1000, exact=None,
          exact_every: int = 5) -> np.ndarray:
    """Accelerated proximal gradient (FISTA, Beck & Teboulle 2009) with gradient restart.

    ``forward(y)`` is one proximal-gradient step from ``y``, ``prox(y - step * grad f(y))``
    with ``step`` the inverse Lipschitz constant of ``grad f``. Each iteration takes that step
    from the extrapolated point and adds Nesterov momentum, restarted whenever it points
    uphill (the gradient restart of O'Donoghue & Candes 2015), which keeps convergence fast
    on small, well-conditioned problems. Stops when ``converged(||x_new - x||^2, ||x_new||^2)``
    (the caller's relative tolerance) or after ``max_iter`` iterations. The loop uses dot
    products only: it runs a few hundred times per update, so its numpy call count is its cost.

    ``exact(x)``, when given, is asked every ``exact_every`` iterations for the exact minimiser
    that ``x`` points to (for example the one on ``x``'s support and signs) and returns it, or
    ``None`` when it cannot certify one; a certified minimiser ends the loop.
    """
    x = x0
    y, t = x.copy(), 1.0
    for it in range(max_iter):
        x_new = forward(y)
        diff = x_new - x
        t_new = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
        if (y - x_new) @ diff > 0.0:  # momentum points uphill: restart
            y, t_new = x_new, 1.0
        else:
            y = x_new + ((t - 1.0) / t_new) * diff
        x, t = x_new, t_new
        if converged(diff @ diff, x @ x):
            break
        if exact is not None and it % exact_every == exact_every - 1:
            found = exact(x)
            if found is not None:
                return found
    return x


def fista_quadratic_l1(
    H: np.ndarray, g: np.ndarray, lam: float, x0: np.ndarray | None = None,
    max_iter: int = 1000, tol: float = 1e-10,
) -> np.ndarray:
    """Minimise ``x'Hx - 2 g'x + lam ||x||_1`` for symmetric PSD ``H`` by :func:`fista`.

    The smooth part has gradient ``2(Hx - g)`` and Lipschitz constant ``2 lambda_max(H)``; the
    step is its inverse and the proximal operator is :func:`soft_threshold`. The gradient step
    is one product with ``I - 2 step H`` (precomputed). Stops when an iteration moves ``x`` by
    less than ``tol * sqrt(1 + ||x||^2)``, or earlier at the exact minimiser once the
    iterates show its support and signs: ``x_S`` solves ``H_SS x_S = g_S - lam/2 sign_S`` on
    the support ``S`` of the iterate, and is taken when it keeps those signs and the optimality
    conditions hold off the support (``|2 (H x - g)_j| <= lam``): a point that meets them is a
    minimiser, as the problem is convex. That shortcut is taken only where ``H_SS`` is well
    conditioned (:data:`EXACT_MIN_CONDITION`); where it is singular the minimisers form a set,
    and FISTA's own limit is kept.
    """
    p = g.size
    x = np.zeros(p) if x0 is None else np.array(x0, dtype=float)
    lip = 2.0 * max(float(np.linalg.eigvalsh(H)[-1]), 1e-300)
    step = 1.0 / lip
    descent = np.eye(p) - (2.0 * step) * H  # y - step * grad(y) = descent @ y + shift
    shift, thr = (2.0 * step) * g, step * lam
    tol2 = tol * tol

    def forward(y):
        v = descent @ y
        v += shift
        return soft_threshold(v, thr)

    def converged(moved2, norm2):
        return moved2 <= tol2 * (1.0 + norm2)

    slack = 1e-12 * (lam + float(np.abs(g).max(initial=0.0)))

    def exact(x):
        support = np.flatnonzero(x)
        signs = np.sign(x[support])
        z = np.zeros(p)
        if support.size:
            H_SS = H[np.ix_(support, support)]
            eig = np.linalg.eigvalsh(H_SS)
            if not eig[0] > EXACT_MIN_CONDITION * eig[-1]:  # minimisers not unique (or not well determined)
                return None
            z[support] = np.linalg.solve(H_SS, g[support] - (0.5 * lam) * signs)
            if not np.array_equal(np.sign(z[support]), signs):
                return None
        off = np.ones(p, dtype=bool)
        off[support] = False
        grad = 2.0 * (H[off] @ z - g[off])
        return z if np.all(np.abs(grad) <= lam + slack) else None

    return fista(forward, x, converged, max_iter, exact) + 0.0  # no negative zeros from the prox in reported codes


def simplex_assignment(costs: np.ndarray, lambda2: float, rho: float) -> np.ndarray:
    """The FCL3 ``Z`` step: the minimiser of::

        lambda2 <costs, Z> + alpha ||Z||_1 + (rho / 2) ||Z||^2   s.t.   Z >= 0, sum(Z) = 1

    for any ``alpha``, in closed form: ``Proj_simplex(-lambda2 * costs / rho)``. On the
    simplex ``||Z||_1 = 1``, so ``alpha`` adds a constant, and the rest is ``rho / 2`` times
    the squared distance from ``Z`` to ``-lambda2 costs / rho`` plus a constant. The paper's
    ``Z`` problem is this with ``rho = 0``: a linear program whose solution is the vertex at
    the smallest cost (a hard assignment); the paper's ADMM (Algorithm 3) run for a finite
    number of steps from the uniform start is what made its ``Z`` soft. The ``rho`` term
    makes that explicit and well-posed, and ``rho -> 0`` recovers the hard assignment. The
    paper's ADMM converges to this point: ``tests/core/test_solvers.py`` runs it (with the
    appendix's sign typos fixed) and scipy's SLSQP on the problem and compares.
    """
    costs = np.asarray(costs, dtype=float)
    if not np.isfinite(costs).all():
        raise FloatingPointError("assignment costs are not finite")
    return _project_simplex((-lambda2 / rho) * costs)


def plus_kron_terms(
    A: np.ndarray, terms: list[tuple[np.ndarray, np.ndarray, float]], low_precision: bool = False,
) -> tuple[np.ndarray, np.ndarray | None]:
    """``A + sum_j sign_j kron(S_j, Omega_j)`` as a new array (``A`` is not written), and, if
    asked, its float32 copy for :func:`kronecker_sum_pcg` (lower triangle only, at least the
    blocks on and below the diagonal; the rest is not written).

    One sweep over ``A``'s block rows does it all while each block row (``d^2 p`` entries) is
    in cache: a separate copy, in-place additions and a float32 conversion would each pass
    over the whole ``(dp)^2`` matrix (52 MB at ``d = 128, p = 20``; these passes are bound by
    memory bandwidth). Entry ``(i*d + k, j*d + l)`` of ``kron(S, Omega)`` is
    ``S[i, j] * Omega[k, l]``, the layout of the column-major ``vec`` of a ``d x p`` matrix,
    so block row ``i`` gains ``S[i, j] * Omega`` in its block ``j``.
    """
    d, p = terms[0][1].shape[0], terms[0][0].shape[0]
    n = d * p
    new = np.empty((n, n))
    low = np.empty((n, n), dtype=np.float32) if low_precision else None
    src, dst = A.reshape(p, d, p, d), new.reshape(p, d, p, d)
    for i in range(p):
        row = dst[i]
        np.copyto(row, src[i])
        for S, omega, sign in terms:
            if np.any(S[i]):
                row += (sign * S[i])[None, :, None] * omega[:, None, :]
        if low is not None:  # only the lower triangle: symmetric products read no more
            low[i * d:(i + 1) * d, :(i + 1) * d] = row.reshape(d, n)[:, :(i + 1) * d]
    return new, low


def kronecker_sum_pcg(
    A: np.ndarray, scale: float, ridge: float, b: np.ndarray, shape: tuple[int, int],
    x0: np.ndarray | None = None, rtol: float = 1e-10, max_iter: int = 300,
    inner_rtol: float = 1e-5, max_refinements: int = 8, A32: np.ndarray | None = None,
) -> np.ndarray:
    """Solve ``(scale * A + ridge * I) x = b`` for ``A = sum_t kron(S_t, Omega_t)`` (``S_t`` is
    ``p x p``, ``Omega_t`` is ``d x d``, ``shape = (d, p)``) to a relative residual ``rtol``
    without factorising the ``dp x dp`` system.

    The decoder statistics have exactly this form. Two ideas keep the cost at a few dozen
    passes over ``A``, instead of an ``O((dp)^3)`` factorisation:

    * **Block-whitened Kronecker preconditioner** (:func:`_kronecker_preconditioner`): exact
      diagonal blocks (one ``d x d`` Cholesky factor per code component) coupled by the
      components' average correlation, inverted in ``O(p d^3)`` once per solve and applied in
      ``O(p d^2 + p^2 d)``. It equals the system when every ``Omega_t`` is the same.
    * **Mixed precision with iterative refinement**: the residual is computed in float64 and
      the correction is found by preconditioned CG on a float32 copy of the system, to a
      relative ``inner_rtol``. A matrix-vector product is bound by memory bandwidth, so the
      float32 products cost half as much; the float64 residual of the next refinement step
      makes the answer as accurate as a float64 solve (the classic argument: each
      refinement step multiplies the error by about ``inner_rtol``).

    From a warm start (the previous ``D``) two or three refinement steps reach ``rtol``. If
    the float32 system cannot make progress (a non-finite value, ``A`` beyond float32's
    range, or stagnation), the exact Cholesky solve is used instead, so the answer is always
    the minimiser to ``rtol``. ``A32`` is ``A`` in float32 if the caller already has it
    (:func:`plus_kron_terms` makes it in the same sweep that updates ``A``).

    ``A`` is symmetric, and every product with it is the BLAS symmetric one (``symv``), which
    reads only the lower triangle: half the memory traffic of a general product.
    """
    d, p = shape
    n = d * p
    b = np.asarray(b, dtype=float)
    bnorm = max(float(np.linalg.norm(b)), 1e-300)
    x = np.zeros(n) if x0 is None else np.array(x0, dtype=float)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        try:
            precondition = _kronecker_preconditioner(A, scale, ridge, shape, np.float32)
        except np.linalg.LinAlgError:  # a diagonal block not numerically positive definite
            precondition = None
        if precondition is not None and A32 is None:
            A32 = A.astype(np.float32)
        ridge32 = np.float32(ridge)
        # A.T is the Fortran-ordered view of the C-ordered A: "upper" there is A's lower triangle
        lower64 = A.T
        lower32 = A32.T if A32 is not None else None

        def matvec32(v):
            return scipy.linalg.blas.ssymv(scale, lower32, v, lower=0) + ridge32 * v

        previous = np.inf
        for _ in range(max_refinements if precondition is not None else 0):
            r = b - (scipy.linalg.blas.dsymv(scale, lower64, x, lower=0) + ridge * x)
            rnorm = float(np.linalg.norm(r))
            if rnorm <= rtol * bnorm:
                return x
            if not np.isfinite(rnorm) or rnorm >= 0.5 * previous:  # no progress: refinement failed
                break
            previous = rnorm
            goal = max(inner_rtol, 0.5 * rtol * bnorm / rnorm)
            dx = _pcg(matvec32, precondition, r.astype(np.float32), goal, max_iter)
            if not np.all(np.isfinite(dx)):
                break
            x = x + dx
    system = scale * A
    system.flat[:: n + 1] += ridge
    return cholesky_solve(system, b, overwrite_a=True)


def _kronecker_preconditioner(A, scale, ridge, shape, dtype):
    """``v -> P^-1 v`` for the block-whitened Kronecker approximation ``P`` of
    ``M = scale * A + ridge * I`` (see :func:`kronecker_sum_pcg`).

    With ``L_i`` the Cholesky factor of the diagonal block ``M_ii``, ``P = L (R kron I) L'``
    where ``L = blockdiag(L_i)`` and ``R_ij = scale tr(A_ij) / sqrt(m_i m_j)``
    (``m_i = scale tr(A_ii) + d ridge``, ``R_ii = 1``): the diagonal blocks are exact, so
    tasks' different Hessians are captured component by component, and the coupling between
    components is the average one. It equals ``M`` when every ``Omega_t`` is the same, and
    needs fewer iterations than the plain ``kron(B, C)`` approximation when they differ
    (see docs/benchmarks.md).
    """
    d, p = shape
    blocks = A.reshape(p, d, p, d)  # blocks[i, :, j, :] is the (i, j) block A_ij (column-major vec)
    diagonal = scale * blocks[np.arange(p), :, np.arange(p), :] + ridge * np.eye(d)  # (p, d, d)
    inv_factors = np.empty((p, d, d))  # L_i^-1: a triangular inverse is a third of a general one
    for i in range(p):
        inv_factors[i], info = scipy.linalg.lapack.dtrtri(np.linalg.cholesky(diagonal[i]), lower=1)
        if info != 0:
            raise np.linalg.LinAlgError("singular diagonal block")
    traces = scale * np.einsum("ikjk->ij", blocks) + ridge * d * np.eye(p)
    m = np.sqrt(np.maximum(np.diag(traces), 1e-300))
    R = traces / np.outer(m, m)
    lam, U = np.linalg.eigh((R + R.T) / 2)
    R_inv = ((U / np.maximum(lam, 1e-3)) @ U.T).astype(dtype)  # clipped: P stays positive definite
    inv_factors = inv_factors.astype(dtype)
    inv_factors_t = np.ascontiguousarray(inv_factors.transpose(0, 2, 1))

    def precondition(r):
        Y = np.matmul(inv_factors, r.reshape(p, d, 1))[:, :, 0]  # rows: L_i^-1 r_i
        Y = R_inv @ Y  # mixes components: (R^-1 kron I) in this layout
        return np.matmul(inv_factors_t, Y[:, :, None]).reshape(-1)

    return precondition


def _pcg(matvec, precondition, r0, rtol, max_iter):
    """Preconditioned conjugate gradients for ``M x = r0`` from ``x = 0``, to ``||r|| <= rtol ||r0||``."""
    x = np.zeros_like(r0)
    r = r0.copy()
    goal = rtol * float(np.linalg.norm(r0))
    z = precondition(r)
    direction = z.copy()
    rz = float(r @ z)
    for _ in range(max_iter):
        if float(np.linalg.norm(r)) <= goal or rz <= 0.0:
            break
        Md = matvec(direction)
        curvature = float(direction @ Md)
        if curvature <= 0.0:
            break
        alpha = rz / curvature
        x += alpha * direction
        r -= alpha * Md
        z = precondition(r)
        rz_new = float(r @ z)
        direction = z + (rz_new / rz) * direction
        rz = rz_new
    return x


def cholesky_solve(A: np.ndarray, b: np.ndarray, overwrite_a: bool = False) -> np.ndarray:
    """``A^-1 b`` for a symmetric positive definite float64 ``A`` (its upper triangle read; with
    ``overwrite_a``, LAPACK may factorise it in place). LAPACK's ``potrf`` and ``potrs`` through
    ``scipy.linalg.lapack``: what ``scipy.linalg.cho_factor`` and ``cho_solve`` call, with the
    same arguments and so the same numbers, without their argument checks, which take 13 of
    the 15 µs of a 10 x 10 solve.
    :class:`numpy.linalg.LinAlgError` when ``A`` is not positive definite."""
    factor, info = scipy.linalg.lapack.dpotrf(A, lower=0, clean=0, overwrite_a=overwrite_a)
    if info > 0:
        raise np.linalg.LinAlgError(f"{info}-th leading minor of the array is not positive definite")
    if info == 0:
        x, info = scipy.linalg.lapack.dpotrs(factor, b, lower=0)
        if info == 0:
            return x
    raise ValueError(f"illegal value in argument {-info} of LAPACK's Cholesky solve")


def solve_ridge_ball(
    A: np.ndarray, b: np.ndarray, shape: tuple[int, int], max_norm: float | None,
    axis: int = 0, max_iter: int = 3000, tol: float = 1e-10,
) -> np.ndarray:
    """Minimise ``x'Ax - 2 b'x`` over ``x = vec(W)`` (column-major, ``W`` of ``shape``) subject
    to every column (``axis=0``) or row (``axis=1``) of ``W`` having norm ``<= max_norm``.

    ``A`` must be symmetric positive definite (callers add the ridge); with ``max_norm=None``
    it is overwritten (callers pass a temporary). The unconstrained
    minimiser ``A^-1 b`` (a Cholesky solve) is returned when it is feasible, which is the
    common case; otherwise projected :func:`fista` runs from its projection, with the
    constraint set a product of balls so the projection is a rescale, until an iteration
    moves ``x`` by less than ``tol * (1 + ||x||)``.
    """
    # without a constraint A is not needed again: factorise it in place (no (dp)^2 copy)
    x = cholesky_solve(A, b, overwrite_a=max_norm is None)
    W = x.reshape(shape, order="F")
    if max_norm is None:
        return W

    def project(M):
        norms = np.linalg.norm(M, axis=axis, keepdims=True)
        return M * np.minimum(1.0, max_norm / np.maximum(norms, 1e-300))

    if np.all(np.linalg.norm(W, axis=axis) <= max_norm * (1 + 1e-12)):
        return W
    if not np.isfinite(A).all():
        raise FloatingPointError("ridge-ball system is not finite")
    n = A.shape[0]
    lip = 2.0 * float(scipy.linalg.eigvalsh(A, subset_by_index=[n - 1, n - 1], check_finite=False)[0])
    step = 1.0 / lip

    def forward(y):
        grad = 2.0 * (A @ y - b)
        return project((y - step * grad).reshape(shape, order="F")).reshape(-1, order="F")

    def converged(moved2, norm2):  # moved by less than tol * (1 + ||x||)
        return math.sqrt(moved2) <= tol * (1.0 + math.sqrt(norm2))

    x = fista(forward, project(W).reshape(-1, order="F"), converged, max_iter)
    return x.reshape(shape, order="F")


def solve_rows_in_ball(G: np.ndarray, R: np.ndarray, max_norm: float | None) -> np.ndarray:
    """Minimise ``sum_i l_i' G l_i - 2 r_i' l_i`` over the rows ``l_i`` of ``L`` with
    ``||l_i|| <= max_norm``; ``G`` symmetric positive definite, ``R`` holds the ``r_i``.

    Each row is a trust-region subproblem solved exactly: ``l_i = (G + nu I)^-1 r_i`` with the
    smallest ``nu >= 0`` that satisfies the norm bound (root-found with ``brentq`` in the
    eigenbasis of ``G``).
    """
    if not (np.isfinite(G).all() and np.isfinite(R).all()):
        raise FloatingPointError("encoder statistics are not finite")
    evals, Q = np.linalg.eigh(G)
    Rt = R @ Q  # rows in the eigenbasis
    L = Rt / evals
    if max_norm is None:
        return L @ Q.T
    for i in range(R.shape[0]):
        if np.linalg.norm(L[i]) <= max_norm:
            continue
        r = Rt[i]

        def excess(nu, r=r):
            return np.linalg.norm(r / (evals + nu)) - max_norm

        hi = np.linalg.norm(r) / max_norm
        nu = scipy.optimize.brentq(excess, 0.0, hi, xtol=1e-14, rtol=1e-14)
        L[i] = r / (evals + nu)
    return L @ Q.T


def _lasso_objective(Q: np.ndarray, c: np.ndarray, lam: float, s: np.ndarray) -> float:
    return float(s @ Q @ s - 2.0 * c @ s + lam * np.abs(s).sum())


def lasso_gram(Q: np.ndarray, c: np.ndarray, lam: float, max_iter: int = 1000, tol: float = 1e-10) -> np.ndarray:
    """Minimise ``s'Qs - 2 c's + lam ||s||_1`` (``Q`` symmetric PSD) exactly.

    With ``Q = L' Omega L`` and ``c = L' Omega w`` this is ``||w - L s||^2_Omega + lam ||s||_1`` up
    to a constant. Solved by *feature-sign search* (Lee, Battle, Raina & Ng, NIPS 2007), an
    active-set method that is exact for the small ``k`` of ELLA: guess the signs of the
    non-zero coefficients, solve the resulting linear system on the active set, line-search
    back to the first sign change, and repeat until the optimality conditions
    ``2(Qs - c)_j + lam sign(s_j) = 0`` (``s_j != 0``) and ``|2(Qs - c)_j| <= lam`` (``s_j = 0``)
    hold to ``tol``. A singular ``Q`` (``k > d`` or collinear basis columns: the minimiser is
    then not unique) gets a ridge of ``1e-10 * max(diag Q)``, which picks one minimiser and
    changes the objective by a negligible amount.
    """
    Q = np.asarray(Q, dtype=float)
    c = np.asarray(c, dtype=float)
    lam = float(lam)
    k = c.size
    if k and np.linalg.cond(Q) > 1e10:
        Q = Q + 1e-10 * max(float(np.max(np.diag(Q))), 1e-300) * np.eye(k)
    s = np.zeros(k)
    theta = np.zeros(k)
    active = np.zeros(k, dtype=bool)
    scale = max(1.0, float(np.max(np.abs(c))) if k else 1.0, float(np.max(np.abs(np.diag(Q)))) if k else 1.0)
    eps = tol * scale
    for _ in range(max_iter):
        grad = 2.0 * (Q @ s - c)
        inactive = np.nonzero(~active & (s == 0.0))[0]
        if inactive.size:
            i = inactive[np.argmax(np.abs(grad[inactive]))]
            if abs(grad[i]) > lam + eps:
                active[i] = True
                theta[i] = -np.sign(grad[i])
            elif np.all(np.abs(grad[active] + lam * theta[active]) <= eps):
                break
        elif np.all(np.abs(grad[active] + lam * theta[active]) <= eps):
            break
        # feature-sign steps on the active set until its optimality conditions hold
        for _inner in range(max_iter):
            idx = np.nonzero(active)[0]
            if idx.size == 0:
                break
            QA = Q[np.ix_(idx, idx)]
            rhs = c[idx] - 0.5 * lam * theta[idx]
            try:
                new = np.linalg.solve(QA, rhs)
            except np.linalg.LinAlgError:
                new = least_squares(QA, rhs)
            old = s[idx]
            # candidate points: the new solution and every zero crossing on the segment
            cands = [new]
            diff = new - old
            for j in np.nonzero(np.sign(new) != np.sign(old))[0]:
                if diff[j] != 0.0 and old[j] != 0.0:
                    t = -old[j] / diff[j]
                    if 0.0 < t < 1.0:
                        pt = old + t * diff
                        pt[j] = 0.0
                        cands.append(pt)
            best, best_f = None, np.inf
            for pt in cands:
                trial = s.copy()
                trial[idx] = pt
                f = _lasso_objective(Q, c, lam, trial)
                if f < best_f - 1e-15 * max(1.0, abs(best_f)) or best is None:
                    best, best_f = trial, f
            s = best
            s[np.abs(s) <= 1e-300] = 0.0
            active = s != 0.0
            theta = np.sign(s)
            grad = 2.0 * (Q @ s - c)
            if np.all(np.abs(grad[active] + lam * theta[active]) <= eps):
                break
    if not _lasso_optimal(Q, c, lam, s, eps):  # singular Q can defeat the active-set steps
        s = _lasso_cd(Q, c, lam, s)
    return s


def _lasso_optimal(Q, c, lam, s, eps) -> bool:
    grad = 2.0 * (Q @ s - c)
    nz = s != 0.0
    return bool(np.all(np.isfinite(s)) and np.all(np.abs(grad[nz] + lam * np.sign(s[nz])) <= 10 * eps)
                and np.all(np.abs(grad[~nz]) <= lam + 10 * eps))


def _lasso_cd(Q, c, lam, s0, max_iter: int = 5000, tol: float = 1e-14) -> np.ndarray:
    """Cyclic coordinate descent for the same problem (fallback when ``Q`` is singular)."""
    s = np.where(np.isfinite(s0) & (np.abs(s0) < 1e8), s0, 0.0).astype(float)
    diag = np.diag(Q).copy()
    half = 0.5 * lam
    for _ in range(max_iter):
        biggest = 0.0
        for j in range(c.size):
            if diag[j] <= 0.0:
                new = 0.0
            else:
                r = c[j] - Q[j] @ s + diag[j] * s[j]
                new = soft_threshold(r, half) / diag[j]
            biggest = max(biggest, abs(new - s[j]))
            s[j] = new
        if biggest <= tol * (1.0 + float(np.max(np.abs(s)))):
            break
    return s
