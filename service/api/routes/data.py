"""POST /tasks/{task_id}/data: learn one labelled batch."""
from __future__ import annotations

from fastapi import APIRouter, Path

from ... import usecases
from ...responses import result_json
from ...schemas import Batch, UpdateOut
from ..deps import ModelDep, SettingsDep, check_size

router = APIRouter(tags=["learning"])

ERRORS = {
    400: {"description": "A body that cannot be decoded at all (not UTF-8 JSON)."},
    409: {"description": "The model moved under a writer whose lock had expired; nothing was applied. Retry."},
    413: {"description": "Request body, rows or features over the limits (MAX_BODY_BYTES, MAX_ROWS_PER_BATCH, MAX_FEATURES)."},
    422: {"description": "Bad batch (wrong width, NaN/inf, empty, lengths differ, bad labels, unknown fields)."},
    503: {"description": "Another update holds the lock (Retry-After), or the database/Redis is down."},
}


@router.post("/tasks/{task_id}/data", response_model=UpdateOut, responses=ERRORS)
def post_batch(model: ModelDep, settings: SettingsDep, batch: Batch,
               task_id: str = Path(..., min_length=1, max_length=200)) -> UpdateOut:
    """Learn a labelled batch for a new or known task; answers once the update is committed."""
    check_size(settings, len(batch.X), map(len, batch.X))
    result, version = usecases.learn(model, task_id, batch.X, batch.y)
    return UpdateOut(**result_json(result), version=version)
