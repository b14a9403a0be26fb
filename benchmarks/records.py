"""What records cost per request: the same rows sent as ``records`` and as ``X`` (1 and 100
rows), side by side in one run, against a real server (one uvicorn worker, SQLite).

The model has the example's schema (examples/contraception.csv: ``age`` a number, ``urban``
and ``livch`` categories, 7 columns) and has learned the example's first 40 batches. Measured,
alternating records and X request by request (so that drift affects both alike):

* ``POST /models/{name}/predict``: the client's wall time per request, median and p90;
* ``POST .../tasks/{task}/data``: the same for a batch to learn (a known task, no new level);
  every request learns more rows, so records and X alternate on one task each;
* the encoding alone, in-process: :func:`fcl3.records.check_records` + :func:`fcl3.records.encode`
  per request (what the route adds before the engine sees the rows).

    python -m benchmarks.records [--repeats 200] [--json out.json] [--quiet]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.common import progress_bar
from benchmarks.launcher import Server
from fcl3.records import check_records, encode, needed_columns, parse_schema

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "contraception.csv"
FEATURES = [{"name": "age", "type": "number"}, {"name": "urban", "type": "category", "levels": ["N", "Y"]},
            {"name": "livch", "type": "category", "levels": ["0", "1", "2", "3+"]}]
PARAMS = {"n_components": 5}


def example_rows() -> list[dict]:
    with open(EXAMPLE, newline="") as f:
        return list(csv.DictReader(f))


def as_record(row: dict) -> dict:
    return {"age": float(row["age"]), "urban": row["urban"], "livch": row["livch"]}


def encoded(schema, columns, recs) -> list[list[float]]:
    return encode(schema, columns, recs)[0]


def quantiles(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"median_ms": 1000 * statistics.median(xs), "p90_ms": 1000 * xs[int(0.9 * (len(xs) - 1))], "n": len(xs)}


def timed(client: httpx.Client, path: str, body: dict) -> float:
    data = json.dumps(body).encode()
    t0 = time.perf_counter()
    r = client.post(path, content=data, headers={"content-type": "application/json"})
    dt = time.perf_counter() - t0
    if r.status_code != 200:
        raise RuntimeError(f"{path}: {r.status_code} {r.text}")
    return dt


def run(repeats: int, quiet: bool = False) -> dict:
    rows = example_rows()
    schema = parse_schema(FEATURES)
    columns = needed_columns(schema, {})  # every column is declared: the vocabulary is the base
    tmp = tempfile.mkdtemp(prefix="fcl3-records-bench-")
    env = {"SQLITE_PATH": os.path.join(tmp, "bench.db"), "MODEL_NAME": "default", "DATABASE_URL": "",
           "REDIS_URL": "", "API_WRITE_KEYS": "", "API_READ_KEYS": "", "LOG_LEVEL": "WARNING",
           "FCL3_KIND": "classification", "OPENBLAS_NUM_THREADS": "1"}
    out: dict = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                             "python": platform.python_version()}, "repeats": repeats}
    with Server(env) as server, httpx.Client(base_url=server.url, timeout=60, trust_env=False) as c:
        r = c.post("/models", json={"name": "bench", "kind": "classification", "params": PARAMS, "features": FEATURES})
        assert r.status_code == 201, r.text
        # the example's first 40 runs of a district, learned as records
        runs: list[list[dict]] = []
        for row in rows:
            if runs and runs[-1][0]["task"] == row["task"] and len(runs[-1]) < 8:
                runs[-1].append(row)
            else:
                runs.append([row])
        for group in runs[:40]:
            timed(c, f"/models/bench/tasks/{group[0]['task']}/data",
                  {"records": [as_record(g) for g in group], "y": [float(g["use"]) for g in group]})
        task = runs[0][0]["task"]
        for n in progress_bar((1, 100), desc="rows per request", enabled=not quiet, unit="size"):
            recs = [as_record(rows[i % len(rows)]) for i in range(n)]
            X = encoded(schema, columns, recs)
            # predict, alternating
            t_rec, t_x = [], []
            for _ in range(repeats):
                t_rec.append(timed(c, "/models/bench/predict", {"task_id": task, "records": recs}))
                t_x.append(timed(c, "/models/bench/predict", {"task_id": task, "X": X}))
            out[f"predict_{n}"] = {"records": quantiles(t_rec), "X": quantiles(t_x)}
            # learn, alternating on two known tasks of the same data (no new level)
            y = [float(rows[i % len(rows)]["use"]) for i in range(n)]
            for t in ("learn-records", "learn-x"):
                timed(c, f"/models/bench/tasks/{t}-{n}/data", {"records": recs, "y": y})
            l_rec, l_x = [], []
            for _ in range(max(repeats // 4, 10)):
                l_rec.append(timed(c, f"/models/bench/tasks/learn-records-{n}/data", {"records": recs, "y": y}))
                l_x.append(timed(c, f"/models/bench/tasks/learn-x-{n}/data", {"X": X, "y": y}))
            out[f"learn_{n}"] = {"records": quantiles(l_rec), "X": quantiles(l_x)}
            # the encoding alone
            enc = []
            for _ in range(repeats * 5):
                t0 = time.perf_counter()
                check_records(schema, recs)
                encode(schema, columns, recs)
                enc.append(time.perf_counter() - t0)
            out[f"encode_{n}"] = quantiles(enc)
    return out


def report(res: dict) -> str:
    lines = [f"records vs X per request ({res['repeats']} requests each, alternated; "
             f"{res['machine']['cpus']} CPUs, {res['machine']['platform']}, Python {res['machine']['python']})",
             "| request | rows | records median (p90) ms | X median (p90) ms | records - X, ms | encoding alone, ms |",
             "|---|---|---|---|---|---|"]
    for what in ("predict", "learn"):
        for n in (1, 100):
            r, x = res[f"{what}_{n}"]["records"], res[f"{what}_{n}"]["X"]
            lines.append(f"| {what} | {n} | {r['median_ms']:.3f} ({r['p90_ms']:.3f}) | {x['median_ms']:.3f} "
                         f"({x['p90_ms']:.3f}) | {r['median_ms'] - x['median_ms']:+.3f} | "
                         f"{res[f'encode_{n}']['median_ms']:.4f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.records", description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=200, help="requests of each kind and size")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args()
    res = run(args.repeats, args.quiet)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    print(report(res))


if __name__ == "__main__":
    main()
