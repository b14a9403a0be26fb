"""Database tables. Every row is keyed by a model name, so one database can hold many models.

* ``models``  – one row per model: settings it was created with, the learner's
  hyper-parameters, its global learned arrays and the ``version`` that guards every write
  (compare-and-set: ``UPDATE ... WHERE version = :read_version``).
* ``tasks``   – one row per (model, task): that task's arrays and meta, rewritten only by an
  update of that task; ``version`` is the model version that last wrote it, so a reader
  refreshes only the tasks that changed since its cached version.
* ``batches`` – append-only: every accepted raw batch with the model version it produced.
  ``(model_name, version)`` is the primary key, so a batch can never be applied twice. A batch
  taken back keeps its row, marked with the version of the take-back (``taken_back``).
* ``take_backs`` – one row per batch taken back (``DELETE .../batches/{version}``,
  :mod:`service.take_back`), keyed by the model version it produced.
* ``checkpoints`` – a few exact states of the model at past versions
  (:mod:`service.store.checkpoints`), where a take-back's replay starts.

Every primary key starts with the model name (``models.name``, ``tasks.model_name``,
``batches.model_name``), so the three tables can be partitioned or sharded by it (e.g. Citus
``create_distributed_table(..., 'model_name')``, colocated with ``models``); see
docs/operations.md.

Arrays are stored in a ``LargeBinary`` column (BYTEA on PostgreSQL, BLOB on SQLite), dtype and
shape kept, never pickled: one array as ``np.save(..., allow_pickle=False)`` bytes (batches),
named arrays (a model's or a task's) as :func:`service.store.packed_arrays.pack_arrays` bytes, or, in
rows written before, an ``np.savez`` zip, which is read as well.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import numpy as np
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    UniqueConstraint,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from service.store.packed_arrays import array_from_bytes, array_to_bytes, pack_arrays, unpack_arrays


def _now() -> datetime:
    return datetime.now(timezone.utc)


class NDArray(TypeDecorator[np.ndarray]):
    """One numpy array as ``.npy`` bytes (never pickle)."""

    impl = LargeBinary
    cache_ok = True

    def process_bind_param(self, value: np.ndarray | None, dialect: Dialect) -> bytes | None:
        return None if value is None else array_to_bytes(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> np.ndarray | None:
        return None if value is None else array_from_bytes(bytes(value))


class NDArrayDict(TypeDecorator[dict[str, np.ndarray]]):
    """A ``dict[str, ndarray]`` as :func:`pack_arrays` bytes; rows written before (an
    uncompressed ``np.savez`` zip) are read as well. Never pickle."""

    impl = LargeBinary
    cache_ok = True

    def process_bind_param(self, value: dict[str, np.ndarray] | None, dialect: Dialect) -> bytes | None:
        return None if value is None else pack_arrays(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> dict[str, np.ndarray] | None:
        return None if value is None else unpack_arrays(bytes(value))


class Base(DeclarativeBase):
    pass


class ModelRow(Base):
    __tablename__ = "models"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    estimator: Mapped[str] = mapped_column(String(100), nullable=False)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)  # what the model was created with
    params: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)  # learner.get_params()
    meta: Mapped[dict[str, Any]] = mapped_column(
        JSON, nullable=False
    )  # ModelState.meta, without task_order (tasks.position)
    arrays: Mapped[dict[str, Any]] = mapped_column(NDArrayDict, nullable=False)  # ModelState.arrays
    format_version: Mapped[int] = mapped_column(Integer, nullable=False)
    summary: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)  # representatives etc.
    origin: Mapped[dict[str, Any] | None] = mapped_column(
        JSON, nullable=True
    )  # {"fork": {...}} / {"import": {...}}; null: created
    #: The latest expiry of the remembered predictions deleted to keep within their bound (service.labels)
    remembered_forgotten_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, nullable=False)


class TaskRow(Base):
    __tablename__ = "tasks"
    __table_args__ = (Index("ix_tasks_model_version", "model_name", "version"),)

    model_name: Mapped[str] = mapped_column(ForeignKey("models.name", ondelete="CASCADE"), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, nullable=False)  # model version that last wrote it
    n_samples: Mapped[int] = mapped_column(Integer, nullable=False)
    n_batches: Mapped[int] = mapped_column(Integer, nullable=False)
    #: The task's place in the learner's task order (``ModelState.meta["task_order"]``, which
    #: the model row does not store: it would grow with the tasks and be rewritten by every commit)
    position: Mapped[int | None] = mapped_column(Integer, nullable=True)
    arrays: Mapped[dict[str, Any]] = mapped_column(NDArrayDict, nullable=False)  # ModelState.tasks[id]["arrays"]
    meta: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)  # ModelState.tasks[id]["meta"]
    last_update: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)  # the last UpdateResult, as JSON
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, nullable=False)


class BatchRow(Base):
    __tablename__ = "batches"

    model_name: Mapped[str] = mapped_column(ForeignKey("models.name", ondelete="CASCADE"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)  # model version it produced
    task_id: Mapped[str] = mapped_column(String(200), nullable=False)
    n_samples: Mapped[int] = mapped_column(Integer, nullable=False)
    X: Mapped[np.ndarray] = mapped_column(NDArray, nullable=False)
    y: Mapped[np.ndarray] = mapped_column(NDArray, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, nullable=False)
    #: The version of the take-back that removed this batch from the model; null: learned.
    taken_back: Mapped[int | None] = mapped_column(Integer, nullable=True)
    #: ``labels``: the rows of remembered predictions labelled later (:mod:`service.labels`); null: posted.
    source: Mapped[str | None] = mapped_column(String(8), nullable=True)
    #: Learned with the stream-level refits left to a later batch (all but the last batch of a
    #: group commit, :mod:`service.learning.group_commit`); a replay learns it the same way.
    refits_deferred: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False, server_default=false())


class TakeBackRow(Base):
    """One batch taken back (:mod:`service.take_back`): the model version the take-back
    produced (``version``), the batch it removed (``batch_version``, unique per model), that
    batch's task and rows, whether the task went with it (its only batch) and how many batches
    were replayed to rebuild the model."""

    __tablename__ = "take_backs"
    __table_args__ = (UniqueConstraint("model_name", "batch_version", name="uq_take_backs_batch"),)

    model_name: Mapped[str] = mapped_column(ForeignKey("models.name", ondelete="CASCADE"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    batch_version: Mapped[int] = mapped_column(Integer, nullable=False)
    task_id: Mapped[str] = mapped_column(String(200), nullable=False)
    n_samples: Mapped[int] = mapped_column(Integer, nullable=False)
    task_removed: Mapped[bool] = mapped_column(Boolean, nullable=False)
    n_replayed: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, nullable=False)


class CheckpointRow(Base):
    """The model's exact state at ``version`` (:mod:`service.store.checkpoints`): the engine's
    state file bytes, each task's counters and the summary, so a replay can start there."""

    __tablename__ = "checkpoints"

    model_name: Mapped[str] = mapped_column(ForeignKey("models.name", ondelete="CASCADE"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    state: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)  # service.models.state_files bytes
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, nullable=False)


