"""Persistence of one model: load (cached per process), update under the lock, guarded commit.

Layout of a stored model (see :mod:`service.models`): the global part of
:class:`core.ModelState` in the ``models`` row, each task's part in its ``tasks`` row, and
every accepted raw batch in ``batches``. An update rewrites the model row, the one task it
touched and appends one batch — its cost does not grow with the number of tasks.

Write path (:meth:`ModelStore.update`)::

    with lock(model):                       # Redis or in-process; short wait -> 503
        snapshot = refresh to the stored version
        learner  = snapshot.learner.copy()           # a private copy: readers keep theirs
        result   = learner.learn(task_id, X, y)      # InputError -> 422, nothing stored
        BEGIN
          UPDATE models SET version = v+1, ... WHERE name = :m AND version = v
          -- 0 rows: someone committed since we read (our lock had expired) -> StaleWrite
          UPSERT tasks (only task_id);  INSERT batches (version v+1)
        COMMIT                              # only now is the batch acknowledged

Read path (:meth:`ModelStore.snapshot`): one ``SELECT version`` per request; when it moved,
the process re-reads the model row and only the task rows written after its cached
version, in one snapshot (REPEATABLE READ on PostgreSQL), and swaps in a new learner.
Readers never take the update lock.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
from sqlalchemy import Engine, func, insert, select, update
from sqlalchemy.exc import IntegrityError

import core

from . import memory, metrics
from .locks import LockBusy
from .models import BatchRow, ModelRow, TaskRow

log = logging.getLogger("service.store")

models_t = ModelRow.__table__
tasks_t = TaskRow.__table__
batches_t = BatchRow.__table__

_MODEL_INFO_COLS = [c for c in models_t.c if c.name != "arrays"]
_TASK_INFO_COLS = [c for c in tasks_t.c if c.name != "arrays"]


class StaleWrite(Exception):
    """The model moved since this writer read it (its lock expired): the commit is refused."""


class ModelConfigError(Exception):
    """The configured estimator or hyper-parameters cannot make a learner."""


class ModelMissing(Exception):
    """No row for the model (the database was emptied under a running service)."""


def _now() -> datetime:
    return datetime.now(timezone.utc)


def learner_class(name: str) -> type:
    cls = getattr(core, name, None)
    if cls is None:  # learners not re-exported by core (e.g. ELLA) register themselves on import
        import importlib
        import pkgutil

        for mod in pkgutil.iter_modules(core.__path__):
            if mod.name not in ("bench",):
                try:
                    importlib.import_module(f"core.{mod.name}")
                except ImportError:
                    pass
        cls = core.base._REGISTRY.get(name)
    if not (isinstance(cls, type) and issubclass(cls, core.LifelongLearner)):
        raise ModelConfigError(f"FCL3_ESTIMATOR={name!r} is not a learner in core")
    return cls


def make_learner(model_settings: dict[str, Any]) -> core.LifelongLearner:
    cls = learner_class(model_settings["estimator"])
    params = dict(model_settings.get("params") or {})
    params.pop("kind", None)
    try:
        learner = cls(kind=model_settings["kind"], **params)
        learner.check_params()
    except (TypeError, core.InputError) as exc:
        raise ModelConfigError(f"bad FCL3_PARAMS for {cls.__name__}: {exc}") from exc
    return learner


def _jsonable(v):
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        return v.item()
    return v


def result_json(result: core.UpdateResult) -> dict[str, Any]:
    """An UpdateResult as JSON: the assignment names the representative behind each entry."""
    assignment = None
    if result.assignment is not None:
        weights = np.asarray(result.assignment, dtype=float).tolist()
        names = list(result.assignment_tasks)
        assignment = [
            {"representative": names[i] if i < len(names) else None, "outlier": False, "weight": weights[i]}
            for i in range(len(weights) - 1)
        ]
        assignment.append({"representative": None, "outlier": True, "weight": weights[-1]})
    return {
        "task_id": result.task_id,
        "n_samples": int(result.n_samples),
        "new_task": bool(result.new_task),
        "code": None if result.code is None else np.asarray(result.code, dtype=float).tolist(),
        "assignment": assignment,
        "outlier_probability": None if result.outlier_probability is None else float(result.outlier_probability),
        "new_representative": bool(result.new_representative),
        "n_representatives": int(result.n_representatives),
    }


def _representatives(learner: core.LifelongLearner, previous: list[str], result: core.UpdateResult) -> list[str]:
    """Representative task ids, from the learner if it says, else from the update results."""
    reps = getattr(learner, "representatives", None)
    if reps is not None and not callable(reps):
        return [str(r) for r in reps]
    reps = list(result.assignment_tasks) if result.assignment_tasks else list(previous)
    if result.new_representative and result.task_id not in reps:
        reps.append(result.task_id)
    return reps


@dataclass(frozen=True)
class Snapshot:
    """One process's cached view of one stored model version. Never mutated.

    It holds the learner and nothing else of the model's arrays: no exported
    :class:`core.ModelState`. (It used to keep one, with every task's arrays — the raw rows
    ``X``, ``y`` included — as read from the database, a second copy of everything the
    learner already holds, which made a worker's memory grow at twice the rate of the data
    learned. Only the touched task's export is needed, by an update, and it is made then;
    ``learner.get_state()`` gives the full state when wanted.)
    """

    version: int
    learner: core.LifelongLearner
    info: dict[str, Any]  # the model row without arrays


@dataclass
class Prepared:
    """An update computed against ``base_version`` but not yet committed."""

    base_version: int
    task_id: str
    result: core.UpdateResult
    learner: core.LifelongLearner
    state: core.ModelState  # global part + the one task touched (what the commit writes)
    X: np.ndarray
    y: np.ndarray
    summary: dict[str, Any] = field(default_factory=dict)


class ModelStore:
    """Load, cache, update and commit one named model."""

    def __init__(self, engine: Engine, locks, name: str, model_settings: dict[str, Any],
                 bulk_engine: Engine | None = None):
        """``engine``: small queries (the per-request ``SELECT version``, task listings);
        ``bulk_engine`` (default: ``engine``): the statements that move the model's arrays —
        reading the model row and changed task rows, committing an update, reading batches.

        Why two pools: libpq keeps each connection's input and output buffers at the size of
        the largest message that connection ever carried (a bytea arrives hex-encoded, twice
        its size), until the connection is closed. A classification task's row holds all its
        samples, so it grows with the data (a regression task's is a fixed-size summary, but
        the model row is ~(d k)^2 floats); spread over a 20-connection pool, every connection could
        end up holding ~3x the largest row (measured: 3 connections that each fetched a 1 MB
        bytea and sent one kept 9 MB between them). The few large transfers are serialized
        anyway (refresh under ``_cache_lock``, commit under the update lock), so a pool of
        2 connections (``service.db.BULK_POOL_SIZE``) carries them and the request pool
        stays small."""
        self.engine = engine
        self.bulk = bulk_engine if bulk_engine is not None else engine
        self.locks = locks
        self.name = name
        self.model_settings = model_settings
        self._cache: Snapshot | None = None
        self._cache_lock = threading.Lock()
        self._postgres = engine.dialect.name == "postgresql"
        # Single-statement reads need no transaction: one round trip instead of BEGIN/SELECT/ROLLBACK.
        self._reader = engine.execution_options(isolation_level="AUTOCOMMIT")

    # ------------------------------------------------------------------ creation
    def ensure_model(self) -> None:
        """Create the model row (version 0, unfitted learner) if it does not exist yet."""
        with self.engine.connect() as conn:
            if conn.execute(select(models_t.c.version).where(models_t.c.name == self.name)).first():
                return
        learner = make_learner(self.model_settings)
        state = learner.get_state()
        now = _now()
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(models_t).values(
                    name=self.name, version=0, estimator=state.estimator, kind=learner.kind,
                    settings=self.model_settings, params=state.params, meta=state.meta, arrays=state.arrays,
                    format_version=state.format_version, summary={"representatives": []},
                    created_at=now, updated_at=now))
            log.info("created model %r (%s, %s)", self.name, state.estimator, learner.kind)
        except IntegrityError:
            pass  # another process created it first

    # ------------------------------------------------------------------ reading
    def stored_version(self) -> int | None:
        with self._reader.connect() as conn:
            return conn.execute(select(models_t.c.version).where(models_t.c.name == self.name)).scalar()

    def snapshot(self) -> Snapshot:
        """The model at its stored version: one cheap query when the cache is current."""
        version = self.stored_version()
        if version is None:
            self.ensure_model()
            version = self.stored_version()
        cached = self._cache
        if cached is not None and cached.version == version:
            return cached
        with self._cache_lock:
            cached = self._cache
            if cached is not None and cached.version >= version:
                return cached if cached.version == version else self._refresh(None)
            snap = self._refresh(cached)
        memory.trim_after_model_change()  # the old version's buffers are garbage now
        return snap

    def _refresh(self, cached: Snapshot | None) -> Snapshot:
        conn = self.bulk.connect()
        if self._postgres:  # model row and task rows from one snapshot
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn, conn.begin():
            row = conn.execute(select(models_t).where(models_t.c.name == self.name)).mappings().first()
            if row is None:
                raise ModelMissing(f"model {self.name!r} is not in the database")
            if cached is not None and cached.version == row["version"]:
                return cached
            q = select(tasks_t.c.task_id, tasks_t.c.arrays, tasks_t.c.meta).where(tasks_t.c.model_name == self.name)
            if cached is not None:
                q = q.where(tasks_t.c.version > cached.version)
            changed = {t.task_id: {"arrays": t.arrays, "meta": t.meta} for t in conn.execute(q)}
        state = core.ModelState(estimator=row["estimator"], params=row["params"], meta=row["meta"],
                                arrays=row["arrays"], tasks=changed, format_version=row["format_version"])
        if cached is None:
            learner = core.load_state(state)
        else:  # rebuild only the global arrays and the tasks written since the cached version
            learner = cached.learner.with_state(state)
        del state, changed  # the learner copied what it needs: keep no second copy of the arrays
        info = {k: v for k, v in row.items() if k != "arrays"}
        snap = Snapshot(int(row["version"]), learner, info)
        self._set_cache(snap)
        return snap

    def _set_cache(self, snap: Snapshot) -> None:
        current = self._cache
        if current is None or snap.version >= current.version:
            self._cache = snap
            summary = snap.info.get("summary") or {}
            n_reps = summary.get("n_representatives", len(summary.get("representatives") or []))
            metrics.set_model(snap.version, len(snap.learner.task_ids), int(n_reps))

    def model_info(self) -> dict[str, Any]:
        with self._reader.connect() as conn:
            row = conn.execute(select(*_MODEL_INFO_COLS).where(models_t.c.name == self.name)).mappings().first()
            if row is None:
                return {}
            n_tasks = conn.execute(select(func.count()).select_from(tasks_t).where(tasks_t.c.model_name == self.name)).scalar()
            n_batches = conn.execute(select(func.count()).select_from(batches_t).where(batches_t.c.model_name == self.name)).scalar()
        return {**row, "n_tasks": int(n_tasks), "n_batches": int(n_batches)}

    def list_tasks(self, offset: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        with self._reader.connect() as conn:
            rows = conn.execute(select(*_TASK_INFO_COLS).where(tasks_t.c.model_name == self.name)
                                .order_by(tasks_t.c.created_at, tasks_t.c.task_id).offset(offset).limit(limit))
            return [dict(r) for r in rows.mappings()]

    def task_info(self, task_id: str) -> dict[str, Any]:
        with self._reader.connect() as conn:
            row = conn.execute(select(*_TASK_INFO_COLS).where(
                tasks_t.c.model_name == self.name, tasks_t.c.task_id == task_id)).mappings().first()
        if row is None:
            raise core.UnknownTaskError(f"unknown task {task_id!r}: the model has not learned it")
        return dict(row)

    def batches(self, task_id: str | None = None) -> list[dict[str, Any]]:
        """Every stored batch in the order applied (for audits, replays and tests)."""
        q = select(batches_t).where(batches_t.c.model_name == self.name).order_by(batches_t.c.version)
        if task_id is not None:
            q = q.where(batches_t.c.task_id == task_id)
        with self.bulk.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]

    # ------------------------------------------------------------------ prediction
    def predict(self, task_id: str, X) -> tuple[list[float], list[float] | None, int]:
        snap = self.snapshot()
        learner = snap.learner
        preds = learner.predict(task_id, X)
        probs = learner.predict_proba(task_id, X) if learner.kind == "classification" else None
        metrics.PREDICTION_REQUESTS.inc()
        metrics.PREDICTIONS.inc(len(preds))
        return (np.asarray(preds, dtype=float).tolist(),
                None if probs is None else np.asarray(probs, dtype=float).tolist(), snap.version)

    # ------------------------------------------------------------------ writing
    def update(self, task_id: str, X, y) -> tuple[core.UpdateResult, int]:
        """Learn one batch and commit it; returns the result and the new model version.

        Observed: lock wait (``fcl3_lock_wait_seconds``), update time, outcome; one log line
        per committed update."""
        t0 = time.perf_counter()
        acquired = None
        outcome = "error"
        try:
            with self.locks.hold(self.name):
                acquired = time.perf_counter()
                metrics.LOCK_WAIT_SECONDS.labels("acquired").observe(acquired - t0)
                snap = self.snapshot()
                prepared = self.prepare(snap, task_id, X, y)
                version = self.commit(prepared)
            outcome = "committed"
        except core.InputError:
            outcome = "bad_input"
            raise
        except StaleWrite:
            outcome = "stale"
            raise
        except LockBusy:
            outcome = "lock_busy"
            metrics.LOCK_WAIT_SECONDS.labels("busy").observe(time.perf_counter() - t0)
            raise
        finally:
            metrics.UPDATES.labels(outcome).inc()
        done = time.perf_counter()
        metrics.UPDATE_SECONDS.observe(done - acquired)
        r = prepared.result
        log.info("model update committed", extra={
            "event": "update", "model": self.name, "task": task_id, "version": version,
            "n_samples": int(prepared.X.shape[0]), "task_n_samples": int(r.n_samples), "new_task": bool(r.new_task),
            "new_representative": bool(r.new_representative), "n_representatives": int(r.n_representatives),
            "duration_ms": round((done - acquired) * 1000, 2), "lock_wait_ms": round((acquired - t0) * 1000, 2)})
        return prepared.result, version

    def prepare(self, snap: Snapshot, task_id: str, X, y) -> Prepared:
        """Run the update on a private copy of the learner (nothing is stored)."""
        d = (snap.info.get("settings") or {}).get("d")
        if d is not None and not snap.learner.is_fitted:
            width = np.asarray(X, dtype=object).shape
            if len(width) == 2 and width[1] != d:
                raise core.InputError(f"X has {width[1]} features per row but the model expects {d}")
        learner = snap.learner.copy()  # shares arrays, which learning replaces, never mutates
        result = learner.learn(task_id, X, y)  # InputError (bad or numerically unusable): nothing happened
        state = learner.get_state(tasks=[task_id])  # global part + the one task touched: what commit writes
        summary = dict(snap.info.get("summary") or {})
        summary["representatives"] = _representatives(learner, summary.get("representatives", []), result)
        summary["n_representatives"] = int(result.n_representatives)
        if result.code is not None:
            summary["p"] = int(np.asarray(result.code).size)
        return Prepared(base_version=snap.version, task_id=task_id, result=result, learner=learner, state=state,
                        X=np.asarray(X, dtype=float), y=np.asarray(y, dtype=float), summary=summary)

    def commit(self, p: Prepared) -> int:
        """Write the update in one transaction, guarded by the version compare-and-set."""
        new_version = p.base_version + 1
        task = p.state.tasks[p.task_id]
        now = _now()
        last = result_json(p.result)
        with self.bulk.begin() as conn:
            res = conn.execute(
                update(models_t)
                .where(models_t.c.name == self.name, models_t.c.version == p.base_version)
                .values(version=new_version, params=p.state.params, meta=p.state.meta, arrays=p.state.arrays,
                        format_version=p.state.format_version, summary=p.summary, updated_at=now))
            if res.rowcount != 1:
                raise StaleWrite(
                    f"model {self.name!r} changed since version {p.base_version} was read "
                    "(the update lock expired before the commit); this batch was NOT applied — retry")
            if p.result.new_task:
                conn.execute(insert(tasks_t).values(
                    model_name=self.name, task_id=p.task_id, version=new_version, n_samples=p.result.n_samples,
                    n_batches=1, arrays=task["arrays"], meta=task["meta"], last_update=last,
                    created_at=now, updated_at=now))
            else:
                res = conn.execute(
                    update(tasks_t).where(tasks_t.c.model_name == self.name, tasks_t.c.task_id == p.task_id)
                    .values(version=new_version, n_samples=p.result.n_samples, n_batches=tasks_t.c.n_batches + 1,
                            arrays=task["arrays"], meta=task["meta"], last_update=last, updated_at=now))
                if res.rowcount != 1:
                    raise StaleWrite(f"task {p.task_id!r} row missing; this batch was NOT applied — retry")
            conn.execute(insert(batches_t).values(
                model_name=self.name, task_id=p.task_id, version=new_version, n_samples=int(p.X.shape[0]),
                X=p.X, y=p.y, created_at=now))
        info = dict(self._cache.info) if self._cache is not None else {}
        info.update(version=new_version, params=p.state.params, meta=p.state.meta, summary=p.summary, updated_at=now)
        with self._cache_lock:
            self._set_cache(Snapshot(new_version, p.learner, info))
        memory.trim_after_model_change()
        return new_version
