"""GET /model: the default model (MODEL_NAME), what it is and what it is doing (any model by name: :mod:`.models`)."""
from __future__ import annotations

from fastapi import APIRouter

from service.evaluation import figures
from service.records import rows
from service.hosting import HostedModel
from fcl3.schemas import ModelOut
from service.api.deps import ModelDep

router = APIRouter(tags=["model"])


@router.get("/model", response_model=ModelOut)
def get_model(model: ModelDep) -> ModelOut:
    """Kind, d, p, hyper-parameters, version and representatives of the hosted model, and its
    model-wide prequential scores."""
    return with_prequential(model, rows.described(model))


def with_prequential(model: HostedModel, out: ModelOut) -> ModelOut:
    prequential = figures.model_prequential(model, out.kind)
    return ModelOut.model_validate({**out.model_dump(), "prequential": prequential})
