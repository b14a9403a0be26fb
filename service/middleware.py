"""The app's pure ASGI middleware: the request context (request id, access log line, request
metrics, generic 500) and, for a request with a body, the body gate (key checked before the
body, 413, 408)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fastapi import HTTPException
from starlette.routing import BaseRoute, Route, compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service import logs, metrics
from service.security import KeyRing, Role, refusal

log = logging.getLogger("service")


class RequestContext:
    """Pure ASGI middleware, the app's own and outermost: request id (``X-Request-ID`` in and
    out), one JSON log line and the metrics of every request, a generic 500 for anything
    unhandled, and for a request with a body the :class:`BodyGate`. The request's headers are
    read once, here, for all of it."""

    def __init__(self, app: ASGIApp, gate: BodyGate):
        self.app, self.gate = app, gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        sent_id = declared = authorization = None
        chunked = False
        for name, value in scope.get("headers") or ():
            if name == b"x-request-id":
                sent_id = value
            elif name == b"content-length":
                declared = value
            elif name == b"transfer-encoding":
                chunked = True
            elif name == b"authorization" and authorization is None:
                authorization = value
        rid = logs.valid_request_id(None if sent_id is None else sent_id.decode("latin-1"))
        rid_header = (b"x-request-id", rid.encode())
        token = logs.request_id.set(rid)
        scope.setdefault("state", {})["request_id"] = rid
        status: int | None = None
        t0 = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), rid_header]}
            await send(message)

        try:
            if chunked or (declared is not None and declared != b"0"):  # a body (RFC 9112, 6.3)
                await self.gate(
                    self.app,
                    scope,
                    receive,
                    send_with_id,
                    declared,
                    None if authorization is None else authorization.decode("latin-1"),
                )
            else:
                await self.app(scope, receive, send_with_id)
        except Exception:  # the client gets a generic message, the log the details
            log.error("unhandled error in %s %s", scope["method"], scope["path"], exc_info=True)
            if status is None:
                status = 500
                body = json.dumps({"detail": "internal server error", "request_id": rid}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 500,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            rid_header,
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
        finally:
            seconds = time.perf_counter() - t0
            final = status if status is not None else 499  # the client went away before an answer
            metrics.observe_status(scope["method"], final, seconds)
            client = scope.get("client")
            logs.access(
                scope["method"], scope["path"], final, round(seconds * 1000, 2), rid, client[0] if client else None
            )
            logs.request_id.reset(token)


@dataclass(frozen=True)
class BodyRule:
    """What a route asks of a request body: the key it needs (``None``: an open route) and the
    largest body it takes, with the setting that sets it (named in the 413)."""

    role: Role | None
    max_bytes: int
    setting: str = "MAX_BODY_BYTES"


class RouteRules:
    """The :class:`BodyRule` of each route, found from the method and the path alone: before
    routing, so before any of the body is read. :func:`service.main.create_app` adds the routes
    of each router as it includes it, with the key its dependencies ask for; a path no rule
    matches gets ``default`` (the app answers it 404 or 405 without reading the body)."""

    def __init__(self, default: BodyRule):
        self.default = default
        self._rules: list[tuple[re.Pattern[str], frozenset[str], BodyRule]] = []

    def add(self, routes: Iterable[BaseRoute], rule: BodyRule, prefix: str = "") -> None:
        """Every route of ``routes`` (included under ``prefix``) gets ``rule``."""
        for route in routes:
            if isinstance(route, Route) and route.methods:  # a mount (static files) keeps the default
                regex, _, _ = compile_path(prefix + route.path)
                self._rules.append((regex, frozenset(route.methods), rule))

    def lookup(self, method: str, path: str) -> BodyRule:
        for regex, methods, rule in self._rules:
            if method in methods and regex.match(path):
                return rule
        return self.default


class BodyRefused(HTTPException):
    """A body over its limit (413) or idle past ``BODY_TIMEOUT`` (408), raised from ``receive``:
    the app's error handlers answer it like any ``HTTPException``."""


class BodyGate:
    """What :class:`RequestContext` does with a request that has a body (a ``Content-Length``
    above 0 or a ``Transfer-Encoding``). Before the app runs, from the headers alone: the API
    key the route needs (401/403, :func:`service.security.refusal`) and a declared length over
    the route's limit (413). Then the body is handed on as the app reads it, never buffered
    here: past the limit ``receive`` raises 413, and a client that sends nothing for ``timeout``
    seconds while the body is incomplete gets 408. An answer given before the whole body arrived
    closes the connection, so that the rest of the body is never read."""

    def __init__(self, rules: RouteRules, keys: KeyRing, timeout: float):
        self.rules, self.keys, self.timeout = rules, keys, timeout

    async def __call__(
        self,
        app: ASGIApp,
        scope: Scope,
        receive: Receive,
        send: Send,
        declared: bytes | None,
        authorization: str | None,
    ) -> None:
        """Run ``app`` on a request with a body of ``declared`` bytes (``None``: chunked)."""
        path, root = scope["path"], scope.get("root_path", "")
        rule = self.rules.lookup(scope["method"], path[len(root) :] if root and path.startswith(root) else path)
        if rule.role is not None:
            refused = refusal(self.keys, authorization, rule.role)
            if refused is not None:
                return await _answer(send, refused.status_code, refused.detail, refused.headers)
        if declared is not None and declared.isdigit() and int(declared) > rule.max_bytes:
            return await _answer(send, 413, _too_large(rule))
        body = _Body(receive, send, rule, self.timeout)
        try:
            await app(scope, body.receive, body.send)
        except BodyRefused as exc:  # not answered by the app's handlers (e.g. read outside a route)
            if body.started:
                raise
            await _answer(send, exc.status_code, exc.detail)


class _Body:
    """One request's ``receive`` and ``send``, as :class:`BodyGate` hands them to the app."""

    def __init__(self, receive: Receive, send: Send, rule: BodyRule, timeout: float):
        self._receive, self._send, self.rule, self.timeout = receive, send, rule, timeout
        self.size = 0
        self.complete = self.started = False

    async def receive(self) -> Message:
        if self.complete:
            return await self._receive()  # e.g. a streaming response waiting for the disconnect
        try:
            async with asyncio.timeout(self.timeout):  # uvicorn runs on asyncio (anyio's fail_after: 2.5x the cost)
                message = await self._receive()
        except TimeoutError:
            raise BodyRefused(408, f"no request body received for {self.timeout:g} s (BODY_TIMEOUT)") from None
        if message["type"] != "http.request":  # the client went away
            self.complete = True
            return message
        self.size += len(message.get("body", b""))
        if self.size > self.rule.max_bytes:
            raise BodyRefused(413, _too_large(self.rule))
        self.complete = not message.get("more_body", False)
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            if not self.complete:
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
        await self._send(message)


def _too_large(rule: BodyRule) -> str:
    return f"request body larger than {rule.max_bytes} bytes ({rule.setting})"


async def _answer(send: Send, status: int, detail: str, headers: Mapping[str, str] | None = None) -> None:
    """A JSON ``{"detail": ...}`` answer that closes the connection (the body is left unread)."""
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
