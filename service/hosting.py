"""The models one process serves: :class:`HostedModel` (a model's cached reads, guarded
writes, update lock, idempotency keys and evaluation) and :class:`ModelRegistry` (the default
model and a least-recently-used cache of the others), with what they all share
(:class:`Shared`: held by the app's state through the registry, never a process global)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from service import memory, metrics
from service.evaluation.model_evaluation import EvaluationSettings, ModelEvaluation
from service.evaluation.worker import Foreground, MatrixWorker
from service.events.hub import Hub
from service.learning.queue import WriteQueue
from service.records.vocabulary import Vocabulary
from service.store.reads import ModelReader, Snapshot
from service.store.watch import Watch
from service.store.writes import ModelWriter
from service.writing.idempotency import IdempotencyKeys
from service.writing.locks import FileLocks, LocalLocks, RedisLocks

Locks = LocalLocks | FileLocks | RedisLocks


class ServedGauges:
    """The gauges of the version the process serves of each model it holds, set when it changes."""

    def __init__(self) -> None:
        self._observed: dict[str, Snapshot] = {}

    def observe(self, reader: ModelReader) -> None:
        snap = reader.cached
        if snap is None or self._observed.get(reader.name) is snap:
            return
        self._observed[reader.name] = snap
        summary = snap.info.get("summary") or {}
        n_reps = summary.get("n_representatives", len(summary.get("representatives") or []))
        metrics.set_model(reader.name, snap.version, len(snap.learner.task_ids), int(n_reps))

    def forget(self, name: str) -> None:
        """``name`` is no longer held by this process: its gauges go."""
        self._observed.pop(name, None)
        metrics.forget_served(name)


@dataclass(frozen=True)
class Shared:
    """What every model of one app shares: the updates running (to which background work gives
    way), the background worker of the accuracy matrix, the event hub of ``GET .../events``,
    the served-model gauges, the evaluation settings and the heap trimmer (:mod:`service.memory`)."""

    foreground: Foreground = field(default_factory=Foreground)
    worker: MatrixWorker = field(default_factory=MatrixWorker)
    events: Hub = field(default_factory=Hub)
    gauges: ServedGauges = field(default_factory=ServedGauges)
    evaluation: EvaluationSettings = EvaluationSettings()
    heap: memory.HeapTrimmer = field(default_factory=memory.HeapTrimmer)

    def close(self) -> None:
        self.worker.shutdown()
        self.events.close()


@dataclass(frozen=True)
class HostedModel:
    """The model one process serves: its cached reads, its guarded writes, its update lock."""

    reader: ModelReader
    writer: ModelWriter
    locks: Locks
    #: The default model (``MODEL_NAME``): created at start-up and by its first write when
    #: missing. Any other model exists only once
    #: created through ``POST /models`` (missing: 404).
    default: bool
    #: The ``Idempotency-Key`` store (shared by every model of the process).
    keys: IdempotencyKeys
    #: Its online evaluation (:mod:`service.evaluation`): prequential sums, evaluation sets.
    evaluation: ModelEvaluation
    shared: Shared
    #: The columns its records are encoded into (:mod:`service.records.vocabulary`), cached.
    vocabulary: Vocabulary
    #: Its batches waiting in this process for their group commit (:mod:`service.learning.group_commit`).
    queue: WriteQueue

    @classmethod
    def open(
        cls,
        engine: Engine,
        locks: Locks,
        name: str,
        model_settings: dict[str, Any] | None,
        bulk_engine: Engine | None = None,
        default: bool = True,
        keys: IdempotencyKeys | None = None,
        watch: Watch | None = None,
        shared: Shared | None = None,
    ) -> HostedModel:
        """The model ``name`` on ``engine`` (``bulk_engine`` for its large transfers; see
        :data:`service.db.BULK_POOL_SIZE`), created with ``model_settings`` if it is missing
        (the default model only); ``watch``: the process's version watch (:mod:`service.store.watch`);
        ``shared``: the app's (a new one if not given)."""
        shared = shared if shared is not None else Shared()
        reader = ModelReader(engine, name, bulk_engine, watch, heap=shared.heap)
        keys = keys if keys is not None else IdempotencyKeys(engine, claim_ttl=getattr(locks, "ttl", 30.0))
        evaluation = ModelEvaluation(reader, shared.foreground, shared.worker, shared.evaluation)
        return cls(
            reader,
            ModelWriter(reader, model_settings),
            locks,
            default,
            keys,
            evaluation,
            shared,
            Vocabulary(engine, name),
            WriteQueue(),
        )

    @property
    def name(self) -> str:
        return self.reader.name

    def wake(self) -> None:
        """Tell this process's event streams of the model (other processes learn it from the database)."""
        self.shared.events.wake(self.name)

    def observe(self) -> None:
        """The served-model gauges of this model."""
        self.shared.gauges.observe(self.reader)


class ModelRegistry:
    """Every model one process serves, by name: the default model (always held) and a
    least-recently-used cache of at most ``cache_size`` others.

    An entry is a :class:`HostedModel` whose reader caches one learner; evicting the entry
    drops that learner (a request still using it finishes with it). Nothing here touches the
    database but :meth:`get` on a cache miss: a name that is not stored is never cached, and
    answers :class:`service.store.reads.ModelMissing` at its first read.
    Writers are cheap and the update lock is keyed by the model name in the shared
    :attr:`locks`, so two entries of one name (one evicted, still in use) stay correct; the
    version compare-and-set guards every commit anyway."""

    def __init__(
        self,
        engine: Engine,
        bulk_engine: Engine,
        locks: Locks,
        default_name: str,
        default_settings: dict[str, Any],
        cache_size: int,
        keys: IdempotencyKeys | None = None,
        watch: Watch | None = None,
        shared: Shared | None = None,
    ):
        self.engine, self.bulk_engine, self.locks, self.watch = engine, bulk_engine, locks, watch
        if shared is None:  # on its own (tests, benchmarks): the watch wakes its streams
            shared = Shared()
            if watch is not None:
                watch.subscribe(shared.events.changed)
        self.shared = shared
        self.keys = keys if keys is not None else IdempotencyKeys(engine, claim_ttl=getattr(locks, "ttl", 30.0))
        self.cache_size = max(1, int(cache_size))
        self.default = HostedModel.open(
            engine, locks, default_name, default_settings, bulk_engine, keys=self.keys, watch=watch, shared=shared
        )
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
                self.shared.gauges.forget(self._lru.popitem(last=False)[0])
        if evicted:
            self.shared.heap.after_model_change()
        return model

    def transient(self, name: str) -> HostedModel:
        """A handle on ``name`` that is not cached (for a request refused before it is used)."""
        return HostedModel.open(
            self.engine,
            self.locks,
            name,
            None,
            self.bulk_engine,
            default=False,
            keys=self.keys,
            watch=self.watch,
            shared=self.shared,
        )

    def forget(self, name: str) -> None:
        """Drop ``name``'s cached learner (after its deletion)."""
        with self._guard:
            self._lru.pop(name, None)
