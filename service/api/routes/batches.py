"""DELETE /batches/{version} and /models/{name}/batches/{version}: take a batch back
(:mod:`service.take_back`), at most once per ``Idempotency-Key``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Response

from fcl3.schemas import TakeBackOut
from service.api.deps import IdempotencyKey, ModelDep
from service.api.responses import error_example
from service.take_back import flows
from service.writing.idempotent import check_key

router = APIRouter(tags=["learning"])

BatchVersion = Annotated[
    int,
    Path(
        ge=1,
        le=2**31 - 1,
        description="The model version the batch produced (the `version` its POST answered).",
        examples=[7],
    ),
]


ERRORS: dict[int | str, dict[str, Any]] = {
    404: {
        "description": "No batch of that version: the model never reached it, or that version is itself a "
        "take-back; or unknown model. Nothing changed.",
        "content": error_example(
            "model 'schools' has no batch 40 (it is at version 13); nothing was changed", batch_version=40
        ),
    },
    409: {
        "description": "Refused with the reason, nothing changed: the batch was inherited from the model this "
        "one was forked from (`fork`), or the batches the replay needs are not stored (an "
        "imported model keeps none: `missing`). Or: the first request with this Idempotency-Key "
        "is still running (Retry-After), or the model moved under a writer whose lock had expired.",
        "content": error_example(
            "batch 3 of model 'schools-b' was learned by model 'schools' before 'schools-b' was "
            "forked from it at version 5: a fork is its parent at that version, so its inherited "
            "batches stay; take the batch back in 'schools' and fork it again; nothing was "
            "changed",
            batch_version=3,
            fork={"model": "schools", "version": 5},
        ),
    },
    410: {
        "description": "The batch was taken back already: `taken_back_by` (and the header `X-Model-Version`) is "
        "the version of that take-back. Nothing changed.",
        "content": error_example(
            "batch 7 of model 'schools' was taken back already, by version 13; nothing was changed",
            batch_version=7,
            taken_back_by=13,
        ),
        "headers": {"X-Model-Version": {"description": "The version of the take-back.", "schema": {"type": "integer"}}},
    },
    422: {
        "description": "A version that is not a positive integer; the engine refuses to replay a batch now; a "
        "malformed Idempotency-Key, or one already used with another request."
    },
    503: {"description": "Another update holds the lock (Retry-After), or the database/Redis is down."},
}


@router.delete("/batches/{version}", response_model=TakeBackOut, responses=ERRORS, summary="Take a batch back")
def take_back(
    model: ModelDep, version: BatchVersion, response: Response, idempotency_key: IdempotencyKey = None
) -> TakeBackOut:
    """Remove a batch the model learned (the one whose POST answered `version`) and bring the
    model to the state it would have had without it: rebuilt by replaying every other batch
    it has learned, in their original order, with its settings (bit for bit the model of the
    same stream without that batch; docs/design.md, "Taking a batch back"). Answers once the
    new model version is committed; an `update` event with `taken_back` follows. The batch's
    rows stay stored, marked taken back; its task is removed if it was its only batch. With an
    `Idempotency-Key`, a retry gets the first answer (`Idempotent-Replayed: true`); without,
    a second take-back of the batch is 410."""
    if idempotency_key is not None:
        check_key(idempotency_key)
    out, replayed = flows.take_back(model, version, idempotency_key)
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return TakeBackOut(**out)
