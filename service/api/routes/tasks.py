"""GET /tasks, GET /tasks/{task_id}: what the model knows about each task."""
from __future__ import annotations

from fastapi import APIRouter, Query

from ...schemas import TaskList, TaskOut
from ..deps import StoreDep

router = APIRouter(tags=["tasks"])


def _task_out(row: dict) -> TaskOut:
    return TaskOut(task_id=row["task_id"], n_samples=row["n_samples"], n_batches=row["n_batches"],
                   version=row["version"], labels=(row.get("meta") or {}).get("labels"),
                   created_at=row["created_at"], updated_at=row["updated_at"], last_update=row["last_update"])


#: The largest offset the databases take (a 64-bit signed integer); beyond it SQLite and
#: PostgreSQL fail on the query itself, so a larger one is refused with 422 like any bad value.
MAX_OFFSET = 2**63 - 1


@router.get("/tasks", response_model=TaskList)
def list_tasks(store: StoreDep, offset: int = Query(0, ge=0, le=MAX_OFFSET),
               limit: int = Query(1000, ge=1, le=10000)) -> TaskList:
    """The learned tasks, oldest first (``last_update`` is the task's latest update result)."""
    rows = store.list_tasks(offset, limit)
    return TaskList(model=store.name, version=store.stored_version(), count=len(rows), tasks=[_task_out(r) for r in rows])


@router.get("/tasks/{task_id}", response_model=TaskOut, responses={404: {"description": "Unknown task."}})
def get_task(store: StoreDep, task_id: str) -> TaskOut:
    """One task: samples, batches, and its latest code, assignment and outlier probability."""
    return _task_out(store.task_info(task_id))
