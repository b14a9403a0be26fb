"""Take a batch back: ``DELETE .../batches/{version}``.

**What the model becomes** (docs/design.md, "Taking a batch back"): the model rebuilt by exact
replay, from an unfitted learner of the model's stored settings, of every stored batch it has
learned but the one taken back, in the order of their versions (:mod:`service.models.history`). That
is bit for bit the model the same stream without that batch gives (the engine is deterministic:
its seeds are ``random_state``, the task ids and the rows seen). No residue of the batch is left
in the model; its row stays in ``batches`` marked taken back (for audits, and for forks at a
version before the take-back). The batch's own prequential score leaves the model's and its
task's figures (:class:`TakeBackLog`); the scores of the other batches, a record of the
predictions that were served, are not rewritten.

The take-back is one guarded write like a batch (:meth:`service.store.writes.ModelWriter.commit_take_back`,
under the update lock, with the version compare-and-set) and a new model version with its own
event (an ``update`` event carrying ``taken_back``). Refusals, each with nothing changed, checked
under the lock in this order: no batch of that version (404: never a version of the model, or a
take-back's version), the batch taken back already (410 with the take-back's version), the
batch inherited from the model a fork was made from (409: forked ancestry), the history the
replay needs not stored (409: an imported model keeps none of the batches before its import),
the engine refusing the replay (422).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import numpy as np
from sqlalchemy import Connection, select

from service.evaluation import store
from service.evaluation.scores import add_sums, stored, to_json
from service.models.history import History, Rebuilt, StoredBatch, ranges, read_history, read_take_backs, replay
from service.refusals import Refused
from service.store.commit import Commit, CommitParticipant
from service.store.prepared import PreparedTakeBack, TakeBackSums
from service.store.reads import ModelReader, Snapshot
from service.store.results import UNLEARNED
from service.store.tables import batches_t
from service.store.task_rows import changed_parts
from service.take_back import checkpoints


class TakeBackRefused(Refused):
    """A take-back refused with nothing changed: ``status`` and the body's extra fields."""

    status = 409
    version_field = "taken_back_by"


class NotABatch(TakeBackRefused):
    """The version is not a stored batch of the model (404)."""

    status = 404


class AlreadyTakenBack(TakeBackRefused):
    """The batch was taken back already (410); ``taken_back_by``: that take-back's version."""

    status = 410


class ForkedAncestry(TakeBackRefused):
    """The batch was learned by the model this one was forked from (409)."""


class RowsUnavailable(TakeBackRefused):
    """The stored history cannot rebuild the model (409)."""


def take_back_hash(batch_version: int) -> str:
    """The request hash of a take-back under an ``Idempotency-Key``: a key reused for another
    batch (or for a batch posted) is refused (422)."""
    return hashlib.sha256(f"fcl3-take-back-v1\0{int(batch_version)}".encode()).hexdigest()


def check(name: str, snap: Snapshot, history: History, batch_version: int, after: int = 0) -> None:
    """The refusal that applies to taking ``batch_version`` back from ``snap`` with a replay from
    the checkpoint at ``after`` (0: from the start), if any."""
    current = snap.version
    origin = snap.info.get("origin") or {}
    batch = history.batch(batch_version)
    if batch is None or batch_version > current:
        if batch_version in history.take_backs:
            tb = history.take_backs[batch_version]
            raise NotABatch(
                f"version {batch_version} of model {name!r} is not a batch: it took back batch "
                f"{tb['batch_version']}; nothing was changed",
                batch_version=batch_version,
            )
        if 1 <= batch_version <= current:
            raise RowsUnavailable(
                f"batch {batch_version} of model {name!r} is not stored ({_why_missing(origin)}): "
                "the model cannot be rebuilt without it; nothing was changed",
                batch_version=batch_version,
            )
        raise NotABatch(
            f"model {name!r} has no batch {batch_version} (it is at version {current}); nothing was changed",
            batch_version=batch_version,
        )
    if batch.taken_back is not None:
        raise AlreadyTakenBack(
            f"batch {batch_version} of model {name!r} was taken back already, by version "
            f"{batch.taken_back}; nothing was changed",
            batch_version=batch_version,
            taken_back_by=int(batch.taken_back),
        )
    fork = origin.get("fork") if isinstance(origin, dict) else None
    if fork and batch_version <= int(fork.get("version", 0)):
        raise ForkedAncestry(
            f"batch {batch_version} of model {name!r} was learned by model {fork.get('model')!r} "
            f"before {name!r} was forked from it at version {fork.get('version')}: a fork is its "
            "parent at that version, so its inherited batches stay; take the batch back in "
            f"{fork.get('model')!r} and fork it again; nothing was changed",
            batch_version=batch_version,
            fork=fork,
        )
    missing = history.missing(current, after)
    if missing:
        raise RowsUnavailable(
            f"model {name!r} cannot be rebuilt without batch {batch_version}: the batches of "
            f"versions {ranges(missing)} are not stored ({_why_missing(origin)}); nothing was "
            "changed",
            batch_version=batch_version,
            missing=ranges(missing),
        )


