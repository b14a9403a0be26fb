"""The in-process cost benchmark (``benchmarks.predict_cost``) runs end to end on a small
setting and reports every kind of request."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_run_reports_each_kind(tmp_path):
    out = tmp_path / "cost.json"
    r = subprocess.run([sys.executable, "-m", "benchmarks.predict_cost", "--requests", "5", "--rounds", "2",
                        "--updates", "8", "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    assert set(result) == {"bare_route", "healthz", "get_predict_1_row", "post_predict_1_row",
                           "post_predict_100_rows"}
    assert all(len(v) == 2 and all(x > 0 for x in v) for v in result.values())
    assert "get_predict_1_row" in r.stdout and "µs" in r.stdout
