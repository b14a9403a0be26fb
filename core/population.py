"""The stream's population of task slopes: a Gaussian hierarchical model fitted by EM.

Every task's slopes ``beta_t`` (scaled space, the intercept excluded) are taken as draws
from one population ``N(m, Sigma)``; a regression task's rows are ``y = b_t + X beta_t + e``
with noise ``e ~ N(0, sigma^2)`` shared by the tasks, and its intercept ``b_t`` is integrated
out under a flat prior (the task's centred statistics). This is the linear mixed model a
statistician fits to grouped data (random slopes per group; Laird & Ware 1982), and its
estimates are the type-II maximum likelihood of that model.

It is fitted by EM on the tasks' sufficient statistics (Dempster, Laird & Rubin 1977;
Laird, Lange & Stram 1987): the E-step gives each task's posterior ``N(mu_t, C_t)`` of
``beta_t`` under the current ``(m, Sigma, sigma^2)``, and the M-step sets ``m`` to the mean of
the ``mu_t``, ``Sigma`` to the mean of ``C_t + (mu_t - m)(mu_t - m)'`` and ``sigma^2`` to the
expected residual sum of squares per degree of freedom. Logistic tasks use the Laplace
approximation for the E-step (the posterior mode and the inverse Hessian) and have no
``sigma^2``.

The M-step reads only sums over tasks (:class:`PopulationSums`), and a task's terms in them
are stored with the task, so a learner keeps the fit *incrementally* (Neal & Hinton 1998):
an update replaces the terms of the task it learns (and refreshes a few others), at a cost
that does not grow with the number of tasks. ``Sigma`` has a weak inverse-Wishart prior
(``PRIOR_WEIGHT`` pseudo-tasks with covariance ``PRIOR_SCALE * I`` in the scaled space), so
that the fit of a stream of one or two tasks is defined and ``Sigma`` stays invertible.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .losses import sigmoid

#: Pseudo-tasks of the inverse-Wishart prior on ``Sigma`` and its scale (slopes of
#: standardised features for a standardised target are of order 1).
PRIOR_WEIGHT = 1.0
PRIOR_SCALE = 1.0
#: Weight of the bias penalty in logistic fits (a flat prior on the intercept, kept regular).
_BIAS_PRECISION = 1e-8


@dataclass(frozen=True)
class Population:
    """The population of slopes ``N(mean, cov)`` and the noise variance (regression)."""

    mean: np.ndarray
    cov: np.ndarray
    noise: float = 1.0

    @classmethod
    def initial(cls, d: int) -> "Population":
        """The population before any task: the prior's centre and scale."""
        return cls(np.zeros(d), PRIOR_SCALE * np.eye(d), 1.0)


@dataclass(frozen=True)
class TaskTerms:
    """One task's terms in :class:`PopulationSums`: its posterior mean ``mu`` and second
    moment ``second = C + mu mu'`` of the slopes, its expected residual sum of squares and
    degrees of freedom (zero for logistic tasks)."""

    mu: np.ndarray
    second: np.ndarray
    rss: float = 0.0
    dof: float = 0.0

    def to_array(self) -> np.ndarray:
        return np.concatenate([self.mu, self.second.reshape(-1), [self.rss, self.dof]])

    @classmethod
    def from_array(cls, a: np.ndarray, d: int) -> "TaskTerms":
        return cls(a[:d].copy(), a[d:d + d * d].reshape(d, d).copy(), float(a[-2]), float(a[-1]))


@dataclass(frozen=True)
class PopulationSums:
    """Sums over tasks of their :class:`TaskTerms` and the number of tasks summed."""

    count: float
    mu: np.ndarray
    second: np.ndarray
    rss: float
    dof: float

    @classmethod
    def empty(cls, d: int) -> "PopulationSums":
        return cls(0.0, np.zeros(d), np.zeros((d, d)), 0.0, 0.0)

    def plus(self, terms: TaskTerms, sign: float = 1.0) -> "PopulationSums":
        return PopulationSums(self.count + sign, self.mu + sign * terms.mu, self.second + sign * terms.second,
                              self.rss + sign * terms.rss, self.dof + sign * terms.dof)

    def to_array(self) -> np.ndarray:
        return np.concatenate([[self.count], self.mu, self.second.reshape(-1), [self.rss, self.dof]])

    @classmethod
    def from_array(cls, a: np.ndarray, d: int) -> "PopulationSums":
        return cls(float(a[0]), a[1:1 + d].copy(), a[1 + d:1 + d + d * d].reshape(d, d).copy(),
                   float(a[-2]), float(a[-1]))

    def population(self, prior_weight: float = PRIOR_WEIGHT) -> Population:
        """The M-step: the population these sums make (with ``prior_weight`` pseudo-tasks of
        the prior on ``Sigma``; ``0`` is maximum likelihood)."""
        d = self.mu.size
        if self.count < 0.5:
            return Population.initial(d)
        m = self.mu / self.count
        scatter = self.second - self.count * np.outer(m, m)
        cov = (scatter + prior_weight * PRIOR_SCALE * np.eye(d)) / (self.count + prior_weight)
        cov = 0.5 * (cov + cov.T)
        noise = self.rss / self.dof if self.dof > 0.5 else 1.0
        return Population(m, cov, max(noise, 1e-12))


def centred_moments(n: int, gram: np.ndarray, moment: np.ndarray, yy: float):
    """``(G, q, S)``: ``X'X``, ``X'y`` and ``y'y`` of the task's rows centred on their means
    (the intercept integrated out under a flat prior), from the statistics with the bias last."""
    xbar = gram[-1, :-1] / n
    ybar = moment[-1] / n
    G = gram[:-1, :-1] - n * np.outer(xbar, xbar)
    q = moment[:-1] - n * xbar * ybar
    S = yy - n * ybar * ybar
    return G, q, S


