"""Dependencies as ``Annotated`` aliases (as in FastAPI's full-stack template), and what the
routes share: the model a route acts on, the ``Idempotency-Key`` header, a batch's rows and sizes.
The dependencies are plain attribute look-ups, ``async def`` so that FastAPI does not send them to
the thread pool."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any

from fastapi import Depends, Header, HTTPException, Path, Request
from pydantic import AfterValidator

from fcl3.schemas import MODEL_NAME_PATTERN, MODEL_NAME_RULE, Batch, storable_id
from service.config import Settings
from service.hosting import HostedModel, ModelRegistry
from service.records import rows
from service.store.reads import ModelReader

_NAME = re.compile(MODEL_NAME_PATTERN)

#: The largest offset the databases take (a 64-bit signed integer); beyond it SQLite and
#: PostgreSQL fail on the query itself, so a larger one is refused with 422 like any bad value.
MAX_OFFSET = 2**63 - 1

#: A model name (fcl3.schemas.MODEL_NAME_RULE: safe in a URL path, a file name, a Redis key).
ModelName = Annotated[
    str, Path(min_length=1, max_length=100, pattern=MODEL_NAME_PATTERN, description=f"Model name: {MODEL_NAME_RULE}.")
]

#: The ``{task_id}`` of a route: fcl3.schemas.TaskId's rule (no control character), as a path parameter.
TaskIdPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=200,
        description="Task id: 1-200 characters, no control character (U+0000-U+001F, U+007F-U+009F).",
    ),
    AfterValidator(storable_id),
]


async def model_name(name: ModelName) -> str:
    """The ``{name}`` of a ``/models/{name}/...`` route (declared and validated here, once for
    every route of the router included under that prefix)."""
    return name


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_registry(request: Request) -> ModelRegistry:
    registry: ModelRegistry = request.app.state.models
    return registry


def hosted(request: Request, name: str | None) -> HostedModel:
    """The model ``name`` (``None``: the default model) of this app's registry."""
    if name is None:
        default: HostedModel = request.app.state.model
        return default
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


def check_size(settings: Settings, n_rows: int, widths: Iterable[int]) -> None:
    """413 when a request has more rows than MAX_ROWS_PER_BATCH or a row more features than
    MAX_FEATURES, 422 when its rows differ in width: checked on the parsed lists, before any
    numpy array or lock."""
    if n_rows > settings.MAX_ROWS_PER_BATCH:
        raise HTTPException(
            413,
            f"{n_rows} rows in one request; at most {settings.MAX_ROWS_PER_BATCH} "
            "(MAX_ROWS_PER_BATCH): split the batch",
        )
    sizes = list(widths)
    widest = max(sizes, default=0)
    if widest > settings.MAX_FEATURES:
        raise HTTPException(413, f"a row has {widest} features; at most {settings.MAX_FEATURES} (MAX_FEATURES)")
    if sizes and min(sizes) != widest:  # ragged rows: named before numpy sees them
        row = next(i for i, n in enumerate(sizes) if n != sizes[0])
        raise HTTPException(
            422,
            {
                "detail": f"X[{row}] has {sizes[row]} values but X[0] has {sizes[0]}: every row of X needs the same "
                "number of features",
                "field": "X",
                "row": row,
            },
        )


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="1-255 printable ASCII characters (e.g. a UUID per batch). A batch sent "
        "again with the same key is applied once: the retry gets the first answer (same version), with "
        "`Idempotent-Replayed: true`. Kept IDEMPOTENCY_TTL seconds (default 24 h).",
    ),
]


def learning_input(model: HostedModel, settings: Settings, batch: Batch) -> list[list[float]] | rows.RecordsBatch:
    """What a batch to learn brings: its ``X`` (sizes checked), or its ``records`` checked, to be
    encoded under the update lock (:class:`service.records.rows.RecordsBatch`)."""
    if batch.records is None:
        return rows_of(model, settings, batch)
    check_size(settings, batch.n_rows, [])
    return rows.learning_records(model, batch.records, settings.max_columns, batch.text_cells)


def rows_of(model: HostedModel, settings: Settings, batch: Batch) -> list[list[float]]:
    """The batch's rows of numbers, to score (evaluation rows): its ``X``, or its ``records``
    encoded over the model's vocabulary (:mod:`service.records.rows`; nothing registered); sizes
    checked."""
    check_size(settings, batch.n_rows, [])
    if batch.records is not None:
        X, _ = rows.prediction_rows(model, model.reader.snapshot(), batch.records, batch.text_cells)
    else:
        assert batch.X is not None  # a batch holds X or records
        X = batch.X
        rows.checked_x_width(model, rows.settings_of(model), map(len, X))
    check_size(settings, len(X), map(len, X))
    return X


#: The charsets a ``text/csv`` body may declare (the body is read as UTF-8; ASCII is a subset).
CSV_CHARSETS = ("utf-8", "utf8", "us-ascii", "ascii")


def check_csv_charset(content_type: str | None) -> None:
    """415 for a ``text/csv`` body that declares another charset than UTF-8 (it would be misread)."""
    media, _, params = (content_type or "").partition(";")
    if media.strip().lower() != "text/csv":
        return
    for param in params.split(";"):
        key, _, value = param.partition("=")
        charset = value.strip().strip('"').lower()
        if key.strip().lower() == "charset" and charset not in CSV_CHARSETS:
            raise HTTPException(
                415,
                f"a text/csv body is read as UTF-8, not {charset!r}: re-encode it as UTF-8 "
                "(Content-Type: text/csv; charset=utf-8), or send the records as JSON",
            )


async def csv_charset(content_type: Annotated[str | None, Header(include_in_schema=False)] = None) -> None:
    check_csv_charset(content_type)


#: A route whose body may be ``text/csv``: 415 for a charset it would misread, before the body is read.
CsvCharset = Annotated[None, Depends(csv_charset)]


#: The ``text/csv`` form of a batch (OpenAPI), beside the JSON one FastAPI documents.
CSV_BODY: dict[str, Any] = {
    "requestBody": {
        "content": {
            "text/csv": {
                "schema": {
                    "type": "string",
                    "description": "A header naming the columns: `y` (or `target`) and the model's "
                    "features; one row per line; an empty cell is null (a model with a feature schema only).",
                },
                "example": "age,urban,livch,y\n31.5,Y,3+,1\n-4.2,N,0,0\n",
            }
        }
    }
}
