"""What the service does with its models, and where it is observed: start serving the
default model, learn a batch (lock -> prepare -> commit), predict, and each model's lifecycle
(create, import, fork, export, delete).

The model's metrics (update and lock-wait times, update outcomes, predictions, the gauges of
the served version) and its log lines are recorded here and nowhere else: :mod:`service.reads`
and :mod:`service.writes` only read and write. Per-request metrics and the access log are the
middleware's (:class:`service.middleware.RequestContext`).
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Engine

import core

from . import memory, metrics, state_files
from .evaluation import FOREGROUND, ModelEvaluation
from .idempotency import Claim, IdempotencyKeys, KeyInFlight, KeyTakenOver, Replayed, request_hash
from .learners import ModelConfigError, make_learner
from .locks import FileLocks, LocalLocks, LockBusy, RedisLocks
from .reads import ModelMissing, ModelReader, Snapshot, VersionBehind  # noqa: F401 - VersionBehind re-exported
from .responses import result_json
from .writes import ModelExists, ModelWriter, NewModel, StaleWrite, _learner_summary, _representatives

Locks = LocalLocks | FileLocks | RedisLocks

# "service.store": the logger name is part of each of its log lines (their "logger" field).
log = logging.getLogger("service.store")


@dataclass(frozen=True)
class HostedModel:
    """The model one process serves: its cached reads, its guarded writes, its update lock."""

    reader: ModelReader
    writer: ModelWriter
    locks: Locks
    #: The default model (``MODEL_NAME``): created at start-up and by its first write when
    #: missing, and the one the process gauges describe. Any other model exists only once
    #: created through ``POST /models`` (missing: 404).
    default: bool = True
    #: The ``Idempotency-Key`` store (shared by every model of the process).
    keys: IdempotencyKeys | None = None
    #: Its online evaluation (:mod:`service.evaluation`): prequential sums, evaluation sets.
    evaluation: ModelEvaluation | None = None

    @classmethod
    def open(cls, engine: Engine, locks: Locks, name: str, model_settings: dict | None,
             bulk_engine: Engine | None = None, default: bool = True,
             keys: IdempotencyKeys | None = None, watch=None) -> HostedModel:
        """The model ``name`` on ``engine`` (``bulk_engine`` for its large transfers; see
        :data:`service.db.BULK_POOL_SIZE`), created with ``model_settings`` if it is missing
        (the default model only); ``watch``: the process's version watch (:mod:`service.watch`)."""
        reader = ModelReader(engine, name, bulk_engine, watch)
        keys = keys if keys is not None else IdempotencyKeys(engine, claim_ttl=getattr(locks, "ttl", 30.0))
        evaluation = ModelEvaluation(engine, reader.bulk, name)
        # the snapshot an update starts from is the learner a lost accuracy-matrix row of that
        # version needs (service.evaluation.ModelEvaluation._due_rows)
        evaluation.reader = reader
        return cls(reader, ModelWriter(reader, model_settings), locks, default, keys, evaluation)

    @property
    def name(self) -> str:
        return self.reader.name


def start(model: HostedModel) -> None:
    """At start-up: create the model if it does not exist, load it, publish its gauges."""
    create(model)
    model.reader.snapshot()
    _observe_served(model.reader)


def create(model: HostedModel) -> None:
    """Create the model's row (version 0, unfitted) if it does not exist yet."""
    if model.writer.ensure_model():
        s = model.writer.model_settings
        log.info("created model %r (%s, %s)", model.name, s["estimator"], s["kind"])


def learn(model: HostedModel, task_id: str, X, y, claim: Claim | None = None) -> tuple[core.UpdateResult, int]:
    """Learn one batch and commit it; returns the result and the new model version
    (:func:`learn_answer` for the whole answer, the prequential score included)."""
    prepared, version = _learn(model, task_id, X, y, claim)
    return prepared.result, version


def learn_answer(model: HostedModel, task_id: str, X, y) -> dict[str, Any]:
    """Learn one batch and commit it; the answer (:class:`fcl3.schemas.UpdateOut`)."""
    prepared, version = _learn(model, task_id, X, y)
    return _answer(prepared, version)


def _answer(prepared, version: int) -> dict[str, Any]:
    from .evaluation import scores

    return {**result_json(prepared.result), "version": version,
            "prequential": scores(prepared.learner.kind, prepared.prequential)}


