"""GET /model: what the model is and what it is doing."""
from __future__ import annotations

from fastapi import APIRouter

from ... import usecases
from ...responses import model_out
from fcl3.schemas import ModelOut
from ..deps import ModelDep, SettingsDep

router = APIRouter(tags=["model"])


@router.get("/model", response_model=ModelOut)
def get_model(model: ModelDep, settings: SettingsDep) -> ModelOut:
    """Kind, d, p, hyper-parameters, version and representatives of the hosted model, and its
    model-wide prequential scores."""
    usecases.configure_evaluation(model, settings)
    return with_prequential(model, model_out(model.reader.model_info()))


def with_prequential(model: usecases.HostedModel, out: ModelOut) -> ModelOut:
    return ModelOut.model_validate({**out.model_dump(), "prequential": usecases.model_prequential(model, out.kind)})
