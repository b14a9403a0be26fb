"""Empirical-Bayes task models: each task's prediction model is its posterior mean under a
prior built from the shared library, with the prior's family and the distribution of its
strength estimated from the whole stream by maximum marginal likelihood (the *evidence*).

For a task with data ``(X, y)`` (scaled space, bias last) the slopes ``theta`` get one of the
Gaussian priors of a *family*; the intercept is unpenalised:

* ``ridge``: ``theta ~ N(0, omega I)`` — the task alone (an empirical-Bayes ridge);
* ``mixture`` over representatives ``k`` with weights ``pi_k``:
  ``theta ~ sum_k pi_k N(m_k, omega (I + rho B B' / b))`` where ``m_k`` are the
  representatives' models, ``B`` the library's basis (FCL3's decoder ``D``) and
  ``b = tr(B B') / d`` makes ``rho`` scale-free; ``rho = 0`` is an isotropic prior around the
  representatives, ``rho > 0`` also lets the task move cheaply inside the library's span;
* ``subspace``: the same with the single centre ``0`` (ELLA's basis, no clusters).

The evidence ``p(y | X, prior)`` is computed for every ``omega`` of a log grid (a task's
*evidence curve*, :class:`Curve`):

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

``omega`` is not chosen task by task. The tasks' ``omega`` are taken as draws from one
distribution ``pi`` over the grid, estimated from every task's evidence curve (the maximum a
posteriori estimate under a Dirichlet prior, :func:`omega_prior`: a hierarchical model), and
each task's posterior mean
integrates ``omega`` out under ``pi`` (:func:`posterior_fit`). One task's best ``omega`` is
noisy and often at the lower edge of the grid (the task declared equal to the prior's
centre); the stream pools the tasks' curves, as the family choice does.

The family itself is chosen for the whole stream by how well each family predicted the
stream's batches before they were learned (:func:`prequential_family`). A known task's batch
is scored by what each family served the task from its earlier rows, against the library and
population as they were without that task and with the stream's ``pi`` of that moment: for
squared loss the Student t density of the batch's residuals under that model, the task's
noise integrated over its posterior (the same for every family), for logistic loss its log
likelihood.
A new task's first batch is scored by each family's prior predictive, its evidence
(:meth:`core.LifelongLearner._prequential_scores`). A family that fits the rows it has learned
more closely gains nothing unless it predicts the next rows better, so no penalty for what it
fits is needed. For squared loss a new task's evidence, with the noise profiled out, is not a
density and grows without bound on a batch of two or three rows fitted almost exactly: it
decides only a stream that has no known task's batch yet. Of the two models a user compares
against, the mixed model (the population) and each task alone (``ridge``), the one the stream
scored higher is used, unless another family is ahead of it by more than the noise of the
difference (:data:`PREQUENTIAL_Z` standard errors of the paired per-batch scores).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from .population import QUADRATURE_ROWS, Population, logistic_modes, small_task_posteriors

#: Prior variance ``omega`` (relative to ``tr(G) / d``, and for squared loss to ``sigma^2``).
GAUSSIAN_OMEGAS = 10.0 ** np.arange(-5.0, 8.01, 0.5)
LOGISTIC_OMEGAS = 10.0 ** np.arange(-3.0, 3.01, 0.5)
#: Standard errors by which a family's summed prequential score must beat the default's to
#: replace it (:func:`prequential_family`). On the multilevel suite any value from 0.6 to 6
#: gives every data set the same family; on streams of one batch per task, where only new
#: tasks' evidence is scored, it decides (``docs/lab/multilevel.md``).
PREQUENTIAL_Z = 2.0
#: Weight ``a`` of the Dirichlet(1 + a) prior on the stream's distribution of ``omega``
#: (:func:`omega_prior`): ``a = 1`` is Laplace's rule of succession, every grid point counted
#: once a priori; ``0`` is plain maximum likelihood.
OMEGA_PRIOR_SMOOTHING = 1.0
#: Plain maximum likelihood (``smoothing=0``) stops when the stream's log marginal likelihood is
#: within this many nats of its maximum (the barrier method's duality gap).
OMEGA_PRIOR_TOL = 1e-2
#: Barrier method of :func:`omega_prior`: first weight of the barrier, its reduction factor,
#: Newton steps per weight at most, and the Newton decrement that counts as centred.
_BARRIER_START = 1e-2
_BARRIER_FACTOR = 100.0
_NEWTON_MAX_STEPS = 100
_NEWTON_TOL = 1e-8
#: A squared-loss task's residual sum of squares is taken as at least this fraction of its
#: total (:func:`gaussian_fits`): ``Q = S - c' diag(shrink) c`` is a difference with rounding
#: errors of ``1e-16`` times its terms, which an exact fit (fewer rows than parameters, or no
#: noise) leaves as all there is; half the digits are kept, so the evidence of an exact fit
#: is the same number however its rows were summed.
EXACT_FIT = 1e-8
#: Eigenvalues of a squared-loss task's centred ``X'X`` (``G``) below this fraction of the
#: largest are rounding's (:func:`_informed_directions`): an exact zero where ``G`` has fewer
#: rows than slopes.
NULL_EIGENVALUE = 1e-12
_TINY = 1e-300


@dataclass(frozen=True)
class Family:
    """A prior family: ``rho`` (weight of the library's span) and whether it is centred on
    the representatives (``mixture``) or on ``0``."""

    name: str
    rho: float = 0.0
    centred_on_representatives: bool = False
    centred_on_population: bool = False
    population_shape: bool = False
    own_scale: bool = False


RIDGE = Family("ridge")
#: Each task alone with a ridge on its own standardised features (prior variance of a slope
#: inversely proportional to its column's spread inside the task): what a user's per-task
#: ``StandardScaler`` + ridge does, for tasks whose features each have their own scale.
OWN_SCALE = Family("own_scale", own_scale=True)
#: The stream's population of slopes (:mod:`core.population`) as the prior: the mixed model.
POPULATION = Family("population", centred_on_population=True)


@dataclass(frozen=True)
class Library:
    """What the prior of one task is built from: the basis ``B`` (slopes x components, or
    ``None``), the environments' models ``centres`` (k x slopes) and their log weights, and
    the population of slopes fitted without the task (``None``: the learner keeps none), and
    whether that population shares its slopes between tasks (then it has no shape to lend the
    representatives: ``population_shape`` families are left out)."""

    basis: np.ndarray | None
    centres: np.ndarray
    log_weights: np.ndarray
    population: Population | None = None
    shared_slopes: bool = False


@dataclass(frozen=True)
class Curve:
    """A task's posterior under one family at every ``omega`` of the grid: log evidence
    ``(n_omega,)`` and posterior means ``(n_omega, d + 1)`` (scaled space, bias last; ``None``
    when only the evidence was asked for)."""

    log_evidence: np.ndarray
    theta: np.ndarray | None


@dataclass(frozen=True)
class Fit:
    """A task's posterior under one family: its log evidence (at the chosen ``omega``) and
    the posterior mean ``theta`` (scaled space, bias last)."""

    log_evidence: float
    theta: np.ndarray


def _prior_factor(d: int, basis: np.ndarray | None, rho: float, slopes: int | None = None) -> np.ndarray:
    """``R`` with ``R R' = I + rho B B' / b`` (``I`` when ``rho = 0`` or there is no basis);
    ``b`` is ``tr(B B')`` over ``slopes`` slopes (default ``d``)."""
    if basis is None or rho == 0.0 or not np.any(basis):
        return np.eye(d)
    BB = basis @ basis.T
    scale = max(float(np.trace(BB)) / (slopes or d), _TINY)
    return np.linalg.cholesky(np.eye(d) + (rho / scale) * BB)


def own_scale_factor(G: np.ndarray, n: int, xbar: np.ndarray, weight: float = 1.0) -> np.ndarray:
    """``R = diag(1 / sqrt(weight * G_jj))`` from a task's centred ``X'X`` ``G``: a prior whose
    variance on each slope is the ridge's on the task's standardised column. A column
    constant inside the task (``G_jj`` at rounding level, ``n xbar_j^2`` the scale of the
    cancellation) takes the mean spread of the others."""
    g = np.diag(G).astype(float)
    varying = g > 1e-10 * n * (1.0 + xbar * xbar)
    fill = float(np.mean(g[varying])) if np.any(varying) else float(max(n, 1))
    return np.diag(1.0 / np.sqrt(weight * np.where(varying, g, fill)))


def gaussian_unit(n: int, gram: np.ndarray, slopes: int | None = None) -> float:
    """The per-slope scale of a squared-loss task's ``omega`` grid: ``tr(G) / d`` of its
    centred ``X'X`` (:func:`gaussian_fits`)."""
    G = centred_gram(n, gram)
    return max(float(np.trace(G)) / (slopes or G.shape[0]), _TINY)


def logistic_unit(X: np.ndarray, slopes: int | None = None) -> float:
    """The per-slope curvature of a logistic task's ``omega`` grid (:func:`logistic_fits`)."""
    Xc = X[:, :-1] - X[:, :-1].mean(axis=0)
    n = X.shape[0]
    curvature = 0.25 * float(np.trace(Xc.T @ Xc)) / (slopes or Xc.shape[1])
    return curvature if curvature > 1e-10 * n else 0.25 * n


def log_sum_exp(a: np.ndarray) -> float:
    """``log sum exp(a)`` of a 1-d array, with its largest entry factored out (scipy's
    ``logsumexp`` checks and converts its input at a cost of about 30 times this one's on the
    grid's 27 entries, and the stream takes it several times per family and update)."""
    top = float(np.max(a))
    if not np.isfinite(top):
        return top
    return top + float(np.log(np.sum(np.exp(a - top))))


def centred_gram(n: int, gram: np.ndarray) -> np.ndarray:
    """A squared-loss task's centred ``X'X`` from its ``X'X`` (bias column last): the slopes'
    information once the intercept is integrated out."""
    xbar = gram[-1, :-1] / n
    return gram[:-1, :-1] - n * np.outer(xbar, xbar)


def _informed_directions(G: np.ndarray, R: np.ndarray, eig: tuple[np.ndarray, np.ndarray] | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
    """The eigenvalues ``lam`` of ``R' G R`` that the data inform and ``R U`` for their
    eigenvectors ``U``: ``(r,)`` and ``(d, r)``, ``r`` the rank of ``G``. Every other direction
    has eigenvalue exactly 0 and the data's projection on it is 0: it adds nothing to a task's
    evidence or posterior. The rank is ``G``'s own (eigenvalues above :data:`NULL_EIGENVALUE`
    times its largest: a task of fewer rows than slopes, a column constant inside the task);
    the directions come from the SVD of ``Lambda^1/2 V' R`` (``G = V Lambda V'``), so a prior
    factor ``R`` of condition ``1e6`` and beyond, as a population's mean uncertain along
    directions no task informs gives, leaves informed directions informed: ``R' G R``'s own
    eigenvalues put rounding's directions and informed ones of a small prior variance below
    one threshold, and a task's evidence then turns on its rows' rounding. ``eig``: ``G``'s
    ``eigh``, when already computed (every family of a task reads the same)."""
    gv, V = np.linalg.eigh(G) if eig is None else eig
    keep = gv > NULL_EIGENVALUE * max(float(gv[-1]), _TINY)
    B = np.sqrt(gv[keep])[:, None] * V[:, keep].T @ R  # (r, d): R' G R = B' B
    _, sv, Qt = np.linalg.svd(B, full_matrices=False)
    return sv * sv, R @ Qt.T


def gaussian_fits(n: int, gram: np.ndarray, moment: np.ndarray, yy: float, centres: np.ndarray,
                  basis: np.ndarray | None, rho: float, factor: np.ndarray | None = None,
                  slopes: int | None = None, posterior_means: bool = True,
                  unit: float | None = None, eig: tuple[np.ndarray, np.ndarray] | None = None
                  ) -> tuple[np.ndarray, np.ndarray | None]:
    """Log evidence and posterior mean of a squared-loss task for every centre and every
    ``omega`` of :data:`GAUSSIAN_OMEGAS`: arrays ``(k, n_omega)`` and ``(k, n_omega, d + 1)``.

    ``gram = X'X``, ``moment = X'y``, ``yy = y'y`` over the task's rows (bias column last).
    ``factor``: a given ``R`` (prior covariance ``omega R R'`` in units of ``sigma^2``,
    ``omega`` not rescaled by the task's design) instead of the family's. ``slopes``: the
    number of slopes the per-slope scales divide by (default ``d``; see :func:`family_curves`).
    ``posterior_means=False``: the evidence alone (the same numbers), ``None`` for the means.
    ``unit``: the per-slope scale the ``omega`` grid is relative to (default the task's own,
    ``tr(G) / d`` of its centred ``X'X``; :func:`family_curves` passes another design's).
    ``eig``: the centred ``X'X``'s ``eigh``, when already computed (the same for every family
    of a task).
    """
    d = gram.shape[0] - 1
    xbar = gram[-1, :-1] / n
    ybar = moment[-1] / n
    G = centred_gram(n, gram)
    q = moment[:-1] - n * xbar * ybar
    S = yy - n * ybar * ybar
    dof = max(n - 1, 1)
    if factor is None:
        omegas = GAUSSIAN_OMEGAS / max(float(np.trace(G)) / (slopes or d) if unit is None else unit, _TINY)
        R = _prior_factor(d, basis, rho, slopes)
    else:
        omegas, R = GAUSSIAN_OMEGAS, factor
    lam, RU = _informed_directions(G, R, eig)
    shrink = 1.0 / (1.0 / omegas[None, :] + lam[:, None])  # (d, n_omega)
    logdet = np.sum(np.log1p(omegas[None, :] * lam[:, None]), axis=0)
    k = centres.shape[0]
    E = np.empty((k, omegas.size))
    TH = np.empty((k, omegas.size, d + 1)) if posterior_means else None
    for i, m in enumerate(centres):
        qs = q - G @ m
        Ss = S - 2.0 * (m @ q) + m @ G @ m
        c = RU.T @ qs
        quad = Ss - (c * c) @ shrink
        quad = np.maximum(quad, EXACT_FIT * max(abs(Ss), _TINY))  # an exact fit: Q is rounding
        E[i] = -0.5 * dof * np.log(quad / dof) - 0.5 * logdet
        if TH is None:
            continue
        slopes = m[:, None] + RU @ (c[:, None] * shrink)  # (d, n_omega)
        TH[i, :, :-1] = slopes.T
        TH[i, :, -1] = ybar - xbar @ slopes
    return E, TH


def logistic_fits(X: np.ndarray, y: np.ndarray, centres: np.ndarray, basis: np.ndarray | None,
                  rho: float, factor: np.ndarray | None = None,
                  intercept: tuple[float, float] | None = None, slopes: int | None = None,
                  unit: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Log evidence and posterior mode of a logistic task for the centre ``0`` (row 0) and
    every centre of ``centres`` (rows 1..), each by the Laplace approximation at its own
    posterior mode, for every ``omega`` of :data:`LOGISTIC_OMEGAS`. (A second-order expansion
    of the log-likelihood at the row-0 mode, cheaper, underestimates the evidence of centres
    far from ``0`` by tens of nats on clustered streams and so loses them to the centre ``0``.)

    ``X`` is the scaled design (bias last), ``y`` the 0/1 labels. The intercept has a flat
    prior and is profiled: determinants use the Schur complement of the bias in the Hessian.
    ``factor``: a given ``R`` (prior covariance ``omega R R'``, ``omega`` not rescaled by the
    task's design) instead of the family's. ``intercept = (mean, variance)``: a proper prior
    on the intercept instead of the flat one. (With the flat prior a task whose rows one
    slope separates, or that holds one class, has a marginal likelihood that grows without
    bound with ``omega``: the intercept runs off where the likelihood tends to 1.) With a proper
    intercept prior, a task of at most :data:`~core.population.QUADRATURE_ROWS` rows gets its
    exact evidence and posterior mean instead (:func:`core.population.small_task_posteriors`).
    ``omega`` is relative to the task's curvature per slope, ``0.25 tr(Xc'Xc) / d``; rows with no
    spread (one row, or equal rows) take the curvature standardised columns have over as many
    rows, ``0.25 n``, where the task's own would set the slopes' prior variance to infinity and
    its evidence hundreds of nats down. ``unit``: that curvature from another design
    (:func:`family_curves`).
    """
    d1 = X.shape[1]
    d = d1 - 1
    if factor is None:
        omegas = LOGISTIC_OMEGAS / (logistic_unit(X, slopes) if unit is None else unit)
        R = _prior_factor(d, basis, rho, slopes)
    else:
        omegas, R = LOGISTIC_OMEGAS, factor
    Kunit = R @ R.T
    Kunit_inv = np.linalg.inv(Kunit)
    logdet_unit = float(np.linalg.slogdet(Kunit)[1])
    C = np.vstack([np.zeros((1, d)), centres])
    k, m = C.shape[0], omegas.size
    # every (omega, centre) pair's mode in one batch: row j * k + i is centre i at omega j
    Cs = np.tile(C, (m, 1))
    bias = None if intercept is None else (float(intercept[0]), 1.0 / max(float(intercept[1]), _TINY))
    if bias is not None and X.shape[0] <= QUADRATURE_ROWS:
        # a task of a few rows: the evidence and the posterior mean exactly, where Laplace's
        # expansion at the mode of a likelihood this flat is far off
        means = np.hstack([Cs, np.full((Cs.shape[0], 1), bias[0])])
        covs = np.zeros((Cs.shape[0], d1, d1))
        covs[:, :-1, :-1] = Kunit[None, :, :] * np.repeat(omegas, k)[:, None, None]
        covs[:, -1, -1] = 1.0 / bias[1]
        E, W, _ = small_task_posteriors(np.broadcast_to(X, (Cs.shape[0],) + X.shape),
                                        np.broadcast_to(y, (Cs.shape[0], y.size)), means, covs)
        return E.reshape(m, k).T.copy(), W.reshape(m, k, d1).transpose(1, 0, 2).copy()
    Kinv = Kunit_inv[None, :, :] / np.repeat(omegas, k)[:, None, None]
    W, H = logistic_modes(X, y, Cs, Kinv, bias=bias)
    Z = W @ X.T
    hb = np.maximum(H[:, -1, -1], _TINY)
    Hs = H[:, :-1, :-1] - np.einsum("ki,kj->kij", H[:, :-1, -1], H[:, -1, :-1]) / hb[:, None, None]
    Rs = W[:, :-1] - Cs
    # Laplace with a flat prior on the intercept: the posterior Hessian's log det is that of the
    # slopes' Schur complement (prior included) plus log hb; -1/2 log det(K) is the prior's normaliser
    E = (-np.sum(np.logaddexp(0.0, Z) - y * Z, axis=1) - 0.5 * np.einsum("ki,kij,kj->k", Rs, Kinv, Rs)
         - 0.5 * (np.linalg.slogdet(Hs)[1] + d * np.log(np.repeat(omegas, k)) + logdet_unit + np.log(hb)))
    if bias is not None:  # the intercept's prior density at the mode (its normaliser included)
        E += -0.5 * bias[1] * (W[:, -1] - bias[0]) ** 2 + 0.5 * np.log(bias[1])
    return E.reshape(m, k).T.copy(), W.reshape(m, k, d1).transpose(1, 0, 2).copy()


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


def mixed_curve(E: np.ndarray, TH: np.ndarray | None, log_weights: np.ndarray | None = None) -> Curve:
    """One family's :class:`Curve` from per-centre arrays ``E`` ``(k, n_omega)`` and ``TH``
    ``(k, n_omega, d + 1)``: row 0 alone (``log_weights=None``), or the mixture of every row
    with prior weights ``exp(log_weights)``, whose evidence at each ``omega`` is
    ``log sum_k w_k exp(E_k)`` and whose posterior mean weighs each centre's mode by its
    posterior probability at that ``omega``. ``TH=None``: the evidence alone."""
    if log_weights is None:
        return Curve(E[0].copy(), None if TH is None else TH[0].copy())
    W = E + log_weights[:, None]
    top = W.max(axis=0)
    top = np.where(np.isfinite(top), top, 0.0)
    post = np.exp(W - top[None, :])
    norm = post.sum(axis=0)
    with np.errstate(divide="ignore"):
        total = top + np.log(norm)  # logsumexp over the centres (scipy's is slower at this size)
    if TH is None:
        return Curve(total, None)
    post /= np.where(norm > 0, norm, 1.0)[None, :]
    return Curve(total, np.einsum("ko,kod->od", post, TH))


def family_curves(kind: str, data, library: Library | None, families: tuple[Family, ...],
                  prior_population: Population | None = None, skip_zero_columns: bool = False,
                  posterior_means: bool = True, design=None) -> dict[str, Curve]:
    """Every family's :class:`Curve` for one task. ``data`` is the task's sufficient statistics
    ``(n, gram, moment, yy)`` (squared loss) or its rows ``(X, y)`` (logistic loss). A family
    the library cannot define (no basis for ``rho > 0``, no representatives for a mixture)
    is left out. ``prior_population``: the full population (slopes and intercept) whose
    intercept is the logistic intercept's prior (flat when ``None``): its marginal for the
    families whose prior is on the slopes alone, and for ``own_scale`` its prior predictive
    of the logit at the task's mean row, the intercept of the task's centred columns (so that
    per-task offsets of the columns change nothing). ``skip_zero_columns``: the per-slope
    scales of the prior (``tr(G) / d``, ``tr(B B') / d``) count only the slopes whose column is
    not zero in every row of the task, so a column of zeros appended to a task (a learner's
    new feature, :meth:`core.LifelongLearner.add_features`) changes neither its evidence nor
    its posterior (off by default: the learners' results without new columns stay as they
    were). ``posterior_means=False``: each curve's evidence alone (the same numbers; its
    ``theta`` ``None`` for squared loss, whose means take about a fifth of the curves' time).

    ``design``: the task's data (as ``data``) whose design sets every per-task scale of the
    priors — the ``omega`` grid's unit, ``own_scale``'s per-slope variances, the mean row
    ``own_scale`` centres at, the columns that count — instead of ``data``'s own: the curves
    of a task's earlier rows under the priors of all its rows, for the predictive density of
    its latest batch (:meth:`core.LifelongLearner._prequential_scores`). The scales read
    ``X`` alone, never ``y``, so a prior set by the whole task's design is a prior for each of
    its batches."""
    design = data if design is None else design
    intercept = None
    if prior_population is not None and kind != "regression":
        intercept = (float(prior_population.mean[-1]), float(prior_population.cov[-1, -1]))
    d = data[1].shape[0] - 1 if kind == "regression" else data[0].shape[1] - 1
    slopes = None
    if skip_zero_columns:
        nonzero = (np.diag(design[1])[:-1] != 0.0 if kind == "regression"
                   else np.any(design[0][:, :-1] != 0.0, axis=0))
        slopes = max(int(np.count_nonzero(nonzero)), 1)
    unit = gaussian_unit(design[0], design[1], slopes) if kind == "regression" else logistic_unit(design[0], slopes)
    has_basis = library is not None and library.basis is not None and bool(np.any(library.basis))
    has_centres = library is not None and len(library.centres) > 0
    curves: dict[str, Curve] = {}
    pop = library.population if library is not None else None
    eig = np.linalg.eigh(centred_gram(data[0], data[1])) if kind == "regression" else None

    @functools.cache
    def gaussian_population_fits():
        """The squared-loss fits under the population's covariance, for both families that use
        it, in one call (one factor, one eigendecomposition; each centre's numbers are its own):
        row 0 centred on the population's mean, rows 1.. on the environments' centres."""
        n, gram, moment, yy = data
        centres = pop.mean[None, :]
        if has_centres and not library.shared_slopes:
            centres = np.vstack([centres, library.centres])
        return gaussian_fits(n, gram, moment, yy, centres, None, 0.0, np.linalg.cholesky(pop.cov / pop.noise),
                             posterior_means=posterior_means, eig=eig)
    for fam in families:
        if fam.own_scale:
            if kind == "regression":
                n, gram, moment, yy = data
                n_d, gram_d = design[0], design[1]
                xbar = gram_d[-1, :-1] / n_d
                factor = own_scale_factor(centred_gram(n_d, gram_d), n_d, xbar)
                E, TH = gaussian_fits(n, gram, moment, yy, np.zeros((1, d)), None, 0.0, factor,
                                      posterior_means=posterior_means, eig=eig)
                curves[fam.name] = mixed_curve(E, TH)
            else:
                Xd = design[0][:, :-1]
                xbar = Xd.mean(axis=0)
                factor = own_scale_factor((Xd - xbar).T @ (Xd - xbar), Xd.shape[0], xbar, 0.25)
                X = data[0][:, :-1]
                centred = None
                if prior_population is not None:  # the population's logit at the mean row
                    row = np.append(xbar, 1.0)
                    centred = (float(row @ prior_population.mean), float(row @ prior_population.cov @ row))
                E, TH = logistic_fits(np.hstack([X - xbar, np.ones((X.shape[0], 1))]), data[1], np.empty((0, d)),
                                      None, 0.0, factor, centred)
                TH = TH.copy()
                TH[..., -1] -= TH[..., :-1] @ xbar  # back to the intercept at x = 0
                curves[fam.name] = mixed_curve(E[:1], TH[:1])
        if fam.population_shape and pop is not None and has_centres and not library.shared_slopes:
            if kind == "regression":
                E, TH = gaussian_population_fits()
                E, TH = E[1:], None if TH is None else TH[1:]
            else:
                E, TH = logistic_fits(data[0], data[1], library.centres, None, 0.0, np.linalg.cholesky(pop.cov),
                                      intercept)
                E, TH = E[1:], TH[1:]
            curves[fam.name] = mixed_curve(E, TH, library.log_weights)
        if fam.centred_on_population and pop is not None:
            if kind == "regression":
                E, TH = gaussian_population_fits()
                E, TH = E[:1], None if TH is None else TH[:1]
            else:
                E, TH = logistic_fits(data[0], data[1], pop.mean[None, :], None, 0.0, np.linalg.cholesky(pop.cov),
                                      intercept)
                E, TH = E[1:], TH[1:]
            curves[fam.name] = mixed_curve(E, TH)
    classic = [f for f in families if not (f.centred_on_population or f.population_shape or f.own_scale)]
    for rho in sorted({f.rho for f in classic}):
        fams = [f for f in classic if f.rho == rho and (rho == 0.0 or has_basis)
                and (not f.centred_on_representatives or has_centres)]
        if not fams:
            continue
        centres = library.centres if any(f.centred_on_representatives for f in fams) else np.empty((0, d))
        basis = library.basis if has_basis else None
        if kind == "regression":
            n, gram, moment, yy = data
            E, TH = gaussian_fits(n, gram, moment, yy, np.vstack([np.zeros((1, d)), centres]), basis, rho,
                                  slopes=slopes, posterior_means=posterior_means, unit=unit, eig=eig)
        else:
            E, TH = logistic_fits(data[0], data[1], centres, basis, rho, None, intercept, slopes, unit)
        for fam in fams:
            rows = slice(1, None) if fam.centred_on_representatives else slice(0, 1)
            curves[fam.name] = mixed_curve(E[rows], None if TH is None else TH[rows],
                                           library.log_weights if fam.centred_on_representatives else None)
    return curves


def family_fits(kind: str, data, library: Library | None, families: tuple[Family, ...]) -> dict[str, Fit]:
    """Every family's fit for one task at the ``omega`` of largest evidence *for that task*
    (type-II maximum likelihood task by task; the learners use :func:`posterior_fit` with the
    stream's :func:`omega_prior` instead). Arguments as :func:`family_curves`."""
    fits = {}
    for name, c in family_curves(kind, data, library, families).items():
        j = int(np.argmax(c.log_evidence))
        fits[name] = Fit(float(c.log_evidence[j]), c.theta[j])
    return fits


def omega_prior(log_evidence: np.ndarray, smoothing: float = OMEGA_PRIOR_SMOOTHING,
                tol: float = OMEGA_PRIOR_TOL, start: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """The stream's prior over the ``omega`` grid, estimated from every task's evidence curve.

    ``log_evidence`` is ``(tasks, n_omega)``: task ``t``'s log evidence at each ``omega``.
    Each task's ``omega`` is taken as a draw from a distribution ``pi`` on the grid (a
    hierarchical model); the stream's marginal likelihood is
    ``L(pi) = sum_t log sum_j pi_j exp(E_tj)``, and ``pi`` is its maximum a posteriori
    estimate under a Dirichlet(1 + ``smoothing``) prior: the maximiser over the simplex of
    ``L(pi) + smoothing * sum_j log pi_j`` (Laplace's rule of succession for ``smoothing = 1``:
    every grid point counted once before any task is seen, so ``pi`` keeps every ``omega``
    possible and a stream of a few tasks is not held to the ones they happened to pick).
    ``smoothing = 0`` gives the nonparametric maximum-likelihood mixing distribution (Kiefer &
    Wolfowitz 1956), to within ``tol`` nats. The objective is concave; it is maximised by
    Newton steps on the plane ``sum_j pi_j = 1`` from the uniform ``pi`` — with ``smoothing >
    0`` the prior is itself a log-barrier, for ``0`` a barrier method (Boyd & Vandenberghe
    2004, sec. 11.3) lowers ``tau`` until the duality gap ``n_omega * tau`` is at most ``tol``.
    Returns ``(log pi, L(pi))``.

    Many tasks with alike signal-to-noise share their ``omega``, where one task's best
    ``omega`` is noisy and often at an edge of the grid (``omega -> 0``: the task equals the
    prior's centre).

    ``start`` (a ``log pi``, e.g. the stream's previous estimate) is where the Newton steps
    begin instead of the uniform ``pi`` when ``smoothing > 0``: the objective is strictly
    concave, so the maximum is the same, and a stream that gained one task is a few steps from
    it (ignored when it is not a distribution on the grid).
    """
    E = np.asarray(log_evidence, dtype=float)
    if E.ndim != 2 or E.shape[0] == 0:
        raise ValueError("omega_prior needs a (tasks, n_omega) array with at least one task")
    log_pi, totals = omega_priors(E[None], smoothing, tol, None if start is None else [start])
    return log_pi[0], float(totals[0])


def omega_priors(log_evidence: np.ndarray, smoothing: float = OMEGA_PRIOR_SMOOTHING,
                 tol: float = OMEGA_PRIOR_TOL, starts: list | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`omega_prior` of several streams of curves over the same tasks at once (each
    family's, :func:`choose_family`): ``log_evidence`` is ``(streams, tasks, n_omega)``,
    ``starts`` one start (or ``None``) per stream. Each stream's Newton steps and line search
    are its own, taken side by side in stacked arrays (one call per step for all streams
    instead of one per stream: the arrays are small and the calls' overhead is their cost).
    Returns ``(log pi, L(pi))``, ``(streams, n_omega)`` and ``(streams,)``."""
    E = np.asarray(log_evidence, dtype=float)
    if E.ndim != 3 or E.shape[1] == 0:
        raise ValueError("omega_priors needs a (streams, tasks, n_omega) array with at least one task")
    top = E.max(axis=2, keepdims=True)
    lik = np.exp(E - top)  # (F, T, J), every row's largest entry is 1
    F, _, J = lik.shape
    pi = np.full((F, J), 1.0 / J)
    for f, start in enumerate(starts if smoothing > 0 and starts else ()):
        begin = None if start is None else np.exp(np.asarray(start, dtype=float))
        if begin is not None and begin.shape == (J,) and np.all(np.isfinite(begin)) and np.all(begin > 0):
            pi[f] = begin / begin.sum()
    if smoothing > 0:  # the prior's own log-barrier: one Newton centring at tau = smoothing
        tau = final = float(smoothing)
    else:  # plain maximum likelihood: a barrier path down to a duality gap of tol
        tau, final = max(_BARRIER_START, tol / J), tol / J
    diagonal = np.arange(J)

    def barrier(L, p):  # (k, T, J), (k, J) -> (k,); infinite where p leaves the simplex's inside
        inside = np.all(p > 0, axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            value = -np.log(L @ p[:, :, None])[:, :, 0].sum(axis=1) - tau * np.log(p).sum(axis=1)
        return np.where(inside, value, np.inf)

    while True:
        value = barrier(lik, pi)
        active = np.ones(F, dtype=bool)
        for _ in range(_NEWTON_MAX_STEPS):
            rows = np.flatnonzero(active)
            if rows.size == 0:
                break
            L, p = lik[rows], pi[rows]
            A = L / (L @ p[:, :, None])
            grad = -A.sum(axis=1) - tau / p
            H = A.transpose(0, 2, 1) @ A
            H[:, diagonal, diagonal] += tau / (p * p)
            # the Newton step on the plane sum(pi) = 1: d = -H^-1 (grad + nu 1) with 1'd = 0
            sol = np.linalg.solve(H, np.stack([grad, np.ones_like(grad)], axis=2))
            d = -(sol[:, :, 0] - (sol[:, :, 0].sum(axis=1) / sol[:, :, 1].sum(axis=1))[:, None] * sol[:, :, 1])
            decrement = -np.einsum("kj,kj->k", grad, d)
            done = decrement <= _NEWTON_TOL
            # in Newton's quadratic phase: one more full step brings pi to the maximiser to
            # rounding, so that pi does not depend on where the steps began
            last = done & np.all(p + d > 0, axis=1)
            pi[rows[last]] = p[last] + d[last]
            active[rows[done]] = False
            go = ~done
            if not np.any(go):
                continue
            rows, L, p, d, decrement = rows[go], L[go], p[go], d[go], decrement[go]
            with np.errstate(divide="ignore"):
                room = np.where(d < 0, -p / np.where(d < 0, d, -1.0), np.inf).min(axis=1)
            step = np.minimum(1.0, 0.99 * room)
            pending = np.ones(rows.size, dtype=bool)
            trial_value = np.full(rows.size, np.inf)
            while np.any(pending):  # backtracking (Armijo) inside the simplex, each stream its own
                trial_value[pending] = barrier(L[pending], p[pending] + step[pending, None] * d[pending])
                accepted = (trial_value <= value[rows] - 0.25 * step * decrement) | (step < 1e-12)
                pending &= ~accepted
                step[pending] *= 0.5
            moved = np.isfinite(trial_value)
            active[rows[~moved]] = False
            pi[rows[moved]] = p[moved] + step[moved, None] * d[moved]
            value[rows[moved]] = trial_value[moved]
        if tau <= final:
            break
        tau = max(tau / _BARRIER_FACTOR, final)
    pi = pi / pi.sum(axis=1, keepdims=True)
    totals = np.log(lik @ pi[:, :, None])[:, :, 0].sum(axis=1) + top[:, :, 0].sum(axis=1)
    return np.log(pi), totals


def posterior_fit(curve: Curve, log_prior: np.ndarray | None = None) -> Fit:
    """A task's posterior under a family with ``omega`` drawn from ``exp(log_prior)`` (uniform
    when ``None``): its log evidence ``log sum_j pi_j exp(E_j)`` and posterior mean
    ``sum_j P(omega_j | data) theta_j`` (``omega`` integrated out, not maximised)."""
    E = curve.log_evidence
    W = E + (np.full(E.size, -np.log(E.size)) if log_prior is None else log_prior)
    total = log_sum_exp(W)
    post = np.exp(W - total)
    return Fit(total, np.tensordot(post, curve.theta, axes=1))


def _evidence_curve(value, n_omega: int) -> np.ndarray | None:
    """A stored evidence value as a curve over the grid: a list is one; a number (a state
    written before curves were kept: the task's largest evidence) is a flat curve, whose term
    in the stream's marginal likelihood is that number whatever ``pi`` is: it leaves ``pi``
    unchanged and adds exactly that number to the stream's total."""
    if value is None:
        return None
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        return np.full(n_omega, float(arr))
    return arr if arr.size == n_omega else None


def family_priors(evidence: list[dict[str, list[float] | float | None]], families: tuple[Family, ...],
                  n_omega: int, start: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Each family's prior over ``omega`` for a stream: its :func:`omega_prior` over every
    task's evidence curve. ``evidence`` holds each task's curve per family (``None`` or missing:
    the family was not defined for that task, which counts as ``ridge``'s curve). Returns
    ``{family: log pi}`` (empty for an empty stream: ``pi`` uniform); ``start`` (such a dict, the
    stream's previous priors) warm-starts each family's :func:`omega_prior`."""
    names = [f.name for f in families]

    def curve(value):  # a stored list of the grid's size as it is (one array of all, below), else converted
        return value if isinstance(value, list) and len(value) == n_omega else _evidence_curve(value, n_omega)
    rows = []
    for ev in evidence:
        base = curve(ev.get(RIDGE.name))
        if base is None:
            continue
        rows.append([base if value is None else value for value in (curve(ev.get(name)) for name in names)])
    if not rows:
        return {}
    # one conversion of every stored list (a task's curve per family), in the (families, tasks, grid) order
    log_pi, _ = omega_priors(np.ascontiguousarray(np.array(rows, dtype=float).transpose(1, 0, 2)),
                             starts=[(start or {}).get(name) for name in names])
    return dict(zip(names, log_pi))


def prequential_margins(scores: dict[str, float], products: dict[str, dict[str, float]], batches: int,
                        families: tuple[Family, ...], reference: str) -> dict[str, tuple[float, float]]:
    """Each family's summed prequential log score less ``reference``'s, and the standard error
    of that sum: ``sqrt(n var(d_b))`` over the ``batches`` per-batch differences ``d_b``, from the
    sums (``scores``) and sums of products (``products``) of the families' per-batch scores (a
    family missing from them scores as ``ridge``). The forecast comparison of Diebold & Mariano
    (1995) on the log score, with the batches taken as independent."""
    def name(f):
        return f if f in scores else RIDGE.name
    out = {}
    r = name(reference)
    for fam in families:
        f = name(fam.name)
        total = scores[f] - scores[r]
        second = products[f][f] - 2.0 * products[f][r] + products[r][r]
        var = max(second / max(batches, 1) - (total / max(batches, 1)) ** 2, 0.0)
        out[fam.name] = (float(total), float(np.sqrt(batches * var)))
    return out


def prequential_default(scores: dict[str, float] | None, families: tuple[Family, ...],
                        references: tuple[str, ...] = (RIDGE.name,),
                        products: dict[str, dict[str, float]] | None = None, batches: int = 0) -> str:
    """The default of :func:`prequential_family`: of the ``references`` the learner has, the
    one with the larger sum (ties to the first; a family missing from ``scores`` scores as
    ``ridge``), the first with no scores or fewer than two batches."""
    names = [f.name for f in families]
    refs = [r for r in references if r in names] or [names[0]]
    if not scores or not products or batches < 2:
        return refs[0]
    return max(refs, key=lambda f: (scores.get(f, scores.get(RIDGE.name, -np.inf)), -refs.index(f)))


def prequential_family(scores: dict[str, float] | None, families: tuple[Family, ...],
                       references: tuple[str, ...] = (RIDGE.name,),
                       products: dict[str, dict[str, float]] | None = None, batches: int = 0,
                       z: float = PREQUENTIAL_Z) -> str:
    """The family the stream's batches say predicts best, each batch predicted before it was
    learned (``scores``: family -> sum of :meth:`core.LifelongLearner._prequential_scores`;
    ``products``: the sums of their products, over ``batches`` batches).

    The sum is the stream's prequential log likelihood under the family (Dawid 1984): a
    batch's rows count only through how well the family predicted them from what came before,
    so a family that fits the rows it has learned more closely gains nothing unless it predicts
    new rows better, and no penalty for what a family fits is needed. ``references`` are the
    models a user compares against (the mixed model, the stream's population once fitted, and
    each task alone, ``ridge``): of those the one with the larger sum is the default (ties to
    the first). Any other family replaces it only when its sum is ahead by more than ``z``
    standard errors of the paired difference (:func:`prequential_margins`), and then the one
    furthest ahead: families whose sums differ by less than their noise predict alike as far
    as the stream can tell. The default with no scores, or one batch, is the first
    reference."""
    names = [f.name for f in families]
    refs = [r for r in references if r in names] or [names[0]]
    default = prequential_default(scores, families, references, products, batches)
    if not scores or not products or batches < 2:
        return default
    margins = prequential_margins(scores, products, batches, families, default)
    winners = [f for f in names if f not in refs and margins[f][0] > max(z * margins[f][1], 0.0)]
    return max(winners, key=lambda f: margins[f][0]) if winners else default
