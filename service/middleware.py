"""Pure ASGI middleware: the request context (request id, access log line, request metrics,
generic 500) and the request body limit (413)."""
from __future__ import annotations

import json
import logging
import time

from . import logs, metrics

log = logging.getLogger("service")


class RequestContext:
    """Pure ASGI middleware (outermost in the app's stack): request id (``X-Request-ID`` in and
    out), one JSON log line and the metrics of every request, and a generic 500 for anything
    unhandled."""

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
            client = scope.get("client")
            logs.access(scope["method"], scope["path"], final, round(seconds * 1000, 2), rid,
                        client[0] if client else None)
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
