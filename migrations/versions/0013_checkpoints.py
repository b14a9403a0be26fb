"""checkpoints: exact model states a take-back's replay starts from

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02

``checkpoints``: a few states of each model at past versions (the engine's state file bytes
with each task's counters and the summary), kept on a logarithmic schedule
(service.store.checkpoints), so that taking a batch back replays from the newest one before it.
Models stored before have none: their first take-backs replay from the start, as before.
"""

from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = "0013"
down_revision: Union[str, None] = "0012"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "checkpoints",
        sa.Column("model_name", sa.String(length=200), nullable=False),
        sa.Column("version", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("state", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["model_name"], ["models.name"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("model_name", "version"),
    )
    bind = op.get_bind()
    # a state is the engine's arrays, uncompressed: LZ4, as revision 0011 gives every column of
    # packed arrays (PostgreSQL 14 or later built with it)
    if bind.dialect.name == "postgresql" and bind.execute(sa.text(
            "SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)")).scalar():
        op.execute('ALTER TABLE checkpoints ALTER COLUMN "state" SET COMPRESSION lz4')


def downgrade() -> None:
    op.drop_table("checkpoints")
