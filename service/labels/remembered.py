"""Labels that arrive later: a prediction made now, its label minutes or days later.

``POST .../predict`` with ``"remember": true`` stores each row it predicted
(``remembered_predictions``, :class:`service.store.tables.RememberedPredictionRow`) with the outputs
it was served and the version that served them, and answers one prediction id per row.
``POST .../labels`` learns the labelled rows as one batch of their task, under the update lock,
through the ordinary write path (:func:`service.learning.updates.learn_batch`): the rows are checked
there, the batch is stored in ``batches`` like any other, and the rows are marked labelled by
the batch's own commit (:class:`LabelBatch`, a commit participant), so that a row is learned at
most once. The batch's prequential sums are those of the outputs served when the rows were
predicted (:func:`service.evaluation.scores.served_sums`), never a recomputation.

**The answers of a label request**, checked in this order, each with nothing changed:
unknown ids (404), ids expired or dropped (410), ids labelled already (409 with the version of
the batch that learned them), ids of several tasks (422: one request, one task's batch).

**Expiry** is the database's clock (milliseconds since the epoch, :func:`db_ms`), like the
idempotency keys' (:mod:`service.writing.idempotency`): a row expires ``PREDICTION_TTL`` seconds after
it was predicted. The id carries its expiry (``<expires_ms hex>-<16 random hex>``), so that
an id whose row is gone is still told expired (410) from unknown (404). Expired rows of a model
are deleted by its next remembering prediction.

**Records**: a row of a model with a feature schema keeps the record it was predicted from, and
its label encodes that record under the update lock, over the vocabulary as it then stands
(:class:`service.records.rows.RecordsBatch`), so the batch learns the levels the record held,
those unseen when it was served included (their columns stored by the batch's commit).

**Bound**: at most ``MAX_REMEMBERED_PER_MODEL`` rows of a model wait for their label (beyond,
the oldest are dropped: their ids answer 410), and as many labelled or dropped rows are kept
(no arrays; the oldest deleted beyond, the latest expiry deleted kept as the model's
``remembered_forgotten_ms``: an unstored id expiring by then is 410, not 404). Remembering is
serialised per model (PostgreSQL: an advisory transaction lock; SQLite: its one writer).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Engine,
    case,
    cast,
    delete,
    func,
    insert,
    select,
    text,
    update,
)

from fcl3.schemas import PREDICTION_ID_PATTERN
from service.labels.refusals import (
    AlreadyLabelled,
    ExpiredPredictions,
    LabelsChanged,
    MixedTasks,
    TooManyRemembered,
    UnknownPredictions,
    listed,
)
from service.store.tables import batches_t, models_t, remembered_t

if TYPE_CHECKING:
    pass

#: A prediction id: its expiry (ms since the epoch, hex), a dash, 16 random hex digits.
_ID = re.compile(PREDICTION_ID_PATTERN)
#: The first key of the advisory locks that serialise remembering on PostgreSQL ("FCLR").
REMEMBER_SPACE = 0x46434C52
#: Ids per ``IN (...)`` list (SQLite's bound on parameters is far above it).
CHUNK = 500

PENDING, LABELLED, DROPPED = "p", "l", "d"


def db_ms(dialect: str) -> ColumnElement[int]:
    """The database's clock in milliseconds since the epoch, as SQL."""
    if dialect == "sqlite":
        return cast((func.julianday("now") - 2440587.5) * 86400000.0, BigInteger)
    return cast(func.floor(func.extract("epoch", func.now()) * 1000), BigInteger)


def expiry_of(prediction_id: str) -> int | None:
    """The expiry (ms since the epoch) a prediction id carries; None if it is not an id."""
    if not _ID.match(prediction_id):
        return None
    return int(prediction_id.partition("-")[0], 16)


def _new_id(expires_ms: int) -> str:
    return f"{expires_ms:x}-{secrets.token_hex(8)}"


