"""Error mapping: the service's and its libraries' exceptions -> HTTP answers.

Every answer has one body, the error envelope :class:`fcl3.schemas.ErrorOut`: ``detail`` in
words, with ``field`` and ``row`` where the fault has them (pydantic's errors are rewritten so,
without its prefixes; ``errors`` lists them when there are several).

401 missing/unknown API key, 403 read key on a write route, 422 bad input (core's own
message, or the request's validation; a bad model file), 404 unknown model or task, 409 a stale writer
refused, a model name taken, a fork that cannot be made or an Idempotency-Key whose first
request still runs (with Retry-After), 413 body, rows or
features over the limits, 503 lock busy (with Retry-After), default model not created yet, or
database / Redis down, 500 an internal error (a generic message with the request id; the
details go to the log only). Error bodies are scrubbed of API keys and connection-URL
passwords (``app.state.redact``).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException

import core
from fcl3.records import RecordError
from fcl3.schemas import MODEL_NAME_RULE, ErrorItem
from service.models.learners import ModelConfigError
from service.models.lifecycle import ForkRefused
from service.refusals import Refused
from service.store.reads import ModelMissing, VersionBehind
from service.store.writes import ModelExists, StaleWrite
from service.writing.idempotency import KeyInFlight
from service.writing.locks import LockBackendDown, LockBusy

log = logging.getLogger("service")


def first_line(exc: BaseException) -> str:
    """The first line of a (database) error, for a log line or an error body."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


class _ErrorJSON(JSONResponse):
    """A JSON error body that any string can go in: one that UTF-8 cannot encode (a lone
    surrogate the client sent as ``\\ud800``, echoed in a 422) is written with ``\\u`` escapes."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()


#: pydantic's prefixes of a validator's own message, dropped: the message reads as written.
_PREFIXES = ("Value error, ", "Assertion failed, ")
#: Where a validation error was found (the first part of its ``loc``), never a field itself.
_SOURCES = ("body", "query", "path", "header", "cookie")


def plain_error(error: Mapping[str, Any]) -> ErrorItem:
    """One pydantic / FastAPI validation error as the envelope's item: its message without
    pydantic's prefixes, the field at fault (the non-numeric parts of its ``loc``, dotted) and
    the first number of the ``loc`` as the row."""
    loc = list(error.get("loc", ()))
    if loc and loc[0] in _SOURCES:
        loc = loc[1:]
    message = str(error.get("msg", "invalid"))
    for prefix in _PREFIXES:
        message = message.removeprefix(prefix)
    if error.get("type") == "json_invalid":  # loc: the character position
        reason = (error.get("ctx") or {}).get("error")
        at = f" at character {loc[0]}" if loc and isinstance(loc[0], int) else ""
        return ErrorItem(detail=f"the body is not valid JSON{at}: {reason or message}")
    if error.get("type") == "missing" and not loc:
        return ErrorItem(detail="a request body is required")
    if error.get("type") == "missing":
        message = "is missing"
    elif error.get("type") == "string_pattern_mismatch" and loc == ["name"]:
        message = f"must be {MODEL_NAME_RULE}"
    rows = [p for p in loc if isinstance(p, int)]
    names = [str(p) for p in loc if not isinstance(p, int)]
    field = ".".join(names) or None
    row = rows[0] if rows else None
    where = field or ""
    if rows:
        where += "".join(f"[{r}]" for r in rows) if field else f"row {row}"
    if not where or (message.startswith(f"{field} ") and not rows):  # the message names its field already
        return ErrorItem(detail=message, field=field, row=row)
    sep = " " if message == "is missing" or message.startswith("must be ") else ": "
    return ErrorItem(detail=f"{where}{sep}{message}", field=field, row=row)


def validation_envelope(errors: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The 422 of a request that failed validation: the first problem as the envelope's
    ``detail``, ``field`` and ``row``, and ``errors`` listing every one when there are several."""
    items = [plain_error(e) for e in errors] or [ErrorItem(detail="invalid request")]
    out = items[0].model_dump()
    if len(items) > 1:
        out["detail"] = "; ".join(i.detail for i in items)
        out["errors"] = [i.model_dump() for i in items]
    return out


