"""The ``fcl3`` command (click): run the service, manage models, learn and predict from CSV
files, and replay a whole data set into a running service.

Every command has ``--help``. The commands that talk to a service take ``--url`` (or
``FCL3_URL``, default http://127.0.0.1:8000) and ``--api-key`` (or ``FCL3_API_KEY``).

Input files are checked in full before anything is sent; a bad one stops the command with
``FILE:LINE: column N (name): what is wrong`` and exit status 2. A batch the service refuses
stops it with the service's reason and exit status 1.
"""
from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import click

from . import __version__
from .client import APIError, Client, DEFAULT_URL, FCL3Error, NotFound
from .records import RecordError, check_records, infer_schema, parse_schema, schema_json, typed_records

#: Column names of the task id and the target in a CSV file (the first one found is used).
TASK_COLUMNS = ("task", "task_id")
TARGET_COLUMNS = ("y", "target")
MAX_BATCH = 10_000  # the service's default MAX_ROWS_PER_BATCH


# ----------------------------------------------------------------------------- input files
class BadFile(click.ClickException):
    """An input file that cannot be used; exit status 2, nothing was sent."""

    exit_code = 2

    def __init__(self, path: str | os.PathLike, message: str, line: int | None = None, column: int | None = None,
                 name: str | None = None):
        where = str(path) + (f":{line}" if line is not None else "")
        if column is not None:
            where += f": column {column}" + (f" ({name})" if name else "")
        super().__init__(f"{where}: {message}")

    def show(self, file=None) -> None:
        click.echo(f"fcl3: {self.format_message()}", err=True)


def data_lines(reader, header: list[str], path: str | os.PathLike):
    """The CSV ``reader``'s records after the header, with their line numbers; blank lines are
    skipped and a record of another width than ``header`` is :class:`BadFile`."""
    for record in reader:
        if not record or (len(record) == 1 and not record[0].strip()):
            continue
        if len(record) != len(header):
            raise BadFile(path, f"{len(record)} values, but the header has {len(header)} columns "
                          "(every row must have the same width)", reader.line_num)
        yield reader.line_num, record


@dataclass
class Rows:
    """The rows of an input file, in file order: ``tasks[i]``, ``X[i]``, ``y[i]`` (``None``
    without a target) and ``lines[i]`` (the line number in a CSV, the row number in an .npz)."""

    path: Path
    columns: list[str]
    X: list[list[float]] = field(default_factory=list)
    y: list[float] | None = None
    tasks: list[str] | None = None
    lines: list[int] = field(default_factory=list)
    kind: str | None = None  # from an .npz
    header: list[str] | None = None  # a CSV of records: every column's name, in order

    @property
    def width(self) -> int:
        return len(self.columns)


