"""The learner's tasks: an immutable mapping from task id to record, in the order tasks were
first learned, whose update returns a new mapping without copying every task.

Learning never mutates the tasks it has: an update builds the new state beside the old one and
replaces it whole (so a failed update leaves the model as it was, and a ``copy()`` learning in
the service's writer shares everything with the model still serving predictions). With a plain
``dict`` that meant copying every task at every update (2.5-5 ms at 100,000 tasks). A
:class:`TaskMap` is a shared *base* ``dict`` and a small *overlay* ``dict`` of the entries set
since; an update copies the overlay only, and the overlay is folded into a new base once it
holds more than ``64 + sqrt(n)`` entries: ``O(sqrt n)`` per update on average, the fold's
``O(n)`` once every ``sqrt(n)`` updates. Neither dict is mutated once a map holds it. (The
engine depends on numpy and scipy alone, hence this and not a library's persistent map.)
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

V = TypeVar("V")

#: The overlay is folded into the base when it holds more than this plus ``sqrt(len(base))``.
MIN_OVERLAY = 64


class TaskMap(Mapping[str, V], Generic[V]):
    """An immutable ``{task id: value}`` in first-insertion order (a ``dict``'s order: a new key
    goes last, a key set again keeps its place); :meth:`set` returns a new map."""

    __slots__ = ("_base", "_overlay", "_added", "_base_keys")

    def __init__(self, items: Iterable[tuple[str, V]] | Mapping[str, V] = ()) -> None:
        self._base: dict[str, V] = dict(items)
        self._overlay: dict[str, V] = {}
        self._added = 0  # overlay keys the base does not hold
        self._base_keys: list[str] | None = None  # the base's keys in order, listed on demand

    @classmethod
    def _of(cls, base: dict[str, V], overlay: dict[str, V], added: int) -> "TaskMap[V]":
        new = cls.__new__(cls)
        new._base, new._overlay, new._added = base, overlay, added
        new._base_keys = None
        return new

    def set(self, key: str, value: V) -> "TaskMap[V]":
        """A new map with ``key`` bound to ``value``; this one is unchanged."""
        overlay = dict(self._overlay)
        added = self._added + (key not in overlay and key not in self._base)
        overlay[key] = value
        if len(overlay) > MIN_OVERLAY + math.isqrt(len(self._base)):
            base = dict(self._base)
            base.update(overlay)  # known keys keep their place, new ones follow in their order
            return TaskMap._of(base, {}, 0)
        new = TaskMap._of(self._base, overlay, added)
        new._base_keys = self._base_keys  # the same base: its list, never mutated, is shared
        return new

    def key_at(self, index: int) -> str:
        """The key in position ``index`` of the order (``0 <= index < len(self)``): ``O(1)`` in
        the base, whose keys are listed once per base (``O(n)``, as the fold that made it),
        ``O(sqrt n)`` among the keys the overlay adds."""
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} tasks")
        if index < len(self._base):
            if self._base_keys is None:
                self._base_keys = list(self._base)
            return self._base_keys[index]
        added = (k for k in self._overlay if k not in self._base)
        return next(k for i, k in enumerate(added) if i == index - len(self._base))

    def __getitem__(self, key: str) -> V:
        overlay = self._overlay
        return overlay[key] if key in overlay else self._base[key]

    def __contains__(self, key: object) -> bool:
        return key in self._overlay or key in self._base

    def __len__(self) -> int:
        return len(self._base) + self._added

    def __iter__(self) -> Iterator[str]:
        yield from self._base
        yield from (k for k in self._overlay if k not in self._base)

    def __repr__(self) -> str:
        return f"TaskMap({dict(self.items())!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (TaskMap, (list(self.items()),))
