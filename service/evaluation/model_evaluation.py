"""Online evaluation of a stored model: its part in an update's commit, the evaluation sets
rescored after it, the posts of evaluation rows (definitions: docs/design.md, "Online
evaluation"). Metrics: :mod:`service.evaluation.scores`; SQL: :mod:`service.evaluation.store`; the
accuracy matrix's rows: :mod:`service.evaluation.matrix`, on the background worker of
:mod:`service.evaluation.worker`; what a commit hands them: :mod:`service.evaluation.jobs`;
reads: :mod:`service.evaluation.figures`.

* **Evaluation sets**: every committed update rescores the task it learned and the
  ``EVALUATION_RESCORE`` other sets whose scores are oldest, chosen in its own transaction
  (:meth:`ModelEvaluation.in_commit`) and scored after the commit, off the update lock, before
  it answers (:meth:`ModelEvaluation.rescore_sets`; a later version's score is never replaced).
* **Accuracy matrix**: an update that learns a new task makes that version's row due (a row of
  ``evaluation_due``, in its commit) and its request queues it
  (:meth:`service.evaluation.matrix.AccuracyMatrix.submit`); a row whose process died first is
  recovered by the model's next commit (:meth:`service.evaluation.matrix.AccuracyMatrix.recover`).
* **Log**: one ``evaluation_log`` row per committed update (the event stream replays it).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

import core
from core.preprocessing import as_matrix, as_targets, label_convention
from service.evaluation import store
from service.evaluation.jobs import Evaluated, EvaluationSet, MatrixJob, RescoreJob
from service.evaluation.matrix import AccuracyMatrix
from service.evaluation.scores import Transfer, add_sums, figures_of, reservoir, score_rows, scores, stored, to_json
from service.evaluation.worker import Foreground, MatrixWorker
from service.models.lifecycle import current_for_write
from service.store.commit import Commit, CommitParticipant
from service.store.prepared import Prepared
from service.store.watch import notify

if TYPE_CHECKING:
    from service.config import Settings
    from service.hosting import HostedModel
    from service.store.reads import ModelReader, Snapshot

# "service.store": the logger name is part of each of its log lines (their "logger" field).
log = logging.getLogger("service.store")


@dataclass(frozen=True)
class EvaluationSettings:
    """``EVALUATION_MAX_ROWS``, ``EVALUATION_RESCORE``, ``PREQUENTIAL_WINDOW``, ``EVALUATION_MATRIX``."""

    max_rows: int = 1000
    rescore: int = 8
    window: int = 100
    matrix: bool = True

    @classmethod
    def of(cls, settings: Settings) -> EvaluationSettings:
        return cls(
            int(settings.EVALUATION_MAX_ROWS),
            int(settings.EVALUATION_RESCORE),
            int(settings.PREQUENTIAL_WINDOW),
            bool(settings.EVALUATION_MATRIX),
        )


def _freshness(entry: dict[str, Any] | None, pending: int = -1) -> int:
    """The version a task's current score is of, or will be once a rescoring of this process
    under way stores it (``pending``)."""
    return max(int((entry or {}).get("version", -1)), pending)


class ModelEvaluation(CommitParticipant[Prepared]):
    """The evaluation of one stored model in one process: a cache of its evaluation sets (by
    the revision of ``evaluation_state``), its part in each commit, the rescoring after it and
    the posts of evaluation rows; its accuracy matrix's rows are :attr:`matrix`'s. ``reader``:
    the model's reader; ``foreground`` and ``worker``: the process's
    (:mod:`service.evaluation.worker`), for the matrix rows."""

    def __init__(
        self,
        reader: ModelReader,
        foreground: Foreground,
        worker: MatrixWorker,
        settings: EvaluationSettings = EvaluationSettings(),
    ):
        self.reader, self.name = reader, reader.name
        self.engine, self.bulk = reader.engine, reader.bulk
        self.settings = settings
        #: Its accuracy-matrix rows (:mod:`service.evaluation.matrix`).
        self.matrix = AccuracyMatrix(reader, foreground, worker, settings.matrix)
        self._sets: dict[str, EvaluationSet] = {}
        self._key: tuple[Any, int] | None = None  # (model created_at, revision) the cache holds
        self._guard = threading.Lock()
        self._pending: dict[str, int] = {}  # task id -> version of a rescoring under way (rescore_sets)

    # ------------------------------------------------------------------ cached sets
    def _load_sets(self, conn: Connection, created: Any, revision: int) -> dict[str, EvaluationSet]:
        """The model's evaluation sets at ``revision`` (read on ``conn``, incrementally when the
        cache holds an earlier revision of the same model)."""
        with self._guard:
            key = self._key
            if key == (created, revision):
                return self._sets
            sets, after = {}, None
            if key is not None and key[0] == created and key[1] < revision:
                sets, after = dict(self._sets), key[1]
            for r in store.sets(conn, self.name, after):
                sets[r.task_id] = EvaluationSet(r.X, r.y, int(r.n_received))
            self._sets, self._key = sets, (created, revision)
            return sets

    # ------------------------------------------------------------------ in the commit
    def in_commit(self, conn: Connection, commit: Commit[Prepared]) -> None:
        """In the update's commit transaction: :meth:`in_commits` of one update."""
        self.in_commits(conn, [commit])

    def in_commits(self, conn: Connection, commits: list[Commit[Prepared]]) -> None:
        """In the commit transaction of consecutive updates (one, or a group in version order),
        after the version compare-and-set: for each, choose the evaluation sets to rescore after
        the commit (the learned task's and the oldest others, passing over those this process is
        rescoring), make a new task's matrix row due, fold the batch's prequential sums into the
        task's and the model's, append the log row. The state row is locked and read once and
        written once, each task's sums once, the log rows in one statement: what is stored and
        each ``commit.prepared.evaluated`` (:class:`Evaluated`) are those of the updates
        committed one by one."""
        t0 = time.perf_counter()
        first = commits[0].prepared
        kind, created = first.learner.kind, first.info.get("created_at")
        state = conn.execute(store.LOCK_STATE, {"w_model": self.name, "w_task": first.task_id}).mappings().first()
        revision = int(state["revision"]) if state else 0
        sets = self._load_sets(conn, created, revision) if revision else {}
        current = dict(state["scores"]) if state else {}
        summary = dict(state["matrix"]) if state else {}
        overall = state["overall"] if state else None  # as stored (JSON)
        due = bool(state and state["n_due"])
        # task id -> [stored sums (JSON) or None: no row, whether the row exists, batches added]
        tasks: dict[str, list[Any]] = {}
        scored = {c.prepared.task_id for c in commits if c.prepared.prequential is not None}
        if scored:
            known = store.tasks_sums(conn, self.name, sorted(scored - {first.task_id}))  # {} for none
            if first.task_id in scored:
                stored_sums = state["task_sums"] if state else store.task_sums(conn, self.name, first.task_id)
                if stored_sums is not None:
                    known[first.task_id] = stored_sums
            tasks = {t: [known.get(t), known.get(t) is not None, 0] for t in scored}
        logs, dues = [], []
        for commit in commits:
            p, new_version = commit.prepared, commit.version
            learner, result = p.learner, p.result
            learned = [t for t in sets if t in learner.tasks_]
            pending = self._pending
            others = sorted(
                (t for t in learned if t != p.task_id),
                key=lambda t: (_freshness(current.get(t), pending.get(t, -1)), t),
            )[: self.settings.rescore]
            chosen = ([p.task_id] if p.task_id in sets else []) + others
            rescore = RescoreJob(new_version, created, learner, {t: sets[t] for t in chosen}) if chosen else None
            job = self.matrix.recover(conn, p, created, sets) if due else None
            if result.new_task and self.settings.matrix and learned:  # computed after the commit, off the lock
                new = MatrixJob(new_version, p.task_id, created, learner, {t: sets[t] for t in learned})
                dues.append(
                    {"model_name": self.name, "version": new_version, "task_id": p.task_id, "created_at": commit.at}
                )
                due = True
                self.matrix.claim(created, new_version)
                if job is not None:  # a row whose process died: computed first
                    new.also.append(job)
                job = new
            batch = p.prequential
            total = add_sums(stored(kind, overall), batch)
            overall = to_json(total)
            evaluation = None
            if sets:
                evaluation = {
                    "version": new_version,
                    "reason": "update",
                    "task_id": p.task_id,
                    "n_tasks": len(sets),
                    **figures_of(summary),
                }
            if batch is not None:
                t = tasks[p.task_id]
                t[0] = to_json(add_sums(stored(kind, t[0]), batch)) if t[0] is not None else batch.plain().to_json()
                t[2] += 1
            event = {
                "version": new_version,
                "task_id": p.task_id,
                "new_task": bool(result.new_task),
                "new_representative": bool(result.new_representative),
                "n_representatives": int(result.n_representatives),
                "prequential": scores(batch),
            }
            if p.source:
                event["source"] = p.source
            logs.append(
                {
                    "model_name": self.name,
                    "version": new_version,
                    "task_id": p.task_id,
                    "new_task": bool(result.new_task),
                    "event": event,
                    "batch": to_json(batch),
                    "overall": overall,
                    "evaluation": evaluation,
                    "matrix": None,
                    "created_at": commit.at,
                }
            )
            p.evaluated = Evaluated(event, evaluation, scores(total), Transfer.of(summary), len(chosen), job, rescore)
        if dues:
            conn.execute(store.INSERT_DUE, dues)
        last = commits[-1]
        values = {"version": last.version, "overall": overall, "matrix": summary, "updated_at": last.at}
        if state:  # the scores are not rewritten here: rescore_sets stores them
            conn.execute(store.UPDATE_STATE, {"w_model": self.name, **values})
        else:
            conn.execute(store.INSERT_STATE, {"model_name": self.name, "revision": 0, "scores": {}, **values})
        updates = [
            {"w_model": self.name, "w_task": task_id, "w_n": n, "updated_at": last.at, "sums": sums}
            for task_id, (sums, exists, n) in tasks.items()
            if exists
        ]
        inserts = [
            {"model_name": self.name, "task_id": task_id, "n_batches": n, "sums": sums, "updated_at": last.at}
            for task_id, (sums, exists, n) in tasks.items()
            if not exists
        ]
        if updates:  # each kind in one statement
            conn.execute(store.UPDATE_TASK_SUMS, updates)
        if inserts:
            conn.execute(store.INSERT_TASK_SUMS, inserts)
        conn.execute(store.INSERT_LOG, logs)
        share = (time.perf_counter() - t0) / len(commits)
        for commit in commits:
            commit.prepared.evaluation_seconds = share

    # ------------------------------------------------------------------ after the commit
    def rescore_sets(self, job: RescoreJob) -> int:
        """Score ``job``'s sets with the learner of ``job.version`` and store each score unless
        one of a later version is stored already (called by the committing request after its
        commit, with the update lock released, before it answers). Returns how many scores were
        stored (0: the model is gone or was created again)."""
        with self._guard:  # an update of this process meanwhile picks other sets
            for t in job.sets:
                self._pending[t] = max(self._pending.get(t, -1), job.version)
        try:
            scored = {}
            for t, e in job.sets.items():
                s = score_rows(job.learner, t, e.X, e.y)
                if s is not None:
                    scored[t] = scores(s)
            if not scored:
                return 0
            with self.bulk.begin() as conn:
                state = conn.execute(store.LOCK_SCORES, {"w_model": self.name}).mappings().first()
                if state is None or state["created"] != job.created:
                    return 0
                current = dict(state["scores"])
                stored = 0
                for t, sc in scored.items():
                    if (current.get(t) or {}).get("version", -1) < job.version:
                        current[t] = {"version": job.version, "scores": sc}
                        stored += 1
                if stored:
                    conn.execute(
                        store.UPDATE_SCORES, {"w_model": self.name, "scores": current, "updated_at": store.now()}
                    )
            return stored
        finally:
            with self._guard:
                for t in job.sets:
                    if self._pending.get(t) == job.version:
                        del self._pending[t]

    # ------------------------------------------------------------------ evaluation rows
    def add_rows(self, snap: Snapshot, task_id: str, X: Any, y: Any, d: int | None = None) -> dict[str, Any]:
        """Store labelled rows as ``task_id``'s evaluation set (the caller holds the model's
        update lock; ``snap``: its stored version). The batch's checks: :class:`core.InputError`
        (422) and nothing written. Returns the body of :class:`fcl3.schemas.EvaluationRowsOut`."""
        learner = snap.learner
        kind = learner.kind
        width: int | None
        if learner.is_fitted:
            width = learner.n_features_in_
        else:
            width = d if d is not None else next((e.X.shape[1] for e in self._sets.values()), None)
        Xm = as_matrix(X, width)
        ym = as_targets(y, Xm.shape[0], kind)
        if kind == "classification":
            record = getattr(learner, "tasks_", {}).get(task_id)
            label_convention(ym, record.labels if record is not None else "unknown")
        now = store.now()
        with self.bulk.begin() as conn:
            state = store.state(conn, self.name, lock=True)
            revision = (int(state["revision"]) if state else 0) + 1
            old = store.one_set(conn, self.name, task_id)
            if old is not None and old.X.shape[1] != Xm.shape[1]:
                raise core.InputError(
                    f"X has {Xm.shape[1]} features per row but the task's evaluation rows have {old.X.shape[1]}"
                )
            if old is not None and kind == "classification":
                label_convention(ym, label_convention(old.y, "unknown"))
            n_seen = int(old.n_received) if old is not None else 0
            Xk, yk = reservoir(
                old.X if old else None, old.y if old else None, n_seen, Xm, ym, self.settings.max_rows, task_id
            )
            n_received = n_seen + Xm.shape[0]
            store.write_set(
                conn,
                self.name,
                task_id,
                old is None,
                n_received=n_received,
                X=Xk,
                y=yk,
                revision=revision,
                updated_at=now,
            )
            current = dict(state["scores"]) if state else {}
            sums = score_rows(learner, task_id, Xk, yk) if learner.is_fitted else None
            if sums is not None:
                current[task_id] = {"version": snap.version, "scores": scores(sums)}
            if state:
                store.write_state(conn, self.name, revision=revision, scores=current, updated_at=now)
            else:
                store.insert_state(
                    conn,
                    self.name,
                    revision=revision,
                    version=snap.version,
                    scores=current,
                    overall=None,
                    matrix={},
                    updated_at=now,
                )
            n_tasks = store.count_sets(conn, self.name)
            notify(conn, self.name)
        return {
            "task_id": task_id,
            "n_rows": int(Xk.shape[0]),
            "n_received": n_received,
            "version": snap.version,
            "score": scores(sums),
            "n_tasks": n_tasks,
            "revision": revision,
        }


def add_evaluation_rows(model: HostedModel, task_id: str, X: Any, y: Any) -> dict[str, Any]:
    """Store labelled rows as ``task_id``'s evaluation set (never learned: the model's version
    and the task's samples do not move), scored at once if the task is learned. Under the
    model's update lock (:class:`service.writing.locks.LockBusy`: 503), checked like a batch
    (``InputError``: 422, nothing stored). Returns the body of
    :class:`fcl3.schemas.EvaluationRowsOut`."""
    with model.locks.hold(model.name):
        snap = current_for_write(model)
        d = (snap.info.get("settings") or {}).get("d")
        out = model.evaluation.add_rows(snap, task_id, X, y, d)
    log.info(
        "evaluation rows stored",
        extra={
            "event": "evaluation_rows",
            "model": model.name,
            "task": task_id,
            "n_rows": out["n_rows"],
            "n_received": out["n_received"],
        },
    )
    model.wake()
    return out
