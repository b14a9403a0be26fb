"""The stream's population of task models: a Gaussian hierarchical model fitted by EM.

Every task's parameters ``theta_t = (beta_t, b_t)`` (slopes and intercept, scaled space, bias
last) are taken as draws from one population ``N(m, Sigma)``; a regression task's rows are
``y = X theta_t + e`` with noise ``e ~ N(0, sigma_t^2)``. This is the linear
mixed model a statistician fits to grouped data, with a random intercept and random slopes
per group (Laird & Ware 1982; statsmodels' ``MixedLM``), here with a noise variance per task. The learners use it twice: the
slopes' marginal ``N(m_beta, Sigma_beta)`` is a prior family for the slopes
(:data:`core.evidence.POPULATION`), and the intercept's conditional prior given the slopes
pools each task's intercept with the others' (:func:`pooled_intercept`), as the mixed
model's predicted random intercepts do (slopes from another prior family pool it with the
intercept's marginal prior instead, :meth:`core.LifelongLearner._with_pooled_intercept`).

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
amount per update on average however many tasks there are. For squared loss ``Sigma`` has a
weak inverse-Wishart prior (``PRIOR_WEIGHT`` pseudo-tasks with covariance ``PRIOR_SCALE * I``
in the scaled space) so that the fit of a stream of one or two tasks is defined and ``Sigma``
stays invertible.

Logistic tasks of a few rows are the common case of real grouped data (patients seen a few
times) and the hard one: their likelihood is far from Gaussian, and the Laplace
approximation sets the spread of their intercepts near zero where the exact marginal
likelihood does not. Tasks of at most :data:`QUADRATURE_ROWS` rows therefore enter exactly,
by quadrature over their few logits (:func:`small_task_posteriors`), through the Gaussian
site that matches their exact posterior moments (:func:`moment_sites`, expectation
propagation's step); and ``Sigma`` has the boundary-avoiding Wishart prior of Chung et al.
(2015, :data:`LOGISTIC_SPREAD_SCALE`), since an inverse-Wishart prior's mode is its scale and,
with tasks that say little about ``Sigma``, the prior's scale would decide it.

A fitted population also carries the covariance of its estimated mean
(:func:`mean_covariance`); :meth:`Population.predictive` adds it to ``Sigma`` for the prior of a
task's evidence, so that a population fitted on the first few tasks is not taken as known.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

from .losses import sigmoid

#: Pseudo-tasks of the inverse-Wishart prior on ``Sigma``, and its scale.
PRIOR_WEIGHT = 1.0
PRIOR_SCALE = 1e-2
#: The logistic population's covariance has instead the weakly informative Wishart prior of
#: Chung et al. (2015) for hierarchical models, ``nu = d + 2`` degrees of freedom and scale
#: ``LOGISTIC_SPREAD_SCALE * I`` (log density ``1/2 log det Sigma - tr(Sigma) / (2 scale)``): it
#: keeps the estimate off the boundary (a zero spread) without pulling it toward a chosen
#: value, and bounds the spread of directions no task informs (tasks of one or two binary rows
#: say little about it, and an inverse-Wishart prior, whose mode is its scale, decides it).
LOGISTIC_SPREAD_SCALE = 100.0
#: Degrees of freedom of the stream's typical noise added to a task's own (:func:`task_noises`).
NOISE_PSEUDO_DOF = 10.0
#: :func:`noise_precisions` stops when no precision moves by more than ``NOISE_TOL`` (relative)
#: or after ``NOISE_MAX_ITER`` Newton steps.
NOISE_TOL = 1e-6
NOISE_MAX_ITER = 500
#: The typical noise's prior in :func:`fit_gaussian_population`: as many pseudo-tasks as this,
#: each of noise variance 1, the scaled target's variance (all of it noise). Tasks with no more
#: rows than coefficients, few of them, cannot tell their noise from the population's spread:
#: without a prior every typical noise is then a fixed point, and EM ends wherever its path
#: does (~1e-8 after one such task, heading for 0; a score of the next task off by 12 nats on
#: a row's rounding). With it, such a population's noise is of the order of the target's
#: variance from any start; once the tasks tell their noise, the prior weighs as one task
#: among ``T``.
NOISE_PRIOR_TASKS = 1.0
#: The population and the stream's family are computed again when the tasks have grown by this
#: factor, or this factor minus one times the tasks have been updated, since the last time.
REFIT_GROWTH = 1.25
#: EM stops when no parameter moves by more than ``EM_TOL`` (relative), when an accelerated
#: round raises the log posterior by less than ``EM_OBJECTIVE_TOL`` nats per task, or after
#: ``EM_MAX_ITER`` steps. Where the covariance has small variances EM crawls along a ridge of
#: nearly equal posterior (hundreds of steps, each moving the parameters by 1e-4 while the log
#: posterior gains 1e-3 nats over a hundred tasks): the second rule stops it there. (The
#: logistic population's Laplace rounds run their EM to the first rule alone.)
EM_TOL = 1e-6
EM_OBJECTIVE_TOL = 1e-5
EM_MAX_ITER = 300
#: SQUAREM's longest extrapolation starts at one EM step's length and grows by this factor each
#: time a round reaches it (Varadhan & Roland 2008; the SQUAREM package's ``mstep``): an
#: uncapped first extrapolation can leap to where a task's noise is ~0, a point far outside the
#: fixed point's basin that EM then leaves over hundreds of steps.
SQUAREM_STEP_GROWTH = 4.0
#: Laplace EM for logistic tasks (:func:`fit_logistic_population`): at most this many rounds of
#: re-expansion, stopping when the population moves less than ``LAPLACE_TOL`` (relative).
LAPLACE_ROUNDS = 20
LAPLACE_TOL = 1e-4
#: At most this many Newton steps find a task's posterior mode for its Laplace approximation.
LAPLACE_NEWTON_STEPS = 50
#: Prior ``N(0, LOGISTIC_MEAN_SCALE^2 I)`` on the logistic population's mean (standardised
#: features: a log-odds slope of 10 per standard deviation is already extreme). Without it the
#: mean has no maximum when the pooled rows are separable (a few tasks of one or two rows).
LOGISTIC_MEAN_SCALE = 10.0
#: Logistic tasks of at most this many rows enter the population's fit with their exact
#: marginal likelihood (adaptive Gauss-Hermite quadrature with this many points per row,
#: :func:`small_task_posteriors`); larger tasks with its Laplace approximation, which is close
#: to exact there.
QUADRATURE_ROWS = 3
QUADRATURE_POINTS = 10
#: The logistic population's structures (:func:`choose_logistic_population`): every
#: parameter random with any covariance (``"full"``), every parameter random and independent
#: of the others (``"diagonal"``), independent with one variance for every slope and one for the
#: intercept (``"isotropic"``, ``nlme``'s ``pdIdent`` on the slopes), or the slopes shared by
#: every task and the intercept random (``"shared_slopes"``, the random-intercept model of
#: ``lme4::glmer(y ~ x + (1 | group))``).
STRUCTURES = ("full", "diagonal", "isotropic", "shared_slopes")
#: The variance a shared slope keeps in ``Sigma`` (standardised features): small enough to
#: change no prediction (a slope's standard deviation of 0.001 per feature's), large enough
#: to keep ``Sigma`` invertible for the code that reads it.
SHARED_SLOPE_VARIANCE = 1e-6
#: :func:`without_task` refuses a population whose mean the other tasks inform, in some
#: direction, by less than this fraction of the information of all of them: ``F - A_t`` is a
#: difference with rounding errors of ``1e-16 |F|``, so half the digits are required.
UNINFORMED = 1e-8
#: Weight of the bias penalty in logistic fits (a flat prior on the intercept, kept regular).
_BIAS_PRECISION = 1e-8
#: Eigenvalues of a task's ``X'X`` below this fraction of its largest are rounding's
#: (:func:`gram_factors`): an exact zero where the task has fewer rows than parameters.
NULL_GRAM_EIGENVALUE = 1e-13
_TINY = 1e-300


@dataclass(frozen=True)
class Population:
    """The population ``N(mean, cov)`` of task parameters (or of slopes alone, see
    :meth:`slopes`) and the noise variance (regression)."""

    mean: np.ndarray
    cov: np.ndarray
    noise: float = 1.0
    #: The covariance of the estimate of ``mean`` (:func:`mean_covariance`); ``None``: not known.
    mean_cov: np.ndarray | None = None

    @classmethod
    def initial(cls, d: int) -> "Population":
        """Where EM starts on a new stream: standardised slopes and intercepts of order 1."""
        return cls(np.zeros(d), np.eye(d), 1.0)

    def to_array(self) -> np.ndarray:
        return np.concatenate([self.mean, self.cov.reshape(-1), [self.noise]])

    @functools.cached_property
    def mean_information(self) -> tuple[np.ndarray, float]:
        """``F = mean_cov^-1``, the information on the mean, and its largest eigenvalue: what
        :func:`without_task` reads of the population, once per population however many tasks
        it is asked to leave out."""
        F = np.linalg.inv(self.mean_cov)
        return F, float(np.linalg.eigvalsh(0.5 * (F + F.T))[-1])

    @classmethod
    def from_array(cls, a: np.ndarray) -> "Population":
        d = int(round((np.sqrt(1.0 + 4.0 * (a.size - 1)) - 1.0) / 2.0))
        return cls(a[:d].copy(), a[d:d + d * d].reshape(d, d).copy(), float(a[-1]))

    def slopes(self) -> "Population":
        """The slopes' marginal (every coordinate but the last, the intercept)."""
        mean_cov = None if self.mean_cov is None else self.mean_cov[:-1, :-1]
        return Population(self.mean[:-1], self.cov[:-1, :-1], self.noise, mean_cov)

    def predictive(self) -> "Population":
        """The prior of a task's parameters before its data are seen: ``N(mean, cov +
        mean_cov)``, the population with the uncertainty of its estimated mean integrated out.
        A population fitted on a few tasks is its mean's uncertainty as much as anything; the
        plug-in ``N(mean, cov)`` would be as sure of the first task's fit as of a thousand
        tasks' mean (with one task, EM sets ``cov`` to its prior's small scale)."""
        if self.mean_cov is None:
            return self
        return Population(self.mean, self.cov + self.mean_cov, self.noise)

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
                   mean_scale: float | None = None, spread_scale: float | None = None,
                   with_mean_cov: bool = True, structure: str = "full",
                   objective_tol: float = EM_OBJECTIVE_TOL) -> Population:
    """EM over every task's pseudo-observation ``(J, h)`` to convergence, from ``start``
    (:meth:`Population.initial` when ``None``), accelerated by SQUAREM (Varadhan & Roland
    2008: an extrapolation from two EM steps, kept when it is a valid population). ``noise``
    is stored with the result: the stream's typical noise variance (:func:`task_noises`);
    with ``with_mean_cov``, the covariance of its mean (:func:`mean_covariance`).
    ``structure``: ``"full"``, ``"diagonal"`` or ``"isotropic"`` (:func:`_em_step`).
    Converged when no parameter moves by more than ``tol`` (relative) in a round, or when a
    round raised the log posterior (:func:`_em_step`'s) by less than ``objective_tol`` nats
    per task (``0``: parameters only); at most ``max_iter`` EM steps."""
    J, h = (np.array(c, dtype=float) for c in zip(*tasks))
    T, d = h.shape
    x = (Population.initial(d) if start is None else start).to_array()[:-1]
    x = _squarem(x, lambda v, value=False: _em_step(v, J, h, prior_weight, mean_scale, spread_scale, structure,
                                                     value), d, T, tol, max_iter, objective_tol)
    pop = Population(x[:d].copy(), x[d:].reshape(d, d).copy(), noise)
    return dataclasses.replace(pop, mean_cov=mean_covariance(J, pop, mean_scale)) if with_mean_cov else pop


