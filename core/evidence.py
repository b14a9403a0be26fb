"""Empirical-Bayes task models: each task's prediction model is its posterior mean under a
prior built from the shared library, with the prior's strength chosen by maximum marginal
likelihood (the *evidence*).

For a task with data ``(X, y)`` (scaled space, bias last) the slopes ``theta`` get one of the
Gaussian priors of a *family*; the intercept is unpenalised:

* ``ridge``: ``theta ~ N(0, omega I)`` — the task alone (an empirical-Bayes ridge);
* ``mixture`` over representatives ``k`` with weights ``pi_k``:
  ``theta ~ sum_k pi_k N(m_k, omega (I + rho B B' / b))`` where ``m_k`` are the
  representatives' models, ``B`` the library's basis (FCL3's decoder ``D``) and
  ``b = tr(B B') / d`` makes ``rho`` scale-free; ``rho = 0`` is an isotropic prior around the
  representatives, ``rho > 0`` also lets the task move cheaply inside the library's span;
* ``subspace``: the same with the single centre ``0`` (ELLA's basis, no clusters).

``omega`` is chosen per task on a log grid by the evidence ``p(y | X, prior)``:

* squared loss, exactly, in closed form from the task's sufficient statistics ``X'X``,
  ``X'y``, ``y'y`` and ``n`` (noise variance ``sigma^2`` profiled out, prior variances in
  units of ``sigma^2``; the intercept integrated out by centring, ``n - 1`` degrees of
  freedom): ``log p = -(n-1)/2 log(Q/(n-1)) - 1/2 log det(I + K G)`` with ``G`` the centred
  ``X'X``, ``K`` the prior covariance and ``Q = min_theta ||y~ - X~ theta||^2 +
  (theta - m)' K^-1 (theta - m)`` (MacKay 1992; Bishop, *PRML* sec. 3.5);
* logistic loss, by the Laplace approximation at the posterior mode for the centre ``0``
  (a Newton fit per ``omega``; the intercept has a flat prior), and for the other centres by
  the second-order expansion of the log-likelihood around that mode — the expansion the
  paper itself uses for ``Omega_k^t`` — which keeps one fit per ``omega`` however many
  representatives there are. Constants common to every ``omega`` and family are dropped.

The family itself is chosen for the whole stream (:func:`choose_family`): each task's
evidence for every family, measured when the task is learned against the library *as it
was without that task*, is summed over tasks, and a family other than ``ridge`` is used only
when its total beats ``ridge``'s by a log Bayes factor of at least :data:`STRONG_EVIDENCE`
(3, "strong" on the scale of Kass & Raftery 1995). Pooling over tasks makes the choice
reliable where a single task's evidence is not; measuring against the library without the
task keeps the task's own data from vouching for a prior fitted to it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from .losses import sigmoid

#: Prior variance ``omega`` (relative to ``tr(G) / d``, and for squared loss to ``sigma^2``).
GAUSSIAN_OMEGAS = 10.0 ** np.arange(-5.0, 8.01, 0.5)
LOGISTIC_OMEGAS = 10.0 ** np.arange(-3.0, 3.01, 0.5)
#: Log Bayes factor a family must reach over ``ridge``, summed over the stream's tasks.
STRONG_EVIDENCE = 3.0
#: Weight of the bias penalty in logistic fits: keeps the Newton system regular when a task
#: holds one class, too small to matter otherwise.
_BIAS_PRECISION = 1e-8
_TINY = 1e-300


@dataclass(frozen=True)
class Family:
    """A prior family: ``rho`` (weight of the library's span) and whether it is centred on
    the representatives (``mixture``) or on ``0``."""

    name: str
    rho: float = 0.0
    centred_on_representatives: bool = False


RIDGE = Family("ridge")


@dataclass(frozen=True)
class Library:
    """What the prior of one task is built from: the basis ``B`` (slopes x components, or
    ``None``), the representatives' models ``centres`` (k x slopes) and their log weights."""

    basis: np.ndarray | None
    centres: np.ndarray
    log_weights: np.ndarray


@dataclass(frozen=True)
class Fit:
    """A task's posterior under one family: its log evidence (at the chosen ``omega``) and
    the posterior mean ``theta`` (scaled space, bias last)."""

    log_evidence: float
    theta: np.ndarray


def _prior_factor(d: int, basis: np.ndarray | None, rho: float) -> np.ndarray:
    """``R`` with ``R R' = I + rho B B' / b`` (``I`` when ``rho = 0`` or there is no basis)."""
    if basis is None or rho == 0.0 or not np.any(basis):
        return np.eye(d)
    BB = basis @ basis.T
    scale = max(float(np.trace(BB)) / d, _TINY)
    return np.linalg.cholesky(np.eye(d) + (rho / scale) * BB)


def gaussian_fits(n: int, gram: np.ndarray, moment: np.ndarray, yy: float, centres: np.ndarray,
                  basis: np.ndarray | None, rho: float) -> tuple[np.ndarray, np.ndarray]:
    """Log evidence and posterior mean of a squared-loss task for every centre and every
    ``omega`` of :data:`GAUSSIAN_OMEGAS`: arrays ``(k, n_omega)`` and ``(k, n_omega, d + 1)``.

    ``gram = X'X``, ``moment = X'y``, ``yy = y'y`` over the task's rows (bias column last).
    """
    d = gram.shape[0] - 1
    xbar = gram[-1, :-1] / n
    ybar = moment[-1] / n
    G = gram[:-1, :-1] - n * np.outer(xbar, xbar)  # centred X'X: the intercept integrated out
    q = moment[:-1] - n * xbar * ybar
    S = yy - n * ybar * ybar
    dof = max(n - 1, 1)
    omegas = GAUSSIAN_OMEGAS / max(float(np.trace(G)) / d, _TINY)
    R = _prior_factor(d, basis, rho)
    lam, U = np.linalg.eigh(R.T @ G @ R)
    lam = np.maximum(lam, 0.0)
    RU = R @ U
    shrink = 1.0 / (1.0 / omegas[None, :] + lam[:, None])  # (d, n_omega)
    logdet = np.sum(np.log1p(omegas[None, :] * lam[:, None]), axis=0)
    k = centres.shape[0]
    E = np.empty((k, omegas.size))
    TH = np.empty((k, omegas.size, d + 1))
    for i, m in enumerate(centres):
        qs = q - G @ m
        Ss = S - 2.0 * (m @ q) + m @ G @ m
        c = RU.T @ qs
        quad = Ss - (c * c) @ shrink
        quad = np.maximum(quad, 1e-15 * max(abs(Ss), _TINY))  # an exact fit: Q is rounding
        E[i] = -0.5 * dof * np.log(quad / dof) - 0.5 * logdet
        slopes = m[:, None] + RU @ (c[:, None] * shrink)  # (d, n_omega)
        TH[i, :, :-1] = slopes.T
        TH[i, :, -1] = ybar - xbar @ slopes
    return E, TH


def _penalised_logistic(X: np.ndarray, y: np.ndarray, precision: np.ndarray, w0: np.ndarray,
                        max_iter: int = 50, tol: float = 1e-8) -> np.ndarray:
    """Mode of ``sum log p(y_i | x_i w) - 1/2 w_nb' P w_nb`` (bias unpenalised): Newton's
    method with step halving."""
    d1 = X.shape[1]
    P = np.zeros((d1, d1))
    P[:-1, :-1] = precision
    P[-1, -1] = _BIAS_PRECISION

    def objective(w):
        z = X @ w
        return float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * w @ P @ w)

    w = w0.copy()
    f = objective(w)
    for _ in range(max_iter):
        p = sigmoid(X @ w)
        grad = X.T @ (p - y) + P @ w
        hess = (X.T * (p * (1.0 - p))) @ X + P
        step = np.linalg.solve(hess, grad)
        t = 1.0
        while True:
            w_new = w - t * step
            f_new = objective(w_new)
            if f_new <= f + 1e-12 * abs(f) or t < 1e-8:
                break
            t *= 0.5
        moved = float(np.max(np.abs(w_new - w)))
        w, f = w_new, f_new
        if moved <= tol * (1.0 + float(np.max(np.abs(w)))):
            break
    return w


