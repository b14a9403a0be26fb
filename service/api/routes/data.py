"""POST /tasks/{task_id}/data: learn one labelled batch (at most once per ``Idempotency-Key``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from starlette.concurrency import run_in_threadpool

from fcl3.schemas import Batch, UpdateOut
from service.api.deps import CSV_BODY, CsvCharset, IdempotencyKey, ModelDep, SettingsDep, TaskIdPath, learning_input
from service.api.json_body import JsonRoute
from service.config import Settings
from service.hosting import HostedModel
from service.learning import updates
from service.writing.idempotent import check_key

router = APIRouter(route_class=JsonRoute, tags=["learning"])

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "A body that cannot be decoded at all (not UTF-8 JSON)."},
    409: {
        "description": "The model moved under a writer whose lock had expired; nothing was applied. Retry. "
        "Or: the first request with this Idempotency-Key is still running (Retry-After)."
    },
    410: {
        "description": "A retry with the Idempotency-Key of a batch that was taken back since: `taken_back_by` "
        "is the version of the take-back; nothing applied (send the batch again without the key, or with a "
        "new one, to learn it again)."
    },
    413: {
        "description": "Request body, rows or features over the limits (MAX_BODY_BYTES, MAX_ROWS_PER_BATCH, "
        "MAX_FEATURES)."
    },
    415: {"description": "A body neither JSON nor `text/csv`, or a `text/csv` body in another charset than UTF-8."},
    422: {
        "description": "Bad batch (wrong width, NaN/inf, empty, lengths differ, bad labels, unknown fields; "
        "records: an unknown feature, a value of the wrong type, a required field missing, named "
        "in `field` with its `row`; records sent to a model without a feature schema; new levels "
        "past the model's column cap, MAX_COLUMNS); a malformed Idempotency-Key, or one already "
        "used with another task or body. Nothing changed, the vocabulary included."
    },
    503: {"description": "Another update holds the lock (Retry-After), or the database/Redis is down."},
}


@router.post("/tasks/{task_id}/data", response_model=UpdateOut, responses=ERRORS, openapi_extra=CSV_BODY)
async def post_batch(
    model: ModelDep,
    settings: SettingsDep,
    batch: Batch,
    response: Response,
    task_id: TaskIdPath,
    _charset: CsvCharset,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """Learn a labelled batch for a new or known task; answers once the update is committed.
    A batch of a known task is first scored by the model as it stood (``prequential``, beside
    the task's own single-task model): what /predict answered just before the update."""
    if idempotency_key is not None:
        check_key(idempotency_key)
    body, replayed = await run_in_threadpool(learn_posted, model, settings, batch, task_id, idempotency_key)
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return body


def learn_posted(
    model: HostedModel, settings: Settings, batch: Batch, task_id: str, idempotency_key: str | None
) -> tuple[dict[str, Any], bool]:
    """The update of :func:`post_batch`, in the thread pool (it waits for the lock and the
    database): the answer (:class:`fcl3.schemas.UpdateOut`'s fields) and whether it is a
    replay. The endpoint itself is ``async``, so that FastAPI validates the answer on the event
    loop rather than with a second trip to the thread pool, as it does for a plain ``def``."""
    given = learning_input(model, settings, batch)
    if isinstance(given, list):
        return updates.learn(model, task_id, given, batch.y, idempotency_key)
    return updates.learn(model, task_id, None, batch.y, idempotency_key, records=given)
