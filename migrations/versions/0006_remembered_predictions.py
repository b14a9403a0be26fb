"""remembered predictions: labels that arrive later

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27

``remembered_predictions`` (model, prediction id): a row ``POST .../predict`` with
``"remember": true`` predicted, the outputs it was served and the version that served them,
until ``POST .../labels`` learns it or it expires (``PREDICTION_TTL``). Keyed by the model
name first, like every other table; deleted with its model.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0006'
down_revision: Union[str, None] = '0005'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table('remembered_predictions',
    sa.Column('model_name', sa.String(length=200), nullable=False),
    sa.Column('prediction_id', sa.String(length=40), nullable=False),
    sa.Column('task_id', sa.String(length=200), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=1), nullable=False),
    sa.Column('x', sa.LargeBinary(), nullable=True),
    sa.Column('output', sa.Float(), nullable=True),
    sa.Column('baseline', sa.Float(), nullable=True),
    sa.Column('label_version', sa.Integer(), nullable=True),
    sa.Column('created_ms', sa.BigInteger(), nullable=False),
    sa.Column('expires_ms', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['model_name'], ['models.name'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('model_name', 'prediction_id')
    )
    op.create_index('ix_remembered_predictions_pending', 'remembered_predictions',
                    ['model_name', 'state', 'expires_ms'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_remembered_predictions_pending', table_name='remembered_predictions')
    op.drop_table('remembered_predictions')