def _learn(model: HostedModel, task_id: str, X, y, claim: Claim | None = None):
    """Learn one batch and commit it; returns the prepared update and the new model version.

    Under the model's update lock: refresh to the stored version (creating the model first if
    its row is missing), learn on a private copy, commit with the version compare-and-set.
    With ``claim`` (an ``Idempotency-Key`` held by this request, see :func:`learn_once`), the
    claim is checked again under the lock and the answer is stored with the batch.
    Observed: lock wait (``fcl3_lock_wait_seconds``), update time, outcome; one log line per
    committed update (engine time and the time outside it: lock wait, load, scoring, commit).
    The batch is scored before it is learned (prequential) and the model's evaluation is
    updated in the commit's transaction (:mod:`service.evaluation`); the evaluation sets it
    rescores are scored just after the commit, off the lock, before it answers."""
    t0 = time.perf_counter()
    acquired = None
    outcome = "error"
    try:
        with model.locks.hold(model.name), FOREGROUND:
            acquired = time.perf_counter()
            metrics.LOCK_WAIT_SECONDS.labels("acquired").observe(acquired - t0)
            if claim is not None:
                model.keys.verify(claim)  # Replayed / KeyInFlight: another request has the key
            prepared = model.writer.prepare(_current(model), task_id, X, y)
            version = model.writer.commit(prepared, claim, evaluation=model.evaluation)
        outcome = "committed"
    except Replayed:
        outcome = "replayed"
        raise
    except KeyInFlight:
        outcome = "key_in_flight"
        raise
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
        if model.default:
            _observe_served(model.reader)
    released = time.perf_counter()
    ev = prepared.evaluated or {}
    if ev.get("rescore_job") is not None:  # the evaluation sets, off the lock, before answering
        try:
            with FOREGROUND:
                model.evaluation.rescore_sets(ev["rescore_job"])
        except Exception as exc:  # noqa: BLE001 - the update is committed; those scores stay older
            log.warning("evaluation sets of model %r not rescored at version %d: %s", model.name, version,
                        type(exc).__name__)
    done = time.perf_counter()
    prepared.rescore_seconds, prepared.lock_held_seconds = done - released, released - acquired
    metrics.UPDATE_SECONDS.observe(done - acquired)
    metrics.UPDATE_ENGINE_SECONDS.observe(prepared.engine_seconds)
    r = prepared.result
    log.info("model update committed", extra={
        "event": "update", "model": model.name, "task": task_id, "version": version,
        "n_samples": int(prepared.X.shape[0]), "task_n_samples": int(r.n_samples), "new_task": bool(r.new_task),
        "new_representative": bool(r.new_representative), "n_representatives": int(r.n_representatives),
        "duration_ms": round((done - acquired) * 1000, 2), "lock_wait_ms": round((acquired - t0) * 1000, 2),
        "engine_ms": round(prepared.engine_seconds * 1000, 2),
        "outside_ms": round((done - t0 - prepared.engine_seconds) * 1000, 2),
        "prequential_ms": round(prepared.prequential_seconds * 1000, 2),
        "evaluation_ms": round(prepared.evaluation_seconds * 1000, 2),
        "rescore_after_commit_ms": round(prepared.rescore_seconds * 1000, 2),
        "lock_held_ms": round(prepared.lock_held_seconds * 1000, 2), "evaluation_rescored": ev.get("rescored", 0)})
    _observe_evaluation(model, prepared.learner.kind, ev)
    _wake(model)
    if ev.get("matrix_job") is not None:  # the accuracy matrix's row, off the lock (service.evaluation)
        model.evaluation.submit(ev["matrix_job"], lambda figures: _matrix_done(model, figures))
    return prepared, version


def _matrix_done(model: HostedModel, figures: dict[str, Any]) -> None:
    if figures.get("backward_transfer") is not None:
        metrics.BACKWARD_TRANSFER.labels(model.name).set(figures["backward_transfer"])
    _wake(model)


def _observe_evaluation(model: HostedModel, kind: str, evaluated: dict[str, Any]) -> None:
    """The gauges of the model-wide prequential error, its baseline and backward transfer."""
    overall = evaluated.get("overall")
    if overall:
        metrics.set_prequential(model.name, kind, overall)
    transfer = evaluated.get("transfer") or {}
    if transfer.get("backward_transfer") is not None:
        metrics.BACKWARD_TRANSFER.labels(model.name).set(transfer["backward_transfer"])


