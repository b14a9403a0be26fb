"""Dependencies as ``Annotated`` aliases (as in FastAPI's full-stack template)."""
from __future__ import annotations

# Plain attribute look-ups: `async def` so FastAPI does not send them to the thread pool.

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from ..config import Settings
from ..reads import ModelReader
from ..usecases import HostedModel


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_hosted_model(request: Request) -> HostedModel:
    return request.app.state.model


async def get_reader(request: Request) -> ModelReader:
    return request.app.state.model.reader


SettingsDep = Annotated[Settings, Depends(get_settings)]
ModelDep = Annotated[HostedModel, Depends(get_hosted_model)]
ReaderDep = Annotated[ModelReader, Depends(get_reader)]


def check_size(settings: Settings, n_rows: int, widths) -> None:
    """413 when a request has more rows than MAX_ROWS_PER_BATCH or a row more features than
    MAX_FEATURES: checked on the parsed lists, before any numpy array or lock."""
    if n_rows > settings.MAX_ROWS_PER_BATCH:
        raise HTTPException(413, f"{n_rows} rows in one request; at most {settings.MAX_ROWS_PER_BATCH} "
                                 "(MAX_ROWS_PER_BATCH): split the batch")
    widest = max(widths, default=0)
    if widest > settings.MAX_FEATURES:
        raise HTTPException(413, f"a row has {widest} features; at most {settings.MAX_FEATURES} (MAX_FEATURES)")
