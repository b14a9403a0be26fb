"""Checkpoints: exact states of a model at past versions, where a take-back's replay starts.

A checkpoint is the model at one version as the engine exports it (the state file of
:mod:`service.models.state_files`, no pickle), with each task's counters and the model's
summary: restoring it and learning on is bit for bit never having stopped. One is written in
the commit of the update whose version crosses a multiple of :data:`EVERY` (the last version of
a group commit), by every take-back (the rebuilt model, after its commit and off the lock:
:func:`store_committed`), by a fork (the version it starts at) and by an import (the imported
state, so its later batches can be taken back).

**Which are kept** (:func:`kept`): a checkpoint's bucket is ``version // EVERY``, and a bucket
keeps at most one (its oldest; the newest checkpoint is always kept). Every bucket of the
``DENSE * EVERY`` versions before the newest checkpoint keeps one, so a take-back of one of the
newest 1,000 batches replays at most about ``EVERY`` batches more than it goes back; further
back, for each level ``j = 0, 1, ...`` the :data:`KEEP` newest buckets that are multiples of
``2**j`` keep one. The rest are deleted by the write of a new one (:func:`prune`). A model of
``n`` versions keeps at most ``1 + (DENSE + 1) + KEEP * (log2(n / EVERY) + 2)`` states (23 at
100,000 versions without take-backs, 11 of them over the newest 1,000), and the newest
checkpoint before a batch ``a`` versions back is at most about ``max(EVERY, 2 a / KEEP)``
versions before it: the replay of a take-back grows with how far back the batch is, not with
the stream's length.

**Which may be used** (:func:`newest_before`): the checkpoint at ``c`` is the model at ``c``; it
rebuilds the model at a later version only if no batch ``<= c`` was taken back after ``c``. The
checkpoints that hold a batch taken back are deleted by the next checkpoint's write
(:func:`prune`; a take-back's own, after its commit); the check is made again when one is read,
so a checkpoint written late, or one left by a crash before that write, is never used wrongly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, delete, insert, select
from sqlalchemy.exc import IntegrityError

import core
from service.models import state_files
from service.models.history import Rebuilt
from service.store.commit import Commit, CommitParticipant
from service.store.prepared import Prepared
from service.store.tables import checkpoints_t, models_t, take_backs_t, tasks_t

#: Versions between two checkpoints of the newest level (a replay from one is at most this long
#: for a batch of the last ``EVERY``): measured in docs/lab/take_back.md.
EVERY = 100
#: Checkpoints kept per level of the logarithmic schedule.
KEEP = 4
#: Over the ``DENSE * EVERY`` versions before the newest checkpoint, each bucket of :data:`EVERY`
#: versions keeps one: a take-back of one of the newest 1,000 batches replays at most ~``EVERY`` more.
DENSE = 10


def due(before: int, after: int, every: int | None = None) -> bool:
    """Whether a commit from version ``before`` to ``after`` crosses a multiple of ``every``."""
    every = every or EVERY
    return after // every > before // every


def kept(
    versions: Iterable[int], every: int | None = None, keep: int | None = None, dense: int | None = None
) -> set[int]:
    """The checkpoint versions the schedule keeps of ``versions``: the newest; one in each
    bucket (``version // every``) of the ``dense * every`` versions before the newest; and for
    each level ``j = 0, 1, ...`` one in each of the ``keep`` newest buckets that are multiples
    of ``2**j``. The one kept of a bucket is its oldest (a multiple of ``every`` when the
    update that crossed it wrote it and no take-back since deleted it), so a batch of those
    versions has a checkpoint at most about ``every`` versions before it."""
    every, keep, dense = every or EVERY, keep or KEEP, dense or DENSE
    vs = sorted(set(versions))
    if not vs:
        return set()
    first: dict[int, int] = {}  # bucket -> its oldest checkpoint
    for v in vs:
        first.setdefault(v // every, v)
    buckets = sorted(first, reverse=True)
    low = (vs[-1] - dense * every) // every  # the bucket of the version ``dense * every`` before the newest
    out = {vs[-1]} | {first[b] for b in buckets if b >= low}
    step = 1
    while True:
        out.update(first[b] for b in [b for b in buckets if b % step == 0][:keep])
        if step * every > vs[-1]:
            return out
        step *= 2


def usable(version: int, take_backs: Iterable[dict[str, Any]]) -> bool:
    """Whether the checkpoint at ``version`` still rebuilds the model: no batch it holds was
    taken back after it."""
    return not any(int(t["version"]) > version >= int(t["batch_version"]) for t in take_backs)


@dataclass(frozen=True)
class Checkpoint:
    """The model at ``version``, restored: a replay continues from :attr:`rebuilt`."""

    version: int
    rebuilt: Rebuilt


def newest_before(engine: Engine, name: str, before: int, take_backs: Iterable[dict[str, Any]]) -> Checkpoint | None:
    """The newest usable checkpoint of model ``name`` below version ``before``, restored."""
    tbs = list(take_backs)
    with engine.connect() as conn:
        versions = conn.execute(
            select(checkpoints_t.c.version)
            .where(checkpoints_t.c.model_name == name, checkpoints_t.c.version < before)
            .order_by(checkpoints_t.c.version.desc())
        ).scalars()
        version = next((int(v) for v in versions if usable(int(v), tbs)), None)
        if version is None:
            return None
        data = conn.execute(
            select(checkpoints_t.c.state).where(checkpoints_t.c.model_name == name, checkpoints_t.c.version == version)
        ).scalar_one()
    state, service = state_files.read_npz(bytes(data))
    learner = core.load_state(state)
    summary = {k: v for k, v in (service.get("summary") or {}).items() if k in ("representatives", "n_representatives")}
    return Checkpoint(version, Rebuilt(learner, summary, dict(service.get("tasks") or {})))


def state_file(
    state: core.ModelState, version: int, summary: dict[str, Any], counters: dict[str, dict[str, Any]]
) -> bytes:
    """The checkpoint of ``state`` at ``version``: its state file, with the model's ``summary``
    and each task's ``counters`` (``version``, ``n_batches``, ``last_update``)."""
    return state_files.to_npz(state, {"version": version, "summary": summary, "tasks": counters})


def write(
    conn: Connection, name: str, version: int, state: core.ModelState, summary: dict[str, Any], every: int | None = None
) -> None:
    """Store the model's ``state`` at ``version`` in ``conn``'s transaction (each task's counters
    read from its row, as the commit left it), then :func:`prune`."""
    counters = {
        r.task_id: {"version": int(r.version), "n_batches": int(r.n_batches), "last_update": r.last_update}
        for r in conn.execute(
            select(tasks_t.c.task_id, tasks_t.c.version, tasks_t.c.n_batches, tasks_t.c.last_update).where(
                tasks_t.c.model_name == name
            )
        )
    }
    store(conn, name, version, state_file(state, version, summary, counters), every)


def store(conn: Connection, name: str, version: int, data: bytes, every: int | None = None) -> None:
    """Store the checkpoint ``data`` (:func:`state_file`) at ``version`` in ``conn``'s
    transaction, then :func:`prune`."""
    conn.execute(delete(checkpoints_t).where(checkpoints_t.c.model_name == name, checkpoints_t.c.version >= version))
    conn.execute(insert(checkpoints_t).values(model_name=name, version=version, state=data))
    prune(conn, name, every)


def prune(conn: Connection, name: str, every: int | None = None) -> set[int]:
    """Delete in ``conn``'s transaction the checkpoints of model ``name`` that are not
    :func:`usable` (they hold a batch taken back since) and those the schedule no longer keeps
    of the others (:func:`kept`); the versions kept."""
    have = conn.execute(select(checkpoints_t.c.version).where(checkpoints_t.c.model_name == name)).scalars().all()
    if not have:
        return set()
    tbs = conn.execute(
        select(take_backs_t.c.version, take_backs_t.c.batch_version).where(
            take_backs_t.c.model_name == name, take_backs_t.c.version > min(have)
        )
    ).mappings()
    take_backs = [dict(t) for t in tbs]
    keep = kept([v for v in have if usable(v, take_backs)], every)
    gone = set(have) - keep
    if gone:
        conn.execute(
            delete(checkpoints_t).where(checkpoints_t.c.model_name == name, checkpoints_t.c.version.in_(sorted(gone)))
        )
    return keep


def part(
    name: str, version: int, learner: core.LifelongLearner, summary: dict[str, Any]
) -> Callable[[Connection], None]:
    """:func:`write` of ``learner`` as a part of another transaction (a fork's or an import's
    first state, in the transaction that creates the model: a failure leaves neither)."""
    state = learner.get_state()
    return lambda conn: write(conn, name, version, state, summary)


class UpdateCheckpoints(CommitParticipant[Prepared]):
    """A checkpoint in the commit of the updates whose last version crosses a multiple of
    :data:`EVERY` (one instance per group: one checkpoint at the group's last version)."""

    def __init__(self, name: str):
        self.name = name

    def in_commit(self, conn: Connection, commit: Commit[Prepared]) -> None:
        self.in_commits(conn, [commit])

    def in_commits(self, conn: Connection, commits: list[Commit[Prepared]]) -> None:
        last = commits[-1]
        if due(commits[0].version - 1, last.version):
            write(conn, self.name, last.version, last.prepared.learner.get_state(), last.prepared.summary)


class Gone(Exception):
    """The model a checkpoint was made of is no longer what its name holds at that version."""


def store_committed(engine: Engine, name: str, version: int, created_at: Any, data: bytes) -> bool:
    """Store the checkpoint ``data`` (:func:`state_file`) of model ``name`` at ``version``, a
    version already committed, in a transaction of its own (after the commit, off the update
    lock), and :func:`prune`: the checkpoints holding a batch taken back go (a take-back's own
    holding its batch: written after its commit too, so that its commit writes nothing of them).
    Whether it was stored and kept. A crash before it loses nothing but the checkpoint (those it
    would have deleted are never :func:`usable`, and the next prune deletes them).

    Stored only if it still is the model at ``version`` of that name: the model row is the one
    created at ``created_at`` (not deleted, nor made again under the name since: another
    lineage) and at ``version`` or past it; and kept only if no batch ``<= version`` was taken
    back since (that check is made again when it is read). The row is inserted first, then
    checked: on PostgreSQL the insert's foreign key locks the model row against its deletion
    until the commit, on SQLite the insert takes the database's write lock, so what the check
    reads cannot change before the commit. A checkpoint stored at ``version`` already is left as
    it is, and none newer is deleted but by the schedule."""
    try:
        with engine.begin() as conn:
            conn.execute(insert(checkpoints_t).values(model_name=name, version=version, state=data))
            row = conn.execute(select(models_t.c.version, models_t.c.created_at).where(models_t.c.name == name)).first()
            if row is None or row.created_at != created_at or int(row.version) < version:
                raise Gone
            return version in prune(conn, name)  # and those holding a batch taken back go
    except (Gone, IntegrityError):  # another lineage, deleted, or a checkpoint there already
        return False
