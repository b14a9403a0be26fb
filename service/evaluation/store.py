"""The online evaluation's storage: its tables and the statements that read and write them
(SQL only; what they mean is :mod:`service.evaluation`'s).

Every statement is built once: the SET clause comes from the parameters given to ``execute``
(column names), the WHERE clause from the ``w_*`` ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Connection, Result, RowMapping, bindparam, delete, func, insert, select, update

from service.store.tables import due_t, log_t, models_t, preq_t, sets_t, state_t


def now() -> datetime:
    return datetime.now(timezone.utc)


# In the commit: the model's evaluation_state row locked (a no-op UPDATE: PostgreSQL's row
# lock, SQLite's write lock) and read back with the updated task's prequential sums and the
# number of matrix rows still due, in one round trip. Those sums need no lock of their own: only
# a commit of the model writes them, and the commit already holds the model row's lock.
LOCK_STATE = (
    update(state_t)
    .where(state_t.c.model_name == bindparam("w_model"))
    .values(revision=state_t.c.revision)
    .returning(
        *state_t.c,
        select(preq_t.c.sums)
        .where(preq_t.c.model_name == bindparam("w_model"), preq_t.c.task_id == bindparam("w_task"))
        .scalar_subquery()
        .label("task_sums"),
        select(func.count())
        .select_from(due_t)
        .where(due_t.c.model_name == bindparam("w_model"))
        .scalar_subquery()
        .label("n_due"),
    )
)
UPDATE_STATE = update(state_t).where(state_t.c.model_name == bindparam("w_model"))
INSERT_STATE = insert(state_t)
UPDATE_TASK_SUMS = (
    update(preq_t)
    .where(preq_t.c.model_name == bindparam("w_model"), preq_t.c.task_id == bindparam("w_task"))
    .values(n_batches=preq_t.c.n_batches + bindparam("w_n"))
)
INSERT_TASK_SUMS = insert(preq_t)
INSERT_LOG = insert(log_t)
INSERT_DUE = insert(due_t)
# After the commit: the state row locked and read with the model's identity (its created_at),
# in one round trip, then its scores written.
LOCK_SCORES = (
    update(state_t)
    .where(state_t.c.model_name == bindparam("w_model"))
    .values(revision=state_t.c.revision)
    .returning(
        state_t.c.scores,
        select(models_t.c.created_at).where(models_t.c.name == bindparam("w_model")).scalar_subquery().label("created"),
    )
)
UPDATE_SCORES = update(state_t).where(state_t.c.model_name == bindparam("w_model"))


def state(conn: Connection, name: str, lock: bool = False) -> RowMapping | None:
    """The model's ``evaluation_state`` row; with ``lock``, locked for this transaction first
    (a no-op ``UPDATE``: PostgreSQL's row lock, and SQLite's write lock taken *before* the
    read, so no other writer commits between the read and this transaction's write)."""
    if lock:
        conn.execute(update(state_t).where(state_t.c.model_name == name).values(revision=state_t.c.revision))
    return conn.execute(select(state_t).where(state_t.c.model_name == name)).mappings().first()


def task_sums(conn: Connection, name: str, task_id: str) -> dict[str, Any] | None:
    return conn.execute(select(preq_t.c.sums).where(preq_t.c.model_name == name, preq_t.c.task_id == task_id)).scalar()


def tasks_sums(conn: Connection, name: str, task_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The stored prequential sums of those of ``task_ids`` that have a row."""
    if not task_ids:
        return {}
    return dict(
        conn.execute(
            select(preq_t.c.task_id, preq_t.c.sums).where(preq_t.c.model_name == name, preq_t.c.task_id.in_(task_ids))
        ).all()
    )


def sets(conn: Connection, name: str, after_revision: int | None = None) -> Result[Any]:
    """The model's evaluation sets (those written after ``after_revision`` only, if given)."""
    q = select(sets_t.c.task_id, sets_t.c.X, sets_t.c.y, sets_t.c.n_received).where(sets_t.c.model_name == name)
    if after_revision is not None:
        q = q.where(sets_t.c.revision > after_revision)
    return conn.execute(q)


def due(conn: Connection, name: str) -> list[tuple[int, str]]:
    """The model's accuracy-matrix rows still due: (version, new task), oldest first."""
    return [
        (int(v), t)
        for v, t in conn.execute(
            select(due_t.c.version, due_t.c.task_id).where(due_t.c.model_name == name).order_by(due_t.c.version)
        )
    ]


def forget_due(conn: Connection, name: str, versions: list[int]) -> None:
    if versions:
        conn.execute(delete(due_t).where(due_t.c.model_name == name, due_t.c.version.in_(versions)))


def matrix_stored(conn: Connection, name: str, version: int) -> bool:
    """Whether the accuracy-matrix row of ``version`` is stored (or its log row is gone)."""
    return (
        conn.execute(
            select(log_t.c.version).where(
                log_t.c.model_name == name, log_t.c.version == version, log_t.c.matrix.is_(None)
            )
        ).first()
        is None
    )


def created_at(conn: Connection, name: str) -> Any:
    return conn.execute(select(models_t.c.created_at).where(models_t.c.name == name)).scalar()


def store_matrix_row(conn: Connection, name: str, version: int, task_id: str, entries: dict[str, Any]) -> bool:
    """Store ``version``'s accuracy-matrix row unless it is stored already (the first wins)."""
    res = conn.execute(
        update(log_t)
        .where(
            log_t.c.model_name == name, log_t.c.version == version, log_t.c.task_id == task_id, log_t.c.matrix.is_(None)
        )
        .values(matrix=entries)
    )
    return res.rowcount == 1


def matrix_rows(conn: Connection, name: str) -> Sequence[Any]:
    """(version, task_id, matrix) of every stored accuracy-matrix row, by version."""
    return conn.execute(
        select(log_t.c.version, log_t.c.task_id, log_t.c.matrix)
        .where(log_t.c.model_name == name, log_t.c.matrix.is_not(None))
        .order_by(log_t.c.version)
    ).all()


def write_state(conn: Connection, name: str, **values: Any) -> None:
    conn.execute(update(state_t).where(state_t.c.model_name == name).values(**values))


def insert_state(conn: Connection, name: str, **values: Any) -> None:
    conn.execute(insert(state_t).values(model_name=name, **values))


def one_set(conn: Connection, name: str, task_id: str) -> Any:
    return conn.execute(
        select(sets_t.c.X, sets_t.c.y, sets_t.c.n_received).where(
            sets_t.c.model_name == name, sets_t.c.task_id == task_id
        )
    ).first()


def write_set(conn: Connection, name: str, task_id: str, new: bool, **values: Any) -> None:
    if new:
        conn.execute(insert(sets_t).values(model_name=name, task_id=task_id, created_at=values["updated_at"], **values))
    else:
        conn.execute(update(sets_t).where(sets_t.c.model_name == name, sets_t.c.task_id == task_id).values(**values))


def count_sets(conn: Connection, name: str) -> int:
    return len(conn.execute(select(sets_t.c.task_id).where(sets_t.c.model_name == name)).all())


def overall(conn: Connection, name: str) -> dict[str, Any] | None:
    return conn.execute(select(state_t.c.overall).where(state_t.c.model_name == name)).scalar()


def current_scores(conn: Connection, name: str) -> dict[str, Any] | None:
    return conn.execute(select(state_t.c.scores).where(state_t.c.model_name == name)).scalar()


def recent_batches(conn: Connection, name: str, window: int) -> list[dict[str, Any]]:
    """The sums of the ``window`` latest scored batches."""
    return [
        b
        for (b,) in conn.execute(
            select(log_t.c.batch)
            .where(log_t.c.model_name == name, log_t.c.batch.is_not(None))
            .order_by(log_t.c.version.desc())
            .limit(window)
        )
    ]


def set_sizes(conn: Connection, name: str) -> Sequence[Any]:
    return conn.execute(
        select(sets_t.c.task_id, sets_t.c.n_received, sets_t.c.y).where(sets_t.c.model_name == name)
    ).all()


def series(conn: Connection, name: str, limit: int, offset: int = 0) -> Sequence[Any]:
    """The ``limit`` latest log rows' prequential sums after the ``offset`` latest, newest first."""
    return conn.execute(
        select(log_t.c.version, log_t.c.task_id, log_t.c.new_task, log_t.c.batch, log_t.c.overall, log_t.c.event)
        .where(log_t.c.model_name == name)
        .order_by(log_t.c.version.desc())
        .limit(limit)
        .offset(offset)
    ).all()


def batch_versions(conn: Connection, name: str, task_ids: Sequence[str]) -> dict[str, int]:
    """The version of each task's latest batch (learned, or taken back) among ``task_ids``."""
    if not task_ids:
        return {}
    rows = conn.execute(
        select(log_t.c.task_id, func.max(log_t.c.version))
        .where(log_t.c.model_name == name, log_t.c.task_id.in_(list(task_ids)))
        .group_by(log_t.c.task_id)
    ).all()
    return {str(task): int(version) for task, version in rows}


def series_length(conn: Connection, name: str) -> int:
    """The log rows of ``name``: the versions of its prequential series."""
    return int(conn.execute(select(func.count()).select_from(log_t).where(log_t.c.model_name == name)).scalar_one())


# ----------------------------------------------------------------------------- a take-back (service.take_back)
def scored_batches(conn: Connection, name: str, after: int = 0, upto: int | None = None) -> Sequence[Any]:
    """The log rows with a batch's sums of versions after ``after`` (up to ``upto``, if given),
    in version order: ``(version, task_id, batch)``."""
    q = select(log_t.c.version, log_t.c.task_id, log_t.c.batch).where(
        log_t.c.model_name == name, log_t.c.batch.is_not(None), log_t.c.version > after
    )
    if upto is not None:
        q = q.where(log_t.c.version <= upto)
    return conn.execute(q.order_by(log_t.c.version)).all()


def unscore(conn: Connection, name: str, version: int) -> None:
    """The batch of ``version`` no longer counts in the prequential figures (taken back)."""
    conn.execute(update(log_t).where(log_t.c.model_name == name, log_t.c.version == version).values(batch=None))


def write_task_sums(
    conn: Connection, name: str, task_id: str, sums: dict[str, Any] | None, n_batches: int, at: datetime
) -> None:
    """A task's prequential sums recomputed (None: no scored batch left, the row goes)."""
    where = (preq_t.c.model_name == name, preq_t.c.task_id == task_id)
    if sums is None:
        conn.execute(delete(preq_t).where(*where))
    else:
        conn.execute(update(preq_t).where(*where).values(sums=sums, n_batches=n_batches, updated_at=at))
