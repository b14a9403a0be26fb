"""The service app with one fault hook, for tests that kill or abandon a writer mid-update.

``FCL3_FAULT_COMMIT_DELAY`` seconds of sleep just before each commit, while the update lock
is held and the learned model is not yet stored: ``uvicorn tests.service.fault_app:app``.
"""
from __future__ import annotations

import os
import time

from service.main import create_app
from service.writes import ModelWriter

_DELAY = float(os.environ.get("FCL3_FAULT_COMMIT_DELAY", "0"))
_commit = ModelWriter.commit


def _slow_commit(self, prepared):
    time.sleep(_DELAY)
    return _commit(self, prepared)


ModelWriter.commit = _slow_commit
app = create_app()
