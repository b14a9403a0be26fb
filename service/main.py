"""The ASGI app: ``uvicorn service.main:app``.

:func:`create_app` assembles it: settings, API keys, logs, the lifespan that opens the
database, the lock and the hosted model, the middleware (:mod:`service.middleware`), the
error mapping (:mod:`service.errors`) and one router per resource (:mod:`service.api.routes`).
A failed request never leaves a half-written model: every write is one transaction.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, Depends, FastAPI
from fastapi_offline import FastAPIOffline
from sqlalchemy import exc as sa_exc

from fcl3 import __version__
from service import logs, metrics
from service.api.deps import model_name
from service.api.openapi import declare_error_envelope
from service.api.routes import batches, data, evaluation, events, health, labels, models, predict, prometheus, tasks, ui
from service.config import Settings, get_settings
from service.db import make_bulk_engine, make_engine, upgrade_schema
from service.errors import first_line, install_error_handlers
from service.evaluation.model_evaluation import EvaluationSettings
from service.events.hub import Hub
from service.hosting import ModelRegistry, Shared
from service.memory import freeze_startup_heap, limit_malloc_arenas
from service.middleware import BodyGate, BodyRule, RequestContext, RouteRules
from service.models.lifecycle import start
from service.security import FORBIDDEN, UNAUTHORIZED, KeyRing, Redactor, Role, require_read, require_write
from service.store.watch import make_watch
from service.writing.idempotency import IdempotencyKeys
from service.writing.idempotent import purge_expired
from service.writing.locks import make_locks

log = logging.getLogger("service")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    redact = Redactor.from_settings(settings)
    keys = KeyRing(settings.API_WRITE_KEYS, settings.API_READ_KEYS)  # malformed entries fail here
    logs.configure(settings.LOG_LEVEL, redact)
    if logs.take_over_server_access_log():
        log.info("uvicorn's access log is off: every request is logged by the service (logger service.access)")
    limit_malloc_arenas()  # before the request thread pool exists (see service/memory.py)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if not keys.enabled:
            log.warning(
                "NO API KEYS CONFIGURED: the API is OPEN, anyone who can reach it may read and change "
                "the model. Set API_WRITE_KEYS and API_READ_KEYS before exposing it."
            )
        engine = make_engine(settings)
        bulk_engine = make_bulk_engine(settings, engine)
        locks = make_locks(settings)
        watch = make_watch(engine, settings.VERSION_POLL, settings.DB_CONNECT_TIMEOUT)
        events = Hub()  # the event streams of GET .../events, woken by the watch
        watch.subscribe(events.changed)
        shared = Shared(events=events, evaluation=EvaluationSettings.of(settings))
        app.state.watch = watch
        app.state.events = events
        app.state.settings = settings
        metrics.REMEMBERED_BOUND.set(settings.MAX_REMEMBERED_PER_MODEL)
        app.state.engine = engine
        app.state.locks = locks
        idem = IdempotencyKeys(engine, settings.IDEMPOTENCY_TTL, settings.LOCK_TTL, settings.IDEMPOTENCY_PURGE_EVERY)
        app.state.models = ModelRegistry(
            engine,
            bulk_engine,
            locks,
            settings.MODEL_NAME,
            settings.model_settings(),
            settings.MODEL_CACHE_SIZE,
            idem,
            watch,
            shared,
        )
        app.state.model = app.state.models.default
        if settings.auto_create_schema:
            upgrade_schema(engine)  # serialised across the processes of one machine (file lock)
        try:
            start(app.state.model)
            purge_expired(idem)
        except (sa_exc.OperationalError, sa_exc.ProgrammingError, sa_exc.InterfaceError) as exc:
            # Start anyway: /readyz says what is missing, requests answer 503 until it is back.
            log.warning("model %r not ready at start-up: %s", settings.MODEL_NAME, first_line(exc))
        freeze_startup_heap()  # full collections skip what start-up made (see service/memory.py)
        log.info("worker started (pid %d)", os.getpid(), extra={"event": "started", "pid": os.getpid()})
        yield
        watch.close()  # ends the event streams (its subscriber, the hub)
        shared.close()  # the accuracy matrix's queued rows stay due
        locks.close()
        engine.dispose()
        if bulk_engine is not engine:
            bulk_engine.dispose()

    # /docs and /redoc from assets installed with fastapi-offline: no CDN, they render offline.
    app = FastAPIOffline(
        title="FCL3 service",
        summary="Online lifelong learning (Flexible Clustered Lifelong Learning) over HTTP.",
        version=__version__,  # the package's (fcl3/_version.py)
        lifespan=lifespan,
        redoc_url=None,  # /redoc is served by the ui router: Redoc's one remote image replaced (offline)
        # The service's metrics are Prometheus's (/metrics) and its logs its own (service.logs):
        # FastAPI's OpenTelemetry instrumentation is off, and its check is not paid per request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.redact = redact
    app.state.keys = keys
    # Which key and which body limit each route has, recorded as its router is included: the
    # body gate checks both from the headers, before any of a body is read.
    rules = RouteRules(BodyRule(None, settings.MAX_BODY_BYTES))
    app.add_middleware(RequestContext, gate=BodyGate(rules, keys, settings.BODY_TIMEOUT))  # sees every answer
    install_error_handlers(app)
    auth_errors: dict[int | str, dict[str, Any]] = {401: UNAUTHORIZED}
    write_errors: dict[int | str, dict[str, Any]] = {**auth_errors, 403: FORBIDDEN}
    guards = {"read": (Depends(require_read), auth_errors), "write": (Depends(require_write), write_errors)}

    def include(
        router: APIRouter,
        role: Role | None = None,
        *,
        named: bool = False,
        checks_key: bool = False,
        limit: tuple[int, str] = (settings.MAX_BODY_BYTES, "MAX_BODY_BYTES"),
    ) -> None:
        """Include ``router`` behind a ``role`` key (its dependency, unless the router checks the
        key itself), under ``/models/{name}`` when ``named``, with bodies up to ``limit``."""
        dependencies: list[Any] = []
        responses: dict[int | str, dict[str, Any]] = {}
        if role is not None and not checks_key:
            dependencies, responses = [guards[role][0]], dict(guards[role][1])
        prefix = ""
        if named:  # the routes of one model, on any model (the same route functions; see service.api.deps)
            prefix = "/models/{name}"
            dependencies.append(Depends(model_name))
            responses[404] = {"description": "Unknown model."}
        rules.add(router.routes, BodyRule(role, *limit), prefix)
        app.include_router(router, prefix=prefix, dependencies=dependencies, responses=responses)

    # Routes are matched in order: the prediction routes first (plain Starlette routes, which
    # check the read key themselves; both forms, GET and POST: one endpoint), then the open probes.
    app.router.routes[0:0] = predict.routes
    rules.add(predict.routes, BodyRule("read", settings.MAX_BODY_BYTES))
    include(health.router)  # /healthz, /readyz: open
    include(predict.router, "read", checks_key=True)  # what /openapi.json says of the prediction routes
    # The routes of one model, twice: on the default model (MODEL_NAME), and under
    # /models/{name} on any model.
    include(tasks.router, "read")
    include(tasks.router, "read", named=True)
    include(evaluation.read_router, "read")
    include(evaluation.read_router, "read", named=True)
    include(events.router, "read")
    include(events.router, "read", named=True)
    include(data.router, "write")
    include(data.router, "write", named=True)
    include(evaluation.write_router, "write")
    include(evaluation.write_router, "write", named=True)
    include(labels.router, "write")
    include(labels.router, "write", named=True)
    include(labels.read_router, "read")
    include(labels.read_router, "read", named=True)
    include(batches.router, "write")
    include(batches.router, "write", named=True)
    include(models.write_router, "write")
    include(models.import_router, "write", limit=(settings.MAX_IMPORT_BYTES, "MAX_IMPORT_BYTES"))
    include(models.read_router, "read")
    include(prometheus.router)  # /metrics: open
    include(ui.router)  # /ui: the dashboard's page and assets (its data comes from the API, keyed)
    declare_error_envelope(app)  # every error answer's body, in /openapi.json
    return app


app = create_app()
