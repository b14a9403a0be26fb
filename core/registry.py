"""The one learner registry: every learner by class name, for the engine's :func:`load_state`,
the service (which picks a learner from configuration) and the benchmarks."""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from .base import LifelongLearner
from .ella import ELLA
from .exceptions import InputError
from .fcl3 import CL3, FCL3, FCL3WithoutDecoder
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
