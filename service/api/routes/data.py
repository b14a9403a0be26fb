"""POST /tasks/{task_id}/data: learn one labelled batch (at most once per ``Idempotency-Key``);
POST /tasks/{task_id}/evaluation: store held-out labelled rows of a task (never learned)."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Response
from starlette.concurrency import run_in_threadpool

from service.evaluation import figures
from service.records import rows
from service.writing import idempotent
from service.learning import updates
from service.writing.idempotency import check_key
from fcl3.schemas import Batch, EvaluationRows, EvaluationRowsOut, UpdateOut
from service.api.deps import ModelDep, SettingsDep, TaskIdPath, check_size
from service.api.json_body import JsonRoute

router = APIRouter(route_class=JsonRoute, tags=["learning"])

ERRORS = {
    400: {"description": "A body that cannot be decoded at all (not UTF-8 JSON)."},
    409: {"description": "The model moved under a writer whose lock had expired; nothing was applied. Retry. "
                         "Or: the first request with this Idempotency-Key is still running (Retry-After)."},
    413: {"description": "Request body, rows or features over the limits (MAX_BODY_BYTES, MAX_ROWS_PER_BATCH, MAX_FEATURES)."},
    422: {"description": "Bad batch (wrong width, NaN/inf, empty, lengths differ, bad labels, unknown fields; "
                         "records: an unknown feature, a value of the wrong type, a required field missing, named "
                         "in `field` with its `row`; records sent to a model without a feature schema); "
                         "a malformed Idempotency-Key, or one already used with another task or body."},
    503: {"description": "Another update holds the lock (Retry-After), or the database/Redis is down."},
}

IdempotencyKey = Annotated[str | None, Header(
    alias="Idempotency-Key", description="1-255 printable ASCII characters (e.g. a UUID per batch). A batch sent "
    "again with the same key is applied once: the retry gets the first answer (same version), with "
    "`Idempotent-Replayed: true`. Kept IDEMPOTENCY_TTL seconds (default 24 h).")]


def rows_of(model, settings, batch: Batch, task_id: str, learn: bool = True) -> list[list[float]]:
    """The batch's rows of numbers: its ``X``, or its ``records`` encoded (:mod:`service.records.rows`;
    to learn: their new category levels registered first); sizes checked."""
    check_size(settings, batch.n_rows, [])
    if batch.records is not None:
        if learn:
            X = rows.learning_rows(model, task_id, batch.records, batch.text_cells)
        else:
            X, _ = rows.prediction_rows(model, model.reader.snapshot(), batch.records, batch.text_cells)
    else:
        X = batch.X
        rows.checked_x_width(model, rows.settings_of(model), map(len, X))
    check_size(settings, len(X), map(len, X))
    return X


#: The ``text/csv`` form of a batch (OpenAPI), beside the JSON one FastAPI documents.
CSV_BODY = {"requestBody": {"content": {"text/csv": {
    "schema": {"type": "string", "description": "A header naming the columns: `y` (or `target`) and the model's "
               "features; one row per line; an empty cell is null (a model with a feature schema only)."},
    "example": "age,urban,livch,y\n31.5,Y,3+,1\n-4.2,N,0,0\n"}}}}


@router.post("/tasks/{task_id}/data", response_model=UpdateOut, responses=ERRORS, openapi_extra=CSV_BODY)
async def post_batch(model: ModelDep, settings: SettingsDep, batch: Batch, response: Response,
                     task_id: TaskIdPath,
                     idempotency_key: IdempotencyKey = None) -> dict:
    """Learn a labelled batch for a new or known task; answers once the update is committed.
    A batch of a known task is first scored by the model as it stood (``prequential``, beside
    the task's own single-task model): what /predict answered just before the update."""
    if idempotency_key is not None:
        check_key(idempotency_key)
    body, replayed = await run_in_threadpool(learn_posted, model, settings, batch, task_id, idempotency_key)
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return body


def learn_posted(model, settings, batch: Batch, task_id: str, idempotency_key: str | None) -> tuple[dict, bool]:
    """The update of :func:`post_batch`, in the thread pool (it waits for the lock and the
    database): the answer (:class:`fcl3.schemas.UpdateOut`'s fields) and whether it is a
    replay. The endpoint itself is ``async``, so that FastAPI validates the answer on the event
    loop rather than with a second trip to the thread pool, as it does for a plain ``def``."""
    X = rows_of(model, settings, batch, task_id)
    if idempotency_key is None:
        return updates.learn_answer(model, task_id, X, batch.y), False
    return idempotent.learn_once(model, task_id, X, batch.y, idempotency_key)


@router.post("/tasks/{task_id}/evaluation", response_model=EvaluationRowsOut, openapi_extra=CSV_BODY, responses={
    **{k: v for k, v in ERRORS.items() if k != 409},
    422: {"description": "Bad rows (the checks of a batch: width, NaN/inf, empty, lengths, labels, unknown fields)."}})
def post_evaluation_rows(model: ModelDep, settings: SettingsDep, rows: EvaluationRows,
                         task_id: TaskIdPath) -> EvaluationRowsOut:
    """Store labelled rows as the task's evaluation set: never learned (the model's version and
    the task's samples do not move), kept up to EVALUATION_MAX_ROWS per task (then a uniform
    sample of all rows received). The task need not be learned yet. The set is scored at once
    if the task is learned; then just after the commit of each update of that task, and of an
    update of another task when the set is among the EVALUATION_RESCORE ones whose scores are
    oldest (each score carries the version it is of: ``scored_version``). An update that learns
    a new task also scores every learned set, in the background, for the accuracy matrix."""
    out = figures.add_evaluation_rows(model, task_id, rows_of(model, settings, rows, task_id, learn=False),
                                         rows.y)
    return EvaluationRowsOut(**out)
