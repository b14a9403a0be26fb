"""GET/POST /predict: predictions for a learned task (never waits for the update lock).

The routes are declared as usual (their parameters, body and response model are the
OpenAPI schema), but answered by :class:`PredictRoute`: a prediction of a few rows from the
cached model costs tens of microseconds, less than FastAPI's own work around it (solving
the dependencies, validating the body through pydantic into Python objects, a thread-pool
hop, validating and encoding the response model). So each request first goes through a
fast path (:func:`_fast`) that does the same checks by hand and answers a pre-serialised
JSON body; any request it is not sure of (a bad parameter, a missing or unknown key, a
dependency override, a refused row) goes through the declared route unchanged, which gives
the same answers, errors and messages as always. ``GET /predict`` of a current model is
even answered before routing (:func:`shortcut`, run by
:class:`service.middleware.RequestContext`). ``tests/service/test_predict_fast.py`` compares
the paths; ``docs/benchmarks.md`` has the profile behind them.

Where the fast path runs its work: on the event loop when the cached model is current (the
version watch says so without a database round trip: :meth:`service.reads.ModelReader.fresh`)
and the request is small (at most :data:`INLINE_BYTES` of body, :data:`INLINE_VALUES`
numbers in the query string), because then the whole answer costs about as much CPU as the
thread-pool hop alone would; otherwise (a version to check, a large batch) in the thread
pool, as a ``def`` route would, so that a database query or a long numpy computation never
blocks the loop. The request is then answered from the very snapshot ``fresh`` returned (the
``snap`` argument of :func:`_answer`): one look at the watch per request.
"""
from __future__ import annotations

import json
import math
import re
import weakref
from typing import Annotated, Any, Callable
from urllib.parse import parse_qsl

import core
import msgspec
from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.routing import APIRoute
from pydantic_core import to_json
from starlette.concurrency import run_in_threadpool

from ... import security, usecases
from ...middleware import register_shortcut
from fcl3.schemas import PredictOut, PredictRequest
from ...usecases import HostedModel
from ..deps import ModelDep, SettingsDep, check_size, get_hosted_model, get_settings, hosted, is_model_name, model_name

#: A request body up to this size (≈ 250 rows of 10 features) is parsed and predicted on the
#: event loop when the cached model is current; a larger one in the thread pool.
INLINE_BYTES = 48 * 1024
#: The same for GET: numbers in the query string.
INLINE_VALUES = 2048

ERRORS = {
    400: {"description": "A body that cannot be decoded at all (not UTF-8 JSON)."},
    404: {"description": "Unknown task (or unknown model, under /models/{name})."},
    409: {"description": "The stored model is below `min_version`."},
    413: {"description": "Request body, rows or features over the limits."},
    422: {"description": "Bad rows (wrong width, NaN/inf, non-numbers, unknown fields)."},
    503: {"description": "The database is down."},
}


def parse_rows(x: list[str]) -> list[list[float]]:
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


# ----------------------------------------------------------------------------- the fast path
#: The dependencies the fast path does by hand (see :meth:`PredictRoute.get_route_handler`).
_KNOWN_DEPENDENCIES = {security.require_read, security.bearer, model_name, get_hosted_model, get_settings}
_MIN_VERSION = re.compile(r"^[0-9]{1,18}$")


class _Fallback(Exception):
    """The fast path is not sure of this request: answer it through the declared route."""


def _answer(model: HostedModel, task_id: str, X, min_version: int | None, snap=None) -> bytes:
    """The body of the 200: what :func:`_predict` returns, serialised as FastAPI would
    (``response_model_exclude_none``) but without building and validating the model twice.
    ``snap``: the snapshot :meth:`~service.reads.ModelReader.fresh` returned, to answer from."""
    try:
        preds, probs, version = usecases.predict(model, task_id, X, min_version, snap)
    except core.InputError:
        raise _Fallback from None  # a refused row: the declared route says it, in its words
    finite = all(map(math.isfinite, preds)) and (probs is None or all(map(math.isfinite, probs)))
    if not finite:  # never from the engine; keep the declared route's behaviour anyway
        raise _Fallback
    out = [b'{"task_id":', json.dumps(task_id, ensure_ascii=False).encode(), b',"predictions":', to_json(preds)]
    if probs is not None:
        out += [b',"probabilities":', to_json(probs)]
    out.append(b',"version":%d}' % version)
    return b"".join(out)


def _get_answer(model: HostedModel, settings, task_id: str, x: list[str], min_version: int | None,
                snap=None) -> bytes:
    check_size(settings, len(x), (t.count(",") + 1 for t in x))
    return _answer(model, task_id, parse_rows(x), min_version, snap)