def labels_hash(ids: Sequence[str], y: Sequence[float]) -> str:
    """SHA-256 of a label request (its ids and labels in order; ``1`` and ``1.0`` alike): an
    ``Idempotency-Key`` reused with other labels is refused (422)."""
    h = hashlib.sha256(b"fcl3-labels-v1\0")
    for i in ids:
        h.update(i.encode("ascii", "replace") + b"\0")
    h.update(np.ascontiguousarray(np.asarray(y, dtype=np.float64)).tobytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------- storage
@dataclass
class Remembered:
    """The rows of one label request, as stored: each id's task, row, served outputs and
    record (None: a row sent as numbers, or stored before records were kept)."""

    task_id: str
    X: list[np.ndarray]
    output: np.ndarray
    baseline: np.ndarray
    records: list[dict[str, Any] | None]


@dataclass(frozen=True)
class RememberedCounts:
    """A model's remembered rows after a prediction remembered some: waiting, and labelled or dropped."""

    pending: int
    done: int


_COLS = (
    remembered_t.c.prediction_id,
    remembered_t.c.task_id,
    remembered_t.c.state,
    remembered_t.c.x,
    remembered_t.c.output,
    remembered_t.c.baseline,
    remembered_t.c.label_version,
    remembered_t.c.expires_ms,
    remembered_t.c.record,
)


class RememberedPredictions:
    """The remembered predictions of the model ``name`` on ``engine``."""

    def __init__(self, engine: Engine, name: str):
        self.engine, self.name = engine, name
        self.dialect = engine.dialect.name

    # ------------------------------------------------------------------ remember
    def remember(
        self,
        task_id: str,
        version: int,
        X: np.ndarray,
        output: np.ndarray,
        baseline: np.ndarray,
        ttl: float,
        cap: int,
        records: Sequence[dict[str, Any]] | None = None,
    ) -> tuple[list[str], RememberedCounts]:
        """Store the rows (one transaction; ``records``: the record of each, for a model with a
        feature schema) and return their ids, in row order, and the model's rows then; the
        model's expired rows are deleted, its oldest waiting rows dropped beyond ``cap``, and
        its oldest labelled or dropped rows deleted beyond ``cap``."""
        n = X.shape[0]
        if n > cap:
            raise TooManyRemembered(f"{n} rows to remember in one request; at most {cap} (MAX_REMEMBERED_PER_MODEL)")
        t = remembered_t
        with self.engine.begin() as conn:
            if self.dialect == "postgresql":
                conn.execute(
                    text("SELECT pg_advisory_xact_lock(:space, hashtext(:m))"),
                    {"space": REMEMBER_SPACE, "m": self.name},
                )
            now = int(conn.execute(select(db_ms(self.dialect))).scalar_one())
            conn.execute(delete(t).where(t.c.model_name == self.name, t.c.expires_ms <= now))
            expires = now + max(1, int(ttl * 1000))
            ids = [_new_id(expires) for _ in range(n)]
            conn.execute(
                insert(t),
                [
                    {
                        "model_name": self.name,
                        "prediction_id": ids[i],
                        "task_id": task_id,
                        "version": version,
                        "state": PENDING,
                        "x": X[i],
                        "output": float(output[i]),
                        "baseline": float(baseline[i]) if np.isfinite(baseline[i]) else None,
                        "label_version": None,
                        "record": records[i] if records is not None else None,
                        "created_ms": now,
                        "expires_ms": expires,
                    }
                    for i in range(n)
                ],
            )
            waiting = conn.execute(
                select(func.count()).select_from(t).where(t.c.model_name == self.name, t.c.state == PENDING)
            ).scalar()
            excess = int(waiting or 0) - cap
            if excess > 0:
                mine = set(ids)
                oldest = conn.execute(
                    select(t.c.prediction_id)
                    .where(t.c.model_name == self.name, t.c.state == PENDING)
                    .order_by(t.c.expires_ms, t.c.created_ms, t.c.prediction_id)
                    .limit(excess + n)
                ).scalars()
                victims = [i for i in oldest if i not in mine][:excess]
                for k in range(0, len(victims), CHUNK):
                    conn.execute(
                        update(t)
                        .where(t.c.model_name == self.name, t.c.prediction_id.in_(victims[k : k + CHUNK]))
                        .values(state=DROPPED, x=None, output=None, baseline=None, record=None)
                    )
            done = self._forget_beyond(conn, cap)
        return ids, RememberedCounts(min(int(waiting or 0), cap), done)

    def _forget_beyond(self, conn: Connection, cap: int) -> int:
        """Delete the oldest labelled or dropped rows beyond ``cap``, the latest expiry deleted
        kept on the model's row; the rows labelled or dropped that stay."""
        t = remembered_t
        done = t.c.state != PENDING
        count = int(
            conn.execute(select(func.count()).select_from(t).where(t.c.model_name == self.name, done)).scalar() or 0
        )
        excess = count - cap
        if excess <= 0:
            return count
        oldest = conn.execute(
            select(t.c.prediction_id, t.c.expires_ms)
            .where(t.c.model_name == self.name, done)
            .order_by(t.c.expires_ms, t.c.created_ms, t.c.prediction_id)
            .limit(excess)
        ).all()
        for k in range(0, len(oldest), CHUNK):
            conn.execute(
                delete(t).where(
                    t.c.model_name == self.name, t.c.prediction_id.in_([r[0] for r in oldest[k : k + CHUNK]])
                )
            )
        latest = max(int(r[1]) for r in oldest)
        conn.execute(
            update(models_t)
            .where(models_t.c.name == self.name)
            .values(
                remembered_forgotten_ms=case(
                    (models_t.c.remembered_forgotten_ms > latest, models_t.c.remembered_forgotten_ms), else_=latest
                )
            )
        )
        return cap

    # ------------------------------------------------------------------ label
    def load(self, ids: Sequence[str]) -> Remembered:
        """The waiting rows of ``ids`` (in their order), or the refusal that applies:
        :class:`UnknownPredictions`, :class:`ExpiredPredictions`, :class:`AlreadyLabelled`,
        :class:`MixedTasks` (checked in this order)."""
        t = remembered_t
        rows: dict[str, Any] = {}
        with self.engine.connect() as conn:
            now = int(conn.execute(select(db_ms(self.dialect))).scalar_one())
            forgotten = conn.execute(
                select(models_t.c.remembered_forgotten_ms).where(models_t.c.name == self.name)
            ).scalar()
            gone_by = max(now, int(forgotten or 0))  # an id expiring by then is gone, not unknown
            for k in range(0, len(ids), CHUNK):
                for r in conn.execute(
                    select(*_COLS).where(t.c.model_name == self.name, t.c.prediction_id.in_(list(ids[k : k + CHUNK])))
                ):
                    rows[r.prediction_id] = r
        unknown: list[str] = []
        gone: list[str] = []
        for i in ids:
            found = rows.get(i)
            if found is None:
                expiry = expiry_of(i)
                (gone if expiry is not None and expiry <= gone_by else unknown).append(i)
            elif found.state == DROPPED or found.expires_ms <= now:
                gone.append(i)
        if unknown:
            raise UnknownPredictions(
                f"unknown prediction ids on model {self.name!r}: {listed(unknown)} (never "
                "remembered by a prediction of this model); nothing was learned",
                prediction_ids=unknown,
            )
        if gone:
            raise ExpiredPredictions(
                f"prediction ids past PREDICTION_TTL, or dropped beyond "
                f"MAX_REMEMBERED_PER_MODEL, on model {self.name!r}: {listed(gone)}; nothing "
                "was learned",
                prediction_ids=gone,
            )
        done = [i for i in ids if rows[i].state == LABELLED]
        if done:
            version = int(rows[done[0]].label_version)
            raise AlreadyLabelled(
                f"prediction ids labelled already on model {self.name!r}: {listed(done)} (the "
                f"first learned by the batch of version {version}); each id is labelled once; "
                "nothing was learned",
                version=version,
                prediction_ids=done,
            )
        tasks = sorted({rows[i].task_id for i in ids})
        if len(tasks) > 1:
            by = {tk: [i for i in ids if rows[i].task_id == tk] for tk in tasks}
            raise MixedTasks(
                f"the prediction ids belong to {len(tasks)} tasks ("
                + "; ".join(f"{tk!r}: {listed(v, 3)}" for tk, v in list(by.items())[:5])
                + "): a label request learns one batch of one task; send one request per task",
                tasks=tasks,
            )
        out = [rows[i] for i in ids]
        return Remembered(
            out[0].task_id,
            [np.asarray(r.x, dtype=float) for r in out],
            np.array([r.output for r in out], dtype=float),
            np.array([np.nan if r.baseline is None else r.baseline for r in out], dtype=float),
            [r.record for r in out],
        )

    def mark_labelled(self, conn: Connection, ids: Sequence[str], version: int) -> None:
        """In the batch's commit: the rows are labelled by ``version`` (their arrays dropped);
        :class:`LabelsChanged` unless every one of them was still waiting (rolls it back)."""
        t = remembered_t
        now = db_ms(conn.dialect.name)
        changed = 0
        for k in range(0, len(ids), CHUNK):
            changed += conn.execute(
                update(t)
                .where(
                    t.c.model_name == self.name,
                    t.c.prediction_id.in_(list(ids[k : k + CHUNK])),
                    t.c.state == PENDING,
                    t.c.expires_ms > now,
                )
                .values(state=LABELLED, label_version=version, x=None, output=None, baseline=None, record=None)
            ).rowcount
        if changed != len(ids):
            raise LabelsChanged(
                f"remembered predictions of model {self.name!r} changed while they were labelled "
                "(labelled by another request, dropped or expired); this batch was NOT applied — "
                "retry to see why"
            )

    def pending(self) -> dict[str, int]:
        """Rows of the model waiting for their label (not expired), per task."""
        t = remembered_t
        with self.engine.connect() as conn:
            return {
                task: int(n)
                for task, n in conn.execute(
                    select(t.c.task_id, func.count())
                    .where(t.c.model_name == self.name, t.c.state == PENDING, t.c.expires_ms > db_ms(self.dialect))
                    .group_by(t.c.task_id)
                )
            }

    def received(self) -> dict[str, tuple[int, int]]:
        """Labels received, per task: ``(batches, rows)`` of the label batches the model has
        learned (stored with ``source = 'labels'``, not taken back)."""
        b = batches_t
        with self.engine.connect() as conn:
            return {
                task: (int(n), int(rows or 0))
                for task, n, rows in conn.execute(
                    select(b.c.task_id, func.count(), func.sum(b.c.n_samples))
                    .where(b.c.model_name == self.name, b.c.source == "labels", b.c.taken_back.is_(None))
                    .group_by(b.c.task_id)
                )
            }

    def summary(self, version: int) -> dict[str, Any]:
        """The body of ``GET .../labels`` (:class:`fcl3.schemas.LabelsOut`): pending
        predictions and labels received, per task (the tasks with either), by task id."""
        pending, received = self.pending(), self.received()
        tasks = [
            {
                "task_id": task,
                "pending": pending.get(task, 0),
                "label_batches": received.get(task, (0, 0))[0],
                "labelled_rows": received.get(task, (0, 0))[1],
            }
            for task in sorted(set(pending) | set(received))
        ]
        return {
            "model": self.name,
            "version": version,
            "pending": sum(pending.values()),
            "label_batches": sum(n for n, _ in received.values()),
            "labelled_rows": sum(r for _, r in received.values()),
            "tasks": tasks,
        }
