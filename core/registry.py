"""The one learner registry: every learner by class name, for :func:`load_state`, the service
(which picks a learner from configuration) and the benchmarks."""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from .base import LifelongLearner
from .ella import ELLA
from .exceptions import InputError
from .fcl3 import CL3, FCL3, FCL3WithoutDecoder
from .state import ModelState, check_format
from .stl import STL

#: Every learner by name (read-only); a state's ``estimator`` is one of these names.
LEARNERS: Mapping[str, type[LifelongLearner]] = MappingProxyType(
    {cls.__name__: cls for cls in (STL, ELLA, FCL3, CL3, FCL3WithoutDecoder)}
)


def learner_class(name: str) -> type[LifelongLearner]:
    """The learner class called ``name``; :class:`InputError` naming the known ones otherwise."""
    try:
        return LEARNERS[name]
    except (KeyError, TypeError):
        raise InputError(f"unknown learner {name!r}: the learners are {', '.join(LEARNERS)}") from None


def load_state(state: ModelState) -> LifelongLearner:
    """Rebuild a learner from :meth:`LifelongLearner.get_state` output, bit for bit.

    Raises :class:`ValueError` for an unreadable format and :class:`core.InputError` (a
    ``ValueError``) for a learner name not in :data:`LEARNERS`.
    """
    check_format(state)
    return learner_class(state.estimator)._from_state(state)
