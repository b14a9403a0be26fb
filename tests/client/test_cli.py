"""The ``fcl3`` command: --help everywhere, bad files refused before anything is sent, and
replays against real services (SQLite, and PostgreSQL + Redis) that learn every row once,
even when killed half-way and run again."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from benchmarks.launcher import Server
from fcl3 import Client, NotFound
from fcl3.cli import main
from fcl3.cli.files import read_dataset
from fcl3.cli.replay import plan_batches
from tests.service.conftest import PARAMS

from .conftest import STREAM, WRITE_KEY

COMMANDS = [[], ["serve"], ["models"], ["models", "create"], ["models", "list"], ["models", "show"],
            ["models", "delete"], ["models", "export"], ["models", "import"], ["models", "fork"], ["learn"],
            ["predict"], ["replay"], ["tasks"], ["events"]]


def run(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env, catch_exceptions=False)


def test_fcl3_help_from_the_installed_script():
    exe = Path(sys.executable).with_name("fcl3")
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for command in ("serve", "models", "learn", "predict", "replay"):
        assert f"  {command}" in r.stdout


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "fcl3")
def test_every_command_has_help(command):
    r = run(*command, "--help")
    assert r.exit_code == 0 and r.output.startswith("Usage: ")
    if command == ["replay"]:
        for option in ("--url", "--model", "--kind", "--batch-size", "--order", "--seed", "--api-key", "--holdout"):
            assert option in r.output


# ----------------------------------------------------------------------------- bad input
def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


BAD_CSV = {
    "no task column": ("x1,x2,y\n1,2,3\n", "bad.csv:1: no 'task' column in the header (columns: x1, x2, y)"),
    "no y column": ("task,x1,x2\na,1,2\n", "bad.csv:1: no 'y' column in the header (columns: task, x1, x2)"),
    "not a number": ("task,x1,x2,y\na,1,2,3\na,1,abc,3\n", "bad.csv:3: column 3 (x2): 'abc' is not a number"),
    "empty value": ("task,x1,y\na,,3\n", "bad.csv:2: column 2 (x1): empty value (a number is required)"),
    "not finite": ("task,x1,y\na,1,3\nb,nan,1\n", "bad.csv:3: column 2 (x1): 'nan' is not a finite number"),
    "width changes": ("task,x1,x2,y\na,1,2,3\na,1,2\n",
                      "bad.csv:3: 3 values, but the header has 4 columns (every row must have the same width)"),
    "empty file": ("", "bad.csv:1: empty file: expected a header line naming the columns"),
    "only a header": ("task,x1,y\n", "bad.csv:1: no data rows after the header"),
    "empty task": ("task,x1,y\n,1,2\n", "bad.csv:2: column 1 (task): empty task id"),
}


@pytest.mark.parametrize("case", BAD_CSV, ids=list(BAD_CSV))
def test_a_bad_csv_is_refused_with_file_line_and_column_before_anything_is_sent(case, tmp_path):
    text, message = BAD_CSV[case]
    path = write(tmp_path / "bad.csv", text)
    # nothing listens on this port: a command that sent anything would fail differently
    r = run("replay", path, "--model", "m", "--url", "http://127.0.0.1:9", "--retries", "0")
    assert r.exit_code == 2, r.output
    assert f"fcl3: {tmp_path}/{message}" in r.output


def test_a_missing_file_is_named(tmp_path):
    for command in (["replay", tmp_path / "nope.csv", "--model", "m"], ["learn", "m", "t", tmp_path / "nope.csv"],
                    ["predict", "m", "t", tmp_path / "nope.csv"], ["replay", tmp_path / "nope.npz", "--model", "m"]):
        r = run(*command, "--url", "http://127.0.0.1:9")
        path = command[1] if command[0] == "replay" else command[3]
        assert r.exit_code == 2 and f"fcl3: {path}: no such file" in r.output, r.output


def test_learn_and_predict_files_are_checked(tmp_path):
    r = run("learn", "m", "t", write(tmp_path / "l.csv", "x1,x2\n1,2\n"), "--url", "http://127.0.0.1:9")
    assert r.exit_code == 2 and "l.csv:1: no 'y' column" in r.output
    r = run("predict", "m", "t", write(tmp_path / "p.csv", "x1,x2\n1,2\n3\n"), "--url", "http://127.0.0.1:9")
    assert r.exit_code == 2 and "p.csv:3: 1 values, but the header has 2 columns" in r.output


def test_a_bad_npz_is_refused(tmp_path):
    def npz(name, **arrays):
        np.savez(tmp_path / name, **arrays)
        return tmp_path / name

    cases = [
        (npz("a.npz", kind="regression", X_0=np.ones((2, 2)), y_0=np.ones(2)), "no 'n_tasks' array"),
        (npz("b.npz", n_tasks=2, kind="regression", X_0=np.ones((2, 2)), y_0=np.ones(2)), "no 'X_1' array (2 tasks)"),
        (npz("c.npz", n_tasks=2, kind="regression", X_0=np.ones((2, 2)), y_0=np.ones(2), X_1=np.ones((2, 3)),
             y_1=np.ones(2)), "X_1 has 3 columns but X_0 has 2"),
        (npz("d.npz", n_tasks=1, kind="regression", X_0=np.array([[1.0, np.nan]]), y_0=np.ones(1)),
         "X_0 row 0 column 1 is nan"),
        (npz("e.npz", n_tasks=1, kind="ranking", X_0=np.ones((1, 1)), y_0=np.ones(1)), "kind is 'ranking'"),
        (write(tmp_path / "f.npz", "not a zip"), "not a readable .npz file"),
    ]
    for path, message in cases:
        r = run("replay", path, "--model", "m", "--url", "http://127.0.0.1:9")
        assert r.exit_code == 2 and f"fcl3: {path}: {message}" in r.output, r.output


def test_replay_plans_are_deterministic_and_cover_every_row_once():
    rows = read_dataset(STREAM)
    for order in ("file", "random"):
        for holdout in (0.0, 0.2):
            batches, held = plan_batches(rows, 7, order, 3, holdout)
            again, held_again = plan_batches(rows, 7, order, 3, holdout)
            assert [(b.task, b.index, b.rows) for b in batches] == [(b.task, b.index, b.rows) for b in again]
            assert held == held_again
            used = [i for b in batches for i in b.rows] + [i for v in held.values() for i in v]
            assert sorted(used) == list(range(len(rows.X)))  # every row once
            assert all(len(b.rows) <= 7 and {rows.tasks[i] for i in b.rows} == {b.task} for b in batches)
            if holdout:
                assert all(len(v) == 4 for v in held.values())  # 20 rows per task


# ----------------------------------------------------------------------------- against a service
def rows_per_task(path: Path) -> Counter:
    with open(path) as f:
        return Counter(r["task"] for r in csv.DictReader(f))


@pytest.mark.slow
def test_replay_learns_the_shipped_stream_and_a_rerun_applies_nothing(service, model_name):
    args = ["replay", STREAM, "--url", service.url, "--api-key", WRITE_KEY, "--model", model_name,
            "--params", json.dumps(PARAMS), "--json", "--quiet", "--batch-size", "10"]
    first = run(*args)
    assert first.exit_code == 0, first.output
    s = json.loads(first.stdout)
    assert (s["created"], s["kind"], s["tasks"], s["rows"], s["replayed_batches"]) == (True, "regression", 12, 240, 0)
    assert s["version"] == s["batches"] and s["representatives"] >= 1
    preq = s["prequential"]
    assert preq["n"] > 0 and preq["rmse"] > 0 and preq["baseline_rmse"] > 0
    second = json.loads(run(*args).stdout)
    assert second["replayed_batches"] == second["batches"] == s["batches"] and second["version"] == s["version"]
    with Client(service.url, api_key=WRITE_KEY) as c:
        counts = {t.task_id: t.n_samples for t in c.tasks(model_name).tasks}
    assert counts == dict(rows_per_task(STREAM))
    # another batching of the same file into the same model is refused, not learned twice
    third = run(*args[:-1], "7")
    assert third.exit_code == 1 and "was refused" in third.output and "same options" in third.output


@pytest.mark.slow
def test_replay_text_summary_with_holdout(service, model_name):
    args = ["replay", STREAM, "--url", service.url, "--api-key", WRITE_KEY, "--model", model_name,
            "--params", json.dumps(PARAMS), "--holdout", "0.2", "--order", "random", "--seed", "1", "--batch-size", "4",
            "--quiet"]
    r = run(*args)
    assert r.exit_code == 0, r.output
    out = r.output
    assert f"into model '{model_name}'" in out and "(created, regression)" in out
    for line in ("tasks            12 (12 new)", "batches          48 (48 learned now, 0 already applied)",
                 "rows             192 (192 learned now), 48 held out for evaluation",
                 "representatives", "prequential      rmse", "held-out rows    rmse",
                 "    transfer       forward transfer ", ", backward transfer ", ", forgetting ",
                 "(accuracy matrix of 12 rows; transfer > 0 helps, forgetting > 0 hurts)"):
        assert line in out, out
    with Client(service.url, api_key=WRITE_KEY) as c:
        ev = c.evaluation(model_name)
        assert len(ev.tasks) == 12 and all(t.n_rows == t.n_received == 4 for t in ev.tasks)
        # each task's evaluation rows were sent before its first batch: the matrix has its diagonal
        m = ev.accuracy_matrix
        assert len(m.rows) == 12 and all(r.scores[m.tasks.index(r.task_id)] is not None for r in m.rows)
        assert None not in (ev.forward_transfer, ev.backward_transfer, ev.forgetting)
        again = run(*args)  # run again: neither a batch nor an evaluation row is sent twice
        assert again.exit_code == 0 and "batches          48 (0 learned now, 48 already applied)" in again.output
        assert "tasks            12 (0 new)" in again.output, again.output  # a replayed answer's task is not new now
        ev = c.evaluation(model_name)
        assert all(t.n_rows == t.n_received == 4 for t in ev.tasks) and c.get_model(model_name).version == 12 * 4


@pytest.mark.slow
def test_a_refused_batch_shows_the_server_reason(service, model_name, tmp_path):
    path = write(tmp_path / "s.csv", "task,x1,y\na,1,0.5\na,2,0.25\n")
    r = run("replay", path, "--url", service.url, "--api-key", WRITE_KEY, "--model", model_name,
            "--kind", "classification", "--quiet")
    assert r.exit_code == 1
    assert "batch 1 of task 'a' (" in r.output and "s.csv:2-3) was refused: the server answered 422" in r.output
    assert "label" in r.output


@pytest.mark.slow
def test_models_learn_predict_commands(service, model_name, tmp_path):
    conn = ["--url", service.url, "--api-key", WRITE_KEY]
    r = run("models", "create", model_name, "--kind", "regression", "--params", json.dumps(PARAMS), *conn)
    assert r.exit_code == 0 and json.loads(r.stdout)["name"] == model_name
    data = write(tmp_path / "a.csv", "x1,x2,y\n" + "".join(f"{i},{i % 3},{2 * i - i % 3}\n" for i in range(12)))
    r = run("learn", model_name, "a", data, "--idempotency-key", "k1", *conn)
    assert r.exit_code == 0 and "learned 12 rows of task 'a': version 1" in r.output
    r = run("learn", model_name, "a", data, "--idempotency-key", "k1", *conn)
    assert "already applied" in r.output and "version 1" in r.output
    r = run("predict", model_name, "a", write(tmp_path / "p.csv", "x1,x2\n1,1\n2,2\n"), *conn)
    assert r.exit_code == 0 and r.output.splitlines()[0] == "prediction" and len(r.output.splitlines()) == 3
    assert model_name in run("models", "list", *conn).output
    assert json.loads(run("models", "show", model_name, *conn).stdout)["version"] == 1
    assert run("models", "export", model_name, tmp_path / "m.npz", *conn).exit_code == 0
    assert json.loads(run("models", "import", model_name + "-i", tmp_path / "m.npz", *conn).stdout)["version"] == 1
    assert json.loads(run("models", "fork", model_name + "-f", model_name, "--version", "1", *conn).stdout)["n_tasks"] == 1
    assert json.loads(run("tasks", model_name, "a", *conn).stdout)["n_samples"] == 12
    event = json.loads(run("events", model_name, "--last-event-id", "0", "--count", "1", *conn).stdout)
    assert event["id"] == "1" and event["event"] == "update" and event["data"]["task_id"] == "a"
    for name in (model_name, model_name + "-i", model_name + "-f"):
        assert run("models", "delete", name, "--yes", *conn).exit_code == 0
    r = run("models", "show", model_name, *conn)
    assert r.exit_code == 1 and "404" in r.output and "unknown model" in r.output


def test_predict_names_an_unknown_task_and_learn_the_row_refused(sqlite_service, model_name, tmp_path):
    conn = ["--url", sqlite_service.url, "--api-key", WRITE_KEY]
    assert run("models", "create", model_name, "--kind", "regression", *conn).exit_code == 0
    data = write(tmp_path / "a.csv", "x1,x2,y\n" + "".join(f"{i},{i % 3},{2 * i - i % 3}\n" for i in range(12)))
    assert run("learn", model_name, "a", data, *conn).exit_code == 0
    r = run("predict", model_name, "nope", write(tmp_path / "p.csv", "x1,x2\n1,1\n2,2\n"), *conn)
    assert r.exit_code == 1, r.output
    assert f"cannot predict task 'nope' of model '{model_name}'" in r.output and "refused rows" not in r.output
    assert f"fcl3 tasks {model_name}" in r.output
    # a row the service refuses is named by its line: the envelope's row
    wide = write(tmp_path / "w.csv", "x1,x2,x3,y\n1,1,1,1\n2,2,2,2\n3,3,3,3\n")
    r = run("learn", model_name, "a", wide, *conn)
    assert r.exit_code == 1 and "refused rows from" in r.output and "422" in r.output, r.output
    assert run("models", "delete", model_name, "--yes", *conn).exit_code == 0


@pytest.mark.slow
def test_a_replay_killed_half_way_and_run_again_learns_every_row_once(service, model_name, tmp_path):
    """SIGKILL the replay while it runs (a batch may be in flight), run it again: every row of
    the file is learned exactly once."""
    rng = np.random.default_rng(5)
    path = tmp_path / "big.csv"
    with open(path, "w") as f:
        f.write("task,x1,x2,x3,y\n")
        for i in range(360):
            x = rng.normal(size=3)
            f.write(f"t{i % 12},{x[0]:.3f},{x[1]:.3f},{x[2]:.3f},{x.sum() + (i % 12) % 3:.3f}\n")
    exe = str(Path(sys.executable).with_name("fcl3"))
    cmd = [exe, "replay", str(path), "--url", service.url, "--api-key", WRITE_KEY, "--model", model_name,
           "--params", json.dumps(PARAMS), "--batch-size", "4", "--order", "random", "--json", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    with Client(service.url, api_key=WRITE_KEY) as c:
        deadline = time.monotonic() + 60
        version = 0
        while version < 15 and time.monotonic() < deadline and proc.poll() is None:
            try:
                version = c.get_model(model_name).version
            except NotFound:
                pass
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        killed_at = c.get_model(model_name).version
        assert 15 <= killed_at < 96, killed_at  # half-way, not finished
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        s = json.loads(r.stdout)
        assert s["batches"] == 96 and s["rows"] == 360 and not s["created"]  # 12 tasks x 8
        assert killed_at - 1 <= s["replayed_batches"] <= killed_at + 1  # the one in flight may have landed
        m = c.get_model(model_name)
        assert m.n_batches == m.version == 96
        counts = {t.task_id: t.n_samples for t in c.tasks(model_name).tasks}
    assert counts == dict(rows_per_task(path)) == {f"t{k}": 30 for k in range(12)}


class FcL3Serve(Server):
    """``fcl3 serve`` as the launcher's server process."""

    def command(self) -> list[str]:
        return [str(Path(sys.executable).with_name("fcl3")), "serve", "--port", str(self.port),
                "--log-level", "warning", *self.args]


