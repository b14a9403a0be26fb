"""/models: the models of this service and their lifecycle — create (or fork), list,
describe, delete, export and import (``/models/{name}/state``, one ``.npz`` file); and
``GET /model``, the default model (``MODEL_NAME``) described.

An import has its own router and limits: its body (up to ``MAX_IMPORT_BYTES``, enforced by
:class:`service.middleware.BodyGate`) is streamed to a temporary file, never held in memory;
the file is refused with 413 if its arrays would take more than ``MAX_IMPORT_INFLATED_BYTES``
once loaded (read from the zip directory and the ``.npy`` headers, before any array exists),
then loaded from disk.

The routes of one model (learn, predict, tasks) live in their own routers, included both
on the default model and under ``/models/{name}`` (see :func:`service.main.create_app`).
"""

from __future__ import annotations

import tempfile
from typing import IO, Any

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

import core
from fcl3.schemas import ModelCreate, ModelList, ModelOut
from service.api.deps import MAX_OFFSET, ModelDep, ModelName, RegistryDep, SettingsDep, hosted
from service.api.json_body import JsonRoute
from service.api.responses import described_model, model_out
from service.evaluation import figures
from service.hosting import HostedModel
from service.models import lifecycle, state_files
from service.store.catalog import list_models

write_router = APIRouter(route_class=JsonRoute, tags=["models"])
read_router = APIRouter(tags=["models"])
#: ``POST /models/{name}/state`` alone: included with the body limit ``MAX_IMPORT_BYTES``.
import_router = APIRouter(tags=["models"])

#: Bytes of an upload gathered before each write to the temporary file (in the thread pool).
SPOOL_BYTES = 1024 * 1024

NPZ = "application/octet-stream"
UNKNOWN: dict[int | str, dict[str, Any]] = {404: {"description": "Unknown model."}}
BUSY: dict[int | str, dict[str, Any]] = {
    503: {"description": "An update of this model holds its lock (Retry-After), or the database/Redis is down."}
}


class NpzResponse(Response):
    media_type = NPZ


@write_router.post(
    "/models",
    response_model=ModelOut,
    status_code=201,
    responses={
        400: {"description": "A body that cannot be decoded at all (not UTF-8 JSON)."},
        404: {"description": "The model to fork is unknown."},
        409: {
            "description": "The name is taken, or the fork cannot be made (version past the last one, batches gone)."
        },
        413: {"description": "Request body over MAX_BODY_BYTES."},
        422: {
            "description": "Bad name, unknown estimator or kind, parameters the estimator refuses, bad fork; a "
            "feature schema past the column cap (MAX_COLUMNS); nothing is created."
        },
        **BUSY,
    },
)
def create_model(registry: RegistryDep, settings: SettingsDep, body: ModelCreate) -> ModelOut:
    """Create a model from its settings, or fork one (``{"name": .., "fork": {"model": .., "version": N}}``):
    the new model is the parent as it was at version N, rebuilt by replaying its batches 1..N."""
    model = registry.get(body.name)
    if body.fork is not None:
        lifecycle.fork_model(model, registry.get(body.fork.model), body.fork.version)
    else:
        chosen = body.model_settings()
        if chosen["kind"] is None:  # the server's default kind, as the default model's
            chosen["kind"] = settings.FCL3_KIND
        lifecycle.create_model(model, chosen, settings.max_columns)
    return described_model(model)


@read_router.get("/model", response_model=ModelOut, tags=["model"])
def get_default_model(model: ModelDep) -> ModelOut:
    """Kind, d, p, hyper-parameters, version and representatives of the hosted model, and its
    model-wide prequential scores."""
    return with_prequential(model, described_model(model))


def with_prequential(model: HostedModel, out: ModelOut) -> ModelOut:
    """``out`` with the model-wide prequential figures."""
    prequential = figures.model_prequential(model, out.kind)
    return ModelOut.model_validate({**out.model_dump(), "prequential": prequential})


@read_router.get("/models", response_model=ModelList)
def get_models(
    request: Request, offset: int = Query(0, ge=0, le=MAX_OFFSET), limit: int = Query(100, ge=1, le=1000)
) -> ModelList:
    """The models, by name (paginated with ``offset`` and ``limit``)."""
    total, rows = list_models(request.app.state.engine, offset, limit)
    return ModelList(total=total, offset=offset, count=len(rows), models=[model_out(r) for r in rows])


