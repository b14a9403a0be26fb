"""Structured logs: one JSON object per line on stderr, from the ``service`` loggers.

Every line goes through :mod:`logging` and is rendered once, by python-json-logger's
:class:`~pythonjsonlogger.json.JsonFormatter` (:class:`JsonFormatter`: the service's field
names, its time stamps, pydantic-core's encoder). It carries the request id of the request it
belongs to (``X-Request-ID``, taken from the client when it is short and safe, else generated,
and echoed in the response). Messages and tracebacks pass through the
:class:`~service.security.Redactor`: configured API keys and connection URL passwords never
reach a log line.
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
from collections.abc import Callable
from typing import Any, TextIO

from pydantic_core import PydanticSerializationError, to_json
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter as _LibraryFormatter

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)

_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")

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


def _dumps(data: dict[str, Any], **_options: Any) -> str:
    """One line's JSON by pydantic-core's encoder (a fifth of the json module's time for a
    request line); a string UTF-8 cannot hold (a lone surrogate) is escaped by the json module."""
    try:
        return to_json(data, fallback=str).decode()
    except PydanticSerializationError:
        return json.dumps(data, default=str)


class JsonFormatter(_LibraryFormatter):
    """A record as one JSON object: ``ts`` (UTC, milliseconds), ``level``, ``logger``,
    ``message`` (redacted), the record's extra fields (``request_id`` among them) and
    ``exception`` (redacted traceback) when there is one."""

    def __init__(self, redact: Callable[[str], str] | None = None):
        super().__init__(
            ["asctime", "levelname", "name", "message"],
            json_serializer=_dumps,
            rename_fields={"asctime": "ts", "levelname": "level", "name": "logger", "exc_info": "exception"},
            reserved_attrs=[*RESERVED_ATTRS, "taskName"],
        )
        self.redact = redact or (lambda s: s)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - logging's name
        return f"{_utc_second(int(record.created))}.{int(record.msecs):03d}Z"

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        """The message and the traceback (server side only) scrubbed of secrets."""
        log_data["message"] = self.redact(log_data["message"])
        if "exception" in log_data:
            log_data["exception"] = self.redact(log_data["exception"])
        return log_data


class RequestId(logging.Filter):
    """Gives a record the id of the request it is logged in (the context's), unless it has one."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            rid = request_id.get()
            if rid:
                record.request_id = rid
        return True


class _Stderr(logging.StreamHandler[TextIO]):
    """A :class:`logging.StreamHandler` on whatever ``sys.stderr`` is when a line is written
    (a server's stderr, or a test's capture)."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
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
        access_log.handle(
            access_log.makeRecord(
                access_log.name,
                logging.INFO,
                __file__,
                0,
                "request",
                (),
                None,
                "access",
                {
                    "request_id": rid,
                    "event": "request",
                    "method": method,
                    "path": path,
                    "status": status,
                    "duration_ms": duration_ms,
                    "client": client,
                },
            )
        )


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


def configure(level: str = "INFO", redact: Callable[[str], str] | None = None) -> None:
    """Send the ``service`` loggers to stderr as JSON lines (idempotent: re-configures in place)."""
    logger = logging.getLogger("service")
    handler = installed()
    if handler is None:
        handler = _Stderr()
        handler.addFilter(RequestId())
        logger.addHandler(handler)
    handler.setFormatter(JsonFormatter(redact))
    logger.setLevel(level.upper())
    logger.propagate = False
