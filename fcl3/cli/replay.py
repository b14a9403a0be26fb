"""``fcl3 replay``'s machinery: the plan of a replay (its batches and held-out rows, a pure
function of the file and the options, with one idempotency key per batch), sending it with a
progress bar (and labels that arrive later, ``--delay``), and the summary it prints."""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from ..client import APIError, Client, FCL3Error, NotFound
from .errors import command_error
from .files import Rows


@dataclass
class PlannedBatch:
    task: str
    index: int  # the index of this batch among its task's batches
    rows: list[int]  # indices into Rows
    key: str = ""


def plan_batches(
    rows: Rows, batch_size: int, order: str, seed: int, holdout: float
) -> tuple[list[PlannedBatch], dict[str, list[int]]]:
    """The batches of a replay and each task's held-out rows, a pure function of the rows and
    the options (so that a run again sends the same batches with the same keys).

    ``file``: rows in file order, a batch being a run of consecutive rows of one task (at most
    ``batch_size``). ``random``: each task's rows shuffled, cut into batches, and the batches of
    all tasks interleaved at random (each task's in order). ``holdout``: that fraction of each
    task's rows (drawn at random, at least one row left to learn) kept aside."""
    rng = random.Random(seed)
    tasks = rows.tasks
    assert tasks is not None  # a replay's file names each row's task
    by_task: dict[str, list[int]] = {}
    for i, t in enumerate(tasks):
        by_task.setdefault(t, []).append(i)
    held: dict[str, list[int]] = {}
    if holdout > 0:
        for t, idx in by_task.items():
            k = min(int(math.floor(holdout * len(idx))), len(idx) - 1)
            if k > 0:
                held[t] = sorted(rng.sample(idx, k))
    kept = {i for t in held for i in held[t]}
    batches: list[PlannedBatch] = []
    count: dict[str, int] = {}

    def add(task: str, idx: list[int]) -> None:
        batches.append(PlannedBatch(task, count.get(task, 0), idx))
        count[task] = count.get(task, 0) + 1

    if order == "file":
        run: list[int] = []
        for i, t in enumerate(tasks):
            if i in kept:
                continue
            if run and (tasks[run[0]] != t or len(run) == batch_size):
                add(tasks[run[0]], run)
                run = []
            run.append(i)
        if run:
            add(tasks[run[0]], run)
    else:
        per_task = {}
        for t, idx in by_task.items():
            idx = [i for i in idx if i not in kept]
            rng.shuffle(idx)
            per_task[t] = [idx[j : j + batch_size] for j in range(0, len(idx), batch_size)]
        slots = [t for t, bs in per_task.items() for _ in bs]
        rng.shuffle(slots)
        nxt = dict.fromkeys(per_task, 0)
        for t in slots:
            add(t, per_task[t][nxt[t]])
            nxt[t] += 1
    return batches, held


def replay_key(digest: str, model: str, task: str, index: int, what: str = "batch") -> str:
    """The Idempotency-Key of a replayed batch: the same file, model, task and batch index give
    the same key, so that a replay run again applies nothing twice (and a run with other
    options, whose batches differ, is refused with 422 instead of learning rows twice)."""
    h = hashlib.sha256(json.dumps([digest, model, task, index, what]).encode()).hexdigest()
    return f"fcl3-replay-{h[:48]}"


def deliver_labels(c: Client, model: str, pending: list[Any], now: float, counts: dict[str, Any]) -> None:
    """``fcl3 replay --delay``: label the remembered batches due by batch ``now``, oldest first.
    A label's key names the batch's rows: a replay run again gets 422 for a batch an earlier
    run labelled (its rows remembered again under new ids), which is counted as applied."""
    while pending and pending[0][0] <= now:
        _, b, ids, y = pending.pop(0)
        key = "fcl3-label-" + hashlib.sha256(json.dumps([b.key, b.rows]).encode()).hexdigest()[:48]
        try:
            r = c.label_batch(model, list(zip(ids, y, strict=True)), idempotency_key=key)
        except APIError as exc:
            if exc.status == 422 and "Idempotency-Key" in exc.message:
                counts["replayed"] += 1
                counts["replayed_rows"] += len(y)
                continue
            raise command_error(exc, f"the labels of batch {b.index + 1} of task {b.task!r} were refused") from None
        counts["labelled"] += 1
        if r.replayed:
            counts["replayed"] += 1
            counts["replayed_rows"] += len(y)