@read_router.get("/models/{name}", response_model=ModelOut, responses=UNKNOWN)
def get_model(request: Request, name: ModelName) -> ModelOut:
    """Kind, estimator, d, p, hyper-parameters, version, tasks, batches, representatives, times,
    and the model-wide prequential scores (overall and over the recent window)."""
    model = hosted(request, name)
    return with_prequential(model, described_model(model))


@write_router.delete("/models/{name}", status_code=204, response_class=Response, responses={**UNKNOWN, **BUSY})
def delete_model(request: Request, registry: RegistryDep, name: ModelName) -> Response:
    """Delete the model with its tasks and batches; the name is then unknown (404) everywhere."""
    lifecycle.delete_model(hosted(request, name), registry)
    return Response(status_code=204)


@read_router.get(
    "/models/{name}/state",
    response_class=NpzResponse,
    responses={
        200: {
            "description": "The model as one .npz file (np.savez, no pickle; see service.models.state_files).",
            "content": {NPZ: {"schema": {"type": "string", "format": "binary"}}},
        },
        **UNKNOWN,
        **BUSY,
    },
)
def export_model(request: Request, name: ModelName) -> NpzResponse:
    """Export the model (its served version) as one ``.npz`` file."""
    data, version = lifecycle.export_model(hosted(request, name))
    return NpzResponse(
        data, headers={"Content-Disposition": f'attachment; filename="{name}.npz"', "X-Model-Version": str(version)}
    )


@import_router.post(
    "/models/{name}/state",
    response_model=ModelOut,
    status_code=201,
    responses={
        408: {"description": "The client sent nothing for BODY_TIMEOUT seconds before the whole file arrived."},
        409: {"description": "The name is taken."},
        413: {"description": "File over MAX_IMPORT_BYTES, or its arrays over MAX_IMPORT_INFLATED_BYTES once loaded."},
        422: {
            "description": "Not a model file: malformed, truncated, pickled, wrong format, arrays not of finite "
            "real numbers, a vocabulary past the column cap (MAX_COLUMNS); the reason is given, nothing is created."
        },
        503: {"description": "The database is down."},
    },
    openapi_extra={
        "requestBody": {"required": True, "content": {NPZ: {"schema": {"type": "string", "format": "binary"}}}}
    },
)
async def import_model(request: Request, name: ModelName) -> JSONResponse:
    """Create the model ``name`` from an exported ``.npz`` file sent as the body; its
    predictions equal the exported model's. Nothing is stored unless the whole file loads."""
    model = hosted(request, name)
    settings = request.app.state.settings
    max_inflated = settings.MAX_IMPORT_INFLATED_BYTES
    with tempfile.NamedTemporaryFile(prefix="fcl3-import-", suffix=".npz") as file:
        await _spool(request, file)
        await run_in_threadpool(_check_inflated_size, file, max_inflated)
        await run_in_threadpool(lifecycle.import_model, model, file, settings.max_columns)
    out = await run_in_threadpool(model.reader.model_info)
    return JSONResponse(model_out(out).model_dump(mode="json"), status_code=201)


async def _spool(request: Request, file: IO[bytes]) -> None:
    """The request body into ``file``, written in the thread pool by pieces of about SPOOL_BYTES."""
    pending: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            pending.append(chunk)
            size += len(chunk)
            if size >= SPOOL_BYTES:
                await run_in_threadpool(file.writelines, pending)
                pending, size = [], 0
    except ClientDisconnect:
        raise HTTPException(400, "the client went away before the whole file arrived") from None
    await run_in_threadpool(_write_out, file, pending)


def _write_out(file: IO[bytes], pending: list[bytes]) -> None:
    file.writelines(pending)
    file.flush()


def _check_inflated_size(file: IO[bytes], max_inflated: int) -> None:
    """413 when the file's arrays would take more than ``max_inflated`` bytes once loaded; 422
    when its directory or a header is malformed (nothing of the arrays is read)."""
    try:
        inflated = state_files.inflated_size(file)
    except state_files.StateFileError as exc:
        raise core.InputError(f"bad model file: {exc}") from None
    if inflated > max_inflated:
        raise HTTPException(
            413,
            f"the file's arrays take {inflated} bytes once loaded; at most {max_inflated} (MAX_IMPORT_INFLATED_BYTES)",
        )
