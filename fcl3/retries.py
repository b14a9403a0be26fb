"""When the client retries a request, and how long it waits first: the same rules for the
sync and the async client, and for every call (a :class:`~fcl3._calls.Call` says which
retries are safe for it)."""
from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from .errors import NOT_SENT

if TYPE_CHECKING:  # pragma: no cover
    from ._calls import Call

__all__ = ["Retries", "wait_after_error", "wait_after_response"]


@dataclass(frozen=True)
class Retries:
    """``total`` retries after the first attempt; exponential backoff from ``backoff`` seconds
    (doubling, at most ``max_backoff``, with jitter); a ``Retry-After`` is honoured up to
    ``max_retry_after`` seconds."""

    total: int = 5
    backoff: float = 0.5
    max_backoff: float = 10.0
    max_retry_after: float = 60.0

    def backoff_for(self, attempt: int) -> float:
        return min(self.max_backoff, self.backoff * 2 ** attempt) * random.uniform(0.5, 1.0)

    def retry_after(self, response: httpx.Response, attempt: int) -> float:
        value = response.headers.get("Retry-After")
        if value:
            try:
                return min(self.max_retry_after, max(0.0, float(value)))
            except ValueError:
                try:  # an HTTP date
                    when = email.utils.parsedate_to_datetime(value)
                    return min(self.max_retry_after, max(0.0, when.timestamp() - time.time()))
                except (TypeError, ValueError, OverflowError):
                    pass
        return self.backoff_for(attempt)


def wait_after_error(call: Call, retries: Retries, attempt: int, exc: httpx.TransportError) -> float | None:
    """Seconds to wait before retrying after a transport error, or None to give up."""
    if attempt >= retries.total:
        return None
    if isinstance(exc, NOT_SENT) or call.replay_safe:
        return retries.backoff_for(attempt)
    return None


def wait_after_response(call: Call, retries: Retries, attempt: int, response: httpx.Response) -> float | None:
    """Seconds to wait before retrying after this answer, or None: it is the answer."""
    if attempt >= retries.total:
        return None
    status = response.status_code
    if status == 503 or (status == 409 and call.retry_conflict):
        return retries.retry_after(response, attempt)
    if status in (502, 504) and call.replay_safe:  # a proxy in front lost the upstream
        return retries.backoff_for(attempt)
    return None
