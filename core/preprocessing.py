"""Input checks and the frozen feature/target scaling every learner shares.

Users send raw feature rows. Linear task models only share knowledge if they live in one
coordinate system, so the scaling cannot change once tasks are learned: it is fitted on the
*first* batch the learner ever sees and then frozen (a running scaler would silently move
every stored ``w_t`` and code). Each feature is centred and divided by its standard
deviation on that batch; a feature constant there is divided by ``max(1, |value|)``. For regression the
target is scaled the same way, so ``mu``, ``lambda1`` and friends mean the same thing on
School (scores 1..70) as on Disjoint. The bias column is appended after scaling and is the
last coordinate of every ``w_t``, ``theta_t`` and row of ``D``.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np

from .exceptions import InputError


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
        d = X.shape[1]
        if not standardize:
            return cls(np.zeros(d), np.ones(d))
        mean = X.mean(axis=0)
        std = X.std(axis=0)
        # A feature constant on the first batch (a school-level attribute of the first school)
        # is scaled by its magnitude, so later tasks' values land on a unit scale too.
        scale = np.where(std > 1e-12 * np.maximum(1.0, np.abs(mean)), std, np.maximum(1.0, np.abs(mean)))
        if kind == "regression":
            ystd = float(y.std())
            return cls(mean, scale, float(y.mean()), ystd if ystd > 1e-12 * max(1.0, abs(float(y.mean()))) else 1.0)
        return cls(mean, scale)

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
