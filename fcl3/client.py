"""The Python client of the FCL3 service: :class:`Client` (sync) and :class:`AsyncClient`.

Needs httpx and pydantic only. Numpy arrays are accepted wherever rows are (anything with
``tolist()``), numpy itself is never imported. Results are the service's own schemas
(:mod:`fcl3.schemas`, the one definition both sides use)::

    from fcl3 import Client

    with Client("http://127.0.0.1:8000", api_key="...") as c:
        c.create_model("schools", kind="regression")
        r = c.learn("schools", "school-1", X, y)        # UpdateOut; sent with an Idempotency-Key
        c.predict("schools", "school-1", X[:3]).predictions

Retries are safe by construction:

* ``503`` (the update lock is busy, the database or Redis is down: nothing was applied) is
  retried after its ``Retry-After`` (capped by ``max_retry_after``), else after a backoff;
* a connection that could not be made is retried with exponential backoff and jitter; a
  connection lost after the request was sent is retried only when resending cannot apply
  anything twice: reads, deletes, and batches;
* every batch carries an ``Idempotency-Key`` (a new UUID unless one is given), kept over the
  retries of that batch: the service answers a key it already committed with its first
  answer and applies nothing, answers ``409`` + ``Retry-After`` while the first request still
  runs (waited for and retried here), and ``422`` if the key was used with another body.

Errors raise :class:`APIError` (a subclass per status: :class:`NotFound`, :class:`Conflict`,
:class:`InvalidInput`, ...) carrying ``status`` and the server's ``detail``, or
:class:`ConnectionFailed` when the service could not be reached after the retries
(:class:`TimedOut`, a subclass, when it did not answer within ``timeout``).

One source for both clients: :class:`AsyncClient` is written in ``fcl3/_async/client.py`` and
:class:`Client` is generated from it (``python -m fcl3._unasync``); the calls, retry rules,
errors and event stream they share are :mod:`fcl3._calls`, :mod:`fcl3.retries`,
:mod:`fcl3.errors` and :mod:`fcl3.events`. This module gathers the public names.
"""

from __future__ import annotations

from ._async.client import AsyncClient
from ._calls import DEFAULT_URL, BatchResult
from ._sync.client import Client
from .errors import (
    APIError,
    BadRequest,
    Conflict,
    ConnectionFailed,
    FCL3Error,
    Forbidden,
    Gone,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    ServerError,
    TimedOut,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
)
from .events import Event
from .retries import Retries
from .schemas import (  # noqa: F401
    EvaluationEvent,
    EvaluationOut,
    EvaluationRowsOut,
    ModelList,
    ModelOut,
    PredictOut,
    ResetEvent,
    TakeBackOut,
    TaskList,
    TaskOut,
    UpdateEvent,
    UpdateOut,
)

__all__ = [
    "Client",
    "AsyncClient",
    "BatchResult",
    "Event",
    "Retries",
    "DEFAULT_URL",
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
]
