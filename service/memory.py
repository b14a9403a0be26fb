"""Process-level memory settings: cap glibc's malloc arenas (``MALLOC_ARENA_MAX``), hand
free heap pages back after a model change (``malloc_trim``), and keep what start-up made out
of the garbage collector's full collections (``gc.freeze``).

Why: FastAPI runs the (sync) endpoints in a thread pool, and glibc gives each thread that
contends for malloc an arena of its own, up to 8 per core. Every update makes short-lived
buffers the size of a task row (read from the database, its ``.npy``/zip encodings, the
learner's copies; a classification task's row holds every sample of its task): freed, they
stay in the arena of the thread that used them, and each arena keeps its own high-water mark
of such free space, so a busy worker's memory grows by fragmentation, not by live objects.
With two arenas the threads share the free space; see docs/operations.md.

Applied at start-up, before the thread pool exists (glibc fixes the arena limit when the
first extra arena is made). A non-empty ``MALLOC_ARENA_MAX`` in the environment wins: glibc
reads it itself and this module leaves the process alone (so ``MALLOC_ARENA_MAX=8`` restores
more arenas). Not glibc (musl, macOS), or jemalloc preloaded: nothing is done.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import sys
import threading
import time

log = logging.getLogger("service.memory")

M_ARENA_MAX = -8  # <malloc.h>
DEFAULT_ARENAS = 2


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


def limit_malloc_arenas(n: int = DEFAULT_ARENAS) -> int | None:
    """Cap the number of glibc malloc arenas of this process; returns the cap applied (None:
    left alone, because ``MALLOC_ARENA_MAX`` is set or this is not glibc)."""
    if os.environ.get("MALLOC_ARENA_MAX", "").strip() or n <= 0:
        return None
    libc = _glibc()
    if libc is None or "jemalloc" in os.environ.get("LD_PRELOAD", ""):
        return None
    if libc.mallopt(M_ARENA_MAX, n) != 1:
        log.warning("mallopt(M_ARENA_MAX, %d) refused", n)
        return None
    return n


TRIM_INTERVAL = 10.0  # seconds between two malloc_trim calls of one trimmer, at most


class HeapTrimmer:
    """Hands free heap pages back to the OS (``malloc_trim(0)``) after the cached model moved
    to a new version, at most every ``interval`` seconds; one per app (``service.hosting.Shared``).

    Why: each update frees buffers as large as its task's row (a classification row grows
    with its task's data), and glibc returns free memory to the OS only from the top of a
    heap, so the holes stay resident even with 2 arenas. ``malloc_trim(0)`` releases whole
    free pages anywhere in the heaps; it takes a few milliseconds and is paid by the request
    that refreshed the model, at most once per interval. Off glibc it does nothing."""

    def __init__(self, interval: float = TRIM_INTERVAL, libc: ctypes.CDLL | None = None):
        self.interval = interval
        self.libc = libc if libc is not None else _GLIBC
        self._lock = threading.Lock()
        self._last = float("-inf")

    def after_model_change(self, now: float | None = None) -> bool:
        """Trim unless the last trim is less than ``interval`` seconds old or another thread
        is trimming; whether it ran."""
        if self.libc is None:
            return False
        now = time.monotonic() if now is None else now
        if now - self._last < self.interval or not self._lock.acquire(blocking=False):
            return False
        try:
            self._last = now
            self.libc.malloc_trim(0)
            return True
        finally:
            self._lock.release()


def freeze_startup_heap() -> bool:
    """Once per process, after its first start-up: collect, then move every object alive (the
    modules, the app with its routes and schemas, the loaded model: most of a worker's tracked
    objects) to the garbage collector's permanent generation (``gc.freeze``), which no
    collection scans. Why: a full collection stops every thread of the process while it
    scans them, 70-90 ms in a worker serving School against about 1 ms with them frozen
    (docs/operations.md), a pause that fell on whichever update or prediction triggered it.
    Frozen objects are still freed when their last reference goes; only cycles among them are
    never collected (start-up's, made once). Later start-ups in the same process (tests
    making many apps) find objects frozen already and leave the heap alone. Returns whether
    it froze."""
    if gc.get_freeze_count():
        return False
    gc.collect()
    gc.freeze()
    return True


_GLIBC = None if "jemalloc" in os.environ.get("LD_PRELOAD", "") else _glibc()
if _GLIBC is not None:
    _GLIBC.malloc_trim.argtypes = [ctypes.c_size_t]
