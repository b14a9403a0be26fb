"""take a batch back: the take-backs, and each batch's state

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27

``take_backs`` (model, version): one row per ``DELETE .../batches/{version}``, the model
version it produced and the batch it took back (unique per model: a batch is taken back at most
once). ``batches.taken_back``: the version of the take-back that removed the batch (null: the
batch is learned). ``batches.source``: ``labels`` for a batch of labels that arrived later,
null for a batch posted directly. Keyed by the model name first; deleted with its model.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0007'
down_revision: Union[str, None] = '0006'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table('batches') as batch:
        batch.add_column(sa.Column('taken_back', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('source', sa.String(length=8), nullable=True))
    op.create_table('take_backs',
    sa.Column('model_name', sa.String(length=200), nullable=False),
    sa.Column('version', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('batch_version', sa.Integer(), nullable=False),
    sa.Column('task_id', sa.String(length=200), nullable=False),
    sa.Column('n_samples', sa.Integer(), nullable=False),
    sa.Column('task_removed', sa.Boolean(), nullable=False),
    sa.Column('n_replayed', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['model_name'], ['models.name'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('model_name', 'version'),
    sa.UniqueConstraint('model_name', 'batch_version', name='uq_take_backs_batch')
    )


def downgrade() -> None:
    op.drop_table('take_backs')
    with op.batch_alter_table('batches') as batch:
        batch.drop_column('source')
        batch.drop_column('taken_back')