class IdempotencyKeyRow(Base):
    """One ``Idempotency-Key`` of one model (see :mod:`service.writing.idempotency`).

    Claimed (``response`` null, ``owner`` the claiming request) before the update; its
    ``response`` and ``version`` are written by the update's own commit, in the transaction
    that stores the batch. ``owner`` is ``<holder>.<request>``, the holder naming the claiming
    process (its PostgreSQL lease ``g<id>``, or ``p<pid>-<start>`` on SQLite), so that a claim
    whose process is gone is taken over at once. ``touched_at`` (claim, take-over, commit),
    always stamped by the database's clock, drives both the expiry of a claim (``LOCK_TTL``)
    and the purge (``IDEMPOTENCY_TTL``). No foreign key to ``models``: the default model may be
    created by the very update that claims a key."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (Index("ix_idempotency_keys_touched_at", "touched_at"),)

    model_name: Mapped[str] = mapped_column(String(200), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64), nullable=False)  # sha256 of task id + batch
    owner: Mapped[str] = mapped_column(String(32), nullable=False)  # the request that holds the claim
    version: Mapped[int | None] = mapped_column(Integer, nullable=True)  # model version it produced
    response: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # the 200 body; null: running
    touched_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, nullable=False)


# ----------------------------------------------------------------------------- online evaluation
# Nullable JSON columns store None as SQL NULL (none_as_null), so "IS NULL" finds them.
# Read and written by service.evaluation only (never by service.store.reads): the learner's rows
# above do not change shape. Keyed by the model name first, like every other table.
class PrequentialTaskRow(Base):
    """One task's cumulative prequential sums (``service.evaluation``: squared and absolute
    errors, or log-losses and hits, of the model and of the baseline, and the rows scored)."""

    __tablename__ = "prequential_tasks"

    model_name: Mapped[str] = mapped_column(ForeignKey("models.name", ondelete="CASCADE"), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    n_batches: Mapped[int] = mapped_column(Integer, nullable=False)  # batches scored
    sums: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, nullable=False)


class EvaluationSetRow(Base):
    """One task's held-out evaluation rows (raw, as sent; never learned), at most
    ``EVALUATION_MAX_ROWS`` of the ``n_received`` (a reservoir)."""

    __tablename__ = "evaluation_sets"

    model_name: Mapped[str] = mapped_column(ForeignKey("models.name", ondelete="CASCADE"), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    n_received: Mapped[int] = mapped_column(Integer, nullable=False)
    X: Mapped[np.ndarray] = mapped_column(NDArray, nullable=False)
    y: Mapped[np.ndarray] = mapped_column(NDArray, nullable=False)
    revision: Mapped[int] = mapped_column(Integer, nullable=False)  # evaluation_state.revision that wrote it
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, nullable=False)


class EvaluationStateRow(Base):
    """A model's evaluation now: ``revision`` of its evaluation sets (bumped by every post of
    evaluation rows), the model ``version`` its scores are of, each task's current score on its
    evaluation rows, the model-wide prequential sums, and the running summary of the accuracy
    matrix that the transfer figures are read from."""

    __tablename__ = "evaluation_state"

    model_name: Mapped[str] = mapped_column(ForeignKey("models.name", ondelete="CASCADE"), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, nullable=False)
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    scores: Mapped[dict[str, Any]] = mapped_column(
        JSON, nullable=False
    )  # task id -> {"version", "scores": Scores JSON}
    overall: Mapped[dict[str, Any] | None] = mapped_column(
        JSON(none_as_null=True), nullable=True
    )  # model-wide prequential sums
    matrix: Mapped[dict[str, Any]] = mapped_column(
        JSON, nullable=False
    )  # task id -> {row, diag, diag_base, best, last}
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, nullable=False)


class EvaluationLogRow(Base):
    """Append-only, one row per committed update (the event stream replays it): what the update
    did, its batch's prequential sums, the model-wide sums after it, and on a new task's
    version the accuracy matrix's row (every learned task's metric and baseline)."""

    __tablename__ = "evaluation_log"

    model_name: Mapped[str] = mapped_column(ForeignKey("models.name", ondelete="CASCADE"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    task_id: Mapped[str] = mapped_column(String(200), nullable=False)
    new_task: Mapped[bool] = mapped_column(Boolean, nullable=False)
    event: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)  # the update event's body (UpdateEvent)
    batch: Mapped[dict[str, Any] | None] = mapped_column(
        JSON(none_as_null=True), nullable=True
    )  # the batch's sums (+ auc); null: not scored
    overall: Mapped[dict[str, Any] | None] = mapped_column(
        JSON(none_as_null=True), nullable=True
    )  # model-wide sums after this version
    evaluation: Mapped[dict[str, Any] | None] = mapped_column(
        JSON(none_as_null=True), nullable=True
    )  # EvaluationEvent body; null: no sets
    matrix: Mapped[dict[str, Any] | None] = mapped_column(
        JSON(none_as_null=True), nullable=True
    )  # task id -> [metric, baseline]; new task only
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, nullable=False)


class EvaluationDueRow(Base):
    """An accuracy-matrix row still due: written by the commit of a new task's version, deleted
    when the row is stored (``evaluation_log.matrix``). A row whose process died first is
    computed by the model's next update (:meth:`service.evaluation.matrix.AccuracyMatrix.recover`)."""

    __tablename__ = "evaluation_due"

    model_name: Mapped[str] = mapped_column(ForeignKey("models.name", ondelete="CASCADE"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    task_id: Mapped[str] = mapped_column(String(200), nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, nullable=False)


# ----------------------------------------------------------------------------- labels that arrive later
class RememberedPredictionRow(Base):
    """One row a ``POST .../predict`` with ``"remember": true`` predicted (:mod:`service.labels`):
    its features, the outputs it was served (the model's value or decision score, and the
    baseline's: the batch's prequential figures when it is labelled) and the version that
    served it. ``state``: ``p`` pending, ``l`` labelled (by the batch of ``label_version``;
    its arrays dropped), ``d`` dropped (more than ``MAX_REMEMBERED_PER_MODEL`` pending). Times
    are milliseconds since the epoch on the database's clock; the row is deleted once
    ``expires_ms`` passed, and the id itself carries ``expires_ms``, so a deleted id is still
    told expired (410) from unknown (404)."""

    __tablename__ = "remembered_predictions"
    __table_args__ = (Index("ix_remembered_predictions_pending", "model_name", "state", "expires_ms"),)

    model_name: Mapped[str] = mapped_column(ForeignKey("models.name", ondelete="CASCADE"), primary_key=True)
    prediction_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(200), nullable=False)
    version: Mapped[int] = mapped_column(Integer, nullable=False)  # the model version that served it
    state: Mapped[str] = mapped_column(String(1), nullable=False)  # p pending, l labelled, d dropped
    x: Mapped[np.ndarray | None] = mapped_column(NDArray, nullable=True)  # the row; null once labelled or dropped
    output: Mapped[float | None] = mapped_column(Float, nullable=True)  # served value / decision score
    baseline: Mapped[float | None] = mapped_column(Float, nullable=True)  # the baseline's (null: overflowed)
    label_version: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the batch that learned it
    #: The record it was predicted from (a model with a feature schema), for its label to encode
    record: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_ms: Mapped[int] = mapped_column(BigInteger, nullable=False)
    expires_ms: Mapped[int] = mapped_column(BigInteger, nullable=False)


# ----------------------------------------------------------------------------- records
class FeatureColumnRow(Base):
    """One column of a model's encoded records (:mod:`service.records.vocabulary`): its index, the
    feature, its role (``value``, ``missing``, ``level``) and, for a category's level, the level."""

    __tablename__ = "feature_columns"
    __table_args__ = (UniqueConstraint("model_name", "feature", "role", "level", name="uq_feature_columns_level"),)

    model_name: Mapped[str] = mapped_column(ForeignKey("models.name", ondelete="CASCADE"), primary_key=True)
    column: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    feature: Mapped[str] = mapped_column(String(200), nullable=False)
    role: Mapped[str] = mapped_column(String(8), nullable=False)  # value, missing, level
    level: Mapped[str] = mapped_column(String(200), nullable=False, default="")


# ----------------------------------------------------------------------------- the tables, by name
# Each table's one alias, for the SQL Core statements of every module that reads or writes it.
models_t = Base.metadata.tables[ModelRow.__tablename__]
tasks_t = Base.metadata.tables[TaskRow.__tablename__]
batches_t = Base.metadata.tables[BatchRow.__tablename__]
take_backs_t = Base.metadata.tables[TakeBackRow.__tablename__]
checkpoints_t = Base.metadata.tables[CheckpointRow.__tablename__]
keys_t = Base.metadata.tables[IdempotencyKeyRow.__tablename__]
preq_t = Base.metadata.tables[PrequentialTaskRow.__tablename__]
sets_t = Base.metadata.tables[EvaluationSetRow.__tablename__]
state_t = Base.metadata.tables[EvaluationStateRow.__tablename__]
log_t = Base.metadata.tables[EvaluationLogRow.__tablename__]
due_t = Base.metadata.tables[EvaluationDueRow.__tablename__]
remembered_t = Base.metadata.tables[RememberedPredictionRow.__tablename__]
columns_t = Base.metadata.tables[FeatureColumnRow.__tablename__]