def logistic_fits(X: np.ndarray, y: np.ndarray, centres: np.ndarray, basis: np.ndarray | None,
                  rho: float) -> tuple[np.ndarray, np.ndarray]:
    """Log evidence and posterior mode of a logistic task for the centre ``0`` (row 0, exact
    Laplace approximation) and every centre of ``centres`` (rows 1.., second-order expansion
    of the log-likelihood at the row-0 mode), for every ``omega`` of :data:`LOGISTIC_OMEGAS`.

    ``X`` is the scaled design (bias last), ``y`` the 0/1 labels. The intercept is profiled:
    determinants and expansions use the Schur complement of the bias in the Hessian.
    """
    n, d1 = X.shape
    d = d1 - 1
    Xc = X[:, :-1] - X[:, :-1].mean(axis=0)
    omegas = LOGISTIC_OMEGAS / max(0.25 * float(np.trace(Xc.T @ Xc)) / d, _TINY)
    R = _prior_factor(d, basis, rho)
    Kunit = R @ R.T
    Kunit_inv = np.linalg.inv(Kunit)
    k = centres.shape[0]
    E = np.full((k + 1, omegas.size), -np.inf)
    TH = np.zeros((k + 1, omegas.size, d1))
    w = np.zeros(d1)
    for j, om in enumerate(omegas):
        Kinv = Kunit_inv / om
        w = _penalised_logistic(X, y, Kinv, w)
        z = X @ w
        p = sigmoid(z)
        loglik = -float(np.sum(np.logaddexp(0.0, z) - y * z))
        Hd = (X.T * (p * (1.0 - p))) @ X
        hb = max(float(Hd[-1, -1]), _TINY)
        Hs = Hd[:-1, :-1] - np.outer(Hd[:-1, -1], Hd[-1, :-1]) / hb
        slopes = w[:-1]
        # Laplace with a flat prior on the intercept: log det of the posterior Hessian is
        # log det(Kinv + Hs) + log hb; with -1/2 log det(K) from the prior's normaliser
        logdet = float(np.linalg.slogdet(np.eye(d) + om * Kunit @ Hs)[1]) + np.log(hb)
        E[0, j] = loglik - 0.5 * slopes @ Kinv @ slopes - 0.5 * logdet
        TH[0, j] = w
        if k == 0:
            continue
        # log-likelihood ~ loglik + g'(t - slopes) - 1/2 (t - slopes)' Hs (t - slopes), g = Kinv slopes
        g = Kinv @ slopes
        A = Hs + Kinv
        rhs = (Hs @ slopes + g)[None, :] + centres @ Kinv  # A t_k = Hs slopes + g + Kinv m_k
        T = np.linalg.solve(A, rhs.T).T  # (k, d)
        dt = T - slopes
        r = T - centres
        E[1:, j] = (loglik + dt @ g - 0.5 * np.einsum("ki,ij,kj->k", dt, Hs, dt)
                    - 0.5 * np.einsum("ki,ij,kj->k", r, Kinv, r) - 0.5 * logdet)
        TH[1:, j, :-1] = T
        TH[1:, j, -1] = w[-1] - (dt @ Hd[:-1, -1]) / hb
    return E, TH