def _wake(model: HostedModel) -> None:
    """Tell this process's event streams of the model (other processes learn it from the database)."""
    hub = getattr(model.reader.watch, "events", None)
    if hub is not None:
        hub.wake(model.name)


def learn_once(model: HostedModel, task_id: str, X, y, key: str) -> tuple[dict[str, Any], bool]:
    """Learn one batch at most once per ``key`` (``Idempotency-Key``) of ``model``: returns the
    answer (the body of the 200) and whether it is a replay of the first request's answer.

    The key is claimed before the update lock (a key already answered is replayed, a key used
    with another task or body is :class:`service.idempotency.KeyMismatch` (422), a key whose
    first request still runs is :class:`service.idempotency.KeyInFlight` (409)), checked again
    under the lock, and its answer is stored by the commit that stores the batch. An update
    that fails releases the claim. See :mod:`service.idempotency`."""
    keys = model.keys
    purge_keys(keys, every=True)
    h = request_hash(task_id, X, y)
    try:
        claim = keys.claim(model.name, key, h)
    except Replayed as r:
        return _replayed(model, key, r.response), True
    except KeyInFlight:
        metrics.UPDATES.labels("key_in_flight").inc()
        raise
    try:
        prepared, version = _learn(model, task_id, X, y, claim)
    except Replayed as r:  # another request took the key over and committed (counted by learn)
        _release(keys, claim)
        return _replayed(model, key, r.response, count=False), True
    except KeyTakenOver:
        try:
            keys.after_takeover(claim)
        except Replayed as r:
            return _replayed(model, key, r.response), True
        raise AssertionError("unreachable")  # after_takeover always raises
    except BaseException:
        _release(keys, claim)
        raise
    return _answer(prepared, version), False


def _replayed(model: HostedModel, key: str, response: dict[str, Any], count: bool = True) -> dict[str, Any]:
    if count:
        metrics.UPDATES.labels("replayed").inc()
    log.info("idempotent replay", extra={"event": "update_replayed", "model": model.name,
                                         "task": response.get("task_id"), "version": response.get("version")})
    return response


def _release(keys: IdempotencyKeys, claim: Claim) -> None:
    try:
        keys.release(claim)
    except Exception as exc:  # noqa: BLE001 - it expires after LOCK_TTL anyway
        log.warning("could not release Idempotency-Key claim on model %r (it expires by itself): %s",
                    claim.model_name, type(exc).__name__)


def purge_keys(keys: IdempotencyKeys, every: bool = False) -> None:
    """Delete the expired ``Idempotency-Key`` rows: now (start-up), or with ``every`` at most
    once per ``IDEMPOTENCY_PURGE_EVERY`` seconds (on writes). Never fails the caller."""
    try:
        n = keys.maybe_purge() if every else keys.purge()
    except Exception as exc:  # noqa: BLE001 - a purge must never fail a write
        log.warning("idempotency key purge failed: %s", type(exc).__name__)
        return
    if n:
        log.info("purged %d expired idempotency keys", n, extra={"event": "idempotency_purge"})


def predict(model: HostedModel, task_id: str, X, min_version: int | None = None, snap=None
            ) -> tuple[list[float], list[float] | None, int]:
    """Predictions of the served version, at least ``min_version`` (never waits for the update
    lock), or of ``snap`` (a snapshot :meth:`ModelReader.fresh` just returned); counted.
    :class:`VersionBehind` (409) when the stored model is below ``min_version``."""
    try:
        preds, probs, version = model.reader.predict(task_id, X, min_version, snap)
    except core.UnknownTaskError:
        raise core.UnknownTaskError(f"unknown task {task_id!r}: model {model.name!r} has not learned it") from None
    finally:
        if model.default:
            _observe_served(model.reader)
    metrics.PREDICTION_REQUESTS.inc()
    metrics.PREDICTIONS.inc(len(preds))
    return preds, probs, version


# ----------------------------------------------------------------------------- online evaluation
def configure_evaluation(model: HostedModel, settings) -> HostedModel:
    """Apply the evaluation settings (``EVALUATION_*``, ``PREQUENTIAL_WINDOW``) to ``model``."""
    ev = model.evaluation
    ev.max_rows, ev.rescore, ev.window, ev.matrix = (settings.EVALUATION_MAX_ROWS, settings.EVALUATION_RESCORE,
                                                     settings.PREQUENTIAL_WINDOW, settings.EVALUATION_MATRIX)
    return model