def _squarem(x: np.ndarray, step, d: int, T: int, tol: float, max_iter: int, objective_tol: float) -> np.ndarray:
    """EM's fixed point from ``x`` (a mean of ``d`` and a covariance, flattened, then any
    unconstrained entries: logarithms, whose moves count as relative ones) by SQUAREM rounds
    of ``step(x, value=False)`` (``step(x, True)`` also returns the log posterior at ``x``):
    :func:`fit_population`'s stopping rules over ``T`` tasks. A round's step length ``|r| / |v|``
    is at least 1 (the plain double EM step) and at most a cap that starts at 1 and grows by
    :data:`SQUAREM_STEP_GROWTH` whenever a round reaches it; an extrapolation that is not a
    valid population, or whose EM step cannot be taken, gives way to the double EM step."""
    size = d + d * d
    before = None
    longest = 1.0  # the extrapolation's largest step length for now (SQUAREM's step.max)
    for _ in range(max_iter // 3):
        if objective_tol > 0:
            x1, value = step(x, True)  # value: the log posterior at x
            if before is not None and 0.0 <= value - before < objective_tol * T:
                return x1
            before = value
        else:
            x1 = step(x)
        x2 = step(x1)
        r, v = x1 - x, x2 - 2.0 * x1 + x
        nv = float(np.linalg.norm(v))
        new = x2
        if nv > 0:
            length = max(float(np.linalg.norm(r)) / nv, 1.0)
            if length >= longest:  # capped, and the cap widened for the next round
                length, longest = longest, longest * SQUAREM_STEP_GROWTH
            alpha = -length
            trial = x - 2.0 * alpha * r + alpha * alpha * v
            if _valid(trial[:size], d) and np.all(np.isfinite(trial)):
                try:  # an extrapolation to the edge of definiteness can leave a singular system
                    new = step(trial)
                except np.linalg.LinAlgError:
                    new = x2
                if not (_valid(new[:size], d) and np.all(np.isfinite(new))):
                    new = x2
        moved = _moved(x[:size], new[:size], d)
        if x.size > size:
            moved = max(moved, float(np.max(np.abs(new[size:] - x[size:]))))
        x = new
        if moved < tol:
            break
    return x


def choose_logistic_population(tasks: list, start: Population | None = None) -> Population:
    """The logistic population of the structure (:data:`STRUCTURES`) expected to predict new
    rows best: each fitted by :func:`fit_logistic_population`, then compared by Akaike's
    criterion ``log p(y | m, Sigma) - q`` (the marginal likelihood of every task at the fit,
    without the priors; ``q`` the free parameters of ``Sigma``), the estimate of the expected
    log-likelihood of new tasks drawn as these were (Akaike 1973).

    Tasks of a few binary rows barely tell whether their slopes differ: the Wishart prior of
    the full structure then keeps the slopes' spread away from zero, and a task's own one or
    two rows decide the direction of its slopes. When the tasks do not show a spread worth
    its parameters, the slopes are shared, as the mixed model a statistician fits (a random
    intercept) shares them. Random slopes are not tried at all unless the tasks have more rows
    than a model with random slopes has random effects (``T (d + 1)``; lme4's
    ``check.nobs.vs.nRE`` for models with a scale parameter, stricter than its check for
    binomial ones): with no more, each task's own rows can be fitted exactly by its own
    coefficients, and the slopes' spread is the prior's more than the data's. ``start``
    warm-starts the fit of its own structure."""
    D = tasks[0][0].shape[1]
    if D == 1:  # no slopes: one structure
        return fit_logistic_population(tasks, start)
    own = population_structure(start) if start is not None else None
    # random slopes need more rows than random effects
    rows = sum(X.shape[0] for X, _ in tasks)
    structures = STRUCTURES if rows > D * len(tasks) else ("shared_slopes",)
    if D < 3:  # one slope: isotropic is diagonal
        structures = tuple(s for s in structures if s != "isotropic")
    fits = {name: fitted_logistic_population(tasks, start if name == own else None, structure=name)
            for name in structures}
    free = {"full": D * (D + 1) / 2.0, "diagonal": float(D), "isotropic": 2.0, "shared_slopes": 1.0}
    aic = {name: value - _log_prior(pop) - free[name] for name, (pop, value) in fits.items()}
    return fits[max(structures, key=aic.get)][0]


def population_structure(pop: Population) -> str:
    """``"shared_slopes"`` when ``pop``'s slopes have :data:`SHARED_SLOPE_VARIANCE` and no
    covariance with the intercept, ``"isotropic"`` when its covariance is diagonal with two or
    more slopes of one variance (and not that), ``"diagonal"`` when it is diagonal (and not
    those), ``"full"`` otherwise."""
    d = pop.mean.size - 1
    shared = np.diag(np.append(np.full(d, SHARED_SLOPE_VARIANCE), pop.cov[-1, -1]))
    if d and np.allclose(pop.cov, shared, rtol=1e-9, atol=0.0):
        return "shared_slopes"
    if not d or np.any(pop.cov - np.diag(np.diag(pop.cov))):
        return "full"
    slopes = np.diag(pop.cov)[:-1]
    return "isotropic" if d >= 2 and np.allclose(slopes, slopes[0], rtol=1e-9, atol=0.0) else "diagonal"


def fit_logistic_population(tasks: list, start: Population | None = None, rounds: int = LAPLACE_ROUNDS,
                            tol: float = LAPLACE_TOL, structure: str = "full") -> Population:
    """:func:`fitted_logistic_population`'s population alone."""
    return fitted_logistic_population(tasks, start, rounds, tol, structure)[0]


def fitted_logistic_population(tasks: list, start: Population | None = None, rounds: int = LAPLACE_ROUNDS,
                               tol: float = LAPLACE_TOL, structure: str = "full") -> tuple[Population, float]:
    """The population of logistic tasks ``[(X, y), ...]`` (scaled designs, bias last) that
    maximises their marginal likelihood (:func:`marginal_objective`: exact for tasks of at most
    :data:`QUADRATURE_ROWS` rows, Laplace for the others; with the priors of
    :func:`marginal_objective`). Each round replaces every task's likelihood by a Gaussian site
    under the current population — for a small task the one that gives its exact posterior
    mean and covariance (expectation propagation's moment matching), for the others the
    expansion at its posterior mode (:func:`logistic_pseudo_observation`) — runs
    :func:`fit_population` on those sites, and keeps the result only if the objective rises,
    halving the step toward the current population otherwise (the plain iteration can
    diverge). Stops when the population moves less than ``tol`` (relative) or after
    ``rounds``; returns it and its :func:`marginal_objective`. The Laplace approximation alone is badly biased on tasks of one or two binary
    rows: it sets the intercepts' variance near zero where the exact marginal likelihood puts
    it near the variance a mixed model fitted by quadrature finds.

    ``structure="shared_slopes"``: the slopes' variances are held at
    :data:`SHARED_SLOPE_VARIANCE` and their covariances with the intercept at zero, and each
    round's step is :func:`fit_shared_slopes` on the sites; ``"diagonal"``: every covariance
    is held at zero (EM's step on the diagonal); ``"isotropic"``: that, and the slopes' variances
    held equal (the step on the slopes' averaged expected scatter, exact for a tied variance)."""
    if structure not in STRUCTURES:
        raise ValueError(f"structure must be one of {STRUCTURES}, got {structure!r}")
    D = tasks[0][0].shape[1]
    pop = Population.initial(D) if start is None else start
    if structure == "shared_slopes" and population_structure(pop) != "shared_slopes":
        pop = Population(pop.mean, np.diag(np.append(np.full(D - 1, SHARED_SLOPE_VARIANCE), 1.0)))
    if structure == "diagonal":
        pop = Population(pop.mean, np.diag(np.diag(pop.cov)))
    if structure == "isotropic":
        pop = Population(pop.mean, np.diag(_tie_slopes(np.diag(pop.cov))))
    value, modes, sites = marginal_objective(tasks, pop)
    for _ in range(rounds):
        try:
            if structure == "shared_slopes":
                trial = fit_shared_slopes(sites)
            else:
                # converged in its parameters: the rounds stop when the population moves by
                # less than `tol`, which an EM stopped on its log posterior's rise keeps above it
                trial = fit_population(sites, pop, mean_scale=LOGISTIC_MEAN_SCALE,
                                       spread_scale=LOGISTIC_SPREAD_SCALE, with_mean_cov=False,
                                       structure=structure, objective_tol=0.0)
        except np.linalg.LinAlgError:  # sites of extreme magnitude: no step from here
            break
        for _ in range(30):
            try:
                trial_value, trial_modes, trial_sites = marginal_objective(tasks, trial, modes)
            except np.linalg.LinAlgError:
                trial_value = -np.inf
            if trial_value >= value:
                break
            trial = Population(0.5 * (pop.mean + trial.mean), 0.5 * (pop.cov + trial.cov))
        else:
            break
        moved = _moved(pop.to_array()[:-1], trial.to_array()[:-1], trial.mean.size)
        pop, value, modes, sites = trial, trial_value, trial_modes, trial_sites
        if moved < tol:
            break
    J = np.array([J for J, _ in sites])
    return dataclasses.replace(pop, mean_cov=mean_covariance(J, pop, LOGISTIC_MEAN_SCALE)), value


def fit_shared_slopes(sites: list, spread_scale: float = LOGISTIC_SPREAD_SCALE,
                      mean_scale: float = LOGISTIC_MEAN_SCALE) -> Population:
    """The population with shared slopes that maximises the Gaussian sites' ``(J_t, h_t)``
    marginal likelihood (with the priors of :func:`marginal_objective`): ``Sigma = diag(s,
    ..., s, v)`` with ``s`` :data:`SHARED_SLOPE_VARIANCE`. A site's marginal under ``N(m,
    Sigma)`` is ``1/2 h'A Sigma h + h'A m - 1/2 m'J A m - 1/2 log det(I + Sigma J)`` with ``A =
    (I + Sigma J)^-1`` (no inverse of ``Sigma``, which is near singular); for a given ``v`` the
    best ``m`` is the generalised least-squares mean ``(sum_t J_t A_t + I / mean_scale^2)^-1
    sum_t A_t' h_t`` (exact, where EM's mean moves by the slopes' tiny variance per step), and
    ``log v`` is found by a bounded scalar search (scipy)."""
    J, h = (np.array(c, dtype=float) for c in zip(*sites))
    T, D = h.shape
    eye = np.eye(D)

    def profile(log_v: float) -> tuple[float, np.ndarray, np.ndarray]:
        cov = np.diag(np.append(np.full(D - 1, SHARED_SLOPE_VARIANCE), np.exp(log_v)))
        M = eye + cov @ J  # (T, D, D): I + Sigma J_t
        A = np.linalg.inv(M)
        JA = J @ A
        JA = 0.5 * (JA + JA.transpose(0, 2, 1))
        Ath = np.einsum("tji,tj->ti", A, h)
        m = np.linalg.solve(JA.sum(axis=0) + eye / mean_scale ** 2, Ath.sum(axis=0))
        hAh = float(np.einsum("ti,ti->", h, (A @ (h @ cov)[:, :, None])[:, :, 0]))  # sum_t h' A Sigma h
        value = (0.5 * hAh + float(Ath.sum(axis=0) @ m)
                 - 0.5 * float(m @ JA.sum(axis=0) @ m) - 0.5 * float(np.sum(np.linalg.slogdet(M)[1])))
        prior = (0.5 * float(np.linalg.slogdet(cov)[1]) - 0.5 * float(np.trace(cov)) / spread_scale
                 - 0.5 * float(m @ m) / mean_scale ** 2)
        return value + prior, m, cov
    best = minimize_scalar(lambda v: -profile(v)[0], bounds=(np.log(1e-6), np.log(1e6)), method="bounded",
                           options={"xatol": 1e-6})
    _, m, cov = profile(float(best.x))
    return Population(m, cov)


def without_task(pop: Population, site: tuple[np.ndarray, np.ndarray], tasks: int,
                 spread_scale: float | None = None, prior_weight: float = PRIOR_WEIGHT) -> Population:
    """The population fitted on ``tasks`` tasks (with :func:`mean_covariance`'s ``mean_cov``)
    refitted without one of them, whose Gaussian site is ``site = (J_t, h_t)``: the population
    of the *other* tasks, against which that task's evidence is measured without counting its
    own data twice (in-sample, a population that includes the task favours it).

    The mean is exact given ``Sigma``: the generalised least-squares mean of the other tasks,
    ``m' = m - (F - A_t)^-1 g_t`` with ``F`` the mean's information (``mean_cov^-1``), ``A_t =
    (I + J_t Sigma)^-1 J_t`` the task's share of it and ``g_t = (I + J_t Sigma)^-1 (h_t - J_t m)``
    (at EM's fixed point ``F m`` is the sum of the tasks' ``(I + J_s Sigma)^-1 h_s``), and
    ``mean_cov' = (F - A_t)^-1``. The covariance takes one EM step from the fit over the other
    tasks: the expected scatter ``S`` that gives ``Sigma`` in the M-step, less the task's term
    ``C_t + d_t d_t'`` (its posterior covariance ``C_t = Sigma (I + J_t Sigma)^-1`` and mean
    ``m + d_t``, ``d_t = Sigma g_t``) and less the shift of the mean, solved for ``tasks - 1``
    tasks: the inverse-Wishart prior of ``prior_weight`` pseudo-tasks, or with
    ``spread_scale`` the Wishart prior of :func:`_em_step`. The structure is kept: a diagonal
    ``Sigma`` stays diagonal, shared slopes stay shared (:func:`population_structure`).
    Everything costs ``O(d^3)``, however many tasks there are. Raises
    :class:`numpy.linalg.LinAlgError` when the other tasks leave a direction of the mean
    uninformed (an eigenvalue of ``F - A_t`` below :data:`UNINFORMED` times ``F``'s largest: a
    feature only this task has, or a noiseless task that decides the mean alone), where the
    difference, and an evidence measured against it, would be rounding's, or when the result
    is not a valid population."""
    if pop.mean_cov is None or tasks < 2:
        raise np.linalg.LinAlgError("the population without one task needs two tasks and the mean's covariance")
    J, h = (np.asarray(a, dtype=float) for a in site)
    m, cov = pop.mean, pop.cov
    D = m.size
    K = np.linalg.inv(np.eye(D) + J @ cov)  # (I + J Sigma)^-1
    share = K @ J
    g = K @ (h - J @ m)
    F, F_top = pop.mean_information
    info = F - share
    vals, vecs = np.linalg.eigh(0.5 * (info + info.T))
    # F - A_t carries rounding of the order of eps |F|: a direction with less is not the others'
    if not vals[0] > UNINFORMED * max(F_top, _TINY):
        raise np.linalg.LinAlgError("the other tasks do not inform every direction of the mean")
    mean_cov = (vecs / vals) @ vecs.T
    mean = m - mean_cov @ g
    d = cov @ g
    term = cov @ K + np.outer(d, d) * (tasks / (tasks - 1.0))  # C_t + d d' + (T - 1) delta delta'
    structure = population_structure(pop) if spread_scale is not None else "full"
    if spread_scale is None:
        new = ((tasks + prior_weight) * cov - term) / (tasks - 1.0 + prior_weight)
    else:
        scatter = cov @ cov / spread_scale + (tasks - 1.0) * cov - term
        if structure == "full":
            vals, vecs = np.linalg.eigh(0.5 * (scatter + scatter.T))
        else:
            vals, vecs = np.diag(scatter).copy(), np.eye(D)
            vals = _tie_slopes(vals) if structure == "isotropic" else vals
        vals = np.maximum(vals, 0.0)
        spread = _wishart_spread(vals, tasks - 1.0, spread_scale)
        new = (vecs * np.maximum(spread, _TINY)) @ vecs.T
        if structure == "shared_slopes":
            new = np.diag(np.append(np.diag(cov)[:-1], new[-1, -1]))
    new = 0.5 * (new + new.T)
    out = Population(mean, new, pop.noise, 0.5 * (mean_cov + mean_cov.T))
    if not (_valid(out.to_array()[:-1], D) and np.all(np.isfinite(out.mean_cov))):
        raise np.linalg.LinAlgError("the population without the task is not a valid population")
    return out


def _log_prior(pop: Population) -> float:
    """The log priors :func:`marginal_objective` adds to the tasks' marginal likelihood: the
    Wishart prior of :data:`LOGISTIC_SPREAD_SCALE` on ``Sigma`` and ``N(0,
    LOGISTIC_MEAN_SCALE^2 I)`` on the mean, up to their constants."""
    return (0.5 * float(np.linalg.slogdet(pop.cov)[1]) - 0.5 * float(np.trace(pop.cov)) / LOGISTIC_SPREAD_SCALE
            - 0.5 * float(pop.mean @ pop.mean) / LOGISTIC_MEAN_SCALE ** 2)


def marginal_objective(tasks: list, pop: Population, modes: list | None = None) -> tuple[float, list, list]:
    """The logistic tasks' log marginal likelihood under ``pop`` — exact (to quadrature,
    :func:`small_task_posteriors`) for tasks of at most :data:`QUADRATURE_ROWS` rows, the
    Laplace approximation at the posterior mode for the others — plus the log priors of the
    covariance (the Wishart prior of :data:`LOGISTIC_SPREAD_SCALE`) and of the mean (``N(0,
    LOGISTIC_MEAN_SCALE^2 I)``). Returns it, every task's posterior mode (``None`` for a small
    task; ``modes``: warm starts) and every task's Gaussian site ``(J, h)`` (see
    :func:`fit_logistic_population`)."""
    prec = np.linalg.inv(pop.cov)
    logdet_prec = float(np.linalg.slogdet(prec)[1])
    total = _log_prior(pop)
    out_modes: list = [None] * len(tasks)
    sites: list = [None] * len(tasks)
    by_rows: dict[int, list[int]] = {}  # the small tasks, by their number of rows
    laplace: dict[int, list[int]] = {}  # the others, likewise: their modes are found together
    for i, (X, _) in enumerate(tasks):
        (by_rows if X.shape[0] <= QUADRATURE_ROWS else laplace).setdefault(X.shape[0], []).append(i)
    terms = {}
    for idx in laplace.values():
        X, y = np.array([tasks[i][0] for i in idx]), np.array([tasks[i][1] for i in idx])
        W0 = np.array([pop.mean if not modes or modes[i] is None else modes[i] for i in idx])
        W, H = logistic_modes(X, y, np.broadcast_to(pop.mean, W0.shape), prec, W0, max_iter=LAPLACE_NEWTON_STEPS)
        Z, R = np.einsum("kni,ki->kn", X, W), W - pop.mean
        fit = np.sum(np.logaddexp(0.0, Z) - y * Z, axis=1)
        logdet_H = np.linalg.slogdet(H)[1]
        for k, i in enumerate(idx):
            terms[i] = -float(fit[k]) - 0.5 * float(R[k] @ prec @ R[k]) + 0.5 * logdet_prec - 0.5 * float(logdet_H[k])
            out_modes[i] = W[k]
            sites[i] = logistic_pseudo_observation(X[k], y[k], W[k])
    for i in sorted(terms):
        total += terms[i]
    for idx in by_rows.values():
        log_z, means, covs = small_task_posteriors(np.array([tasks[i][0] for i in idx]),
                                                   np.array([tasks[i][1] for i in idx]), pop.mean, pop.cov)
        total += float(np.sum(log_z))
        J, h = moment_sites(means, covs, pop, prec)
        for k, i in enumerate(idx):
            sites[i] = (J[k], h[k])
    return total, out_modes, sites


def small_task_posteriors(X: np.ndarray, y: np.ndarray, mean: np.ndarray, cov: np.ndarray,
                          points: int = QUADRATURE_POINTS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every task's exact log marginal likelihood ``log p(y_t)``, posterior mean and posterior
    covariance of ``theta`` under the Gaussian prior ``N(mean, cov)`` (one for all, or one per
    task: ``(T, D)`` and ``(T, D, D)``), for tasks of ``n`` rows each: ``X`` ``(T, n, D)``,
    ``y`` ``(T, n)`` 0/1. The likelihood depends on ``theta`` only through the ``n`` logits
    ``z = X theta ~ N(X m, X Sigma X')``: written ``z = a + V r`` with ``r ~ N(0, I_n)``, the
    integrals over ``r`` are taken by adaptive Gauss-Hermite quadrature (``points`` per
    dimension, centred at the mode of ``r``'s posterior and scaled by its curvature, as lme4's
    ``nAGQ``), and ``theta`` given ``z`` is Gaussian, which carries the moments of ``r`` back
    to ``theta``."""
    T, n, D = X.shape
    a = X @ mean if mean.ndim == 1 else np.einsum("tnd,td->tn", X, mean)
    XS = X @ cov  # (T, n, D)
    lam, U = np.linalg.eigh(XS @ X.transpose(0, 2, 1))
    lam = np.maximum(lam, 0.0)
    V = U * np.sqrt(lam)[:, None, :]  # z = a + V r
    s = 2.0 * y - 1.0

    Vt = V.transpose(0, 2, 1)

    def log_posterior(r):  # log N(r; 0, I) + log p(y | z), up to the normaliser of N; r (T, n) or (T, Q, n)
        if r.ndim == 2:
            z = a + np.matmul(r[:, None, :], Vt)[:, 0, :]
            return -0.5 * np.sum(r * r, axis=-1) - np.sum(np.logaddexp(0.0, -s * z), axis=-1)
        z = a[:, None, :] + np.matmul(r, Vt)
        return -0.5 * np.sum(r * r, axis=-1) - np.sum(np.logaddexp(0.0, -s[:, None, :] * z), axis=-1)

    r = np.zeros((T, n))
    f = log_posterior(r)
    for _ in range(100):  # Newton with step halving on a strictly concave function
        q = sigmoid(-s * (a + np.einsum("tij,tj->ti", V, r)))  # 1 - p(y_i)
        grad = -r + np.einsum("tij,ti->tj", V, s * q)
        H = np.eye(n) + np.einsum("tij,ti,tik->tjk", V, q * (1.0 - q), V)
        step = np.linalg.solve(H, grad[..., None])[..., 0]
        t = np.ones(T)
        while True:
            trial = r + t[:, None] * step
            f_new = log_posterior(trial)
            bad = (f_new < f - 1e-12 * np.abs(f)) & (t >= 1e-8)
            if not np.any(bad):
                break
            t = np.where(bad, 0.5 * t, t)
        moved = float(np.max(np.abs(trial - r)))
        r, f = trial, f_new
        if moved < 1e-10:
            break
    q = sigmoid(-s * (a + np.einsum("tij,tj->ti", V, r)))
    H = np.eye(n) + np.einsum("tij,ti,tik->tjk", V, q * (1.0 - q), V)
    L = np.linalg.cholesky(np.linalg.inv(H))
    u, log_w = _hermite_grid(n, points)
    R = r[:, None, :] + np.einsum("tij,qj->tqi", L, u)  # (T, Q, n)
    log_terms = log_w[None, :] + 0.5 * np.sum(u * u, axis=1)[None, :] + log_posterior(R)
    top = log_terms.max(axis=1, keepdims=True)
    weights = np.exp(log_terms - top)
    norm = weights.sum(axis=1)
    log_z = (top[:, 0] + np.log(norm) - 0.5 * n * np.log(2.0 * np.pi)
             + np.sum(np.log(np.diagonal(L, axis1=1, axis2=2)), axis=1))
    weights /= norm[:, None]
    mean_r = np.einsum("tq,tqi->ti", weights, R)
    dev = R - mean_r[:, None, :]
    cov_r = np.einsum("tq,tqi,tqj->tij", weights, dev, dev)
    keep = lam > 1e-12 * np.maximum(lam.max(axis=1, keepdims=True), _TINY)
    B = np.einsum("tnd,tnj->tdj", XS, U) * np.where(keep, 1.0 / np.sqrt(np.where(keep, lam, 1.0)), 0.0)[:, None, :]
    means = mean + np.einsum("tdj,tj->td", B, mean_r)
    covs = (cov - np.einsum("tdj,tej->tde", B, B)
            + np.einsum("tdj,tjk,tek->tde", B, cov_r, B))
    return log_z, means, 0.5 * (covs + covs.transpose(0, 2, 1))


def moment_sites(means: np.ndarray, covs: np.ndarray, pop: Population,
                 prec: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The Gaussian sites ``(J_t, h_t)`` whose posterior under ``pop`` has the given means and
    covariances: ``J = C^-1 - Sigma^-1``, ``h = C^-1 mu - Sigma^-1 m`` (the likelihood of a
    log-concave task narrows its posterior, so ``J`` is positive semi-definite; rounding is
    clipped)."""
    prec = np.linalg.inv(pop.cov) if prec is None else prec
    post = np.linalg.inv(covs)
    J = 0.5 * (post + post.transpose(0, 2, 1)) - prec
    vals, vecs = np.linalg.eigh(J)
    J = (vecs * np.maximum(vals, 0.0)[:, None, :]) @ vecs.transpose(0, 2, 1)
    h = np.einsum("tij,tj->ti", post, means) - prec @ pop.mean
    return J, h


@functools.cache
def _hermite_grid(n: int, points: int) -> tuple[np.ndarray, np.ndarray]:
    """The tensor Gauss-Hermite rule for ``int g(u) exp(-|u|^2 / 2) du`` in ``n`` dimensions:
    nodes ``(points^n, n)`` and log weights (computed once per ``(n, points)``, read-only)."""
    x, w = np.polynomial.hermite_e.hermegauss(points)
    grids = np.meshgrid(*([x] * n), indexing="ij")
    wgrids = np.meshgrid(*([np.log(w)] * n), indexing="ij")
    nodes = np.stack([g.reshape(-1) for g in grids], axis=1)
    log_weights = np.sum([g.reshape(-1) for g in wgrids], axis=0)
    nodes.flags.writeable = log_weights.flags.writeable = False
    return nodes, log_weights


def mean_covariance(J: np.ndarray, pop: Population, mean_scale: float | None = None) -> np.ndarray:
    """The covariance of the population's mean as estimated from tasks of likelihood
    precisions ``J`` ``(T, d, d)`` given its covariance ``Sigma``: the inverse of the mean's
    information ``sum_t (Sigma + J_t^-1)^-1`` (each task's parameters seen through its own
    noise and the population's spread), plus ``I / mean_scale^2`` from the mean's prior when
    there is one. ``(Sigma + J^-1)^-1 = P - P C P`` with ``P = Sigma^-1`` and ``C = (J + P)^-1``
    (Woodbury), defined for singular ``J``. A direction no task informs gets a variance
    ``1e12`` times the best-informed one's rather than an infinite one."""
    P = np.linalg.inv(pop.cov)
    C = np.linalg.inv(np.asarray(J, dtype=float) + P)
    info = J.shape[0] * P - P @ C.sum(axis=0) @ P
    if mean_scale is not None:
        info = info + np.eye(P.shape[0]) / mean_scale ** 2
    vals, vecs = np.linalg.eigh(0.5 * (info + info.T))
    vals = np.maximum(vals, max(float(vals[-1]), _TINY) * 1e-12)
    return (vecs / vals) @ vecs.T


def _wishart_spread(scatter: np.ndarray, tasks: float, spread_scale: float) -> np.ndarray:
    """The M-step's variances under the Wishart prior of ``spread_scale`` from the expected
    scatter's eigenvalues (or diagonal) over ``tasks`` tasks: the positive root of ``v^2 /
    scale + (T - 1) v - s = 0``, in the form without cancellation."""
    return 2.0 * scatter / ((tasks - 1.0) + np.sqrt((tasks - 1.0) ** 2 + 4.0 * scatter / spread_scale))


def _tie_slopes(variances: np.ndarray) -> np.ndarray:
    """``variances`` (the slopes', then the intercept's) with every slope's replaced by their
    average."""
    out = np.array(variances, dtype=float)
    out[:-1] = out[:-1].mean()
    return out


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


@dataclass(frozen=True)
class _Posteriors:
    """What EM's M-step and its value read of every task's posterior under ``N(mean, cov)``
    given its pseudo-observation ``(J, h)`` (EM's E-step): ``P = cov^-1``, the sum of the
    posterior covariances ``C_t = (J_t + P)^-1``, the posterior means ``mu_t = C_t (h_t + P
    mean)`` ``(T, D)``, each task's ``tr(J_t C_t)`` and, when asked for, the sum of ``log det(J_t
    + P)``."""

    prec: np.ndarray
    cov_sum: np.ndarray
    means: np.ndarray
    information_trace: np.ndarray
    logdet_precision: float | None = None


def _task_posteriors(mean: np.ndarray, cov: np.ndarray, J: np.ndarray, h: np.ndarray,
                     logdet: bool = False) -> _Posteriors:
    """Every task's posterior (:class:`_Posteriors`) from its ``(J_t, h_t)``, each ``C_t`` by
    inverting ``M_t = J_t + P``: ``O(T D^3)``."""
    prec = np.linalg.inv(cov)
    M = J + prec
    C = np.linalg.inv(M)
    value = None
    if logdet:
        try:  # positive definite: J is semi-definite, P definite
            value = 2.0 * float(np.log(np.diagonal(np.linalg.cholesky(M), axis1=1, axis2=2)).sum())
        except np.linalg.LinAlgError:  # rounding at the edge of definiteness
            value = float(np.linalg.slogdet(M)[1].sum())
    return _Posteriors(prec, C.sum(axis=0), np.einsum("tij,tj->ti", C, h + prec @ mean),
                       np.einsum("tij,tji->t", J, C), value)


def gram_factors(gram: np.ndarray) -> np.ndarray | None:
    """Factors ``F_t`` ``(T, r, D)`` with ``F_t' F_t = gram_t`` (each task's ``X'X``, bias
    included), ``r`` the largest rank among the tasks (a task of lower rank has rows of zeros),
    from each ``gram_t``'s eigendecomposition; ``None`` when ``r`` is over half of ``D``, where
    :func:`_task_posteriors`' inverses cost less than :func:`_factor_posteriors`' products. A
    task's rank is at most its number of rows: tasks of fewer rows than features are low rank,
    the many-features regime."""
    T, D, _ = gram.shape
    vals, vecs = np.linalg.eigh(0.5 * (gram + gram.transpose(0, 2, 1)))
    top = np.maximum(vals[:, -1:], _TINY)
    keep = vals > NULL_GRAM_EIGENVALUE * top
    rank = int(keep.sum(axis=1).max()) if T else 0
    if 2 * rank > D:
        return None
    vals, vecs, keep = vals[:, D - rank:], vecs[:, :, D - rank:], keep[:, D - rank:]
    return (np.sqrt(np.where(keep, vals, 0.0))[:, :, None] * vecs.transpose(0, 2, 1))


def _factor_posteriors(mean: np.ndarray, cov: np.ndarray, F: np.ndarray, w: np.ndarray, h: np.ndarray,
                       logdet: bool = False) -> _Posteriors:
    """:func:`_task_posteriors` for ``J_t = w_t F_t' F_t`` (:func:`gram_factors`) by Woodbury's
    identity, ``C_t = cov - A_t' K_t^-1 A_t`` with ``A_t = F_t cov`` and ``K_t = I / w_t + F_t cov
    F_t'`` (``r x r``), and the determinant lemma, ``log det(J_t + P) = -log det(cov) + r log w_t +
    log det K_t``: ``O(T r D^2)`` instead of ``O(T D^3)``."""
    T, r, D = F.shape
    prec = np.linalg.inv(cov)
    A = F @ cov  # (T, r, D)
    S = A @ F.transpose(0, 2, 1)  # F cov F'
    S = 0.5 * (S + S.transpose(0, 2, 1))
    K = S + np.eye(r)[None] / w[:, None, None]
    Kinv = np.linalg.inv(K)
    KA = Kinv @ A  # C_t = cov - A_t' K_t^-1 A_t
    cov_sum = T * cov - A.reshape(T * r, D).T @ KA.reshape(T * r, D)
    b = h + (prec @ mean)[None, :]
    means = h @ cov + mean - np.einsum("tri,tr->ti", A, np.einsum("trj,tj->tr", KA, b))  # C_t b_t
    # tr(J C) = w tr(F C F') = w (tr S - tr(S K^-1 S)), S symmetric
    trace = w * (np.trace(S, axis1=1, axis2=2) - np.einsum("tij,tij->t", S, Kinv @ S))
    value = None
    if logdet:
        value = float(-T * np.linalg.slogdet(cov)[1] + r * np.sum(np.log(w)) + np.linalg.slogdet(K)[1].sum())
    return _Posteriors(prec, 0.5 * (cov_sum + cov_sum.T), means, trace, value)


def _em_step(x: np.ndarray, J: np.ndarray, h: np.ndarray, prior_weight: float,
             mean_scale: float | None = None, spread_scale: float | None = None,
             structure: str = "full", value: bool = False,
             posteriors: tuple | None = None) -> np.ndarray | tuple[np.ndarray, float]:
    """One EM step over every task; ``x`` is the mean and the covariance, flattened
    (``posteriors``: :func:`_task_posteriors` at ``x``, when already computed). With
    ``mean_scale`` the mean has the prior ``N(0, mean_scale^2 I)`` (an ECM step: the mean given
    the covariance, then the covariance given the mean). The covariance has the inverse-Wishart
    prior of ``prior_weight`` pseudo-tasks, or with ``spread_scale`` the Wishart prior of
    :data:`LOGISTIC_SPREAD_SCALE`, whose M-step ``Sigma^2 / scale + (T - 1) Sigma = S`` (``S``
    the expected scatter) is solved in ``S``'s eigenbasis; with ``structure="diagonal"`` the
    covariance is held diagonal and the same equation is solved on each of ``S``'s diagonal
    entries (the prior's density ``1/2 log det Sigma - tr(Sigma) / (2 scale)`` splits over
    them); with ``"isotropic"``, the slopes' entries are replaced by their average first (one
    variance for every slope: the equation summed over the slopes is the same equation in
    their average).

    ``value``: also the log posterior at ``x`` that EM climbs, up to a constant: each task's
    marginal likelihood ``int exp(h'w - w'Jw / 2) N(w; m, Sigma) dw``, which is
    ``-1/2 log det(Sigma) - 1/2 log det(J + P) + 1/2 b'(J + P)^-1 b - 1/2 m'P m`` with
    ``P = Sigma^-1`` and ``b = h + P m``, summed over the tasks, plus the log densities of the
    priors above: ``(step, value)``."""
    diagonal, tied = structure in ("diagonal", "isotropic"), structure == "isotropic"
    T, d = h.shape
    mean, cov = x[:d], x[d:d + d * d].reshape(d, d)
    post = _task_posteriors(mean, cov, J, h, value) if posteriors is None else posteriors
    prec, mu = post.prec, post.means
    pm = prec @ mean
    b = h + pm
    log_posterior = None
    if value:
        logdet_cov = float(np.linalg.slogdet(cov)[1])
        logdet_M = float(post.logdet_precision)
        log_posterior = float(-0.5 * (T * logdet_cov + logdet_M) + 0.5 * np.einsum("ti,ti->", b, mu)
                              - 0.5 * T * float(mean @ pm))
        if mean_scale is not None:
            log_posterior -= 0.5 * float(mean @ mean) / mean_scale ** 2
        if spread_scale is None:
            log_posterior -= 0.5 * prior_weight * (logdet_cov + PRIOR_SCALE * float(np.trace(prec)))
        else:
            log_posterior += 0.5 * logdet_cov - 0.5 * float(np.trace(cov)) / spread_scale
    if mean_scale is None:
        m = mu.mean(axis=0)
    else:
        m = np.linalg.solve(T * prec + np.eye(d) / mean_scale ** 2, prec @ mu.sum(axis=0))
    dev = mu - m
    scatter = post.cov_sum + dev.T @ dev
    if spread_scale is None:
        cov = (scatter + prior_weight * PRIOR_SCALE * np.eye(d)) / (T + prior_weight)
        if diagonal:
            cov = np.diag(_tie_slopes(np.diag(cov)) if tied else np.diag(cov))
    else:
        if diagonal:
            vals, vecs = np.diag(scatter).copy(), np.eye(d)
            vals = _tie_slopes(vals) if tied else vals
        else:
            vals, vecs = np.linalg.eigh(0.5 * (scatter + scatter.T))
        vals = np.maximum(vals, 0.0)
        spread = _wishart_spread(vals, T, spread_scale)
        cov = (vecs * np.maximum(spread, _TINY)) @ vecs.T
    new = np.concatenate([m, (0.5 * (cov + cov.T)).reshape(-1)])
    return (new, log_posterior) if value else new


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


def noise_precisions(n: np.ndarray, gram: np.ndarray, moment: np.ndarray, yy: np.ndarray, pop: Population,
                     pseudo_dof: float = NOISE_PSEUDO_DOF, weights: np.ndarray | None = None,
                     tol: float = NOISE_TOL, max_iter: int = NOISE_MAX_ITER) -> tuple[np.ndarray, float]:
    """Every squared-loss task's noise precision ``E[1 / sigma_t^2]`` under ``pop``, whose
    ``noise`` is the stream's typical noise variance ``s^2`` (returned with them).

    The model: ``y_t = X_t theta_t + e``, ``e ~ N(0, sigma_t^2 I)``, ``theta_t ~ N(m, Sigma)``
    and ``sigma_t^2 ~ Scaled-Inv-chi^2(k, s^2)`` with ``k = pseudo_dof`` and ``s^2`` the
    typical noise. Mean-field variational Bayes over ``q(theta_t) q(sigma_t^2)`` (Bishop,
    *PRML* sec. 10.1; the variance-components step of the mixed model's EM for ``k`` infinite)
    alternates the task's Gaussian posterior ``N(mu_t, C_t)`` given the precision ``w_t`` (the
    pseudo-observation ``(w_t X'X, w_t X'y)``) and ``q(sigma_t^2)``, an inverse gamma of shape
    ``(k + n_t) / 2`` and scale ``(k s^2 + r_t) / 2``, whose ``E[1 / sigma^2]`` is
    ``w_t = (k + n_t) / (k s^2 + r_t)``, with ``r_t = E||y_t - X_t theta_t||^2 = ||y_t - X_t mu_t||^2
    + tr(X_t'X_t C_t)``, the expected residual under the posterior, not the residual of the
    task's own fit: a task of two rows and three parameters fits its rows exactly and says
    nothing of its noise alone, but under the population its rows do. With ``pseudo_dof = inf``
    every task has the typical noise. :func:`fit_gaussian_population` estimates ``s^2`` with the
    population.

    Each task's fixed point is found by Newton's method in ``log w_t``, each iteration ``O(T d)``:
    the tasks' ``X'X`` are diagonalised once in the population's whitened coordinates
    (``theta = m + L u``, ``Sigma = L L'``), where the posterior's mean and variances are
    explicit in ``w_t``. ``weights``: where the iteration starts (``1 / s^2`` when ``None``); it
    stops when no precision moves by more than ``tol`` (relative) or after ``max_iter``
    iterations."""
    n, yy = np.asarray(n, dtype=float), np.asarray(yy, dtype=float)
    gram, moment = np.asarray(gram, dtype=float), np.asarray(moment, dtype=float)
    L = np.linalg.cholesky(pop.cov)
    lam, U = np.linalg.eigh(L.T @ gram @ L)
    lam = np.maximum(lam, 0.0)
    centred = moment - gram @ pop.mean
    c = np.einsum("tji,tj->ti", U, centred @ L)  # the data's projections, in each task's eigenbasis
    S = yy - 2.0 * moment @ pop.mean + np.einsum("i,tij,j->t", pop.mean, gram, pop.mean)  # residual at the mean
    typical = float(pop.noise)
    w = np.full(n.size, 1.0 / typical) if weights is None else np.asarray(weights, dtype=float).copy()

    def residuals(w):  # E||y - X theta||^2 under the posterior of precision w, and its derivative in w
        g = w[:, None] * lam + 1.0
        r = S - np.sum(c * c * w[:, None] * (w[:, None] * lam + 2.0) / (g * g), axis=1) + np.sum(lam / g, axis=1)
        return np.maximum(r, 0.0), -np.sum(2.0 * c * c / (g * g * g) + lam * lam / (g * g), axis=1)

    if not np.isfinite(pseudo_dof):  # one noise for every task: the typical one
        return np.full(n.size, 1.0 / typical), typical
    k = float(pseudo_dof)
    for _ in range(max_iter):  # each task's w = (k + n) / (k s^2 + r(w)): Newton in log w
        r, dr = residuals(w)
        target = (k + n) / (k * typical + r)
        # log w - log target(w) = 0; its derivative in log w, 1 - w target' / target, is
        # positive at a stable root; where it is not, the plain step w = target
        slope = 1.0 + w * dr / (k * typical + r)
        gap = np.log(w / target)
        step = np.where(slope > 1e-3, gap / np.where(slope > 1e-3, slope, 1.0), gap)
        w = w * np.exp(-step)
        if float(np.max(np.abs(step))) <= tol:
            break
    return w, typical


def fit_gaussian_population(tasks: list, start: Population | None = None, noises: np.ndarray | None = None,
                            pseudo_dof: float = NOISE_PSEUDO_DOF, prior_weight: float = PRIOR_WEIGHT,
                            tol: float = EM_TOL, max_iter: int = EM_MAX_ITER, with_mean_cov: bool = True,
                            objective_tol: float = EM_OBJECTIVE_TOL,
                            noise_prior_tasks: float = NOISE_PRIOR_TASKS) -> tuple[Population, np.ndarray]:
    """The population of squared-loss tasks ``[(n, X'X, X'y, y'y), ...]`` with every task's
    noise and the typical one estimated with it (:func:`noise_precisions`'s model), by
    variational EM (:func:`noise_precisions`'s coordinate ascent in one step with EM's: each
    task's posterior given its precision ``w_t``, then the precisions given the posteriors' expected
    residuals and ``s^2``, then the population), accelerated by SQUAREM over the
    population, ``log w_t`` and ``log s^2`` together: the fixed point is the joint one, where each
    task's posterior, its noise and the population agree (the mixed model's ML estimates, noise
    included, for ``pseudo_dof = inf``). A first fit (``start`` ``None``) starts the
    precisions from ``1 / noises`` (each task's own estimate, :func:`task_noises`; the scaled
    target's variance 1 when ``None``), a refit from ``start`` and its noise. Returns the
    population (``noise``: ``s^2``) and the precisions.

    ``s^2`` has the prior of ``A = noise_prior_tasks`` pseudo-tasks of precision 1 (each task's
    ``sigma_t^2 ~ Scaled-Inv-chi^2(k, s^2)`` contributes ``k/2 log s^2 - k s^2 w_t / 2`` to the
    bound; the prior ``k A / 2 (log s^2 - s^2)``): its step is the maximiser
    ``s^2 = (T + A) / (sum_t w_t + A)``, plain maximum likelihood ``T / sum_t w_t`` for ``A = 0``
    (:data:`NOISE_PRIOR_TASKS` says why the default is 1). For ``pseudo_dof = inf`` every task
    has the shared noise ``s^2``, estimated from the expected residuals as the mixed model does."""
    n, gram, moment, yy = (np.array(c, dtype=float) for c in zip(*tasks))
    T, d = moment.shape
    if start is None:
        w = 1.0 / (np.ones(T) if noises is None else np.asarray(noises, dtype=float))
        start = dataclasses.replace(Population.initial(d), noise=float(T / np.sum(w)))
    else:
        w, _ = noise_precisions(n, gram, moment, yy, start, pseudo_dof)
    size = d + d * d
    shared = not np.isfinite(pseudo_dof)

    factors = gram_factors(gram)

    def step(v, value=False):
        w = np.exp(v[size:-1])
        J, h = gram * w[:, None, None], moment * w[:, None]
        mean, cov = v[:d], v[d:size].reshape(d, d)
        post = (_task_posteriors(mean, cov, J, h, value) if factors is None
                else _factor_posteriors(mean, cov, factors, w, h, value))
        mu = post.means
        # E||y - X theta||^2 = y'y - 2 mu'X'y + mu'X'X mu + tr(X'X C), and tr(X'X C) = tr(J C) / w
        r = np.maximum(yy - 2.0 * np.einsum("ti,ti->t", mu, moment) + np.einsum("ti,tij,tj->t", mu, gram, mu)
                       + post.information_trace / w, 0.0)
        if shared:
            noise = max(float(r.sum() / n.sum()), _TINY)
            w = np.full(T, 1.0 / noise)
        else:
            w = (pseudo_dof + n) / (pseudo_dof * float(np.exp(v[-1])) + r)
            noise = (T + noise_prior_tasks) / (float(np.sum(w)) + noise_prior_tasks)
        out = _em_step(v[:size], J, h, prior_weight, value=value, posteriors=post)
        x = out[0] if value else out
        new = np.concatenate([x, np.log(w), [np.log(noise)]])
        return (new, out[1]) if value else new

    x = _squarem(np.concatenate([start.to_array()[:-1], np.log(w), [np.log(start.noise)]]), step, d, T, tol,
                 max_iter, objective_tol)
    w = np.exp(x[size:-1])
    pop = Population(x[:d].copy(), x[d:size].reshape(d, d).copy(), float(np.exp(x[-1])))
    if with_mean_cov:
        pop = dataclasses.replace(pop, mean_cov=mean_covariance(gram * w[:, None, None], pop))
    return pop, w


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
    ``N(mean, 1 / precision)`` of ``bias = (mean, precision)``. ``X`` ``(n, d + 1)`` and ``y``
    ``(n,)`` are one task's rows for every centre, or ``(k, n, d + 1)`` and ``(k, n)`` one
    task's per centre (tasks of as many rows, each under its own prior). Newton's method with
    step halving, every centre at once (the objective is strictly convex: it converges from
    any start)."""
    shared = X.ndim == 2
    k, d1 = centres.shape[0], X.shape[-1]
    P = np.broadcast_to(precision, (k,) + precision.shape[-2:])
    if centres.shape[1] == d1:
        C = centres
    else:
        P = np.concatenate([np.concatenate([P, np.zeros((k, d1 - 1, 1))], axis=2),
                            np.zeros((k, 1, d1))], axis=1)
        bias_mean, bias_precision = (0.0, _BIAS_PRECISION) if bias is None else bias
        P[:, -1, -1] = bias_precision
        C = np.hstack([centres, np.full((k, 1), float(bias_mean))])

    def rows(active):  # the rows and labels of the active centres
        return (X, y) if shared else (X[active], y[active])

    def scores(W, Xa):  # (k, n)
        return W @ Xa.T if shared else np.einsum("kni,ki->kn", Xa, W)

    def objective(W, Cs, Ps, Xa, ya):
        Z = scores(W, Xa)
        R = W - Cs
        return np.sum(np.logaddexp(0.0, Z) - ya * Z, axis=1) + 0.5 * np.einsum("ki,kij,kj->k", R, Ps, R)

    def hessians(W, Ps, Xa):
        Pr = sigmoid(scores(W, Xa))
        S = Pr * (1.0 - Pr)
        XtS = Xa.T[None, :, :] * S[:, None, :] if shared else Xa.transpose(0, 2, 1) * S[:, None, :]
        return Pr, np.matmul(XtS, Xa) + Ps  # X' diag(S_k) X, batched by BLAS

    W = C.copy() if W0 is None else np.array(W0, dtype=float, copy=True)
    f = objective(W, C, P, X, y)
    active = np.arange(k)
    for _ in range(max_iter):
        Wa, fa, Ca, Pa = W[active], f[active], C[active], P[active]
        Xa, ya = rows(active)
        Pr, H = hessians(Wa, Pa, Xa)
        residual = (Pr - ya) @ Xa if shared else np.einsum("kn,kni->ki", Pr - ya, Xa)
        grad = residual + np.einsum("kij,kj->ki", Pa, Wa - Ca)
        step = np.linalg.solve(H, grad[..., None])[..., 0]
        t = np.ones(active.size)
        while True:
            W_new = Wa - t[:, None] * step
            f_new = objective(W_new, Ca, Pa, Xa, ya)
            bad = (f_new > fa + 1e-12 * np.abs(fa)) & (t >= 1e-8)
            if not np.any(bad):
                break
            t = np.where(bad, 0.5 * t, t)
        moved = np.max(np.abs(W_new - Wa), axis=1)
        W[active], f[active] = W_new, f_new
        active = active[moved > tol * (1.0 + np.max(np.abs(W_new), axis=1))]
        if active.size == 0:
            break
    return W, hessians(W, P, X)[1]


def logistic_mode(X: np.ndarray, y: np.ndarray, centre: np.ndarray, precision: np.ndarray,
                  w0: np.ndarray | None = None, max_iter: int = LAPLACE_NEWTON_STEPS, tol: float = 1e-8) -> tuple[np.ndarray, np.ndarray]:
    """:func:`logistic_modes` for one centre: ``(w, H)``."""
    W, H = logistic_modes(X, y, centre[None, :], precision, None if w0 is None else w0[None, :], max_iter, tol)
    return W[0], H[0]


def pooled_intercept(intercept: float, precision: float, pop: Population, slopes: np.ndarray | None) -> float:
    """The task's intercept pooled with the population's: its own estimate ``intercept`` (of
    precision ``precision``, given its slopes) combined with the intercept's conditional prior
    given ``slopes`` — the posterior mean of the mixed model's random intercept — or, with
    ``slopes`` ``None``, with the intercept's marginal prior."""
    mean, var = (float(pop.mean[-1]), float(pop.cov[-1, -1])) if slopes is None else pop.intercept_given(slopes)
    return float((precision * intercept + mean / var) / (precision + 1.0 / var))
