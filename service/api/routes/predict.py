"""GET/POST /predict and /models/{name}/predict: predictions for a learned task (never waits
for the update lock).

One endpoint, :func:`predict`, answers the four routes as plain Starlette routes
(:data:`routes`), which :func:`service.main.create_app` puts first among the app's routes: it
takes only the ``Request``, so FastAPI has no dependency to solve for it, and a prediction
matches its route before any other is tried. The read key is checked from the
``Authorization`` header by :func:`service.security.check_key` (the answers of the project's
``require_read``), and the input is validated by pydantic in one pass: the query as
:class:`PredictQuery`, the POST body as :class:`fcl3.schemas.PredictRequest` (``validate_json``
on the bytes). Errors are FastAPI's: 401, and 422 with ``loc`` under ``path``, ``query`` or
``body``. The same endpoint is also declared as FastAPI routes (:data:`router`), which the
OpenAPI document describes from the same pydantic schemas (``openapi_extra``); the Starlette
routes before them answer every request.

A prediction of a few rows from the cached model costs tens of microseconds, about what a
hop to the thread pool costs. So a request is answered on the event loop when the cached
model is current (the version watch says so without a database round trip:
:meth:`service.store.reads.ModelReader.fresh`) and the request is small (at most
:data:`INLINE_BYTES` of body, :data:`INLINE_VALUES` numbers in the query); otherwise (a
version to check, a large batch) in the thread pool, so that a database query or a long
numpy computation never blocks the loop. The inline answer comes from the very snapshot
``fresh`` returned: one look at the watch per request.
"""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import to_json
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from fcl3.schemas import MODEL_NAME_RULE, PredictOut, PredictRequest, TaskId, csv_batch
from service import security
from service.api.deps import ModelName, check_csv_charset, check_size, hosted
from service.api.json_body import is_json, media_type, unsupported
from service.config import Settings
from service.hosting import HostedModel
from service.labels.flows import predict_remembered
from service.learning.predictions import predict as predict_rows
from service.records import rows
from service.store.reads import Snapshot

T = TypeVar("T")

#: A request body up to this size (≈ 250 rows of 10 features) is parsed and predicted on the
#: event loop when the cached model is current; a larger one in the thread pool.
INLINE_BYTES = 48 * 1024
#: The same for GET: numbers in the query string.
INLINE_VALUES = 2048

ERRORS: dict[int | str, dict[str, Any]] = {
    401: security.UNAUTHORIZED,
    403: {"description": 'A read key asked to `"remember": true` the rows (a write: the write key).'},
    404: {"description": "Unknown task (or unknown model, under /models/{name})."},
    409: {"description": "The stored model is below `min_version`."},
    413: {
        "description": "Request body, rows or features over the limits (or, with `remember`, more rows than "
        "MAX_REMEMBERED_PER_MODEL)."
    },
    415: {"description": "A body neither JSON nor `text/csv`, or a `text/csv` body in another charset than UTF-8."},
    422: {
        "description": "Bad rows (wrong width, NaN/inf, non-numbers, unknown fields) or a body that is not JSON; "
        "records: an unknown feature, a wrong type, a required field missing (named in `field`, "
        "with its `row`), or a model without a feature schema."
    },
    503: {"description": "The database is down."},
}


class VersionQuery(BaseModel):
    """The query of ``POST /predict``."""

    model_config = ConfigDict(extra="ignore")
    min_version: int | None = Field(
        None,
        ge=0,
        description="Answer from this version or a later one (the "
        "`version` a write returned): read-your-writes across processes. 409 if the "
        "stored model is older.",
    )


class PredictQuery(VersionQuery):
    """The query of ``GET /predict``: the task and its rows."""

    task_id: TaskId
    x: list[str] = Field(
        ..., description="One feature row as comma-separated numbers; repeat for more rows.", examples=["1.0,2.0,3.0"]
    )


