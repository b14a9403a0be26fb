"""The service app with a gate on its commits, so that client tests can hold an update at a
known point instead of relying on timing: ``uvicorn tests.client.gate_app:app``.

``FCL3_TEST_GATE`` names a directory. While the file ``hold`` exists there, a commit (the
update lock held, the batch not yet stored) creates ``held`` and waits until ``hold`` is
removed (at most 60 s); ``held`` is removed once the commit returned (the batch, and the
answer of its ``Idempotency-Key``, stored). Without ``hold``, commits run as usual.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from service.main import create_app
from service.store.writes import ModelWriter

_GATE = Path(os.environ["FCL3_TEST_GATE"])
_commit = ModelWriter.commit


def _gated_commit(self, prepared, *args, **kwargs):
    hold, held = _GATE / "hold", _GATE / "held"
    if not hold.exists():
        return _commit(self, prepared, *args, **kwargs)
    held.touch()
    try:
        deadline = time.monotonic() + 60
        while hold.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return _commit(self, prepared, *args, **kwargs)
    finally:
        held.unlink(missing_ok=True)


ModelWriter.commit = _gated_commit
app = create_app()
