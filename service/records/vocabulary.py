"""A model's vocabulary: the columns its records are encoded into, append-only, in SQL.

One row per column of the encoded rows (:class:`fcl3.records.Column`): its index, the feature,
its role (``value``, ``missing``, ``level``) and, for a category's level, the level. A level
gets its column the first time a batch to learn holds it, in a short transaction of its own
*before* the update that uses it (:func:`Vocabulary.ensure`): the vocabulary is therefore always
a superset of what the engine has learned (a failed update leaves an unused column, which the
engine reads as zeros until a batch holds the level). Columns are never renumbered or removed;
the engine takes a wider batch by appending its columns (``grow_features``, docs/records.md).
Two writers that add a column at once: the unique constraints on ``(model, column)`` and on
``(model, feature, role, level)`` refuse the second insert, which reads the vocabulary again
and retries. Rows go with their model (``ON DELETE CASCADE``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from fcl3.records import Column
from service.store.tables import columns_t

#: Attempts of :meth:`Vocabulary.ensure` when other writers keep taking the next column.
ATTEMPTS = 8


class VocabularyConflict(Exception):
    """Other writers kept adding columns: :meth:`Vocabulary.ensure` gave up (a 503)."""


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

    def ensure(self, wanted: Sequence[Column]) -> tuple[Column, ...]:
        """Every column of ``wanted`` present (the missing ones appended, in order, committed);
        the whole vocabulary."""
        cols = self.columns()
        for _ in range(ATTEMPTS):
            have = set(cols)
            missing = [c for c in dict.fromkeys(wanted) if c not in have]
            if not missing:
                return cols
            try:
                with self.engine.begin() as conn:
                    conn.execute(
                        insert(columns_t),
                        [
                            {
                                "model_name": self.name,
                                "column": len(cols) + i,
                                "feature": c.feature,
                                "role": c.role,
                                "level": c.level,
                            }
                            for i, c in enumerate(missing)
                        ],
                    )
            except IntegrityError:
                pass  # another writer took those places (or those columns): read again
            cols = self.refresh()
        raise VocabularyConflict(f"model {self.name!r}: the vocabulary kept moving under {ATTEMPTS} attempts")

    def replace_all(self, columns: Sequence[Column]) -> None:
        """Store ``columns`` as the vocabulary of a model that has none yet (an import, a fork)."""
        if columns:
            with self.engine.begin() as conn:
                conn.execute(
                    insert(columns_t),
                    [
                        {"model_name": self.name, "column": i, "feature": c.feature, "role": c.role, "level": c.level}
                        for i, c in enumerate(columns)
                    ],
                )
        self.refresh()
