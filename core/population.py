"""The stream's population of task models: a Gaussian hierarchical model fitted by EM.

Every task's parameters ``theta_t = (beta_t, b_t)`` (slopes and intercept, scaled space, bias
last) are taken as draws from one population ``N(m, Sigma)``; a regression task's rows are
``y = X theta_t + e`` with noise ``e ~ N(0, sigma_t^2)``. This is the linear
mixed model a statistician fits to grouped data, with a random intercept and random slopes
per group (Laird & Ware 1982; statsmodels' ``MixedLM``), here with a noise variance per task. The learners use it twice: the
slopes' marginal ``N(m_beta, Sigma_beta)`` is a prior family for the slopes
(:data:`core.evidence.POPULATION`), and the intercept's conditional prior given the slopes
pools each task's intercept with the others' (:func:`pooled_intercept`), as the mixed
model's predicted random intercepts do.

It is fitted by EM over every task at once (:func:`fit_population`; Dempster, Laird & Rubin
1977; Laird, Lange & Stram 1987), each task entering as a Gaussian *pseudo-observation* of its
parameters in information form ``(J_t, h_t)``: for squared loss exactly, ``J_t = X'X /
sigma^2`` and ``h_t = X'y / sigma^2`` from the task's sufficient statistics; for logistic loss
the Laplace approximation at the task's own fit ``w_t``, ``J_t = 2 n Omega_t`` (the Hessian of
its summed loss) and ``h_t = J_t w_t``. The E-step gives each task's posterior
``N(mu_t, C_t)`` with ``C_t = (J_t + Sigma^-1)^-1``; the M-step sets ``m`` to the mean of the
``mu_t`` and ``Sigma`` to the mean of ``C_t + (mu_t - m)(mu_t - m)'``. Each regression task
keeps its own noise variance ``sigma_t^2`` (:func:`task_noises`): unlike the textbook mixed
model, tasks may have targets on scales that differ by orders of magnitude. Every task's E-step is one batched linear-algebra
call, and EM runs to convergence: incremental EM, which refits only the task an update
touches, stays far from the fixed point where variance components are small (EM converges
slowly near the boundary; on real school data the slopes' variances stayed tenfold too large).

A learner refits the population when its number of tasks has grown by :data:`REFIT_GROWTH`,
or a quarter as many updates as it had tasks have changed them, since the last fit
(:func:`refit_due`), warm-started from it: a geometric schedule, so refits cost a bounded
amount per update on average however many tasks there are. ``Sigma`` has a weak
inverse-Wishart prior (``PRIOR_WEIGHT`` pseudo-tasks with covariance ``PRIOR_SCALE * I`` in the
scaled space) so that the fit of a stream of one or two tasks is defined and ``Sigma`` stays
invertible.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .losses import sigmoid

#: Pseudo-tasks of the inverse-Wishart prior on ``Sigma``, and its scale.
PRIOR_WEIGHT = 1.0
PRIOR_SCALE = 1e-2
#: Degrees of freedom of the stream's typical noise added to a task's own (:func:`task_noises`).
NOISE_PSEUDO_DOF = 10.0
#: The population and the stream's family are computed again when the tasks have grown by this
#: factor, or this factor minus one times the tasks have been updated, since the last time.
REFIT_GROWTH = 1.25
#: EM stops when no parameter moves by more than ``EM_TOL`` (relative), or after ``EM_MAX_ITER``.
EM_TOL = 1e-6
EM_MAX_ITER = 300
#: Laplace EM for logistic tasks (:func:`fit_logistic_population`): at most this many rounds of
#: re-expansion, stopping when the population moves less than ``LAPLACE_TOL`` (relative).
LAPLACE_ROUNDS = 20
LAPLACE_TOL = 1e-4
#: Prior ``N(0, LOGISTIC_MEAN_SCALE^2 I)`` on the logistic population's mean (standardised
#: features: a log-odds slope of 10 per standard deviation is already extreme). Without it the
#: mean has no maximum when the pooled rows are separable (a few tasks of one or two rows).
LOGISTIC_MEAN_SCALE = 10.0
#: Weight of the bias penalty in logistic fits (a flat prior on the intercept, kept regular).
_BIAS_PRECISION = 1e-8


@dataclass(frozen=True)
class Population:
    """The population ``N(mean, cov)`` of task parameters (or of slopes alone, see
    :meth:`slopes`) and the noise variance (regression)."""

    mean: np.ndarray
    cov: np.ndarray
    noise: float = 1.0

    @classmethod
    def initial(cls, d: int) -> "Population":
        """Where EM starts on a new stream: standardised slopes and intercepts of order 1."""
        return cls(np.zeros(d), np.eye(d), 1.0)

    def to_array(self) -> np.ndarray:
        return np.concatenate([self.mean, self.cov.reshape(-1), [self.noise]])

    @classmethod
    def from_array(cls, a: np.ndarray) -> "Population":
        d = int(round((np.sqrt(1.0 + 4.0 * (a.size - 1)) - 1.0) / 2.0))
        return cls(a[:d].copy(), a[d:d + d * d].reshape(d, d).copy(), float(a[-1]))

    def slopes(self) -> "Population":
        """The slopes' marginal (every coordinate but the last, the intercept)."""
        return Population(self.mean[:-1], self.cov[:-1, :-1], self.noise)

    def intercept_given(self, slopes: np.ndarray) -> tuple[float, float]:
        """Mean and variance of the intercept's conditional prior given the slopes."""
        gain = np.linalg.solve(self.cov[:-1, :-1], self.cov[:-1, -1])
        mean = float(self.mean[-1] + gain @ (slopes - self.mean[:-1]))
        return mean, max(float(self.cov[-1, -1] - gain @ self.cov[:-1, -1]), 1e-12)


