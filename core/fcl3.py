"""FCL3 — Flexible Clustered Lifelong Learning (Sun, Cong, Wang, Zhong, Fu), online.

Per task ``t`` (the paper's Algorithm 2), with ``w_t, Omega_t`` from the shared single-task
fit (:mod:`core.losses`):

1. ``Omega_k^t``: half-Hessian of task ``t``'s objective at each representative's model
   ``D s_k`` (equal to ``Omega_t`` for squared loss).
2. Alternate (Algorithm 1) until ``s`` and ``Z`` stop moving:

   * ``s`` step (FISTA)::

         min_s ||w_t - D s||^2_{Omega_t} + c_enc ||s - phi(L w_t)||^2 + l1 ||s||_1
               + lambda2 * sum_k z_k ||D s_k - D s||^2_{Omega_k^t}

   * ``Z`` step over the simplex of ``K + 1`` entries, the last being the outlier slot ``e``:
     its minimiser in closed form (:func:`core.solvers.simplex_assignment`), the point the
     paper's ADMM (Algorithm 3) converges to.

3. Update the statistics ``A, b`` (decoder) and ``M, C`` (encoder) and re-solve ``D`` and
   ``L`` (the minimisers of their ridge-regularised objectives, optionally with the paper's
   unit-ball constraints on the columns of ``D`` and rows of ``L``). Code components no
   task has used decouple and their columns of ``D`` are exactly zero, so only the ``n``
   active ones are solved for; a large system (``d n >= PCG_MIN_SIZE``) is solved by
   conjugate gradients warm-started at the previous ``D``, with a Kronecker preconditioner
   and float32 inner solves refined in float64, to a relative residual of 1e-10
   (:func:`core.solvers.kronecker_sum_pcg`), instead of an ``O((dn)^3)`` factorisation.
4. If the outlier slot holds the largest entry of ``Z``, ``s_t`` joins the model knowledge
   library ``S``. Every task predicts with ``theta_t = D s_t``, so old tasks move with ``D``.

Decisions on the points the paper leaves open (each covered by a test):

* **phi**: ``"identity"`` (default) or ``"tanh"``; ``phi^{-1} = arctanh`` is applied to codes
  clipped to ``(-1 + 1e-6, 1 - 1e-6)`` so it is defined on every code the l1 prox returns
  (zeros and negatives included).
* **Scale-free weights**: the encoder weight and ``lambda1`` are multiplied by the task's
  Hessian scale ``mean(diag(Omega_t))``, so the encoder term cannot swamp the loss term when
  the Hessian is small (logistic loss with rare positives). ``lambda2`` already multiplies
  terms measured in ``Omega``.
* **Z costs and d0**: both are made dimensionless by the task's own *null distance*
  ``ref = ||w_t||^2_{Omega_t}`` (how much worse than ``w_t`` the zero model is):
  ``c_k = ||D s_k - D s_t||^2_{Omega_k^t} / ref`` and
  ``d0 = -gamma log( min_k dist_k / (ref + sum_k dist_k) )``. Putting ``ref`` in the
  denominator fixes the paper's ``d0 = 0`` at ``K = 1`` (which would open a cluster for every
  second task) and the ``sum dist = 0`` case; ``min dist`` is floored at 1e-300 (a task equal
  to a representative gets a huge ``d0``, never a NaN).
* **Z problem**: on the simplex ``||Z||_1 = 1`` so the paper's objective is linear in ``Z``;
  we add ``(rho / 2) ||Z||^2`` (``assignment_ridge``), making ``Z`` a well-defined soft
  assignment ``Proj_simplex(-lambda2 costs / rho)``; see :func:`core.solvers.simplex_assignment`.
* **Taylor first-order term**: like the paper, the term ``<grad L(D s_k), D(s_t - s_k)>`` is
  dropped: the expansion is taken as if each representative were a stationary point of the
  new task's loss, which keeps the ``s`` step a quadratic.
* **Initialisation**: ``D`` starts as seeded Gaussian columns of unit norm; as in ELLA
  v1.0 tasks put their normalised ``w_t`` into the next unseeded column before they are
  encoded — but only tasks that look *novel* (the outlier slot would win the ``Z`` step
  measured from ``w_t``), so the ``n_components`` columns are spent on distinct environments
  rather than on the first few tasks, which may all come from one (``seed_columns="first"``
  is ELLA's rule). The encoder term is off until ``L`` has been fitted to at
  least one task (for the first task ``L`` holds no knowledge). The first task is the first
  representative.
* **Start of the alternation**: ``Z`` starts from the representatives' distances to the
  single-task model ``w_t`` (``z_init="single_task"``), not from the paper's uniform ``Z``;
  see the ``z_init`` parameter for why. ``z_init="uniform"`` restores the paper's start.
* **Ridges**: every solve adds ``ridge`` (decoder) or ``encoder_ridge`` (encoder) times the
  identity, since ``A`` and ``C`` are singular while few tasks are seen.
* **Defaults** (what the service runs untuned): ``mu=0.1`` relative to the loss curvature
  (one value for both losses), ``lambda2=1`` (the middle of the weights the data sets prefer),
  ``gamma=0.5`` (a few representatives per data set), ``n_components=5`` (small and cheap),
  ``encoder_weight=0.1`` (see the parameter); how the defaults were chosen: docs/design.md.
* **More data for a known task**: its earlier contribution to ``A, b, M, C`` is removed (its
  codes, assignment, the representative codes and Hessians it used are stored with it), the
  task is re-learned on all its data, and ``T`` is not incremented. It is not compared with
  itself; a representative stays one with its code in ``S`` replaced.
* **Predictions** (``task_models``): by default each task is predicted with its
  empirical-Bayes model around the library learned without it (:mod:`core.evidence`), which
  never does worse than learning the task alone; ``task_models="paper"`` predicts with
  ``theta_t = D s_t``. The library itself is learned as above either way.
"""
from __future__ import annotations

