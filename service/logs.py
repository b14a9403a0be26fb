"""Structured logs: one JSON object per line on stderr, from the ``service`` loggers.

Every line carries the request id of the request it belongs to (``X-Request-ID``, taken from
the client when it is short and safe, else generated, and echoed in the response). Messages
pass through the :class:`~service.security.Redactor`: configured API keys and connection
URL passwords never reach a log line.

The access line of every request (:func:`access`) is the one line per prediction: it is
rendered straight to JSON and written with the other access lines of the same turn of the
event loop, as long as the ``service`` loggers write only to this module's handler; with any
other handler, filter or level in the way, it goes through :mod:`logging` like every line.
"""
from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import logging
import os
import re
import select
import sys
import time
import traceback

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)

_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_STANDARD = set(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {"message", "asctime", "taskName"}


def valid_request_id(value: str | None) -> str:
    """The client's id if it is 1-64 safe characters, else a fresh one."""
    if value and _SAFE_ID.match(value):
        return value
    return os.urandom(16).hex()  # 32 random hex digits, as uuid4().hex but without building a UUID


#: ``json.dumps(obj, default=str)`` with one encoder made once (dumps makes one per call).
_encode = json.JSONEncoder(default=str).encode


@functools.lru_cache(maxsize=4)
def _utc_second(epoch_second: int) -> str:
    """``2026-11-26T12:00:00`` of a Unix second (cached: every line of a second shares it)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_second))


class JsonFormatter(logging.Formatter):
    def __init__(self, redact=None):
        super().__init__()
        self.redact = redact or (lambda s: s)

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": f"{_utc_second(int(record.created))}.{int(record.msecs):03d}Z",
               "level": record.levelname, "logger": record.name, "message": self.redact(record.getMessage())}
        rid = getattr(record, "request_id", None) or request_id.get()
        if rid:
            out["request_id"] = rid
        for k, v in record.__dict__.items():
            if k not in _STANDARD and k not in out and k[0] != "_":
                out[k] = v
        if record.exc_info:  # server side only, scrubbed of secrets
            out["exception"] = self.redact("".join(traceback.format_exception(*record.exc_info)))
        return _encode(out)


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (so that test capture sees it).

    :meth:`write_soon` holds lines in the stream's byte buffer until the event loop's next
    turn, then flushes them with one write: under load, the access lines of all the requests
    answered in one turn cost one system call. Held lines are written before any line logged
    through :mod:`logging`, so lines keep their order, and a write never holds more than
    ``PIPE_BUF`` bytes of them: on a pipe shared by several workers (a container's stderr),
    writes up to that size are atomic, so lines from different processes never interleave."""

    _flush_due = False
    _held = 0  # bytes written by write_soon and not flushed yet

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass

    def write_soon(self, line: str) -> None:
        """Write ``line`` (ASCII, ending in a newline); flushed on the loop's next turn, or at
        once outside an event loop or on a stream without a byte buffer. A stderr that cannot
        be written (closed, a broken pipe, none at all) loses the line, as logging's handlers
        do: a log line never fails a request."""
        stream = self.stream
        buffer = getattr(stream, "buffer", None)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self.lock:
            try:
                if buffer is None or loop is None:
                    stream.write(line)
                    stream.flush()
                    return
                data = line.encode("ascii")
                if self._held and self._held + len(data) > select.PIPE_BUF:
                    self._flush(buffer)
                buffer.write(data)
            except (OSError, ValueError, AttributeError):
                return
            self._held += len(data)
            if not self._flush_due:
                self._flush_due = True
                loop.call_soon(self._flush_soon, buffer)

    def emit(self, record: logging.LogRecord) -> None:
        if self._held:  # the held lines first, in a write of their own
            self._flush(getattr(self.stream, "buffer", None))
        super().emit(record)

    def _flush_soon(self, buffer) -> None:
        with self.lock:
            self._flush_due = False
            self._flush(buffer)

    def _flush(self, buffer) -> None:
        self._held = 0
        try:
            if buffer is not None:
                buffer.flush()
        except (OSError, ValueError):  # stderr closed or gone: as logging's handleError would, go on
            pass


_installed: _Stderr | None = None
access_log = logging.getLogger("service.access")
_service_log = logging.getLogger("service")


def access(method: str, path: str, status: int, duration_ms: float, rid: str, client: str | None = None) -> None:
    """Log the access line of a request: the ``service.access`` record ``request`` with the
    fields ``event``, ``method``, ``path``, ``status``, ``duration_ms`` and ``client`` (the
    peer's address, as the server gives it). ``rid`` is a valid request id
    (:func:`valid_request_id`: nothing in it needs escaping)."""
    if not access_log.isEnabledFor(logging.INFO):
        return
    handler = _installed
    if (handler is None or access_log.handlers or access_log.filters or not access_log.propagate
            or _service_log.handlers != [handler] or _service_log.propagate
            or handler.filters or handler.level > logging.INFO or type(handler.formatter) is not JsonFormatter):
        # another destination or filter: the record as logging makes it, for whatever is in the way
        access_log.info("request", extra={"request_id": rid, "event": "request", "method": method, "path": path,
                                          "status": status, "duration_ms": duration_ms, "client": client})
        return
    now = time.time()
    # The line JsonFormatter.format makes of that record, key for key.
    handler.write_soon(
        f'{{"ts": "{_utc_second(int(now))}.{int((now - int(now)) * 1000):03d}Z", "level": "INFO", '
        f'"logger": "service.access", "message": "request", "request_id": "{rid}", "event": "request", '
        f'"method": {_encode(method)}, "path": {_encode(path)}, "status": {status:d}, '
        f'"duration_ms": {duration_ms!r}, "client": {"null" if client is None else _encode(client)}}}\n')


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


def configure(level: str = "INFO", redact=None) -> None:
    """Send the ``service`` loggers to stderr as JSON lines (idempotent: re-configures in place)."""
    global _installed
    # The logging HOWTO's optimisations for a line per request: the JSON lines carry no caller
    # (file, line), thread or process fields, so no record looks them up.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logger = logging.getLogger("service")
    if _installed is None:
        _installed = _Stderr()
        logger.addHandler(_installed)
    _installed.setFormatter(JsonFormatter(redact))
    logger.setLevel(level.upper())
    logger.propagate = False
