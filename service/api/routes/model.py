"""GET /model: what the model is and what it is doing."""
from __future__ import annotations

from fastapi import APIRouter

from ...schemas import ModelOut
from ..deps import StoreDep

router = APIRouter(tags=["model"])


@router.get("/model", response_model=ModelOut)
def get_model(store: StoreDep) -> ModelOut:
    """Kind, d, p, hyper-parameters, version and representatives of the hosted model."""
    info = store.model_info()
    if not info:
        store.ensure_model()
        info = store.model_info()
    summary = info.get("summary") or {}
    params = info["params"]
    p = summary.get("p") or params.get("p") or params.get("k") or params.get("n_components")
    d = (info.get("meta") or {}).get("n_features") or (info.get("settings") or {}).get("d")
    return ModelOut(
        name=info["name"], estimator=info["estimator"], kind=info["kind"], d=d, p=p, hyperparameters=params,
        created_with=info["settings"], version=info["version"], n_tasks=info["n_tasks"],
        n_batches=info["n_batches"], n_representatives=summary.get("n_representatives", 0),
        representatives=summary.get("representatives", []),
        created_at=info["created_at"], updated_at=info["updated_at"])
