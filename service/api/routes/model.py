"""GET /model: what the model is and what it is doing."""
from __future__ import annotations

from fastapi import APIRouter

from ...responses import model_out
from fcl3.schemas import ModelOut
from ..deps import ReaderDep

router = APIRouter(tags=["model"])


@router.get("/model", response_model=ModelOut)
def get_model(reader: ReaderDep) -> ModelOut:
    """Kind, d, p, hyper-parameters, version and representatives of the hosted model."""
    return model_out(reader.model_info())