class _PredictBody(msgspec.Struct, forbid_unknown_fields=True):
    """:class:`fcl3.schemas.PredictRequest` as msgspec decodes it: the same fields and checks
    (numbers only, ints as floats, no unknown field, the last of a repeated key), parsed and
    validated in one pass at about half pydantic's cost for a batch. A body it refuses (or
    reads differently: NaN, Infinity or a float overflow, which pydantic turns into values
    the engine refuses) goes through the declared route, which gives pydantic's answer."""

    task_id: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    X: Annotated[list[list[float]], msgspec.Meta(min_length=1)]


_decode_body = msgspec.json.Decoder(_PredictBody).decode


def _post_answer(model: HostedModel, settings, body: bytes, min_version: int | None, snap=None) -> bytes:
    try:
        req = _decode_body(body)
    except msgspec.MsgspecError:  # DecodeError and ValidationError
        raise _Fallback from None
    check_size(settings, len(req.X), map(len, req.X))
    return _answer(model, req.task_id, req.X, min_version, snap)


def _query_pairs(query: bytes) -> list[tuple[str, str]]:
    """What ``request.query_params`` holds (starlette parses with ``parse_qsl`` the same way),
    without the multidict; a query with nothing to unquote is split directly."""
    text = query.decode("latin-1")
    if "%" in text or "+" in text:
        return parse_qsl(text, keep_blank_values=True)
    return [tuple(part.split("=", 1)) if "=" in part else (part, "") for part in text.split("&") if part]


def _prediction_query(query: bytes) -> tuple[str | None, list[str], int | None]:
    """``task_id`` (the last one, as FastAPI takes it), the ``x`` rows and ``min_version`` of a
    prediction's query string (:class:`_Fallback` for a ``min_version`` FastAPI would refuse)."""
    task_id = text_min_version = None
    x = []
    for key, value in _query_pairs(query):
        if key == "x":
            x.append(value)
        elif key == "task_id":
            task_id = value
        elif key == "min_version":
            text_min_version = value
    return task_id, x, _min_version(text_min_version)


def _min_version(text: str | None) -> int | None:
    if text is None:
        return None
    if not _MIN_VERSION.match(text):
        raise _Fallback
    return int(text)


async def _fast(request: Request) -> Response:
    """The answer of a prediction request on the happy path; :class:`_Fallback` otherwise."""
    state = request.app.state
    authorization = ctype = None
    for key, value in request.scope["headers"]:  # one pass; lower-case names; the first one counts
        if key == b"authorization" and authorization is None:
            authorization = value.decode("latin-1")
        elif key == b"content-type" and ctype is None:
            ctype = value.decode("latin-1")
    if not security.may_read(state.keys, authorization):
        raise _Fallback  # the declared route answers 401
    name = request.path_params.get("name")
    if name is not None and not is_model_name(name):
        raise _Fallback
    model = hosted(request, name)
    settings = state.settings
    task_id, x, min_version = _prediction_query(request.scope["query_string"])
    if request.method == "POST":
        if ctype is None or ctype.split(";", 1)[0].strip().lower() != "application/json":
            raise _Fallback
        body = await request.body()
        snap = model.reader.fresh(min_version) if len(body) <= INLINE_BYTES else None
        if snap is not None:
            content = _post_answer(model, settings, body, min_version, snap)
        else:
            content = await run_in_threadpool(_post_answer, model, settings, body, min_version)
    else:
        if task_id is None or not 1 <= len(task_id) <= 200 or not x:
            raise _Fallback
        values = sum(t.count(",") + 1 for t in x)
        snap = model.reader.fresh(min_version) if values <= INLINE_VALUES else None
        if snap is not None:
            content = _get_answer(model, settings, task_id, x, min_version, snap)
        else:
            content = await run_in_threadpool(_get_answer, model, settings, task_id, x, min_version)
    return Response(content, media_type="application/json")


def _calls(dependant) -> set[Any]:
    out = set()
    for d in dependant.dependencies:
        out.add(d.call)
        out |= _calls(d)
    return out


class PredictRoute(APIRoute):
    """An :class:`APIRoute` answered by :func:`_fast` when it can, else as declared.

    The fast path stands in for the route's dependencies, so it is used only when they are
    the ones it knows (:data:`_KNOWN_DEPENDENCIES`: the read key, the model name, the
    model, the settings) and the app has no dependency override; a route included with
    any other dependency is answered as declared. A GET route with the fast path is also
    registered for :func:`shortcut`."""

    def get_route_handler(self) -> Callable:
        declared = super().get_route_handler()
        context = _effective_context(self)
        if context is _UNKNOWN:
            return declared
        dependant = context.dependant if context is not None else self.dependant
        if not _KNOWN_DEPENDENCIES.issuperset(_calls(dependant)):
            return declared
        app = getattr(context, "dependency_overrides_provider", None) if context is not None else None
        if app is not None and "GET" in self.methods and context.path:
            _register_get(app, context.path)

        async def handler(request: Request) -> Response:
            if not request.app.dependency_overrides:
                try:
                    return await _fast(request)
                except _Fallback:
                    pass
            return await declared(request)

        return handler


