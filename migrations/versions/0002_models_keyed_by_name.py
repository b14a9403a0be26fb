"""many models per database: every primary key starts with the model name

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02

Upgrades a database of the single-model release in place, keeping every model, task and
batch:

* ``batches``: the surrogate ``id`` goes; the primary key becomes ``(model_name, version)``
  (it was already unique), so every table is keyed by the model name first and can be
  partitioned or distributed by it (Citus: ``create_distributed_table('batches', 'model_name',
  colocate_with => 'models')``);
* ``models.origin``: how a model came to be (null: created; ``{"fork": {"model", "version"}}``
  or ``{"import": {...}}``).
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0002'
down_revision: Union[str, None] = '0001'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column('models', sa.Column('origin', sa.JSON(), nullable=True))
    if op.get_bind().dialect.name == 'sqlite':  # SQLite cannot alter a primary key: copy the table
        with op.batch_alter_table('batches', recreate='always') as b:
            b.drop_constraint('uq_batches_model_version', type_='unique')
            b.drop_column('id')
            b.create_primary_key('batches_pkey', ['model_name', 'version'])
    else:
        op.drop_constraint('batches_pkey', 'batches', type_='primary')
        op.drop_constraint('uq_batches_model_version', 'batches', type_='unique')
        op.drop_column('batches', 'id')  # its sequence goes with it
        op.create_primary_key('batches_pkey', 'batches', ['model_name', 'version'])


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        op.create_table('_batches_0001',
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
        op.execute('INSERT INTO _batches_0001 (model_name, task_id, version, n_samples, "X", y, created_at) '
                   'SELECT model_name, task_id, version, n_samples, "X", y, created_at FROM batches '
                   'ORDER BY created_at, model_name, version')
        op.drop_table('batches')
        op.rename_table('_batches_0001', 'batches')
    else:
        op.drop_constraint('batches_pkey', 'batches', type_='primary')
        op.execute('ALTER TABLE batches ADD COLUMN id SERIAL')
        op.create_primary_key('batches_pkey', 'batches', ['id'])
        op.create_unique_constraint('uq_batches_model_version', 'batches', ['model_name', 'version'])
    op.drop_column('models', 'origin')