import numpy as np

from .base import LifelongLearner, TaskRecord, UpdateResult, pad_square
from .evidence import OWN_SCALE, POPULATION, RIDGE, Family, Library
from .losses import half_hessian
from .params import (BASE_CONSTRAINTS, MAX_COMPONENTS, MAX_OUTER_ITER, MAX_WEIGHT, Boolean, NoneValue, Options,
                     check_system_size, integer, real, validate_params)
from .population import Population
from .solvers import (fista_quadratic_l1, kronecker_sum_pcg, plus_kron_terms, simplex_assignment,
                      solve_ridge_ball, solve_rows_in_ball)

_TINY = 1e-300
#: From this size of the decoder system (d times the number of active components) on, D is
#: solved by the mixed-precision PCG instead of a Cholesky factorisation: the measured
#: crossover of the two on FCL3's own systems (see docs/benchmarks.md).
PCG_MIN_SIZE = 450
_ATANH_CLIP = 1.0 - 1e-6


def phi_forward(name: str, v: np.ndarray) -> np.ndarray:
    return v if name == "identity" else np.tanh(v)


def phi_inverse(name: str, s: np.ndarray) -> np.ndarray:
    if name == "identity":
        return s
    return np.arctanh(np.clip(s, -_ATANH_CLIP, _ATANH_CLIP))