def gaussian_terms(n: int, gram: np.ndarray, moment: np.ndarray, yy: float, pop: Population) -> TaskTerms:
    """E-step of a squared-loss task: its posterior of the slopes under ``pop``."""
    G, q, S = centred_moments(n, gram, moment, yy)
    prec = np.linalg.inv(pop.cov)
    P = G / pop.noise + prec
    C = np.linalg.inv(P)
    C = 0.5 * (C + C.T)
    mu = C @ (q / pop.noise + prec @ pop.mean)
    rss = S - 2.0 * mu @ q + mu @ G @ mu + float(np.sum(G * C))
    return TaskTerms(mu, C + np.outer(mu, mu), max(float(rss), 0.0), float(max(n - 1, 0)))


def logistic_modes(X: np.ndarray, y: np.ndarray, centres: np.ndarray, precision: np.ndarray,
                   W0: np.ndarray | None = None, max_iter: int = 50, tol: float = 1e-8
                   ) -> tuple[np.ndarray, np.ndarray]:
    """For each centre ``c_k`` (rows of ``centres``), the mode ``w_k`` (slopes and intercept,
    bias last) of ``sum log p(y_i | x_i w) - 1/2 (w_nb - c_k)' P (w_nb - c_k)`` with a flat
    intercept, and the Hessian of the negative log posterior there: arrays ``(k, d + 1)`` and
    ``(k, d + 1, d + 1)``. Newton's method with step halving, every centre at once."""
    k, d1 = centres.shape[0], X.shape[1]
    P = np.zeros((d1, d1))
    P[:-1, :-1] = precision
    P[-1, -1] = _BIAS_PRECISION
    C = np.hstack([centres, np.zeros((k, 1))])

    def objective(W, Cs):
        Z = W @ X.T  # (k, n)
        R = W - Cs
        return np.sum(np.logaddexp(0.0, Z) - y * Z, axis=1) + 0.5 * np.einsum("ki,ij,kj->k", R, P, R)

    def hessians(W):
        Pr = sigmoid(W @ X.T)  # (k, n)
        return Pr, np.einsum("ni,kn,nj->kij", X, Pr * (1.0 - Pr), X) + P

    W = C.copy() if W0 is None else np.array(W0, dtype=float, copy=True)
    f = objective(W, C)
    active = np.ones(k, dtype=bool)
    for _ in range(max_iter):
        Pr, H = hessians(W[active])
        grad = (Pr - y) @ X + (W[active] - C[active]) @ P
        step = np.linalg.solve(H, grad[..., None])[..., 0]
        t = np.ones(step.shape[0])
        Wa, fa = W[active], f[active]
        while True:
            W_new = Wa - t[:, None] * step
            f_new = objective(W_new, C[active])
            bad = (f_new > fa + 1e-12 * np.abs(fa)) & (t >= 1e-8)
            if not np.any(bad):
                break
            t = np.where(bad, 0.5 * t, t)
        moved = np.max(np.abs(W_new - Wa), axis=1)
        W[active], f[active] = W_new, f_new
        done = moved <= tol * (1.0 + np.max(np.abs(W_new), axis=1))
        idx = np.flatnonzero(active)
        active[idx[done]] = False
        if not np.any(active):
            break
    return W, hessians(W)[1]


def logistic_mode(X: np.ndarray, y: np.ndarray, centre: np.ndarray, precision: np.ndarray,
                  w0: np.ndarray | None = None, max_iter: int = 50, tol: float = 1e-8) -> tuple[np.ndarray, np.ndarray]:
    """:func:`logistic_modes` for one centre: ``(w, H)``."""
    W, H = logistic_modes(X, y, centre[None, :], precision, None if w0 is None else w0[None, :], max_iter, tol)
    return W[0], H[0]


def logistic_terms(X: np.ndarray, y: np.ndarray, pop: Population) -> TaskTerms:
    """E-step of a logistic task: the Laplace approximation of its posterior of the slopes
    under ``pop`` (the intercept profiled: the slopes' covariance is the inverse of the
    Schur complement of the intercept in the Hessian)."""
    w, H = logistic_mode(X, y, pop.mean, np.linalg.inv(pop.cov))
    Hs = H[:-1, :-1] - np.outer(H[:-1, -1], H[-1, :-1]) / H[-1, -1]
    C = np.linalg.inv(Hs)
    C = 0.5 * (C + C.T)
    mu = w[:-1]
    return TaskTerms(mu, C + np.outer(mu, mu))


def fit_population(tasks: list, kind: str, iterations: int = 200, prior_weight: float = PRIOR_WEIGHT,
                   tol: float = 1e-10) -> Population:
    """Batch EM over every task: ``tasks`` holds ``(n, gram, moment, yy)`` (regression) or
    ``(X, y)`` (classification) per task. The learners run the same E- and M-steps one task
    at a time; this is their fixed point, for tests and offline use."""
    d = (tasks[0][1].shape[0] if kind == "regression" else tasks[0][0].shape[1]) - 1
    pop = Population.initial(d)
    for _ in range(iterations):
        sums = PopulationSums.empty(d)
        for data in tasks:
            sums = sums.plus(gaussian_terms(*data, pop) if kind == "regression" else logistic_terms(*data, pop))
        new = sums.population(prior_weight)
        moved = max(float(np.max(np.abs(new.mean - pop.mean))), float(np.max(np.abs(new.cov - pop.cov))),
                    abs(new.noise - pop.noise))
        pop = new
        if moved < tol:
            break
    return pop
