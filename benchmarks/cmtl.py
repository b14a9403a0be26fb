"""Convex clustered multi-task learning (CMTL), the batch comparator of the paper's Table 2.

The convex relaxation of Zhou, Chen & Ye (2011, "Clustered multi-task learning via
alternating structure optimization"), as MALSAR's ``Least_CMTL`` / ``Logistic_CMTL`` solve it,
itself the convex clustering penalty of Jacob, Bach & Vert (2008) with the spectral
constraint on the cluster matrix. For task weights ``W = [w_1 .. w_T]`` (d x T), task
intercepts ``b`` and a T x T cluster matrix ``M``:

    min_{W, b, M}  sum_t mean_i loss(x_ti' w_t + b_t, y_ti) + c tr(W (eta I + M)^{-1} W')
    s.t.           0 <= M <= I (eigenvalues), tr(M) = k,

with ``eta = rho2 / rho1`` and ``c = rho1 eta (1 + eta)``. ``rho2`` is the ridge on the
clusters' centres, ``rho1 + rho2`` the penalty on the tasks' deviations from them, ``k`` the
number of clusters (capped at T). The loss is half the squared error (regression) or the
logistic loss (labels +-1); intercepts are not penalised. Each task's loss is its mean over
its rows (MALSAR sums them), so ``rho1`` and ``rho2`` mean the same thing on tasks of 10 and
of 300 rows. Features (and regression targets) are standardised with the pooled statistics of
all the rows learned, as the engine's learners do.

Solved jointly in ``(W, b, M)`` by accelerated projected gradient (FISTA with backtracking,
restarted when the extrapolated ``M`` leaves the domain or the objective rises); the
projection onto the constraint set clips the eigenvalues of ``M`` after a shift found by
bisection (MALSAR's ``singular_projection``). The problem is jointly convex, so the solution
is the global minimum; ``tests/benchmarks/test_cmtl.py`` checks it against a brute-force
minimisation of the same objective.

:class:`CMTL` wraps the solver in the learners' API for :mod:`benchmarks.paper`: ``learn``
stores a task's rows, the first prediction after new rows fits every task at once (a batch
model sees all tasks together, in no order).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from core import UpdateResult
from core.losses import sigmoid


@dataclass
class CMTLFit:
    """A solution: ``W`` (d x T, columns in task order), ``b`` (T), ``M`` (T x T), the
    objective, the iterations used and whether the tolerance was met."""

    W: np.ndarray
    b: np.ndarray
    M: np.ndarray
    objective: float
    iterations: int
    converged: bool


def project_spectral(M: np.ndarray, k: float) -> np.ndarray:
    """The Euclidean projection of symmetric ``M`` onto ``{0 <= M <= I, tr(M) = k}``: its
    eigenvalues shifted by the ``theta`` that makes ``sum clip(lambda - theta, 0, 1) = k``."""
    lam, Q = np.linalg.eigh(0.5 * (M + M.T))
    lo, hi = lam.min() - 1.0, lam.max()
    for _ in range(100):
        theta = 0.5 * (lo + hi)
        if np.clip(lam - theta, 0.0, 1.0).sum() > k:
            lo = theta
        else:
            hi = theta
    gam = np.clip(lam - 0.5 * (lo + hi), 0.0, 1.0)
    return (Q * gam) @ Q.T


class _Problem:
    """The stacked rows of every task (grouped by task) and the objective's pieces."""

    def __init__(self, Xs: list[np.ndarray], ys: list[np.ndarray], kind: str, rho1: float, rho2: float, k: float):
        self.kind = kind
        self.T = len(Xs)
        self.X = np.vstack(Xs)
        self.y = np.concatenate(ys)
        n = np.array([len(y) for y in ys])
        self.task = np.repeat(np.arange(self.T), n)
        self.starts = np.concatenate([[0], np.cumsum(n)[:-1]])
        self.row_weight = 1.0 / n[self.task]
        self.eta = rho2 / rho1
        self.c = rho1 * self.eta * (1.0 + self.eta)
        self.k = min(float(k), float(self.T))

    def _margins(self, W: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.einsum("ij,ji->i", self.X, W[:, self.task]) + b[self.task]

    def _loss(self, z: np.ndarray) -> tuple[float, np.ndarray]:
        """Mean-per-task loss and its derivative with respect to every row's margin."""
        if self.kind == "regression":
            r = z - self.y
            return float(np.sum(self.row_weight * 0.5 * r * r)), self.row_weight * r
        yz = self.y * z
        loss = np.logaddexp(0.0, -yz)
        return float(np.sum(self.row_weight * loss)), -self.row_weight * self.y * sigmoid(-yz)

    def value_grad(self, W, b, M, grad: bool = True):
        """Objective and gradients, or ``None`` when ``eta I + M`` is not positive definite."""
        S = self.eta * np.eye(self.T) + M
        try:
            C = np.linalg.cholesky(S)
        except np.linalg.LinAlgError:
            return None
        Cinv = np.linalg.inv(C)
        Sinv = Cinv.T @ Cinv
        WS = W @ Sinv
        loss, g = self._loss(self._margins(W, b))
        value = loss + self.c * float(np.sum(WS * W))
        if not grad:
            return value
        gW = np.add.reduceat(self.X * g[:, None], self.starts, axis=0).T + 2.0 * self.c * WS
        gb = np.add.reduceat(g, self.starts)
        gM = -self.c * (WS.T @ WS)
        return value, gW, gb, gM


def objective(Xs, ys, kind: str, W, b, M, rho1: float, rho2: float, k: float = 1.0) -> float:
    """The CMTL objective of ``(W, b, M)`` on tasks ``Xs``, ``ys`` (``inf`` outside the domain;
    the constraint on ``M`` is not checked)."""
    out = _Problem(Xs, ys, kind, rho1, rho2, k).value_grad(np.asarray(W, float), np.asarray(b, float),
                                                           np.asarray(M, float), grad=False)
    return float("inf") if out is None else out


def solve(Xs: list[np.ndarray], ys: list[np.ndarray], kind: str = "regression", rho1: float = 1.0,
          rho2: float = 0.1, k: float = 2, max_iter: int = 3000, tol: float = 1e-8,
          start: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> CMTLFit:
    """Minimise the CMTL objective over ``(W, b, M)`` for tasks ``Xs[t]``, ``ys[t]`` (labels
    +-1 for ``kind="classification"``); stops when the objective moves by less than ``tol``
    relative in an iteration. ``start`` warm-starts from ``(W, b, M)``."""
    if rho1 <= 0 or rho2 <= 0:
        raise ValueError("rho1 and rho2 must be positive")
    P = _Problem(Xs, ys, kind, rho1, rho2, k)
    d, T = P.X.shape[1], P.T
    if start is None:
        W = np.zeros((d, T))
        if kind == "regression":
            b = np.array([float(np.mean(y)) for y in ys])
        else:
            rate = np.array([np.clip(np.mean(y > 0), 0.02, 0.98) for y in ys])
            b = np.log(rate / (1.0 - rate))
        M = np.eye(T) * (P.k / T)
    else:
        W, b, M = (np.array(a, dtype=float) for a in start)
        M = project_spectral(M, P.k)
    Wz, bz, Mz = W, b, M
    Wo, bo, Mo = W, b, M
    Fz = P.value_grad(Wz, bz, Mz, grad=False)
    L, t, t_old = 1.0, 1.0, 0.0
    converged, it = False, 0
    for it in range(1, max_iter + 1):
        a = (t_old - 1.0) / t
        Ws, bs, Ms = Wz + a * (Wz - Wo), bz + a * (bz - bo), Mz + a * (Mz - Mo)
        out = P.value_grad(Ws, bs, Ms)
        if out is None:  # extrapolated past the domain: a plain gradient step from z
            Ws, bs, Ms = Wz, bz, Mz
            out = P.value_grad(Ws, bs, Ms)
        Fs, gW, gb, gM = out
        while True:
            Wn, bn = Ws - gW / L, bs - gb / L
            Mn = project_spectral(Ms - gM / L, P.k)
            dW, db, dM = Wn - Ws, bn - bs, Mn - Ms
            r = float(np.sum(dW * dW) + db @ db + np.sum(dM * dM))
            Fn = P.value_grad(Wn, bn, Mn, grad=False)
            if r <= 1e-30:
                break
            model = Fs + float(np.sum(gW * dW) + gb @ db + np.sum(gM * dM)) + 0.5 * L * r
            if Fn <= model + 1e-12 * abs(model):
                break
            L *= 2.0
        Wo, bo, Mo = Wz, bz, Mz
        if Fn > Fz:  # adaptive restart (O'Donoghue & Candes): drop the momentum
            t, t_old = 1.0, 0.0
            Wo, bo, Mo = Wz, bz, Mz
            if Fn - Fz > 1e-12 * max(1.0, abs(Fz)):
                continue
        Wz, bz, Mz = Wn, bn, Mn
        change = abs(Fz - Fn)
        Fz = Fn
        if r <= 1e-30 or change <= tol * max(1.0, abs(Fn)):
            converged = True
            break
        t_old, t = t, 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        L = max(L / 1.25, 1e-8)  # let the step grow again
    return CMTLFit(W=Wz, b=bz, M=Mz, objective=float(Fz), iterations=it, converged=converged)


class CMTL:
    """CMTL in the learners' API (``learn``, ``predict``, ``decision_function``, ``theta``):
    rows are stored, all tasks are fitted together at the first prediction after new rows.

    ``theta(t)`` is task ``t``'s weights in the standardised space, intercept last (as the
    engine's learners). ``fit_seconds`` adds up the time spent fitting."""

    batch = True

    def __init__(self, kind: str = "regression", rho1: float = 1.0, rho2: float = 0.1, k: int = 2,
                 max_iter: int = 3000, tol: float = 1e-8, random_state: int = 0):
        self.kind = kind
        self.rho1 = rho1
        self.rho2 = rho2
        self.k = k
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self._rows: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._fit: CMTLFit | None = None
        self._fitted_ids: list[str] = []
        self.fit_seconds = 0.0

    def learn(self, task_id: str, X, y) -> UpdateResult:
        X = np.asarray(X, dtype=float)
        y = np.asarray(y, dtype=float)
        new = task_id not in self._rows
        if not new:
            X0, y0 = self._rows[task_id]
            X, y = np.vstack([X0, X]), np.concatenate([y0, y])
        self._rows[task_id] = (X, y)
        self._fit = None
        return UpdateResult(task_id=task_id, n_samples=int(len(y)), new_task=new)

    @property
    def task_ids(self) -> list[str]:
        return list(self._rows)

    def fit(self) -> "CMTL":
        """Fit every stored task (warm-started from the previous fit's tasks)."""
        t0 = time.perf_counter()
        ids = list(self._rows)
        X = np.vstack([self._rows[t][0] for t in ids])
        self.mean_ = X.mean(axis=0)
        sd = X.std(axis=0)
        self.scale_ = np.where(sd > 0, sd, np.maximum(1.0, np.abs(self.mean_)))
        Xs = [(self._rows[t][0] - self.mean_) / self.scale_ for t in ids]
        if self.kind == "regression":
            y = np.concatenate([self._rows[t][1] for t in ids])
            self.y_mean_, self.y_scale_ = float(y.mean()), float(y.std()) or 1.0
            ys = [(self._rows[t][1] - self.y_mean_) / self.y_scale_ for t in ids]
        else:
            ys = [np.where(self._rows[t][1] > 0, 1.0, -1.0) for t in ids]
        self._fit = solve(Xs, ys, self.kind, self.rho1, self.rho2, self.k, self.max_iter, self.tol)
        self._fitted_ids = ids
        self.fit_seconds += time.perf_counter() - t0
        return self

    def _column(self, task_id: str) -> int:
        if task_id not in self._rows:
            raise KeyError(f"unknown task {task_id!r}")
        if self._fit is None:
            self.fit()
        return self._fitted_ids.index(task_id)

    def theta(self, task_id: str) -> np.ndarray:
        j = self._column(task_id)
        return np.append(self._fit.W[:, j], self._fit.b[j])

    def decision_function(self, task_id: str, X) -> np.ndarray:
        th = self.theta(task_id)
        return ((np.asarray(X, dtype=float) - self.mean_) / self.scale_) @ th[:-1] + th[-1]

    def predict(self, task_id: str, X) -> np.ndarray:
        score = self.decision_function(task_id, X)
        if self.kind == "regression":
            return self.y_mean_ + self.y_scale_ * score
        return np.where(score >= 0.0, 1.0, 0.0)
