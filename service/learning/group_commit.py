"""Group commit: the batches of one model queued in this process are learned and committed
together, so that concurrent writers of one model pay for one update lock and one transaction.

The batch joins its model's queue in this process
(:class:`service.learning.queue.WriteQueue`); one waiting request at a time leads: it takes the
model's update lock, takes every batch queued by then, and under the lock refreshes to the
stored version and learns them in arrival order, each on the learner the previous one left (a
private copy each) and scored before it is learned. A batch that joins the queue while the
group is being learned joins the group (at most :data:`MAX_GROUP` in all; a label request is a
group of its own), so that under a steady stream of concurrent writers the groups grow to the
number of writers instead of splitting them into cohorts. Then the group is committed in one
transaction with one version compare-and-set
(:meth:`service.store.writes.ModelWriter.commit_group`): batch ``i`` is model version ``base + i``,
with its own batch row, answer, prequential score (against version ``base + i - 1``),
evaluation and ``Idempotency-Key`` answer, as if committed alone. A batch learned while another
is already waiting in the group is learned with the stream-level refits deferred (the
population and the family choice: :meth:`core.LifelongLearner.learn`'s ``defer_refits``), so
the group pays for one refit instead of one per batch: its last batch, learned when no other
waited, refits. The flag is stored with the batch, and a replay (a fork, a take-back) learns it
the same way, so every version stays the replay of its batches. (A group forms only under
concurrent writers, whose arrival order is the clock's anyway; a lone writer's batches are each
a group of one.) A batch refused while it is learned (bad input, its key replayed or in flight,
labels refused) is left out of the group, nothing of it applied (when it is the last, the
group's state keeps its refits deferred to the next batch); a claim taken over at the commit
makes the group commit again batch by batch. Each request is answered only after the commit of
its group. Across processes the update lock orders the groups, and the version sequence in the
database is the order every replica agrees on.

What a request does around it (its answer, its log line, the evaluation after the commit) is
:func:`service.learning.updates.learn_batch`'s.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from fcl3.records import Column
from service import metrics
from service.learning.prepare import prepare
from service.learning.queue import Queued, WriteQueue
from service.models.lifecycle import current_for_write
from service.records.vocabulary import NewColumns
from service.store.reads import Snapshot
from service.take_back.checkpoints import UpdateCheckpoints
from service.writing.idempotency import KeyTakenOver
from service.writing.locks import LockBusy

if TYPE_CHECKING:
    from service.hosting import HostedModel
    from service.store.prepared import Prepared

#: The most batches one group commits (one transaction), those that join it while it is learned
#: included: its time under the update lock stays far below ``LOCK_TTL`` and its first batch is
#: not answered much later than alone.
MAX_GROUP = 64

#: What became of a batch of a group: (its prepared update, its version, None), or (None, None, its refusal).
Outcome = tuple["Prepared | None", int | None, BaseException | None]


def submit(model: HostedModel, item: Queued) -> None:
    """Queue ``item`` and wait until it is committed or refused (then raise its error): led by
    another request of this process, or by this one when no other leads. Waiting behind
    another group counts as waiting for the update lock: a batch not yet taken into a group
    when its ``LOCK_WAIT`` is over leaves the queue with :class:`LockBusy` (503), as it would
    had it waited for the lock itself."""
    q = model.queue
    with q.cond:
        q.items.append(item)
        while not item.done and (q.leading or item.taken):
            left = item.deadline - time.perf_counter()
            if left <= 0 and not item.taken:  # waited its LOCK_WAIT behind another group: 503
                q.items.remove(item)
                raise LockBusy(model.name, item.deadline - item.t0)
            q.cond.wait(left if not item.taken else None)
        lead = not item.done
        if lead:
            q.leading = True
    if lead:
        try:
            while not item.done:  # a group holds at most MAX_GROUP: ours may be in the next one
                _lead(model, q, item)
        finally:
            with q.cond:
                q.leading = False
                q.cond.notify_all()
    if item.error is not None:
        raise item.error


def _lead(model: HostedModel, q: WriteQueue, me: Queued) -> None:
    """One group: the update lock (waiting at most what is left of ``me``'s lock wait), the
    batches queued by then and those that join while they are learned, learned and committed;
    each batch's outcome, after the release."""
    group: list[Queued] = []
    outcome: dict[Queued, Outcome] = {}
    error: BaseException | None = None
    try:
        with model.locks.hold(model.name, wait=max(me.deadline - time.perf_counter(), 0.0)), model.shared.foreground:
            acquired = time.perf_counter()
            with q.cond:
                group = q.take(MAX_GROUP)
            for item in group:
                item.acquired = acquired
            try:
                _learn_group(model, group, outcome, q)
            finally:
                for item in group:
                    item.group_size = len(group)
    except BaseException as exc:  # noqa: BLE001 - each batch without an outcome is answered with it
        error = exc
    released = time.perf_counter()
    for item in group or [me]:
        item.released = released
        prepared, version, err = outcome.get(item, (None, None, error))
        if prepared is None and err is None:
            err = RuntimeError("batch left without an outcome")  # not reached: every batch gets one
        q.finish(item, prepared, version, err)


def _learn_group(
    model: HostedModel, group: list[Queued], outcome: dict[Queued, Outcome], joins: WriteQueue | None = None
) -> None:
    """Under the update lock: learn ``group`` in order on the stored version and commit the
    batches that were learned in one transaction; ``outcome[item]`` = (prepared, version, None)
    or (None, None, the error that refused it). ``joins``: the queue whose batches that arrive
    meanwhile join ``group`` (appended to it) before its last batch is learned. An error of the
    whole group (the database, a stale version) is raised."""
    snap = current_for_write(model)
    checkpoint = UpdateCheckpoints(model.name)  # one per group: at most one checkpoint, at its last version
    ready: list[tuple[Queued, Prepared, list[Any]]] = []
    vocabulary: tuple[Column, ...] | None = None  # the columns under the lock, and the batches' new ones
    grown = False
    i = 0
    while i < len(group):
        item = group[i]
        if joins is not None and i == len(group) - 1 and len(group) < MAX_GROUP and group[0].labels is None:
            with joins.cond:
                joined = joins.take(MAX_GROUP - len(group), joining=True)
            now = time.perf_counter()
            for late in joined:
                late.acquired = now
            group += joined
        last = i == len(group) - 1
        i += 1
        try:
            if item.claim is not None:
                model.keys.verify(item.claim)  # Replayed / KeyInFlight: another request has the key
            task_id, X, y, served, records = item.task_id, item.X, item.y, None, item.records
            parts: list[Any] = [model.evaluation, checkpoint]
            if item.labels is not None:
                task_id, X, y, served, records = item.labels.load()  # LabelRefused: nothing happened
                parts.append(item.labels)
            new: list[Any] = []
            if records is not None:  # encoded over the vocabulary as it stands (TooManyColumns: this batch only)
                vocabulary = vocabulary if vocabulary is not None else model.vocabulary.refresh()
                X, new = records.encode(vocabulary)
                if item.labels is not None:
                    X = item.labels.with_rows(X)
                parts.append(NewColumns(model.name, len(vocabulary), new))
            if item.claim is not None:
                parts.append(item.claim)
            prepared = prepare(snap, task_id, X, y, served, defer_refits=not last)  # InputError: this batch only
            if item.labels is not None:
                prepared.source = "labels"
        except Exception as exc:  # noqa: BLE001 - refused: this batch only, nothing of it applied
            outcome[item] = (None, None, exc)
            continue
        if new and vocabulary is not None:
            vocabulary, grown = (*vocabulary, *new), True
        ready.append((item, prepared, parts))
        snap = Snapshot(
            snap.version + 1, prepared.learner, {**snap.info, "version": snap.version + 1, "summary": prepared.summary}
        )
    if not ready:
        return
    try:
        if len(ready) == 1:
            versions = [model.writer.commit(ready[0][1], ready[0][2])]
        else:
            versions = model.writer.commit_group([p for _, p, _ in ready], [parts for _, _, parts in ready])
        metrics.UPDATE_GROUP_BATCHES.observe(len(versions))
    except KeyTakenOver:  # one batch's key was taken over: rolled back; each batch alone, own outcome
        if len(ready) == 1:
            raise
        for item, _, _ in ready:
            try:
                _learn_group(model, [item], outcome)
            except KeyTakenOver as exc:  # taken over again: that batch only
                outcome[item] = (None, None, exc)
        return
    if grown:  # the columns the group's commit stored
        model.vocabulary.refresh()
    for (item, prepared, _), version in zip(ready, versions, strict=True):
        outcome[item] = (prepared, version, None)