def add_evaluation_rows(model: HostedModel, task_id: str, X, y) -> dict[str, Any]:
    """Store labelled rows as ``task_id``'s evaluation set (never learned: the model's version
    and the task's samples do not move), scored at once if the task is learned. Under the
    model's update lock (:class:`LockBusy`: 503), checked like a batch (``InputError``: 422,
    nothing stored). Returns the body of :class:`fcl3.schemas.EvaluationRowsOut`."""
    with model.locks.hold(model.name):
        snap = _current(model)
        d = (snap.info.get("settings") or {}).get("d")
        out = model.evaluation.add_rows(snap, task_id, X, y, d)
    log.info("evaluation rows stored", extra={"event": "evaluation_rows", "model": model.name, "task": task_id,
                                              "n_rows": out["n_rows"], "n_received": out["n_received"]})
    _wake(model)
    return out


def evaluation_report(model: HostedModel, limit: int = 1000) -> dict[str, Any]:
    """The body of ``GET .../evaluation`` (:class:`fcl3.schemas.EvaluationOut`)."""
    snap = model.reader.snapshot()
    kind = snap.learner.kind
    out = model.evaluation.report(kind, snap.version, snap.learner.task_ids, limit)
    if out["backward_transfer"] is not None:
        metrics.BACKWARD_TRANSFER.labels(model.name).set(out["backward_transfer"])
    return out


def task_evaluation(model: HostedModel, task_id: str, kind: str) -> dict[str, Any]:
    """``{"prequential", "evaluation"}`` of one task (cumulative prequential, held-out score)."""
    preq, ev = model.evaluation.task_figures(task_id, kind)
    return {"prequential": preq, "evaluation": ev}


def model_prequential(model: HostedModel, kind: str) -> dict[str, Any]:
    """The model-wide prequential figures (:class:`fcl3.schemas.ModelPrequential`)."""
    out = model.evaluation.model_figures(kind)
    if out["overall"]:
        metrics.set_prequential(model.name, kind, out["overall"])
    return out


def _current(model: HostedModel) -> Snapshot:
    """The stored version for a writer: a missing default model row is created (writes may
    write); any other missing model is unknown."""
    try:
        return model.reader.snapshot(check=True)
    except ModelMissing:
        if not model.default:
            raise
        create(model)
        return model.reader.snapshot(check=True)


_OBSERVED: list = [None]  # the snapshot the served-model gauges were last set from


def _observe_served(reader: ModelReader) -> None:
    """The gauges of the version this process serves (its cached snapshot), set when it changes."""
    snap = reader.cached
    if snap is None or snap is _OBSERVED[0]:
        return
    _OBSERVED[0] = snap
    summary = snap.info.get("summary") or {}
    n_reps = summary.get("n_representatives", len(summary.get("representatives") or []))
    metrics.set_model(snap.version, len(snap.learner.task_ids), int(n_reps))