def _open_text(path: Path):
    if not path.exists():
        raise BadFile(path, "no such file")
    if path.is_dir():
        raise BadFile(path, "is a directory, not a file")
    try:
        return open(path, newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise BadFile(path, f"cannot be read: {exc.strerror or exc}") from None


def _find(header: list[str], names: Iterable[str]) -> int | None:
    lowered = [h.strip().lower() for h in header]
    for n in names:
        if n in lowered:
            return lowered.index(n)
    return None


def read_csv(path: str | os.PathLike, *, task: str = "required", target: str = "required") -> Rows:
    """Read a CSV file with a header line. ``task``/``target``: ``required``, ``optional``
    (used when present) or ``ignored`` (dropped when present); every other column is a feature.
    Raises :class:`BadFile` naming the file, line and column of the first problem."""
    path = Path(path)
    with _open_text(path) as f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
            while header is not None and not any(h.strip() for h in header):
                header = next(reader, None)
            if header is None:
                raise BadFile(path, "empty file: expected a header line naming the columns", 1)
            header_line = reader.line_num
            header = [h.strip() for h in header]
            t_col = _find(header, TASK_COLUMNS)
            y_col = _find(header, TARGET_COLUMNS)
            for col, mode, names in ((t_col, task, TASK_COLUMNS), (y_col, target, TARGET_COLUMNS)):
                if col is None and mode == "required":
                    raise BadFile(path, f"no {names[0]!r} column in the header (columns: {', '.join(header)}); "
                                  f"expected {' or '.join(repr(n) for n in names)} and the features", header_line)
            if task == "ignored":
                t_col_use = None
            else:
                t_col_use = t_col
            y_col_use = None if target == "ignored" else y_col
            skip = {c for c in (t_col, y_col) if c is not None}
            features = [i for i in range(len(header)) if i not in skip]
            if not features:
                raise BadFile(path, "no feature columns in the header", header_line)
            for i in features:
                if not header[i]:
                    raise BadFile(path, "empty column name in the header", header_line, i + 1)
            rows = Rows(path, [header[i] for i in features], y=[] if y_col_use is not None else None,
                        tasks=[] if t_col_use is not None else None)
            for line, record in data_lines(reader, header, path):
                x = []
                for i in features:
                    x.append(_number(record[i], path, line, i + 1, header[i]))
                rows.X.append(x)
                rows.lines.append(line)
                if y_col_use is not None:
                    rows.y.append(_number(record[y_col_use], path, line, y_col_use + 1, header[y_col_use]))
                if t_col_use is not None:
                    tid = record[t_col_use].strip()
                    if not tid:
                        raise BadFile(path, "empty task id", line, t_col_use + 1, header[t_col_use])
                    if len(tid) > 200:
                        raise BadFile(path, "task id longer than 200 characters", line, t_col_use + 1, header[t_col_use])
                    rows.tasks.append(tid)
        except csv.Error as exc:
            raise BadFile(path, f"not a valid CSV file: {exc}", reader.line_num) from None
        except UnicodeDecodeError as exc:
            raise BadFile(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not rows.X:
        raise BadFile(path, "no data rows after the header", header_line)
    return rows


def read_records_csv(path: str | os.PathLike, task_column: str, target_column: str) -> tuple[Rows, dict[str, list[str]]]:
    """Read a CSV of named columns for records: the rows (``X[i]``: the features of a row as
    a dict of its cells, as text) and each feature column's cells (for a schema to infer).
    :class:`BadFile` naming the line and column of the first problem."""
    path = Path(path)
    with _open_text(path) as f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
            if header is None:
                raise BadFile(path, "empty file: expected a header line naming the columns", 1)
            header_line = reader.line_num
            header = [h.strip() for h in header]
            for name, what in ((task_column, "--task-column"), (target_column, "--target-column")):
                if name not in header:
                    raise BadFile(path, f"no column {name!r} ({what}) in the header (columns: {', '.join(header)})",
                                  header_line)
            if len(set(header)) != len(header) or not all(header):
                raise BadFile(path, "the header must name every column once", header_line)
            t, yc = header.index(task_column), header.index(target_column)
            features = [i for i in range(len(header)) if i not in (t, yc)]
            if not features:
                raise BadFile(path, "no feature columns in the header", header_line)
            rows = Rows(path, [header[i] for i in features], y=[], tasks=[], header=header)
            cells: dict[str, list[str]] = {header[i]: [] for i in features}
            for line, record in data_lines(reader, header, path):
                tid = record[t].strip()
                if not tid or len(tid) > 200:
                    raise BadFile(path, "empty task id" if not tid else "task id longer than 200 characters", line,
                                  t + 1, task_column)
                rows.tasks.append(tid)
                rows.y.append(_number(record[yc], path, line, yc + 1, target_column))
                rows.X.append({header[i]: record[i] for i in features})
                rows.lines.append(line)
                for i in features:
                    cells[header[i]].append(record[i])
        except csv.Error as exc:
            raise BadFile(path, f"not a valid CSV file: {exc}", reader.line_num) from None
        except UnicodeDecodeError as exc:
            raise BadFile(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not rows.X:
        raise BadFile(path, "no data rows after the header", header_line)
    return rows, cells


def typed_rows(rows: Rows, schema) -> None:
    """``rows.X`` as records of ``schema`` (numbers and booleans parsed), each checked:
    :class:`BadFile` naming the line and column of the first one the service would refuse."""
    records = typed_records(schema, rows.X)
    for rec, line in zip(records, rows.lines):
        try:
            check_records(schema, [rec])
        except RecordError as exc:
            column = rows.header.index(exc.field) + 1 if rows.header and exc.field in rows.header else None
            raise BadFile(rows.path, str(exc).replace("records[0].", "").replace("records[0]", "the row"), line,
                          column, exc.field) from None
    rows.X = records


def format_schema(schema) -> str:
    """A schema as the lines ``fcl3 replay --infer-schema`` prints."""
    width = max(len(f.name) for f in schema)
    out = []
    for f in schema:
        extra = []
        if f.nullable:
            extra.append("nullable" + (f", fill {f.fill:g}" if f.type != "category" else ""))
        if f.levels:
            extra.append(f"{len(f.levels)} levels: " + ", ".join(f.levels[:8]) + (", ..." if len(f.levels) > 8 else ""))
        out.append(f"  {f.name:<{width}}  {f.type:<8}  {'; '.join(extra)}".rstrip())
    return "\n".join(out)


def _number(text: str, path: Path, line: int, column: int, name: str) -> float:
    s = text.strip()
    try:
        v = float(s)
    except ValueError:
        raise BadFile(path, f"{s!r} is not a number" if s else "empty value (a number is required)",
                      line, column, name) from None
    if not math.isfinite(v):
        raise BadFile(path, f"{s!r} is not a finite number", line, column, name)
    return v


def read_npz(path: str | os.PathLike) -> Rows:
    """Read a data set in the layout of the paper's data sets: ``n_tasks``, ``kind``, ``X_i``,
    ``y_i`` (and optionally ``task_ids``, ``feature_names``). Needs numpy."""
    path = Path(path)
    if not path.exists():
        raise BadFile(path, "no such file")
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        raise BadFile(path, "reading an .npz file needs numpy (pip install numpy)") from None
    try:
        z = np.load(path, allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - any unreadable file
        raise BadFile(path, f"not a readable .npz file: {exc}") from None
    with z:
        files = set(z.files)
        for key in ("n_tasks", "kind"):
            if key not in files:
                raise BadFile(path, f"no {key!r} array (expected n_tasks, kind, X_i, y_i, task_ids)")
        try:
            n = int(z["n_tasks"])
            kind = str(z["kind"])
            ids = [str(v) for v in z["task_ids"]] if "task_ids" in files else [str(i) for i in range(n)]
            names = [str(v) for v in z["feature_names"]] if "feature_names" in files else None
        except (ValueError, TypeError) as exc:
            raise BadFile(path, f"bad n_tasks/kind/task_ids: {exc}") from None
        if kind not in ("regression", "classification"):
            raise BadFile(path, f"kind is {kind!r}: expected 'regression' or 'classification'")
        if len(ids) != n:
            raise BadFile(path, f"task_ids has {len(ids)} entries for {n} tasks")
        rows: Rows | None = None
        for i in range(n):
            for key in (f"X_{i}", f"y_{i}"):
                if key not in files:
                    raise BadFile(path, f"no {key!r} array ({n} tasks)")
            try:
                X = np.asarray(z[f"X_{i}"], dtype=float)
                y = np.asarray(z[f"y_{i}"], dtype=float).ravel()
            except (ValueError, TypeError) as exc:
                raise BadFile(path, f"X_{i}/y_{i} are not numbers: {exc}") from None
            if X.ndim != 2:
                raise BadFile(path, f"X_{i} has {X.ndim} dimensions: expected rows x features")
            if rows is None:
                cols = names if names is not None and len(names) == X.shape[1] else [f"x{j}" for j in range(X.shape[1])]
                rows = Rows(path, cols, y=[], tasks=[], kind=kind)
            if X.shape[1] != rows.width:
                raise BadFile(path, f"X_{i} has {X.shape[1]} columns but X_0 has {rows.width} "
                              "(every task must have the same features)")
            if len(y) != len(X):
                raise BadFile(path, f"y_{i} has {len(y)} values for {len(X)} rows of X_{i}")
            bad = ~np.isfinite(X)
            if bad.any():
                r, c = map(int, np.argwhere(bad)[0])
                raise BadFile(path, f"X_{i} row {r} column {c} is {X[r, c]} (not a finite number)")
            if not np.isfinite(y).all():
                r = int(np.flatnonzero(~np.isfinite(y))[0])
                raise BadFile(path, f"y_{i} row {r} is {y[r]} (not a finite number)")
            rows.X += X.tolist()
            rows.y += y.tolist()
            rows.tasks += [ids[i]] * len(y)
            rows.lines += list(range(len(y)))
    if rows is None or not rows.X:
        raise BadFile(path, "no rows (n_tasks is 0)")
    return rows


def read_dataset(path: str | os.PathLike) -> Rows:
    """A data set to replay: an .npz (the paper's layout) or a CSV with task and y columns."""
    return read_npz(path) if str(path).lower().endswith(".npz") else read_csv(path)


def infer_kind(y: list[float]) -> str:
    values = set(y)
    return "classification" if values <= {0.0, 1.0} or values <= {-1.0, 1.0} else "regression"


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ----------------------------------------------------------------------------- replay plan
@dataclass
class PlannedBatch:
    task: str
    index: int  # the index of this batch among its task's batches
    rows: list[int]  # indices into Rows
    key: str = ""


def plan_batches(rows: Rows, batch_size: int, order: str, seed: int, holdout: float) -> tuple[list[PlannedBatch], dict[str, list[int]]]:
    """The batches of a replay and each task's held-out rows, a pure function of the rows and
    the options (so that a run again sends the same batches with the same keys).

    ``file``: rows in file order, a batch being a run of consecutive rows of one task (at most
    ``batch_size``). ``random``: each task's rows shuffled, cut into batches, and the batches of
    all tasks interleaved at random (each task's in order). ``holdout``: that fraction of each
    task's rows (drawn at random, at least one row left to learn) kept aside."""
    rng = random.Random(seed)
    by_task: dict[str, list[int]] = {}
    for i, t in enumerate(rows.tasks):
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

    def add(task: str, idx: list[int]):
        batches.append(PlannedBatch(task, count.get(task, 0), idx))
        count[task] = count.get(task, 0) + 1

    if order == "file":
        run: list[int] = []
        for i, t in enumerate(rows.tasks):
            if i in kept:
                continue
            if run and (rows.tasks[run[0]] != t or len(run) == batch_size):
                add(rows.tasks[run[0]], run)
                run = []
            run.append(i)
        if run:
            add(rows.tasks[run[0]], run)
    else:
        per_task = {}
        for t, idx in by_task.items():
            idx = [i for i in idx if i not in kept]
            rng.shuffle(idx)
            per_task[t] = [idx[j:j + batch_size] for j in range(0, len(idx), batch_size)]
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


# ----------------------------------------------------------------------------- output
def _echo_json(value: Any) -> None:
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _fail(exc: FCL3Error, what: str, hint: str = "") -> click.ClickException:
    msg = f"{what}: {exc.message if isinstance(exc, APIError) else exc}"
    if isinstance(exc, APIError):
        msg = f"{what}: the server answered {exc.status}: {exc.message}"
    return click.ClickException(msg + (f"\n{hint}" if hint else ""))


def _client(url: str, api_key: str | None, timeout: float, retries: int) -> Client:
    return Client(url, api_key=api_key, timeout=timeout, retries=retries)


def connection_options(f):
    """``--url``, ``--api-key``, ``--timeout``, ``--retries`` (the first two also from the environment)."""
    f = click.option("--retries", default=5, show_default=True, type=click.IntRange(0, 100),
                     help="Retries of a request when that is safe (503, connection errors).")(f)
    f = click.option("--timeout", default=60.0, show_default=True, type=click.FloatRange(0.1),
                     help="Seconds to wait for each answer.")(f)
    f = click.option("--api-key", envvar="FCL3_API_KEY", default=None, metavar="KEY",
                     help="API key, sent as 'Authorization: Bearer KEY' [env FCL3_API_KEY].")(f)
    f = click.option("--url", envvar="FCL3_URL", default=DEFAULT_URL, show_default=True, metavar="URL",
                     help="Base URL of the service [env FCL3_URL].")(f)
    return f


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except FCL3Error as exc:  # anything a command did not turn into its own message
            raise _fail(exc, ctx.invoked_subcommand or "fcl3") from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="fcl3")
def main():
    """FCL3: an online lifelong learner served over HTTP.

    \b
    fcl3 serve                                  run the service
    fcl3 replay stream.csv --model demo         stream a data set into it
    fcl3 models list                            the models it holds
    """


# ----------------------------------------------------------------------------- serve
#: The thread counts of BLAS and OpenMP that ``fcl3 serve`` sets unless the user has.
BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def one_blas_thread(environ) -> dict[str, str]:
    """Set each of :data:`BLAS_THREADS` in ``environ`` that is not set there; those it set.
    The engine's matrices are small: a BLAS thread per core in each worker makes some updates
    10-50x slower."""
    added = {name: value for name, value in BLAS_THREADS.items() if not environ.get(name)}
    environ.update(added)
    return added


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="Port to listen on.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1), help="Worker processes.")
@click.option("--database-url", default=None, metavar="URL",
              help="DATABASE_URL, e.g. postgresql+psycopg://postgres@127.0.0.1:5432/fcl3 (default: an SQLite file).")
@click.option("--sqlite-path", default=None, metavar="FILE", help="SQLITE_PATH, the file of the embedded default (fcl3.db).")
@click.option("--redis-url", default=None, metavar="URL", help="REDIS_URL, e.g. redis://127.0.0.1:6379/0.")
@click.option("--log-level", default=None, help="LOG_LEVEL of the service's JSON logs (INFO).")
@click.option("--set", "settings", multiple=True, metavar="NAME=VALUE",
              help="Any other setting, as its environment variable (repeatable), e.g. --set FCL3_KIND=classification.")
def serve(host, port, workers, database_url, sqlite_path, redis_url, log_level, settings):
    """Run the service (uvicorn service.main:app).

    Settings are the service's environment variables (and .env), as in the README's
    Configuration table; the options here override them. Unset, the service runs on the
    embedded default: an SQLite file, its schema created at start-up. BLAS runs one thread
    per worker unless OPENBLAS_NUM_THREADS, OMP_NUM_THREADS or MKL_NUM_THREADS say otherwise.
    """
    try:
        import uvicorn
        from pydantic import ValidationError

        from service.config import Settings
        from service.server import HTTP_PROTOCOL
    except ImportError as exc:
        raise click.ClickException(f"the service's dependencies are not installed ({exc.name}): "
                                   "pip install fcl3 (with the service), not only the client") from None
    values = {}
    for item in settings:
        name, sep, value = item.partition("=")
        name = name.strip().upper()
        if not sep or name not in Settings.model_fields:
            known = ", ".join(sorted(Settings.model_fields))
            raise click.BadParameter(f"{item!r}: expected NAME=VALUE with NAME one of {known}", param_hint="--set")
        values[name] = value
    for name, value in (("DATABASE_URL", database_url), ("SQLITE_PATH", sqlite_path), ("REDIS_URL", redis_url),
                        ("LOG_LEVEL", log_level)):
        if value is not None:
            values[name] = value
    os.environ.update(values)
    try:
        config = Settings()
    except ValidationError as exc:
        lines = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise click.ClickException("bad setting: " + "; ".join(lines)) from None
    where = config.DATABASE_URL and "the database of DATABASE_URL" or f"SQLite file {config.SQLITE_PATH}"
    click.echo(f"fcl3 serve: http://{host}:{port} on {where}", err=True)
    one_blas_thread(os.environ)  # before numpy is loaded (not yet: the app loads it), here and in the workers
    uvicorn.run("service.main:app", host=host, port=port, workers=workers, http=HTTP_PROTOCOL,  # HEADER_TIMEOUT
                log_level=(config.LOG_LEVEL or "info").lower())


# ----------------------------------------------------------------------------- models
@main.group()
def models():
    """Create, list, show, delete, export, import and fork models."""


def _params(params: str | None) -> dict:
    if not params:
        return {}
    try:
        value = json.loads(params)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--params") from None
    if not isinstance(value, dict):
        raise click.BadParameter("a JSON object is expected, e.g. '{\"lambda2\": 0.5}'", param_hint="--params")
    return value


@models.command("create")
@click.argument("name")
@click.option("--kind", type=click.Choice(["regression", "classification"]), required=True)
@click.option("--estimator", default="FCL3", show_default=True, help="Learner class in core (FCL3, CL3, ELLA, STL, ...).")
@click.option("--params", default=None, metavar="JSON", help="Other hyper-parameters, e.g. '{\"lambda2\": 0.5}'.")
@click.option("--d", "d", default=None, type=click.IntRange(1), help="Number of features (default: fixed by the first batch).")
@connection_options
def models_create(name, kind, estimator, params, d, url, api_key, timeout, retries):
    """Create the model NAME."""
    with _client(url, api_key, timeout, retries) as c:
        _echo_json(c.create_model(name, kind, estimator=estimator, params=_params(params), d=d))


@models.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the models as JSON.")
@connection_options
def models_list(as_json, url, api_key, timeout, retries):
    """List the models."""
    with _client(url, api_key, timeout, retries) as c:
        got = list(c.iter_models())
    if as_json:
        _echo_json([m.model_dump(mode="json") for m in got])
        return
    head = ("name", "kind", "estimator", "d", "version", "tasks", "batches", "representatives")
    table = [head] + [(m.name, m.kind, m.estimator, str(m.d if m.d is not None else "-"), str(m.version),
                       str(m.n_tasks), str(m.n_batches), str(m.n_representatives)) for m in got]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for r in table:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())


@models.command("show")
@click.argument("name")
@connection_options
def models_show(name, url, api_key, timeout, retries):
    """Show the model NAME (settings, version, tasks, representatives) as JSON."""
    with _client(url, api_key, timeout, retries) as c:
        _echo_json(c.get_model(name))


@models.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@connection_options
def models_delete(name, yes, url, api_key, timeout, retries):
    """Delete the model NAME with its tasks and batches."""
    if not yes:
        click.confirm(f"Delete model {name!r} and everything it learned?", abort=True)
    with _client(url, api_key, timeout, retries) as c:
        c.delete_model(name)
    click.echo(f"deleted {name}")


@models.command("export")
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False, writable=True))
@connection_options
def models_export(name, file, url, api_key, timeout, retries):
    """Write the model NAME to FILE (one .npz file, no pickle)."""
    with _client(url, api_key, timeout, retries) as c:
        version = c.export_model(name, file)
    click.echo(f"exported {name} (version {version}) to {file}")


