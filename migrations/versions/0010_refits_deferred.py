"""group commit: which batches were learned with the stream-level refits deferred

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28

``batches.refits_deferred``: true for a batch learned with ``learn(..., defer_refits=True)``
(every batch of a group commit but its last, service/group_commit.py), so that a replay (a
fork, a take-back) learns it the same way and rebuilds the model bit for bit. False for every
batch stored before (each was learned with its refits).
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0010'
down_revision: Union[str, None] = '0009'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table('batches') as batch:
        batch.add_column(sa.Column('refits_deferred', sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('batches') as batch:
        batch.drop_column('refits_deferred')
