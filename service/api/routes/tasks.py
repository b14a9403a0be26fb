"""GET /tasks, GET /tasks/{task_id}: what the model knows about each task."""

from __future__ import annotations

from fastapi import APIRouter, Query

from fcl3.schemas import TaskList, TaskOut
from service.api.deps import MAX_OFFSET, ModelDep, TaskIdPath
from service.api.responses import task_out
from service.evaluation import figures

router = APIRouter(tags=["tasks"])


@router.get("/tasks", response_model=TaskList)
def list_tasks(
    model: ModelDep, offset: int = Query(0, ge=0, le=MAX_OFFSET), limit: int = Query(1000, ge=1, le=10000)
) -> TaskList:
    """The learned tasks, oldest first (``last_update`` is the task's latest update result)."""
    reader = model.reader
    version = reader.stored_version() if model.default else reader.require()
    rows = reader.list_tasks(offset, limit)
    batches = figures.batch_versions(model, [r["task_id"] for r in rows])
    tasks = [task_out(r, batches.get(r["task_id"])) for r in rows]
    return TaskList(model=reader.name, version=version, count=len(rows), tasks=tasks)


@router.get(
    "/tasks/{task_id}",
    response_model=TaskOut,
    responses={404: {"description": "Unknown task (or unknown model, under /models/{name})."}},
)
def get_task(model: ModelDep, task_id: TaskIdPath) -> TaskOut:
    """One task: samples, batches, its latest code, assignment and outlier probability, its
    cumulative prequential score and its score on its evaluation rows."""
    row = model.reader.task_info(task_id)
    kind = model.reader.snapshot().learner.kind
    evaluation = figures.task_evaluation(model, task_id, kind)
    batch = figures.batch_versions(model, [task_id]).get(task_id)
    return TaskOut.model_validate({**task_out(row, batch).model_dump(), **evaluation})
