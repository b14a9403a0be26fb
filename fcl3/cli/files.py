"""The input files of the ``fcl3`` command, read and checked in full before anything is sent:
CSV files of rows (a task column, a target column, features), CSV files of records (named
features, typed by a schema), ``.npz`` files in the layout of the paper's data sets, and
CSV files of labels. A bad file is :class:`~fcl3.cli.errors.BadFile`, naming its file, line
and column."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ..records import RecordError, Schema, check_records, typed_records
from .errors import BadFile

#: Column names of the task id and the target in a CSV file (the first one found is used).
TASK_COLUMNS = ("task", "task_id")
TARGET_COLUMNS = ("y", "target")


def data_lines(reader: Any, header: list[str], path: str | os.PathLike[str]) -> Iterator[tuple[int, list[str]]]:
    """The CSV ``reader``'s records after the header, with their line numbers; blank lines are
    skipped and a record of another width than ``header`` is :class:`BadFile`."""
    for record in reader:
        if not record or (len(record) == 1 and not record[0].strip()):
            continue
        if len(record) != len(header):
            raise BadFile(
                path,
                f"{len(record)} values, but the header has {len(header)} columns (every row must have the same width)",
                reader.line_num,
            )
        yield reader.line_num, record


@dataclass
class Rows:
    """The rows of an input file, in file order: ``tasks[i]``, ``X[i]``, ``y[i]`` (``None``
    without a target) and ``lines[i]`` (the line number in a CSV, the row number in an .npz)."""

    path: Path
    columns: list[str]
    X: list[Any] = field(default_factory=list)  # rows of numbers, or records (a CSV of records)
    y: list[float] | None = None
    tasks: list[str] | None = None
    lines: list[int] = field(default_factory=list)
    kind: str | None = None  # from an .npz
    header: list[str] | None = None  # a CSV of records: every column's name, in order

    @property
    def width(self) -> int:
        return len(self.columns)


def _open_text(path: Path) -> TextIO:
    if not path.exists():
        raise BadFile(path, "no such file")
    if path.is_dir():
        raise BadFile(path, "is a directory, not a file")
    try:
        return open(path, newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise BadFile(path, f"cannot be read: {exc.strerror or exc}") from None


@contextlib.contextmanager
def csv_reader(path: Path) -> Iterator[Any]:
    """A :func:`csv.reader` over the file at ``path`` (UTF-8, a byte-order mark skipped): a
    malformed CSV or text that is not UTF-8, met while the block reads it, is :class:`BadFile`
    at the line reached."""
    with _open_text(path) as f:
        reader = csv.reader(f)
        try:
            yield reader
        except csv.Error as exc:
            raise BadFile(path, f"not a valid CSV file: {exc}", reader.line_num) from None
        except UnicodeDecodeError as exc:
            raise BadFile(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _find(header: list[str], names: Iterable[str]) -> int | None:
    lowered = [h.strip().lower() for h in header]
    for n in names:
        if n in lowered:
            return lowered.index(n)
    return None


def read_csv(path: str | os.PathLike[str], *, task: str = "required", target: str = "required") -> Rows:
    """Read a CSV file with a header line. ``task``/``target``: ``required``, ``optional``
    (used when present) or ``ignored`` (dropped when present); every other column is a feature.
    Raises :class:`BadFile` naming the file, line and column of the first problem."""
    path = Path(path)
    with csv_reader(path) as reader:
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
                raise BadFile(
                    path,
                    f"no {names[0]!r} column in the header (columns: {', '.join(header)}); "
                    f"expected {' or '.join(repr(n) for n in names)} and the features",
                    header_line,
                )
        t_col_use = None if task == "ignored" else t_col
        y_col_use = None if target == "ignored" else y_col
        skip = {c for c in (t_col, y_col) if c is not None}
        features = [i for i in range(len(header)) if i not in skip]
        if not features:
            raise BadFile(path, "no feature columns in the header", header_line)
        for i in features:
            if not header[i]:
                raise BadFile(path, "empty column name in the header", header_line, i + 1)
        ys: list[float] = []
        task_ids: list[str] = []
        rows = Rows(
            path,
            [header[i] for i in features],
            y=ys if y_col_use is not None else None,
            tasks=task_ids if t_col_use is not None else None,
        )
        for line, record in data_lines(reader, header, path):
            x = []
            for i in features:
                x.append(_number(record[i], path, line, i + 1, header[i]))
            rows.X.append(x)
            rows.lines.append(line)
            if y_col_use is not None:
                ys.append(_number(record[y_col_use], path, line, y_col_use + 1, header[y_col_use]))
            if t_col_use is not None:
                tid = record[t_col_use].strip()
                if not tid:
                    raise BadFile(path, "empty task id", line, t_col_use + 1, header[t_col_use])
                if len(tid) > 200:
                    raise BadFile(path, "task id longer than 200 characters", line, t_col_use + 1, header[t_col_use])
                task_ids.append(tid)
    if not rows.X:
        raise BadFile(path, "no data rows after the header", header_line)
    return rows


def read_records_csv(
    path: str | os.PathLike[str], task_column: str, target_column: str
) -> tuple[Rows, dict[str, list[str]]]:
    """Read a CSV of named columns for records: the rows (``X[i]``: the features of a row as
    a dict of its cells, as text) and each feature column's cells (for a schema to infer).
    :class:`BadFile` naming the line and column of the first problem."""
    path = Path(path)
    with csv_reader(path) as reader:
        header = next(reader, None)
        if header is None:
            raise BadFile(path, "empty file: expected a header line naming the columns", 1)
        header_line = reader.line_num
        header = [h.strip() for h in header]
        for name, what in ((task_column, "--task-column"), (target_column, "--target-column")):
            if name not in header:
                raise BadFile(
                    path, f"no column {name!r} ({what}) in the header (columns: {', '.join(header)})", header_line
                )
        if len(set(header)) != len(header) or not all(header):
            raise BadFile(path, "the header must name every column once", header_line)
        t, yc = header.index(task_column), header.index(target_column)
        features = [i for i in range(len(header)) if i not in (t, yc)]
        if not features:
            raise BadFile(path, "no feature columns in the header", header_line)
        ys: list[float] = []
        task_ids: list[str] = []
        rows = Rows(path, [header[i] for i in features], y=ys, tasks=task_ids, header=header)
        cells: dict[str, list[str]] = {header[i]: [] for i in features}
        for line, record in data_lines(reader, header, path):
            tid = record[t].strip()
            if not tid or len(tid) > 200:
                raise BadFile(
                    path, "empty task id" if not tid else "task id longer than 200 characters", line, t + 1, task_column
                )
            task_ids.append(tid)
            ys.append(_number(record[yc], path, line, yc + 1, target_column))
            rows.X.append({header[i]: record[i] for i in features})
            rows.lines.append(line)
            for i in features:
                cells[header[i]].append(record[i])
    if not rows.X:
        raise BadFile(path, "no data rows after the header", header_line)
    return rows, cells


def typed_rows(rows: Rows, schema: Schema) -> None:
    """``rows.X`` as records of ``schema`` (numbers and booleans parsed), each checked:
    :class:`BadFile` naming the line and column of the first one the service would refuse."""
    records = typed_records(schema, rows.X)
    for rec, line in zip(records, rows.lines, strict=True):
        try:
            check_records(schema, [rec])
        except RecordError as exc:
            column = rows.header.index(exc.field) + 1 if rows.header and exc.field in rows.header else None
            raise BadFile(
                rows.path, str(exc).replace("records[0].", "").replace("records[0]", "the row"), line, column, exc.field
            ) from None
    rows.X = records


def format_schema(schema: Schema) -> str:
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
        raise BadFile(
            path, f"{s!r} is not a number" if s else "empty value (a number is required)", line, column, name
        ) from None
    if not math.isfinite(v):
        raise BadFile(path, f"{s!r} is not a finite number", line, column, name)
    return v


def read_npz(path: str | os.PathLike[str]) -> Rows:
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
        ys: list[float] = []
        task_ids: list[str] = []
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
                rows = Rows(path, cols, y=ys, tasks=task_ids, kind=kind)
            if X.shape[1] != rows.width:
                raise BadFile(
                    path,
                    f"X_{i} has {X.shape[1]} columns but X_0 has {rows.width} (every task must have the same features)",
                )
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
            ys += y.tolist()
            task_ids += [ids[i]] * len(y)
            rows.lines += list(range(len(y)))
    if rows is None or not rows.X:
        raise BadFile(path, "no rows (n_tasks is 0)")
    return rows


def read_dataset(path: str | os.PathLike[str]) -> Rows:
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


#: Column names of the prediction id in a labels file (the first one found is used).
ID_COLUMNS = ("prediction_id", "id")


def read_labels(path: str | os.PathLike[str]) -> tuple[list[str], list[float], list[str] | None, list[int]]:
    """A labels file: a CSV with a header, a 'prediction_id' column and a 'y' column (and
    optionally 'task'). Returns the ids, labels, tasks (None without the column) and line
    numbers; :class:`BadFile` naming the file, line and column of the first problem."""
    path = Path(path)
    ids: list[str] = []
    ys: list[float] = []
    tasks: list[str] = []
    lines: list[int] = []
    with csv_reader(path) as reader:
        header = next(reader, None)
        if header is None:
            raise BadFile(path, "empty file: expected a header line (prediction_id, y)", 1)
        header = [h.strip() for h in header]
        i_col, y_col, t_col = _find(header, ID_COLUMNS), _find(header, TARGET_COLUMNS), _find(header, TASK_COLUMNS)
        if i_col is None or y_col is None:
            raise BadFile(
                path, f"expected a 'prediction_id' and a 'y' column (columns: {', '.join(header)})", reader.line_num
            )
        seen: dict[str, int] = {}
        for line, record in data_lines(reader, header, path):
            pid = record[i_col].strip()
            if not pid:
                raise BadFile(path, "empty prediction id", line, i_col + 1, header[i_col])
            if pid in seen:
                raise BadFile(
                    path,
                    f"prediction id {pid!r} again (first at line {seen[pid]}): each row is labelled once",
                    line,
                    i_col + 1,
                    header[i_col],
                )
            seen[pid] = line
            ids.append(pid)
            ys.append(_number(record[y_col], path, line, y_col + 1, header[y_col]))
            if t_col is not None:
                tasks.append(record[t_col].strip())
            lines.append(line)
    if not ids:
        raise BadFile(path, "no labels after the header")
    return ids, ys, (tasks if t_col is not None else None), lines