@pytest.mark.slow
def test_fcl3_serve_runs_the_service_with_the_settings_given(tmp_path, monkeypatch):
    server = FcL3Serve({"DATABASE_URL": "", "REDIS_URL": "", "SQLITE_PATH": str(tmp_path / "env.db")},
                       log_path=tmp_path / "serve.log")
    server.args = ["--sqlite-path", str(tmp_path / "opt.db"), "--set", "model_name=served",
                   "--set", f"API_WRITE_KEYS={WRITE_KEY}"]
    with server:
        with Client(server.url, api_key=WRITE_KEY) as c:
            assert c.health()["status"] == "ready"
            assert [m.name for m in c.list_models().models] == ["served"]
    assert (tmp_path / "opt.db").exists() and not (tmp_path / "env.db").exists()
    for name in ("LOCK_WAIT", "MODEL_NAME"):  # `fcl3 serve` sets them in this process: undone at teardown
        monkeypatch.setenv(name, os.environ.get(name, ""))
    r = run("serve", "--set", "NOPE=1")
    assert r.exit_code == 2 and "'NOPE=1': expected NAME=VALUE with NAME one of" in r.output
    r = run("serve", "--set", "LOCK_WAIT=-1")
    assert r.exit_code == 1 and "bad setting: LOCK_WAIT" in r.output
