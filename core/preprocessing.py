"""Input checks and the frozen feature/target scaling every learner shares.

Users send raw feature rows. Linear task models only share knowledge if they live in one
coordinate system, so the scaling is fixed once the stream is under way: while the stream has
seen fewer than :data:`SCALER_WARMUP_ROWS` rows the learner refits it on every row seen so far
each time their number doubles, re-expressing the stored tasks exactly and learning them
again (:meth:`core.base.LifelongLearner.learn`), and then freezes it. Each feature is centred
and divided by its standard deviation over those rows; a feature constant there is divided
by ``max(1, |value|)``. For regression the
target is scaled the same way, so ``mu``, ``lambda1`` and friends mean the same thing on
School (scores 1..70) as on Disjoint. The bias column is appended after scaling and is the
last coordinate of every ``w_t``, ``theta_t`` and row of ``D``.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np

from .exceptions import InputError

#: Rows after which the scaling is frozen (see the module notes).
SCALER_WARMUP_ROWS = 200


def _float_array(X) -> np.ndarray:
    """``np.asarray(X, dtype=float)``, faster for parsed JSON. Rows of one width (a list of
    lists) are read in one pass by ``np.fromiter``, at half the cost of ``np.array``, which
    first walks the nested lists to find their shape and dtype; other lists of floats let
    numpy infer float64 (a third of the time it takes to convert each value to a requested
    dtype). Whatever these refuse is converted as asked, with numpy's own result or error."""
    if isinstance(X, list):
        if X and isinstance(X[0], list):
            width = len(X[0])
            if all(type(row) is list and len(row) == width for row in X):
                try:
                    return np.fromiter(chain.from_iterable(X), float, len(X) * width).reshape(len(X), width)
                except (TypeError, ValueError, OverflowError):
                    pass
        try:
            arr = np.array(X)
        except (TypeError, ValueError):
            arr = None
        if arr is not None and arr.dtype == np.float64:
            return arr
    return np.asarray(X, dtype=float)


def as_matrix(X, n_features: int | None, what: str = "X") -> np.ndarray:
    """Validate and convert a feature matrix; raise :class:`InputError` saying what is wrong."""
    try:
        arr = _float_array(X)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{what} must be a 2-D array of numbers: {exc}") from None
    if arr.size == 0:
        raise InputError(f"{what} is empty: a batch needs at least one row")
    if arr.ndim == 1 and n_features is not None and arr.size == n_features:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2:
        raise InputError(f"{what} must be 2-D (rows x features), got {arr.ndim}-D")
    if arr.shape[0] == 0:
        raise InputError(f"{what} is empty: a batch needs at least one row")
    if arr.shape[1] == 0:
        raise InputError(f"{what} has no feature columns")
    if n_features is not None and arr.shape[1] != n_features:
        raise InputError(
            f"{what} has {arr.shape[1]} features per row but the model expects {n_features}"
        )
    if not np.isfinite(arr).all():
        r, c = np.argwhere(~np.isfinite(arr))[0]
        raise InputError(f"{what} contains NaN or infinity (first at row {r}, column {c})")
    return arr


def as_targets(y, n_rows: int, kind: str) -> np.ndarray:
    """Validate targets; for classification accept labels in {0, 1} or {-1, 1}."""
    try:
        arr = np.asarray(y, dtype=float)
    except (TypeError, ValueError) as exc:
        raise InputError(f"y must be a 1-D array of numbers: {exc}") from None
    if arr.ndim != 1:
        raise InputError(f"y must be 1-D, got {arr.ndim}-D")
    if arr.shape[0] != n_rows:
        raise InputError(f"X has {n_rows} rows but y has {arr.shape[0]} values")
    if not np.all(np.isfinite(arr)):
        raise InputError("y contains NaN or infinity")
    if kind == "classification":
        values = set(np.unique(arr).tolist())
        if not values <= {0.0, 1.0} and not values <= {-1.0, 1.0}:
            raise InputError(
                f"classification labels must all be in {{0, 1}} or all in {{-1, 1}}, got {sorted(values)}"
            )
    return arr


def label_convention(y: np.ndarray, previous: str) -> str:
    """The label convention of a task: ``"01"``, ``"pm1"`` or ``"unknown"`` (only 1s seen)."""
    has_zero = bool(np.any(y == 0.0))
    has_minus = bool(np.any(y == -1.0))
    new = "01" if has_zero else "pm1" if has_minus else "unknown"
    if previous == "unknown":
        return new
    if new not in ("unknown", previous):
        raise InputError(
            f"this task's labels were given as {'{0, 1}' if previous == '01' else '{-1, 1}'}; "
            "a batch in the other convention is refused"
        )
    return previous