class CsvQuery(VersionQuery):
    """The query of ``POST /predict`` with a ``text/csv`` body: the task of its records."""

    task_id: TaskId


_name: TypeAdapter[str] = TypeAdapter(ModelName)
_csv_query = TypeAdapter(CsvQuery)
_version_query = TypeAdapter(VersionQuery)
_predict_query = TypeAdapter(PredictQuery)
#: The query of a POST that has none (the usual case): what validating an empty query gives,
#: validated once.
_NO_QUERY = _version_query.validate_python({})
_request = TypeAdapter(PredictRequest)


def _validated(adapter: TypeAdapter[T], where: str, value: Any, *, json: bool = False) -> T:
    """``value`` validated by ``adapter``; :class:`RequestValidationError` (FastAPI's 422) with
    ``loc`` under ``where`` otherwise."""
    try:
        return adapter.validate_json(value) if json else adapter.validate_python(value)
    except ValidationError as exc:
        loc = (where,) if where != "path" else ("path", "name")
        raise RequestValidationError(
            [{**e, "loc": (*loc, *e["loc"])} for e in exc.errors(include_url=False)],
            body=value if where == "body" else None,
        ) from None


def _query(request: Request) -> dict[str, Any]:
    """The query parameters :class:`PredictQuery` knows, as the framework parsed them (the last
    of a repeated ``task_id`` or ``min_version``, every ``x``), in one pass over them."""
    out: dict[str, Any] = {}
    x: list[str] = []
    for key, value in request.query_params.multi_items():
        if key == "x":
            x.append(value)
        elif key == "task_id" or key == "min_version":
            out[key] = value
    if x:
        out["x"] = x
    return out


def _is_json(content_type: str | None) -> bool:
    """A JSON media type, as FastAPI reads a body (``application/json`` or ``application/*+json``)."""
    return is_json(media_type(content_type))  # no Content-Type: refused before (json_body.unsupported)


def parse_rows(x: list[str]) -> list[list[float]]:
    """The rows of the query's ``x`` (each a comma-separated row of numbers, as :class:`float`
    reads them); a 422 naming the first cell that is not a number."""
    try:
        return [list(map(float, text.split(","))) for text in x]
    except ValueError:
        pass
    rows = []
    for i, text in enumerate(x):
        row = []
        for j, cell in enumerate(text.split(",")):
            try:
                row.append(float(cell))
            except ValueError:
                raise HTTPException(422, f"x[{i}] value {j} is not a number: {cell.strip()!r}") from None
        rows.append(row)
    return rows


def _is_csv(content_type: str | None) -> bool:
    return (content_type or "").partition(";")[0].strip().lower() == "text/csv"


def parse_body(body: bytes, content_type: str | None, task_id: str | None = None) -> PredictRequest:
    """The POST body as :class:`PredictRequest`. A ``text/csv`` body is records (a header of
    feature names) of the task ``task_id`` of the query; a body of another media type than JSON
    is not parsed (it fails validation, as with FastAPI)."""
    if not body:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    refused = unsupported(content_type, csv=True)
    if refused is not None:
        raise refused
    if _is_csv(content_type):
        check_csv_charset(content_type)
        try:
            rows = csv_batch(body, target=False)
        except ValueError as exc:
            raise RequestValidationError(
                [{"type": "value_error", "loc": ("body",), "msg": str(exc), "input": None}]
            ) from None
        req = _validated(_request, "body", {"task_id": task_id, **rows})
        req.with_text_cells()
        return req
    return _validated(_request, "body", body, json=_is_json(content_type))


def _csv_task(query: VersionQuery) -> str | None:
    """The task of a ``text/csv`` body's records: the query's (:class:`CsvQuery`); else None
    (checked by type: a pydantic model's ``getattr`` of a field it lacks is slow)."""
    return query.task_id if isinstance(query, CsvQuery) else None


