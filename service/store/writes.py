"""Guarded writes of one stored model: create it, commit an update, delete it.
What an update computed before its commit is :mod:`service.store.prepared`; the features
that write in a commit's transaction take part through :mod:`service.store.commit`.

An update rewrites the model row (its global arrays; the task order lives in the task rows'
``position``), the one task it touched and appends one batch: its cost does not grow with the
number of tasks. The caller (:mod:`service.learning.group_commit`) holds the update lock around
the update learned on a private copy (:mod:`service.learning.prepare`) and
:meth:`ModelWriter.commit` — or, for batches that queued meanwhile (group commit), around one
prepared update per batch and one :meth:`ModelWriter.commit_group` that writes them all in
one transaction::

    with lock(model):                       # Redis or in-process; short wait -> 503
        snapshot = refresh to the stored version
        prepared = prepare(snapshot, task_id, X, y)  # learns on a private copy; InputError -> 422
        BEGIN
          UPDATE models SET version = v+1, ... WHERE name = :m AND version = v
          -- 0 rows: someone committed since we read (our lock had expired) -> StaleWrite
          UPSERT tasks (only task_id);  INSERT batches (version v+1)
          participants' part, e.g.:          -- CommitParticipant.in_commit(conn, commit)
            evaluation: sets to rescore chosen, prequential sums, log row  (service.evaluation)
            UPDATE idempotency_keys SET response  (with an Idempotency-Key: service.writing.idempotency)
          pg_notify('fcl3_models', :m)      -- PostgreSQL: the other processes' version watch
        COMMIT                              # only now is the batch acknowledged
    [evaluation sets rescored, lock released]  # then the answer

The lock only saves wasted work; the version compare-and-set is the guard (see
:mod:`service.writing.locks`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
from sqlalchemy import Connection, bindparam, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

import core
from fcl3.records import Column
from service.db import check_store
from service.store.commit import Commit, CommitParticipant
from service.store.prepared import Prepared, PreparedTakeBack
from service.store.reads import ModelReader, Snapshot
from service.store.results import learner_summary
from service.store.tables import batches_t, columns_t, models_t, take_backs_t, tasks_t
from service.store.task_rows import TaskRows, group_task_rows, take_back_task_rows, task_positions
from service.store.watch import notify


class StaleWrite(Exception):
    """The model moved since this writer read it (its lock expired): the commit is refused."""


class ModelExists(Exception):
    """A model of that name already exists (answered 409)."""

    def __init__(self, name: str):
        super().__init__(f"model {name!r} already exists: pick another name, or DELETE /models/{name} first")
        self.name = name


@dataclass
class NewModel:
    """A new model's rows: its learner at ``version``, its settings, and optionally each task's
    counters and the batches ``1..version`` behind it (a fork copies them; an import has none)."""

    learner: core.LifelongLearner
    settings: dict[str, Any]
    version: int = 0
    summary: dict[str, Any] | None = None
    tasks: dict[str, dict[str, Any]] | None = None  # task id -> {"version", "n_batches", "last_update"}
    batches: list[dict[str, Any]] | None = None  # {"task_id", "version", "X", "y"[, "taken_back", ...]}
    take_backs: list[dict[str, Any]] | None = None  # rows of take_backs (service.models.history)
    origin: dict[str, Any] | None = None
    #: The vocabulary of a model with a feature schema (:mod:`service.records.vocabulary`), in order.
    columns: Sequence[Column] = ()


def insert_columns(conn: Connection, name: str, start: int, columns: Sequence[Column]) -> None:
    """Append ``columns`` to model ``name``'s vocabulary at ``start, start + 1, ...`` in ``conn``'s transaction."""
    if columns:
        conn.execute(
            insert(columns_t),
            [
                {"model_name": name, "column": start + i, "feature": c.feature, "role": c.role, "level": c.level}
                for i, c in enumerate(columns)
            ],
        )


def _now() -> datetime:
    return datetime.now(timezone.utc)


def stored_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """A model row's meta: the state's, without ``task_order`` (each task row keeps its
    ``position``; :mod:`service.store.reads` rebuilds the list), so a commit writes nothing whose
    size grows with the number of tasks."""
    return {k: v for k, v in meta.items() if k != "task_order"}


# The commit's statements, built once: the SET clause comes from the parameters given to
# ``execute`` (column names), the WHERE clause from the ``w_*`` parameters. Building and
# coercing a statement on every commit cost more than a PostgreSQL round trip.
_UPDATE_MODEL = update(models_t).where(
    models_t.c.name == bindparam("w_name"), models_t.c.version == bindparam("w_version")
)
_UPDATE_TASK = (
    update(tasks_t)
    .where(tasks_t.c.model_name == bindparam("w_name"), tasks_t.c.task_id == bindparam("w_task"))
    .values(n_batches=tasks_t.c.n_batches + bindparam("w_n"))
)
_REWRITE_TASK = update(tasks_t).where(
    tasks_t.c.model_name == bindparam("w_name"), tasks_t.c.task_id == bindparam("w_task")
)
_INSERT_TASK = insert(tasks_t)
_DELETE_TASKS = delete(tasks_t).where(
    tasks_t.c.model_name == bindparam("w_name"), tasks_t.c.task_id.in_(bindparam("w_tasks", expanding=True))
)
_INSERT_BATCH = insert(batches_t)


class ModelWriter:
    """Writes of the model that ``reader`` reads; a commit becomes the reader's cached snapshot."""

    def __init__(self, reader: ModelReader, model_settings: dict[str, Any] | None):
        """``model_settings``: what the model is created with when its row does not exist
        (:meth:`service.config.Settings.model_settings`; None: a model that only ``POST /models``
        creates); a stored model keeps its own."""
        self.reader = reader
        self.name = reader.name
        self.model_settings = model_settings

    def create(self, new: NewModel, also: Sequence[Callable[[Connection], None]] = ()) -> None:
        """Write a new model (its rows, batches, vocabulary, and ``also``'s parts: e.g. a fork's first
        checkpoint) in one transaction; :class:`ModelExists` if the name is taken (nothing written)."""
        learner = new.learner
        state = learner.get_state()
        now = _now()
        summary = new.summary if new.summary is not None else learner_summary(learner)
        infos = new.tasks or {}
        try:
            with self.reader.bulk.begin() as conn:
                if conn.execute(select(models_t.c.version).where(models_t.c.name == self.name)).first():
                    raise ModelExists(self.name)
                conn.execute(
                    insert(models_t).values(
                        name=self.name,
                        version=new.version,
                        estimator=state.estimator,
                        kind=learner.kind,
                        settings=new.settings,
                        params=state.params,
                        meta=stored_meta(state.meta),
                        arrays=state.arrays,
                        format_version=state.format_version,
                        summary=summary,
                        origin=new.origin,
                        created_at=now,
                        updated_at=now,
                    )
                )
                positions = task_positions(state, learner)
                for task_id, task in state.tasks.items():
                    info = infos.get(task_id) or {}
                    conn.execute(
                        insert(tasks_t).values(
                            model_name=self.name,
                            task_id=task_id,
                            version=int(info.get("version", new.version)),
                            n_samples=int(learner.tasks_[task_id].n_samples),
                            n_batches=int(info.get("n_batches", 0)),
                            position=positions[task_id],
                            arrays=task["arrays"],
                            meta=task["meta"],
                            last_update=info.get("last_update") or {},
                            created_at=now,
                            updated_at=now,
                        )
                    )
                for b in new.batches or ():
                    conn.execute(
                        insert(batches_t).values(
                            model_name=self.name,
                            task_id=b["task_id"],
                            version=int(b["version"]),
                            n_samples=int(np.shape(b["X"])[0]),
                            X=np.asarray(b["X"], dtype=float),
                            y=np.asarray(b["y"], dtype=float),
                            taken_back=b.get("taken_back"),
                            source=b.get("source"),
                            refits_deferred=bool(b.get("refits_deferred", False)),
                            created_at=now,
                        )
                    )
                for tb in new.take_backs or ():
                    conn.execute(insert(take_backs_t).values(**{**tb, "model_name": self.name}))
                insert_columns(conn, self.name, 0, new.columns)
                for part in also:
                    part(conn)
                notify(conn, self.name)
        except IntegrityError:
            raise ModelExists(self.name) from None  # created by someone else meanwhile

    def delete(self, also: Sequence[Callable[[Connection, str], None]] = ()) -> bool:
        """Remove the model (one transaction); whether it existed. Its tasks, batches and
        evaluation go with it through their foreign keys (``ON DELETE CASCADE``; SQLite
        enforces them with ``PRAGMA foreign_keys=ON``, :func:`service.db.make_engine`); its
        rows of no foreign key go by ``also`` (each called with the transaction and the name). A
        writer of this model that commits later finds no row and is refused (stale)."""
        with self.reader.bulk.begin() as conn:
            for part in also:
                part(conn, self.name)
            gone = conn.execute(delete(models_t).where(models_t.c.name == self.name)).rowcount
            if gone:
                notify(conn, self.name)
        return bool(gone)

    def _set_model(
        self,
        conn: Connection,
        p: Prepared | PreparedTakeBack,
        new_version: int,
        now: datetime,
        not_applied: str,
        last: Prepared | PreparedTakeBack | None = None,
    ) -> None:
        """The model row at ``new_version`` (with ``last``'s state and summary, by default
        ``p``'s), if it is still at ``p.base_version`` (the compare-and-set that guards every
        write), else :class:`StaleWrite`."""
        last = last if last is not None else p
        state = last.state
        assert state is not None  # exported by the commit before the model row is written
        res = conn.execute(
            _UPDATE_MODEL,
            {
                "w_name": self.name,
                "w_version": p.base_version,
                "version": new_version,
                "params": state.params,
                "meta": stored_meta(state.meta),
                "arrays": state.arrays,
                "format_version": state.format_version,
                "summary": last.summary,
                "updated_at": now,
            },
        )
        if res.rowcount != 1:
            raise StaleWrite(
                f"model {self.name!r} changed since version {p.base_version} was read (the update lock "
                f"expired before the commit); {not_applied} — retry"
            )

    def _write_tasks(self, conn: Connection, rows: TaskRows, not_applied: str) -> None:
        """``rows`` in ``conn``'s transaction, each kind in one statement; :class:`StaleWrite` if
        a row to update (a batch's, a take-back's) is missing."""
        if rows.deletes:
            conn.execute(_DELETE_TASKS, {"w_name": self.name, "w_tasks": rows.deletes})
        if rows.inserts:
            conn.execute(_INSERT_TASK, rows.inserts)
        for statement, kind in (
            (_UPDATE_TASK, rows.updates),
            (_REWRITE_TASK, rows.rewrites),
            (_REWRITE_TASK, rows.remeasures),
            (_REWRITE_TASK, rows.moves),
        ):
            if kind and conn.execute(statement, kind).rowcount != len(kind):
                raise StaleWrite(f"a task row is missing; {not_applied} — retry")

    def _serve(self, p: Prepared | PreparedTakeBack, new_version: int, now: datetime) -> int:
        """After a commit: acknowledged only if the store is still there, then this process's
        cached snapshot; the new version."""
        check_store(self.reader.bulk)  # not acknowledged if its file vanished during the commit
        state = p.state
        assert state is not None  # exported by the commit
        info = {
            **p.info,
            "version": new_version,
            "params": state.params,
            "meta": stored_meta(state.meta),
            "format_version": state.format_version,
            "summary": p.summary,
            "updated_at": now,
        }
        self.reader.offer(Snapshot(new_version, p.learner, info))
        return new_version

    def commit(self, p: Prepared, participants: Sequence[CommitParticipant[Prepared]] = ()) -> int:
        """Write the update in one transaction, guarded by the version compare-and-set;
        returns the new version, which this process then serves. Each of ``participants``
        writes its part in the same transaction, after the update's rows (one that raises rolls
        the whole commit back). One batch: :meth:`commit_group` of one."""
        return self.commit_group([p], [participants])[0]

    def commit_group(
        self, group: Sequence[Prepared], participants: Sequence[Sequence[CommitParticipant[Prepared]]]
    ) -> list[int]:
        """Write consecutive updates in ONE transaction: ``group[i]`` was prepared on the learner
        of ``group[i-1]`` (the first on the stored version), so batch ``i`` gets the model version
        ``base + i + 1``, its own batch row, its own answer and its participants
        (``participants[i]``; each participant is called once, by
        :meth:`CommitParticipant.in_commits` with the commits of its batches, in the order the
        participants first appear, each seeing the rows of those before it).
        The model row moves from ``base`` to ``base + len(group)`` with one compare-and-set; each
        task the group touched is written once, with the last learner's state and the counters
        of every batch of it. Returns the versions; the last one is then served."""
        base = group[0].base_version
        versions = [base + i + 1 for i in range(len(group))]
        last = group[-1]
        now = _now()
        rows = group_task_rows(self.name, group, versions, now)
        with self.reader.bulk.begin() as conn:
            self._set_model(conn, group[0], versions[-1], now, "this batch was NOT applied", last)
            self._write_tasks(conn, rows, "this batch was NOT applied")
            conn.execute(
                _INSERT_BATCH,
                [
                    {
                        "model_name": self.name,
                        "task_id": p.task_id,
                        "version": v,
                        "n_samples": int(p.X.shape[0]),
                        "X": p.X,
                        "y": p.y,
                        "source": p.source,
                        "refits_deferred": p.refits_deferred,
                        "created_at": now,
                    }
                    for p, v in zip(group, versions, strict=True)
                ],
            )
            # each participant once, with the commits of its batches, in the order they first appear
            its: dict[int, tuple[CommitParticipant[Prepared], list[Commit[Prepared]]]] = {}
            for p, v, parts in zip(group, versions, participants, strict=True):
                commit = Commit(p, v, now, p.answer)
                for part in parts:
                    its.setdefault(id(part), (part, []))[1].append(commit)
            for part, commits in its.values():
                part.in_commits(conn, commits)
            notify(conn, self.name)
        self._serve(last, versions[-1], now)
        return versions

    def commit_take_back(
        self, p: PreparedTakeBack, participants: Sequence[CommitParticipant[PreparedTakeBack]] = ()
    ) -> int:
        """Write a take-back in one transaction, guarded like :meth:`commit` (the version
        compare-and-set, and the batch still learned): the model row, the task rows the rebuilt
        model changes (:func:`~service.store.task_rows.take_back_task_rows`: compared with the
        stored rows, read in this transaction; a task gone deleted), the batch marked taken back,
        the take-back's row, then ``participants``. Returns the new version, which this process
        then serves; ``p.answer`` is the answer."""
        new_version = p.base_version + 1
        now = _now()
        p.answer = p.answer_at(new_version)
        with self.reader.bulk.begin() as conn:
            self._set_model(conn, p, new_version, now, "the batch was NOT taken back")
            res = conn.execute(
                update(batches_t)
                .where(
                    batches_t.c.model_name == self.name,
                    batches_t.c.version == p.batch_version,
                    batches_t.c.taken_back.is_(None),
                )
                .values(taken_back=new_version)
            )
            if res.rowcount != 1:
                raise StaleWrite(
                    f"batch {p.batch_version} of model {self.name!r} changed while it was taken back; "
                    "nothing was changed — retry"
                )
            conn.execute(
                insert(take_backs_t).values(
                    model_name=self.name,
                    version=new_version,
                    batch_version=p.batch_version,
                    task_id=p.task_id,
                    n_samples=p.n_samples,
                    task_removed=p.task_removed,
                    n_replayed=p.n_replayed,
                    created_at=now,
                )
            )
            rows = take_back_task_rows(conn, self.name, p, new_version, now)
            self._write_tasks(conn, rows, "the batch was NOT taken back")
            p.rows_written = rows.count()
            commit = Commit(p, new_version, now, p.answer)
            for part in participants:
                part.in_commit(conn, commit)
            notify(conn, self.name)
        return self._serve(p, new_version, now)
