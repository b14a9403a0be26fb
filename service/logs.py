"""Structured logs: one JSON object per line on stderr, from the ``service`` loggers.

Every line goes through :mod:`logging` and is rendered once, by :class:`JsonFormatter`.
It carries the request id of the request it belongs to (``X-Request-ID``, taken from the
client when it is short and safe, else generated, and echoed in the response). Messages pass
through the :class:`~service.security.Redactor`: configured API keys and connection URL
passwords never reach a log line.
"""
from __future__ import annotations

import contextvars
import functools
import json
import logging
import os
import re
import sys
import time

from pydantic_core import PydanticSerializationError, to_json

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)

_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_STANDARD = set(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {"message", "asctime", "taskName"}

access_log = logging.getLogger("service.access")


def valid_request_id(value: str | None) -> str:
    """The client's id if it is 1-64 safe characters, else a fresh one."""
    if value and _SAFE_ID.match(value):
        return value
    return os.urandom(16).hex()  # 32 random hex digits, as uuid4().hex but without building a UUID


@functools.lru_cache(maxsize=4)
def _utc_second(epoch_second: int) -> str:
    """``2026-11-26T12:00:00`` of a Unix second (cached: the lines of a second share it)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_second))


class JsonFormatter(logging.Formatter):
    """A record as one JSON object: ``ts`` (UTC, milliseconds), ``level``, ``logger``,
    ``message`` (redacted), ``request_id``, the record's extra fields, and ``exception``
    (redacted traceback) when there is one."""

    def __init__(self, redact=None):
        super().__init__()
        self.redact = redact or (lambda s: s)

    def formatTime(self, record, datefmt=None):  # noqa: N802 - logging's name
        return f"{_utc_second(int(record.created))}.{int(record.msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": self.formatTime(record), "level": record.levelname, "logger": record.name,
               "message": self.redact(record.getMessage())}
        rid = getattr(record, "request_id", None) or request_id.get()
        if rid:
            out["request_id"] = rid
        for k, v in record.__dict__.items():
            if k not in _STANDARD and k not in out and k[0] != "_":
                out[k] = v
        if record.exc_info:  # server side only, scrubbed of secrets
            out["exception"] = self.redact(self.formatException(record.exc_info))
        try:  # pydantic-core's encoder: a fifth of the json module's time for a request line
            return to_json(out, fallback=str).decode()
        except PydanticSerializationError:  # a string UTF-8 cannot hold (a lone surrogate): escaped
            return json.dumps(out, default=str)


class _Stderr(logging.StreamHandler):
    """A :class:`logging.StreamHandler` on whatever ``sys.stderr`` is when a line is written
    (a server's stderr, or a test's capture)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass

    def handleError(self, record):  # noqa: N802 - logging's name
        """As logging's own (the line is lost, a report goes to stderr), except that a stderr
        that cannot take the report either (closed) loses it too: a log line never fails a request."""
        try:
            super().handleError(record)
        except (OSError, ValueError):
            pass


def access(method: str, path: str, status: int, duration_ms: float, rid: str, client: str | None = None) -> None:
    """Log the access line of a request: the ``service.access`` record ``request`` with the
    fields ``event``, ``method``, ``path``, ``status``, ``duration_ms`` and ``client`` (the
    peer's address, as the server gives it). The record is made by the logger's ``makeRecord``
    and given to its ``handle``, as ``Logger.info`` does once it has looked for the caller in
    the stack: the caller is always this function, so the record names it."""
    if access_log.isEnabledFor(logging.INFO):
        access_log.handle(access_log.makeRecord(
            access_log.name, logging.INFO, __file__, 0, "request", (), None, "access",
            {"request_id": rid, "event": "request", "method": method, "path": path, "status": status,
             "duration_ms": duration_ms, "client": client}))


def take_over_server_access_log() -> bool:
    """Turn uvicorn's own access log off, as ``--no-access-log`` does: the service logs every
    request itself (:func:`access`: the same facts, as JSON, with the request id), and a second,
    plain-text line per request would double the logs and their cost. True if it was on."""
    server_log = logging.getLogger("uvicorn.access")
    if not server_log.handlers:
        return False
    server_log.handlers = []
    server_log.propagate = False
    return True


def installed() -> logging.Handler | None:
    """The handler :func:`configure` put on the ``service`` logger (None before it ran)."""
    return next((h for h in logging.getLogger("service").handlers if isinstance(h, _Stderr)), None)


def configure(level: str = "INFO", redact=None) -> None:
    """Send the ``service`` loggers to stderr as JSON lines (idempotent: re-configures in place)."""
    logger = logging.getLogger("service")
    handler = installed()
    if handler is None:
        handler = _Stderr()
        logger.addHandler(handler)
    handler.setFormatter(JsonFormatter(redact))
    logger.setLevel(level.upper())
    logger.propagate = False
