"""records: a model's vocabulary, the columns its records are encoded into

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27

``feature_columns`` (model, column): one row per column of the encoded rows of a model with a
feature schema (the schema itself is in ``models.settings``): the feature, its role (``value``,
``missing``, ``level``) and a category's level. Append-only; unique per (model, feature, role,
level); deleted with its model. See service/vocabulary.py.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0009'
down_revision: Union[str, None] = '0008'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table('feature_columns',
    sa.Column('model_name', sa.String(length=200), nullable=False),
    sa.Column('column', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('feature', sa.String(length=200), nullable=False),
    sa.Column('role', sa.String(length=8), nullable=False),
    sa.Column('level', sa.String(length=200), nullable=False),
    sa.ForeignKeyConstraint(['model_name'], ['models.name'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('model_name', 'column'),
    sa.UniqueConstraint('model_name', 'feature', 'role', 'level', name='uq_feature_columns_level')
    )


def downgrade() -> None:
    op.drop_table('feature_columns')
