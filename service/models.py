"""Database tables. Every row is keyed by a model name, so one database can hold many models.

* ``models``  – one row per model: settings it was created with, the learner's
  hyper-parameters, its global learned arrays and the ``version`` that guards every write
  (compare-and-set: ``UPDATE ... WHERE version = :read_version``).
* ``tasks``   – one row per (model, task): that task's arrays and meta, rewritten only by an
  update of that task; ``version`` is the model version that last wrote it, so a reader
  refreshes only the tasks that changed since its cached version.
* ``batches`` – append-only: every accepted raw batch with the model version it produced.
  ``(model_name, version)`` is the primary key, so a batch can never be applied twice.

Every primary key starts with the model name (``models.name``, ``tasks.model_name``,
``batches.model_name``), so the three tables can be partitioned or sharded by it (e.g. Citus
``create_distributed_table(..., 'model_name')``, colocated with ``models``); see
docs/operations.md.

Arrays are stored as ``np.save(..., allow_pickle=False)`` bytes (dtype and shape kept) in a
``LargeBinary`` column: BYTEA on PostgreSQL, BLOB on SQLite.
"""
from __future__ import annotations

import io
import struct
import time
import zipfile
import zlib
from datetime import datetime, timezone

import numpy as np
from sqlalchemy import JSON, Boolean, DateTime, ForeignKey, Index, Integer, LargeBinary, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator


def _now() -> datetime:
    return datetime.now(timezone.utc)


def array_to_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(a), allow_pickle=False)
    return buf.getvalue()


def array_from_bytes(b: bytes) -> np.ndarray:
    return np.load(io.BytesIO(b), allow_pickle=False)


#: ``.npy`` headers by (dtype, shape, Fortran order): an update writes the same arrays again.
_NPY_HEADERS: dict[tuple, bytes] = {}
#: Larger entries (or more of them) go through :mod:`zipfile`, which writes ZIP64 records.
_ZIP_SMALL = 1 << 30


def _npy_parts(a) -> tuple[bytes, bytes]:
    """The ``.npy`` header and data of ``a``: what ``np.save(allow_pickle=False)`` writes."""
    a = np.asanyarray(a)
    if a.dtype.hasobject or type(a) is not np.ndarray:
        b = array_to_bytes(a)  # refuses objects (allow_pickle=False); other subclasses as before
        return b, b""
    fortran = a.flags.f_contiguous and not a.flags.c_contiguous
    key = (a.dtype, a.shape, fortran)
    head = _NPY_HEADERS.get(key)
    if head is None:
        saved = array_to_bytes(a)
        head = saved[:len(saved) - a.nbytes]
        if len(_NPY_HEADERS) < 4096:
            _NPY_HEADERS[key] = head
    return head, a.tobytes(order="F" if fortran else "C")


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """``arrays`` as an uncompressed zip of ``<name>.npy`` entries: the format ``np.savez``
    writes and ``np.load`` reads, built directly (no :class:`zipfile.ZipFile`, whose
    per-entry bookkeeping cost more than the arrays of a small model)."""
    parts = [(name, *_npy_parts(a)) for name, a in arrays.items()]
    if (sum(len(h) + len(d) for _, h, d in parts) >= _ZIP_SMALL or len(parts) >= 0xFFFF
            or not all(name.isascii() for name, _, _ in parts)):  # ZIP64 or UTF-8 names: zipfile's own
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
            for name, head, data in parts:
                zf.writestr(f"{name}.npy", head + data)
        return buf.getvalue()
    t = time.localtime()
    dostime = t.tm_hour << 11 | t.tm_min << 5 | t.tm_sec // 2
    dosdate = (t.tm_year - 1980) << 9 | t.tm_mon << 5 | t.tm_mday
    out, central, offset = [], [], 0
    for name, head, data in parts:
        fname = name.encode() + b".npy"
        size = len(head) + len(data)
        crc = zlib.crc32(data, zlib.crc32(head))
        local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, dostime, dosdate, crc, size, size, len(fname), 0)
        out += (local, fname, head, data)
        central.append(struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 3 << 8 | 20, 20, 0, 0, dostime, dosdate, crc,
                                   size, size, len(fname), 0, 0, 0, 0, 0o600 << 16, offset) + fname)
        offset += len(local) + len(fname) + size
    cd = b"".join(central)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(parts), len(parts), len(cd), offset, 0)
    return b"".join(out) + cd + end


class NDArray(TypeDecorator):
    """One numpy array as ``.npy`` bytes (never pickle)."""

    impl = LargeBinary
    cache_ok = True

    def process_bind_param(self, value, dialect):
        return None if value is None else b"".join(_npy_parts(value))

    def process_result_value(self, value, dialect):
        return None if value is None else array_from_bytes(bytes(value))


