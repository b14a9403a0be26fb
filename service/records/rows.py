"""Records at the route layer: a model's feature schema (in its settings) and its vocabulary
(:mod:`service.records.vocabulary`) turn ``{"records": [...]}`` into the numeric rows that
:mod:`service.learning.updates` learns and predicts (docs/records.md).

A batch to learn is checked before any lock (:func:`learning_records`: every record, and the
model's column cap against the levels it would add), then encoded **under the update lock**
(:meth:`RecordsBatch.encode`) over the vocabulary as it then stands, its new levels appended in
memory; the batch's commit stores them (:class:`service.records.vocabulary.NewColumns`), so a
refused batch registers nothing. The rows end at the last column the batch uses (the base
columns and its levels' columns; a row lacks the later columns, which the engine reads as 0:
``grow_features``). A retried request (same ``Idempotency-Key``) is recognised by its records
(:meth:`RecordsBatch.canonical`), not by its rows. A prediction registers nothing: a level the
vocabulary does not hold is encoded as all-zero and reported (``unseen``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import core
from fcl3.records import (
    Column,
    RecordError,
    Schema,
    base_columns,
    check_records,
    encode,
    json_cells,
    level_of,
    needed_columns,
    parse_schema,
)
from service.models.learners import ModelConfigError, make_learner
from service.store.reads import ModelMissing
from service.store.results import UNLEARNED

if TYPE_CHECKING:
    from service.hosting import HostedModel
    from service.store.reads import Snapshot


class TooManyColumns(core.InputError):
    """A schema, an import or a batch that would give a model more columns than its cap (422)."""


@lru_cache(maxsize=256)
def _parsed(text: str) -> Schema:
    return parse_schema(json.loads(text))


def schema_of(settings: dict[str, Any] | None) -> Schema | None:
    """The schema in a model's settings (``None``: the model takes ``X`` only)."""
    features = (settings or {}).get("features")
    if not features:
        return None
    return _parsed(json.dumps(features, sort_keys=True))


def settings_of(model: HostedModel) -> dict[str, Any] | None:
    """The model's settings: from its cached snapshot, else from its row (one small query)."""
    snap = model.reader.cached
    if snap is not None:
        return snap.info.get("settings")
    try:
        return model.reader.model_info().get("settings")
    except ModelMissing:  # the default model, created by its first write with its settings
        return model.writer.model_settings


def require_schema(settings: dict[str, Any] | None, name: str) -> Schema:
    schema = schema_of(settings)
    if schema is None:
        raise RecordError(
            f"model {name!r} has no feature schema: send X (rows of numbers), or create a model "
            "with features to send records",
            "records",
        )
    return schema


# ----------------------------------------------------------------------------- the column cap
@lru_cache(maxsize=256)
def _engine_cap(settings_json: str, ceiling: int) -> int:
    """The most columns (at most ``ceiling``) the learner of these settings takes (its
    ``check_size``: FCL3 and ELLA bound the unknowns of their system)."""
    try:
        learner = make_learner(json.loads(settings_json))
    except ModelConfigError:
        return ceiling
    check = getattr(learner, "check_size", None)
    if not callable(check):
        return ceiling
    lo, hi = 0, ceiling  # check(lo) passes (0 columns), find the largest that does
    while lo < hi:
        mid = (lo + hi + 1) // 2
        try:
            check(mid)
        except core.InputError:
            hi = mid - 1
        else:
            lo = mid
    return lo


def column_cap(model_settings: dict[str, Any], max_columns: int) -> int:
    """The most columns a model of ``model_settings`` may have: ``max_columns``
    (``MAX_COLUMNS``), or fewer if its engine takes fewer (a model past it could learn nothing)."""
    keys = ("estimator", "kind", "params")
    return _engine_cap(json.dumps({k: model_settings.get(k) for k in keys}, sort_keys=True), max_columns)


def check_column_count(name: str, n_columns: int, cap: int, what: str) -> None:
    """:class:`TooManyColumns` when ``n_columns`` is over ``cap`` (``what`` says whose columns)."""
    if n_columns > cap:
        raise TooManyColumns(
            f"{what} would give model {name!r} {n_columns} columns; at most {cap} (MAX_COLUMNS, or what "
            "its engine can update in bounded time: docs/limits.md, 'Columns of a model'); nothing "
            "was changed: declare fewer features or levels, or bin a category's rare levels"
        )


def check_schema_columns(name: str, model_settings: dict[str, Any], max_columns: int) -> None:
    """A new model's schema within its column cap, refused at once (:class:`TooManyColumns`)."""
    schema = schema_of(model_settings)
    if schema is not None:
        cap = column_cap(model_settings, max_columns)
        check_column_count(name, len(base_columns(schema)), cap, "its feature schema")


