"""online evaluation: prequential sums, evaluation sets, evaluation state and log

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-16

Four tables of their own (the learner's tables do not change; see service/evaluation.py),
each keyed by the model name first and deleted with the model:

* ``prequential_tasks``: per task, the cumulative prequential sums (model and baseline);
* ``evaluation_sets``: per task, held-out labelled rows (raw, never learned), bounded;
* ``evaluation_state``: per model, the current scores on every evaluation set, the
  model-wide prequential sums, the running accuracy-matrix summary, the sets' revision;
* ``evaluation_log``: per committed update (model, version), the update's event, its batch
  and model-wide prequential sums, and on a new task the accuracy matrix's row.

A database upgraded from 0003 has no log rows for its earlier versions: an event stream
resumed from one of them answers ``event: reset``.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0004'
down_revision: Union[str, None] = '0003'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def _model_fk():
    return sa.ForeignKeyConstraint(['model_name'], ['models.name'], ondelete='CASCADE')


def upgrade() -> None:
    op.create_table('prequential_tasks',
    sa.Column('model_name', sa.String(length=200), nullable=False),
    sa.Column('task_id', sa.String(length=200), nullable=False),
    sa.Column('n_batches', sa.Integer(), nullable=False),
    sa.Column('sums', sa.JSON(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    _model_fk(),
    sa.PrimaryKeyConstraint('model_name', 'task_id')
    )
    op.create_table('evaluation_sets',
    sa.Column('model_name', sa.String(length=200), nullable=False),
    sa.Column('task_id', sa.String(length=200), nullable=False),
    sa.Column('n_received', sa.Integer(), nullable=False),
    sa.Column('X', sa.LargeBinary(), nullable=False),
    sa.Column('y', sa.LargeBinary(), nullable=False),
    sa.Column('revision', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    _model_fk(),
    sa.PrimaryKeyConstraint('model_name', 'task_id')
    )
    op.create_table('evaluation_state',
    sa.Column('model_name', sa.String(length=200), nullable=False),
    sa.Column('revision', sa.Integer(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('scores', sa.JSON(), nullable=False),
    sa.Column('overall', sa.JSON(), nullable=True),
    sa.Column('matrix', sa.JSON(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    _model_fk(),
    sa.PrimaryKeyConstraint('model_name')
    )
    op.create_table('evaluation_log',
    sa.Column('model_name', sa.String(length=200), nullable=False),
    sa.Column('version', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('task_id', sa.String(length=200), nullable=False),
    sa.Column('new_task', sa.Boolean(), nullable=False),
    sa.Column('event', sa.JSON(), nullable=False),
    sa.Column('batch', sa.JSON(), nullable=True),
    sa.Column('overall', sa.JSON(), nullable=True),
    sa.Column('evaluation', sa.JSON(), nullable=True),
    sa.Column('matrix', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    _model_fk(),
    sa.PrimaryKeyConstraint('model_name', 'version')
    )


def downgrade() -> None:
    op.drop_table('evaluation_log')
    op.drop_table('evaluation_state')
    op.drop_table('evaluation_sets')
    op.drop_table('prequential_tasks')