@models.command("import")
@click.argument("name")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@connection_options
def models_import(name, file, url, api_key, timeout, retries):
    """Create the model NAME from FILE (written by 'fcl3 models export')."""
    with _client(url, api_key, timeout, retries) as c:
        _echo_json(c.import_model(name, file))


@models.command("fork")
@click.argument("name")
@click.argument("source")
@click.option("--version", "version", default=None, type=click.IntRange(0), help="SOURCE's version to start from (default: its current one).")
@connection_options
def models_fork(name, source, version, url, api_key, timeout, retries):
    """Create NAME as the model SOURCE was at a version."""
    with _client(url, api_key, timeout, retries) as c:
        _echo_json(c.fork_model(name, source, version))


# ----------------------------------------------------------------------------- one task
@main.command()
@click.argument("model")
@click.argument("task")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--batch-size", default=MAX_BATCH, show_default=True, type=click.IntRange(1, MAX_BATCH),
              help="Rows per request.")
@click.option("--idempotency-key", default=None, metavar="KEY",
              help="Key of the request (KEY-1, KEY-2, ... for several batches); run again with the same "
                   "key, nothing is learned twice. Default: new keys.")
@connection_options
def learn(model, task, file, batch_size, idempotency_key, url, api_key, timeout, retries):
    """Learn the rows of FILE for task TASK of MODEL.

    FILE is a CSV with a header: a 'y' column (the target) and the features in the other
    columns (a 'task' column, if any, is ignored).
    """
    rows = read_csv(file, task="ignored", target="required")
    n = len(rows.X)
    with _client(url, api_key, timeout, retries) as c:
        for b, start in enumerate(range(0, n, batch_size)):
            key = None
            if idempotency_key:
                key = idempotency_key if n <= batch_size else f"{idempotency_key}-{b + 1}"
            try:
                r = c.learn_batch(model, task, rows.X[start:start + batch_size], rows.y[start:start + batch_size],
                                  idempotency_key=key)
            except FCL3Error as exc:
                raise _fail(exc, f"refused rows from {file}:{rows.lines[start]}") from None
            u = r.update
            click.echo(f"learned {len(rows.X[start:start + batch_size])} rows of task {task!r}"
                       f"{' (already applied: replayed)' if r.replayed else ''}: version {u.version}, "
                       f"{u.n_samples} samples, {u.n_representatives} representatives"
                       f"{', new representative' if u.new_representative else ''}")


