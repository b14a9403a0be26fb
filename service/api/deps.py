"""Dependencies as ``Annotated`` aliases (as in FastAPI's full-stack template)."""
from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ..config import Settings
from ..store import ModelStore


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_store(request: Request) -> ModelStore:
    return request.app.state.store


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[ModelStore, Depends(get_store)]
