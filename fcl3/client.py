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
"""
from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Generic, Iterator, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from . import schemas
from .schemas import (EvaluationEvent, EvaluationOut, EvaluationRowsOut, ModelList, ModelOut, PredictOut, ResetEvent,
                      TaskList, TaskOut, UpdateEvent, UpdateOut)

__all__ = [
    "Client", "AsyncClient", "BatchResult", "Event", "Retries",
    "FCL3Error", "APIError", "BadRequest", "Unauthorized", "Forbidden", "NotFound", "Conflict",
    "PayloadTooLarge", "InvalidInput", "ServerError", "Unavailable", "ConnectionFailed", "TimedOut",
]

T = TypeVar("T")
DEFAULT_URL = "http://127.0.0.1:8000"


# ----------------------------------------------------------------------------- errors
class FCL3Error(Exception):
    """Base class of the client's errors."""


class APIError(FCL3Error):
    """The service answered with an error status. ``status``: the HTTP status; ``detail``: the
    server's ``detail`` as sent (a string, or pydantic's list of errors for some 422s);
    ``message``: the detail as one line; ``headers``: the response headers."""

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


class PayloadTooLarge(APIError):
    """413: body, rows or features over the service's limits."""


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


_BY_STATUS = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
              413: PayloadTooLarge, 422: InvalidInput, 503: Unavailable}


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


def _error(response: httpx.Response) -> APIError:
    try:
        body = response.json()
        detail = body.get("detail", body) if isinstance(body, dict) else body
    except ValueError:
        detail = response.text.strip() or response.reason_phrase
    cls = _BY_STATUS.get(response.status_code, ServerError if response.status_code >= 500 else APIError)
    return cls(response.status_code, detail, response.request.method, response.request.url.path, response.headers)


# ----------------------------------------------------------------------------- results
@dataclass(frozen=True)
class BatchResult:
    """What :meth:`Client.learn_batch` returns: the service's answer, whether it was a replay of
    an earlier request with the same key (nothing applied this time), the key, and the number of
    attempts it took."""

    update: UpdateOut
    replayed: bool
    idempotency_key: str
    attempts: int


@dataclass(frozen=True)
class Event:
    """One Server-Sent Event of ``GET /models/{name}/events``: ``id`` (the model version, the
    ``Last-Event-ID`` to resume from), ``event`` (``update``, ``evaluation``, ``reset``, ...) and
    ``data`` (the parsed JSON object)."""

    id: str | None
    event: str
    data: Any

    @property
    def version(self) -> int | None:
        """``id`` as the model version (``None`` if absent or not a number)."""
        try:
            return int(self.id) if self.id is not None else None
        except ValueError:
            return None


# ----------------------------------------------------------------------------- requests
def _rows(X: Any, name: str = "X") -> list[list[Any]]:
    """Rows as lists (numpy arrays, lists of lists, tuples)."""
    rows = X.tolist() if hasattr(X, "tolist") else [r.tolist() if hasattr(r, "tolist") else list(r) for r in X]
    if rows and not isinstance(rows[0], list):
        raise ValueError(f"{name} must be 2-D (rows of features); got a flat sequence")
    return rows


def _values(y: Any) -> list[Any]:
    return y.tolist() if hasattr(y, "tolist") else list(y)


def _json(body: Any) -> bytes:
    try:
        return json.dumps(body, allow_nan=False, separators=(",", ":")).encode()
    except ValueError:
        raise ValueError("the rows hold NaN or infinity, which JSON cannot carry: nothing was sent") from None


def _seg(value: str) -> str:
    """One path segment (task ids may hold any character)."""
    return quote(str(value), safe="")


