"""The service app with fault hooks, for tests that kill or abandon a writer mid-update.

``FCL3_FAULT_COMMIT_DELAY`` seconds of sleep just before each commit (of a batch or of a
take-back), while the update lock is held and the learned model is not yet stored;
``FCL3_FAULT_AFTER_COMMIT_DELAY`` seconds of sleep just after it, when the write is stored but
not yet answered:
``uvicorn tests.service.fault_app:app``.
"""
from __future__ import annotations

import os
import time

from service.main import create_app
from service.store.writes import ModelWriter

_DELAY = float(os.environ.get("FCL3_FAULT_COMMIT_DELAY", "0"))
_AFTER = float(os.environ.get("FCL3_FAULT_AFTER_COMMIT_DELAY", "0"))


def _slowed(commit):
    def slow_commit(self, prepared, *args, **kwargs):
        time.sleep(_DELAY)
        version = commit(self, prepared, *args, **kwargs)
        time.sleep(_AFTER)
        return version

    return slow_commit


ModelWriter.commit = _slowed(ModelWriter.commit)
ModelWriter.commit_take_back = _slowed(ModelWriter.commit_take_back)
app = create_app()