def _effective_context(route: APIRoute):
    """The context FastAPI builds the handler of an included route under (its full path, the
    dependencies of the routers it is included in, the app), None for a route that is not
    included, :data:`_UNKNOWN` for a FastAPI without it (the fast path then stays off: an
    include's dependency could not be seen)."""
    try:
        from fastapi.routing import _effective_route_context_var
    except ImportError:
        return _UNKNOWN
    context = _effective_route_context_var.get()
    if context is not None and getattr(context, "original_route", None) is route:
        return context
    return None


_UNKNOWN = object()


# ----------------------------------------------------------------------------- the shortcut
#: Per app: the GET prediction routes with the fast path, as compiled path patterns.
_GET_ROUTES: "weakref.WeakKeyDictionary[Any, list[re.Pattern]]" = weakref.WeakKeyDictionary()


def _register_get(app, path: str) -> None:
    pattern = re.compile("^" + re.sub(r"\\{(\w+)\\}", r"(?P<\1>[^/]+)", re.escape(path)) + "$")
    patterns = _GET_ROUTES.setdefault(app, [])
    if all(p.pattern != pattern.pattern for p in patterns):
        patterns.append(pattern)


async def shortcut(scope, receive, send) -> bool:
    """``GET /predict`` (and ``/models/{name}/predict``) answered before routing, from
    :class:`service.main.ServiceApp`: the one-row prediction is the service's hot path, and
    FastAPI's layers (error middleware, routing through the included routers, dependencies,
    the request-response wrapper) cost more than the prediction itself. Only the complete
    answer of a current model on the event loop is given here (:func:`_shortcut_answer`);
    anything else (an error of any kind, a version to check, a large request, a dependency
    override) returns False without sending anything, and the request goes on to the app,
    whose route answers it as always (same checks: :func:`_fast`)."""
    if scope["method"] != "GET":
        return False
    app = scope.get("app")
    patterns = _GET_ROUTES.get(app) if app is not None else None
    if not patterns or app.dependency_overrides:
        return False
    path = scope["path"]
    for pattern in patterns:
        match = pattern.match(path)
        if match is not None:
            break
    else:
        return False
    try:
        content = _shortcut_answer(app.state, match.groupdict().get("name"), scope)
    except Exception:  # noqa: BLE001 - the route answers it (and raises it again if it must)
        return False
    if content is None:
        return False
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-length", b"%d" % len(content)), (b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": content})
    return True


def _shortcut_answer(state, name: str | None, scope) -> bytes | None:
    """What :func:`_fast` answers to a GET it would answer on the event loop, in a straight
    line (no Request object, no context manager); None where :func:`_fast` would not."""
    authorization = None
    for key, value in scope["headers"]:
        if key == b"authorization":
            authorization = value.decode("latin-1")
            break
    if not security.may_read(state.keys, authorization):
        return None
    if name is None:
        model = state.model
    elif is_model_name(name):
        model = state.models.get(name)
    else:
        return None
    task_id, x, min_version = _prediction_query(scope["query_string"])
    if task_id is None or not 1 <= len(task_id) <= 200 or not x:
        return None
    if sum(t.count(",") + 1 for t in x) > INLINE_VALUES:
        return None
    snap = model.reader.fresh(min_version)
    if snap is None:
        return None
    return _get_answer(model, state.settings, task_id, x, min_version, snap)


router = APIRouter(tags=["prediction"], route_class=PredictRoute)
register_shortcut(shortcut)

MinVersion = Query(None, ge=0, description="Answer from this version or a later one (the `version` a write "
                   "returned): read-your-writes across processes. 409 if the stored model is older.")


def _predict(model: HostedModel, task_id: str, X, min_version: int | None) -> PredictOut:
    preds, probs, version = usecases.predict(model, task_id, X, min_version)
    return PredictOut(task_id=task_id, predictions=preds, probabilities=probs, version=version)


@router.get("/predict", response_model=PredictOut, response_model_exclude_none=True, responses=ERRORS)
def predict_get(
    model: ModelDep,
    settings: SettingsDep,
    task_id: str = Query(..., min_length=1, max_length=200),
    x: list[str] = Query(..., description="One feature row as comma-separated numbers; repeat for more rows.",
                         examples=["1.0,2.0,3.0"]),
    min_version: int | None = MinVersion,
) -> PredictOut:
    """Predictions for feature rows given in the query string."""
    check_size(settings, len(x), (t.count(",") + 1 for t in x))
    return _predict(model, task_id, parse_rows(x), min_version)


@router.post("/predict", response_model=PredictOut, response_model_exclude_none=True, responses=ERRORS)
def predict_post(model: ModelDep, settings: SettingsDep, body: PredictRequest,
                 min_version: int | None = MinVersion) -> PredictOut:
    """Predictions for a batch of feature rows (for many rows)."""
    check_size(settings, len(body.X), map(len, body.X))
    return _predict(model, body.task_id, body.X, min_version)