@main.command()
@click.argument("model")
@click.argument("task")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--min-version", default=None, type=click.IntRange(0), help="Answer from this model version or a later one.")
@click.option("--json", "as_json", is_flag=True, help="Print the service's answer as JSON.")
@click.option("--remember", is_flag=True, help="Keep the rows for labels that arrive later: a prediction_id "
              "column comes first, for 'fcl3 label'.")
@connection_options
def predict(model, task, file, min_version, as_json, remember, url, api_key, timeout, retries):
    """Predict the rows of FILE for task TASK of MODEL.

    FILE is a CSV with a header and the features in its columns ('task' and 'y' columns, if
    any, are ignored). Prints one prediction per row (and the probability of the positive class
    for classification) as CSV; with --remember, each row's prediction id first.
    """
    rows = read_csv(file, task="ignored", target="ignored")
    with _client(url, api_key, timeout, retries) as c:
        out = None
        for start in range(0, len(rows.X), MAX_BATCH):
            try:
                got = c.predict(model, task, rows.X[start:start + MAX_BATCH], min_version=min_version,
                                remember=remember)
            except FCL3Error as exc:
                raise _fail(exc, f"refused rows from {file}:{rows.lines[start]}") from None
            if out is None:
                out = got
            else:
                out.predictions += got.predictions
                if out.probabilities is not None:
                    out.probabilities += got.probabilities or []
                if out.prediction_ids is not None:
                    out.prediction_ids += got.prediction_ids or []
    if as_json:
        _echo_json(out.model_dump(mode="json", exclude_none=True))
        return
    ids = out.prediction_ids
    click.echo(("prediction_id," if ids is not None else "")
               + ("prediction,probability" if out.probabilities is not None else "prediction"))
    for i, p in enumerate(out.predictions):
        line = f"{p!r},{out.probabilities[i]!r}" if out.probabilities is not None else repr(p)
        click.echo(f"{ids[i]},{line}" if ids is not None else line)