@dataclass
class Scaler:
    """Affine feature/target scaling fitted once on the first batch, then frozen."""

    x_mean: np.ndarray
    x_scale: np.ndarray
    y_mean: float = 0.0
    y_scale: float = 1.0

    @classmethod
    def fit(cls, X: np.ndarray, y: np.ndarray, kind: str, standardize: bool) -> "Scaler":
        """The scaling of rows ``X`` (and targets ``y``)."""
        return cls.from_stats(X.mean(axis=0), X.std(axis=0), float(y.mean()), float(y.std()), kind, standardize)

    @classmethod
    def from_stats(cls, mean: np.ndarray, std: np.ndarray, y_mean: float, y_std: float, kind: str,
                   standardize: bool) -> "Scaler":
        """The scaling of rows with these feature means and standard deviations (and target's)."""
        d = mean.size
        if not standardize:
            return cls(np.zeros(d), np.ones(d))
        # A feature constant on the rows seen (a school-level attribute of the first school)
        # is scaled by its magnitude, so later tasks' values land on a unit scale too.
        scale = np.where(std > 1e-12 * np.maximum(1.0, np.abs(mean)), std, np.maximum(1.0, np.abs(mean)))
        if kind == "regression":
            return cls(mean, scale, y_mean, y_std if y_std > 1e-12 * max(1.0, abs(y_mean)) else 1.0)
        return cls(mean, scale)

    def raw_stats(self, n: float, gram: np.ndarray, moment: np.ndarray, yy: float):
        """Means and standard deviations of the raw features and target of rows whose scaled
        statistics (bias last) are ``gram``, ``moment``, ``yy``: computed in the scaled space,
        where the values are of order one, and mapped back."""
        mz = gram[-1, :-1] / n
        vz = np.maximum(np.diag(gram)[:-1] / n - mz * mz, 0.0)
        mt = moment[-1] / n
        vt = max(yy / n - mt * mt, 0.0)
        return (self.x_mean + self.x_scale * mz, self.x_scale * np.sqrt(vz),
                self.y_mean + self.y_scale * mt, self.y_scale * float(np.sqrt(vt)))

    def moments_from(self, other: "Scaler", n: float, gram: np.ndarray, moment: np.ndarray, yy: float):
        """Statistics ``(X'X, X'y, y'y)`` of rows scaled by ``other``, re-expressed exactly in
        this scaling: ``z' = z a + b`` per feature with ``a = s / s'``, ``b = (m - m') / s'`` (the
        bias column unchanged), ``t' = alpha t + beta`` for the target."""
        d = self.x_mean.size
        A = np.eye(d + 1)
        A[np.arange(d), np.arange(d)] = other.x_scale / self.x_scale
        A[-1, :-1] = (other.x_mean - self.x_mean) / self.x_scale
        alpha = other.y_scale / self.y_scale
        beta = (other.y_mean - self.y_mean) / self.y_scale
        gram_new = A.T @ gram @ A
        moment_new = A.T @ (alpha * moment + beta * gram[:, -1])
        yy_new = alpha * alpha * yy + 2.0 * alpha * beta * moment[-1] + beta * beta * n
        return 0.5 * (gram_new + gram_new.T), moment_new, float(yy_new)

    def design(self, X: np.ndarray) -> np.ndarray:
        """Scaled features with the bias column appended last."""
        Z = (X - self.x_mean) / self.x_scale
        return np.hstack([Z, np.ones((Z.shape[0], 1))])

    def linear(self, X: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """``design(X) @ theta`` without building the design matrix (the prediction path)."""
        return ((X - self.x_mean) / self.x_scale) @ theta[:-1] + theta[-1]

    def target(self, y: np.ndarray) -> np.ndarray:
        return (y - self.y_mean) / self.y_scale

    def untarget(self, z: np.ndarray) -> np.ndarray:
        return z * self.y_scale + self.y_mean

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {
            "x_mean": self.x_mean,
            "x_scale": self.x_scale,
            "y_affine": np.array([self.y_mean, self.y_scale]),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "Scaler":
        y_affine = arrays["y_affine"]
        return cls(arrays["x_mean"].copy(), arrays["x_scale"].copy(), float(y_affine[0]), float(y_affine[1]))
