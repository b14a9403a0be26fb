"""A stored model's history: its batches and take-backs in version order, and the model they
rebuild by replay (a fork, :func:`service.models.lifecycle.fork_model`; a take-back,
:mod:`service.take_back`).

Every model version ``1..v`` is written by exactly one of: a batch (a row of ``batches``) or a
take-back (a row of ``take_backs``, which marks the batch it removed with its own version,
``batches.taken_back``). The model at version ``v`` is then, bit for bit, an unfitted learner of
the model's stored settings that learned, in version order, every batch of version ``<= v`` not
taken back by a take-back of version ``<= v``, each with its stream-level refits deferred if
they were (``batches.refits_deferred``): that is how forks are rebuilt, and how a take-back
is defined (docs/design.md, "Taking a batch back"). A model whose history has a hole (an
imported model keeps none of the batches it learned before its export) cannot be rebuilt.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import Engine, select

import core
from service.models.learners import ModelConfigError, make_learner
from service.store.results import learner_summary, representatives, result_json
from service.store.tables import batches_t, take_backs_t


@dataclass(frozen=True)
class StoredBatch:
    """One row of ``batches``: the version it produced, its task and rows, the take-back that
    removed it (None: learned), where it came from (``labels``: labels that arrived later) and
    whether it was learned with the stream-level refits deferred (a group commit's)."""

    version: int
    task_id: str
    X: np.ndarray
    y: np.ndarray
    taken_back: int | None = None
    source: str | None = None
    refits_deferred: bool = False

    def row(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "version": self.version,
            "X": self.X,
            "y": self.y,
            "taken_back": self.taken_back,
            "source": self.source,
            "refits_deferred": self.refits_deferred,
        }


@dataclass(frozen=True)
class History:
    """Every stored batch (version order) and take-back (its version -> the batch it removed)."""

    batches: list[StoredBatch]
    take_backs: dict[int, dict[str, Any]] = field(default_factory=dict)

    def batch(self, version: int) -> StoredBatch | None:
        return next((b for b in self.batches if b.version == version), None)

    def missing(self, upto: int, after: int = 0) -> list[int]:
        """The versions ``after + 1..upto`` written by neither a stored batch nor a take-back."""
        have = {b.version for b in self.batches} | set(self.take_backs)
        return [v for v in range(after + 1, upto + 1) if v not in have]

    def learned(self, upto: int, without: int | None = None) -> list[StoredBatch]:
        """The batches the model at version ``upto`` has learned (not taken back by a take-back
        of version ``<= upto``), in version order, less the batch ``without``."""
        return [
            b
            for b in self.batches
            if b.version <= upto and b.version != without and (b.taken_back is None or b.taken_back > upto)
        ]

    def upto(self, version: int) -> History:
        """The history as it stood at ``version`` (what a fork at ``version`` copies)."""
        batches = [
            dataclasses.replace(
                b, taken_back=b.taken_back if b.taken_back is not None and b.taken_back <= version else None
            )
            for b in self.batches
            if b.version <= version
        ]
        return History(batches, {v: t for v, t in self.take_backs.items() if v <= version})


def read_take_backs(engine: Engine, name: str) -> dict[int, dict[str, Any]]:
    """The model's take-backs: their version -> their row."""
    with engine.connect() as conn:
        return {
            int(r.version): dict(r._mapping)
            for r in conn.execute(
                select(take_backs_t).where(take_backs_t.c.model_name == name).order_by(take_backs_t.c.version)
            )
        }


def read_history(engine: Engine, name: str, after: int = 0) -> History:
    """The stored history of the model ``name`` (one read of its batches and take-backs); with
    ``after``, only its batches of later versions (a replay from a checkpoint at ``after``)."""
    with engine.connect() as conn:
        batches = [
            StoredBatch(int(r.version), r.task_id, r.X, r.y, r.taken_back, r.source, bool(r.refits_deferred))
            for r in conn.execute(
                select(batches_t)
                .where(batches_t.c.model_name == name, batches_t.c.version > after)
                .order_by(batches_t.c.version)
            )
        ]
        take_backs = {
            int(r.version): dict(r._mapping)
            for r in conn.execute(
                select(take_backs_t).where(take_backs_t.c.model_name == name).order_by(take_backs_t.c.version)
            )
        }
    return History(batches, take_backs)


def ranges(v: list[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1..3, 7"``."""
    out, i = [], 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[j + 1] == v[j] + 1:
            j += 1
        out.append(str(v[i]) if i == j else f"{v[i]}..{v[j]}")
        i = j + 1
    return ", ".join(out)


@dataclass
class Rebuilt:
    """A model rebuilt by replay: its learner, summary (representatives) and each task's
    counters (``version`` of the batch that last touched it, ``n_batches``, ``last_update``)."""

    learner: core.LifelongLearner
    summary: dict[str, Any]
    tasks: dict[str, dict[str, Any]]


def replay(settings: dict[str, Any], batches: list[StoredBatch], refused: str, start: Rebuilt | None = None) -> Rebuilt:
    """An unfitted learner of ``settings`` (or ``start``, a restored checkpoint, which it then
    owns) that learned ``batches`` in their order, each as it was learned (its refits deferred
    or not). :class:`core.InputError` (422), its message starting with ``refused``, when the
    settings or a batch are refused by the engine now."""
    if start is not None:
        learner = start.learner
        summary: dict[str, Any] = dict(start.summary)
        tasks: dict[str, dict[str, Any]] = {t: dict(c) for t, c in start.tasks.items()}
        return _learn(learner, summary, tasks, batches, refused)
    try:
        learner = make_learner(settings)
    except ModelConfigError as exc:  # stored before the parameter ranges existed
        why = str(exc).replace("FCL3_PARAMS", "params")
        raise core.InputError(
            f"{refused}its stored settings are outside the ranges a model may have now ({why}), "
            "so it cannot be rebuilt from them"
        ) from None
    return _learn(learner, learner_summary(learner), {}, batches, refused)


def _learn(
    learner: core.LifelongLearner,
    summary: dict[str, Any],
    tasks: dict[str, dict[str, Any]],
    batches: list[StoredBatch],
    refused: str,
) -> Rebuilt:
    for b in batches:
        try:
            r = learner.learn(b.task_id, b.X, b.y, defer_refits=b.refits_deferred)
        except core.InputError as exc:
            raise core.InputError(
                f"{refused}replaying its batch {b.version} (task {b.task_id!r}) is refused now: {exc}"
            ) from None
        summary = {
            "representatives": representatives(learner, summary.get("representatives", []), r),
            "n_representatives": int(r.n_representatives),
        }
        t = tasks.setdefault(b.task_id, {"n_batches": 0})
        t.update(version=b.version, n_batches=t["n_batches"] + 1, last_update=result_json(r))
    return Rebuilt(learner, summary, tasks)
