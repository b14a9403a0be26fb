"""One batch learned on a private copy of the served learner, nothing stored: the engine's
update, the batch's prequential score (test, then train), the model row's summary after it and
the update's answer, built once (:class:`service.store.prepared.Prepared`, which the commit
stores: :meth:`service.store.writes.ModelWriter.commit_group`)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import core
from service.evaluation.scores import prequential as score_prequential
from service.evaluation.scores import scores, served_sums
from service.store.prepared import Prepared
from service.store.reads import Snapshot
from service.store.results import UNLEARNED, representatives, result_json


def prepare(
    snap: Snapshot,
    task_id: str,
    X: Any,
    y: Any,
    served: tuple[np.ndarray, np.ndarray] | None = None,
    defer_refits: bool = False,
) -> Prepared:
    """The update of ``snap`` by the batch, as version ``snap.version + 1``. ``served``: the
    outputs the rows were served when they were predicted (labels that arrive later,
    :mod:`service.labels`), which score the batch instead of the snapshot before it.
    ``defer_refits``: the engine's (:meth:`core.LifelongLearner.learn`); stored with the batch.
    :class:`core.InputError` (a bad or numerically unusable batch): nothing happened."""
    d = (snap.info.get("settings") or {}).get("d")
    if d is not None and not snap.learner.is_fitted:
        width = np.asarray(X, dtype=object).shape
        if len(width) == 2 and width[1] != d:
            raise core.InputError(f"X has {width[1]} features per row but the model expects {d}")
    learner = snap.learner.copy()  # shares arrays, which learning replaces, never mutates
    t0 = time.perf_counter()
    result = learner.learn(task_id, X, y, defer_refits=defer_refits)
    engine_seconds = time.perf_counter() - t0
    # Test, then train: the served snapshot (not touched by learning its copy) scores the batch.
    t1 = time.perf_counter()
    if result.new_task:
        prequential = None
    elif served is not None:
        prequential = served_sums(learner.kind, task_id, y, *served)
    else:
        prequential = score_prequential(snap.learner, task_id, X, y)
    prequential_seconds = time.perf_counter() - t1
    summary = dict(snap.info.get("summary") or {})
    if summary.get(UNLEARNED):  # a level brought back by this batch is learned again
        rows = np.asarray(X, dtype=float)
        summary[UNLEARNED] = [j for j in summary[UNLEARNED] if j >= rows.shape[1] or not np.any(rows[:, j] != 0)]
    summary["representatives"] = representatives(learner, summary.get("representatives", []), result)
    summary["n_representatives"] = int(result.n_representatives)
    last_update = result_json(result)
    answer = {**last_update, "version": snap.version + 1, "prequential": scores(prequential)}
    return Prepared(
        base_version=snap.version,
        task_id=task_id,
        result=result,
        learner=learner,
        state=None,
        X=np.asarray(X, dtype=float),
        y=np.asarray(y, dtype=float),
        summary=summary,
        info=snap.info,
        last_update=last_update,
        answer=answer,
        prequential=prequential,
        engine_seconds=engine_seconds,
        prequential_seconds=prequential_seconds,
        refits_deferred=defer_refits,
    )