def best_fit(E: np.ndarray, TH: np.ndarray, log_weights: np.ndarray | None = None) -> Fit:
    """The ``omega`` of largest evidence for one centre (``log_weights=None``, row 0) or for
    the mixture of every row with prior weights ``exp(log_weights)``; the mixture's posterior
    mean weighs each centre's mode by its posterior probability."""
    if log_weights is None:
        j = int(np.argmax(E[0]))
        return Fit(float(E[0, j]), TH[0, j])
    W = E + log_weights[:, None]
    total = logsumexp(W, axis=0)
    j = int(np.argmax(total))
    post = np.exp(W[:, j] - total[j])
    return Fit(float(total[j]), np.tensordot(post, TH[:, j], axes=1))


def family_fits(kind: str, data, library: Library | None, families: tuple[Family, ...]) -> dict[str, Fit]:
    """Every family's fit for one task. ``data`` is the task's sufficient statistics
    ``(n, gram, moment, yy)`` (squared loss) or its rows ``(X, y)`` (logistic loss). A family
    the library cannot define (no basis for ``rho > 0``, no representatives for a mixture)
    is left out."""
    d = data[1].shape[0] - 1 if kind == "regression" else data[0].shape[1] - 1
    has_basis = library is not None and library.basis is not None and bool(np.any(library.basis))
    has_centres = library is not None and len(library.centres) > 0
    fits: dict[str, Fit] = {}
    for rho in sorted({f.rho for f in families}):
        fams = [f for f in families if f.rho == rho and (rho == 0.0 or has_basis)
                and (not f.centred_on_representatives or has_centres)]
        if not fams:
            continue
        centres = library.centres if any(f.centred_on_representatives for f in fams) else np.empty((0, d))
        basis = library.basis if has_basis else None
        if kind == "regression":
            n, gram, moment, yy = data
            E, TH = gaussian_fits(n, gram, moment, yy, np.vstack([np.zeros((1, d)), centres]), basis, rho)
        else:
            E, TH = logistic_fits(data[0], data[1], centres, basis, rho)
        for fam in fams:
            fits[fam.name] = (best_fit(E[1:], TH[1:], library.log_weights) if fam.centred_on_representatives
                              else best_fit(E[:1], TH[:1]))
    return fits


def choose_family(evidence: list[dict[str, float | None]], families: tuple[Family, ...]) -> str:
    """The family used for every task of a stream, from each task's evidence per family
    (``None`` or missing: the family was not defined for that task, which counts as
    ``ridge``'s evidence): the largest total, if it beats ``ridge`` by :data:`STRONG_EVIDENCE`."""
    totals = dict.fromkeys((f.name for f in families), 0.0)
    for ev in evidence:
        base = ev.get(RIDGE.name)
        if base is None:
            continue
        for name in totals:
            value = ev.get(name)
            totals[name] += base if value is None else value
    best = max(totals, key=totals.get)
    if best != RIDGE.name and totals[best] - totals[RIDGE.name] >= STRONG_EVIDENCE:
        return best
    return RIDGE.name
