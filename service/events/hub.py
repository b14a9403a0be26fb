"""The event streams of one process: who to wake up when a model may have changed
(:class:`Hub`, woken by this process's commits and by the version watch it subscribes to), and
how many streams are open per key (:class:`StreamSlots`, for ``MAX_EVENT_STREAMS_PER_KEY``).
With nobody listening a wake-up is a dictionary look-up."""

from __future__ import annotations

import asyncio
import threading


class StreamSlot:
    """One open stream's place in its key's count; :meth:`release` frees it (once)."""

    def __init__(self, slots: StreamSlots, key: str):
        self._slots, self.key = slots, key
        self._released = False

    def release(self) -> None:
        self._slots._release(self)


class StreamSlots:
    """The open event streams of one process, counted per key (an API key's digest, or a
    client address when the API is open)."""

    def __init__(self) -> None:
        self._open: dict[str, int] = {}
        self._lock = threading.Lock()

    def claim(self, key: str, cap: int) -> StreamSlot | None:
        """A slot for one more stream of ``key``; ``None`` when ``cap`` of them are open."""
        with self._lock:
            n = self._open.get(key, 0)
            if n >= cap:
                return None
            self._open[key] = n + 1
        return StreamSlot(self, key)

    def _release(self, slot: StreamSlot) -> None:
        with self._lock:
            if slot._released:
                return
            slot._released = True
            n = self._open.get(slot.key, 0) - 1
            if n > 0:
                self._open[slot.key] = n
            else:
                self._open.pop(slot.key, None)

    def count(self, key: str | None = None) -> int:
        """Streams open for ``key`` (``None``: for every key)."""
        with self._lock:
            return sum(self._open.values()) if key is None else self._open.get(key, 0)


class Hub:
    """The streams of one process, by model name: who to wake up when a model may have changed
    (and :attr:`slots`, how many are open per key)."""

    def __init__(self) -> None:
        self._subs: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self._lock = threading.Lock()
        self.closed = False
        self.slots = StreamSlots()

    def subscribe(self, name: str) -> tuple[asyncio.AbstractEventLoop, asyncio.Event]:
        sub = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._subs.setdefault(name, set()).add(sub)
        return sub

    def unsubscribe(self, name: str, sub: tuple[asyncio.AbstractEventLoop, asyncio.Event]) -> None:
        with self._lock:
            subs = self._subs.get(name)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subs[name]

    def wake(self, name: str) -> None:
        """From any thread: the model ``name`` may have changed."""
        with self._lock:
            subs = list(self._subs.get(name, ()))
        for loop, event in subs:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop is closed: its stream is gone
                pass

    def changed(self, name: str | None) -> None:
        """A version watch's subscriber (:meth:`service.store.watch.NoWatch.subscribe`): wake the
        streams of ``name``; ``None`` (the watch closed) ends them all."""
        if name is None:
            self.close()
        else:
            self.wake(name)

    def close(self) -> None:
        """End every stream (at shutdown)."""
        self.closed = True
        with self._lock:
            names = list(self._subs)
        for name in names:
            self.wake(name)
