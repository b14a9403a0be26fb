"""What a model's columns cost the engine: the time of one update of the default learner
(``core.FCL3`` with its default hyper-parameters, ``grow_features=True`` as a model with a
feature schema has) against its number of columns, in-process, no service. The basis of the
service's default ``MAX_COLUMNS`` (docs/operations.md, *Columns of a model*).

Each size learns ``--tasks`` tasks of one batch of ``--rows`` rows each (one-hot columns of a
category plus a few numbers, the shape a records model has), then times ``--repeats`` more
batches of known tasks, each on a fresh copy of the learner: the median and the slowest.

    python -m benchmarks.column_cap [--sizes 25,50,100,200,300,400] [--tasks 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

import core


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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="25,50,100,200,300,400")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--rows", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}"
    )
    print("| columns | median update s | slowest s |")
    print("|---|---|---|")
    for d in (int(s) for s in args.sizes.split(",")):
        times = update_seconds(d, args.tasks, args.rows, args.repeats)
        print(f"| {d} | {statistics.median(times):.3f} | {max(times):.3f} |", flush=True)


if __name__ == "__main__":
    main()
