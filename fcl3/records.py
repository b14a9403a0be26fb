"""Records instead of matrices: a model's feature schema and the encoding of records (dicts of
named values) into the numeric rows the engine learns. Pure functions, no I/O, no numpy: the
service encodes with them, the client infers a schema and converts DataFrames with them.

The rules (docs/records.md):

* A **schema** is an ordered list of features, each ``{"name", "type", "nullable", "fill"}``
  with ``type`` one of ``number``, ``category``, ``boolean``.
* **Columns.** A number or a boolean (``true`` = 1, ``false`` = 0) is one column; a nullable
  one has a second column, its *missing indicator* (1 where the value is ``null`` or absent).
  A category is one-hot: one column per level, appended to the model's vocabulary the first
  time a batch to learn holds that level (its place is the vocabulary's order of arrival, never
  reordered); a nullable category has one more column, its missing level, from the start.
* **Missing values** (``null`` or an absent key) of a nullable number or boolean are encoded
  as the feature's ``fill`` (default 0) with the indicator 1: never a silent 0 — the indicator's
  weight learns what a missing value means, and with it the fill only moves how that effect is
  split between the indicator and the intercept, which the ridge penalty then weighs. A
  missing value of a feature that is not nullable is refused (422 naming the field).
* **A level never learned** (at prediction) is encoded with every column of its category at
  0: what a stored task predicts for a level it has not learned either (its new columns enter
  with weight 0). The answer of ``/predict`` lists such levels (``unseen``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FEATURE_TYPES = ("number", "category", "boolean")
#: The largest number of features a schema may declare.
MAX_FEATURES = 1000
#: The longest feature name and category level.
MAX_NAME = 200
#: Characters an id, a feature name or a level may not hold: control characters (U+0000-U+001F,
#: U+007F-U+009F) and lone surrogates. PostgreSQL cannot store NUL or a lone surrogate in text
#: and SQLite can, so a model holding one could not move between them; the other control
#: characters are refused with them (one rule, the same on every backend).
UNSTORABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
#: A number as JSON writes it (RFC 8259), the grammar of a number cell of a ``text/csv`` body.
JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


class RecordError(ValueError):
    """A schema, a record or a CSV the rules refuse; ``field`` names the feature (or key)
    at fault and ``row`` the record's index (``None``: not a row's)."""

    def __init__(self, message: str, field: str | None = None, row: int | None = None):
        super().__init__(message)
        self.field, self.row = field, row


@dataclass(frozen=True)
class Feature:
    """One named input: ``type`` one of :data:`FEATURE_TYPES`; ``nullable``: may be ``null`` or
    absent; ``fill``: the value a missing number or boolean is encoded with (beside its
    missing indicator)."""

    name: str
    type: str
    nullable: bool = False
    fill: float = 0.0
    #: A category's levels known in advance (their columns exist from the start).
    levels: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "nullable": self.nullable}
        if self.type != "category":
            out["fill"] = self.fill
        elif self.levels:
            out["levels"] = list(self.levels)
        return out


@dataclass(frozen=True)
class Column:
    """One column of the encoded rows: ``role`` ``value`` (a number or boolean), ``missing``
    (its indicator, or a category's missing level) or ``level`` (a category's one-hot level)."""

    feature: str
    role: str
    level: str = ""

    def label(self) -> str:
        if self.role == "value":
            return self.feature
        if self.role == "missing":
            return f"{self.feature}=null"
        return f"{self.feature}={self.level}"

    def to_json(self) -> dict[str, Any]:
        return {"feature": self.feature, "role": self.role, "level": self.level}


Schema = tuple[Feature, ...]


def parse_schema(features: Any) -> Schema:
    """A schema from its JSON form (a list of feature objects); :class:`RecordError` naming the
    entry at fault."""
    if not isinstance(features, (list, tuple)) or not features:
        raise RecordError("features must be a non-empty list of {name, type} objects", "features")
    if len(features) > MAX_FEATURES:
        raise RecordError(f"at most {MAX_FEATURES} features, got {len(features)}", "features")
    out, seen = [], set()
    for i, f in enumerate(features):
        if isinstance(f, Feature):
            f = f.to_json()
        if not isinstance(f, Mapping):
            raise RecordError(f"features[{i}] must be an object with name and type", f"features[{i}]")
        unknown = set(f) - {"name", "type", "nullable", "fill", "levels"}
        if unknown:
            raise RecordError(f"features[{i}] has unknown keys {sorted(unknown)}", f"features[{i}]")
        name, kind = f.get("name"), f.get("type")
        if not isinstance(name, str) or not name or len(name) > MAX_NAME:
            raise RecordError(f"features[{i}].name must be a string of 1-{MAX_NAME} characters", f"features[{i}]")
        if UNSTORABLE.search(name):
            raise RecordError(f"features[{i}].name {_unstorable(name)}", f"features[{i}]")
        if name in seen:
            raise RecordError(f"feature {name!r} is declared twice", name)
        if kind not in FEATURE_TYPES:
            raise RecordError(f"feature {name!r}: type must be one of {', '.join(FEATURE_TYPES)}, got {kind!r}", name)
        nullable = f.get("nullable", False)
        if not isinstance(nullable, bool):
            raise RecordError(f"feature {name!r}: nullable must be true or false", name)
        fill = f.get("fill", 0.0)
        if kind == "category" and "fill" in f:
            raise RecordError(f"feature {name!r}: a category takes no fill (its missing value is a level)", name)
        if isinstance(fill, bool) or not isinstance(fill, (int, float)) or not math.isfinite(fill):
            raise RecordError(f"feature {name!r}: fill must be a finite number", name)
        levels = f.get("levels") or ()
        if levels and kind != "category":
            raise RecordError(f"feature {name!r}: only a category has levels", name)
        if not isinstance(levels, (list, tuple)):
            raise RecordError(f"feature {name!r}: levels must be a list of strings", name)
        for v in levels:
            if level_of(v) is None:
                raise RecordError(f"feature {name!r}: a declared level {level_refusal(v)}", name)
        levels = tuple(dict.fromkeys(level_of(v) for v in levels))
        seen.add(name)
        out.append(Feature(name, kind, nullable, float(fill), levels))
    return tuple(out)


def schema_json(schema: Schema) -> list[dict[str, Any]]:
    return [f.to_json() for f in schema]


def base_columns(schema: Schema) -> list[Column]:
    """The columns every model of ``schema`` has from the start, in schema order: each
    feature's value and missing indicator, then the levels declared in advance."""
    cols = []
    for f in schema:
        if f.type != "category":
            cols.append(Column(f.name, "value"))
        if f.nullable:
            cols.append(Column(f.name, "missing"))
    return cols + [Column(f.name, "level", lv) for f in schema for lv in f.levels]


