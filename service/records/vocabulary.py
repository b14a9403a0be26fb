"""A model's vocabulary: the columns its records are encoded into, append-only, in SQL.

One row per column of the encoded rows (:class:`fcl3.records.Column`): its index, the feature,
its role (``value``, ``missing``, ``level``) and, for a category's level, the level. A new model's
columns (its base columns, or an import's or a fork's vocabulary) are written by the
transaction that creates it (:class:`service.store.writes.NewModel`). A level gets its column
when a batch that holds it is committed: the batch is encoded under the update lock over the
vocabulary as it then stands, its new levels appended in memory, and :class:`NewColumns` writes
them in the batch's own commit. A refused batch therefore leaves the vocabulary as it was, and
the vocabulary is always exactly what the model's committed batches brought. Columns are never
renumbered or removed; the engine takes a wider batch by appending its columns
(``grow_features``, docs/records.md). Commits of one model are serialised by the update lock and
guarded by the version compare-and-set; the unique constraints on ``(model, column)`` and on
``(model, feature, role, level)`` are the last guard. Rows go with their model (``ON DELETE
CASCADE``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, select

from fcl3.records import Column
from service.store.commit import Commit, CommitParticipant
from service.store.prepared import Prepared
from service.store.tables import columns_t
from service.store.writes import insert_columns


class Vocabulary:
    """The columns of one model, cached in the process: a read sees every column the engine has
    learned once :meth:`refresh` ran after the learner's version it predicts with."""

    def __init__(self, engine: Engine, name: str):
        self.engine, self.name = engine, name
        self._columns: tuple[Column, ...] | None = None
        self._guard = threading.Lock()

    def columns(self) -> tuple[Column, ...]:
        """The columns as last read (read now the first time)."""
        cols = self._columns
        return cols if cols is not None else self.refresh()

    def refresh(self) -> tuple[Column, ...]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(columns_t.c.feature, columns_t.c.role, columns_t.c.level)
                .where(columns_t.c.model_name == self.name)
                .order_by(columns_t.c.column)
            ).all()
        cols = tuple(Column(f, r, lv) for f, r, lv in rows)
        with self._guard:
            self._columns = cols
        return cols

    def forget(self) -> None:
        """Drop the cached columns (the model was deleted: a new one of its name starts empty)."""
        with self._guard:
            self._columns = None


@dataclass
class NewColumns(CommitParticipant[Prepared]):
    """The columns a batch brings (its new levels), appended at ``start`` by the batch's commit."""

    name: str
    start: int
    columns: Sequence[Column]

    def in_commit(self, conn: Connection, commit: Commit[Prepared]) -> None:
        insert_columns(conn, self.name, self.start, self.columns)