def _answer(
    request: Request,
    model: HostedModel,
    settings: Settings,
    query: PredictQuery | VersionQuery,
    body: bytes | None,
    content_type: str | None,
    snap: Snapshot | None = None,
    req: PredictRequest | None = None,
) -> Response:
    """The 200 of a prediction (``snap``: the snapshot ``fresh`` returned, to answer from;
    ``req``: the POST body already parsed). Records are encoded with the model's vocabulary
    (:func:`service.records.rows.prediction_rows`), against the snapshot that predicts them."""
    unseen = ids = None
    if body is None:
        assert isinstance(query, PredictQuery)  # a GET's query
        check_size(settings, len(query.x), (t.count(",") + 1 for t in query.x))
        task_id, X = query.task_id, parse_rows(query.x)
    else:
        req = req if req is not None else parse_body(body, content_type, _csv_task(query))
        task_id = req.task_id
        if req.remember:  # stored for a label that arrives later: a write, behind the write key
            security.check_key(request, "write")
        records = None
        if req.records is not None:
            check_size(settings, len(req.records), [])
            snap = snap if snap is not None else model.reader.snapshot(query.min_version, task=task_id)
            X, unseen, records = rows.prediction_records(model, snap, req.records, req.text_cells)
        else:
            assert req.X is not None  # a body holds X or records
            X = req.X
        check_size(settings, len(X), map(len, X))
        if req.remember:  # stored for a label that arrives later (service.labels): a write
            if len(X) > settings.MAX_REMEMBERED_PER_MODEL:
                raise HTTPException(
                    413,
                    f"{len(X)} rows to remember in one request; at most "
                    f"{settings.MAX_REMEMBERED_PER_MODEL} (MAX_REMEMBERED_PER_MODEL)",
                )
            preds, probs, version, ids = predict_remembered(
                model,
                task_id,
                X,
                query.min_version,
                snap,
                settings.PREDICTION_TTL,
                settings.MAX_REMEMBERED_PER_MODEL,
                records,
            )
    if ids is None:
        preds, probs, version = predict_rows(model, task_id, X, query.min_version, snap)
    out: dict[str, Any] = {"task_id": task_id, "predictions": preds, "probabilities": probs, "version": version}
    if probs is None:
        del out["probabilities"]
    if unseen:
        out["unseen"] = unseen
    if ids is not None:
        out["prediction_ids"] = ids
    return Response(to_json(out), media_type="application/json")  # PredictOut's JSON, without building one


async def predict(request: Request) -> Response:
    """Predictions for feature rows: in the query string (GET) or a JSON body (POST)."""
    security.check_key(request, "read")
    name = request.path_params.get("name")
    if name is not None:
        _validated(_name, "path", name)
    model = hosted(request, name)
    settings = request.app.state.settings
    query: VersionQuery
    body: bytes | None
    req: PredictRequest | None
    task: str | None  # the task, once known
    if request.method != "POST":  # GET (or HEAD)
        get = _validated(_predict_query, "query", _query(request))
        query, body, content_type, req, task = get, None, None, None, get.task_id
        small = sum(t.count(",") + 1 for t in get.x) <= INLINE_VALUES
    else:
        body, content_type = await request.body(), request.headers.get("content-type")
        if _is_csv(content_type):  # records of the task named in the query
            query = _validated(_csv_query, "query", _query(request))
        else:
            query = _validated(_version_query, "query", _query(request)) if request.scope["query_string"] else _NO_QUERY
        req = parse_body(body, content_type, _csv_task(query)) if len(body) <= INLINE_BYTES else None
        task = req.task_id if req is not None else None
        # remembering writes, and records may read the vocabulary: the thread pool
        small = req is not None and not req.remember and req.records is None
    snap = model.reader.fresh(query.min_version) if small else None  # small: a POST's body is parsed
    if snap is not None and task is not None and snap.has_task(task):
        return _answer(request, model, settings, query, body, content_type, snap, req)
    # not cached, large, or a task the cached version has not learned (reads.ModelReader.predict)
    return await run_in_threadpool(_answer, request, model, settings, query, body, content_type, None, req)