#: Column names of the prediction id in a labels file (the first one found is used).
ID_COLUMNS = ("prediction_id", "id")


def read_labels(path: str | os.PathLike) -> tuple[list[str], list[float], list[str] | None, list[int]]:
    """A labels file: a CSV with a header, a 'prediction_id' column and a 'y' column (and
    optionally 'task'). Returns the ids, labels, tasks (None without the column) and line
    numbers; :class:`BadFile` naming the file, line and column of the first problem."""
    path = Path(path)
    ids: list[str] = []
    ys: list[float] = []
    tasks: list[str] = []
    lines: list[int] = []
    with _open_text(path) as f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
            if header is None:
                raise BadFile(path, "empty file: expected a header line (prediction_id, y)", 1)
            header = [h.strip() for h in header]
            i_col, y_col, t_col = _find(header, ID_COLUMNS), _find(header, TARGET_COLUMNS), _find(header, TASK_COLUMNS)
            if i_col is None or y_col is None:
                raise BadFile(path, f"expected a 'prediction_id' and a 'y' column (columns: {', '.join(header)})",
                              reader.line_num)
            seen: dict[str, int] = {}
            for line, record in data_lines(reader, header, path):
                pid = record[i_col].strip()
                if not pid:
                    raise BadFile(path, "empty prediction id", line, i_col + 1, header[i_col])
                if pid in seen:
                    raise BadFile(path, f"prediction id {pid!r} again (first at line {seen[pid]}): each row is "
                                  "labelled once", line, i_col + 1, header[i_col])
                seen[pid] = line
                ids.append(pid)
                ys.append(_number(record[y_col], path, line, y_col + 1, header[y_col]))
                if t_col is not None:
                    tasks.append(record[t_col].strip())
                lines.append(line)
        except csv.Error as exc:
            raise BadFile(path, f"not a valid CSV file: {exc}", reader.line_num) from None
        except UnicodeDecodeError as exc:
            raise BadFile(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not ids:
        raise BadFile(path, "no labels after the header")
    return ids, ys, (tasks if t_col is not None else None), lines


@main.command()
@click.argument("model")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--idempotency-key", default=None, metavar="KEY",
              help="Key of the request (KEY-1, KEY-2, ... for several batches); run again with the same "
                   "key, nothing is learned twice. Default: new keys.")