def _number(value: Any) -> bool:
    """A finite number a float holds (an integer past the float range is not one)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past 1.8e308
        return False


def _unstorable(text: str) -> str:
    bad = UNSTORABLE.search(text)
    assert bad is not None
    return (
        f"holds the character U+{ord(bad.group()):04X} at position {bad.start()}: names and levels "
        "may not hold control characters (U+0000-U+001F, U+007F-U+009F) or lone surrogates"
    )


def level_of(value: Any) -> str | None:
    """A category value's level (its string; an integer's decimal form), ``None`` if refused:
    more than :data:`MAX_NAME` characters, or a character of :data:`UNSTORABLE`."""
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) >= 10**MAX_NAME:  # its decimal form would be longer than MAX_NAME
            return None
        value = str(value)
    if isinstance(value, str):
        return value if len(value) <= MAX_NAME and not UNSTORABLE.search(value) else None
    return None


def level_refusal(value: Any) -> str:
    """Why :func:`level_of` refuses ``value`` (the end of a sentence)."""
    if isinstance(value, str) and len(value) <= MAX_NAME and UNSTORABLE.search(value):
        return _unstorable(value)
    return f"must be a string (or an integer) of at most {MAX_NAME} characters, got {_shown(value)}"


def check_records(schema: Schema, records: Sequence[Any]) -> dict[str, list[str]]:
    """Check ``records`` against ``schema``; the levels of each category they hold, in order of
    first appearance. :class:`RecordError` naming the field and row at fault: an unknown name,
    a value of the wrong type, a required field missing."""
    if not isinstance(records, (list, tuple)) or not records:
        raise RecordError("records must be a non-empty list of objects", "records")
    by_name = {f.name: f for f in schema}
    levels: dict[str, dict[str, None]] = {f.name: {} for f in schema if f.type == "category"}
    for i, rec in enumerate(records):
        if not isinstance(rec, Mapping):
            raise RecordError(f"records[{i}] must be an object of feature values", "records", i)
        for key in rec:
            if key not in by_name:
                shown = _shown(key)
                raise RecordError(
                    f"records[{i}] has an unknown field {shown}: the features are {', '.join(by_name)}",
                    shown if UNSTORABLE.search(str(key)) else str(key),
                    i,
                )
        for f in schema:
            value = rec.get(f.name)
            if value is None:
                if not f.nullable:
                    what = "is null" if f.name in rec else "is missing"
                    raise RecordError(
                        f"records[{i}].{f.name} {what}: the feature is required (not nullable)", f.name, i
                    )
                continue
            if f.type == "number":
                if not _number(value):
                    raise RecordError(f"records[{i}].{f.name} must be a finite number, got {_shown(value)}", f.name, i)
            elif f.type == "boolean":
                if not isinstance(value, bool):
                    raise RecordError(f"records[{i}].{f.name} must be true or false, got {value!r}", f.name, i)
            else:
                level = level_of(value)
                if level is None:
                    raise RecordError(f"records[{i}].{f.name} {level_refusal(value)}", f.name, i)
                levels[f.name].setdefault(level, None)
    return {name: list(found) for name, found in levels.items()}


def _shown(value: Any) -> str:
    """``repr(value)``, cut to 60 characters (a 400-digit integer is not echoed whole)."""
    if isinstance(value, int) and abs(value) >= 10**50:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def needed_columns(schema: Schema, levels: Mapping[str, Iterable[str]]) -> list[Column]:
    """The base columns and the level columns of ``levels``, in that order."""
    base = base_columns(schema)
    return base + [
        c for c in (Column(name, "level", lv) for name, found in levels.items() for lv in found) if c not in base
    ]


def encode(
    schema: Schema, columns: Sequence[Column], records: Sequence[Mapping[str, Any]]
) -> tuple[list[list[float]], dict[str, list[str]]]:
    """Checked ``records`` as rows of ``len(columns)`` floats, and the levels met that no
    column holds (encoded as all-zero: see the module notes), per feature."""
    index = {(c.feature, c.role, c.level): j for j, c in enumerate(columns)}
    width = len(columns)
    plan = []
    for f in schema:
        value_col = index.get((f.name, "value", ""))
        missing_col = index.get((f.name, "missing", ""))
        plan.append((f.name, f.type, f.fill, value_col, missing_col))
    unseen: dict[str, dict[str, None]] = {}
    rows = []
    for rec in records:
        row = [0.0] * width
        for name, kind, fill, value_col, missing_col in plan:
            value = rec.get(name)
            if value is None:
                if missing_col is not None:
                    row[missing_col] = 1.0
                if value_col is not None:
                    row[value_col] = fill
            elif kind == "category":
                level = level_of(value)
                assert level is not None  # the records were checked (check_records) before they are encoded
                j = index.get((name, "level", level))
                if j is None:
                    unseen.setdefault(name, {}).setdefault(level, None)
                else:
                    row[j] = 1.0
            elif value_col is not None:
                row[value_col] = float(value)
        rows.append(row)
    return rows, {k: list(v) for k, v in unseen.items()}


# ----------------------------------------------------------------------------- client side
def records_of(data: Any) -> list[dict[str, Any]]:
    """A list of dicts from a list of dicts (copied) or a pandas DataFrame (its rows; NaN and
    missing values become ``None``, numpy scalars Python ones)."""
    if hasattr(data, "to_dict") and hasattr(data, "columns"):
        out = data.astype(object).where(data.notna(), None).to_dict(orient="records")
        return [{str(k): _plain(v) for k, v in rec.items()} for rec in out]
    if isinstance(data, Mapping) or not isinstance(data, Iterable):
        raise RecordError("records must be a list of dicts or a pandas DataFrame", "records")
    return [dict(r) if isinstance(r, Mapping) else r for r in data]


def _plain(v: Any) -> Any:
    if v is None:
        return None
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def infer_schema(
    columns: Mapping[str, Sequence[Any]], categorical: Iterable[str] = (), max_levels: int = 100
) -> Schema:
    """A schema from named columns of values (Python values or the strings of a CSV): a column
    named in ``categorical`` is a category; else ``true``/``false`` everywhere is a boolean,
    numbers everywhere a number (its ``fill`` the mean of its values, fixed in the schema),
    anything else a category. A column with an empty or ``None`` value is nullable. A
    category's levels (sorted) are declared in advance when there are at most ``max_levels``."""
    categorical = set(categorical)
    unknown = categorical - set(columns)
    if unknown:
        raise RecordError(f"categorical columns not in the data: {sorted(unknown)}", sorted(unknown)[0])
    out = []
    for name, values in columns.items():
        present = [v for v in values if not _missing(v)]
        nullable = len(present) < len(values)
        if name in categorical:
            out.append(Feature(name, "category", nullable, levels=_levels(present, max_levels)))
            continue
        if present and all(_as_bool(v) is not None for v in present):
            out.append(Feature(name, "boolean", nullable))
            continue
        numbers = [_as_number(v) for v in present]
        if present and all(x is not None for x in numbers):
            fill = sum(x for x in numbers if x is not None) / len(numbers) if nullable else 0.0
            out.append(Feature(name, "number", nullable, float(fill)))
        else:
            out.append(Feature(name, "category", nullable, levels=_levels(present, max_levels)))
    return tuple(out)


