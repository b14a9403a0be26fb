"""Cached reads of one stored model: the served learner, model and task rows, batches.

Layout of a stored model (see :mod:`service.store.tables`): the global part of
:class:`core.ModelState` in the ``models`` row, each task's part in its ``tasks`` row, and
every accepted raw batch in ``batches``.

Each process caches one :class:`Snapshot`. :meth:`ModelReader.snapshot` serves it without
touching the database while the process's version watch (:mod:`service.store.watch`: ``PRAGMA
data_version`` on SQLite, ``LISTEN``/``NOTIFY`` on PostgreSQL) says nothing changed since the
last check, for at most the watch's ``poll`` seconds; otherwise (or with a ``min_version``
above the cached version) it costs one ``SELECT version``. When the version moved, the process
re-reads the model row and only the task rows written after its cached version, in one
statement (one snapshot of the database), and swaps in a new learner. Writers read the stored
version and what changed since the cached one in that same statement, except where the watch
is exact (SQLite's: an unchanged ``data_version`` proves that nothing was committed since the
last check, or since this process's own last commit). Readers never take the update lock, and
nothing here writes: a missing model row is :class:`ModelMissing` (answered 503 with
Retry-After).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import ColumnElement, Engine, Label, bindparam, case, cast, func, null, select, union_all

import core
from service import memory
from service.store.tables import batches_t, models_t, tasks_t
from service.store.watch import NoWatch, Watch

MODEL_INFO_COLS = [c for c in models_t.c if c.name != "arrays"]
_TASK_INFO_COLS = [c for c in tasks_t.c if c.name != "arrays"]

#: What identifies a stored model's version (another model of the same name has another
#: ``created_at``); the model row's other columns change only with its version.
_MODEL_KEY_COLS = [models_t.c.name, models_t.c.version, models_t.c.created_at]


def _if_moved(column: ColumnElement[Any]) -> Label[Any]:
    """``column`` when the model row's version is past ``w_since``, else NULL (not sent)."""
    return case((models_t.c.version > bindparam("w_since"), column)).label(column.name)


#: The model row (its other columns than :data:`_MODEL_KEY_COLS` only when its version is past
#: ``w_since``) and the rows of its tasks written after version ``w_since``, in one statement
#: (:meth:`ModelReader._changes`).
_CHANGES = union_all(
    select(
        *(c if c in _MODEL_KEY_COLS else _if_moved(c) for c in MODEL_INFO_COLS),
        _if_moved(models_t.c.arrays),
        cast(null(), tasks_t.c.task_id.type).label("task_id"),
        cast(null(), tasks_t.c.position.type).label("position"),
        cast(null(), tasks_t.c.meta.type).label("task_meta"),
    ).where(models_t.c.name == bindparam("w_model")),
    select(
        *(null() for _ in MODEL_INFO_COLS), tasks_t.c.arrays, tasks_t.c.task_id, tasks_t.c.position, tasks_t.c.meta
    ).where(tasks_t.c.model_name == bindparam("w_model"), tasks_t.c.version > bindparam("w_since")),
)


class ModelMissing(Exception):
    """No row for the model ``name``: it has not been created yet, was deleted, or the
    database was emptied under a running service. For the default model (``MODEL_NAME``)
    start-up and the first update create it (answered 503 meanwhile); any other model is
    unknown (404)."""

    def __init__(self, name: str):
        super().__init__(f"model {name!r} is not in the database")
        self.name = name


class VersionBehind(Exception):
    """A read asked for ``min_version`` but the stored model is at an earlier version
    (answered 409): the version was not returned by a write of this model, or the model was
    deleted and created again since."""

    def __init__(self, name: str, version: int, min_version: int):
        super().__init__(f"model {name!r} is at version {version} < min_version {min_version}")
        self.name, self.version, self.min_version = name, version, min_version


