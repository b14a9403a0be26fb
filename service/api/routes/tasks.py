"""GET /tasks, GET /tasks/{task_id}: what the model knows about each task."""
from __future__ import annotations

from fastapi import APIRouter, Query

from ...responses import task_out
from fcl3.schemas import TaskList, TaskOut
from ..deps import ModelDep

router = APIRouter(tags=["tasks"])

#: The largest offset the databases take (a 64-bit signed integer); beyond it SQLite and
#: PostgreSQL fail on the query itself, so a larger one is refused with 422 like any bad value.
MAX_OFFSET = 2**63 - 1


@router.get("/tasks", response_model=TaskList)
def list_tasks(model: ModelDep, offset: int = Query(0, ge=0, le=MAX_OFFSET),
               limit: int = Query(1000, ge=1, le=10000)) -> TaskList:
    """The learned tasks, oldest first (``last_update`` is the task's latest update result)."""
    reader = model.reader
    version = reader.stored_version() if model.default else reader.require()
    rows = reader.list_tasks(offset, limit)
    return TaskList(model=reader.name, version=version, count=len(rows), tasks=[task_out(r) for r in rows])


@router.get("/tasks/{task_id}", response_model=TaskOut,
            responses={404: {"description": "Unknown task (or unknown model, under /models/{name})."}})
def get_task(model: ModelDep, task_id: str) -> TaskOut:
    """One task: samples, batches, and its latest code, assignment and outlier probability."""
    return task_out(model.reader.task_info(task_id))
