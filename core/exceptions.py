"""The exceptions the engine raises for its callers (re-exported by :mod:`core`).

Numerical failures are not among them: the solvers raise :class:`FloatingPointError` (or
numpy's ``LinAlgError``) where they meet non-finite values, and
:meth:`core.LifelongLearner.learn` turns those into an :class:`InputError` after rolling
the update back.
"""
from __future__ import annotations


class InputError(ValueError):
    """A batch, request or setting the learner refuses; the learner's state is left untouched."""


class UnknownTaskError(LookupError):
    """Prediction or lookup for a task the learner has never seen."""

    def __str__(self) -> str:  # LookupError would print the repr of the argument
        return str(self.args[0]) if self.args else "unknown task"

