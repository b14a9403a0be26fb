"""What a model's columns cost the engine: the time of one update of the default learner
(``core.FCL3`` with its default hyper-parameters, ``grow_features=True`` as a model with a
feature schema has) against its number of columns, in-process, no service. The basis of the
service's default ``MAX_COLUMNS`` (docs/operations.md, *Columns of a model*).

Each size learns ``--tasks`` tasks of one batch of ``--rows`` rows each (one-hot columns of a
category plus a few numbers, the shape a records model has), then times ``--repeats`` more
batches of known tasks, each on a fresh copy of the learner: the median and the slowest.

    python -m benchmarks.column_cap [--sizes 25,50,100,200,300,400] [--tasks 8] [--repeats 3]
                                    [--json results.json] [--quiet]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import core
from benchmarks.common import machine, progress_bar, write_json


def batch(rng: np.random.Generator, d: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` rows of ``d`` columns: 4 numbers and a one-hot category of ``d - 4`` levels."""
    X = np.zeros((rows, d))
    X[:, :4] = rng.normal(size=(rows, 4))
    X[np.arange(rows), 4 + rng.integers(0, d - 4, size=rows)] = 1.0
    w = rng.normal(size=d)
    return X, X @ w + 0.1 * rng.normal(size=rows)


def update_seconds(d: int, tasks: int, rows: int, repeats: int, seed: int = 0) -> list[float]:
    """Seconds of each timed update of a learner of ``d`` columns that holds ``tasks`` tasks."""
    rng = np.random.default_rng(seed)
    learner = core.FCL3(kind="regression", grow_features=True)
    for t in range(tasks):
        learner.learn(f"t{t}", *batch(rng, d, rows))
    out = []
    for r in range(repeats):
        copy = learner.copy()
        X, y = batch(rng, d, rows)
        t0 = time.perf_counter()
        copy.learn(f"t{r % tasks}", X, y)
        out.append(time.perf_counter() - t0)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.column_cap", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="25,50,100,200,300,400", help="comma-separated column counts")
    ap.add_argument("--tasks", type=int, default=8, help="tasks the learner holds before the timed updates")
    ap.add_argument("--rows", type=int, default=20, help="rows of each batch")
    ap.add_argument("--repeats", type=int, default=3, help="timed updates per size")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    where = machine()
    print(f"# {where['cores']} CPUs, {where['platform']}, Python {where['python']}, {where['blas_threads'] or 'BLAS threads unset'}")
    print("| columns | median update s | slowest s |")
    print("|---|---|---|")
    rows = []
    for d in progress_bar([int(s) for s in args.sizes.split(",")], desc="sizes", enabled=not args.quiet):
        times = update_seconds(d, args.tasks, args.rows, args.repeats)
        rows.append({"columns": d, "median_s": statistics.median(times), "slowest_s": max(times)})
        print(f"| {d} | {rows[-1]['median_s']:.3f} | {rows[-1]['slowest_s']:.3f} |", flush=True)
    if args.json:
        write_json(args.json, {"machine": where, "tasks": args.tasks, "rows": args.rows, "repeats": args.repeats,
                               "sizes": rows})


if __name__ == "__main__":
    main()
