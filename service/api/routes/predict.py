"""GET/POST /predict: predictions for a learned task (never waits for the update lock)."""
from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query

from ... import usecases
from fcl3.schemas import PredictOut, PredictRequest
from ...usecases import HostedModel
from ..deps import ModelDep, SettingsDep, check_size

router = APIRouter(tags=["prediction"])

ERRORS = {
    400: {"description": "A body that cannot be decoded at all (not UTF-8 JSON)."},
    404: {"description": "Unknown task (or unknown model, under /models/{name})."},
    409: {"description": "The stored model is below `min_version`."},
    413: {"description": "Request body, rows or features over the limits."},
    422: {"description": "Bad rows (wrong width, NaN/inf, non-numbers, unknown fields)."},
    503: {"description": "The database is down."},
}


def parse_rows(x: list[str]) -> list[list[float]]:
    rows = []
    for i, text in enumerate(x):
        row = []
        for j, cell in enumerate(text.split(",")):
            try:
                row.append(float(cell))
            except ValueError:
                raise HTTPException(422, f"x[{i}] value {j} is not a number: {cell.strip()!r}") from None
        rows.append(row)
    return rows


MinVersion = Query(None, ge=0, description="Answer from this version or a later one (the `version` a write "
                   "returned): read-your-writes across processes. 409 if the stored model is older.")


def _predict(model: HostedModel, task_id: str, X, min_version: int | None) -> PredictOut:
    preds, probs, version = usecases.predict(model, task_id, X, min_version)
    return PredictOut(task_id=task_id, predictions=preds, probabilities=probs, version=version)


@router.get("/predict", response_model=PredictOut, response_model_exclude_none=True, responses=ERRORS)
def predict_get(
    model: ModelDep,
    settings: SettingsDep,
    task_id: str = Query(..., min_length=1, max_length=200),
    x: list[str] = Query(..., description="One feature row as comma-separated numbers; repeat for more rows.",
                         examples=["1.0,2.0,3.0"]),
    min_version: int | None = MinVersion,
) -> PredictOut:
    """Predictions for feature rows given in the query string."""
    check_size(settings, len(x), (t.count(",") + 1 for t in x))
    return _predict(model, task_id, parse_rows(x), min_version)


@router.post("/predict", response_model=PredictOut, response_model_exclude_none=True, responses=ERRORS)
def predict_post(model: ModelDep, settings: SettingsDep, body: PredictRequest,
                 min_version: int | None = MinVersion) -> PredictOut:
    """Predictions for a batch of feature rows (for many rows)."""
    check_size(settings, len(body.X), map(len, body.X))
    return _predict(model, body.task_id, body.X, min_version)
