"""When the client retries a request, and how long it waits first: the same rules for the
sync and the async client, and for every call (a :class:`~fcl3._calls.Call` says which
retries are safe for it).

A batch answered "busy, nothing applied" (409: its ``Idempotency-Key`` still in flight; 503:
the update lock busy, the database or Redis down) is retried for at least
:attr:`Retries.patience` seconds, past :attr:`Retries.total`: a claim or an update lock that a
crashed request left behind lasts at most the service's ``LOCK_TTL`` (30 s by default)."""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from .errors import NOT_SENT

if TYPE_CHECKING:  # pragma: no cover
    from ._calls import Call

__all__ = ["Attempts", "Retries", "wait_after_error", "wait_after_response"]


@dataclass(frozen=True)
class Retries:
    """``total`` retries after the first attempt; exponential backoff from ``backoff`` seconds
    (doubling, at most ``max_backoff``, with jitter); a ``Retry-After`` is honoured up to
    ``max_retry_after`` seconds. A batch answered 409 (its key in flight) or 503 is retried,
    without counting against ``total``, until the waits after such answers add up to
    ``patience`` seconds (at least the service's ``LOCK_TTL``; 0: no more than ``total``)."""

    total: int = 5
    backoff: float = 0.5
    max_backoff: float = 10.0
    max_retry_after: float = 60.0
    patience: float = 60.0

    def backoff_for(self, attempt: int) -> float:
        return float(min(self.max_backoff, self.backoff * 2**attempt) * random.uniform(0.5, 1.0))

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


def wait_after_error(call: Call[Any], retries: Retries, attempt: int, exc: httpx.TransportError) -> float | None:
    """Seconds to wait before retrying after a transport error, or None to give up."""
    if attempt >= retries.total:
        return None
    if isinstance(exc, NOT_SENT) or call.replay_safe:
        return retries.backoff_for(attempt)
    return None


def wait_after_response(call: Call[Any], retries: Retries, attempt: int, response: httpx.Response) -> float | None:
    """Seconds to wait before retrying after this answer, or None: it is the answer."""
    if attempt >= retries.total:
        return None
    status = response.status_code
    if busy(call, response):
        return retries.retry_after(response, attempt)
    if status in (502, 504) and call.replay_safe:  # a proxy in front lost the upstream
        return retries.backoff_for(attempt)
    return None


def busy(call: Call[Any], response: httpx.Response) -> bool:
    """Whether the answer says "busy, nothing applied, retry": 503; a 409 with ``Retry-After``
    (an ``Idempotency-Key`` still in flight, for any call that sends one); or any 409 where
    the call retries conflicts (a batch: its key in flight, or a stale writer refused). A 409
    without ``Retry-After`` to a call that does not retry conflicts is final (labels: the ids
    were labelled already)."""
    if response.status_code == 503:
        return True
    return response.status_code == 409 and (call.retry_conflict or "Retry-After" in response.headers)


class Attempts:
    """One request's retries: how many were made (``retried``), how many counted against
    ``Retries.total``, and how long the client waited after busy answers of a patient call
    (:attr:`fcl3._calls.Call.patient`: a batch)."""

    def __init__(self, call: Call[Any], retries: Retries):
        self.call, self.retries = call, retries
        self.retried = 0
        self.counted = 0
        self.busy_waited = 0.0

    @property
    def made(self) -> int:
        """Attempts made so far (the one just answered included)."""
        return self.retried + 1

    def after_error(self, exc: httpx.TransportError) -> float | None:
        """Seconds to wait before retrying after a transport error, or None to give up."""
        return self._next(wait_after_error(self.call, self.retries, self.counted, exc), counted=True)

    def after_response(self, response: httpx.Response) -> float | None:
        """Seconds to wait before retrying after this answer, or None: it is the answer."""
        if self.call.patient and busy(self.call, response) and self.busy_waited < self.retries.patience:
            wait = self.retries.retry_after(response, self.retried)
            self.busy_waited += wait
            return self._next(wait, counted=False)
        return self._next(wait_after_response(self.call, self.retries, self.counted, response), counted=True)

    def _next(self, wait: float | None, counted: bool) -> float | None:
        if wait is not None:
            self.retried += 1
            self.counted += counted
        return wait
