"""PostgreSQL: the packed arrays compressed with LZ4

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28

Every column of packed arrays (a model's and a task's arrays, a batch's rows and labels, an
evaluation set's, a remembered row) is compressed with LZ4 instead of PostgreSQL's default
pglz when its value is stored out of line (over about 2 KB). pglz spends milliseconds on a
model's arrays of float64 and then stores them uncompressed (a School model's 208 KB: an UPDATE
and its commit 4.5-6.2 ms); LZ4 writes the same row in about 2.1 ms and keeps what compresses
(a batch of dummy-coded rows 8.3 KB -> 1 KB; pglz 0.4 KB) (``docs/operations.md``,
*Compression of the arrays*). Values stored before keep their compression; every new value
takes the column's. SQLite, and a PostgreSQL built without LZ4 (``default_toast_compression``
does not offer it), are left as they are.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0011'
down_revision: Union[str, None] = '0010'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

#: (table, column) of every column of packed arrays (``NDArray``, ``NDArrayDict``).
ARRAY_COLUMNS = (("models", "arrays"), ("tasks", "arrays"), ("batches", "X"), ("batches", "y"),
                 ("evaluation_sets", "X"), ("evaluation_sets", "y"), ("remembered_predictions", "x"))


def _lz4_available(bind) -> bool:
    """PostgreSQL 14 or later, built with LZ4 (it is then one of the setting's values)."""
    return bind.dialect.name == "postgresql" and bool(bind.execute(sa.text(
        "SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)")).scalar())


def _set(method: str) -> None:
    bind = op.get_bind()
    if not _lz4_available(bind):
        return
    for table, column in ARRAY_COLUMNS:
        op.execute(f'ALTER TABLE {table} ALTER COLUMN "{column}" SET COMPRESSION {method}')


def upgrade() -> None:
    _set("lz4")


def downgrade() -> None:
    _set("pglz")
