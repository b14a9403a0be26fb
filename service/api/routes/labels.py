"""POST /labels and /models/{name}/labels: learn remembered predictions with the labels that
arrived later (:mod:`service.labels`), at most once per ``Idempotency-Key``."""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Response
from starlette.concurrency import run_in_threadpool

from fcl3.schemas import PREDICTION_ID_PATTERN, LabelsOut, LabelsRequest, UpdateOut
from service.api.deps import IdempotencyKey, ModelDep, SettingsDep, check_size
from service.api.json_body import JsonRoute
from service.api.responses import error_example
from service.labels import flows
from service.labels.refusals import UnknownPredictions
from service.writing.idempotent import check_key

router = APIRouter(route_class=JsonRoute, tags=["learning"])
#: ``GET .../labels``: included behind the read key.
read_router = APIRouter(tags=["evaluation"])

_ID = "19c0d6e3a2f-8c1e5b0d2a4f6e13"
_ID_FORM = re.compile(PREDICTION_ID_PATTERN)


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "A body that cannot be decoded at all (not UTF-8 JSON)."},
    404: {
        "description": "Unknown prediction ids (never remembered by this model), or unknown model; nothing "
        "learned. The ids are listed in `prediction_ids`.",
        "content": error_example(
            f"unknown prediction ids on model 'schools': '{_ID}' (never remembered by a "
            "prediction of this model); nothing was learned",
            prediction_ids=[_ID],
        ),
    },
    409: {
        "description": "Prediction ids labelled already: `version` (and the header `X-Model-Version`) is the "
        "model version of the batch that first learned them (nothing learned now). Or: the first request with "
        "this Idempotency-Key is still running (Retry-After), or the model moved under a writer whose lock had "
        "expired.",
        "content": error_example(
            f"prediction ids labelled already on model 'schools': '{_ID}' (the first learned by "
            "the batch of version 12); each id is labelled once; nothing was learned",
            version=12,
            prediction_ids=[_ID],
        ),
        "headers": {
            "X-Model-Version": {
                "description": "The version that learned the ids (labelled already).",
                "schema": {"type": "integer"},
            }
        },
    },
    410: {
        "description": "Prediction ids past PREDICTION_TTL, or dropped when more than MAX_REMEMBERED_PER_MODEL "
        "rows of the model waited; nothing learned.",
        "content": error_example(
            f"prediction ids past PREDICTION_TTL, or dropped beyond MAX_REMEMBERED_PER_MODEL, on "
            f"model 'schools': '{_ID}'; nothing was learned",
            prediction_ids=[_ID],
        ),
    },
    413: {"description": "Request body or labels over the limits (MAX_BODY_BYTES, MAX_ROWS_PER_BATCH)."},
    422: {
        "description": "Bad body (an id given twice, a non-number label, unknown fields); ids of "
        "several tasks (one request learns one task's batch: send one per task); labels the task "
        "refuses (e.g. 2 for classification); a malformed Idempotency-Key, or one already used "
        "with another request."
    },
    503: {"description": "Another update holds the lock (Retry-After), or the database/Redis is down."},
}


@router.post("/labels", response_model=UpdateOut, responses=ERRORS, summary="Label remembered predictions")
async def post_labels(
    model: ModelDep,
    settings: SettingsDep,
    body: LabelsRequest,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """Learn the rows of earlier predictions made with `"remember": true`, with their labels,
    as one batch of their task (every id of one task), in the order given; answers once the
    batch is committed, as `POST .../tasks/{task_id}/data` does. The batch's `prequential`
    score is that of the predictions actually served for these rows (at the versions that
    served them), not a recomputation. Each id is labelled once: a second label is 409 with
    the version that learned it; unknown ids are 404, ids past PREDICTION_TTL (or dropped)
    410, and nothing is learned then. With an `Idempotency-Key`, a retry gets the first
    answer (`Idempotent-Replayed: true`)."""
    if idempotency_key is not None:
        check_key(idempotency_key)
    check_size(settings, len(body.labels), ())
    ids = [lb.prediction_id for lb in body.labels]
    malformed = [i for i in ids if not _ID_FORM.fullmatch(i)]
    if malformed:  # never an id of a prediction: unknown, as one that was never remembered
        raise UnknownPredictions(
            f"unknown prediction ids on model {model.name!r}: {', '.join(map(repr, malformed[:5]))} (not of the "
            "form of `prediction_ids`, e.g. '19c0d6e3a2f-8c1e5b0d2a4f6e13'); nothing was learned",
            prediction_ids=malformed,
        )
    y = [lb.y for lb in body.labels]
    # the lock and the database: in the thread pool (the endpoint is async so that FastAPI
    # validates the answer on the event loop, not with a second trip to the pool)
    out, replayed = await run_in_threadpool(flows.label, model, ids, y, settings.max_columns, idempotency_key)
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return out


@read_router.get("/labels", response_model=LabelsOut, summary="Pending predictions and labels received")
def get_labels(model: ModelDep) -> LabelsOut:
    """Per task: the predictions made with `"remember": true` still waiting for their label
    (not expired, not dropped), and the batches of labels learned (`POST .../labels`; a batch
    taken back no longer counts)."""
    return LabelsOut(**flows.labels_summary(model))
