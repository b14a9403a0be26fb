"""Structured logs: one JSON object per line on stderr, from the ``service`` loggers.

Every line carries the request id of the request it belongs to (``X-Request-ID``, taken from
the client when it is short and safe, else generated, and echoed in the response). Messages
pass through the :class:`~service.security.Redactor`: configured API keys and connection
URL passwords never reach a log line.
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
    """Writes to whatever ``sys.stderr`` is at the time (so that test capture sees it)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


_installed: logging.Handler | None = None


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
