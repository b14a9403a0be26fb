"""The batches of one model waiting in one process for their group commit, in arrival order:
a data structure only (:class:`WriteQueue`, guarded by its condition). The request that leads
a group and what it does under the update lock are :mod:`service.learning.group_commit`'s."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from service.store.prepared import Prepared


@dataclass(eq=False)
class Queued:
    """One batch waiting in a :class:`WriteQueue`: what to learn, and once done, its prepared
    update and version, or the error that refused it (nothing of it applied)."""

    task_id: str
    X: Any
    y: Any
    claim: Any = None  # service.writing.idempotency.Claim of its Idempotency-Key, or None
    labels: Any = None  # service.labels.LabelBatch (the rows loaded under the lock), or None
    records: Any = None  # service.records.rows.RecordsBatch (encoded under the lock; X is None), or None
    t0: float = field(default_factory=time.perf_counter)  # when it arrived
    deadline: float = 0.0  # perf_counter time past which it no longer waits for the update lock
    taken: bool = False  # in a group under way
    done: bool = False
    acquired: float = 0.0  # when its group held the update lock
    group_size: int = 0  # batches of its group
    released: float = 0.0  # when its group released it
    prepared: Prepared | None = None
    version: int | None = None
    error: BaseException | None = None


class WriteQueue:
    """The batches of one model waiting in one process, in arrival order (group commit: the
    request that leads takes the update lock and commits what is queued in one transaction;
    :mod:`service.learning.group_commit`). Only a data structure: ``cond`` guards it."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.items: list[Queued] = []
        self.leading = False  # a request of this process is leading a group of this model

    def take(self, limit: int, joining: bool = False) -> list[Queued]:
        """The first queued batches, at most ``limit``, marked taken (call with ``cond`` held);
        ``joining``: they join a group that already holds batches. A label request is a group
        of its own: its rows are loaded under the lock and marked labelled by its commit, so
        two of them must not see the same rows pending."""
        group: list[Queued] = []
        for item in self.items:
            if len(group) >= limit or (item.labels is not None and (group or joining)):
                break
            group.append(item)
            if item.labels is not None:
                break
        self.items = self.items[len(group) :]
        for item in group:
            item.taken = True
        return group

    def finish(
        self,
        item: Queued,
        prepared: Prepared | None = None,
        version: int | None = None,
        error: BaseException | None = None,
    ) -> None:
        """Mark ``item`` done (its version, or its error) and wake its request."""
        with self.cond:
            item.prepared, item.version, item.error, item.done = prepared, version, error, True
            if item in self.items:
                self.items.remove(item)
            self.cond.notify_all()
