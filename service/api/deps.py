"""Dependencies as ``Annotated`` aliases (as in FastAPI's full-stack template)."""
from __future__ import annotations

# Plain attribute look-ups: `async def` so FastAPI does not send them to the thread pool.

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from ..config import Settings
from ..store import ModelStore


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_store(request: Request) -> ModelStore:
    return request.app.state.store


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[ModelStore, Depends(get_store)]


def check_size(settings: Settings, n_rows: int, widths) -> None:
    """413 when a request has more rows than MAX_ROWS_PER_BATCH or a row more features than
    MAX_FEATURES: checked on the parsed lists, before any numpy array or lock."""
    if n_rows > settings.MAX_ROWS_PER_BATCH:
        raise HTTPException(413, f"{n_rows} rows in one request; at most {settings.MAX_ROWS_PER_BATCH} "
                                 "(MAX_ROWS_PER_BATCH): split the batch")
    widest = max(widths, default=0)
    if widest > settings.MAX_FEATURES:
        raise HTTPException(413, f"a row has {widest} features; at most {settings.MAX_FEATURES} (MAX_FEATURES)")