@dataclass
class _Call(Generic[T]):
    """One API call, independent of sync or async I/O: what to send, how to read the answer,
    and which retries are safe."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Resending after the request may have reached the server cannot apply anything twice.
    replay_safe: bool = False
    #: 409 means "retry" (a batch: its key still in flight, or a stale writer refused).
    retry_conflict: bool = False
    #: A retry that gets 404 means done (delete).
    missing_ok_on_retry: bool = False


def _typed(model: type[BaseModel]) -> Callable[[httpx.Response], Any]:
    return lambda r: model.model_validate_json(r.content)


def _parsed_json(r: httpx.Response) -> Any:
    return r.json()


def _model_path(name: str) -> str:
    return f"/models/{_seg(name)}"


def _create(name: str, kind: str | None, estimator: str, params: dict | None, d: int | None) -> _Call[ModelOut]:
    body = schemas.ModelCreate(name=name, kind=kind, estimator=estimator, params=params or {}, d=d)
    return _Call("POST", "/models", _typed(ModelOut), content=_json(body.model_dump(mode="json", exclude_none=True)),
                 headers={"Content-Type": "application/json"})


def _fork(name: str, source: str, version: int | None) -> _Call[ModelOut]:
    body = schemas.ModelCreate(name=name, fork=schemas.ForkFrom(model=source, version=version))
    return _Call("POST", "/models", _typed(ModelOut),
                 content=_json(body.model_dump(mode="json", include={"name", "fork"}, exclude_none=True)),
                 headers={"Content-Type": "application/json"})


def _learn(model: str, task_id: str, X: Any, y: Any, key: str) -> _Call[tuple[UpdateOut, bool]]:
    def parse(r: httpx.Response) -> tuple[UpdateOut, bool]:
        return UpdateOut.model_validate_json(r.content), r.headers.get("Idempotent-Replayed") == "true"

    return _Call("POST", f"{_model_path(model)}/tasks/{_seg(task_id)}/data", parse,
                 content=_json({"X": _rows(X), "y": _values(y)}),
                 headers={"Content-Type": "application/json", "Idempotency-Key": key},
                 replay_safe=True, retry_conflict=True)


def _predict(model: str, task_id: str, X: Any, min_version: int | None) -> _Call[PredictOut]:
    return _Call("POST", f"{_model_path(model)}/predict", _typed(PredictOut),
                 params={"min_version": min_version} if min_version is not None else None,
                 content=_json({"task_id": task_id, "X": _rows(X)}),
                 headers={"Content-Type": "application/json"}, replay_safe=True)


def _get(path: str, parse: Callable[[httpx.Response], T], params: Any = None) -> _Call[T]:
    return _Call("GET", path, parse, params=params, replay_safe=True)


def _healthz() -> _Call[dict]:
    return _get("/healthz", _parsed_json)


def _ready() -> _Call[dict]:
    return _get("/readyz", _parsed_json)


def _metrics() -> _Call[str]:
    return _Call("GET", "/metrics", lambda r: r.text, headers={"Accept": "text/plain"}, replay_safe=True)


def _import(name: str, path: str | os.PathLike) -> _Call[ModelOut]:
    data = Path(path).read_bytes()
    return _Call("POST", f"{_model_path(name)}/state", _typed(ModelOut), content=data,
                 headers={"Content-Type": "application/octet-stream"})


def _write_export(path: str | os.PathLike) -> Callable[[httpx.Response], int]:
    def parse(r: httpx.Response) -> int:
        target = Path(path)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.part")
        tmp.write_bytes(r.content)
        os.replace(tmp, target)  # never a half-written file under the final name
        return int(r.headers.get("X-Model-Version", "-1"))

    return parse


def _limit(limit: int | None) -> dict | None:
    return None if limit is None else {"limit": limit}


def _evaluation_path(model: str, task_id: str) -> str:
    return f"{_model_path(model)}/tasks/{_seg(task_id)}/evaluation"


#: The schema of each event's ``data`` (by ``event:``); an event not listed keeps its JSON.
_EVENT_SCHEMAS: dict[str, type[BaseModel]] = {"update": UpdateEvent, "evaluation": EvaluationEvent, "reset": ResetEvent}


# ----------------------------------------------------------------------------- retries
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


_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def _wait_after_error(call: _Call, retries: Retries, attempt: int, exc: httpx.TransportError) -> float | None:
    """Seconds to wait before retrying after a transport error, or None to give up."""
    if attempt >= retries.total:
        return None
    if isinstance(exc, _NOT_SENT) or call.replay_safe:
        return retries.backoff_for(attempt)
    return None


def _wait_after_response(call: _Call, retries: Retries, attempt: int, response: httpx.Response) -> float | None:
    if attempt >= retries.total:
        return None
    status = response.status_code
    if status == 503 or (status == 409 and call.retry_conflict):
        return retries.retry_after(response, attempt)
    if status in (502, 504) and call.replay_safe:  # a proxy in front lost the upstream
        return retries.backoff_for(attempt)
    return None


def _finish(call: _Call[T], response: httpx.Response, attempt: int) -> T:
    if response.status_code == 404 and call.missing_ok_on_retry and attempt > 0:
        return None  # type: ignore[return-value]  # a delete whose first attempt went through
    if response.status_code >= 400:
        raise _error(response)
    return call.parse(response)


_TIMEOUT_PHASES = {httpx.ConnectTimeout: "connect", httpx.ReadTimeout: "read", httpx.WriteTimeout: "write",
                   httpx.PoolTimeout: "pool"}


def _unreachable(call: _Call, base_url: httpx.URL, exc: httpx.TransportError, attempts: int,
                 timeout: httpx.Timeout | None = None) -> ConnectionFailed:
    where = f"{call.method} {str(base_url).rstrip('/')}{call.path}"
    unsafe = "" if isinstance(exc, _NOT_SENT) or call.replay_safe else " (not resent: it may have been applied)"
    if isinstance(exc, httpx.TimeoutException):
        phase = next((p for cls, p in _TIMEOUT_PHASES.items() if isinstance(exc, cls)), "read")
        seconds = getattr(timeout, phase, None) if timeout is not None else None
        within = f" within {seconds:g} s" if seconds is not None else ""
        why = {"connect": f"could not connect{within}", "read": f"no answer{within}",
               "write": f"could not send the request{within}",
               "pool": f"no free connection{within} (too many requests at once)"}[phase]
        return TimedOut(f"{where}: timed out: {why}, after {attempts} attempt(s){unsafe}", seconds, phase)
    why = "could not connect" if isinstance(exc, _NOT_SENT) else "connection lost"
    return ConnectionFailed(f"{where}: {why} after {attempts} attempt(s){unsafe}: {type(exc).__name__}: {exc}")


# ----------------------------------------------------------------------------- SSE
class _SSEParser:
    """Server-Sent Events framing (the WHATWG rules: ``field: value`` lines, ``data`` lines
    joined, a blank line dispatches an event that has data, ``:`` starts a comment, the last
    ``id`` seen carries over to the events after it)."""

    def __init__(self):
        self.last_id: str | None = None
        self.retry_ms: int | None = None
        self._event = ""
        self._data: list[str] = []

    def restart(self) -> None:
        """A new connection: an event cut off by the old one is dropped."""
        self._event, self._data = "", []

    def feed(self, line: str) -> Event | None:
        if not line:
            if not self._data:
                self._event = ""
                return None
            text = "\n".join(self._data)
            name = self._event or "message"
            self._event, self._data = "", []
            try:
                data = json.loads(text)
            except ValueError:
                data = text
            model = _EVENT_SCHEMAS.get(name)
            if model is not None and isinstance(data, dict):
                try:
                    data = model.model_validate(data)
                except ValueError:
                    pass  # a newer service's payload: keep the JSON
            return Event(self.last_id, name, data)
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self.last_id = value
        elif name == "retry" and value.isdigit():
            self.retry_ms = int(value)
        return None


# ----------------------------------------------------------------------------- clients
def _headers(api_key: str | None, extra: dict[str, str] | None) -> dict[str, str]:
    from . import __version__

    h = {"User-Agent": f"fcl3-client/{__version__}", "Accept": "application/json"}
    if api_key:
        h["Authorization"] = f"Bearer {api_key}"
    h.update(extra or {})
    return h


def _timeout(timeout: float | httpx.Timeout | None) -> httpx.Timeout:
    if isinstance(timeout, httpx.Timeout):
        return timeout
    return httpx.Timeout(timeout, connect=min(timeout, 10.0) if timeout else None)


class _Options:
    def __init__(self, url: str, api_key: str | None, timeout: float | httpx.Timeout | None,
                 retries: int | Retries, headers: dict[str, str] | None):
        self.url = url.rstrip("/")
        self.retries = retries if isinstance(retries, Retries) else Retries(total=int(retries))
        self.headers = _headers(api_key, headers)
        self.timeout = _timeout(timeout)


class Client:
    """A synchronous client of one FCL3 service.

    ``url``: the service's base URL; ``api_key``: sent as ``Authorization: Bearer``;
    ``timeout``: seconds to wait for each answer (and at most 10 to connect), or an
    :class:`httpx.Timeout`; a request that timed out is retried when that is safe, then raises
    :class:`TimedOut`; ``retries``: how many
    times a request is retried when that is safe (or a :class:`Retries`); ``transport``: an
    httpx transport (tests); ``trust_env``: use the proxies and certificates of the environment
    (``HTTPS_PROXY``, ``NO_PROXY``, ...). Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, url: str = DEFAULT_URL, api_key: str | None = None, *, timeout: float | httpx.Timeout | None = 60.0,
                 retries: int | Retries = 5, headers: dict[str, str] | None = None,
                 transport: httpx.BaseTransport | None = None, trust_env: bool = True):
        self._o = _Options(url, api_key, timeout, retries, headers)
        self._http = httpx.Client(base_url=self._o.url, headers=self._o.headers, timeout=self._o.timeout,
                                  transport=transport, trust_env=trust_env)

    @property
    def url(self) -> str:
        return self._o.url

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _run(self, call: _Call[T]) -> T:
        return self._send(call)[0]

    def _send(self, call: _Call[T]) -> tuple[T, int]:
        attempt = 0
        while True:
            try:
                response = self._http.request(call.method, call.path, params=call.params, content=call.content,
                                              headers=call.headers)
            except httpx.TransportError as exc:
                wait = _wait_after_error(call, self._o.retries, attempt, exc)
                if wait is None:
                    raise _unreachable(call, self._http.base_url, exc, attempt + 1, self._o.timeout) from exc
            else:
                wait = _wait_after_response(call, self._o.retries, attempt, response)
                if wait is None:
                    return _finish(call, response, attempt), attempt + 1
            time.sleep(wait)
            attempt += 1

    # --- models ----------------------------------------------------------------------
    def create_model(self, name: str, kind: str, *, estimator: str = "FCL3", params: dict | None = None,
                     d: int | None = None) -> ModelOut:
        """Create the model ``name`` (``kind``: ``regression`` or ``classification``): :class:`Conflict`
        if the name is taken. The body is checked with :class:`fcl3.schemas.ModelCreate` first (a
        bad name or kind raises pydantic's ``ValidationError``, a ``ValueError``, before sending)."""
        return self._run(_create(name, kind, estimator, params, d))

    def fork_model(self, name: str, source: str, version: int | None = None) -> ModelOut:
        """Create ``name`` as the model ``source`` was at ``version`` (default: its current one)."""
        return self._run(_fork(name, source, version))

    def list_models(self, offset: int = 0, limit: int = 100) -> ModelList:
        """One page of the models, by name."""
        return self._run(_get("/models", _typed(ModelList), {"offset": offset, "limit": limit}))

    def iter_models(self, page: int = 100) -> Iterator[ModelOut]:
        """Every model, by name (paginated)."""
        offset = 0
        while True:
            got = self.list_models(offset, page)
            yield from got.models
            offset += got.count
            if got.count == 0 or offset >= got.total:
                return

    def get_model(self, name: str) -> ModelOut:
        return self._run(_get(_model_path(name), _typed(ModelOut)))

    def delete_model(self, name: str) -> None:
        """Delete the model with its tasks and batches (404 if unknown)."""
        self._run(_Call("DELETE", _model_path(name), lambda r: None, replay_safe=True, missing_ok_on_retry=True))

    def export_model(self, name: str, path: str | os.PathLike) -> int:
        """Write the model as one ``.npz`` file to ``path``; returns the version exported."""
        return self._run(_get(f"{_model_path(name)}/state", _write_export(path)))

    def import_model(self, name: str, path: str | os.PathLike) -> ModelOut:
        """Create the model ``name`` from a file written by :meth:`export_model`."""
        return self._run(_import(name, path))

    # --- one model ------------------------------------------------------------------
    def learn(self, model: str, task_id: str, X: Any, y: Any, *, idempotency_key: str | None = None) -> UpdateOut:
        """Learn one labelled batch of ``task_id``; answers once it is committed. Sent with
        ``idempotency_key`` (default: a new UUID), so that no retry learns it twice."""
        return self.learn_batch(model, task_id, X, y, idempotency_key=idempotency_key).update

    def learn_batch(self, model: str, task_id: str, X: Any, y: Any, *,
                    idempotency_key: str | None = None) -> BatchResult:
        """:meth:`learn`, with whether the answer was a replay and how many attempts it took."""
        key = idempotency_key or str(uuid.uuid4())
        (update, replayed), attempts = self._send(_learn(model, task_id, X, y, key))
        return BatchResult(update, replayed, key, attempts)

    def predict(self, model: str, task_id: str, X: Any, *, min_version: int | None = None) -> PredictOut:
        """Predictions for the rows ``X`` of a learned task (``min_version``: from that model
        version or a later one, else 409)."""
        return self._run(_predict(model, task_id, X, min_version))

    def tasks(self, model: str, offset: int = 0, limit: int = 1000) -> TaskList:
        """One page of the model's tasks, oldest first."""
        return self._run(_get(f"{_model_path(model)}/tasks", _typed(TaskList), {"offset": offset, "limit": limit}))

    def task(self, model: str, task_id: str) -> TaskOut:
        return self._run(_get(f"{_model_path(model)}/tasks/{_seg(task_id)}", _typed(TaskOut)))

    def add_evaluation(self, model: str, task_id: str, X: Any, y: Any) -> EvaluationRowsOut:
        """Add the rows to the task's held-out evaluation set: never learned; the task need not
        be learned yet. The service rescores sets after each committed update: the updated
        task's set and the ``EVALUATION_RESCORE`` (default 8) other sets whose scores are oldest,
        so a set's score may lag behind the current version; when an update learns a new task,
        every learned set is also scored for the accuracy matrix's new row (in the background,
        unless ``EVALUATION_MATRIX=false``). Not idempotent (the service takes no key): a
        connection lost after sending is not resent, it raises :class:`ConnectionFailed`."""
        return self._run(_Call("POST", _evaluation_path(model, task_id), _typed(EvaluationRowsOut),
                               content=_json({"X": _rows(X), "y": _values(y)}),
                               headers={"Content-Type": "application/json"}))

    def evaluation(self, model: str, limit: int | None = None) -> EvaluationOut:
        """Each task's score on its evaluation rows beside its baseline, the accuracy matrix,
        the transfer figures, and the prequential series (its last ``limit`` versions)."""
        return self._run(_get(f"{_model_path(model)}/evaluation", _typed(EvaluationOut), _limit(limit)))

    def events(self, model: str, *, last_event_id: str | int | None = None, reconnect: bool = True) -> Iterator[Event]:
        """The model's events as they happen (Server-Sent Events), from ``last_event_id`` (a
        version) on. A dropped stream is resumed from the last event seen (``Last-Event-ID``)
        when ``reconnect``. Stop by leaving the loop (``break``) or closing the iterator."""
        parser = _SSEParser()
        parser.last_id = None if last_event_id is None else str(last_event_id)
        attempt = 0
        path = f"{_model_path(model)}/events"
        timeout = httpx.Timeout(self._o.timeout.connect, read=None, write=self._o.timeout.write, pool=None)
        while True:
            last = parser.last_id
            headers = {"Accept": "text/event-stream", **({"Last-Event-ID": last} if last is not None else {})}
            try:
                with self._http.stream("GET", path, headers=headers, timeout=timeout) as r:
                    if r.status_code >= 400:
                        r.read()
                        wait = _wait_after_response(_get(path, _parsed_json), self._o.retries, attempt, r)
                        if wait is None:
                            raise _error(r)
                    else:
                        attempt = 0
                        parser.restart()
                        for line in r.iter_lines():
                            ev = parser.feed(line)
                            if ev is not None:
                                yield ev
                        if not reconnect:
                            return
                        wait = (parser.retry_ms or 1000) / 1000
            except httpx.TransportError as exc:
                wait = _wait_after_error(_get(path, _parsed_json), self._o.retries, attempt, exc) if reconnect else None
                if wait is None:
                    raise _unreachable(_get(path, _parsed_json), self._http.base_url, exc, attempt + 1, timeout) from exc
            time.sleep(wait)
            attempt += 1

    # --- service ----------------------------------------------------------------------
    def healthz(self) -> dict:
        """``GET /healthz``, liveness: ``{"status": "ok"}`` as long as the process answers
        (touches neither the database nor the lock)."""
        return self._run(_healthz())

    def ready(self) -> dict:
        """``GET /readyz``, readiness: ``{"status": "ready", "database": "ok", "schema": "ok",
        "lock": "ok (...)"}``. Not ready (503, retried like any 503): :class:`Unavailable`
        whose ``detail`` is the service's dict of checks, saying what is missing."""
        return self._run(_ready())

    def health(self) -> dict:
        """:meth:`ready` (the older name)."""
        return self.ready()

    def metrics(self) -> str:
        """``GET /metrics``: the service's Prometheus metrics, as text (exposition format)."""
        return self._run(_metrics())


