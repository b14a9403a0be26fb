"""task positions: the learner's task order kept by the task rows, not the model row

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27

``tasks.position``: the task's place in the learner's task order. The model row's ``meta``
held that order as ``task_order``, a list of every task id rewritten by every commit (its
size grew with the number of tasks); the store now keeps it in the task rows (written when a
task is created, and by a take-back, which rebuilds the model) and rebuilds the list when it
loads the model. Upgrade: each model's ``task_order`` becomes its tasks' positions and leaves
``meta``; downgrade puts it back.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0008'
down_revision: Union[str, None] = '0007'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

_models = sa.table('models', sa.column('name', sa.String), sa.column('meta', sa.JSON))
_tasks = sa.table('tasks', sa.column('model_name', sa.String), sa.column('task_id', sa.String),
                  sa.column('position', sa.Integer))


def upgrade() -> None:
    with op.batch_alter_table('tasks') as batch:
        batch.add_column(sa.Column('position', sa.Integer(), nullable=True))
    conn = op.get_bind()
    for name, meta in conn.execute(sa.select(_models.c.name, _models.c.meta)).all():
        meta = dict(meta or {})
        order = meta.pop('task_order', None)
        if order is None:
            continue
        if order:
            conn.execute(_tasks.update().where(_tasks.c.model_name == sa.bindparam('m'),
                                               _tasks.c.task_id == sa.bindparam('t')).values(position=sa.bindparam('p')),
                         [{'m': name, 't': t, 'p': i} for i, t in enumerate(order)])
        conn.execute(_models.update().where(_models.c.name == name).values(meta=meta))


def downgrade() -> None:
    conn = op.get_bind()
    for name, meta in conn.execute(sa.select(_models.c.name, _models.c.meta)).all():
        meta = dict(meta or {})
        if not meta.get('fitted') or 'task_order' in meta:
            continue
        order = [t for (t,) in conn.execute(sa.select(_tasks.c.task_id).where(_tasks.c.model_name == name)
                                            .order_by(_tasks.c.position, _tasks.c.task_id))]
        meta['task_order'] = order
        conn.execute(_models.update().where(_models.c.name == name).values(meta=meta))
    with op.batch_alter_table('tasks') as batch:
        batch.drop_column('position')
