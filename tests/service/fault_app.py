"""The service app with fault hooks, for tests that kill or abandon a writer mid-update.

``FCL3_FAULT_COMMIT_DELAY`` seconds of sleep just before each commit, while the update lock
is held and the learned model is not yet stored; ``FCL3_FAULT_AFTER_COMMIT_DELAY`` seconds of
sleep just after it, when the batch is stored but not yet answered:
``uvicorn tests.service.fault_app:app``.
"""
from __future__ import annotations

import os
import time

from service.main import create_app
from service.writes import ModelWriter

_DELAY = float(os.environ.get("FCL3_FAULT_COMMIT_DELAY", "0"))
_AFTER = float(os.environ.get("FCL3_FAULT_AFTER_COMMIT_DELAY", "0"))
_commit = ModelWriter.commit


def _slow_commit(self, prepared, *args, **kwargs):
    time.sleep(_DELAY)
    version = _commit(self, prepared, *args, **kwargs)
    time.sleep(_AFTER)
    return version


ModelWriter.commit = _slow_commit
app = create_app()
