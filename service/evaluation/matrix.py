"""The accuracy matrix of the online evaluation (definitions: docs/design.md, "Online
evaluation"): an update that learns a new task makes that version's row due (a row of
``evaluation_due``, in its commit, :mod:`service.evaluation`), and the row is computed after
the commit on the process's background worker and stored with the transfer figures of every
stored row; the stored row deletes its due row. A row whose process died first is computed by
the model's next update, with the snapshot that update starts from: the learner of that very
version (:meth:`AccuracyMatrix.recover`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from service.evaluation import store
from service.evaluation.jobs import EvaluationSet, MatrixJob
from service.evaluation.scores import MATRIX_METRIC, MatrixRow, Transfer, matrix_entry, score_rows, scores, transfer
from service.evaluation.worker import Foreground, MatrixWorker
from service.store.watch import notify

if TYPE_CHECKING:
    from service.store.prepared import Prepared
    from service.store.reads import ModelReader

# "service.evaluation": the logger name is part of each of its log lines (their "logger" field).
log = logging.getLogger("service.evaluation")


class AccuracyMatrix:
    """The accuracy-matrix rows of one stored model in one process: the rows this process has
    queued or is computing (claimed, so that a later update does not recover them), the rows
    a commit recovers, and their computation on the process's background worker
    (:class:`service.evaluation.worker.MatrixWorker`), giving way to updates
    (``foreground``) before each set. ``reader``: the model's reader (its cached snapshot is
    the learner a due row of the version an update starts from needs); ``enabled``:
    ``EVALUATION_MATRIX``."""

    def __init__(self, reader: ModelReader, foreground: Foreground, worker: MatrixWorker, enabled: bool = True):
        self.reader, self.name = reader, reader.name
        self.engine, self.bulk = reader.engine, reader.bulk
        self.foreground, self.worker, self.enabled = foreground, worker, enabled
        self._guard = threading.Lock()
        #: (model created_at, version) of the matrix rows this process has queued or is computing
        self._claimed: set[tuple[Any, int]] = set()
        self._futures: set[Future[Any]] = set()

    def claim(self, created: Any, version: int) -> None:
        """The row of ``version`` (of the model created at ``created``) is this process's to compute."""
        with self._guard:
            self._claimed.add((created, version))

    def recover(self, conn: Connection, p: Prepared, created: Any, sets: dict[str, EvaluationSet]) -> MatrixJob | None:
        """The job of a due accuracy-matrix row this commit can compute again, or None.

        A row still due that this process is not computing was lost (its process died after the
        commit) or is being computed by another process. The update of version ``v + 1`` holds
        the learner of version ``v`` (the snapshot it starts from, this process's cached one),
        so a row due at ``v`` is computed again after this commit (the first row stored wins: a
        duplicate is only CPU). A row due at an earlier version can no longer be computed here
        (that version's learner is gone): its due row is deleted, with a warning (its own
        process, if alive, still stores it)."""
        with self._guard:
            claimed = set(self._claimed)
        job, gone = None, []
        for v, task in store.due(conn, self.name):
            if (created, v) in claimed:  # this process is on it
                continue
            snap = self.reader.cached if v == p.base_version else None
            if (
                self.enabled
                and snap is not None
                and snap.version == v
                and snap.info.get("created_at") == created
                and snap.has_task(task)
            ):
                learned = {t: e for t, e in sets.items() if snap.has_task(t)}
                if learned:
                    job = MatrixJob(v, task, created, snap.learner, learned, recovered=True)
                    with self._guard:
                        self._claimed.add((created, v))
                    continue
            gone.append(v)
            if self.enabled:
                log.warning(
                    "accuracy-matrix row of model %r at version %d (task %r) not stored yet, and no later "
                    "update can compute it (that version's learner is gone): missing from the matrix "
                    "unless the process that committed it stores it",
                    self.name,
                    v,
                    task,
                )
        store.forget_due(conn, self.name, gone)
        return job

    def submit(self, job: MatrixJob, done: Callable[[Transfer], None] | None = None, wait: float = 60.0) -> None:
        """Compute ``job``'s matrix row (and the rows it recovers, first) on the process's
        background worker; ``done(figures)`` is called after each row's commit."""
        with self._guard:
            for j in (*job.also, job):
                self._claimed.add((j.created, j.version))
        future = self.worker.submit(self._rows, job, done, wait=wait)
        with self._guard:
            self._futures.add(future)
        future.add_done_callback(self._finished)

    def _finished(self, future: Future[Any]) -> None:
        with self._guard:
            self._futures.discard(future)

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until every submitted matrix row is stored (tests, benchmarks)."""
        with self._guard:
            futures = list(self._futures)
        return not wait_futures(futures, timeout).not_done

    def _rows(self, job: MatrixJob, done: Callable[[Transfer], None] | None) -> None:
        for j in (*job.also, job):
            try:
                figures = self.store_row(j)
                if done is not None and figures is not None:
                    done(figures)
            except Exception as exc:  # noqa: BLE001 - the row stays due: the next update computes it
                log.warning(
                    "accuracy-matrix row of model %r at version %d not stored: %s",
                    self.name,
                    j.version,
                    type(exc).__name__,
                )
            finally:
                with self._guard:
                    self._claimed.discard((j.created, j.version))

    def store_row(self, job: MatrixJob) -> Transfer | None:
        """Score every set with the learner of ``job.version``, store the row in that version's
        log row, refresh the current scores older than it, and recompute the transfer figures
        from every stored row (kept in ``evaluation_state.matrix`` for the events and gauges).
        Returns the figures (None: stored already, or the model is gone or was created again)."""
        learner, kind = job.learner, job.learner.kind
        higher = MATRIX_METRIC[kind][1]
        if job.recovered:  # the process computing it may still be alive: nothing to do if it stored it
            with self.engine.connect() as conn:
                if store.matrix_stored(conn, self.name, job.version):
                    return None
        entries, scored = {}, {}
        for t, e in job.sets.items():
            self.foreground.give_way()
            s = score_rows(learner, t, e.X, e.y)
            if s is not None:
                scored[t] = scores(s)
                entries[t] = list(matrix_entry(kind, scored[t]))
        with self.bulk.begin() as conn:
            created = store.created_at(conn, self.name)
            state = store.state(conn, self.name, lock=True)
            if state is None or created != job.created:
                return None
            if not store.store_matrix_row(conn, self.name, job.version, job.task_id, entries):
                return None  # stored already (by another process: the first one wins), or gone
            store.forget_due(conn, self.name, [job.version])
            current = dict(state["scores"])
            for t, sc in scored.items():
                if (current.get(t) or {}).get("version", -1) < job.version:
                    current[t] = {"version": job.version, "scores": sc}
            rows = [MatrixRow.stored(r.task_id, r.matrix) for r in store.matrix_rows(conn, self.name)]
            figures = transfer(sorted({t for r in rows for t in r.scores}), rows, higher)
            summary = {"rows": len(rows), "task_id": job.task_id, **figures.as_dict()}
            store.write_state(conn, self.name, scores=current, matrix=summary, updated_at=store.now())
            notify(conn, self.name)
        return figures
