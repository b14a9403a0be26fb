"""Dependencies as ``Annotated`` aliases (as in FastAPI's full-stack template)."""
from __future__ import annotations

# Plain attribute look-ups: `async def` so FastAPI does not send them to the thread pool.

from typing import Annotated

from fastapi import Depends, Request

from ..config import Settings
from ..store import ModelStore


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_store(request: Request) -> ModelStore:
    return request.app.state.store


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[ModelStore, Depends(get_store)]
