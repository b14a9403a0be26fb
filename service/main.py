"""The ASGI app: ``uvicorn service.main:app``.

Errors: 401 missing/unknown API key, 403 read key on a write route, 422 bad input (core's own
message, or pydantic's), 404 unknown task, 409 a stale writer refused, 413 body, rows or
features over the limits, 503 lock busy (with Retry-After) or database / Redis down, 500 an
internal error (a generic message with the request id; the details go to the log only).
A failed request never leaves a half-written model: every write is one transaction.
Error bodies and log lines are scrubbed of API keys and connection-URL passwords.
"""
from __future__ import annotations

import json
import logging
import math
import time
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy import exc as sa_exc

import core

from . import logs, metrics
from .api.routes import data, health, model, predict, tasks
from .config import Settings, get_settings
from .db import make_bulk_engine, make_engine, upgrade_schema
from .locks import LockBackendDown, LockBusy, make_locks
from .memory import limit_malloc_arenas
from .security import FORBIDDEN, UNAUTHORIZED, KeyRing, Redactor, require_read, require_write
from .store import ModelConfigError, ModelMissing, ModelStore, StaleWrite

log = logging.getLogger("service")
access_log = logging.getLogger("service.access")


class RequestContext:
    """Pure ASGI middleware (outermost): request id (``X-Request-ID`` in and out), one JSON
    log line and the metrics of every request, and a generic 500 for anything unhandled."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        sent_id = None
        for name, value in scope.get("headers") or []:
            if name == b"x-request-id":
                sent_id = value.decode("latin-1")
        rid = logs.valid_request_id(sent_id)
        token = logs.request_id.set(rid)
        scope.setdefault("state", {})["request_id"] = rid
        status: int | None = None
        t0 = time.perf_counter()

        async def send_with_id(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:  # noqa: BLE001 - the client gets a generic message, the log the details
            log.error("unhandled error in %s %s", scope["method"], scope["path"], exc_info=True)
            if status is None:
                status = 500
                body = json.dumps({"detail": "internal server error", "request_id": rid}).encode()
                await send({"type": "http.response.start", "status": 500, "headers": [
                    (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    (b"x-request-id", rid.encode())]})
                await send({"type": "http.response.body", "body": body})
        finally:
            seconds = time.perf_counter() - t0
            final = status if status is not None else 499  # the client went away before an answer
            metrics.observe_status(scope["method"], final, seconds)
            access_log.info("request", extra={"event": "request", "method": scope["method"], "path": scope["path"],
                                              "status": final, "duration_ms": round(seconds * 1000, 2)})
            logs.request_id.reset(token)


class BodyLimit:
    """Pure ASGI middleware: 413 for a body over ``max_bytes``, declared (Content-Length) or
    streamed (chunked). The body is read here, up to the limit, then handed on unchanged."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._reject(send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return await self._reject(send)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _reject(self, send):
        body = b'{"detail":"request body larger than %d bytes (MAX_BODY_BYTES)"}' % self.max_bytes
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def install_error_handlers(app: FastAPI) -> None:
    redact = app.state.redact

    def detail(status: int, message: str, headers: dict | None = None) -> JSONResponse:
        return JSONResponse({"detail": redact(message)}, status_code=status, headers=headers)

    @app.exception_handler(core.InputError)
    async def _input(request: Request, exc: core.InputError):
        return detail(422, str(exc))

    @app.exception_handler(core.UnknownTaskError)
    async def _unknown(request: Request, exc: core.UnknownTaskError):
        return detail(404, str(exc))

    @app.exception_handler(LockBusy)
    async def _busy(request: Request, exc: LockBusy):
        return detail(503, str(exc), {"Retry-After": str(max(1, math.ceil(exc.wait)))})

    @app.exception_handler(LockBackendDown)
    async def _redis_down(request: Request, exc: LockBackendDown):
        log.warning("update refused: %s", exc)
        return detail(503, f"{exc}; no update was applied", {"Retry-After": "5"})

    @app.exception_handler(StaleWrite)
    async def _stale(request: Request, exc: StaleWrite):
        log.warning("stale writer refused: %s", exc)
        return detail(409, str(exc))

    @app.exception_handler(ModelConfigError)
    async def _config(request: Request, exc: ModelConfigError):
        log.error("model configuration error: %s", exc)
        return detail(500, f"model configuration error: {exc}")

    @app.exception_handler(ModelMissing)
    async def _missing(request: Request, exc: ModelMissing):
        return detail(503, str(exc), {"Retry-After": "1"})

    @app.exception_handler(sa_exc.OperationalError)
    @app.exception_handler(sa_exc.InterfaceError)
    @app.exception_handler(sa_exc.TimeoutError)
    async def _db_down(request: Request, exc: Exception):
        log.warning("database unavailable: %s", _first_line(exc))
        return detail(503, f"database unavailable: {_first_line(exc)}; nothing was changed", {"Retry-After": "5"})

    @app.exception_handler(sa_exc.ProgrammingError)
    async def _schema(request: Request, exc: sa_exc.ProgrammingError):
        if getattr(getattr(exc, "orig", None), "sqlstate", None) == "42P01":  # undefined table
            return detail(503, f"database schema missing (run `alembic upgrade head`): {_first_line(exc)}")
        raise exc

    try:
        import redis

        @app.exception_handler(redis.exceptions.ConnectionError)
        @app.exception_handler(redis.exceptions.TimeoutError)
        async def _redis(request: Request, exc: Exception):
            log.warning("redis unavailable: %s", exc)
            return detail(503, f"redis unavailable: {exc}; no update was applied", {"Retry-After": "5"})
    except ImportError:  # pragma: no cover
        pass


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    redact = Redactor.from_settings(settings)
    keys = KeyRing(settings.API_WRITE_KEYS, settings.API_READ_KEYS)  # malformed entries fail here
    logs.configure(settings.LOG_LEVEL, redact)
    # Before the request thread pool exists: 2 malloc arenas instead of up to 8 per core
    # (see service/memory.py: per-thread arenas each kept their own free space, and a soaked
    # worker's RSS grew with it). MALLOC_ARENA_MAX in the environment takes precedence.
    limit_malloc_arenas()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if not keys.enabled:
            log.warning("NO API KEYS CONFIGURED: the API is OPEN, anyone who can reach it may read and change "
                        "the model. Set API_WRITE_KEYS and API_READ_KEYS before exposing it.")
        engine = make_engine(settings)
        bulk_engine = make_bulk_engine(settings, engine)
        locks = make_locks(settings)
        app.state.settings = settings
        app.state.engine = engine
        app.state.locks = locks
        app.state.store = ModelStore(engine, locks, settings.MODEL_NAME, settings.model_settings(), bulk_engine)
        if settings.auto_create_schema:
            upgrade_schema(engine)
        try:
            app.state.store.ensure_model()
            app.state.store.snapshot()  # warm cache, metrics gauges
        except (sa_exc.OperationalError, sa_exc.ProgrammingError, sa_exc.InterfaceError) as exc:
            # Start anyway: /readyz says what is missing, requests answer 503 until it is back.
            log.warning("model %r not ready at start-up: %s", settings.MODEL_NAME, _first_line(exc))
        yield
        locks.close()
        engine.dispose()
        if bulk_engine is not engine:
            bulk_engine.dispose()

    app = FastAPI(
        title="FCL3 service",
        summary="Online lifelong learning (Flexible Clustered Lifelong Learning) over HTTP.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.redact = redact
    app.state.keys = keys
    app.add_middleware(BodyLimit, max_bytes=settings.MAX_BODY_BYTES)
    app.add_middleware(RequestContext)  # outermost: sees every answer, 413 included
    install_error_handlers(app)
    auth_errors = {401: UNAUTHORIZED}
    app.include_router(data.router, dependencies=[Depends(require_write)], responses={**auth_errors, 403: FORBIDDEN})
    for r in (predict.router, tasks.router, model.router):
        app.include_router(r, dependencies=[Depends(require_read)], responses=auth_errors)
    app.include_router(health.router)  # /healthz, /readyz: open

    @app.get("/metrics", include_in_schema=False)
    def prometheus_metrics() -> Response:
        """Prometheus text format (open, like /healthz: put it behind the network's own policy)."""
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)

    return app


app = create_app()
