"""remembered predictions: their records, and the bound on the rows a model keeps

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02

``remembered_predictions.record``: the record a row of a model with a feature schema was
predicted from (null for rows sent as numbers, and for every row stored before), so that its
label learns the levels the record held, those unseen when it was served included.
``models.remembered_forgotten_ms``: the latest expiry among the labelled or dropped rows deleted
to keep a model's remembered rows within their bound (null: none deleted); an id that is no
longer stored and expires by then is answered 410, not 404.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0012'
down_revision: Union[str, None] = '0011'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table('remembered_predictions') as batch:
        batch.add_column(sa.Column('record', sa.JSON(), nullable=True))
    with op.batch_alter_table('models') as batch:
        batch.add_column(sa.Column('remembered_forgotten_ms', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('models') as batch:
        batch.drop_column('remembered_forgotten_ms')
    with op.batch_alter_table('remembered_predictions') as batch:
        batch.drop_column('record')