# ----------------------------------------------------------------------------- a batch to learn
@dataclass
class RecordsBatch:
    """The checked records of a batch to learn, encoded under the update lock."""

    name: str
    schema: Schema
    records: list[dict[str, Any]]
    levels: dict[str, list[str]]
    cap: int

    def canonical(self) -> list[list[Any]]:
        """The records as their values in schema order (numbers as floats, levels as their
        strings): what an ``Idempotency-Key``'s request hash reads."""
        out = []
        for rec in self.records:
            row: list[Any] = []
            for f in self.schema:
                v = rec.get(f.name)
                row.append(
                    None
                    if v is None
                    else level_of(v)
                    if f.type == "category"
                    else v
                    if f.type == "boolean"
                    else float(v)
                )
            out.append(row)
        return out

    def new_columns(self, columns: Sequence[Column]) -> list[Column]:
        have = set(columns)
        return [c for c in dict.fromkeys(needed_columns(self.schema, self.levels)) if c not in have]

    def encode(self, columns: tuple[Column, ...]) -> tuple[list[list[float]], list[Column]]:
        """The rows over ``columns`` (the vocabulary under the lock) and the columns this batch
        appends to it; :class:`TooManyColumns` past the model's cap (nothing appended)."""
        new = self.new_columns(columns)
        check_column_count(self.name, len(columns) + len(new), self.cap, f"this batch's {len(new)} new levels")
        full = columns + tuple(new)
        wanted = needed_columns(self.schema, self.levels)
        rows, _ = encode(self.schema, full[: _width(full, wanted)], self.records)
        return rows, new


def records_batch(name: str, settings: dict[str, Any], records: list[dict[str, Any]], max_columns: int) -> RecordsBatch:
    """``records`` (checked: :class:`fcl3.records.RecordError` otherwise) of a batch to learn
    of the model ``name`` of ``settings``."""
    schema = require_schema(settings, name)
    return RecordsBatch(name, schema, records, check_records(schema, records), column_cap(settings, max_columns))


def learning_records(
    model: HostedModel, records: list[dict[str, Any]], max_columns: int, text: bool = False
) -> RecordsBatch:
    """``records`` of a batch to learn, checked before any lock: every record, and the column
    cap against the levels the cached vocabulary lacks (checked again under the lock)."""
    settings = model.reader.snapshot().info.get("settings") or {}
    if text:  # the cells of a text/csv body
        records = json_cells(require_schema(settings, model.name), records)
    batch = records_batch(model.name, settings, records, max_columns)
    columns = model.vocabulary.columns()
    check_column_count(model.name, len(columns) + len(batch.new_columns(columns)), batch.cap, "this batch's new levels")
    return batch


def _width(columns: Sequence[Column], wanted: Sequence[Column]) -> int:
    """One past the last column of ``wanted``."""
    place = {c: j for j, c in enumerate(columns)}
    return max((place[c] + 1 for c in wanted), default=0)


def _engine_width(snap: Snapshot) -> int:
    learner = snap.learner
    return int(learner.n_features_in_) if learner.is_fitted else 0


def prediction_rows(
    model: HostedModel, snap: Snapshot, records: list[dict[str, Any]], text: bool = False
) -> tuple[list[list[float]], dict[str, list[str]]]:
    """``records`` to predict with ``snap`` as rows of its engine's width, and the levels its
    engine has never learned (encoded as all-zero), per category."""
    X, unseen, _ = prediction_records(model, snap, records, text)
    return X, unseen


def prediction_records(
    model: HostedModel, snap: Snapshot, records: list[dict[str, Any]], text: bool = False
) -> tuple[list[list[float]], dict[str, list[str]], list[dict[str, Any]]]:
    """:func:`prediction_rows`, and the records as checked (a ``text/csv`` body's cells typed):
    what a prediction that remembers its rows stores."""
    schema = require_schema(snap.info.get("settings"), model.name)
    if text:
        records = json_cells(schema, records)
    levels = check_records(schema, records)
    engine = _engine_width(snap)
    columns = model.vocabulary.columns()
    if len(columns) < engine or any(
        Column(f, "level", lv) not in columns for f, found in levels.items() for lv in found
    ):
        columns = model.vocabulary.refresh()  # another process may have added them
    # a model that has learned nothing yet (evaluation rows sent first): every column it has
    columns = columns[:engine] if engine else columns
    unlearned = set((snap.info.get("summary") or {}).get(UNLEARNED) or ())
    if unlearned:  # levels only a batch taken back brought: encoded and reported as unseen
        columns = tuple(Column(c.feature, "unlearned", c.level) if j in unlearned else c for j, c in enumerate(columns))
    X, unseen = encode(schema, columns, records)
    return X, unseen, records


def checked_x_width(model: HostedModel, settings: dict[str, Any] | None, widths: Iterable[int]) -> None:
    """For a model with a schema, rows of numbers (``X``) are its encoded columns: at most as
    many as its vocabulary holds (a wider row would add columns no feature names)."""
    if schema_of(settings) is None:
        return
    limit = len(model.vocabulary.columns())
    widest = max(widths, default=0)
    if widest > limit:
        limit = len(model.vocabulary.refresh())
    if widest > limit:
        raise RecordError(
            f"X has {widest} columns but model {model.name!r} encodes its records into {limit} "
            "(its vocabulary, GET /models/{name}): send records",
            "X",
        )