@dataclass(frozen=True)
class Snapshot:
    """One process's cached view of one stored model version. Never mutated.

    It holds the learner and nothing else of the model's arrays (no exported
    :class:`core.ModelState`, which would be a second copy of everything the learner holds):
    an update exports the one task it touched when it needs it, and ``learner.get_state()``
    gives the full state when wanted.
    """

    version: int
    learner: core.LifelongLearner
    info: dict[str, Any]  # the model row without arrays

    def has_task(self, task_id: str) -> bool:
        """Whether this version has learned ``task_id``."""
        return task_id in getattr(self.learner, "tasks_", {})


class ModelReader:
    """Reads of the model ``name``, with the process's cached :class:`Snapshot`."""

    def __init__(
        self,
        engine: Engine,
        name: str,
        bulk_engine: Engine | None = None,
        watch: Watch | None = None,
        heap: memory.HeapTrimmer | None = None,
    ):
        """``engine``: small queries (the ``SELECT version``, task listings);
        ``bulk_engine`` (default: ``engine``): the statements that move the model's arrays
        (the model row and changed task rows, batches); see :data:`service.db.BULK_POOL_SIZE`.
        ``watch`` (:mod:`service.store.watch`; default: none, a ``SELECT version`` per request): says
        when the stored model may have changed. ``heap``: the app's trimmer, told when the
        cached model changed (default: one of its own)."""
        self.engine = engine
        self.heap = heap if heap is not None else memory.HeapTrimmer()
        self.bulk = bulk_engine if bulk_engine is not None else engine
        self.name = name
        self.watch = watch if watch is not None else NoWatch()
        # (watch token read before the last SELECT version, monotonic deadline, snapshot it validated)
        self._seen: tuple[Any, float, Snapshot] | None = None
        self._cache: Snapshot | None = None
        self._cache_lock = threading.Lock()
        # Single-statement reads need no transaction: one round trip instead of BEGIN/SELECT/ROLLBACK.
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._bulk_autocommit = self.bulk.execution_options(isolation_level="AUTOCOMMIT")

    # ------------------------------------------------------------------ the cached learner
    @property
    def cached(self) -> Snapshot | None:
        """The snapshot this process serves now (None before the first read)."""
        return self._cache

    def drop(self) -> None:
        """Keep nothing of the model (after its deletion)."""
        with self._cache_lock:
            self._cache = None
            self._seen = None

    def stored_version(self) -> int | None:
        with self._autocommit.connect() as conn:
            return conn.execute(select(models_t.c.version).where(models_t.c.name == self.name)).scalar()

    def require(self) -> int:
        """The stored version; :class:`ModelMissing` when the model does not exist."""
        version = self.stored_version()
        if version is None:
            raise ModelMissing(self.name)
        return version

    def snapshot(self, min_version: int | None = None, check: bool = False, task: str | None = None) -> Snapshot:
        """The model at its stored version: no query while the watch says nothing changed
        (and the cached version is at least ``min_version``, and has learned ``task`` if one is
        named; with ``check``, which writers use, only if the watch is exact), else one cheap
        query when the cache is current (for a writer, the query that also reads what changed:
        :meth:`_caught_up`). :class:`VersionBehind` when the stored version is below
        ``min_version``. A ``task`` the cached version has not learned is looked for at the
        stored version: another process may have learned it since the watch last spoke (its
        notification on its way).

        The query also reads ``created_at``, the model's identity: a model deleted and created
        again under the same name (by another process) restarts at version 0 and must never be
        mistaken for the cached one when it reaches the cached version number."""
        token = self.watch.token(self.name)
        if not check or self.watch.exact:
            fresh = self._fresh(token, min_version)
            if fresh is not None and (task is None or fresh.has_task(task)):
                return fresh
        snap = self._caught_up() if check else self._checked()
        if token is not None:
            self._seen = (token, time.monotonic() + self.watch.poll, snap)
        if min_version is not None and snap.version < min_version:
            raise VersionBehind(self.name, snap.version, min_version)
        return snap

    def fresh(self, min_version: int | None = None) -> Snapshot | None:
        """The cached snapshot when :meth:`snapshot` would serve it without a query (the watch
        says nothing changed, within ``poll`` seconds of the last check, at least
        ``min_version``), else None. Costs what the watch's token costs (no database round
        trip): the prediction routes ask it to decide whether a request can be answered on the
        event loop (:mod:`service.api.routes.predict`)."""
        return self._fresh(self.watch.token(self.name), min_version)

    def _fresh(self, token: Hashable | None, min_version: int | None) -> Snapshot | None:
        seen = self._seen
        if (
            token is not None
            and seen is not None
            and seen[0] == token
            and time.monotonic() < seen[1]
            and seen[2] is self._cache
            and (min_version is None or seen[2].version >= min_version)
        ):
            return seen[2]
        return None

    def _checked(self) -> Snapshot:
        """The model at its stored version, after one ``SELECT version, created_at``."""
        with self._autocommit.connect() as conn:
            row = conn.execute(
                select(models_t.c.version, models_t.c.created_at).where(models_t.c.name == self.name)
            ).first()
        if row is None:
            self._cache = None  # deleted: keep nothing of it
            raise ModelMissing(self.name)
        version, created = row
        cached = self._cache
        if cached is not None and cached.version == version and cached.info.get("created_at") == created:
            return cached
        with self._cache_lock:
            cached = self._cache
            if cached is not None and cached.info.get("created_at") != created:
                cached = self._cache = None  # another model of the same name
            if cached is not None and cached.version >= version:
                return cached if cached.version == version else self._refresh(None)
            snap = self._refresh(cached)
        self.heap.after_model_change()  # the old version's buffers are garbage now
        return snap

    def offer(self, snap: Snapshot) -> None:
        """Serve ``snap`` (a version this process just committed, still under the update lock)
        unless a newer one is cached. With an exact watch, the token read now vouches for it
        as a check would: no other commit of this model can have come since its own."""
        with self._cache_lock:
            self._install(snap)
            if self.watch.exact and self._cache is snap:
                token = self.watch.token(self.name)
                if token is not None:
                    self._seen = (token, time.monotonic() + self.watch.poll, snap)
        self.heap.after_model_change()

    def _install(self, snap: Snapshot) -> None:
        current = self._cache
        if (
            current is None
            or snap.version >= current.version
            or current.info.get("created_at") != snap.info.get("created_at")
        ):
            self._cache = snap

    def _caught_up(self) -> Snapshot:
        """The model at its stored version, for a writer (who holds the model's update lock):
        one statement reads the stored version and whatever changed since the cached one
        (:meth:`_changes`), where a check and then a re-read would cost two or more."""
        with self._cache_lock:
            cached = self._cache
            snap = self._refresh(cached)
        if snap is not cached:
            self.heap.after_model_change()  # the old version's buffers are garbage now
        return snap

    def _changes(self, since: int) -> tuple[Any, list[Any]]:
        """The model row (None if there is none; its columns other than name, version and
        ``created_at`` only when its version is past ``since``) and the rows of its tasks
        written after version ``since`` (every task for -1): one ``UNION ALL`` statement, so
        both come from one snapshot of the database in any isolation level, in one round trip."""
        with self._bulk_autocommit.connect() as conn:
            rows = conn.execute(_CHANGES, {"w_model": self.name, "w_since": since}).mappings().all()
        model_rows = [r for r in rows if r["task_id"] is None]
        return (model_rows[0] if model_rows else None), [r for r in rows if r["task_id"] is not None]

    def _refresh(self, cached: Snapshot | None) -> Snapshot:
        """The stored version, built from ``cached`` and what changed since it (or read whole);
        installed. Called under ``_cache_lock``."""
        while True:
            row, rows = self._changes(cached.version if cached is not None else -1)
            if row is None:
                self._cache = None  # deleted: keep nothing of it
                raise ModelMissing(self.name)
            same_model = cached is not None and cached.info.get("created_at") == row["created_at"]
            if cached is not None and same_model and cached.version == row["version"]:
                return cached  # nothing committed since (the row's other columns were not sent)
            if cached is None or (
                same_model  # not another model of the name
                and _take_backs(cached.info) == _take_backs(row)
            ):  # nor rebuilt (may drop a task)
                break
            cached = None  # read every task
        changed = {t["task_id"]: {"arrays": t["arrays"], "meta": t["task_meta"]} for t in rows}
        meta = dict(row["meta"])
        if meta.get("fitted") and "task_order" not in meta:  # the order is kept by the task rows' positions
            known = list(cached.learner.task_ids) if cached is not None else []
            seen = set(known)
            added = sorted(
                (t for t in rows if t["task_id"] not in seen), key=lambda t: (t["position"] is None, t["position"])
            )
            meta["task_order"] = known + [t["task_id"] for t in added]
        del rows
        state = core.ModelState(
            estimator=row["estimator"],
            params=row["params"],
            meta=meta,
            arrays=row["arrays"],
            tasks=changed,
            format_version=row["format_version"],
        )
        if cached is None:
            learner = core.load_state(state)
        else:  # rebuild only the global arrays and the tasks written since the cached version
            learner = cached.learner.with_state(state)
        del state, changed  # the learner copied what it needs: keep no second copy of the arrays
        info = {c.name: row[c.name] for c in MODEL_INFO_COLS}
        snap = Snapshot(int(row["version"]), learner, info)
        self._install(snap)
        return snap

    def predict(
        self, task_id: str, X: Any, min_version: int | None = None, snap: Snapshot | None = None
    ) -> tuple[list[float], list[float] | None, int]:
        """Predictions (and P(positive class) for classification) of the served version (at
        least ``min_version``: :class:`VersionBehind` if the stored model is not there yet), or
        of ``snap``, a snapshot :meth:`fresh` just returned."""
        if snap is None:
            snap = self.snapshot(min_version, task=task_id)
        learner = snap.learner
        preds = learner.predict(task_id, X)
        probs = learner.predict_proba(task_id, X) if learner.kind == "classification" else None
        return (
            np.asarray(preds, dtype=float).tolist(),
            None if probs is None else np.asarray(probs, dtype=float).tolist(),
            snap.version,
        )

    # ------------------------------------------------------------------ rows, uncached
    def model_info(self) -> dict[str, Any]:
        """The model row without arrays, with its task and batch counts (batches learned, from
        the tasks' counts: an imported model has learned batches it has not stored)."""
        with self._autocommit.connect() as conn:
            row = conn.execute(select(*MODEL_INFO_COLS).where(models_t.c.name == self.name)).mappings().first()
            if row is None:
                raise ModelMissing(self.name)
            n_tasks, n_batches = conn.execute(
                select(func.count(), func.coalesce(func.sum(tasks_t.c.n_batches), 0)).where(
                    tasks_t.c.model_name == self.name
                )
            ).one()
        return {**row, "n_tasks": int(n_tasks), "n_batches": int(n_batches)}

    def list_tasks(self, offset: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        with self._autocommit.connect() as conn:
            rows = conn.execute(
                select(*_TASK_INFO_COLS)
                .where(tasks_t.c.model_name == self.name)
                .order_by(tasks_t.c.created_at, tasks_t.c.task_id)
                .offset(offset)
                .limit(limit)
            )
            return [dict(r) for r in rows.mappings()]

    def task_info(self, task_id: str) -> dict[str, Any]:
        with self._autocommit.connect() as conn:
            row = (
                conn.execute(
                    select(*_TASK_INFO_COLS).where(tasks_t.c.model_name == self.name, tasks_t.c.task_id == task_id)
                )
                .mappings()
                .first()
            )
        if row is None:
            self.require()  # an unknown model is said first
            raise core.UnknownTaskError(f"unknown task {task_id!r}: model {self.name!r} has not learned it")
        return dict(row)

    def batches(self, task_id: str | None = None) -> list[dict[str, Any]]:
        """Every stored batch in the order applied (for audits, replays and tests)."""
        q = select(batches_t).where(batches_t.c.model_name == self.name).order_by(batches_t.c.version)
        if task_id is not None:
            q = q.where(batches_t.c.task_id == task_id)
        with self.bulk.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]


def _take_backs(info: Mapping[str, Any]) -> int:
    """How many batches the model row says were taken back (:mod:`service.take_back`)."""
    return int((info.get("summary") or {}).get("take_backs", 0))
