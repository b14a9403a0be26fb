"""Single-task fits and half-Hessians shared by every learner.

Every learner in this package sees a task through the same second-order summary
``(w_t, Omega_t)``, computed here, so the comparisons differ only in how they share
knowledge, never in the single-task learner.

Conventions (decided here, used everywhere):

* ``X`` already carries the bias as its *last* column (see :mod:`core.preprocessing`);
  the bias is never penalised by ``mu``, as in the authors' ELLA v1.0 code.
* A task's penalised objective is the *mean* loss plus ``mu * ||w_nb||^2``:
  squared loss ``F(w) = mean((X w - y)^2) + mu ||w_nb||^2`` (written without 1/2, as in
  ELLA v1.0) and logistic loss ``F(w) = mean(log(1 + exp(-y~ x.w))) + mu ||w_nb||^2`` with
  ``y~ = 2y - 1``.
* ``Omega`` is always one half of the Hessian of ``F`` (the paper's eq. ``hessian_matrix``).
  With these scalings both reduce to ELLA v1.0's ``(X'X + r I_nb)/n`` and
  ``(X' diag(p(1-p)) X + r I_nb)/(2n)`` with ``r = n mu`` (resp. ``2 n mu``).
  Using the mean (not the sum) keeps ``Omega`` independent of how many rows a task has,
  so hyper-parameters measured against it transfer between data sets.
"""
from __future__ import annotations

import numpy as np

from .solvers import least_squares

#: Penalty on the bias coefficient of logistic fits. A task whose batch holds a single class
#: has no finite unpenalised bias; this keeps the Newton system non-singular and the
#: estimate finite while being far too small to matter otherwise.
LOGISTIC_BIAS_PENALTY = 1e-6

KINDS = ("regression", "classification")


def _penalty_diagonal(d: int, mu: float, bias_penalty: float) -> np.ndarray:
    diag = np.full(d, float(mu))
    diag[-1] = bias_penalty
    return diag


def sigmoid(z: np.ndarray) -> np.ndarray:
    """Numerically safe logistic function."""
    out = np.empty_like(z, dtype=float)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    ez = np.exp(z[~pos])
    out[~pos] = ez / (1.0 + ez)
    return out


def objective(kind: str, X: np.ndarray, y: np.ndarray, w: np.ndarray, mu: float) -> float:
    """The penalised mean loss ``F(w)`` whose half-Hessian is ``Omega`` (used by tests)."""
    n, d = X.shape
    if kind == "regression":
        pen = _penalty_diagonal(d, mu, 0.0)
        return float(np.mean((X @ w - y) ** 2) + w @ (pen * w))
    pen = _penalty_diagonal(d, mu, LOGISTIC_BIAS_PENALTY)
    margins = (2.0 * y - 1.0) * (X @ w)
    return float(np.mean(np.logaddexp(0.0, -margins)) + w @ (pen * w))


def half_hessian(kind: str, X: np.ndarray, w: np.ndarray, mu: float) -> np.ndarray:
    """``Omega = 1/2 * Hessian of F`` at ``w`` (for squared loss it does not depend on ``w``)."""
    n, d = X.shape
    if kind == "regression":
        omega = X.T @ X / n
        omega[np.diag_indices(d)] += _penalty_diagonal(d, mu, 0.0)
        return omega
    p = sigmoid(X @ w)
    weights = p * (1.0 - p)
    omega = (X.T * weights) @ X / (2.0 * n)
    omega[np.diag_indices(d)] += _penalty_diagonal(d, mu, LOGISTIC_BIAS_PENALTY)
    return omega


def curvature_scale(kind: str, X: np.ndarray, y: np.ndarray) -> float:
    """Curvature of the loss in the intercept direction at the intercept-only model.

    ``mu`` is given relative to this, so one default suits both losses: it is 1 for squared
    loss (``mean((Xw - y)^2)`` has half-Hessian 1 on the bias column) and ``ybar (1 - ybar) / 2``
    for logistic loss — about 0.03 on Landmine (6 % positives), where an absolute ``mu`` tuned
    for regression would swamp the data term. The intercept direction is used because it
    does not depend on how features were scaled. ``ybar`` is kept at least ``1/(n+1)`` away
    from 0 and 1 so a single-class batch still gets a penalty.
    """
    if kind == "regression":
        return 1.0
    n = X.shape[0]
    ybar = float(np.clip(np.mean(y), 1.0 / (n + 1), n / (n + 1)))
    return ybar * (1.0 - ybar) / 2.0


def fit_squared_from_moments(gram: np.ndarray, moment: np.ndarray, n: int, mu: float) -> tuple[np.ndarray, np.ndarray]:
    """``(w_t, Omega_t)`` of squared loss from its sufficient statistics ``X'X``, ``X'y``, ``n``.

    The squared-loss objective depends on the rows only through these, so a regression task
    is kept as them (constant size, however many rows it has seen) and refitted exactly.
    """
    d = gram.shape[0]
    omega = gram / n
    omega[np.diag_indices(d)] += _penalty_diagonal(d, mu, 0.0)
    rhs = moment / n
    try:
        w = np.linalg.solve(omega, rhs)
    except np.linalg.LinAlgError:  # rank deficient in a way mu does not cover (mu = 0), or not finite
        w = least_squares(omega, rhs)
    return w, omega


def fit_single_task(
    kind: str, X: np.ndarray, y: np.ndarray, mu: float, *, max_newton: int = 100, tol: float = 1e-3
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(w_t, Omega_t)``: the minimiser of ``F`` and the half-Hessian there.

    Squared loss is solved in closed form. Logistic loss uses Newton-Raphson with a
    backtracking line search, stopping (as ELLA v1.0 does) when no predicted probability
    moves by more than ``tol`` or after ``max_newton`` steps.
    """
    n, d = X.shape
    if kind == "regression":
        return fit_squared_from_moments(X.T @ X, X.T @ y, n, mu)
    if kind != "classification":
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    pen = _penalty_diagonal(d, mu, LOGISTIC_BIAS_PENALTY)
    w = np.zeros(d)
    p = sigmoid(X @ w)
    f = objective(kind, X, y, w, mu)
    for _ in range(max_newton):
        grad = X.T @ (p - y) / n + 2.0 * pen * w
        hess = (X.T * (p * (1.0 - p))) @ X / n
        hess[np.diag_indices(d)] += 2.0 * pen
        step = np.linalg.solve(hess, grad)
        t = 1.0
        while True:
            w_new = w - t * step
            f_new = objective(kind, X, y, w_new, mu)
            if f_new <= f - 1e-4 * t * (grad @ step) or t < 1e-10:
                break
            t *= 0.5
        p_new = sigmoid(X @ w_new)
        moved = np.max(np.abs(p_new - p))
        w, p, f = w_new, p_new, f_new
        if moved <= tol:
            break
    return w, half_hessian(kind, X, w, mu)

