# Generated from fcl3/_async/client.py by `python -m fcl3._unasync`: do not edit.
# Change the async source and run the script again (tests/client/test_unasync.py checks it).
"""The client of one FCL3 service, written once as ``AsyncClient`` in ``fcl3/_async/client.py``;
``Client`` in ``fcl3/_sync/client.py`` is generated from it by ``python -m fcl3._unasync``
(every method the same, synchronous). What is sent, how answers are read and which retries
are safe live in :mod:`fcl3._calls` and :mod:`fcl3.retries`; this file only sends."""

from __future__ import annotations

import time
from collections.abc import Iterator
from os import PathLike
from typing import Any, TypeVar

import httpx
from httpx_sse import connect_sse

from .. import _calls as calls
from .._calls import DEFAULT_URL, BatchResult, Call, Options
from ..errors import error_from, unreachable
from ..events import Event, EventStream
from ..retries import Attempts, Retries, wait_after_error, wait_after_response
from ..schemas import (
    EvaluationOut,
    EvaluationRowsOut,
    ModelList,
    ModelOut,
    PredictOut,
    TakeBackOut,
    TaskList,
    TaskOut,
    UpdateOut,
)

T = TypeVar("T")


class Client:
    """A client of one FCL3 service (``AsyncClient``: every method awaited, :meth:`events` and
    :meth:`iter_models` async iterators; ``Client``: the same, synchronous).

    ``url``: the service's base URL; ``api_key``: sent as ``Authorization: Bearer``;
    ``timeout``: seconds to wait for each answer (and at most 10 to connect), or an
    :class:`httpx.Timeout`; a request that timed out is retried when that is safe, then raises
    :class:`TimedOut`; ``retries``: how many times a request is retried when that is safe (or a
    :class:`Retries`); besides, a batch answered 409 (its key still in flight) or 503 (nothing
    applied) is retried for at least ``Retries.patience`` seconds (60), longer than what a
    crashed request leaves behind lasts (the service's ``LOCK_TTL``, 30 s by default;
    ``retries=0``: never retried); ``transport``: an httpx transport (tests); ``trust_env``: use the proxies
    and certificates of the environment (``HTTPS_PROXY``, ``NO_PROXY``, ...). Use it as a
    context manager (``with`` / ``async with``), or close it (``close()`` / ``await aclose()``).
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout | None = 60.0,
        retries: int | Retries = 5,
        headers: dict[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        trust_env: bool = True,
    ):
        self._o = Options(url, api_key, timeout, retries, headers)
        self._http = httpx.Client(
            base_url=self._o.url,
            headers=self._o.headers,
            timeout=self._o.timeout,
            transport=transport,
            trust_env=trust_env,
        )

    @property
    def url(self) -> str:
        return self._o.url

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, call: Call[T]) -> T:
        return (self._send(call))[0]

    def _send(self, call: Call[T]) -> tuple[T, int]:
        """Send ``call`` until it has its answer, retrying when that is safe: the result and the
        number of attempts."""
        attempts = Attempts(call, self._o.retries)
        while True:
            try:
                response = self._http.request(
                    call.method, call.path, params=call.params, content=call.content, headers=call.headers
                )
            except httpx.TransportError as exc:
                wait = attempts.after_error(exc)
                if wait is None:
                    raise unreachable(call, self._http.base_url, exc, attempts.made, self._o.timeout) from exc
            else:
                wait = attempts.after_response(response)
                if wait is None:
                    return calls.finish(call, response, attempts.retried), attempts.made
            time.sleep(wait)

    # --- models ----------------------------------------------------------------------
    def create_model(
        self,
        name: str,
        kind: str,
        *,
        estimator: str = "FCL3",
        params: dict[str, Any] | None = None,
        d: int | None = None,
        features: Any = None,
    ) -> ModelOut:
        """Create the model ``name`` (``kind``: ``regression`` or ``classification``): :class:`Conflict`
        if the name is taken. The body is checked with :class:`fcl3.schemas.ModelCreate` first (a
        bad name or kind raises pydantic's ``ValidationError``, a ``ValueError``, before sending).
        ``features``: a feature schema (``[{"name": "age", "type": "number"}, ...]``, or a pandas
        DataFrame of the features to infer it from: :func:`fcl3.records.infer_schema`); the model
        then takes records (docs/records.md)."""
        return self._run(calls.create_model(name, kind, estimator, params, d, features))

    def fork_model(self, name: str, source: str, version: int | None = None) -> ModelOut:
        """Create ``name`` as the model ``source`` was at ``version`` (default: its current one)."""
        return self._run(calls.fork_model(name, source, version))

    def list_models(self, offset: int = 0, limit: int = 100) -> ModelList:
        """One page of the models, by name."""
        return self._run(calls.list_models(offset, limit))

    def iter_models(self, page: int = 100) -> Iterator[ModelOut]:
        """Every model, by name (paginated)."""
        offset = 0
        while True:
            got = self.list_models(offset, page)
            for model in got.models:
                yield model
            offset += got.count
            if got.count == 0 or offset >= got.total:
                return

    def get_model(self, name: str) -> ModelOut:
        return self._run(calls.get_model(name))

    def delete_model(self, name: str) -> None:
        """Delete the model with its tasks and batches (404 if unknown)."""
        self._run(calls.delete_model(name))

    def export_model(self, name: str, path: str | PathLike[str]) -> int:
        """Write the model as one ``.npz`` file to ``path``; returns the version exported."""
        return self._run(calls.export_model(name, path))

    def import_model(self, name: str, path: str | PathLike[str]) -> ModelOut:
        """Create the model ``name`` from a file written by :meth:`export_model`."""
        return self._run(calls.import_model(name, path))

    # --- one model ------------------------------------------------------------------
    def learn(self, model: str, task_id: str, X: Any, y: Any, *, idempotency_key: str | None = None) -> UpdateOut:
        """Learn one labelled batch of ``task_id``; answers once it is committed. Sent with
        ``idempotency_key`` (default: a new UUID), so that no retry learns it twice. ``X``: rows
        of numbers, or records (a list of dicts or a pandas DataFrame, for a model with a
        feature schema)."""
        return (self.learn_batch(model, task_id, X, y, idempotency_key=idempotency_key)).update

    def learn_batch(
        self,
        model: str,
        task_id: str,
        X: Any,
        y: Any,
        *,
        idempotency_key: str | None = None,
    ) -> BatchResult:
        """:meth:`learn`, with whether the answer was a replay and how many attempts it took."""
        key = calls.new_key(idempotency_key)
        (update, replayed), attempts = self._send(calls.learn(model, task_id, X, y, key))
        return BatchResult(update, replayed, key, attempts)

    def predict(
        self, model: str, task_id: str, X: Any, *, min_version: int | None = None, remember: bool = False
    ) -> PredictOut:
        """Predictions for the rows ``X`` (numbers, or records: a list of dicts or a pandas
        DataFrame) of a learned task (``min_version``: from that model version or a later one,
        else 409). With ``remember``, the service keeps the rows for
        labels that arrive later: ``prediction_ids`` holds one id per row, for :meth:`label`
        (such a request is not resent once it may have reached the service)."""
        return self._run(calls.predict(model, task_id, X, min_version, remember))

    def label(self, model: str, pairs: Any, *, idempotency_key: str | None = None) -> UpdateOut:
        """Learn remembered predictions with their labels, as one batch of their task: ``pairs``
        is ``{prediction_id: y}`` or ``(prediction_id, y)`` pairs, every id of one task. Answers
        once committed; its ``prequential`` score is that of the predictions served. Sent with
        ``idempotency_key`` (default: a new UUID), so that no retry learns it twice. An id
        labelled already raises :class:`Conflict` (``headers["X-Model-Version"]``: the version
        that learned it), unknown ids :class:`NotFound`, expired ones :class:`APIError` with status 410."""
        return (self.label_batch(model, pairs, idempotency_key=idempotency_key)).update

    def label_batch(self, model: str, pairs: Any, *, idempotency_key: str | None = None) -> BatchResult:
        """:meth:`label`, with whether the answer was a replay and how many attempts it took."""
        key = calls.new_key(idempotency_key)
        (update, replayed), attempts = self._send(calls.label(model, pairs, key))
        return BatchResult(update, replayed, key, attempts)

    def take_back(self, model: str, version: int, *, idempotency_key: str | None = None) -> TakeBackOut:
        """Take back the batch whose update answered ``version``: the model becomes what it
        would have been without it (its other batches replayed in their order), as a new
        version. Sent with ``idempotency_key`` (default: a new UUID), so that no retry applies
        it twice. A batch taken back already raises :class:`APIError` with status 410
        (``headers["X-Model-Version"]``: the version of that take-back); a refusal (a fork's
        inherited batch, batches not stored) :class:`Conflict`; no such batch :class:`NotFound`."""
        return self._run(calls.take_back(model, version, calls.new_key(idempotency_key)))

    def tasks(self, model: str, offset: int = 0, limit: int = 1000) -> TaskList:
        """One page of the model's tasks, oldest first."""
        return self._run(calls.tasks(model, offset, limit))

    def task(self, model: str, task_id: str) -> TaskOut:
        return self._run(calls.task(model, task_id))

    def add_evaluation(self, model: str, task_id: str, X: Any, y: Any) -> EvaluationRowsOut:
        """Add the rows to the task's held-out evaluation set: never learned; the task need not
        be learned yet. The service rescores sets after each committed update: the updated
        task's set and the ``EVALUATION_RESCORE`` (default 8) other sets whose scores are oldest,
        so a set's score may lag behind the current version; when an update learns a new task,
        every learned set is also scored for the accuracy matrix's new row (in the background,
        unless ``EVALUATION_MATRIX=false``). Not idempotent (the service takes no key): a
        connection lost after sending is not resent, it raises :class:`ConnectionFailed`."""
        return self._run(calls.add_evaluation(model, task_id, X, y))

    def evaluation(
        self,
        model: str,
        limit: int | None = None,
        *,
        offset: int | None = None,
        matrix_limit: int | None = None,
        matrix_offset: int | None = None,
    ) -> EvaluationOut:
        """Each task's score on its evaluation rows beside its baseline, the accuracy matrix
        (``matrix_limit`` of its rows after ``matrix_offset``; the server's default: 25), the
        transfer figures, and the prequential series (``limit`` versions after the ``offset``
        latest)."""
        call = calls.evaluation(model, limit, offset=offset, matrix_limit=matrix_limit, matrix_offset=matrix_offset)
        return self._run(call)

    def events(
        self,
        model: str,
        *,
        last_event_id: str | int | None = None,
        reconnect: bool = True,
    ) -> Iterator[Event]:
        """The model's events as they happen (Server-Sent Events), from ``last_event_id`` (a
        version) on. A dropped stream is resumed from the last event seen (``Last-Event-ID``)
        when ``reconnect``. Stop by leaving the loop (``break``) or closing the iterator."""
        stream = EventStream(model, last_event_id)
        timeout = stream.timeout(self._o.timeout)
        attempt = 0
        while True:
            try:
                with connect_sse(
                    self._http, "GET", stream.call.path, headers=stream.headers(), timeout=timeout
                ) as source:
                    response = source.response
                    if response.status_code >= 400:
                        response.read()
                        wait = wait_after_response(stream.call, self._o.retries, attempt, response)
                        if wait is None:
                            raise error_from(response)
                    else:
                        attempt = 0
                        for sse in source.iter_sse():
                            event = stream.decode(sse)
                            if event is not None:
                                yield event
                        if not reconnect:
                            return
                        wait = stream.reconnect_delay()
            except httpx.TransportError as exc:
                wait = wait_after_error(stream.call, self._o.retries, attempt, exc) if reconnect else None
                if wait is None:
                    raise unreachable(stream.call, self._http.base_url, exc, attempt + 1, timeout) from exc
            time.sleep(wait)
            attempt += 1

    # --- service ----------------------------------------------------------------------
    def healthz(self) -> dict[str, Any]:
        """``GET /healthz``, liveness: ``{"status": "ok"}`` as long as the process answers
        (touches neither the database nor the lock)."""
        return self._run(calls.healthz())

    def ready(self) -> dict[str, Any]:
        """``GET /readyz``, readiness: ``{"status": "ready", "database": "ok", "schema": "ok",
        "lock": "ok (...)"}``. Not ready (503, retried like any 503): :class:`Unavailable`
        whose ``detail`` is the service's dict of checks, saying what is missing."""
        return self._run(calls.ready())

    def health(self) -> dict[str, Any]:
        """:meth:`ready` (the older name)."""
        return self.ready()

    def metrics(self) -> str:
        """``GET /metrics``: the service's Prometheus metrics, as text (exposition format)."""
        return self._run(calls.metrics())
