"""FCL3 engine: pure numpy/scipy online lifelong learners (no HTTP, no database)."""
from .base import LifelongLearner, UpdateResult
from .ella import ELLA
from .exceptions import InputError, UnknownTaskError
from .fcl3 import CL3, FCL3, FCL3WithoutDecoder
from .registry import LEARNERS, learner_class, load_state
from .state import STATE_FORMAT_VERSION, ModelState
from .stl import STL

__all__ = [
    "STATE_FORMAT_VERSION", "LifelongLearner", "ModelState", "UpdateResult", "load_state",
    "InputError", "UnknownTaskError", "LEARNERS", "learner_class",
    "STL", "ELLA", "FCL3", "CL3", "FCL3WithoutDecoder",
]