class NDArrayDict(TypeDecorator):
    """A ``dict[str, ndarray]`` as an uncompressed zip of ``.npy`` files (``np.savez`` format,
    read back with ``allow_pickle=False``)."""

    impl = LargeBinary
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is None:
            return None
        return npz_bytes(value)

    def process_result_value(self, value, dialect):
        if value is None:
            return None
        with np.load(io.BytesIO(bytes(value)), allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}


class Base(DeclarativeBase):
    pass


class ModelRow(Base):
    __tablename__ = "models"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    estimator: Mapped[str] = mapped_column(String(100), nullable=False)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    settings: Mapped[dict] = mapped_column(JSON, nullable=False)  # what the model was created with
    params: Mapped[dict] = mapped_column(JSON, nullable=False)  # learner.get_params()
    meta: Mapped[dict] = mapped_column(JSON, nullable=False)  # ModelState.meta
    arrays: Mapped[dict] = mapped_column(NDArrayDict, nullable=False)  # ModelState.arrays
    format_version: Mapped[int] = mapped_column(Integer, nullable=False)
    summary: Mapped[dict] = mapped_column(JSON, nullable=False, default=dict)  # representatives etc.
    origin: Mapped[dict | None] = mapped_column(JSON, nullable=True)  # {"fork": {...}} / {"import": {...}}; null: created
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
    arrays: Mapped[dict] = mapped_column(NDArrayDict, nullable=False)  # ModelState.tasks[id]["arrays"]
    meta: Mapped[dict] = mapped_column(JSON, nullable=False)  # ModelState.tasks[id]["meta"]
    last_update: Mapped[dict] = mapped_column(JSON, nullable=False)  # the last UpdateResult, as JSON
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


class IdempotencyKeyRow(Base):
    """One ``Idempotency-Key`` of one model (see :mod:`service.idempotency`).

    Claimed (``response`` null, ``owner`` the claiming request) before the update; its
    ``response`` and ``version`` are written by the update's own commit, in the transaction
    that stores the batch. ``touched_at`` (claim, take-over, commit) drives both the expiry
    of an abandoned claim (``LOCK_TTL``) and the purge (``IDEMPOTENCY_TTL``). No foreign key
    to ``models``: the default model may be created by the very update that claims a key."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (Index("ix_idempotency_keys_touched_at", "touched_at"),)

    model_name: Mapped[str] = mapped_column(String(200), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64), nullable=False)  # sha256 of task id + batch
    owner: Mapped[str] = mapped_column(String(32), nullable=False)  # the request that holds the claim
    version: Mapped[int | None] = mapped_column(Integer, nullable=True)  # model version it produced
    response: Mapped[dict | None] = mapped_column(JSON, nullable=True)  # the 200 body; null: running
    touched_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, nullable=False)


# ----------------------------------------------------------------------------- online evaluation
# Nullable JSON columns store None as SQL NULL (none_as_null), so "IS NULL" finds them.
# Read and written by service.evaluation only (never by service.reads): the learner's rows
# above do not change shape. Keyed by the model name first, like every other table.
class PrequentialTaskRow(Base):
    """One task's cumulative prequential sums (``service.evaluation``: squared and absolute
    errors, or log-losses and hits, of the model and of the baseline, and the rows scored)."""

    __tablename__ = "prequential_tasks"

    model_name: Mapped[str] = mapped_column(ForeignKey("models.name", ondelete="CASCADE"), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    n_batches: Mapped[int] = mapped_column(Integer, nullable=False)  # batches scored
    sums: Mapped[dict] = mapped_column(JSON, nullable=False)
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
    scores: Mapped[dict] = mapped_column(JSON, nullable=False)  # task id -> {"version", "scores": Scores JSON}
    overall: Mapped[dict | None] = mapped_column(JSON(none_as_null=True), nullable=True)  # model-wide prequential sums
    matrix: Mapped[dict] = mapped_column(JSON, nullable=False)  # task id -> {row, diag, diag_base, best, last}
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
    event: Mapped[dict] = mapped_column(JSON, nullable=False)  # the update event's body (UpdateEvent)
    batch: Mapped[dict | None] = mapped_column(JSON(none_as_null=True), nullable=True)  # the batch's sums (+ auc); null: not scored
    overall: Mapped[dict | None] = mapped_column(JSON(none_as_null=True), nullable=True)  # model-wide sums after this version
    evaluation: Mapped[dict | None] = mapped_column(JSON(none_as_null=True), nullable=True)  # EvaluationEvent body; null: no sets
    matrix: Mapped[dict | None] = mapped_column(JSON(none_as_null=True), nullable=True)  # task id -> [metric, baseline]; new task only
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, nullable=False)