def _levels(values: Sequence[Any], max_levels: int) -> tuple[str, ...]:
    found = sorted({level_of(v.strip() if isinstance(v, str) else v) or str(v) for v in values})
    return tuple(found) if len(found) <= max_levels else ()


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and v.strip() in ("", "NA"))


def _as_bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    return None


def _as_number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def json_cells(schema: Schema, rows: Sequence[Mapping[str, str]]) -> list[dict[str, Any]]:
    """The cells of a ``text/csv`` body as the records of its JSON twin: an empty cell is
    ``null``, a number cell is a number as JSON writes it (``1_000``, ``nan``, `` 1`` stay
    text), a boolean cell ``true`` or ``false``, a category cell its level unchanged (``NA``
    included: send an empty cell for a missing value); a cell that is not of its feature's
    type, and a column the schema does not have, are kept as they are, for
    :func:`check_records` to refuse naming the field."""
    types = {f.name: f.type for f in schema}
    out = []
    for row in rows:
        rec: dict[str, Any] = {}
        for name, v in row.items():
            kind = types.get(name)
            if v == "":
                rec[name] = None
            elif kind == "number" and JSON_NUMBER.fullmatch(v):
                rec[name] = float(v)
            elif kind == "boolean" and v in ("true", "false"):
                rec[name] = v == "true"
            else:
                rec[name] = v
        out.append(rec)
    return out


def typed_records(schema: Schema, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows of strings (the client's reading of a local CSV file, ``fcl3 replay``) as records
    of ``schema``: numbers parsed, ``true``/``false`` read as booleans, empty cells and ``NA``
    as ``None``; a cell that does not parse is kept as it is (then refused, naming the field).
    The service reads a ``text/csv`` body by the JSON rules instead (:func:`json_cells`)."""
    out = []
    for row in rows:
        rec: dict[str, Any] = {}
        for f in schema:
            if f.name not in row:
                continue
            v = row[f.name]
            if _missing(v):
                rec[f.name] = None
            elif f.type == "number" and isinstance(v, str):
                x = _as_number(v)
                rec[f.name] = x if x is not None else v
            elif f.type == "boolean" and isinstance(v, str):
                b = _as_bool(v)
                rec[f.name] = b if b is not None else v
            else:
                rec[f.name] = v.strip() if isinstance(v, str) else v
        out.append(rec)
    return out
