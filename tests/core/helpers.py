"""Learner factories and small task streams shared by the engine's tests."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import core

KINDS = ["regression", "classification"]


def make(cls, kind, **kw):
    """A learner of ``cls`` for ``kind``, with 3 components where it has a basis (fast tests)."""
    params = {"kind": kind}
    if "n_components" in cls._param_names():
        params["n_components"] = 3
    return cls(**params, **kw)


def factory(cls, kind):
    return functools.partial(make, cls, kind)


#: Parametrises a test over every learner of ``core.LEARNERS`` and both kinds.
learners = pytest.mark.parametrize("cls,kind", [(c, k) for c in core.LEARNERS.values() for k in KINDS],
                                   ids=lambda v: getattr(v, "__name__", v))


def basis_tasks(n_tasks=6, d=5, n=40, seed=0, kind="regression"):
    """Tasks ``(id, X, y)`` whose weights lie in a random 2-dimensional subspace."""
    rng = np.random.default_rng(seed)
    basis = rng.normal(size=(d, 2))
    out = []
    for t in range(n_tasks):
        w = basis @ rng.normal(size=2)
        X = rng.normal(size=(n, d)) * 3 + 1
        f = X @ w
        if kind == "regression":
            y = f + 0.3 * rng.normal(size=n)
        else:
            y = (f + rng.logistic(size=n) > 0).astype(float)
        out.append((f"t{t}", X, y))
    return out
