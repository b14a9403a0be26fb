"""What taking a batch back costs: the time of ``DELETE .../batches/{version}`` against the
stream's length and how far back the batch is, the update lock's hold during it beside an
ordinary update's, and how long an update posted during it waits. The real app in-process
(FastAPI's TestClient, SQLite in a temporary directory, the in-process lock).

Each length builds a model of that many one-row batches of ``--tasks`` regression tasks
(``d = --d``) without HTTP: the engine learns them in-process, and the model row, task rows,
batch rows and the checkpoints the schedule keeps (:mod:`service.take_back.checkpoints`) are
written through the service's own store (``ModelWriter.create`` and the checkpoint table), as
its commits would have left them. Then, for each distance ``b`` of ``--back``, the batch ``b``
versions from the end is taken back through the route, while another thread posts one batch
once the take-back has started; its wait and the take-back's lock hold are read from their log
lines. An ordinary update's lock hold is measured first, on the same model.

    python -m benchmarks.take_back [--lengths 1000,3000] [--back 1,10,100,1000] [--tasks 50]
                                   [--d 10] [--json results.json] [--quiet]
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import threading
import time
from typing import Any

import numpy as np

from benchmarks.common import machine, progress_bar, write_json


class Lines(logging.Handler):
    """The ``update`` and ``take_back`` log lines of the run."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "event", None) in ("update", "take_back"):
            self.records.append(record)


def build(client: Any, name: str, n: int, tasks: int, d: int, seed: int = 0) -> None:
    """Model ``name`` at version ``n``: ``n`` one-row batches learned in-process, stored as its commits store them."""
    import core
    from service.models import state_files
    from service.store.results import learner_summary, result_json
    from service.store.tables import checkpoints_t
    from service.store.writes import NewModel
    from service.take_back import checkpoints

    r = client.post("/models", json={"name": name, "kind": "regression", "d": d})
    assert r.status_code == 201, r.text
    hosted = client.app.state.models.get(name)
    settings = hosted.reader.model_info()["settings"]
    hosted.writer.delete()
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(tasks, d))
    learner = core.LEARNERS[settings["estimator"]](kind="regression", **settings.get("params", {}))
    counters: dict[str, dict[str, Any]] = {}
    rows, states = [], {}
    for v in range(1, n + 1):
        t = int(rng.integers(tasks))
        X = rng.normal(size=(1, d))
        y = X @ w[t] + 0.1 * rng.normal(size=1)
        res = learner.learn(f"t{t}", X, y)
        c = counters.setdefault(f"t{t}", {"n_batches": 0})
        c.update(version=v, n_batches=c["n_batches"] + 1, last_update=result_json(res))
        rows.append({"task_id": f"t{t}", "version": v, "X": X, "y": y})
        if checkpoints.due(v - 1, v):
            data = state_files.to_npz(
                learner.get_state(),
                {"version": v, "summary": learner_summary(learner), "tasks": {k: dict(c) for k, c in counters.items()}},
            )
            states[v] = data
            for gone in set(states) - checkpoints.kept(states):
                del states[gone]
    hosted.writer.create(NewModel(learner, settings, version=n, tasks=counters, batches=rows))
    with hosted.reader.bulk.begin() as conn:
        for v, data in sorted(states.items()):
            conn.execute(checkpoints_t.insert().values(model_name=name, version=v, state=data))


def one_length(n: int, backs: list[int], tasks: int, d: int, bar: Any) -> list[dict[str, Any]]:
    from fastapi.testclient import TestClient

    from service.config import Settings
    from service.main import create_app

    lines = Lines()
    logging.getLogger("service.store").addHandler(lines)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(_env_file=None, SQLITE_PATH=os.path.join(tmp, "fcl3.db"), LOCK_TTL=600)
        with TestClient(create_app(settings)) as client:
            name = "bench"
            t0 = time.perf_counter()
            build(client, name, n, tasks, d)
            build_s = time.perf_counter() - t0
            rng = np.random.default_rng(1)

            def update() -> tuple[float, int]:
                t = time.perf_counter()
                body = {"X": rng.normal(size=(1, d)).tolist(), "y": [0.5]}
                r = client.post(f"/models/{name}/tasks/t0/data", json=body)
                assert r.status_code == 200, r.text
                return time.perf_counter() - t, r.status_code

            for _ in range(3):
                update()
            ordinary = [float(getattr(r, "lock_held_ms", r.duration_ms)) for r in lines.records[-3:]]
            for back in backs:
                version = client.get(f"/models/{name}").json()["version"]
                target = version - back + 1
                during: dict[str, Any] = {}
                started = threading.Event()

                def writer() -> None:
                    started.wait()
                    time.sleep(0.05)
                    during["seconds"], during["status"] = update()

                th = threading.Thread(target=writer)
                th.start()
                started.set()
                t = time.perf_counter()
                r = client.delete(f"/models/{name}/batches/{target}")
                seconds = time.perf_counter() - t
                th.join()
                assert r.status_code == 200, r.text
                tb = [x for x in lines.records if x.event == "take_back"][-1]
                upd = [x for x in lines.records if x.event == "update"][-1]
                out.append(
                    {
                        "length": n,
                        "back": back,
                        "seconds": round(seconds, 3),
                        "n_replayed": int(tb.n_replayed),
                        "checkpoint": int(tb.checkpoint),
                        "take_back_lock_ms": float(tb.duration_ms),
                        "ordinary_lock_ms": round(float(np.median(ordinary)), 2),
                        "update_during_ms": round(during["seconds"] * 1000, 2),
                        "update_during_lock_wait_ms": float(upd.lock_wait_ms),
                        "update_during_status": during["status"],
                        "build_seconds": round(build_s, 1),
                    }
                )
                bar.update(1)
    logging.getLogger("service.store").removeHandler(lines)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.take_back", description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="1000,3000", help="stream lengths (one-row batches), comma-separated")
    ap.add_argument("--back", default="1,10,100,1000", help="how far back the batch is, comma-separated")
    ap.add_argument("--tasks", type=int, default=50, help="tasks of the stream")
    ap.add_argument("--d", type=int, default=10, help="features")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    backs = [int(x) for x in args.back.split(",")]
    logging.getLogger("service").setLevel(logging.INFO)
    rows: list[dict[str, Any]] = []
    with progress_bar(total=sum(len([b for b in backs if b <= n]) for n in lengths), enabled=not args.quiet) as bar:
        for n in lengths:
            rows += one_length(n, [b for b in backs if b <= n], args.tasks, args.d, bar)
    head = (
        "length",
        "back",
        "seconds",
        "n_replayed",
        "checkpoint",
        "take_back_lock_ms",
        "ordinary_lock_ms",
        "update_during_ms",
        "update_during_lock_wait_ms",
        "update_during_status",
    )
    print(" | ".join(head))
    for r in rows:
        print(" | ".join(str(r[k]) for k in head))
    if args.json:
        write_json(args.json, {"machine": machine(), "tasks": args.tasks, "d": args.d, "results": rows})


if __name__ == "__main__":
    main()
