"""The model's event stream as the client reads it: :class:`Event`, and :class:`EventStream`,
what a reader keeps across reconnections (the ``Last-Event-ID`` to resume from, the server's
``retry``). The Server-Sent Events framing itself is httpx-sse's."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import ServerSentEvent
from pydantic import BaseModel, ValidationError

from ._calls import Call, model_path
from .schemas import EvaluationEvent, ResetEvent, UpdateEvent

__all__ = ["Event", "EventStream"]

#: The schema of each event's ``data`` (by ``event:``); an event not listed keeps its JSON.
_EVENT_SCHEMAS: dict[str, type[BaseModel]] = {"update": UpdateEvent, "evaluation": EvaluationEvent, "reset": ResetEvent}


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


def _data(event: str, text: str) -> Any:
    """The event's data: its schema's object when it has one and fits, else the JSON (or the text)."""
    try:
        data = json.loads(text)
    except ValueError:
        return text
    model = _EVENT_SCHEMAS.get(event)
    if model is not None and isinstance(data, dict):
        try:
            return model.model_validate(data)
        except ValidationError:
            pass  # a newer service's payload: keep the JSON
    return data


class EventStream:
    """One model's event stream over any number of connections: the request to (re)send, the
    last event id seen (sent as ``Last-Event-ID``, so the server resumes after it) and the
    server's reconnection delay."""

    def __init__(self, model: str, last_event_id: str | int | None):
        self.call: Call[None] = Call("GET", f"{model_path(model)}/events", lambda r: None, replay_safe=True)
        self.last_id = None if last_event_id is None else str(last_event_id)
        self.retry_ms: int | None = None

    def headers(self) -> dict[str, str]:
        return {} if self.last_id is None else {"Last-Event-ID": self.last_id}

    @staticmethod
    def timeout(timeout: httpx.Timeout) -> httpx.Timeout:
        """The client's timeout without a read limit: a stream waits for events as long as it is open."""
        return httpx.Timeout(timeout.connect, read=None, write=timeout.write, pool=None)

    def reconnect_delay(self) -> float:
        """Seconds to wait after the server closed the stream: its ``retry``, else 1 s."""
        return (self.retry_ms or 1000) / 1000

    def decode(self, sse: ServerSentEvent) -> Event | None:
        """The :class:`Event` of one received Server-Sent Event, or None for one that carries no
        data (the standard does not dispatch those: a ``retry`` or ``id`` alone, a keep-alive)."""
        if sse.retry is not None and sse.retry >= 0:
            self.retry_ms = sse.retry
        if sse.id:
            self.last_id = sse.id
        if not sse.data:
            return None
        return Event(self.last_id, sse.event, _data(sse.event, sse.data))