@connection_options
def label(model, file, idempotency_key, url, api_key, timeout, retries):
    """Learn earlier predictions of MODEL with the labels in FILE.

    FILE is a CSV with a header, a 'prediction_id' column (the ids 'fcl3 predict --remember'
    printed) and a 'y' column. Each request learns one batch of one task: with a 'task' column
    the rows are sent one batch per task, else every id must be of one task. An id labelled
    already, unknown or expired stops the command with the service's reason (nothing of that
    batch is learned).
    """
    ids, ys, tasks, lines = read_labels(file)
    groups: dict[str, list[int]] = {}
    for i in range(len(ids)):
        groups.setdefault(tasks[i] if tasks is not None else "", []).append(i)
    chunks = [idx[k:k + MAX_BATCH] for idx in groups.values() for k in range(0, len(idx), MAX_BATCH)]
    with _client(url, api_key, timeout, retries) as c:
        for n, idx in enumerate(chunks, 1):
            key = None
            if idempotency_key:
                key = idempotency_key if len(chunks) == 1 else f"{idempotency_key}-{n}"
            try:
                r = c.label_batch(model, [(ids[i], ys[i]) for i in idx], idempotency_key=key)
            except FCL3Error as exc:
                raise _fail(exc, f"refused labels from {file}:{lines[idx[0]]}",
                            f"{n - 1} of {len(chunks)} batches were learned") from None
            u = r.update
            preq = _scores(u.prequential)
            click.echo(f"learned {len(idx)} labelled rows of task {u.task_id!r}"
                       f"{' (already applied: replayed)' if r.replayed else ''}: version {u.version}, "
                       f"{u.n_samples} samples" + (f"; served predictions: {_metrics(preq)}" if preq else ""))


@main.command("take-back")
@click.argument("model")
@click.argument("version", type=click.IntRange(1, 2**31 - 1))
@click.option("--idempotency-key", default=None, metavar="KEY",
              help="Key of the request; run again with the same key, the batch is taken back once. Default: a "
                   "new key.")
@connection_options
def take_back(model, version, idempotency_key, url, api_key, timeout, retries):
    """Take back the batch of MODEL that produced VERSION.

    The model becomes what it would have been without that batch (its other batches replayed
    in their order), as a new version. A batch taken back already, a fork's inherited batch or
    a model whose batches are not stored (an import) stops the command with the service's
    reason, and nothing changes.
    """
    with _client(url, api_key, timeout, retries) as c:
        try:
            r = c.take_back(model, version, idempotency_key=idempotency_key)
        except FCL3Error as exc:
            hint = ""
            if isinstance(exc, APIError) and exc.status == 410:
                hint = f"(taken back by version {exc.headers.get('X-Model-Version', '?')})"
            raise _fail(exc, f"batch {version} of model {model!r} not taken back", hint) from None
    task = (f"task {r.task_id!r} removed (it was its only batch)" if r.task_removed
            else f"task {r.task_id!r} keeps {r.task_n_samples} rows")
    click.echo(f"took back batch {r.batch_version} of model {model!r} ({r.n_samples} rows): version {r.version}, "
               f"{r.n_replayed} batches replayed; {task}")


@main.command()
@click.argument("model")
@click.argument("task", required=False)
@connection_options
def tasks(model, task, url, api_key, timeout, retries):
    """Show MODEL's tasks (or one TASK) as JSON."""
    with _client(url, api_key, timeout, retries) as c:
        _echo_json(c.task(model, task) if task else c.tasks(model))


@main.command()
@click.argument("model")
@click.option("--last-event-id", default=None, metavar="VERSION", help="Resume after this model version.")
@click.option("--count", default=None, type=click.IntRange(1), help="Stop after this many events.")
@connection_options
def events(model, last_event_id, count, url, api_key, timeout, retries):
    """Follow MODEL's events (one JSON object per line) until interrupted."""
    with _client(url, api_key, timeout, retries) as c:
        for i, ev in enumerate(c.events(model, last_event_id=last_event_id), 1):
            data = ev.data.model_dump(mode="json") if hasattr(ev.data, "model_dump") else ev.data
            click.echo(json.dumps({"id": ev.id, "event": ev.event, "data": data}, ensure_ascii=False))
            if count is not None and i >= count:
                break


# ----------------------------------------------------------------------------- replay
@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--model", required=True, help="The model to learn (created if it does not exist).")
@click.option("--kind", type=click.Choice(["regression", "classification"]), default=None,
              help="Kind of a model created here (default: an .npz's own; for a CSV, classification "
                   "when every y is 0/1 or -1/1).")
@click.option("--batch-size", default=50, show_default=True, type=click.IntRange(1, MAX_BATCH), help="Rows per batch.")
@click.option("--order", type=click.Choice(["file", "random"]), default="file", show_default=True,
              help="file: runs of consecutive rows of a task, in file order; random: each task's rows "
                   "shuffled and the batches of all tasks interleaved at random.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of --order random and --holdout.")
@click.option("--holdout", default=0.0, show_default=True, type=click.FloatRange(0, 1, max_open=True), metavar="F",
              help="Fraction of each task's rows kept as its evaluation rows, not learned.")
@click.option("--estimator", default="FCL3", show_default=True, help="Learner of a model created here.")
@click.option("--params", default=None, metavar="JSON", help="Hyper-parameters of a model created here.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--delay", default=None, type=click.IntRange(0), metavar="N",
              help="Labels that arrive later: each batch (but a task's first) is predicted with remember, and "
                   "its labels are sent N batches later (0: right after its prediction).")
@click.option("--task-column", default=None, metavar="NAME",
              help="Records: the CSV's column of task ids (the other columns but the target are named features, "
                   "sent as records; default 'task' when a records option is given).")
@click.option("--target-column", default=None, metavar="NAME", help="Records: the CSV's target column (default 'y').")
@click.option("--categorical", multiple=True, metavar="NAME",
              help="Records: a column that is a category even if its values are numbers (repeat, or comma-separated).")
@click.option("--infer-schema", "infer_schema_", is_flag=True,
              help="Records: infer the feature schema from the file (numbers, booleans, categories with their "
                   "levels, nullable where a cell is empty), print it, and create the model with it.")
