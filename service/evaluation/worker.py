"""Where the accuracy matrix's rows are computed: off the update lock, in the background of the
process, without slowing the updates down.

* :class:`Foreground`: the updates running in the process (an update enters it while it holds
  its model's lock, and while it rescores evaluation sets after its commit); a background row
  calls :meth:`Foreground.give_way` between evaluation sets.
* :class:`MatrixWorker`: one background thread (a :class:`concurrent.futures.ThreadPoolExecutor`
  of one worker) for the rows of every model of the process, with a bounded backlog: a new
  task's update (after its commit, its lock released) waits while that many rows are queued,
  so the learners they hold stay few.

Both are made once per app (:class:`service.hosting.ModelRegistry`, held by the app's state)
and shut down with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class Foreground:
    """The model updates running in this process, to which the accuracy matrix's background
    rows give way. Both are Python threads of one interpreter: left alone, a row being
    computed takes the interpreter back every few milliseconds (the GIL's switch interval) and
    slows the update under its lock about twofold. So :meth:`give_way`, called by the row
    between evaluation sets, waits while an update runs, for at most ``most`` seconds each
    time: under a steady stream of updates the rows still move on (a set per ``most``
    seconds at least), and a new task's update that waits for the backlog (lock released,
    not counted here) never waits on itself."""

    def __init__(self) -> None:
        self._running = 0
        self._changed = threading.Condition(threading.Lock())

    @property
    def running(self) -> int:
        """How many updates run now."""
        return self._running

    def __enter__(self) -> Foreground:
        with self._changed:
            self._running += 1
        return self

    def __exit__(self, *exc: object) -> None:
        with self._changed:
            self._running -= 1
            if not self._running:
                self._changed.notify_all()

    def give_way(self, most: float = 0.02) -> None:
        if self._running:  # read without the lock: a stale answer costs one set's wait or none
            with self._changed:
                self._changed.wait_for(lambda: not self._running, timeout=most)


class MatrixWorker:
    """The process's background thread for accuracy-matrix rows (an executor of one worker:
    started at the first row, idle threads cost nothing), at most ``max_backlog`` rows queued."""

    def __init__(self, max_backlog: int = 4):
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fcl3-matrix")
        self._slots = threading.BoundedSemaphore(max_backlog)

    def submit(self, fn: Callable[..., Any], *args: Any, wait: float = 60.0) -> Future[Any]:
        """Run ``fn(*args)`` in the background; waits up to ``wait`` seconds for a free slot of
        the backlog (then queues it anyway: the caller's answer is never held longer)."""
        slot = self._slots.acquire(timeout=wait)
        future = self._executor.submit(fn, *args)
        if slot:
            future.add_done_callback(lambda _: self._slots.release())
        return future

    def shutdown(self) -> None:
        """Drop the queued rows (they stay due: the model's next update computes them) and let
        the running one finish."""
        self._executor.shutdown(wait=False, cancel_futures=True)
