"""POST /tasks/{task_id}/data: learn one labelled batch."""
from __future__ import annotations

from fastapi import APIRouter, Path

from ...schemas import Batch, UpdateOut
from ...store import result_json
from ..deps import StoreDep

router = APIRouter(tags=["learning"])

ERRORS = {
    409: {"description": "The model moved under a writer whose lock had expired; nothing was applied. Retry."},
    413: {"description": "Request body too large."},
    422: {"description": "Bad batch (wrong width, NaN/inf, empty, lengths differ, bad labels, unknown fields)."},
    503: {"description": "Another update holds the lock (Retry-After), or the database/Redis is down."},
}


@router.post("/tasks/{task_id}/data", response_model=UpdateOut, responses=ERRORS)
def post_batch(store: StoreDep, batch: Batch,
               task_id: str = Path(..., min_length=1, max_length=200)) -> UpdateOut:
    """Learn a labelled batch for a new or known task; answers once the update is committed."""
    result, version = store.update(task_id, batch.X, batch.y)
    return UpdateOut(**result_json(result), version=version)
