"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-25

Arrays are LargeBinary (BYTEA / BLOB) holding np.save bytes; see service/tables.py.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0001'
down_revision: Union[str, None] = None
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table('models',
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('estimator', sa.String(length=100), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('settings', sa.JSON(), nullable=False),
    sa.Column('params', sa.JSON(), nullable=False),
    sa.Column('meta', sa.JSON(), nullable=False),
    sa.Column('arrays', sa.LargeBinary(), nullable=False),
    sa.Column('format_version', sa.Integer(), nullable=False),
    sa.Column('summary', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('batches',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('model_name', sa.String(length=200), nullable=False),
    sa.Column('task_id', sa.String(length=200), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('n_samples', sa.Integer(), nullable=False),
    sa.Column('X', sa.LargeBinary(), nullable=False),
    sa.Column('y', sa.LargeBinary(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['model_name'], ['models.name'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('model_name', 'version', name='uq_batches_model_version')
    )
    op.create_table('tasks',
    sa.Column('model_name', sa.String(length=200), nullable=False),
    sa.Column('task_id', sa.String(length=200), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('n_samples', sa.Integer(), nullable=False),
    sa.Column('n_batches', sa.Integer(), nullable=False),
    sa.Column('arrays', sa.LargeBinary(), nullable=False),
    sa.Column('meta', sa.JSON(), nullable=False),
    sa.Column('last_update', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['model_name'], ['models.name'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('model_name', 'task_id')
    )
    op.create_index('ix_tasks_model_version', 'tasks', ['model_name', 'version'], unique=False)



def downgrade() -> None:
    op.drop_index('ix_tasks_model_version', table_name='tasks')

    op.drop_table('tasks')
    op.drop_table('batches')
    op.drop_table('models')