@connection_options
def replay(path, model, kind, batch_size, order, seed, holdout, estimator, params, as_json, quiet, delay,
           task_column, target_column, categorical, infer_schema_, url, api_key, timeout, retries):
    """Stream the data set PATH into MODEL of a running service.

    PATH is a CSV with a 'task' column, a 'y' column and the features in the other columns,
    or an .npz in the layout of the paper's data sets (n_tasks, kind, X_i, y_i, task_ids).
    The whole file is checked before anything is sent. Each batch is sent with an
    Idempotency-Key derived from the file's content, the model, the task and the batch's
    index: a replay that was interrupted and is run again (with the same options) applies
    every row exactly once. With --delay N, the batch is predicted (remembered) first and its
    labels sent N batches later: the prequential figures are then those of predictions made
    N batches before the labels came (a task's first batch is learned at once).
    """
    categorical = [c.strip() for v in categorical for c in v.split(",") if c.strip()]
    as_records = bool(task_column or target_column or categorical or infer_schema_)
    schema = None
    if as_records:
        rows, cells = read_records_csv(path, task_column or "task", target_column or "y")
        if infer_schema_ or categorical:
            try:
                schema = infer_schema(cells, categorical)
            except RecordError as exc:
                raise click.BadParameter(str(exc), param_hint="--categorical") from None
        if infer_schema_ and not as_json:
            click.echo(f"schema inferred from {path} ({len(schema)} features):\n{format_schema(schema)}")
    else:
        rows = read_dataset(path)
    file_kind = rows.kind or infer_kind(rows.y)
    if kind is not None and rows.kind is not None and kind != rows.kind:
        raise click.BadParameter(f"{path} holds a {rows.kind} data set", param_hint="--kind")
    batches, held = plan_batches(rows, batch_size, order, seed, holdout)
    digest = file_digest(path)
    for b in batches:
        b.key = replay_key(digest, model, b.task, b.index)
    extra = _params(params)
    started = time.monotonic()
    with _client(url, api_key, timeout, retries) as c:
        try:
            info = c.get_model(model)
            created = False
            if kind is not None and info.kind != kind:
                raise click.ClickException(f"model {model!r} is a {info.kind} model, not {kind}")
            if info.kind != file_kind and rows.kind is not None:
                raise click.ClickException(f"model {model!r} is a {info.kind} model but {path} is a {rows.kind} data set")
            if as_records:
                if not info.features:
                    raise click.ClickException(f"model {model!r} has no feature schema: it takes rows of numbers "
                                               "(replay without the records options), or use another model")
                typed_rows(rows, parse_schema(info.features))  # the model's own schema
            elif info.d is not None and info.d != rows.width:
                raise click.ClickException(f"model {model!r} has {info.d} features but {path} has {rows.width}")
        except NotFound:
            if as_records and schema is None:
                raise click.ClickException(f"model {model!r} does not exist: pass --infer-schema (and --categorical) "
                                           "to create it with the schema of the file") from None
            if as_records:
                typed_rows(rows, schema)
            info = c.create_model(model, kind or file_kind, estimator=estimator, params=extra,
                                  features=None if schema is None else schema_json(schema))
            created = True
        except FCL3Error as exc:
            raise _fail(exc, f"cannot reach model {model!r} at {url}") from None
        summary = _send(c, rows, batches, held, model, path, quiet, delay)
        info = c.get_model(model)
        if as_records:
            summary.update(features=info.features, columns=len(info.columns or []))
        summary.update(model=model, url=url, file=str(path), created=created, kind=info.kind,
                       representatives=info.n_representatives, version=info.version,
                       seconds=round(time.monotonic() - started, 2))
        _prequential(summary, info)
        if held:
            _evaluation(summary, c, model, info.n_tasks)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        _print_summary(summary)


def _deliver(c: Client, model: str, pending: list, now: float, counts: dict) -> None:
    """``fcl3 replay --delay``: label the remembered batches due by batch ``now``, oldest first.
    A label's key names the batch's rows: a replay run again gets 422 for a batch an earlier
    run labelled (its rows remembered again under new ids), which is counted as applied."""
    while pending and pending[0][0] <= now:
        _, b, ids, y = pending.pop(0)
        key = "fcl3-label-" + hashlib.sha256(json.dumps([b.key, b.rows]).encode()).hexdigest()[:48]
        try:
            r = c.label_batch(model, list(zip(ids, y)), idempotency_key=key)
        except APIError as exc:
            if exc.status == 422 and "Idempotency-Key" in exc.message:
                counts["replayed"] += 1
                counts["replayed_rows"] += len(y)
                continue
            raise _fail(exc, f"the labels of batch {b.index + 1} of task {b.task!r} were refused") from None
        counts["labelled"] += 1
        if r.replayed:
            counts["replayed"] += 1
            counts["replayed_rows"] += len(y)


