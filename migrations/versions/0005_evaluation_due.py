"""accuracy-matrix rows still due in a table of their own

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26

``evaluation_due`` (model, version, task): one row per accuracy-matrix row a new task's
commit made due, deleted when the row is stored. The rows still due in
``evaluation_state.matrix["due"]`` (a JSON list of ``[version, task_id]``) move there.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0005'
down_revision: Union[str, None] = '0004'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

_state = sa.table('evaluation_state', sa.column('model_name', sa.String), sa.column('matrix', sa.JSON))
_due = sa.table('evaluation_due', sa.column('model_name', sa.String), sa.column('version', sa.Integer),
                sa.column('task_id', sa.String), sa.column('created_at', sa.DateTime(timezone=True)))


def upgrade() -> None:
    op.create_table('evaluation_due',
    sa.Column('model_name', sa.String(length=200), nullable=False),
    sa.Column('version', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('task_id', sa.String(length=200), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['model_name'], ['models.name'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('model_name', 'version')
    )
    conn = op.get_bind()
    from datetime import datetime, timezone

    now = datetime.now(timezone.utc)
    for name, matrix in conn.execute(sa.select(_state.c.model_name, _state.c.matrix)).all():
        due = (matrix or {}).get('due')
        if not due:
            continue
        for version, task in due:
            conn.execute(_due.insert().values(model_name=name, version=int(version), task_id=task, created_at=now))
        conn.execute(_state.update().where(_state.c.model_name == name).values(
            matrix={k: v for k, v in matrix.items() if k != 'due'}))


def downgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(sa.select(_due.c.model_name, _due.c.version, _due.c.task_id)
                        .order_by(_due.c.model_name, _due.c.version)).all()
    by_model: dict = {}
    for name, version, task in rows:
        by_model.setdefault(name, []).append([version, task])
    for name, due in by_model.items():
        matrix = conn.execute(sa.select(_state.c.matrix).where(_state.c.model_name == name)).scalar() or {}
        conn.execute(_state.update().where(_state.c.model_name == name).values(matrix={**matrix, 'due': due}))
    op.drop_table('evaluation_due')
