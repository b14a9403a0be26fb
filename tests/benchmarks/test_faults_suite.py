"""The fault suite (``python -m benchmarks.faults``) runs: one fault in its quick form against
real servers, and its accounting catches what it is there to catch."""
import json
import time

import numpy as np

from benchmarks.faults import Batch, account, batch_label, main, table


def batch(i: int, version: int | None, writer: int = 0) -> Batch:
    X = np.random.default_rng(i).normal(size=(3, 2))
    b = Batch(writer, f"t{i % 2}", X.tolist(), X.sum(axis=1).tolist(), f"key-{i}", 0.0)
    if version is not None:
        b.version, b.t_ack = version, 1.0
    return b


def stored(*batches_and_versions) -> dict:
    rows = [{"version": v, "task": b.task, "n": len(b.y), "label": batch_label(b.task, b.X, b.y)}
            for b, v in batches_and_versions]
    tasks = {}
    for r in rows:
        n, k = tasks.get(r["task"], (0, 0))
        tasks[r["task"]] = (n + r["n"], k + 1)
    return {"model_version": len(rows), "tasks": [(t, n, k) for t, (n, k) in tasks.items()], "batches": rows}


def test_accounting_sees_lost_duplicated_and_unacknowledged_batches():
    a, b, c, d = batch(0, 1), batch(1, 2), batch(2, None), batch(3, 3)
    ok = account([a, b, d], stored((a, 1), (b, 2), (d, 3)))
    assert ok["ack_equals_stored"] and ok["lost"] == ok["duplicates"] == 0 and ok["counts_agree"]
    bad = account([a, b, c, d], stored((a, 1), (a, 2), (c, 3)))  # a twice, b and d lost, c never acked
    assert not bad["ack_equals_stored"]
    assert (bad["duplicates"], bad["lost"], bad["unacked_stored"], bad["acknowledged"], bad["stored"]) == (1, 2, 1, 3, 3)
    assert bad["acked_version_mismatch"] == 0 and bad["counts_agree"]


def test_quick_kill9_on_sqlite_runs_and_reports(tmp_path):
    """kill -9 of a 2-worker server on the SQLite default while 2 clients write, restarted:
    every acknowledged batch stored once, and the row has every figure the suite prints."""
    out = tmp_path / "faults.json"
    t0 = time.monotonic()
    res = main(["--quick", "--quiet", "--faults", "kill9-sqlite", "--writers", "2", "--json", str(out)])
    assert time.monotonic() - t0 < 60
    (row,) = res["faults"]
    assert row["injected"] and "error" not in row, row
    assert row["acknowledged"] > 0 and row["stored"] == row["acknowledged"]
    assert row["lost"] == 0 and row["duplicates"] == 0 and row["ack_equals_stored"]
    assert row["resent"] == 5 and row["resent_applied"] == 0
    assert row["recovery_s"] is not None and row["recovery_s"] < 30
    assert row["transport_errors"], "the kill cut connections: the client must have seen it"
    for key in ("5xx", "5xx_not_503", "5xx_after_recovery", "client_recovery_s", "statuses", "gave_up"):
        assert key in row
    assert json.loads(out.read_text())["faults"][0]["acknowledged"] == row["acknowledged"]
    assert "kill9-sqlite" in table(res["faults"])