# ----------------------------------------------------------------------------- many models
class ModelRegistry:
    """Every model one process serves, by name: the default model (always held) and a
    least-recently-used cache of at most ``cache_size`` others.

    An entry is a :class:`HostedModel` whose reader caches one learner; evicting the entry
    drops that learner (a request still using it finishes with it). Nothing here touches the
    database but :meth:`get` on a cache miss: a name that is not stored is never cached, and
    answers :class:`ModelMissing` at its first read.
    Writers are cheap and the update lock is keyed by the model name in the shared
    :attr:`locks`, so two entries of one name (one evicted, still in use) stay correct; the
    version compare-and-set guards every commit anyway."""

    def __init__(self, engine: Engine, bulk_engine: Engine, locks: Locks, default_name: str,
                 default_settings: dict, cache_size: int, keys: IdempotencyKeys | None = None, watch=None):
        self.engine, self.bulk_engine, self.locks, self.watch = engine, bulk_engine, locks, watch
        self.keys = keys if keys is not None else IdempotencyKeys(engine, claim_ttl=getattr(locks, "ttl", 30.0))
        self.cache_size = max(1, int(cache_size))
        self.default = HostedModel.open(engine, locks, default_name, default_settings, bulk_engine, keys=self.keys,
                                        watch=watch)
        self._lru: OrderedDict[str, HostedModel] = OrderedDict()
        self._guard = threading.Lock()

    def get(self, name: str) -> HostedModel:
        """The model ``name``: its cache entry, else a new one if it is stored (one query on a
        cache miss), else an uncached handle, so that requests naming models that do not exist
        never push a stored model out of the cache (its first read answers 404)."""
        if name == self.default.name:
            return self.default
        with self._guard:
            model = self._lru.get(name)
            if model is not None:
                self._lru.move_to_end(name)
                return model
        model = self.transient(name)
        if model.reader.stored_version() is None:
            return model
        with self._guard:
            cached = self._lru.get(name)
            if cached is not None:  # another request cached it meanwhile
                self._lru.move_to_end(name)
                return cached
            self._lru[name] = model
            evicted = len(self._lru) > self.cache_size
            while len(self._lru) > self.cache_size:
                self._lru.popitem(last=False)
        if evicted:
            memory.trim_after_model_change()
        return model

    def transient(self, name: str) -> HostedModel:
        """A handle on ``name`` that is not cached (for a request refused before it is used)."""
        return HostedModel.open(self.engine, self.locks, name, None, self.bulk_engine, default=False, keys=self.keys,
                                watch=self.watch)

    def forget(self, name: str) -> None:
        """Drop ``name``'s cached learner (after its deletion)."""
        with self._guard:
            self._lru.pop(name, None)

    def cached_names(self) -> list[str]:
        """Names with a cache entry, least recently used first (the default model excluded)."""
        with self._guard:
            return list(self._lru)


def check_settings(model_settings: dict[str, Any]) -> core.LifelongLearner:
    """An unfitted learner for a new model's settings; :class:`core.InputError` (422) when the
    estimator, kind or hyper-parameters are refused."""
    try:
        return make_learner(model_settings)
    except ModelConfigError as exc:
        raise core.InputError(str(exc).replace("FCL3_PARAMS", "params").replace("FCL3_ESTIMATOR", "estimator")) from None


def create_model(model: HostedModel, model_settings: dict[str, Any]) -> None:
    """Create ``model`` (version 0) with ``model_settings``; :class:`ModelExists` if taken."""
    learner = check_settings(model_settings)
    model.writer.create(NewModel(learner, model_settings))
    log.info("created model %r (%s, %s)", model.name, model_settings["estimator"], model_settings["kind"],
             extra={"event": "model_created", "model": model.name})


def delete_model(model: HostedModel, registry: ModelRegistry) -> None:
    """Delete ``model`` with its tasks and batches, under its update lock (so that no update
    of it is half-way); :class:`ModelMissing` if it does not exist."""
    with model.locks.hold(model.name):
        existed = model.writer.delete()
    registry.forget(model.name)
    metrics.forget_model(model.name)
    model.reader._cache = None
    if not existed:
        raise ModelMissing(model.name)
    log.info("deleted model %r", model.name, extra={"event": "model_deleted", "model": model.name})


def export_model(model: HostedModel) -> tuple[bytes, int]:
    """The served version of ``model`` as ``.npz`` bytes (:mod:`service.state_files`) and that version."""
    snap = model.reader.snapshot(check=True)
    tasks = {r["task_id"]: {"version": int(r["version"]), "n_batches": int(r["n_batches"]),
                            "last_update": r["last_update"]}
             for r in model.reader.list_tasks(0, 2**62) if r["version"] <= snap.version}
    service = {"model": model.name, "version": snap.version, "kind": snap.info["kind"],
               "settings": snap.info.get("settings"), "summary": snap.info.get("summary") or {}, "tasks": tasks}
    return state_files.to_npz(snap.learner.get_state(), service), snap.version


