"""GET/POST /predict: predictions for a learned task (never waits for the update lock)."""
from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query

from ...schemas import PredictOut, PredictRequest
from ..deps import StoreDep

router = APIRouter(tags=["prediction"])


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


def _predict(store, task_id: str, X) -> PredictOut:
    preds, probs, version = store.predict(task_id, X)
    return PredictOut(task_id=task_id, predictions=preds, probabilities=probs, version=version)


@router.get("/predict", response_model=PredictOut, response_model_exclude_none=True)
def predict_get(
    store: StoreDep,
    task_id: str = Query(..., min_length=1, max_length=200),
    x: list[str] = Query(..., description="One feature row as comma-separated numbers; repeat for more rows.",
                         examples=["1.0,2.0,3.0"]),
) -> PredictOut:
    """Predictions for feature rows given in the query string."""
    return _predict(store, task_id, parse_rows(x))


@router.post("/predict", response_model=PredictOut, response_model_exclude_none=True)
def predict_post(store: StoreDep, body: PredictRequest) -> PredictOut:
    """Predictions for a batch of feature rows (for many rows)."""
    return _predict(store, body.task_id, body.X)
