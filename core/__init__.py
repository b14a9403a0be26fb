"""FCL3 engine: pure numpy/scipy online lifelong learners (no HTTP, no database)."""
from .base import STATE_FORMAT_VERSION, LifelongLearner, ModelState, UpdateResult, load_state
from .preprocessing import InputError, UnknownTaskError
from .stl import STL

__all__ = [
    "STATE_FORMAT_VERSION", "LifelongLearner", "ModelState", "UpdateResult", "load_state",
    "InputError", "UnknownTaskError", "STL",
]
from .ella import ELLA  # noqa: E402
from .fcl3 import CL3, FCL3, FCL3WithoutDecoder  # noqa: E402

__all__ += ["ELLA", "FCL3", "CL3", "FCL3WithoutDecoder"]

#: Every learner by class name, for services that pick one from configuration.
LEARNERS = {cls.__name__: cls for cls in (STL, ELLA, FCL3, CL3, FCL3WithoutDecoder)}
