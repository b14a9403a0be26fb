"""FCL3 engine: pure numpy/scipy online lifelong learners (no HTTP, no database)."""
from .base import STATE_FORMAT_VERSION, LifelongLearner, ModelState, UpdateResult, load_state
from .preprocessing import InputError, UnknownTaskError
from .stl import STL

__all__ = [
    "STATE_FORMAT_VERSION", "LifelongLearner", "ModelState", "UpdateResult", "load_state",
    "InputError", "UnknownTaskError", "STL",
]
from .fcl3 import CL3, FCL3, FCL3WithoutDecoder  # noqa: E402

__all__ += ["FCL3", "CL3", "FCL3WithoutDecoder"]
