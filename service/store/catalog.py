"""Every model of a database: how many, and the rows of a page of them (``GET /models``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, func, select

from service.store.reads import MODEL_INFO_COLS
from service.store.tables import models_t, tasks_t


def list_models(engine: Engine, offset: int = 0, limit: int = 100) -> tuple[int, list[dict[str, Any]]]:
    """How many models are stored, and the rows (without arrays, with task and batch counts)
    of ``limit`` of them from ``offset``, by name."""
    # Correlated counts: computed for the listed models only, each on its primary-key prefix.
    n_tasks = select(func.count()).where(tasks_t.c.model_name == models_t.c.name).scalar_subquery()
    n_batches = (
        select(func.coalesce(func.sum(tasks_t.c.n_batches), 0))
        .where(tasks_t.c.model_name == models_t.c.name)
        .scalar_subquery()
    )
    q = (
        select(*MODEL_INFO_COLS, n_tasks.label("n_tasks"), n_batches.label("n_batches"))
        .order_by(models_t.c.name)
        .offset(offset)
        .limit(limit)
    )
    with engine.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
        total = conn.execute(select(func.count()).select_from(models_t)).scalar_one()
        rows = [dict(r) for r in conn.execute(q).mappings()]
    return int(total), rows