def _send(c: Client, rows: Rows, batches: list[PlannedBatch], held: dict[str, list[int]], model: str,
          path: Path, quiet: bool, delay: int | None = None) -> dict:
    from tqdm import tqdm

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
    bar = tqdm(total=n_rows, unit="row", desc=f"replay {model}", file=sys.stderr,
               disable=quiet, dynamic_ncols=True, leave=False)
    done = 0
    pending: list = []  # --delay: (due at batch, batch, prediction ids, labels)
    counts = {"labelled": 0, "replayed": 0, "replayed_rows": 0}
    try:
        for n, b in enumerate(batches, 1):
            X = [rows.X[i] for i in b.rows]
            y = [rows.y[i] for i in b.rows]
            if b.task in held and b.task not in evaluation_sent:
                # before the task's first batch: the accuracy-matrix row of that batch scores the
                # task just after it was learned (the diagonal, which BWT and FWT need)
                idx = held[b.task]
                try:
                    c.add_evaluation(model, b.task, [rows.X[i] for i in idx], [rows.y[i] for i in idx])
                except FCL3Error as exc:
                    bar.close()
                    raise _fail(exc, f"the evaluation rows of task {b.task!r} were refused",
                                f"{done} of {len(batches)} batches were applied; run the same command again to resume") from None
                evaluation_sent.add(b.task)
            try:
                if delay is not None and b.index > 0:  # predicted now, labelled `delay` batches later
                    r = None
                    pending.append((n + delay, b, c.predict(model, b.task, X, remember=True).prediction_ids, y))
                else:
                    r = c.learn_batch(model, b.task, X, y, idempotency_key=b.key)
                _deliver(c, model, pending, n, counts)
            except FCL3Error as exc:
                bar.close()
                at = sorted(rows.lines[i] for i in b.rows)
                if rows.kind is not None:  # an .npz: rows of the task's arrays
                    lines = f"{path}, rows {at[0]}-{at[-1]} of the task's X_i, y_i"
                else:
                    lines = f"{path}:{at[0]}" + (f"-{at[-1]}" if at[-1] != at[0] else "")
                hint = (f"{done} of {len(batches)} batches were applied; run the same command again to resume "
                        "(every batch is applied once)")
                if isinstance(exc, APIError) and exc.status == 422 and "Idempotency-Key" in exc.message:
                    hint = ("this file was replayed into this model before with other options (--batch-size, "
                            "--order, --seed, --holdout): run it with the same options to resume, or use another model")
                raise _fail(exc, f"batch {b.index + 1} of task {b.task!r} ({lines}) was refused", hint) from None
            done += 1
            if b.task not in seen_tasks:
                seen_tasks.add(b.task)
                new_tasks += bool(r is not None and r.update.new_task)
            if r is not None and r.replayed:
                replayed_batches += 1
                replayed_rows += len(y)
            bar.update(len(y))
            bar.set_postfix(tasks=len(seen_tasks), batches=f"{n}/{len(batches)}", refresh=False)
        try:
            _deliver(c, model, pending, float("inf"), counts)  # the labels still on their way
        except FCL3Error as exc:
            raise _fail(exc, "the last delayed labels were refused") from None
    except KeyboardInterrupt:
        bar.close()
        click.echo(f"fcl3 replay: interrupted after {done} of {len(batches)} batches; run the same command "
                   "again to resume (every batch is applied once)", err=True)
        raise SystemExit(130) from None
    finally:
        bar.close()
    out = {"tasks": len(seen_tasks), "new_tasks": new_tasks, "batches": len(batches),
           "replayed_batches": replayed_batches + counts["replayed"], "rows": n_rows,
           "replayed_rows": replayed_rows + counts["replayed_rows"], "held_out_rows": sum(len(v) for v in held.values())}
    if delay is not None:
        out.update(delay=delay, labelled_batches=counts["labelled"])
    return out


def _scores(s: Any) -> dict | None:
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


def _prequential(summary: dict, info) -> None:
    """The model's prequential scores (each batch predicted just before it was learned) beside
    the baseline (each task's own single-task model), as the service reports them."""
    preq = getattr(info, "prequential", None)
    if preq is not None:
        summary["prequential"] = _scores(preq.overall)
        summary["prequential_recent"] = _scores(preq.recent)
        summary["prequential_window"] = preq.window


def _evaluation(summary: dict, c: Client, model: str, n_tasks: int, wait: float = 60.0, stall: float = 5.0) -> None:
    """Scores on the held-out rows (pooled over the tasks), and the transfer figures.

    The service computes the accuracy matrix's rows (one per new task) in the background,
    after the updates answered: wait (at most ``wait`` s, and no longer than ``stall`` s
    without a new row, e.g. with ``EVALUATION_MATRIX=false``) until it holds a row per task."""
    deadline = time.monotonic() + wait
    seen, moved = -1, time.monotonic()
    while True:
        try:
            ev = c.evaluation(model, limit=0)
        except FCL3Error as exc:
            summary["evaluation_error"] = str(exc)
            return
        n_rows, now = len(ev.accuracy_matrix.rows), time.monotonic()
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


def _metrics(s: dict, prefix: str = "") -> str:
    return ", ".join(f"{m} {s[prefix + m]:.4g}" for m in ("rmse", "mae", "log_loss", "accuracy", "auc")
                     if s.get(prefix + m) is not None)


def _print_summary(s: dict) -> None:
    out = [f"replayed {s['file']} into model {s['model']!r} at {s['url']}"
           f" ({'created, ' if s['created'] else ''}{s['kind']}) in {s['seconds']} s"]
    out.append(f"  tasks            {s['tasks']} ({s['new_tasks']} new)")
    out.append(f"  batches          {s['batches']} ({s['batches'] - s['replayed_batches']} learned now, "
               f"{s['replayed_batches']} already applied)")
    if s.get("delay") is not None:
        out.append(f"  delayed labels   {s['labelled_batches']} batches predicted first, labelled "
                   f"{s['delay']} batches later")
    out.append(f"  rows             {s['rows']} ({s['rows'] - s['replayed_rows']} learned now)"
               + (f", {s['held_out_rows']} held out for evaluation" if s['held_out_rows'] else ""))
    if s.get("features"):
        out.append(f"  records          {len(s['features'])} features encoded into {s['columns']} columns")
    out.append(f"  representatives  {s['representatives']}")
    out.append(f"  model version    {s['version']}")
    p, r = s.get("prequential"), s.get("prequential_recent")
    if p:
        out.append(f"  prequential      {_metrics(p)} on {p['n']} rows, each predicted before it was learned")
        out.append(f"    baseline       {_metrics(p, 'baseline_')} (each task's own single-task model)")
        if r and r.get("n") != p.get("n"):
            out.append(f"    last {s['prequential_window']} batches {_metrics(r)}; baseline {_metrics(r, 'baseline_')}")
    e = s.get("evaluation")
    if e:
        out.append(f"  held-out rows    {_metrics(e)} on {e['n']} rows of {e['tasks']} tasks")
        out.append(f"    baseline       {_metrics(e, 'baseline_')}")
        figs = [f"{k.replace('_', ' ')} {e[k]:+.4g}" for k in ("forward_transfer", "backward_transfer", "forgetting")
                if e.get(k) is not None]
        if figs:
            out.append(f"    transfer       {', '.join(figs)} (accuracy matrix of {s.get('matrix_rows')} rows; "
                       "transfer > 0 helps, forgetting > 0 hurts)")
    click.echo("\n".join(out))


if __name__ == "__main__":  # pragma: no cover
    main()