class FCL3(LifelongLearner):
    """Flexible Clustered Lifelong Learning, one task batch at a time.

    Parameters
    ----------
    kind : ``"regression"`` (squared loss) or ``"classification"`` (logistic loss, labels
        ``{0, 1}`` or ``{-1, 1}``).
    n_components : size ``p`` of the code / number of columns of ``D``.
    mu : single-task ridge relative to the loss curvature (shared with every comparator,
        see :func:`core.losses.curvature_scale`).
    lambda1 : l1 weight on codes, relative to the task's Hessian scale.
    lambda2 : weight of the representative (cluster) term.
    alpha : l1 weight on ``Z`` (the paper's; constant on the simplex, kept for fidelity).
    gamma : scale of the outlier distance ``d0``; larger opens fewer representatives.
    encoder_weight : weight of ``||s - phi(L w)||^2`` relative to the Hessian scale
        (0 removes the autoencoder). The paper's weight is 1; the default is 0.1 because at 1
        the encoder, fitted to past tasks, pulls the code of a task from a *new* environment
        toward old codes, the pulled model then looks close to an old representative and
        the outlier slot never wins (the test with three orthogonal tasks shows it).
    assignment_ridge : ``rho`` of the ``Z`` step; smaller gives harder assignments.
    phi : ``"identity"`` or ``"tanh"``.
    ridge, encoder_ridge : ridges of the ``D`` and ``L`` solves.
    max_norm : bound on the norms of the columns of ``D`` and rows of ``L`` (``None``: none).
    joint : alternate ``s`` and ``Z`` (FCL3); ``False`` assigns first from ``w_t`` and then
        learns ``s`` once (the two-phase CL3).
    max_outer_iter, tol : stopping rule of the ``s``/``Z`` alternation.
    seed_columns : ``"novel"`` (default) or ``"first"``: which new tasks put their ``w_t`` into
        an unseeded column of ``D`` (see the module notes on initialisation).
    z_init : where the alternation starts: ``"single_task"`` (default) takes the first ``Z``
        from the distances of the representatives to ``w_t``; ``"uniform"`` is the paper's
        ``Z = 1/(K+1)``, which with a large ``lambda2`` pulls ``s`` halfway to every
        representative before any assignment is made and can collapse every task into one
        cluster (the pull shrinks the very distances the ``Z`` step then compares).
    standardize : scale features (and regression targets) with first-batch statistics.
    random_state : seed of the initial ``D`` (and of the row reservoir, see ``max_task_rows``).
    max_task_rows : ``None`` (default) keeps every row of a classification task, as the
        paper's algorithm needs for exact refits; an integer keeps a uniform random sample of
        that many (bounded memory for endless streams, approximate fits). Regression tasks
        are kept as exact sufficient statistics either way.
    task_models : ``"empirical_bayes"`` (default): every task is predicted with its posterior
        mean under a prior made of the library without the task — ``ridge`` (no transfer),
        ``mixture`` (a mixture of Gaussians around the representatives' models, weighted by
        the sizes of their environments) or ``mixture_span`` (the same, with extra prior
        variance along the span of ``D``); the family and the distribution of the prior's
        strength are estimated from the whole stream by the evidence, and each task's
        posterior mean integrates the strength out (:mod:`core.evidence`). ``"paper"``:
        ``theta_t = D s_t``, the paper's model.

    Every parameter has a range (``_parameter_constraints``, :mod:`core.params`), checked by
    :meth:`check_params` and before any update: ``max_outer_iter`` at most 200 and ``tol > 0``
    bound the alternation, ``n_components`` at most 50 and, on the first batch, ``d`` times
    ``n_components`` at most :data:`core.params.MAX_SYSTEM_SIZE` bound the decoder.
    """

    _state_attrs = ("D_", "L_", "A_", "b_", "M_", "C_", "S_", "population_", "population_mean_cov_",
                    "env_counts_", "env_weights_", "env_weighted_")
    _meta_attrs = ("representatives_", "n_learned_", "n_seeded_columns_", "population_tasks_", "population_updates_")
    _families = (RIDGE, OWN_SCALE, POPULATION, Family("mixture", rho=0.0, centred_on_representatives=True),
                 Family("mixture_span", rho=10.0, centred_on_representatives=True),
                 Family("mixture_population", centred_on_representatives=True, population_shape=True))

    def __init__(
        self, kind: str = "regression", n_components: int = 5, mu: float = 0.1,
        lambda1: float = 1e-3, lambda2: float = 1.0, alpha: float = 1e-3, gamma: float = 0.5,
        encoder_weight: float = 0.1, assignment_ridge: float = 0.1, phi: str = "identity",
        ridge: float = 1e-3, encoder_ridge: float = 1e-3, max_norm: float | None = None,
        joint: bool = True, max_outer_iter: int = 20, tol: float = 1e-6,
        task_intercept: bool = True, z_init: str = "single_task", seed_columns: str = "novel",
        standardize: bool = True,
        random_state: int = 0, max_task_rows: int | None = None, task_models: str = "empirical_bayes",
        grow_features: bool = False,
    ):
        super().__init__(kind=kind, mu=mu, standardize=standardize, random_state=random_state,
                         max_task_rows=max_task_rows, task_models=task_models, grow_features=grow_features)
        self.n_components = n_components
        self.lambda1 = lambda1
        self.lambda2 = lambda2
        self.alpha = alpha
        self.gamma = gamma
        self.encoder_weight = encoder_weight
        self.assignment_ridge = assignment_ridge
        self.phi = phi
        self.ridge = ridge
        self.encoder_ridge = encoder_ridge
        self.max_norm = max_norm
        self.joint = joint
        self.max_outer_iter = max_outer_iter
        self.tol = tol
        self.task_intercept = task_intercept
        self.z_init = z_init
        self.seed_columns = seed_columns

    #: The range of every hyper-parameter (:mod:`core.params`): they bound the work of one
    #: update (``max_outer_iter``, ``tol``, ``n_components``; the decoder's size is checked on
    #: the first batch, :data:`core.params.MAX_SYSTEM_SIZE`).
    _parameter_constraints = {
        **BASE_CONSTRAINTS,
        "n_components": [integer(1, MAX_COMPONENTS)],
        **{name: [real(0.0, MAX_WEIGHT)] for name in ("lambda1", "lambda2", "alpha", "gamma", "encoder_weight")},
        **{name: [real(0.0, MAX_WEIGHT, closed="right")] for name in ("assignment_ridge", "ridge", "encoder_ridge")},
        "phi": [Options(("identity", "tanh"))],
        "max_norm": [NoneValue(), real(0.0, MAX_WEIGHT, closed="right")],
        "joint": [Boolean()],
        "max_outer_iter": [integer(0, MAX_OUTER_ITER)],
        "tol": [real(0.0, 1.0, closed="right")],
        "task_intercept": [Boolean()],
        "z_init": [Options(("single_task", "uniform"))],
        "seed_columns": [Options(("novel", "first"))],
    }

    # ------------------------------------------------------------------ checks
    def _check_params(self) -> None:
        validate_params(self)

    def check_size(self, n_features: int) -> None:
        """:class:`InputError` when the decoder for ``n_features`` features would have more than
        :data:`core.params.MAX_SYSTEM_SIZE` unknowns (a service may call it when a model's
        number of features is known at creation)."""
        d = int(n_features) + (0 if self.task_intercept else 1)
        check_system_size(self, d, self.n_components, "the decoder D")

    # ------------------------------------------------------------------ state
    def _init_learned(self, n_features: int) -> None:
        super()._init_learned(n_features)
        d, p = n_features + (0 if self.task_intercept else 1), self.n_components
        rng = np.random.default_rng(self.random_state)
        D = rng.standard_normal((d, p))
        self.D_ = D / np.linalg.norm(D, axis=0) * (self.max_norm or 1.0)
        self.L_ = np.zeros((p, d))
        self.A_ = np.zeros((d * p, d * p))
        self.b_ = np.zeros(d * p)
        self.M_ = np.zeros((p, d))
        self.C_ = np.zeros((d, d))
        self.S_ = np.zeros((0, p))
        # per representative (in order): the environment's other members and the sums of
        # their pooling terms with its own (:meth:`_environment_stats`), kept up to date by
        # each update so that no update reads every task
        self.env_counts_ = np.zeros(0)
        self.env_weights_ = np.zeros((0, d, d))
        self.env_weighted_ = np.zeros((0, d))
        self.population_ = Population.initial(n_features + 1).to_array()
        self.population_mean_cov_ = np.zeros((n_features + 1, n_features + 1))
        self.population_tasks_ = 0
        self.population_updates_ = 0
        self.representatives_: list[str] = []
        self.n_learned_ = 0
        self.n_seeded_columns_ = 0

    def _check_global_shapes(self) -> None:
        """As the base class, and one row of ``S`` per representative and as many rows of
        ``env_weights`` and ``env_weighted`` as of ``env_counts`` (sums whose length differs
        from the representatives' are summed again when first needed, as for a state that
        predates them)."""
        super()._check_global_shapes()
        rows = {"S": (self.S_.shape[0], len(self.representatives_), "representatives"),
                "env_weights": (self.env_weights_.shape[0], self.env_counts_.shape[0], "env_counts"),
                "env_weighted": (self.env_weighted_.shape[0], self.env_counts_.shape[0], "env_counts")}
        for name, (got, want, of) in rows.items():
            if got != want:
                raise ValueError(f"state is inconsistent: array {name!r} has {got} rows for {want} {of}")

    def _state_defaults(self) -> dict:
        """A state from before the population (format 3) starts from the initial one; the next
        update fits it to every task. A state from before ``population_updates_`` counts from 0;
        one from before the environments' sums has them summed over every task when first
        needed (:meth:`_environment_stats`)."""
        d = self.D_.shape[0] if hasattr(self, "D_") else 0
        return {"population_": Population.initial(self._n_params).to_array(),
                "population_mean_cov_": np.zeros((self._n_params,) * 2), "population_tasks_": 0,
                "population_updates_": 0, "env_counts_": np.zeros(0), "env_weights_": np.zeros((0, d, d)),
                "env_weighted_": np.zeros((0, d))}

    # ------------------------------------------------------------------ pieces
    def _quadratic(self, w: np.ndarray, omega: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The task's quadratic in the coordinates ``D`` models.

        With ``task_intercept`` the bias is profiled out: minimising
        ``||w - theta||^2_Omega`` over the bias coordinate leaves ``||w' - theta'||^2_{Omega'}``
        over the slopes, with ``Omega'`` the Schur complement of the bias block. Each task then
        keeps its own best intercept for whatever slopes ``D s_t`` gives it (see :meth:`_theta`),
        so tasks share feature effects without being pulled toward each other's baselines.
        """
        if not self.task_intercept:
            return w, omega
        o_nb = omega[:-1, -1]
        return w[:-1], omega[:-1, :-1] - np.outer(o_nb, o_nb) / omega[-1, -1]

    def _intercept(self, w: np.ndarray, omega: np.ndarray, slopes: np.ndarray) -> float:
        """The task's optimal intercept (of its quadratic around ``w``) given ``slopes``."""
        return float(w[-1] + omega[-1, :-1] @ (w[:-1] - slopes) / omega[-1, -1])

    def _full_model(self, record: TaskRecord, model: np.ndarray) -> np.ndarray:
        if not self.task_intercept:
            return model
        return np.append(model, self._intercept(record.w, record.omega, model))

    def _rep_hessians(self, record: TaskRecord, rep_codes: np.ndarray, D: np.ndarray) -> list[np.ndarray]:
        """``Omega_k^t`` for each representative: task t's half-Hessian at ``D s_k``
        (with the task's own intercept when ``task_intercept``), in :meth:`_quadratic` form."""
        if self.kind == "regression":
            return [self._quadratic(record.w, record.omega)[1]] * len(rep_codes)
        Xd, _, mu = self._design(record.data)
        out = []
        for s_k in rep_codes:
            om = half_hessian(self.kind, Xd, self._full_model(record, D @ s_k), mu)
            out.append(self._quadratic(record.w, om)[1])
        return out

    def _contribution_terms(self, s, w, omega, Z, rep_codes, rep_omegas):
        """A task's terms in ``A, b, M, C`` (column-major ``vec`` of ``D``); its ``A`` term is
        ``sum_j kron(S_j, Omega_j)``, returned as the list of pairs ``(S_j, Omega_j)``."""
        K = len(rep_codes)
        if self.kind == "regression":
            Spp = np.outer(s, s)
            for k in range(K):
                delta = rep_codes[k] - s
                Spp = Spp + self.lambda2 * Z[k] * np.outer(delta, delta)
            terms = [(Spp, omega)]
        else:
            terms = [(np.outer(s, s), omega)]
            for k in range(K):
                if Z[k] > 0.0:
                    delta = rep_codes[k] - s
                    terms.append((self.lambda2 * Z[k] * np.outer(delta, delta), rep_omegas[k]))
        db = np.outer(omega @ w, s).reshape(-1, order="F")
        dM = np.outer(phi_inverse(self.phi, s), w)
        dC = np.outer(w, w)
        return terms, db, dM, dC

    def _stored_contribution_terms(self, record: TaskRecord):
        a = record.arrays
        w, omega = self._quadratic(record.w, record.omega)
        rep_omegas = a.get("rep_omegas")
        if self.kind == "regression":
            rep_omegas = [omega] * len(a["rep_codes"])
        return self._contribution_terms(a["code"], w, omega, a["assignment"], a["rep_codes"], rep_omegas)

    def _stored_contribution(self, record: TaskRecord):
        """A stored task's terms ``dA, db, dM, dC`` with ``dA`` dense (for tests and audits)."""
        terms, db, dM, dC = self._stored_contribution_terms(record)
        d, p = self.D_.shape
        dA, _ = plus_kron_terms(np.zeros((d * p, d * p)), [(S, om, 1.0) for S, om in terms])
        return dA, db, dM, dC

    def _solve_decoder(self, A: np.ndarray, b: np.ndarray, T: int, D_previous: np.ndarray,
                       A32: np.ndarray | None = None) -> np.ndarray:
        """``D = argmin`` of the decoder objective: ``(A/T + ridge I) vec(D) = b/T``.

        A code component that no task has used yet (``s_t[i] = 0`` for every task, so block
        row ``i`` of ``A`` and block ``i`` of ``b`` are zero) decouples, and its column of ``D``
        is exactly zero; only the ``n`` active components are solved for (their blocks
        gathered into a ``dn x dn`` system). Small systems are factorised; large ones
        (``d n >= PCG_MIN_SIZE``) go to the warm-started mixed-precision PCG of
        :func:`core.solvers.kronecker_sum_pcg` (``A32``: ``A`` in float32, used when every
        component is active).
        """
        d, p = D_previous.shape
        active = np.flatnonzero(self._used_components(A, b, p, d))
        D = np.zeros((d, p))
        if active.size == 0:
            return D
        n = d * active.size
        if active.size < p:  # gather whole d x d blocks (contiguous rows of d), not single entries
            A = A.reshape(p, d, p, d)[active][:, :, active].reshape(n, n)
            b = b.reshape(p, d)[active].reshape(-1)
            A32 = None
        if self.max_norm is None and n >= PCG_MIN_SIZE:
            x = kronecker_sum_pcg(A, 1.0 / T, self.ridge, b / T, (d, active.size),
                                  x0=D_previous[:, active].reshape(-1, order="F"), A32=A32)
            D[:, active] = x.reshape((d, active.size), order="F")
            return D
        system = A / T
        system.flat[:: n + 1] += self.ridge  # + ridge * I without allocating I
        D[:, active] = solve_ridge_ball(system, b / T, (d, active.size), self.max_norm, axis=0)
        return D

    @staticmethod
    def _used_components(A: np.ndarray, b: np.ndarray, p: int, d: int) -> np.ndarray:
        """Code components some task has used: their diagonal block of ``A`` or block of ``b``
        is non-zero."""
        return A.diagonal().reshape(p, d).any(axis=1) | b.reshape(p, d).any(axis=1)

    def _assignment_costs(self, s_model, ref, rep_models, rep_omegas):
        """Dimensionless costs ``[c_1..c_K, d0]`` of the Z step (see module docstring)."""
        dist = np.array([(m - s_model) @ om @ (m - s_model) for m, om in zip(rep_models, rep_omegas)])
        ratio = max(float(dist.min()), _TINY) / (ref + float(dist.sum()))
        d0 = -self.gamma * np.log(ratio)
        return np.append(dist / ref, d0)

    def _solve_code(self, D, L, w, omega, rep_codes, rep_omegas, scale, use_encoder, s_start=None):
        """Alternate the ``s`` (FISTA) and ``Z`` (closed form) steps for one task (Algorithm 1).

        ``s_start`` (the task's code from its last update) is where the first ``s`` step's
        FISTA begins: that step is a convex problem, strictly so once the encoder's ridge term
        is in, so the start changes only how many iterations reach its minimiser."""
        K, p = len(rep_codes), D.shape[1]
        c_enc = self.encoder_weight * scale if use_encoder else 0.0
        l1 = self.lambda1 * scale
        target = phi_forward(self.phi, L @ w) if use_encoder else np.zeros(p)
        DtOD = D.T @ omega @ D
        H0 = DtOD + c_enc * np.eye(p)
        g0 = D.T @ omega @ w + c_enc * target
        rep_H = [D.T @ om @ D for om in rep_omegas]
        rep_g = [H @ s_k for H, s_k in zip(rep_H, rep_codes)]
        rep_models = [D @ s_k for s_k in rep_codes]
        ref = max(float(w @ omega @ w), _TINY)

        def s_step(Z, s0):
            H, g = H0.copy(), g0.copy()
            for k in range(K):
                H += self.lambda2 * Z[k] * rep_H[k]
                g += self.lambda2 * Z[k] * rep_g[k]
            return fista_quadratic_l1(H, g, l1, x0=s0)

        def z_step(model):
            costs = self._assignment_costs(model, ref, rep_models, rep_omegas)
            return simplex_assignment(costs, self.lambda2, self.assignment_ridge)

        if K == 0:
            Z = np.ones(1)
            return s_step(Z, s_start), Z
        if not self.joint:  # CL3: assign from the single-task model, then learn s once
            Z = z_step(w)
            return s_step(Z, s_start), Z
        Z = np.full(K + 1, 1.0 / (K + 1)) if self.z_init == "uniform" else z_step(w)
        s = s_step(Z, s_start)
        for _ in range(self.max_outer_iter):
            Z_new = z_step(D @ s)
            s_new = s_step(Z_new, s)
            done = (np.linalg.norm(s_new - s) <= self.tol * (1 + np.linalg.norm(s_new))
                    and np.linalg.norm(Z_new - Z) <= self.tol)
            s, Z = s_new, Z_new
            if done:
                break
        return s, Z

    def _looks_novel(self, D, w, omega, rep_codes, rep_omegas) -> bool:
        """Would the outlier slot win the ``Z`` step measured from the task's own ``w_t``?"""
        if len(rep_codes) == 0:
            return True
        ref = max(float(w @ omega @ w), _TINY)
        costs = self._assignment_costs(w, ref, [D @ s_k for s_k in rep_codes], rep_omegas)
        Z = simplex_assignment(costs, self.lambda2, self.assignment_ridge)
        return int(np.argmax(Z)) == len(Z) - 1

    # ------------------------------------------------------------------ update
    def _update(self, task_id: str, record: TaskRecord, previous: TaskRecord | None) -> UpdateResult:
        d, p = self.D_.shape
        w, omega = self._quadratic(record.w, record.omega)
        A, b, M, C = self.A_, self.b_, self.M_, self.C_
        D = self.D_
        old_terms = []
        if previous is not None:  # remove the earlier contribution: no double counting
            terms, db, dM, dC = self._stored_contribution_terms(previous)
            old_terms = [(S_j, om_j, -1.0) for S_j, om_j in terms]
            b, M, C = b - db, M - dM, C - dC
            n_learned = self.n_learned_
        else:
            n_learned = self.n_learned_ + 1
        use_encoder = bool(np.any(C != 0.0))  # L holds knowledge only once fitted to a task
        was_rep = task_id in self.representatives_
        rep_ids = [r for r in self.representatives_ if r != task_id]
        rep_codes = np.array([self.S_[self.representatives_.index(r)] for r in rep_ids]).reshape(-1, p)
        rep_omegas = self._rep_hessians(record, rep_codes, D)
        seeded = self.n_seeded_columns_
        if previous is None and seeded < p and np.linalg.norm(w) > 1e-12 and (
            self.seed_columns == "first" or self._looks_novel(D, w, omega, rep_codes, rep_omegas)
        ):
            D = D.copy()
            D[:, seeded] = w / np.linalg.norm(w) * (self.max_norm or 1.0)
            seeded += 1
            rep_omegas = self._rep_hessians(record, rep_codes, D)
        scale = self._hessian_scale(record, omega)
        s_start = None if previous is None else previous.arrays.get("code")
        s, Z = self._solve_code(D, self.L_, w, omega, rep_codes, rep_omegas, scale, use_encoder, s_start)

        terms, db, dM, dC = self._contribution_terms(s, w, omega, Z, rep_codes, rep_omegas)
        # a new A (copies of the learner share arrays, so A is never written in place), with
        # the float32 copy that the PCG on the whole system uses when every component is in use
        in_use = self._used_components(self.A_, self.b_, p, d) | np.any([np.diag(S_j) != 0 for S_j, _ in terms], axis=0)
        low_precision = self.max_norm is None and d * p >= PCG_MIN_SIZE and bool(np.all(in_use))
        A, A32 = plus_kron_terms(A, old_terms + [(S_j, om_j, 1.0) for S_j, om_j in terms],
                                 low_precision=low_precision)
        b, M, C = b + db, M + dM, C + dC
        T = n_learned
        D_new = self._solve_decoder(A, b, T, D, A32)
        L_new = solve_rows_in_ball(C / T + self.encoder_ridge * np.eye(d), M / T, self.max_norm)

        representatives, S = list(self.representatives_), self.S_
        new_rep = False
        if was_rep:
            S = S.copy()
            S[representatives.index(task_id)] = s
        elif int(np.argmax(Z)) == len(Z) - 1:
            representatives.append(task_id)
            S = np.vstack([S, s])
            new_rep = True

        record.arrays = {"code": s, "assignment": Z, "rep_codes": rep_codes}
        if self.kind == "classification":
            record.arrays["rep_omegas"] = np.array(rep_omegas).reshape(-1, d, d)
        record.meta = {**record.meta, "assignment_tasks": rep_ids}
        env_sums = self._moved_environment_sums(task_id, previous, record, was_rep, new_rep)
        # commit: every attribute replaced at once, after all the work succeeded
        self.A_, self.b_, self.M_, self.C_ = A, b, M, C
        self.D_, self.L_, self.S_ = D_new, L_new, S
        self.representatives_, self.n_learned_, self.n_seeded_columns_ = representatives, n_learned, seeded
        self.env_counts_, self.env_weights_, self.env_weighted_ = env_sums
        self.tasks_ = self.tasks_.set(task_id, record)
        return UpdateResult(
            task_id=task_id, n_samples=record.n_samples, new_task=previous is None,
            code=s.copy(), assignment=Z.copy(), assignment_tasks=tuple(rep_ids),
            outlier_probability=float(Z[-1]), new_representative=new_rep,
            n_representatives=len(representatives),
        )

    def _hessian_scale(self, record: TaskRecord, omega: np.ndarray) -> float:
        """``mean(diag(Omega_t))`` (:meth:`_quadratic` form), the scale of the code's weights;
        with ``grow_features`` over the features whose column is not zero in every row of the
        task (a new feature it never had holds the ridge there and would shrink the scale)."""
        diag = np.diag(omega)
        if self.grow_features:
            kept = ~self._zero_columns(record)
            if not self.task_intercept:
                kept = np.append(kept, True)
            if np.any(kept):
                diag = diag[kept]
        return float(np.mean(diag))

    # ------------------------------------------------------------------ new feature columns
    def _grown_task_arrays(self, record: TaskRecord, d0: int, k: int, ridge: float) -> dict[str, np.ndarray]:
        """A classification task's Hessians at the representatives' models get the ridge on
        the new diagonal (a zero column adds nothing to ``X' diag(p(1-p)) X``)."""
        arrays = dict(record.arrays)
        if "rep_omegas" in arrays:
            arrays["rep_omegas"] = np.array([pad_square(om, d0, k, ridge) for om in arrays["rep_omegas"]]
                                            ).reshape(-1, d0 + k + (0 if self.task_intercept else 1),
                                                      d0 + k + (0 if self.task_intercept else 1))
        return arrays

    def _grow_global(self, d0: int, k: int, records: dict, grown: dict) -> None:
        """New rows ``d0 .. d0+k-1`` of ``D`` (the rows of the new features, in the coordinates
        of :meth:`_quadratic`) and the statistics padded exactly: every task's terms
        ``kron(S_j, Omega_j)`` in ``A`` have ``ridge_t I`` as the new block of ``Omega_j``
        (the new column is zero in its rows), so ``A`` gains ``sum_t ridge_t sum_j S_j`` on
        each new feature's diagonal block and nothing else; ``b``, ``M``, ``C`` gain zeros
        (``w_t`` is 0 there); ``D`` and ``L`` gain zero rows and columns (the solutions of the
        padded systems); each environment's ``sum n_t Omega'_t`` gains ``sum n_t ridge_t I``.
        The population's mean gets 0 for the new slopes and its covariance the block that EM
        starts from (``I``, standardised units), uncorrelated with the rest: no task has data
        there, and the next refit of the population moves it."""
        d, p = self.D_.shape
        new = np.arange(d0, d0 + k)
        G = np.zeros((p, p))
        for record in records.values():
            terms = self._stored_contribution_terms(record)[0]
            G += self._ridge_of(record) * sum(S_j for S_j, _ in terms)
        A = np.insert(np.insert(self.A_.reshape(p, d, p, d), [d0] * k, 0.0, axis=1), [d0] * k, 0.0, axis=3)
        A[:, new, :, new] = G  # A[c1, i, c2, i] for every new row i
        self.A_ = A.reshape(p * (d + k), p * (d + k))
        self.b_ = np.insert(self.b_.reshape(p, d), [d0] * k, 0.0, axis=1).reshape(-1)
        self.D_ = np.insert(self.D_, [d0] * k, 0.0, axis=0)
        self.L_ = np.insert(self.L_, [d0] * k, 0.0, axis=1)
        self.M_ = np.insert(self.M_, [d0] * k, 0.0, axis=1)
        self.C_ = pad_square(self.C_, d0, k)
        reps = list(self.representatives_)
        W = np.insert(np.insert(self.env_weights_, [d0] * k, 0.0, axis=1), [d0] * k, 0.0, axis=2)
        if self.env_counts_.shape[0] == len(reps):  # else summed again when first needed
            for tid, record in records.items():
                key = self._environment_key(tid, record, reps)
                if key in reps:
                    W[reps.index(key), new, new] += record.n_samples * self._ridge_of(record)
        self.env_weights_ = W
        self.env_weighted_ = np.insert(self.env_weighted_, [d0] * k, 0.0, axis=1)
        pop = Population.from_array(self.population_)
        cov = pad_square(pop.cov, d0, k, 1.0)
        self.population_ = Population(np.insert(pop.mean, [d0] * k, 0.0), cov, pop.noise).to_array()
        self.population_mean_cov_ = pad_square(self.population_mean_cov_, d0, k)

    def _finite_witness(self, name: str, array: np.ndarray) -> np.ndarray:
        """``A`` is a sum of PSD terms ``kron(S, Omega)``, so ``|A_ij| <= sqrt(A_ii A_jj)`` and a
        finite diagonal makes it finite; checking ``dp`` entries instead of ``(dp)^2`` saves a
        pass over 52 MB per update at ``d = 128, p = 20`` (a non-finite ``A`` would also make
        ``D`` non-finite, which is checked)."""
        return array.diagonal() if name == "A_" else array

    def _theta(self, task_id: str) -> np.ndarray:
        record = self.tasks_[task_id]
        return self._full_model(record, self.D_ @ record.arrays["code"])

    def _library(self, task_id: str, exclude: TaskRecord | None, basis: bool = True) -> Library | None:
        """The decoder re-solved without ``exclude``'s terms in ``A, b`` (``D_{-t}``), one centre
        per environment and log weights proportional to the environments' sizes (each
        representative and the other tasks whose largest assignment it holds).

        An environment's centre is the precision-weighted mean of its member tasks' slopes,
        ``(sum_t n_t Omega'_t)^-1 sum_t n_t Omega'_t w'_t`` without the task itself (the pooled
        fit of the environment: a population mean, not one member's noisy fit); an environment
        with no other member falls back to ``D_{-t} s_k``. With ``basis=False`` the library has
        no basis and ``D_{-t}``, a solve of the library's whole system, is computed only for
        such a fallback."""
        if len(self.tasks_) == int(task_id in self.tasks_):  # no other task
            return None
        without = exclude is not None and "code" in exclude.arrays
        if without and int(self.n_learned_) - 1 <= 0:
            return None
        decoder: list[np.ndarray] = []

        def library_basis() -> np.ndarray:  # D_{-t}'s slope rows (all of them with a task intercept), solved once
            if not decoder:
                D = self.D_
                if without:
                    terms, db, _, _ = self._stored_contribution_terms(exclude)
                    A, _ = plus_kron_terms(self.A_, [(S_j, om_j, -1.0) for S_j, om_j in terms])
                    D = self._solve_decoder(A, self.b_ - db, int(self.n_learned_) - 1, self.D_)
                decoder.append(D if self.task_intercept else D[:-1])
            return decoder[0]
        rows = self.D_.shape[0] if self.task_intercept else self.D_.shape[0] - 1
        reps = [r for r in self.representatives_ if r != task_id]
        stats = self._environment_stats()
        own = self.tasks_.get(task_id)
        # the environment the task is counted in (its own, if it is a representative: then none of reps)
        own_env = (self._environment_key(task_id, own, self.representatives_)
                   if own is not None and exclude is not None else None)
        counts, centres = [], []
        for r in reps:
            count, weight, weighted = stats.get(r, (0, None, None))
            if own_env == r:
                W, Ww = self._pooling_terms(own)
                count, weight, weighted = count - 1, weight - W, weighted - Ww
            if count >= 1:
                centre = np.linalg.solve(weight + 1e-9 * np.trace(weight) / weight.shape[0] * np.eye(weight.shape[0]),
                                         weighted)
            else:
                centre = library_basis() @ self.S_[self.representatives_.index(r)]
            counts.append(count + 1.0)
            centres.append(centre[:rows])
        counts = np.array(counts)
        centres = np.array(centres).reshape(-1, rows)
        return Library(library_basis() if basis else None, centres,
                       np.log(counts / counts.sum()) if len(reps) else np.empty(0))

    def _pooling_terms(self, record: TaskRecord) -> tuple[np.ndarray, np.ndarray]:
        """A task's weight ``n Omega'`` and weighted slopes ``n Omega' w'`` in its environment's
        pooled fit (:meth:`_quadratic` coordinates)."""
        w, omega = self._quadratic(record.w, record.omega)
        W = record.n_samples * omega
        return W, W @ w

    @staticmethod
    def _environment_of(record: TaskRecord) -> str | None:
        """The representative a task leans on most (``None``: the outlier slot wins)."""
        z = record.arrays.get("assignment")
        names = record.meta.get("assignment_tasks") or []
        if z is None or not len(names) or int(np.argmax(z)) == len(z) - 1:
            return None
        return names[int(np.argmax(z[:-1]))]

    def _environment_stats(self) -> dict[str, tuple[int, np.ndarray, np.ndarray]]:
        """For every representative: how many tasks lean on it most (itself not counted) and
        the sums of :meth:`_pooling_terms` over it and those tasks, read from the sums each
        update keeps (summed over every task once for a state that predates them)."""
        if self.env_counts_.shape[0] != len(self.representatives_):
            self.env_counts_, self.env_weights_, self.env_weighted_ = self._summed_environments()
        return {r: (int(self.env_counts_[i]), self.env_weights_[i], self.env_weighted_[i])
                for i, r in enumerate(self.representatives_)}

    def _environment_key(self, task_id: str, record: TaskRecord, representatives: list[str]) -> str | None:
        """The environment a task is counted in: its own if it is a representative, else the
        one it leans on most (``None``: the outlier slot)."""
        return task_id if task_id in representatives else self._environment_of(record)

    def _summed_environments(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The environments' sums over every task (what the updates keep incrementally)."""
        reps = list(self.representatives_)
        d = self.D_.shape[0]
        counts, W, Ww = -np.ones(len(reps)), np.zeros((len(reps), d, d)), np.zeros((len(reps), d))
        index = {r: i for i, r in enumerate(reps)}
        for tid, record in self.tasks_.items():
            i = index.get(self._environment_key(tid, record, reps))
            if i is not None:
                w_t, ww_t = self._pooling_terms(record)
                counts[i], W[i], Ww[i] = counts[i] + 1, W[i] + w_t, Ww[i] + ww_t
        return counts, W, Ww

    def _moved_environment_sums(self, task_id: str, previous: TaskRecord | None, record: TaskRecord,
                                was_rep: bool, new_rep: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The environments' sums after this update: the task's earlier terms taken out of the
        environment it was counted in, its new terms added to the one it is counted in now
        (a new representative opens its own). New arrays: copies of a learner share them."""
        self._environment_stats()  # a state that predates the sums gets them first
        reps = list(self.representatives_)
        counts, W, Ww = self.env_counts_.copy(), self.env_weights_.copy(), self.env_weighted_.copy()
        if previous is not None:
            old = task_id if was_rep else self._environment_of(previous)
            if old in reps:
                i = reps.index(old)
                w_t, ww_t = self._pooling_terms(previous)
                counts[i], W[i], Ww[i] = counts[i] - 1, W[i] - w_t, Ww[i] - ww_t
        if new_rep:
            d = W.shape[1]
            reps.append(task_id)
            counts = np.append(counts, -1.0)
            W, Ww = np.concatenate([W, np.zeros((1, d, d))]), np.concatenate([Ww, np.zeros((1, d))])
        new = task_id if (was_rep or new_rep) else self._environment_of(record)
        if new in reps:
            j = reps.index(new)
            w_t, ww_t = self._pooling_terms(record)
            counts[j], W[j], Ww[j] = counts[j] + 1, W[j] + w_t, Ww[j] + ww_t
        return counts, W, Ww

    @property
    def representatives(self) -> list[str]:
        """Task ids whose codes form the model knowledge library ``S``, in order of arrival."""
        return list(getattr(self, "representatives_", []))


class FCL3WithoutDecoder(FCL3):
    """The paper's ``Ours_woDecoder`` ablation: FCL3 without the autoencoder term."""

    def __init__(
        self, kind: str = "regression", n_components: int = 5, mu: float = 0.1,
        lambda1: float = 1e-3, lambda2: float = 1.0, alpha: float = 1e-3, gamma: float = 0.5,
        encoder_weight: float = 0.0, assignment_ridge: float = 0.1, phi: str = "identity",
        ridge: float = 1e-3, encoder_ridge: float = 1e-3, max_norm: float | None = None,
        joint: bool = True, max_outer_iter: int = 20, tol: float = 1e-6,
        task_intercept: bool = True, z_init: str = "single_task", seed_columns: str = "novel",
        standardize: bool = True,
        random_state: int = 0, max_task_rows: int | None = None, task_models: str = "empirical_bayes",
        grow_features: bool = False,
    ):
        super().__init__(
            kind=kind, n_components=n_components, mu=mu, lambda1=lambda1, lambda2=lambda2, alpha=alpha,
            gamma=gamma, encoder_weight=encoder_weight, assignment_ridge=assignment_ridge, phi=phi,
            ridge=ridge, encoder_ridge=encoder_ridge, max_norm=max_norm, joint=joint,
            max_outer_iter=max_outer_iter, tol=tol, task_intercept=task_intercept, z_init=z_init,
            seed_columns=seed_columns, standardize=standardize, random_state=random_state,
            max_task_rows=max_task_rows, task_models=task_models, grow_features=grow_features,
        )


class CL3(FCL3):
    """CL3 (the paper's conference version): two phases — assign ``Z`` from the single-task
    model first, then learn the code once — and no autoencoder."""

    def __init__(
        self, kind: str = "regression", n_components: int = 5, mu: float = 0.1,
        lambda1: float = 1e-3, lambda2: float = 1.0, alpha: float = 1e-3, gamma: float = 0.5,
        encoder_weight: float = 0.0, assignment_ridge: float = 0.1, phi: str = "identity",
        ridge: float = 1e-3, encoder_ridge: float = 1e-3, max_norm: float | None = None,
        joint: bool = False, max_outer_iter: int = 20, tol: float = 1e-6,
        task_intercept: bool = True, z_init: str = "single_task", seed_columns: str = "novel",
        standardize: bool = True,
        random_state: int = 0, max_task_rows: int | None = None, task_models: str = "empirical_bayes",
        grow_features: bool = False,
    ):
        super().__init__(
            kind=kind, n_components=n_components, mu=mu, lambda1=lambda1, lambda2=lambda2, alpha=alpha,
            gamma=gamma, encoder_weight=encoder_weight, assignment_ridge=assignment_ridge, phi=phi,
            ridge=ridge, encoder_ridge=encoder_ridge, max_norm=max_norm, joint=joint,
            max_outer_iter=max_outer_iter, tol=tol, task_intercept=task_intercept, z_init=z_init,
            seed_columns=seed_columns, standardize=standardize, random_state=random_state,
            max_task_rows=max_task_rows, task_models=task_models, grow_features=grow_features,
        )
