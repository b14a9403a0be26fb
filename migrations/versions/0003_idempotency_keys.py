"""idempotency keys of POST .../tasks/{task_id}/data

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-09

``idempotency_keys``: one row per (model, ``Idempotency-Key``): the hash of the request it
was first used with, the request holding it (``owner``) and, once that request committed, the
model version and the JSON response it answered (written in the same transaction as the
batch). Keyed by the model name first, like every other table. Purged by ``touched_at``.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0003'
down_revision: Union[str, None] = '0002'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table('idempotency_keys',
    sa.Column('model_name', sa.String(length=200), nullable=False),
    sa.Column('key', sa.String(length=255), nullable=False),
    sa.Column('request_hash', sa.String(length=64), nullable=False),
    sa.Column('owner', sa.String(length=32), nullable=False),
    sa.Column('version', sa.Integer(), nullable=True),
    sa.Column('response', sa.JSON(), nullable=True),
    sa.Column('touched_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('model_name', 'key')
    )
    op.create_index('ix_idempotency_keys_touched_at', 'idempotency_keys', ['touched_at'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_idempotency_keys_touched_at', table_name='idempotency_keys')
    op.drop_table('idempotency_keys')
