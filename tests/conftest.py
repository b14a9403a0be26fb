"""Settings of the whole test run.

The collector's pauses: FastAPI keeps the endpoints of every app it has built in bounded
caches of its own, so a test run keeps hundreds of apps, their models and their arrays alive
(about 5 million objects by the end of ``tests/service``). A full collection walks all of
them: pauses of 0.5-3 s that stop every thread of the run, long enough to fail a test that
times a lock's TTL against a stuck holder. After each test, what it left alive is collected
and frozen (``gc.freeze``: out of the collector's way), so that a collection during a test
walks only what that test made.
"""
from __future__ import annotations

import gc

import pytest


@pytest.fixture(autouse=True)
def _freeze_survivors():
    yield
    gc.collect()
    gc.freeze()
