"""Dependencies as ``Annotated`` aliases (as in FastAPI's full-stack template)."""
from __future__ import annotations

# Plain attribute look-ups: `async def` so FastAPI does not send them to the thread pool.

import re
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request
from pydantic import AfterValidator

from fcl3.schemas import MODEL_NAME_PATTERN, MODEL_NAME_RULE, storable_id

from service.config import Settings
from service.store.reads import ModelReader
from service.hosting import HostedModel, ModelRegistry

#: A model name (fcl3.schemas.MODEL_NAME_RULE: safe in a URL path, a file name, a Redis key).
NAME_PATTERN = MODEL_NAME_PATTERN
_NAME = re.compile(NAME_PATTERN)

ModelName = Annotated[str, Path(min_length=1, max_length=100, pattern=NAME_PATTERN,
                                description=f"Model name: {MODEL_NAME_RULE}.")]

#: The ``{task_id}`` of a route: fcl3.schemas.TaskId's rule (no control character), as a path parameter.
TaskIdPath = Annotated[str, Path(min_length=1, max_length=200, description="Task id: 1-200 characters, no control "
                                 "character (U+0000-U+001F, U+007F-U+009F)."), AfterValidator(storable_id)]


def is_model_name(name: str) -> bool:
    """Whether ``name`` passes :data:`ModelName`'s checks."""
    return _NAME.match(name) is not None


async def model_name(name: ModelName) -> str:
    """The ``{name}`` of a ``/models/{name}/...`` route (declared and validated here, once for
    every route of the router included under that prefix)."""
    return name


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_registry(request: Request) -> ModelRegistry:
    return request.app.state.models


def hosted(request: Request, name: str | None) -> HostedModel:
    """The model ``name`` (``None``: the default model) of this app's registry."""
    if name is None:
        return request.app.state.model
    registry: ModelRegistry = request.app.state.models
    if not _NAME.match(name):
        # Never cached, never used: the route's validation of {name} (service.api.deps.model_name)
        # answers 422 before the endpoint runs.
        return registry.transient(name)
    return registry.get(name)


async def get_hosted_model(request: Request) -> HostedModel:
    """The model a route acts on: ``{name}`` of ``/models/{name}/...``, else the default model.
    The same route functions thus serve both prefixes (see :func:`service.main.create_app`)."""
    return hosted(request, request.path_params.get("name"))


async def get_reader(request: Request) -> ModelReader:
    return (await get_hosted_model(request)).reader


SettingsDep = Annotated[Settings, Depends(get_settings)]
ModelDep = Annotated[HostedModel, Depends(get_hosted_model)]
ReaderDep = Annotated[ModelReader, Depends(get_reader)]
RegistryDep = Annotated[ModelRegistry, Depends(get_registry)]


def check_size(settings: Settings, n_rows: int, widths) -> None:
    """413 when a request has more rows than MAX_ROWS_PER_BATCH or a row more features than
    MAX_FEATURES: checked on the parsed lists, before any numpy array or lock."""
    if n_rows > settings.MAX_ROWS_PER_BATCH:
        raise HTTPException(413, f"{n_rows} rows in one request; at most {settings.MAX_ROWS_PER_BATCH} "
                                 "(MAX_ROWS_PER_BATCH): split the batch")
    widest = max(widths, default=0)
    if widest > settings.MAX_FEATURES:
        raise HTTPException(413, f"a row has {widest} features; at most {settings.MAX_FEATURES} (MAX_FEATURES)")
