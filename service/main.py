"""The ASGI app: ``uvicorn service.main:app``.

Errors: 422 bad input (core's own message, or pydantic's), 404 unknown task, 409 a stale
writer refused, 413 body too large, 503 lock busy (with Retry-After) or database / Redis
down. A failed request never leaves a half-written model: every write is one transaction.
"""
from __future__ import annotations

import logging
import math
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc

import core

from .api.routes import data, health, model, predict, tasks
from .config import Settings, get_settings
from .db import make_engine, upgrade_schema
from .locks import LockBackendDown, LockBusy, make_locks
from .store import ModelConfigError, ModelMissing, ModelStore, StaleWrite

log = logging.getLogger("service")


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
    def detail(status: int, message: str, headers: dict | None = None) -> JSONResponse:
        return JSONResponse({"detail": message}, status_code=status, headers=headers)

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
        return detail(503, f"{exc}; no update was applied", {"Retry-After": "5"})

    @app.exception_handler(StaleWrite)
    async def _stale(request: Request, exc: StaleWrite):
        return detail(409, str(exc))

    @app.exception_handler(ModelConfigError)
    async def _config(request: Request, exc: ModelConfigError):
        return detail(500, f"model configuration error: {exc}")

    @app.exception_handler(ModelMissing)
    async def _missing(request: Request, exc: ModelMissing):
        return detail(503, str(exc), {"Retry-After": "1"})

    @app.exception_handler(sa_exc.OperationalError)
    @app.exception_handler(sa_exc.InterfaceError)
    @app.exception_handler(sa_exc.TimeoutError)
    async def _db_down(request: Request, exc: Exception):
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
            return detail(503, f"redis unavailable: {exc}; no update was applied", {"Retry-After": "5"})
    except ImportError:  # pragma: no cover
        pass


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        engine = make_engine(settings)
        locks = make_locks(settings)
        app.state.settings = settings
        app.state.engine = engine
        app.state.locks = locks
        app.state.store = ModelStore(engine, locks, settings.MODEL_NAME, settings.model_settings())
        if settings.auto_create_schema:
            upgrade_schema(engine)
        try:
            app.state.store.ensure_model()
        except (sa_exc.OperationalError, sa_exc.ProgrammingError, sa_exc.InterfaceError) as exc:
            # Start anyway: /readyz says what is missing, requests answer 503 until it is back.
            log.warning("model %r not ready at start-up: %s", settings.MODEL_NAME, _first_line(exc))
        yield
        locks.close()
        engine.dispose()

    app = FastAPI(
        title="FCL3 service",
        summary="Online lifelong learning (Flexible Clustered Lifelong Learning) over HTTP.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.add_middleware(BodyLimit, max_bytes=settings.MAX_BODY_BYTES)
    install_error_handlers(app)
    for r in (data.router, predict.router, tasks.router, model.router, health.router):
        app.include_router(r)
    return app


app = create_app()
