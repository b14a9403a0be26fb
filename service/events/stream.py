"""``GET .../events``: a model's committed updates and evaluation changes as Server-Sent Events.

Wire format (what :mod:`fcl3.client` parses), one event per blank-line-terminated block::

    id: 42                 <- the model version (update events only)
    event: update          <- update | evaluation | reset
    data: {"version": 42, "task_id": "a", "new_task": false, ...}   <- one JSON object

plus ``: keep-alive`` comment lines every ``EVENTS_HEARTBEAT`` seconds. The wire format, the
keep-alive comments and the end of the streams when the server exits are ``sse-starlette``'s
(:class:`sse_starlette.EventSourceResponse`): :func:`stream` yields its events. Bodies are
:class:`fcl3.schemas.UpdateEvent`, ``EvaluationEvent`` and ``ResetEvent``.

Where events come from: every committed update appends a row to ``evaluation_log`` in its own
transaction (:meth:`service.evaluation.model_evaluation.ModelEvaluation.in_commit`), so the stream is read from
the database, and any worker or replica serves every update of the model. A stream wakes up
when something may have changed: a commit of its own process (:meth:`service.events.hub.Hub.wake`), a
PostgreSQL notification of another process (the version watch's ``LISTEN`` thread, which
exists anyway, calls :meth:`Hub.changed`, subscribed by the app), a change of SQLite's ``PRAGMA data_version`` (checked
twice a second, in process), or a fallback read every ``poll`` seconds. With nobody listening
there is no stream, no query and no thread: a wake-up is a dictionary look-up.

Resuming: a client that reconnects with ``Last-Event-ID: <version>`` gets every update after
that version from the log, then the live ones. When they cannot be replayed (the log does not
hold them: a fork, an import or a database upgraded from before the log; or the id is not a
version of this model: deleted and created again), it gets ``event: reset`` with the current
version, and the stream goes on from there.

Cap: at most ``MAX_EVENT_STREAMS_PER_KEY`` streams are open per API key (per client address
when the API is open) in one process (:class:`service.events.hub.StreamSlots`); one more is answered 429 with
``Retry-After``. A stream's slot is freed when its response ends, however it ends: the
client hangs up or disconnects, ``max_seconds`` pass, the model is deleted, the server exits.

Shutdown: uvicorn waits for open responses before it runs the app's shutdown; sse-starlette
sees the server told to exit and sets the stream's shutdown event, on which :func:`stream`
ends its body within a second (a stream also ends when the watch closes: :meth:`Hub.close`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
from sqlalchemy import Engine, func, select
from sse_starlette import ServerSentEvent

from service.evaluation.scores import figures_of
from service.events.hub import Hub
from service.store.tables import log_t, models_t, sets_t, state_t
from service.store.watch import Watch

#: Log rows read per query while catching up.
PAGE = 500


def sse(event: str, data: dict[str, Any], id: int | None = None) -> ServerSentEvent:
    return ServerSentEvent(
        data=json.dumps(data, separators=(",", ":"), allow_nan=False),
        event=event,
        id=None if id is None else str(id),
        sep="\n",
    )


def keep_alive() -> ServerSentEvent:
    """The comment sent every ``EVENTS_HEARTBEAT`` seconds (sse-starlette's ping)."""
    return ServerSentEvent(comment="keep-alive", sep="\n")


class Feed:
    """Reads of one model's events (blocking: run them in the thread pool)."""

    def __init__(self, engine: Engine, name: str, kind: str):
        self.engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        self.name, self.kind = name, kind

    def position(self) -> tuple[int | None, tuple[int, int]]:
        """(model version or None when the model is gone, (evaluation sets' revision, accuracy
        matrix rows))."""
        with self.engine.connect() as conn:
            version = conn.execute(select(models_t.c.version).where(models_t.c.name == self.name)).scalar()
            row = conn.execute(
                select(state_t.c.revision, state_t.c.matrix).where(state_t.c.model_name == self.name)
            ).first()
        return version, (int(row.revision), int((row.matrix or {}).get("rows", 0))) if row else (0, 0)

    def after(self, version: int) -> Sequence[Any]:
        with self.engine.connect() as conn:
            return conn.execute(
                select(log_t.c.version, log_t.c.event, log_t.c.evaluation)
                .where(log_t.c.model_name == self.name, log_t.c.version > version)
                .order_by(log_t.c.version)
                .limit(PAGE)
            ).all()

    def evaluation_event(self, version: int, reason: str) -> dict[str, Any]:
        """The evaluation event of newly posted evaluation rows (``reason="rows"``) or of a new
        row of the accuracy matrix (``"matrix"``)."""
        with self.engine.connect() as conn:
            summary = conn.execute(select(state_t.c.matrix).where(state_t.c.model_name == self.name)).scalar() or {}
            n = conn.execute(select(func.count()).select_from(sets_t).where(sets_t.c.model_name == self.name)).scalar()
            task = (
                summary.get("task_id")
                if reason == "matrix"
                else conn.execute(
                    select(sets_t.c.task_id)
                    .where(sets_t.c.model_name == self.name)
                    .order_by(sets_t.c.revision.desc())
                    .limit(1)
                ).scalar()
            )
        return {"version": version, "reason": reason, "task_id": task, "n_tasks": int(n or 0), **figures_of(summary)}


async def stream(
    feed: Feed,
    hub: Hub,
    watch: Watch | None,
    last_event_id: str | None,
    max_seconds: float | None = None,
    shutdown: anyio.Event | None = None,
) -> AsyncIterator[ServerSentEvent]:
    """The events of ``feed``'s model from ``last_event_id`` (or from now), until the client
    leaves, ``max_seconds`` pass, the model is deleted or the server shuts down (``shutdown``:
    the event sse-starlette sets then; the stream ends within a second, its body complete)."""
    from starlette.concurrency import run_in_threadpool

    start = time.monotonic()
    loop, wake = sub = hub.subscribe(feed.name)
    try:
        version, revision = await run_in_threadpool(feed.position)
        if version is None:
            yield sse("reset", {"version": None, "reason": f"model {feed.name!r} does not exist"})
            return
        last = version
        if last_event_id is not None:
            try:
                asked = int(last_event_id.strip())
            except ValueError:
                asked = None
            if asked is None or asked < 0 or asked > version:
                yield sse(
                    "reset",
                    {
                        "version": version,
                        "reason": f"Last-Event-ID {last_event_id[:40]!r} is not a "
                        f"version of model {feed.name!r} (now at {version}): re-read its state",
                    },
                )
            else:
                last = asked
        sqlite = getattr(watch, "poll", 0) and type(watch).__name__ == "SqliteWatch"
        token = watch.token(feed.name) if watch is not None else None
        check = True  # read the log now
        fallback_at = time.monotonic()
        while True:
            if check:
                fallback_at = time.monotonic()
                current, rev = await run_in_threadpool(feed.position)  # first: the rows then reach it
                if current is None:
                    yield sse("reset", {"version": None, "reason": f"model {feed.name!r} was deleted"})
                    return
                rows = await run_in_threadpool(feed.after, last) if current > last else []
                if current < last or (current > last and (not rows or rows[0].version != last + 1)):
                    yield sse(
                        "reset",
                        {
                            "version": current,
                            "reason": f"the updates after version {last} are not "
                            "stored as events (a fork, an import, or a model created again): re-read "
                            "its state",
                        },
                    )
                    last, revision = current, rev
                    continue
                for r in rows:
                    yield sse("update", r.event, id=r.version)
                    if r.evaluation:
                        yield sse("evaluation", r.evaluation)
                    last = r.version
                if len(rows) == PAGE:
                    continue  # more to catch up on
                if rev != revision:
                    for reason, before, now in (("rows", revision[0], rev[0]), ("matrix", revision[1], rev[1])):
                        if now != before:
                            yield sse("evaluation", await run_in_threadpool(feed.evaluation_event, last, reason))
                    revision = rev
                check = False
            if hub.closed or (shutdown is not None and shutdown.is_set()):
                return
            if max_seconds is not None and time.monotonic() - start >= max_seconds:
                return
            try:
                await asyncio.wait_for(wake.wait(), timeout=0.5 if sqlite else 1.0)
                check = True
            except asyncio.TimeoutError:
                pass
            wake.clear()
            new_token = watch.token(feed.name) if watch is not None else None
            if new_token is None:  # no watch (or not listening): read every second
                check = True
            elif new_token != token:
                token, check = new_token, True
            elif time.monotonic() - fallback_at >= max(getattr(watch, "poll", 1.0), 1.0) * 15:
                check = True  # a notification may be lost: read now and then anyway
    finally:
        hub.unsubscribe(feed.name, sub)