class AsyncClient:
    """The asynchronous twin of :class:`Client` (the same methods, awaited; :meth:`events` is an
    async iterator). Use ``async with``, or ``await aclose()``."""

    def __init__(self, url: str = DEFAULT_URL, api_key: str | None = None, *, timeout: float | httpx.Timeout | None = 60.0,
                 retries: int | Retries = 5, headers: dict[str, str] | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, trust_env: bool = True):
        self._o = _Options(url, api_key, timeout, retries, headers)
        self._http = httpx.AsyncClient(base_url=self._o.url, headers=self._o.headers, timeout=self._o.timeout,
                                       transport=transport, trust_env=trust_env)

    @property
    def url(self) -> str:
        return self._o.url

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def _run(self, call: _Call[T]) -> T:
        return (await self._send(call))[0]

    async def _send(self, call: _Call[T]) -> tuple[T, int]:
        attempt = 0
        while True:
            try:
                response = await self._http.request(call.method, call.path, params=call.params, content=call.content,
                                                    headers=call.headers)
            except httpx.TransportError as exc:
                wait = _wait_after_error(call, self._o.retries, attempt, exc)
                if wait is None:
                    raise _unreachable(call, self._http.base_url, exc, attempt + 1, self._o.timeout) from exc
            else:
                wait = _wait_after_response(call, self._o.retries, attempt, response)
                if wait is None:
                    return _finish(call, response, attempt), attempt + 1
            await asyncio.sleep(wait)
            attempt += 1

    async def create_model(self, name: str, kind: str, *, estimator: str = "FCL3", params: dict | None = None,
                           d: int | None = None) -> ModelOut:
        return await self._run(_create(name, kind, estimator, params, d))

    async def fork_model(self, name: str, source: str, version: int | None = None) -> ModelOut:
        return await self._run(_fork(name, source, version))

    async def list_models(self, offset: int = 0, limit: int = 100) -> ModelList:
        return await self._run(_get("/models", _typed(ModelList), {"offset": offset, "limit": limit}))

    async def iter_models(self, page: int = 100) -> AsyncIterator[ModelOut]:
        offset = 0
        while True:
            got = await self.list_models(offset, page)
            for m in got.models:
                yield m
            offset += got.count
            if got.count == 0 or offset >= got.total:
                return

    async def get_model(self, name: str) -> ModelOut:
        return await self._run(_get(_model_path(name), _typed(ModelOut)))

    async def delete_model(self, name: str) -> None:
        await self._run(_Call("DELETE", _model_path(name), lambda r: None, replay_safe=True, missing_ok_on_retry=True))

    async def export_model(self, name: str, path: str | os.PathLike) -> int:
        return await self._run(_get(f"{_model_path(name)}/state", _write_export(path)))

    async def import_model(self, name: str, path: str | os.PathLike) -> ModelOut:
        return await self._run(_import(name, path))

    async def learn(self, model: str, task_id: str, X: Any, y: Any, *, idempotency_key: str | None = None) -> UpdateOut:
        return (await self.learn_batch(model, task_id, X, y, idempotency_key=idempotency_key)).update

    async def learn_batch(self, model: str, task_id: str, X: Any, y: Any, *,
                          idempotency_key: str | None = None) -> BatchResult:
        key = idempotency_key or str(uuid.uuid4())
        (update, replayed), attempts = await self._send(_learn(model, task_id, X, y, key))
        return BatchResult(update, replayed, key, attempts)

    async def predict(self, model: str, task_id: str, X: Any, *, min_version: int | None = None) -> PredictOut:
        return await self._run(_predict(model, task_id, X, min_version))

    async def tasks(self, model: str, offset: int = 0, limit: int = 1000) -> TaskList:
        return await self._run(_get(f"{_model_path(model)}/tasks", _typed(TaskList), {"offset": offset, "limit": limit}))

    async def task(self, model: str, task_id: str) -> TaskOut:
        return await self._run(_get(f"{_model_path(model)}/tasks/{_seg(task_id)}", _typed(TaskOut)))

    async def add_evaluation(self, model: str, task_id: str, X: Any, y: Any) -> EvaluationRowsOut:
        return await self._run(_Call("POST", _evaluation_path(model, task_id), _typed(EvaluationRowsOut),
                                     content=_json({"X": _rows(X), "y": _values(y)}),
                                     headers={"Content-Type": "application/json"}))

    async def evaluation(self, model: str, limit: int | None = None) -> EvaluationOut:
        return await self._run(_get(f"{_model_path(model)}/evaluation", _typed(EvaluationOut), _limit(limit)))

    async def events(self, model: str, *, last_event_id: str | int | None = None,
                     reconnect: bool = True) -> AsyncIterator[Event]:
        parser = _SSEParser()
        parser.last_id = None if last_event_id is None else str(last_event_id)
        attempt = 0
        path = f"{_model_path(model)}/events"
        probe = _get(path, _parsed_json)
        timeout = httpx.Timeout(self._o.timeout.connect, read=None, write=self._o.timeout.write, pool=None)
        while True:
            last = parser.last_id
            headers = {"Accept": "text/event-stream", **({"Last-Event-ID": last} if last is not None else {})}
            try:
                async with self._http.stream("GET", path, headers=headers, timeout=timeout) as r:
                    if r.status_code >= 400:
                        await r.aread()
                        wait = _wait_after_response(probe, self._o.retries, attempt, r)
                        if wait is None:
                            raise _error(r)
                    else:
                        attempt = 0
                        parser.restart()
                        async for line in r.aiter_lines():
                            ev = parser.feed(line)
                            if ev is not None:
                                yield ev
                        if not reconnect:
                            return
                        wait = (parser.retry_ms or 1000) / 1000
            except httpx.TransportError as exc:
                wait = _wait_after_error(probe, self._o.retries, attempt, exc) if reconnect else None
                if wait is None:
                    raise _unreachable(probe, self._http.base_url, exc, attempt + 1, timeout) from exc
            await asyncio.sleep(wait)
            attempt += 1

    async def healthz(self) -> dict:
        return await self._run(_healthz())

    async def ready(self) -> dict:
        return await self._run(_ready())

    async def health(self) -> dict:
        return await self.ready()

    async def metrics(self) -> str:
        return await self._run(_metrics())