# ----------------------------------------------------------------------------- the routes
def _parameters(model: type[BaseModel], where: str = "query") -> list[dict[str, Any]]:
    """OpenAPI parameters from a pydantic model's JSON schema."""
    schema = model.model_json_schema()
    return [
        {
            "name": n,
            "in": where,
            "required": n in schema.get("required", ()),
            "schema": s,
            **({"description": s["description"]} if "description" in s else {}),
        }
        for n, s in schema["properties"].items()
    ]


_NAME_PARAMETER = {
    "name": "name",
    "in": "path",
    "required": True,
    "schema": _name.json_schema(),
    "description": f"Model name: {MODEL_NAME_RULE}.",
}
_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": PredictRequest.model_json_schema(),
            "examples": {
                "predict": {"summary": "Predict", "value": {"task_id": "school-1", "X": [[1.0, 2.0, 3.0]]}},
                "records": {
                    "summary": "Predict records (a model with a feature schema)",
                    "value": {"task_id": "district-1", "records": [{"age": 31.0, "urban": "Y", "livch": "3+"}]},
                },
                "remember": {
                    "summary": "Predict and remember the rows for labels that arrive later",
                    "value": {"task_id": "school-1", "X": [[1.0, 2.0, 3.0], [0.5, 0.1, 2.0]], "remember": True},
                },
            },
        },
        "text/csv": {
            "schema": {
                "type": "string",
                "description": "Records of a model with a feature schema: a header "
                "naming the features, one row per line, an empty cell null; the task is the query's "
                "`task_id`.",
            },
            "example": "age,urban,livch\n31.5,Y,3+\n",
        },
    },
}


def _documented(router: APIRouter, path: str, named: bool) -> None:
    """The OpenAPI operations of GET and POST ``path`` (under ``/models/{name}`` when ``named``)."""
    head = [_NAME_PARAMETER] if named else []
    responses = {**ERRORS, 404: {"description": "Unknown task, or unknown model."}} if named else ERRORS
    key: dict[str, Any] = {"security": [{security.bearer.scheme_name: []}]}
    router.add_api_route(
        path,
        predict,
        methods=["GET"],
        name="predict",
        summary="Predict (rows in the query)",
        description="Predictions for feature rows given in the query string.",
        response_model=PredictOut,
        responses=responses,
        openapi_extra={**key, "parameters": head + _parameters(PredictQuery)},
    )
    router.add_api_route(
        path,
        predict,
        methods=["POST"],
        name="predict",
        summary="Predict (a batch of rows)",
        description='Predictions for a batch of feature rows (for many rows). With `"remember": '
        "true` (a write: the write key) the rows (their records, on a model with a feature schema), the "
        "outputs served and the version serving them are stored, and the "
        "answer holds one `prediction_ids` entry per row, in row order: `POST .../labels` learns "
        "them later with their labels (within PREDICTION_TTL; at most MAX_REMEMBERED_PER_MODEL "
        "rows of a model wait, the oldest dropped beyond it, and as many labelled or dropped are kept).",
        response_model=PredictOut,
        responses=responses,
        openapi_extra={**key, "parameters": head + _parameters(VersionQuery), "requestBody": _BODY},
    )


#: The prediction routes that answer: plain Starlette routes, put first among the app's routes
#: (:func:`service.main.create_app`). The read key is checked inside :func:`predict`.
routes = [
    Route(path, predict, methods=["GET", "POST"], include_in_schema=False)
    for path in ("/predict", "/models/{name}/predict")
]

#: The same endpoint as FastAPI routes, which the OpenAPI document describes (the routes above
#: answer first): include this router without dependencies.
router = APIRouter(tags=["prediction"])
_documented(router, "/predict", named=False)
_documented(router, "/models/{name}/predict", named=True)