def send_batches(
    c: Client,
    rows: Rows,
    batches: list[PlannedBatch],
    held: dict[str, list[int]],
    model: str,
    path: Path,
    quiet: bool,
    delay: int | None = None,
) -> dict[str, Any]:
    from tqdm import tqdm

    targets = rows.y
    assert targets is not None  # a replay's file has a target column

    n_rows = sum(len(b.rows) for b in batches)
    seen_tasks: set[str] = set()
    new_tasks = replayed_batches = replayed_rows = 0
    evaluation_sent: set[str] = set()
    if held:  # a replay run again: the tasks whose evaluation rows an earlier run already sent
        try:
            report = c.evaluation(model, limit=0)
        except NotFound:
            report = None
        for t in getattr(report, "tasks", []):
            if t.task_id in held and t.n_received >= len(held[t.task_id]):
                evaluation_sent.add(t.task_id)
    bar = tqdm(
        total=n_rows,
        unit="row",
        desc=f"replay {model}",
        file=sys.stderr,
        disable=quiet,
        dynamic_ncols=True,
        leave=False,
    )
    done = 0
    pending: list[Any] = []  # --delay: (due at batch, batch, prediction ids, labels)
    counts = {"labelled": 0, "replayed": 0, "replayed_rows": 0}
    try:
        for n, b in enumerate(batches, 1):
            X = [rows.X[i] for i in b.rows]
            y = [targets[i] for i in b.rows]
            if b.task in held and b.task not in evaluation_sent:
                # before the task's first batch: the accuracy-matrix row of that batch scores the
                # task just after it was learned (the diagonal, which BWT and FWT need)
                idx = held[b.task]
                try:
                    c.add_evaluation(model, b.task, [rows.X[i] for i in idx], [targets[i] for i in idx])
                except FCL3Error as exc:
                    bar.close()
                    raise command_error(
                        exc,
                        f"the evaluation rows of task {b.task!r} were refused",
                        f"{done} of {len(batches)} batches were applied; run the same command again to resume",
                    ) from None
                evaluation_sent.add(b.task)
            try:
                if delay is not None and b.index > 0:  # predicted now, labelled `delay` batches later
                    r = None
                    pending.append((n + delay, b, c.predict(model, b.task, X, remember=True).prediction_ids, y))
                else:
                    r = c.learn_batch(model, b.task, X, y, idempotency_key=b.key)
                deliver_labels(c, model, pending, n, counts)
            except FCL3Error as exc:
                bar.close()
                at = sorted(rows.lines[i] for i in b.rows)
                if rows.kind is not None:  # an .npz: rows of the task's arrays
                    lines = f"{path}, rows {at[0]}-{at[-1]} of the task's X_i, y_i"
                else:
                    lines = f"{path}:{at[0]}" + (f"-{at[-1]}" if at[-1] != at[0] else "")
                hint = (
                    f"{done} of {len(batches)} batches were applied; run the same command again to resume "
                    "(every batch is applied once)"
                )
                if isinstance(exc, APIError) and exc.status == 422 and "Idempotency-Key" in exc.message:
                    hint = (
                        "this file was replayed into this model before with other options (--batch-size, "
                        "--order, --seed, --holdout): run it with the same options to resume, or use another model"
                    )
                raise command_error(
                    exc, f"batch {b.index + 1} of task {b.task!r} ({lines}) was refused", hint
                ) from None
            done += 1
            if b.task not in seen_tasks:
                seen_tasks.add(b.task)
                new_tasks += bool(r is not None and not r.replayed and r.update.new_task)  # new in this run
            if r is not None and r.replayed:
                replayed_batches += 1
                replayed_rows += len(y)
            bar.update(len(y))
            bar.set_postfix(tasks=len(seen_tasks), batches=f"{n}/{len(batches)}", refresh=False)
        try:
            deliver_labels(c, model, pending, float("inf"), counts)  # the labels still on their way
        except FCL3Error as exc:
            raise command_error(exc, "the last delayed labels were refused") from None
    except KeyboardInterrupt:
        bar.close()
        click.echo(
            f"fcl3 replay: interrupted after {done} of {len(batches)} batches; run the same command "
            "again to resume (every batch is applied once)",
            err=True,
        )
        raise SystemExit(130) from None
    finally:
        bar.close()
    out = {
        "tasks": len(seen_tasks),
        "new_tasks": new_tasks,
        "batches": len(batches),
        "replayed_batches": replayed_batches + counts["replayed"],
        "rows": n_rows,
        "replayed_rows": replayed_rows + counts["replayed_rows"],
        "held_out_rows": sum(len(v) for v in held.values()),
    }
    if delay is not None:
        out.update(delay=delay, labelled_batches=counts["labelled"])
    return out


def score_figures(s: Any) -> dict[str, Any] | None:
    """A Scores object as {metric: (model, baseline)} for the summary (the primary metric first)."""
    if s is None:
        return None
    d = s if isinstance(s, dict) else s.model_dump(mode="json")
    metrics = ("rmse", "mae") if "rmse" in d else ("log_loss", "accuracy", "auc")
    out = {"n": d.get("n")}
    for m in metrics:
        if d.get(m) is not None:
            out[m] = d[m]
            out[f"baseline_{m}"] = d.get(f"baseline_{m}")
    return out


