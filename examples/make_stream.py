"""Write ``examples/stream.csv``: a small stream of related regression tasks (seeded).

Twelve tasks (``store-01`` .. ``store-12``) from three environments: the tasks of one
environment share their weights up to a small task-specific part, so a lifelong learner that
finds the environments predicts a task's next rows better than the task's own model can from
its few rows. Each task has 20 rows (4 features, noise 0.3), arriving in runs of 5 rows, the
runs of all tasks interleaved at random: ``fcl3 replay examples/stream.csv`` learns them in
file order, a run per batch.

    python examples/make_stream.py            # rewrites examples/stream.csv (same bytes)
"""
from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path

N_ENVIRONMENTS, TASKS_PER_ENVIRONMENT, ROWS, RUN, D = 3, 4, 20, 5, 4


def make_stream(seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    centres = [[rng.gauss(0, 2) for _ in range(D)] for _ in range(N_ENVIRONMENTS)]
    tasks = []
    for t in range(N_ENVIRONMENTS * TASKS_PER_ENVIRONMENT):
        centre = centres[t % N_ENVIRONMENTS]
        w = [c + rng.gauss(0, 0.2) for c in centre]
        b = rng.gauss(0, 0.5)
        rows = []
        for _ in range(ROWS):
            x = [rng.gauss(0, 1) for _ in range(D)]
            y = b + sum(wi * xi for wi, xi in zip(w, x)) + rng.gauss(0, 0.3)
            rows.append([f"store-{t + 1:02d}", *(f"{v:.2f}" for v in x), f"{y:.2f}"])
        tasks.append(rows)
    # Runs of RUN rows, each task's runs in order, the tasks' runs interleaved at random.
    slots = [t for t in range(len(tasks)) for _ in range(ROWS // RUN)]
    rng.shuffle(slots)
    nxt = [0] * len(tasks)
    out = []
    for t in slots:
        out += tasks[t][nxt[t]:nxt[t] + RUN]
        nxt[t] += RUN
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("stream.csv"))
    args = parser.parse_args()
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["task", *(f"x{i + 1}" for i in range(D)), "y"])
        w.writerows(make_stream(args.seed))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