def import_model(model: HostedModel, data: bytes) -> None:
    """Create ``model`` from the bytes of an exported ``.npz`` file. Everything is checked
    before anything is stored: a bad file is :class:`core.InputError` (422) with the reason."""
    try:
        state, service = state_files.read_npz(data)
    except state_files.StateFileError as exc:
        raise core.InputError(f"bad model file: {exc}") from None
    try:
        learner = core.load_state(state)
        learner.check_params()
        learner.get_state()  # every part exports again
        if learner.is_fitted:  # every task predicts, finitely: the arrays fit together
            zero = np.zeros((1, int(learner.n_features_in_)))
            for task_id in learner.task_ids:
                p = np.asarray(learner.predict(task_id, zero), dtype=float)
                if p.shape != (1,) or not np.all(np.isfinite(p)):
                    raise ValueError(f"task {task_id!r} does not predict a finite value")
    except Exception as exc:  # noqa: BLE001 - whatever the engine refuses is a bad file
        raise core.InputError(f"bad model file: the engine cannot load its state: {type(exc).__name__}: {exc}") from None
    params = learner.get_params()
    settings = service.get("settings") if isinstance(service.get("settings"), dict) else None
    if not settings or settings.get("estimator") != state.estimator:
        settings = {"estimator": state.estimator, "kind": learner.kind,
                    "params": {k: v for k, v in params.items() if k != "kind"}, "d": None}
    version = service.get("version")
    version = version if isinstance(version, int) and not isinstance(version, bool) and version >= 0 else int(learner.is_fitted)
    tasks = service.get("tasks") if isinstance(service.get("tasks"), dict) else {}
    tasks = {t: _task_counters(tasks.get(t), version) for t in learner.task_ids}
    summary = service.get("summary") if isinstance(service.get("summary"), dict) else None
    model.writer.create(NewModel(learner, settings, version=version, summary=summary or _learner_summary(learner),
                                 tasks=tasks, origin={"import": {"model": service.get("model"), "version": version}}))
    log.info("imported model %r at version %d", model.name, version,
             extra={"event": "model_imported", "model": model.name, "version": version})


def _task_counters(info: Any, version: int) -> dict[str, Any]:
    info = info if isinstance(info, dict) else {}
    v, n = info.get("version"), info.get("n_batches")
    ok = lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 0  # noqa: E731
    return {"version": v if ok(v) and v <= version else version, "n_batches": n if ok(n) else 0,
            "last_update": info.get("last_update") if isinstance(info.get("last_update"), dict) else {}}


class ForkRefused(Exception):
    """A fork that cannot be made as asked (answered 409 with the reason)."""


def fork_model(model: HostedModel, parent: HostedModel, version: int | None) -> int:
    """Create ``model`` as ``parent`` was at ``version`` (default: its stored version), rebuilt
    by replaying ``parent``'s stored batches ``1..version`` with ``parent``'s settings; the
    batches are copied too. Returns the version. :class:`ForkRefused` when ``version`` is past
    ``parent``'s, or some of its batches ``1..version`` are gone (an imported model has none)."""
    current = parent.reader.require()
    if version is None:
        version = current
    if version > current:
        raise ForkRefused(f"model {parent.name!r} is at version {current}: it has no version {version} to fork")
    info = parent.reader.model_info()
    batches = [b for b in parent.reader.batches() if b["version"] <= version]
    have = [b["version"] for b in batches]
    if have != list(range(1, version + 1)):
        missing = sorted(set(range(1, version + 1)) - set(have))
        raise ForkRefused(f"model {parent.name!r} cannot be rebuilt at version {version}: its stored batches "
                          f"{_ranges(missing)} are missing (an imported model keeps no batches: to copy it at its "
                          "current version, export it and import the file under the new name)")
    settings = info["settings"]
    learner = make_learner(settings)
    summary: dict[str, Any] = _learner_summary(learner)
    tasks: dict[str, dict[str, Any]] = {}
    for b in batches:
        r = learner.learn(b["task_id"], b["X"], b["y"])
        summary = {"representatives": _representatives(learner, summary.get("representatives", []), r),
                   "n_representatives": int(r.n_representatives)}
        t = tasks.setdefault(b["task_id"], {"n_batches": 0})
        t.update(version=b["version"], n_batches=t["n_batches"] + 1, last_update=result_json(r))
    model.writer.create(NewModel(learner, settings, version=version, summary=summary, tasks=tasks, batches=batches,
                                 origin={"fork": {"model": parent.name, "version": version}}))
    log.info("forked model %r from %r at version %d", model.name, parent.name, version,
             extra={"event": "model_forked", "model": model.name, "version": version})
    return version


def _ranges(v: list[int]) -> str:
    if not v:
        return ""
    return f"{v[0]}..{v[-1]}" if len(v) > 1 else str(v[0])