def refit_due(fitted_tasks: int, updates_since: int, tasks: int, growth: float = REFIT_GROWTH) -> bool:
    """Whether a statistic over every task, last computed over ``fitted_tasks`` tasks, is
    computed again: once the tasks have grown by ``growth`` or ``(growth - 1) * fitted_tasks``
    updates (new tasks or new batches of known ones) have changed the tasks since. Each
    recomputation reads every task, and is due after a number of updates proportional to
    the tasks' number: a bounded cost per update on average, however many tasks there are."""
    return tasks >= growth * fitted_tasks or updates_since >= (growth - 1.0) * fitted_tasks


def fit_population(tasks: list, start: Population | None = None, noise: float = 1.0,
                   prior_weight: float = PRIOR_WEIGHT, tol: float = EM_TOL, max_iter: int = EM_MAX_ITER,
                   mean_scale: float | None = None) -> Population:
    """EM over every task's pseudo-observation ``(J, h)`` to convergence, from ``start``
    (:meth:`Population.initial` when ``None``), accelerated by SQUAREM (Varadhan & Roland
    2008: an extrapolation from two EM steps, kept when it is a valid population). ``noise``
    is stored with the result: the stream's typical noise variance (:func:`task_noises`)."""
    J, h = (np.array(c, dtype=float) for c in zip(*tasks))
    d = h.shape[1]
    x = (Population.initial(d) if start is None else start).to_array()[:-1]
    step = lambda v: _em_step(v, J, h, prior_weight, mean_scale)
    for _ in range(max_iter // 3):
        x1 = step(x)
        x2 = step(x1)
        r, v = x1 - x, x2 - 2.0 * x1 + x
        nv = float(np.linalg.norm(v))
        new = x2
        if nv > 0:
            alpha = -max(float(np.linalg.norm(r)) / nv, 1.0)
            trial = x - 2.0 * alpha * r + alpha * alpha * v
            if _valid(trial, d):
                new = step(trial)
                if not _valid(new, d):
                    new = x2
        moved = _moved(x, new, d)
        x = new
        if moved < tol:
            break
    return Population(x[:d].copy(), x[d:].reshape(d, d).copy(), noise)


def fit_logistic_population(tasks: list, start: Population | None = None, rounds: int = LAPLACE_ROUNDS,
                            tol: float = LAPLACE_TOL, prior_weight: float = PRIOR_WEIGHT) -> Population:
    """The population of logistic tasks ``[(X, y), ...]`` (scaled designs, bias last) that
    maximises the Laplace approximation of the marginal likelihood (with the covariance's
    prior of :func:`fit_population`). Each round expands every task's log-likelihood at its
    posterior mode under the current population (:func:`logistic_pseudo_observation`), runs
    :func:`fit_population` on those expansions, and keeps the result only if the Laplace
    objective rises, halving the step toward the current population otherwise (the plain
    iteration is Newton's method without a line search and can diverge). Stops when the
    population moves less than ``tol`` (relative) or after ``rounds``. Expanding at each task's
    own fit instead fails on tasks of two rows with one label, whose fit sits far out on the
    flat intercept."""
    pop = Population.initial(tasks[0][0].shape[1]) if start is None else start
    value, modes = laplace_objective(tasks, pop, None, prior_weight)
    for _ in range(rounds):
        try:
            trial = fit_population([logistic_pseudo_observation(X, y, w) for (X, y), w in zip(tasks, modes)],
                                   pop, prior_weight=prior_weight, mean_scale=LOGISTIC_MEAN_SCALE)
        except np.linalg.LinAlgError:  # expansions of extreme magnitude: no step from here
            break
        for _ in range(30):
            try:
                trial_value, trial_modes = laplace_objective(tasks, trial, modes, prior_weight)
            except np.linalg.LinAlgError:
                trial_value = -np.inf
            if trial_value >= value:
                break
            trial = Population(0.5 * (pop.mean + trial.mean), 0.5 * (pop.cov + trial.cov))
        else:
            break
        moved = _moved(pop.to_array()[:-1], trial.to_array()[:-1], trial.mean.size)
        pop, value, modes = trial, trial_value, trial_modes
        if moved < tol:
            break
    return pop


def laplace_objective(tasks: list, pop: Population, modes: list | None = None,
                      prior_weight: float = PRIOR_WEIGHT) -> tuple[float, list]:
    """The Laplace approximation of the logistic tasks' log marginal likelihood under ``pop``
    plus the log priors of its covariance (that of :func:`fit_population`'s EM) and of its mean
    (``N(0, LOGISTIC_MEAN_SCALE^2 I)``), and every
    task's posterior mode (``modes``: warm starts)."""
    prec = np.linalg.inv(pop.cov)
    logdet_prec = float(np.linalg.slogdet(prec)[1])
    total = (-0.5 * prior_weight * (-logdet_prec + PRIOR_SCALE * float(np.trace(prec)))
             - 0.5 * float(pop.mean @ pop.mean) / LOGISTIC_MEAN_SCALE ** 2)
    out = []
    for (X, y), w0 in zip(tasks, modes or [None] * len(tasks)):
        w, H = logistic_mode(X, y, pop.mean, prec, w0)
        z, r = X @ w, w - pop.mean
        total += (-float(np.sum(np.logaddexp(0.0, z) - y * z)) - 0.5 * float(r @ prec @ r)
                  + 0.5 * logdet_prec - 0.5 * float(np.linalg.slogdet(H)[1]))
        out.append(w)
    return total, out


def _valid(x: np.ndarray, d: int) -> bool:
    """A finite population with a positive-definite covariance."""
    if not np.all(np.isfinite(x)):
        return False
    try:
        np.linalg.cholesky(x[d:].reshape(d, d))
    except np.linalg.LinAlgError:
        return False
    return True


def _moved(x: np.ndarray, new: np.ndarray, d: int) -> float:
    """The largest relative move of the mean and the covariance."""
    return max(float(np.max(np.abs(new[:d] - x[:d]))) / (1.0 + float(np.max(np.abs(x[:d])))),
               float(np.max(np.abs(new[d:] - x[d:]))) / float(np.max(np.abs(x[d:]))))


def _em_step(x: np.ndarray, J: np.ndarray, h: np.ndarray, prior_weight: float,
             mean_scale: float | None = None) -> np.ndarray:
    """One EM step over every task; ``x`` is the mean and the covariance, flattened. With
    ``mean_scale`` the mean has the prior ``N(0, mean_scale^2 I)`` (an ECM step: the mean given
    the covariance, then the covariance given the mean)."""
    T, d = h.shape
    mean, cov = x[:d], x[d:].reshape(d, d)
    prec = np.linalg.inv(cov)
    C = np.linalg.inv(J + prec)  # (T, d, d): every task's posterior covariance
    mu = np.einsum("tij,tj->ti", C, h + prec @ mean)
    if mean_scale is None:
        m = mu.mean(axis=0)
    else:
        m = np.linalg.solve(T * prec + np.eye(d) / mean_scale ** 2, prec @ mu.sum(axis=0))
    dev = mu - m
    cov = (C.sum(axis=0) + dev.T @ dev + prior_weight * PRIOR_SCALE * np.eye(d)) / (T + prior_weight)
    return np.concatenate([m, (0.5 * (cov + cov.T)).reshape(-1)])


def task_noises(rss: np.ndarray, dof: np.ndarray, typical: float | None = None,
                pseudo_dof: float = NOISE_PSEUDO_DOF) -> tuple[np.ndarray, float]:
    """Every regression task's noise variance and the stream's typical one.

    A task's own estimate ``rss / dof`` (from its single-task fit) is shrunk toward the
    stream's typical noise in log space, ``log s_t = (dof_t log(rss_t / dof_t) + k log s) /
    (dof_t + k)`` with ``k = pseudo_dof``: tasks may differ in noise by orders of magnitude
    (targets on their own scales), and a task with few rows borrows the typical value ``s``,
    the dof-weighted geometric mean of the tasks' own estimates (or ``typical`` when given)."""
    rss, dof = np.asarray(rss, dtype=float), np.asarray(dof, dtype=float)
    own = (dof > 0) & (rss > 0)
    log_own = np.log(np.where(own, rss, 1.0) / np.where(own, dof, 1.0))
    if typical is not None:
        log_typical = float(np.log(typical))
    else:
        log_typical = float(np.sum(dof[own] * log_own[own]) / np.sum(dof[own])) if np.any(own) else 0.0
    weight = np.where(own, dof, 0.0)
    return np.exp((weight * log_own + pseudo_dof * log_typical) / (weight + pseudo_dof)), float(np.exp(log_typical))


def posterior_mean(J: np.ndarray, h: np.ndarray, pop: Population) -> np.ndarray:
    """A task's posterior mean under ``pop`` from its pseudo-observation ``(J, h)`` (for
    squared loss ``X'X / sigma^2`` and ``X'y / sigma^2``): the mixed model's prediction."""
    prec = np.linalg.inv(pop.cov)
    return np.linalg.solve(J + prec, h + prec @ pop.mean)


def logistic_pseudo_observation(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A logistic task's log-likelihood as a Gaussian pseudo-observation ``(J, h)``: the
    second-order expansion at ``w``, ``log p(y | theta) ~ const - 1/2 theta' J theta + h' theta``
    with ``J`` the likelihood's Hessian and ``h = J w + X'(y - p)`` (its gradient added). The
    likelihood alone, not the task's penalised fit: a penalty in ``J`` would count a prior once
    per task and pull the population toward zero (tasks of two rows with one label each)."""
    p = sigmoid(X @ w)
    J = (X.T * (p * (1.0 - p))) @ X
    return J, J @ w + X.T @ (y - p)


def logistic_modes(X: np.ndarray, y: np.ndarray, centres: np.ndarray, precision: np.ndarray,
                   W0: np.ndarray | None = None, max_iter: int = 100, tol: float = 1e-8,
                   bias: tuple[float, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For each centre ``c_k`` (rows of ``centres``), the mode ``w_k`` (slopes and intercept,
    bias last) of ``sum log p(y_i | x_i w) - 1/2 (w - c_k)' P_k (w - c_k)`` and the Hessian of
    the negative log posterior there: arrays ``(k, d + 1)`` and ``(k, d + 1, d + 1)``.
    ``precision`` is one ``P`` for every centre or one per centre ``(k, ., .)``. Centres and
    precisions of the slopes alone (``d`` wide) leave the intercept flat, or give it the prior
    ``N(mean, 1 / precision)`` of ``bias = (mean, precision)``. Newton's method with
    step halving, every centre at once (the objective is strictly convex: it converges from
    any start)."""
    k, d1 = centres.shape[0], X.shape[1]
    P = np.broadcast_to(precision, (k,) + precision.shape[-2:])
    if centres.shape[1] == d1:
        C = centres
    else:
        P = np.concatenate([np.concatenate([P, np.zeros((k, d1 - 1, 1))], axis=2),
                            np.zeros((k, 1, d1))], axis=1)
        bias_mean, bias_precision = (0.0, _BIAS_PRECISION) if bias is None else bias
        P[:, -1, -1] = bias_precision
        C = np.hstack([centres, np.full((k, 1), float(bias_mean))])

    def objective(W, Cs, Ps):
        Z = W @ X.T  # (k, n)
        R = W - Cs
        return np.sum(np.logaddexp(0.0, Z) - y * Z, axis=1) + 0.5 * np.einsum("ki,kij,kj->k", R, Ps, R)

    def hessians(W, Ps):
        Pr = sigmoid(W @ X.T)  # (k, n)
        return Pr, np.einsum("ni,kn,nj->kij", X, Pr * (1.0 - Pr), X) + Ps

    W = C.copy() if W0 is None else np.array(W0, dtype=float, copy=True)
    f = objective(W, C, P)
    active = np.arange(k)
    for _ in range(max_iter):
        Wa, fa, Ca, Pa = W[active], f[active], C[active], P[active]
        Pr, H = hessians(Wa, Pa)
        grad = (Pr - y) @ X + np.einsum("kij,kj->ki", Pa, Wa - Ca)
        step = np.linalg.solve(H, grad[..., None])[..., 0]
        t = np.ones(active.size)
        while True:
            W_new = Wa - t[:, None] * step
            f_new = objective(W_new, Ca, Pa)
            bad = (f_new > fa + 1e-12 * np.abs(fa)) & (t >= 1e-8)
            if not np.any(bad):
                break
            t = np.where(bad, 0.5 * t, t)
        moved = np.max(np.abs(W_new - Wa), axis=1)
        W[active], f[active] = W_new, f_new
        active = active[moved > tol * (1.0 + np.max(np.abs(W_new), axis=1))]
        if active.size == 0:
            break
    return W, hessians(W, P)[1]


def logistic_mode(X: np.ndarray, y: np.ndarray, centre: np.ndarray, precision: np.ndarray,
                  w0: np.ndarray | None = None, max_iter: int = 50, tol: float = 1e-8) -> tuple[np.ndarray, np.ndarray]:
    """:func:`logistic_modes` for one centre: ``(w, H)``."""
    W, H = logistic_modes(X, y, centre[None, :], precision, None if w0 is None else w0[None, :], max_iter, tol)
    return W[0], H[0]


def pooled_intercept(intercept: float, precision: float, pop: Population, slopes: np.ndarray) -> float:
    """The task's intercept pooled with the population's: its own estimate ``intercept`` (of
    precision ``precision``, given ``slopes``) combined with the intercept's conditional prior
    given the slopes — the posterior mean of the mixed model's random intercept."""
    mean, var = pop.intercept_given(slopes)
    return float((precision * intercept + mean / var) / (precision + 1.0 / var))
