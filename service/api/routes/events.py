"""GET /events: a model's committed updates and evaluation changes as Server-Sent Events
(:mod:`service.events`), at most MAX_EVENT_STREAMS_PER_KEY open per API key in a process."""

from __future__ import annotations

import hashlib
import math
import weakref
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Header, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security.utils import get_authorization_scheme_param
from sse_starlette import EventSourceResponse
from starlette.types import Receive, Scope, Send

from service.api.deps import ModelDep, SettingsDep
from service.events.hub import StreamSlot
from service.events.stream import Feed, keep_alive, stream

router = APIRouter(tags=["tasks"])


def stream_key(request: Request) -> str:
    """Whose stream this is, for MAX_EVENT_STREAMS_PER_KEY: the API key presented (its
    SHA-256, the key itself is not kept), or the client's address when the API is open."""
    if request.app.state.keys.enabled:
        _, token = get_authorization_scheme_param(request.headers.get("Authorization"))
        return "key:" + hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()
    return "client:" + (request.client.host if request.client else "unknown")


class SlotStream(EventSourceResponse):
    """An event stream that frees its :class:`service.events.hub.StreamSlot` when the response
    ends, however it ends (a hang-up, a disconnect, a HEAD request, an error), or when the
    response is dropped unsent."""

    def __init__(self, slot: StreamSlot, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.slot = slot
        weakref.finalize(self, slot.release)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slot.release()


@router.get(
    "/events",
    response_class=EventSourceResponse,
    responses={
        200: {
            "description": "Server-Sent Events: `id: <version>` + `event: update`, `event: evaluation`, "
            "`event: reset`; `data:` one JSON object (UpdateEvent, EvaluationEvent, ResetEvent).",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        404: {"description": "Unknown model."},
        429: {
            "description": "MAX_EVENT_STREAMS_PER_KEY streams of this API key (of this client address when the "
            "API is open) are already open in this process: close one (Retry-After)."
        },
    },
)
async def get_events(
    request: Request,
    model: ModelDep,
    settings: SettingsDep,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            description="The last update version received: the stream replays what "
            "followed it, or sends `event: reset`.",
        ),
    ] = None,
    max_seconds: float | None = Query(
        None, gt=0, description="Close the stream after this many seconds (default: never)."
    ),
) -> EventSourceResponse:
    """One event per committed update of the model and one per change of its evaluation, live
    (from any worker or replica); reconnect with ``Last-Event-ID`` to get what was missed.
    A batch taken back (``DELETE .../batches/{version}``) is an ``update`` event of its own
    version with ``taken_back``: ``{"batch_version", "n_samples", "task_removed"}``; a batch of
    labels that arrived later has ``"source": "labels"``.
    At most MAX_EVENT_STREAMS_PER_KEY streams per API key are open at once in one process."""
    hub = model.shared.events
    cap = settings.MAX_EVENT_STREAMS_PER_KEY
    slot = hub.slots.claim(stream_key(request), cap)
    if slot is None:
        raise HTTPException(
            429,
            f"too many open event streams: this API key (this client address when the API "
            f"is open) already has {cap} open in this process (MAX_EVENT_STREAMS_PER_KEY={cap}); "
            "close one, then retry",
            headers={"Retry-After": str(max(1, math.ceil(settings.EVENTS_HEARTBEAT)))},
        )
    try:
        info = await run_in_threadpool(model.reader.model_info)  # unknown model: 404 before the stream
    except BaseException:
        slot.release()
        raise
    watch = getattr(request.app.state, "watch", None)
    feed = Feed(model.reader.engine, model.name, info["kind"])
    shutdown = anyio.Event()  # set by sse-starlette when the server is told to exit
    return SlotStream(
        slot,
        stream(feed, hub, watch, last_event_id, max_seconds, shutdown),
        ping=settings.EVENTS_HEARTBEAT,
        ping_message_factory=keep_alive,
        sep="\n",
        shutdown_event=shutdown,
        shutdown_grace_period=3.0,
    )