def install_error_handlers(app: FastAPI) -> None:
    """Register the exception handlers on ``app`` (which holds ``state.redact``)."""
    redact = app.state.redact

    def detail(status: int, message: str, headers: dict[str, Any] | None = None) -> JSONResponse:
        return JSONResponse({"detail": redact(message)}, status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # always encodable: a message may quote text the client sent (a lone surrogate)
        body = validation_envelope(exc.errors())
        body["detail"] = redact(body["detail"])
        for item in body.get("errors") or ():
            item["detail"] = redact(item["detail"])
        return _ErrorJSON(jsonable_encoder(body, exclude_none=True), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI's HTTPException and Starlette's 404/405, in the one envelope
        body = exc.detail if isinstance(exc.detail, dict) else {"detail": str(exc.detail)}
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(core.InputError)
    async def _input(_request: Request, exc: core.InputError) -> JSONResponse:
        return detail(422, str(exc))

    @app.exception_handler(Refused)
    async def _refused(_request: Request, exc: Refused) -> JSONResponse:
        # a label request, a take-back: the reason and its fields
        if exc.status == 422:  # bad input, answered as any bad input: its reason alone
            return detail(422, str(exc))
        field = exc.version_field
        headers = {"X-Model-Version": str(exc.extra[field])} if field in exc.extra else None
        return JSONResponse({"detail": redact(exc.message), **exc.extra}, status_code=exc.status, headers=headers)

    @app.exception_handler(RecordError)
    async def _record(_request: Request, exc: RecordError) -> JSONResponse:
        # records refused: the field and row at fault
        return JSONResponse({"detail": redact(str(exc)), "field": exc.field, "row": exc.row}, status_code=422)

    @app.exception_handler(core.UnknownTaskError)
    async def _unknown(_request: Request, exc: core.UnknownTaskError) -> JSONResponse:
        return detail(404, str(exc))

    @app.exception_handler(LockBusy)
    async def _busy(_request: Request, exc: LockBusy) -> JSONResponse:
        return detail(503, str(exc), {"Retry-After": str(max(1, math.ceil(exc.wait)))})

    @app.exception_handler(LockBackendDown)
    async def _redis_down(_request: Request, exc: LockBackendDown) -> JSONResponse:
        log.warning("update refused: %s", exc)
        return detail(503, f"{exc}; no update was applied", {"Retry-After": "5"})

    @app.exception_handler(StaleWrite)
    async def _stale(_request: Request, exc: StaleWrite) -> JSONResponse:
        log.warning("stale writer refused: %s", exc)
        return detail(409, str(exc))

    @app.exception_handler(KeyInFlight)
    async def _key_in_flight(_request: Request, exc: KeyInFlight) -> JSONResponse:
        return detail(409, str(exc), {"Retry-After": "1"})

    @app.exception_handler(ModelConfigError)
    async def _config(_request: Request, exc: ModelConfigError) -> JSONResponse:
        log.error("model configuration error: %s", exc)
        return detail(500, f"model configuration error: {exc}")

    @app.exception_handler(ModelMissing)
    async def _missing(request: Request, exc: ModelMissing) -> JSONResponse:
        settings = getattr(request.app.state, "settings", None)
        if settings is not None and exc.name == settings.MODEL_NAME:  # created at start-up / first write
            return detail(503, str(exc), {"Retry-After": "1"})
        return detail(404, f"unknown model {exc.name!r}: create it with POST /models")

    @app.exception_handler(ModelExists)
    async def _exists(_request: Request, exc: ModelExists) -> JSONResponse:
        return detail(409, str(exc))

    @app.exception_handler(VersionBehind)
    async def _behind(_request: Request, exc: VersionBehind) -> JSONResponse:
        return detail(409, str(exc))

    @app.exception_handler(ForkRefused)
    async def _fork(_request: Request, exc: ForkRefused) -> JSONResponse:
        return detail(409, str(exc))

    @app.exception_handler(sa_exc.OperationalError)
    @app.exception_handler(sa_exc.InterfaceError)
    @app.exception_handler(sa_exc.TimeoutError)
    async def _db_down(_request: Request, exc: Exception) -> JSONResponse:
        log.warning("database unavailable: %s", first_line(exc))
        return detail(503, f"database unavailable: {first_line(exc)}; nothing was changed", {"Retry-After": "5"})

    @app.exception_handler(sa_exc.ProgrammingError)
    async def _schema(_request: Request, exc: sa_exc.ProgrammingError) -> JSONResponse:
        if getattr(getattr(exc, "orig", None), "sqlstate", None) == "42P01":  # undefined table
            return detail(503, f"database schema missing (run `alembic upgrade head`): {first_line(exc)}")
        raise exc

    try:
        import redis

        @app.exception_handler(redis.exceptions.ConnectionError)
        @app.exception_handler(redis.exceptions.TimeoutError)
        async def _redis(_request: Request, exc: Exception) -> JSONResponse:
            log.warning("redis unavailable: %s", exc)
            return detail(503, f"redis unavailable: {exc}; no update was applied", {"Retry-After": "5"})
    except ImportError:  # pragma: no cover
        pass