def _why_missing(origin: Any) -> str:
    imported = origin.get("import") if isinstance(origin, dict) else None
    if imported:
        return f"the model was imported from a file at version {imported.get('version')}, and a file keeps no batches"
    return "deleted from the database"


def unlearned_columns(batches: list[StoredBatch], width: int) -> list[int]:
    """The columns below ``width`` that no row of ``batches`` holds anything in: a level only
    the batch taken back brought (its column stays; the engine learned nothing in it)."""
    used = np.zeros(width, dtype=bool)
    for b in batches:
        w = min(width, b.X.shape[1]) if b.X.ndim == 2 else 0
        used[:w] |= np.any(b.X[:, :w] != 0, axis=0)
    return [int(j) for j in np.flatnonzero(~used)]


def prepare(reader: ModelReader, snap: Snapshot, batch_version: int) -> PreparedTakeBack:
    """The model ``snap`` without the batch ``batch_version``, rebuilt by replay from the newest
    usable checkpoint before it (:mod:`service.take_back.checkpoints`; from the start when there
    is none, or for a model with a feature schema, whose unlearned columns are read off every
    batch), with the prequential sums up to ``snap``'s version (:func:`add_scored`). Nothing
    is stored, and no lock is needed: ``snap`` is immutable.
    :class:`TakeBackRefused` or :class:`core.InputError` (422) when it cannot be."""
    settings = snap.info["settings"]
    take_backs = read_take_backs(reader.bulk, reader.name)
    start = None
    if not (settings or {}).get("features"):
        start = checkpoints.newest_before(reader.bulk, reader.name, batch_version, take_backs.values())
    after = start.version if start is not None else 0
    history = read_history(reader.bulk, reader.name, after)
    history = History(history.batches, take_backs)
    check(reader.name, snap, history, batch_version, after)
    batch = history.batch(batch_version)
    assert batch is not None  # check() refuses a version that is no stored batch
    others = history.learned(snap.version, without=batch_version)
    t0 = time.perf_counter()
    refused = f"batch {batch_version} of model {reader.name!r} cannot be taken back: "
    rebuilt = replay(settings, others, refused, start.rebuilt if start is not None else None)
    seconds = time.perf_counter() - t0
    with reader.bulk.connect() as conn:
        sums = add_scored(
            conn, reader.name, rebuilt.learner.kind, (batch.version, batch.task_id), TakeBackSums(), snap.version
        )
    return _prepared(snap, batch, rebuilt, others, len(others), seconds, after, sums)


def _prepared(
    snap: Snapshot,
    batch: StoredBatch,
    rebuilt: Rebuilt,
    others: list[StoredBatch],
    n_replayed: int,
    seconds: float,
    after: int,
    sums: TakeBackSums,
) -> PreparedTakeBack:
    learner = rebuilt.learner
    task_removed = batch.task_id not in getattr(learner, "tasks_", {})  # unfitted: the model's only batch
    before = snap.info.get("summary") or {}
    # take_backs: how many the model has had; a reader whose cached model had fewer reads every task again
    summary = {**before, **rebuilt.summary, "take_backs": int(before.get("take_backs", 0)) + 1}
    if (snap.info.get("settings") or {}).get("features"):
        summary[UNLEARNED] = unlearned_columns(others, int(getattr(learner, "n_features_in_", 0) or 0))
    return PreparedTakeBack(
        base_version=snap.version,
        batch_version=batch.version,
        task_id=batch.task_id,
        n_samples=int(batch.X.shape[0]),
        task_removed=task_removed,
        n_replayed=n_replayed,
        learner=learner,
        summary=summary,
        tasks=rebuilt.tasks,
        info=snap.info,
        replay_seconds=seconds,
        checkpoint=after,
        others=others,
        sums=sums,
    )


def finished(p: PreparedTakeBack, snap: Snapshot) -> PreparedTakeBack:
    """``p``, brought to ``snap`` (``p.base_version``), with what its commit writes made once:
    the rebuilt model's state and which of its tasks differ from what ``snap``'s task rows
    store (:func:`~service.store.task_rows.changed_parts`). Made off the lock after the last
    catch-up round, and again under it only if the catch-up there learned batches."""
    assert snap.version == p.base_version
    if p.state is None or p.changed is None:
        p.state = p.learner.get_state()
        p.changed = changed_parts(snap.learner, p.state)  # against what the task rows store: snap's learner
    return p


