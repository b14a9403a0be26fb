"""ELLA — the Efficient Lifelong Learning Algorithm (Ruvolo & Eaton, ICML 2013) — and its
InfoMax active task selection (Ruvolo & Eaton, AAAI 2013, "Active task selection for
lifelong machine learning"), ported from the authors' ELLA v1.0 MATLAB code
(``Lifelong-ML/ELLA``: ``initModelELLA.m``, ``encodeTaskELLA.m``, ``sparseEncode.m``,
``addTaskELLA.m``, ``selectTaskELLA.m``).

Model
-----
Every task ``t`` keeps its single-task fit ``w_t`` and half-Hessian ``Omega_t`` (computed by
the shared :func:`core.losses.fit_single_task`, so ELLA and every other learner see the task
through the same second-order summary; ``mu`` is that fit's ridge). A shared basis ``L``
(``d x k``, ``d`` = features + bias) and a sparse code ``s_t`` give ``theta_t = L s_t``.

* **Encoding** (``sparseEncode.m`` with ``muRatio = Inf``, i.e. no task-specific part)::

      s_t = argmin_s ||w_t - L s||^2_{Omega_t} + code_l1 ||s||_1

  v1.0 solves it as a lasso on ``Omega^{1/2} w ~ Omega^{1/2} L s`` (SPAMS ``mexLasso`` with
  ``lambda = mu/2``, whose objective carries a 1/2 on the squares: the same problem). Here
  :func:`core.solvers.lasso_gram` solves it exactly (feature-sign search) in the Gram form
  ``Q = L' Omega L = (Omega^{1/2} L)'(Omega^{1/2} L)``, ``c = L' Omega w``, which is the same
  lasso without forming the matrix square root.
* **Initialisation** (``initModelELLA.m``/``addTaskELLA.m``): ``L`` starts as ``randn(d, k)``.
  With ``init_with_first_tasks=True`` (the v1.0 demo setting) the ``j``-th distinct task
  (``j <= k``) gets the code ``e_j`` (v1.0 also writes ``theta_j`` into column ``j``, but that
  column is overwritten by the closed-form solve on the very next line, so the code is what
  matters). After every solve, a column whose squared norm is below ``1e-10`` is re-drawn
  from ``N(0, I)``.
* **Basis update** (``addTaskELLA.m``)::

      A += kron(s s', Omega),   b += vec(Omega w s')   (column-major vec, numpy order="F")
      vec(L) = (A/T + ridge I)^{-1} b/T

Decisions (documented deviations from v1.0)
-------------------------------------------
* **Re-observed tasks.** v1.0 simply adds the task again (double counting, and ``T`` grows).
  As the ELLA *paper* prescribes, the task's previous contribution is removed from ``A`` and
  ``b``, ``T`` is not incremented, ``L`` is re-solved from the remaining statistics and the
  task is then re-encoded with *all* its data. Consequently re-learning the most recently
  added task after more data is exactly the same as having learned it once on all its data.
  A task that received an initialisation slot ``e_j`` keeps it.
* **Reproducible randomness.** Every random column is drawn from a generator seeded by
  ``(random_state, T, column)``, so the model is a pure function of its inputs and the
  exported state (no hidden RNG state to export).

InfoMax (ELLA-Info)
-------------------
:meth:`ELLA.information_gain` implements the InfoMax criterion of the AAAI 2013 paper as the
authors' ``selectTaskELLA.m`` computes it: the posterior over ``vec(L)`` is approximated by a
Gaussian (Laplace approximation) whose precision is the Hessian of ELLA's objective,
``P = A/T + ridge I``; learning candidate task ``c`` with code ``s_c`` and half-Hessian
``Omega_c`` turns it into ``P_c = (A + kron(s_c s_c', Omega_c))/(T + 1) + ridge I``. The
entropy of a Gaussian is ``-1/2 log det P + const``, so the information gain is
``1/2 (log det P_c - log det P)`` (the D-optimality criterion). v1.0 ranks candidates by
``log det P_c``; the common ``log det P`` does not change the ranking. Because of the ``1/T``
normalisation (the precision of the *averaged* objective) the value can be negative once
tasks have been learned: only the ranking between candidates is meaningful. The candidate's code is
the one :meth:`learn` would give it (its initialisation slot while the first ``k`` tasks
arrive, else the lasso code against the current ``L``) — v1.0 encodes against the random
initial ``L`` even while the first ``k`` tasks are still to receive slots; we use the code the
task would actually get. :meth:`ELLA.select_next` returns the candidate with the largest gain.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from .base import LifelongLearner, TaskRecord, UpdateResult
from .evidence import RIDGE, Family, Library
from .exceptions import InputError
from .params import (BASE_CONSTRAINTS, MAX_COMPONENTS, MAX_WEIGHT, Boolean, check_system_size, integer, real,
                     validate_params)
from .preprocessing import Scaler, as_matrix, as_targets
from .solvers import lasso_gram

#: v1.0 re-draws a basis column whose squared norm falls under this value.
DEAD_COLUMN_SQNORM = 1e-10


def _logdet_spd(M: np.ndarray) -> float:
    sign, logdet = np.linalg.slogdet(M)
    if sign <= 0:
        raise np.linalg.LinAlgError("matrix is not positive definite")
    return float(logdet)


class ELLA(LifelongLearner):
    """ELLA v1.0 (Ruvolo & Eaton 2013) on the shared single-task fit; see the module docstring.

    Parameters
    ----------
    kind : "regression" or "classification"
    n_components : int
        ``k``, the number of basis columns (v1.0 demo: 2).
    mu : float
        Ridge of the shared single-task fit (see :mod:`core.losses`). ELLA wants an almost
        unregularised single-task fit ``w_t`` (v1.0 uses ``e^-5`` on the *summed* loss), so the
        default ``1e-3`` is small: a ridge that keeps the fit finite and barely biases it
        (how the defaults were chosen: docs/design.md).
    code_l1 : float
        ``mu`` of the ELLA paper: l1 weight of the code (v1.0 demo: ``e^-12``).
    ridge : float
        ``lambda`` of the ELLA paper: ridge on ``L`` in the basis update (v1.0 demo: ``e^-10``).
    init_with_first_tasks : bool
        v1.0's ``initializeWithFirstKTasks``: the ``j``-th task (``j <= k``) gets code ``e_j``.
    standardize, random_state, max_task_rows
        As in :class:`core.base.LifelongLearner`.
    task_models : ``"empirical_bayes"`` (default): every task is predicted with its posterior
        mean under a ``ridge`` prior or a ``subspace`` prior (extra variance along the span
        of the basis ``L`` learned without the task); the family and the distribution of the
        prior's strength are estimated from the whole stream by the evidence
        (:mod:`core.evidence`);
        ``"paper"``: ``theta_t = L s_t``.

    Every parameter has a range (``_parameter_constraints``, :mod:`core.params`), checked by
    :meth:`check_params` and before any update; on the first batch, ``(features + 1)`` times
    ``n_components`` at most :data:`core.params.MAX_SYSTEM_SIZE` bounds the basis.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> model = ELLA(n_components=2)
    >>> for t in range(3):
    ...     X = rng.normal(size=(30, 4)); y = X @ np.ones(4)
    ...     result = model.learn(f"task{t}", X, y)
    >>> model.predict("task0", X[:2]).shape
    (2,)
    """

    _state_attrs = ("L_", "A_", "b_", "n_tasks_")
    _families = (RIDGE, Family("subspace", rho=10.0))

    def __init__(
        self,
        kind: str = "regression",
        n_components: int = 2,
        mu: float = 1e-3,
        code_l1: float = float(np.exp(-12)),
        ridge: float = float(np.exp(-10)),
        init_with_first_tasks: bool = True,
        standardize: bool = True,
        random_state: int = 0,
        max_task_rows: int | None = None,
        task_models: str = "empirical_bayes",
        grow_features: bool = False,
    ):
        super().__init__(kind=kind, mu=mu, standardize=standardize, random_state=random_state,
                         max_task_rows=max_task_rows, task_models=task_models, grow_features=grow_features)
        self.n_components = n_components
        self.code_l1 = code_l1
        self.ridge = ridge
        self.init_with_first_tasks = init_with_first_tasks

    #: The range of every hyper-parameter (:mod:`core.params`); the basis's size is checked on
    #: the first batch (:data:`core.params.MAX_SYSTEM_SIZE`).
    _parameter_constraints = {
        **BASE_CONSTRAINTS,
        "n_components": [integer(1, MAX_COMPONENTS)],
        "code_l1": [real(0.0, MAX_WEIGHT)],
        "ridge": [real(0.0, MAX_WEIGHT, closed="right")],  # > 0: A is singular early on
        "init_with_first_tasks": [Boolean()],
    }

    # ----------------------------------------------------------------- parameters
    def _check_params(self) -> None:
        validate_params(self)

    def check_size(self, n_features: int) -> None:
        """:class:`InputError` when the basis for ``n_features`` features would have more than
        :data:`core.params.MAX_SYSTEM_SIZE` unknowns (a service may call it when a model's
        number of features is known at creation)."""
        check_system_size(self, int(n_features) + 1, self.n_components, "the basis L")

    # ----------------------------------------------------------------- learned state
    @property
    def _dim(self) -> int:
        return int(self.n_features_in_) + 1  # bias column appended by the scaler

    def _init_learned(self, n_features: int) -> None:
        super()._init_learned(n_features)
        d, k = n_features + 1, int(self.n_components)
        self.A_ = np.zeros((d * k, d * k))
        self.b_ = np.zeros(d * k)
        self.n_tasks_ = np.array(0, dtype=np.int64)
        self.L_ = self._redraw_dead(np.zeros((d, k)), 0)

    def _redraw_dead(self, L: np.ndarray, T: int) -> np.ndarray:
        dead = np.nonzero(np.sum(L**2, axis=0) < DEAD_COLUMN_SQNORM)[0]
        if dead.size:
            L = L.copy()
            for j in dead:
                rng = np.random.default_rng([int(self.random_state), int(T), int(j)])
                L[:, j] = rng.standard_normal(L.shape[0])
        return L

    def _solve_basis(self, A: np.ndarray, b: np.ndarray, T: int) -> np.ndarray:
        d, k = self._dim, int(self.n_components)
        if T <= 0:
            L = np.zeros((d, k))
        else:
            M = A / T
            M[np.diag_indices_from(M)] += self.ridge
            L = np.linalg.solve(M, b / T).reshape((d, k), order="F")
        return self._redraw_dead(L, T)

    @staticmethod
    def _contribution(s: np.ndarray, omega: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One task's terms of ``A`` and ``b``: ``kron(s s', Omega)`` and ``vec(Omega w s')``."""
        return np.kron(np.outer(s, s), omega), np.outer(omega @ w, s).ravel(order="F")

    def _encode(self, L: np.ndarray, w: np.ndarray, omega: np.ndarray) -> np.ndarray:
        LO = L.T @ omega
        return lasso_gram(LO @ L, LO @ w, float(self.code_l1))

    # ----------------------------------------------------------------- learning
    def _update(self, task_id: str, record: TaskRecord, previous: TaskRecord | None) -> UpdateResult:
        A, b, T, L = self.A_, self.b_, int(self.n_tasks_), self.L_
        k = int(self.n_components)
        if previous is not None:
            # Remove the task's earlier contribution; T is not incremented (ELLA paper).
            dA, db = self._contribution(previous.arrays["code"], previous.omega, previous.w)
            A, b, T = A - dA, b - db, T - 1
            L = self._solve_basis(A, b, T)
            slot = int(previous.meta.get("init_slot", -1))
        else:
            slot = T if (self.init_with_first_tasks and T < k) else -1
        if slot >= 0:
            s = np.zeros(k)
            s[slot] = 1.0
        else:
            s = self._encode(L, record.w, record.omega)
        dA, db = self._contribution(s, record.omega, record.w)
        A, b, T = A + dA, b + db, T + 1
        L = self._solve_basis(A, b, T)
        record.arrays = {**record.arrays, "code": s}
        record.meta = {**record.meta, "init_slot": slot}
        self.A_, self.b_, self.n_tasks_, self.L_ = A, b, np.array(T, dtype=np.int64), L
        self.tasks_ = self.tasks_.set(task_id, record)
        return UpdateResult(
            task_id=task_id, n_samples=record.n_samples, new_task=previous is None, code=s.copy(),
        )

    def _grow_global(self, d0: int, k: int, records: dict, grown: dict) -> None:
        """The basis gains zero rows for the new features (bias row last) and ``A`` the terms
        ``kron(s_t s_t', ridge_t I)`` of the new block of each task's ``Omega_t`` (``b`` gains
        zeros: ``w_t`` is 0 there)."""
        d, kk = self._dim, int(self.n_components)
        new = np.arange(d0, d0 + k)
        G = np.zeros((kk, kk))
        for record in records.values():
            s = record.arrays["code"]
            G += self._ridge_of(record) * np.outer(s, s)
        A = np.insert(np.insert(self.A_.reshape(kk, d, kk, d), [d0] * k, 0.0, axis=1), [d0] * k, 0.0, axis=3)
        A[:, new, :, new] = G
        self.A_ = A.reshape(kk * (d + k), kk * (d + k))
        self.b_ = np.insert(self.b_.reshape(kk, d), [d0] * k, 0.0, axis=1).reshape(-1)
        self.L_ = np.insert(self.L_, [d0] * k, 0.0, axis=0)

    def _theta(self, task_id: str) -> np.ndarray:
        return self.L_ @ self.tasks_[task_id].arrays["code"]

    def _library(self, task_id: str, exclude: TaskRecord | None, basis: bool = True) -> Library | None:
        """The basis re-solved without ``exclude``'s terms (its slope rows): ELLA has no
        representatives, only the span of ``L`` (the basis is all its library, so ``basis`` is
        ignored)."""
        if len(self.tasks_) == int(task_id in self.tasks_):  # no other task
            return None
        L = self.L_
        if exclude is not None and "code" in exclude.arrays:
            dA, db = self._contribution(exclude.arrays["code"], exclude.omega, exclude.w)
            L = self._solve_basis(self.A_ - dA, self.b_ - db, int(self.n_tasks_) - 1)
        return Library(L[:-1], np.empty((0, L.shape[0] - 1)), np.empty(0))

    # ----------------------------------------------------------------- InfoMax (ELLA-Info)
    def information_gain(self, X, y) -> float:
        """InfoMax gain of learning a *new* task with data ``(X, y)``; the model is not changed.

        ``1/2 (log det((A + kron(s s', Omega))/(T+1) + ridge I) - log det(A/T + ridge I))`` with
        ``(w, Omega)`` the candidate's single-task fit and ``s`` the code :meth:`learn` would give
        it (see the module docstring). Before the first task, the candidate is scaled as
        :meth:`learn` would scale it if it came first (the scaler is fitted on the first batch).
        """
        self._check_params()
        n_features = getattr(self, "n_features_in_", None)
        X = as_matrix(X, n_features)
        y = as_targets(y, X.shape[0], self.kind)
        y01 = (y == 1.0).astype(float) if self.kind == "classification" else y
        if self.is_fitted:
            scaler = self.scaler_
            A, T, L = self.A_, int(self.n_tasks_), self.L_
        else:
            self.check_size(X.shape[1])
            scaler = Scaler.fit(X, y01, self.kind, self.standardize)
            d, k = X.shape[1] + 1, int(self.n_components)
            A, T = np.zeros((d * k, d * k)), 0
            L = self._redraw_dead(np.zeros((d, k)), 0)
        # the very single-task fit learn() would run (base class), with this scaler
        w, omega = self._single_task(self._summarise(X, y, scaler), scaler)
        k = int(self.n_components)
        if self.init_with_first_tasks and T < k:
            s = np.zeros(k)
            s[T] = 1.0
        else:
            s = self._encode(L, w, omega)
        eye = self.ridge * np.eye(A.shape[0])
        before = _logdet_spd(A / T + eye) if T > 0 else A.shape[0] * np.log(self.ridge)
        after = _logdet_spd((A + np.kron(np.outer(s, s), omega)) / (T + 1) + eye)
        return 0.5 * (after - before)

    def select_next(self, candidates: Mapping[str, tuple]) -> str:
        """The candidate task id with the largest :meth:`information_gain` (first one on ties)."""
        if not candidates:
            raise InputError("select_next needs at least one candidate task")
        best, best_gain = None, -np.inf
        for tid, (X, y) in candidates.items():
            gain = self.information_gain(X, y)
            if best is None or gain > best_gain:
                best, best_gain = tid, gain
        return best