def add_prequential(summary: dict[str, Any], info: Any) -> None:
    """The model's prequential scores (each batch predicted just before it was learned) beside
    the baseline (each task's own single-task model), as the service reports them."""
    preq = getattr(info, "prequential", None)
    if preq is not None:
        summary["prequential"] = score_figures(preq.overall)
        summary["prequential_recent"] = score_figures(preq.recent)
        summary["prequential_window"] = preq.window


def add_evaluation(
    summary: dict[str, Any], c: Client, model: str, n_tasks: int, wait: float = 60.0, stall: float = 5.0
) -> None:
    """Scores on the held-out rows (pooled over the tasks), and the transfer figures.

    The service computes the accuracy matrix's rows (one per new task) in the background,
    after the updates answered: wait (at most ``wait`` s, and no longer than ``stall`` s
    without a new row, e.g. with ``EVALUATION_MATRIX=false``) until it holds a row per task."""
    deadline = time.monotonic() + wait
    seen, moved = -1, time.monotonic()
    while True:
        try:
            ev = c.evaluation(model, limit=0, matrix_limit=0)
        except FCL3Error as exc:
            summary["evaluation_error"] = str(exc)
            return
        matrix = ev.accuracy_matrix
        n_rows, now = (matrix.n_rows if matrix.n_rows is not None else len(matrix.rows)), time.monotonic()
        if n_rows != seen:
            seen, moved = n_rows, now
        if n_rows >= n_tasks or now > deadline or now - moved > stall:
            break
        time.sleep(0.5)
    summary["matrix_rows"] = n_rows
    d = ev.model_dump(mode="json")
    scored = [t["score"] for t in d.get("tasks", []) if t.get("score")]
    if not scored:
        return
    n = sum(s["n"] for s in scored)
    pooled: dict[str, Any] = {"n": n, "tasks": len(scored)}
    if "rmse" in scored[0]:
        for m in ("rmse", "baseline_rmse"):
            pooled[m] = math.sqrt(sum(s["n"] * s[m] ** 2 for s in scored) / n)
        for m in ("mae", "baseline_mae"):
            pooled[m] = sum(s["n"] * s[m] for s in scored) / n
    else:
        for m in ("log_loss", "baseline_log_loss", "accuracy", "baseline_accuracy"):
            pooled[m] = sum(s["n"] * s[m] for s in scored) / n
    for k in ("forward_transfer", "backward_transfer", "forgetting"):
        pooled[k] = d.get(k)
    summary["evaluation"] = pooled


def metrics_text(s: dict[str, Any], prefix: str = "") -> str:
    return ", ".join(
        f"{m} {s[prefix + m]:.4g}"
        for m in ("rmse", "mae", "log_loss", "accuracy", "auc")
        if s.get(prefix + m) is not None
    )


def print_summary(s: dict[str, Any]) -> None:
    out = [
        f"replayed {s['file']} into model {s['model']!r} at {s['url']}"
        f" ({'created, ' if s['created'] else ''}{s['kind']}) in {s['seconds']} s"
    ]
    out.append(f"  tasks            {s['tasks']} ({s['new_tasks']} new)")
    out.append(
        f"  batches          {s['batches']} ({s['batches'] - s['replayed_batches']} learned now, "
        f"{s['replayed_batches']} already applied)"
    )
    if s.get("delay") is not None:
        out.append(
            f"  delayed labels   {s['labelled_batches']} batches predicted first, labelled {s['delay']} batches later"
        )
    out.append(
        f"  rows             {s['rows']} ({s['rows'] - s['replayed_rows']} learned now)"
        + (f", {s['held_out_rows']} held out for evaluation" if s["held_out_rows"] else "")
    )
    if s.get("features"):
        out.append(f"  records          {len(s['features'])} features encoded into {s['columns']} columns")
    out.append(f"  representatives  {s['representatives']}")
    out.append(f"  model version    {s['version']}")
    p, r = s.get("prequential"), s.get("prequential_recent")
    if p:
        out.append(f"  prequential      {metrics_text(p)} on {p['n']} rows, each predicted before it was learned")
        out.append(f"    baseline       {metrics_text(p, 'baseline_')} (each task's own single-task model)")
        if r and r.get("n") != p.get("n"):
            out.append(
                f"    last {s['prequential_window']} batches {metrics_text(r)}; baseline {metrics_text(r, 'baseline_')}"
            )
    e = s.get("evaluation")
    if e:
        out.append(f"  held-out rows    {metrics_text(e)} on {e['n']} rows of {e['tasks']} tasks")
        out.append(f"    baseline       {metrics_text(e, 'baseline_')}")
        figs = [
            f"{k.replace('_', ' ')} {e[k]:+.4g}"
            for k in ("forward_transfer", "backward_transfer", "forgetting")
            if e.get(k) is not None
        ]
        if figs:
            out.append(
                f"    transfer       {', '.join(figs)} (accuracy matrix of {s.get('matrix_rows')} rows; "
                "transfer > 0 helps, forgetting > 0 hurts)"
            )
    click.echo("\n".join(out))