def catch_up(reader: ModelReader, p: PreparedTakeBack, snap: Snapshot) -> PreparedTakeBack | None:
    """``p`` (prepared off the lock at ``p.base_version``) brought to ``snap``, a stored version
    read later: the batches committed since learned on top, in version order, and their scores
    added to its sums (:func:`add_scored`); ``p`` itself when nothing moved. None when anything
    but batches moved (a take-back, another model of the name, a batch not stored): the
    take-back is prepared again. What its commit writes is made by :func:`finished`."""
    if snap.version == p.base_version and snap.info.get("created_at") == p.info.get("created_at"):
        return p
    if snap.version < p.base_version or snap.info.get("created_at") != p.info.get("created_at"):
        return None
    history = read_history(reader.bulk, reader.name, p.base_version)
    new = [b for b in history.batches if b.version <= snap.version]
    if [b.version for b in new] != list(range(p.base_version + 1, snap.version + 1)):
        return None  # a take-back (or a hole) since: not a plain continuation
    if any(b.taken_back is not None for b in new):
        return None
    batch = StoredBatch(p.batch_version, p.task_id, np.zeros((p.n_samples, 0)), np.zeros(p.n_samples))
    summary: dict[str, Any] = {k: p.summary[k] for k in ("representatives", "n_representatives") if k in p.summary}
    t0 = time.perf_counter()
    refused = f"batch {p.batch_version} of model {reader.name!r} cannot be taken back: "
    rebuilt = replay(snap.info["settings"], new, refused, Rebuilt(p.learner, summary, p.tasks))
    seconds = p.replay_seconds + time.perf_counter() - t0
    with reader.bulk.connect() as conn:
        sums = add_scored(conn, reader.name, p.learner.kind, (p.batch_version, p.task_id), p.sums, snap.version)
    return _prepared(snap, batch, rebuilt, p.others + new, p.n_replayed + len(new), seconds, p.checkpoint, sums)


def add_scored(
    conn: Connection, name: str, kind: str, taken: tuple[int, str], sums: TakeBackSums, upto: int | None = None
) -> TakeBackSums:
    """``sums`` continued, in version order, with the scored batches of the versions after
    ``sums.version`` (up to ``upto``; None: every one stored) still learned: neither taken back
    nor ``taken``, the one being taken back (its version and task). The same additions in the
    same order as one pass from the start: the same sums, bit for bit, wherever it is cut."""
    q = select(batches_t.c.version).where(
        batches_t.c.model_name == name, batches_t.c.taken_back.is_not(None), batches_t.c.version > sums.version
    )
    if upto is not None:
        q = q.where(batches_t.c.version <= upto)
    batch_version, batch_task = taken
    removed = {int(v) for v in conn.execute(q).scalars()} | {batch_version}
    overall, task, n_task, last = sums.overall, sums.task, sums.n_task, sums.version
    for version, task_id, scored in store.scored_batches(conn, name, sums.version, upto):
        last = int(version)
        if last in removed:
            continue
        one = stored(kind, scored)
        overall = add_sums(overall, one)
        if task_id == batch_task:
            task, n_task = add_sums(task, one), n_task + 1
    return TakeBackSums(upto if upto is not None else last, overall, task, n_task)


class TakeBackLog(CommitParticipant[PreparedTakeBack]):
    """A take-back's part in the online evaluation, in its commit: its row of the event log (an
    ``update`` event with ``taken_back``), and the prequential figures without the batch taken
    back: the model's and its task's sums, in version order, over the scored batches still
    learned (the same additions as the commits made, so exactly the sums the stream without
    that batch gave them), and its log row no longer counted in the recent window. The sums are
    added by the replay and each catch-up, up to the version it reached (:func:`add_scored`:
    off the lock, but for the batches the catch-up under the lock learns), so the commit reads
    none of them. The scores of the other
    batches stay as they were: what was served. Held-out scores are left to the next updates."""

    def __init__(self, name: str):
        self.name = name

    def in_commit(self, conn: Connection, commit: Commit[PreparedTakeBack]) -> None:
        p = commit.prepared
        kind = p.learner.kind
        event = {
            "version": commit.version,
            "task_id": p.task_id,
            "new_task": False,
            "new_representative": False,
            "n_representatives": int(p.summary.get("n_representatives", 0)),
            "prequential": None,
            "taken_back": {"batch_version": p.batch_version, "n_samples": p.n_samples, "task_removed": p.task_removed},
        }
        sums = p.sums  # added up to the version it commits on, by the replay and its catch-ups
        if sums.version < p.base_version:  # not reached: each catch-up adds the batches it learns
            sums = add_scored(conn, self.name, kind, (p.batch_version, p.task_id), sums, p.base_version)
        overall, task, n_task = sums.overall, sums.task, sums.n_task
        store.unscore(conn, self.name, p.batch_version)
        store.write_task_sums(conn, self.name, p.task_id, to_json(task), n_task, commit.at)
        res = conn.execute(
            store.UPDATE_STATE,
            {"w_model": self.name, "version": commit.version, "overall": to_json(overall), "updated_at": commit.at},
        )
        if res.rowcount == 0:
            conn.execute(
                store.INSERT_STATE,
                {
                    "model_name": self.name,
                    "revision": 0,
                    "scores": {},
                    "overall": to_json(overall),
                    "matrix": {},
                    "version": commit.version,
                    "updated_at": commit.at,
                },
            )
        conn.execute(
            store.INSERT_LOG,
            {
                "model_name": self.name,
                "version": commit.version,
                "task_id": p.task_id,
                "new_task": False,
                "event": event,
                "batch": None,
                "overall": to_json(overall),
                "evaluation": None,
                "matrix": None,
                "created_at": commit.at,
            },
        )
