"""The client's errors: :class:`APIError` and a subclass per status for an error answer,
:class:`ConnectionFailed` (and :class:`TimedOut`) when the service could not be reached."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:  # pragma: no cover
    from ._calls import Call

__all__ = [
    "FCL3Error",
    "APIError",
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Conflict",
    "Gone",
    "PayloadTooLarge",
    "UnsupportedMediaType",
    "InvalidInput",
    "ServerError",
    "Unavailable",
    "ConnectionFailed",
    "TimedOut",
    "NOT_SENT",
    "error_from",
    "unreachable",
]


class FCL3Error(Exception):
    """Base class of the client's errors."""


class APIError(FCL3Error):
    """The service answered with an error status. ``status``: the HTTP status; ``detail``: the
    server's ``detail`` as sent; ``field`` and ``row``: the field and row at fault, when the
    answer names them; ``message``: the detail as one line; ``headers``: the response headers."""

    field: str | None = None
    row: int | None = None

    def __init__(self, status: int, detail: Any, method: str, path: str, headers: httpx.Headers | None = None):
        self.status = status
        self.detail = detail
        self.method = method
        self.path = path
        self.headers = headers if headers is not None else httpx.Headers()
        self.message = _detail_text(detail)
        super().__init__(f"{status} on {method} {path}: {self.message}")


class BadRequest(APIError):
    """400: a body that could not be decoded."""


class Unauthorized(APIError):
    """401: no API key, or an unknown one."""


class Forbidden(APIError):
    """403: a read key on a write route."""


class NotFound(APIError):
    """404: unknown model or task."""


class Conflict(APIError):
    """409: a model name taken, a fork that cannot be made, ``min_version`` past the stored
    version; for a batch, an ``Idempotency-Key`` still in flight after the retries."""


class Gone(APIError):
    """410: prediction ids past ``PREDICTION_TTL`` or dropped; a batch taken back already; a retry
    with the ``Idempotency-Key`` of a batch taken back since (``taken_back_by`` in the body)."""


class PayloadTooLarge(APIError):
    """413: body, rows or features over the service's limits."""


class UnsupportedMediaType(APIError):
    """415: a ``text/csv`` body in another charset than UTF-8."""


class InvalidInput(APIError, ValueError):
    """422: bad input, refused with the reason; nothing was changed."""


class ServerError(APIError):
    """500 and other 5xx but 503."""


class Unavailable(APIError):
    """503 after the retries: the update lock stayed busy, or the database or Redis is down."""


class ConnectionFailed(FCL3Error):
    """The service could not be reached, or the connection was lost and the request could not
    be resent safely, after the retries. The httpx error is ``__cause__``."""


class TimedOut(ConnectionFailed):
    """The service did not answer (or no connection was made) within the client's ``timeout``,
    after the retries. A batch that timed out is retried with its ``Idempotency-Key`` (the
    retry gets the first answer if the first request went through: nothing is learned twice);
    a request that cannot be resent safely (create, fork, import, evaluation rows) is not, and
    may have been applied. ``timeout``: the seconds that ran out; ``phase``: ``connect``,
    ``read``, ``write`` or ``pool``."""

    def __init__(self, message: str, timeout: float | None, phase: str):
        super().__init__(message)
        self.timeout = timeout
        self.phase = phase


_BY_STATUS = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    422: InvalidInput,
    503: Unavailable,
}

#: Transport errors raised before anything reached the server: resending is always safe.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

_TIMEOUT_PHASES = {
    httpx.ConnectTimeout: "connect",
    httpx.ReadTimeout: "read",
    httpx.WriteTimeout: "write",
    httpx.PoolTimeout: "pool",
}


def _detail_text(detail: Any) -> str:
    """pydantic's error list as ``where: what; ...``, anything else as text."""
    if isinstance(detail, list):
        parts = []
        for e in detail:
            if isinstance(e, dict):
                loc = ".".join(str(p) for p in e.get("loc", ()))
                parts.append(f"{loc}: {e.get('msg', e)}" if loc else str(e.get("msg", e)))
            else:
                parts.append(str(e))
        return "; ".join(parts)
    return str(detail)


def error_from(response: httpx.Response) -> APIError:
    """The error of an answer with an error status, carrying the server's ``detail``."""
    body: Any = None
    try:
        body = response.json()
        detail = body.get("detail", body) if isinstance(body, dict) else body
    except ValueError:
        detail = response.text.strip() or response.reason_phrase
    cls = _BY_STATUS.get(response.status_code, ServerError if response.status_code >= 500 else APIError)
    error = cls(response.status_code, detail, response.request.method, response.request.url.path, response.headers)
    if isinstance(body, dict):  # the error envelope (fcl3.schemas.ErrorOut)
        field, row = body.get("field"), body.get("row")
        error.field = field if isinstance(field, str) else None
        error.row = row if isinstance(row, int) and not isinstance(row, bool) else None
    return error


def unreachable(
    call: Call[Any], base_url: httpx.URL, exc: httpx.TransportError, attempts: int, timeout: httpx.Timeout | None = None
) -> ConnectionFailed:
    """The error raised when the retries of ``call`` ran out on transport errors (or it could
    not be resent safely): what was tried, where, how many times, and why."""
    where = f"{call.method} {str(base_url).rstrip('/')}{call.path}"
    unsafe = "" if isinstance(exc, NOT_SENT) or call.replay_safe else " (not resent: it may have been applied)"
    if isinstance(exc, httpx.TimeoutException):
        phase = next((p for cls, p in _TIMEOUT_PHASES.items() if isinstance(exc, cls)), "read")
        seconds = getattr(timeout, phase, None) if timeout is not None else None
        within = f" within {seconds:g} s" if seconds is not None else ""
        why = {
            "connect": f"could not connect{within}",
            "read": f"no answer{within}",
            "write": f"could not send the request{within}",
            "pool": f"no free connection{within} (too many requests at once)",
        }[phase]
        return TimedOut(f"{where}: timed out: {why}, after {attempts} attempt(s){unsafe}", seconds, phase)
    why = "could not connect" if isinstance(exc, NOT_SENT) else "connection lost"
    return ConnectionFailed(f"{where}: {why} after {attempts} attempt(s){unsafe}: {type(exc).__name__}: {exc}")
