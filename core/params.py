"""Declared ranges of every learner's hyper-parameters, checked in one place.

As in scikit-learn (``_parameter_constraints`` + ``validate_params``): each learner class
declares a table ``_parameter_constraints`` mapping every ``__init__`` parameter to the values
it accepts, and :func:`validate_params` checks a learner's parameters against it. Learners call
it from :meth:`core.LifelongLearner.check_params`, which :meth:`~core.LifelongLearner.learn`
runs before any work and a service runs when it creates a model, so a refused value never
reaches an update. A refusal is an :class:`core.InputError` (a ``ValueError``) naming the
learner, the parameter, its range and the value given.

The ranges bound the work and the memory of one update: the iterations of FCL3's ``s``/``Z``
alternation (``max_outer_iter <= 200``, ``tol > 0``), the size of a code (``n_components <=
50``) and, checked on the first batch since it needs the number of features, the size of the
decoder's system (:data:`MAX_SYSTEM_SIZE`). Measured on FCL3 with 30 tasks of 4 features,
``tol`` tiny and ``n_components = 50``: the slowest update took 4.0 s at ``max_outer_iter =
1000`` and 1.1 s at 200 (the default is 20); at ``n_components = 100`` a multi-threaded BLAS
made it 30 s. :func:`describe` renders a table of the ranges.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .exceptions import InputError

#: The largest decoder (FCL3) or basis (ELLA) system a learner takes: ``d * p`` unknowns,
#: ``d`` the rows of a task model (features, plus the intercept where it is part of the
#: system) and ``p`` the components. The statistics ``A`` of that system hold ``(d p)^2``
#: float64 numbers: 72 MB at 3,000 (the speed benchmark's largest, 128 features at 20
#: components, is 2,580), where 1,000 features at 5 components would be 200 MB per model,
#: rewritten by every commit of a service.
MAX_SYSTEM_SIZE = 3000
#: The largest ``n_components`` (FCL3, ELLA).
MAX_COMPONENTS = 50
#: The largest ``max_outer_iter`` (FCL3): the ``s``/``Z`` alternation's iterations per update.
MAX_OUTER_ITER = 200
#: The largest finite weight, ridge or bound a real-valued hyper-parameter takes.
MAX_WEIGHT = 1e6
#: The largest ``max_task_rows``.
MAX_TASK_ROWS = 10**6
#: The largest ``random_state`` (a signed 64-bit integer, as every store keeps it).
MAX_SEED = 2**63 - 1


class Constraint:
    """One kind of value a parameter accepts."""

    def accepts(self, value: Any) -> bool:
        raise NotImplementedError


@dataclass(frozen=True)
class Interval(Constraint):
    """A number of type ``integer`` (``int``, not ``bool``) or ``real`` (finite ``int`` or
    ``float``) between ``low`` and ``high``; ``closed`` says which ends belong to it."""

    type: str
    low: float | None
    high: float | None
    closed: str = "both"  # "both", "left", "right" or "neither"

    def accepts(self, value: Any) -> bool:
        if isinstance(value, (bool, np.bool_)):
            return False
        if self.type == "integer":
            if not isinstance(value, (numbers.Integral, np.integer)):
                return False
        elif not isinstance(value, (numbers.Real, np.integer, np.floating)) or not np.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (value == self.low and self.closed in ("right", "neither"))):
            return False
        if self.high is not None and (value > self.high or (value == self.high and self.closed in ("left", "neither"))):
            return False
        return True

    def __str__(self) -> str:
        noun = "an integer" if self.type == "integer" else "a finite number"
        left = "[" if self.closed in ("both", "left") else "("
        right = "]" if self.closed in ("both", "right") else ")"
        low = "-inf" if self.low is None else _number(self.low)
        high = "inf" if self.high is None else _number(self.high)
        return f"{noun} in {left}{low}, {high}{right}"


@dataclass(frozen=True)
class Options(Constraint):
    """One of a few values (strings), compared exactly."""

    values: tuple[Any, ...]

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.values

    def __str__(self) -> str:
        return "one of " + ", ".join(repr(v) for v in self.values)


@dataclass(frozen=True)
class Boolean(Constraint):
    """``True`` or ``False`` (not 0 or 1)."""

    def accepts(self, value: Any) -> bool:
        return isinstance(value, (bool, np.bool_))

    def __str__(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class NoneValue(Constraint):
    """``None`` (JSON ``null``)."""

    def accepts(self, value: Any) -> bool:
        return value is None

    def __str__(self) -> str:
        return "None"


def _number(x: float) -> str:
    if isinstance(x, int) or float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:g}"


def integer(low: int | None, high: int | None) -> Interval:
    return Interval("integer", low, high)


def real(low: float | None, high: float | None, closed: str = "both") -> Interval:
    return Interval("real", low, high, closed)


Constraints = Sequence[Constraint]


def describe_constraints(allowed: Constraints) -> str:
    """``allowed`` in words: ``"None or an integer in [1, 1,000,000]"``."""
    return " or ".join(str(c) for c in allowed)


def validate_params(learner: Any, params: Mapping[str, Any] | None = None) -> None:
    """Check ``params`` (default: ``learner.get_params()``) against the table of the learner's
    class; :class:`InputError` naming every parameter out of its range, with the range."""
    cls = type(learner)
    table: Mapping[str, Constraints] = getattr(cls, "_parameter_constraints", {})
    params = learner.get_params() if params is None else params
    refused = [f"{name} must be {describe_constraints(table[name])}, got {value!r}"
               for name, value in params.items()
               if name in table and not any(c.accepts(value) for c in table[name])]
    if refused:
        raise InputError(f"{cls.__name__}: {'; '.join(refused)}")


def check_system_size(learner: Any, rows: int, components: int, what: str) -> None:
    """:class:`InputError` when a ``rows x components`` system (``what``) has more than
    :data:`MAX_SYSTEM_SIZE` unknowns."""
    size = int(rows) * int(components)
    if size > MAX_SYSTEM_SIZE:
        mb = 8 * size**2 / 1e6
        fits = MAX_SYSTEM_SIZE // int(rows)
        hint = f"use fewer features or a smaller n_components (at most {fits} here)" if fits else "use fewer features"
        raise InputError(
            f"{type(learner).__name__}: {what} would have {rows:,} x {components:,} = {size:,} unknowns "
            f"(its statistics {mb:,.0f} MB), more than the {MAX_SYSTEM_SIZE:,} a model may have: {hint}")


#: Every learner's parameters shared through :class:`core.LifelongLearner`.
BASE_CONSTRAINTS: dict[str, Constraints] = {
    "kind": [Options(("regression", "classification"))],
    "mu": [real(0.0, MAX_WEIGHT)],
    "standardize": [Boolean()],
    "random_state": [integer(0, MAX_SEED)],
    "max_task_rows": [NoneValue(), integer(1, MAX_TASK_ROWS)],
    "task_models": [Options(("empirical_bayes", "paper"))],
    "grow_features": [Boolean()],
}


def missing_constraints(cls: type) -> list[str]:
    """The ``__init__`` parameters of ``cls`` (and its bases) its table does not cover."""
    table = getattr(cls, "_parameter_constraints", {})
    return [name for name in cls._param_names() if name not in table]


def describe(classes: Iterable[type]) -> str:
    """A Markdown table of the ranges of ``classes`` (one row per parameter, the learners that
    take it and its range)."""
    rows: dict[tuple[str, str], list[str]] = {}
    for cls in classes:
        table = getattr(cls, "_parameter_constraints", {})
        for name in cls._param_names():
            allowed = describe_constraints(table[name]) if name in table else "(no range declared)"
            rows.setdefault((name, allowed), []).append(cls.__name__)
    lines = ["| parameter | learners | range |", "|---|---|---|"]
    for (name, allowed), owners in rows.items():
        lines.append(f"| `{name}` | {', '.join(owners)} | {allowed} |")
    return "\n".join(lines)
