"""Records at the route layer: a model's feature schema (in its settings) and its vocabulary
(:mod:`service.records.vocabulary`) turn ``{"records": [...]}`` into the numeric rows that
:mod:`service.learning.updates` learns and predicts, before any lock or update (docs/records.md).

A batch to learn first registers the category levels it holds (their columns committed in
their own transaction), then is encoded over the columns it needs: the base columns and its
levels' columns, up to the last of them (a row lacks the later columns, which the engine reads
as 0: ``grow_features``). The encoding of a batch thus depends only on the levels it holds and
the order in which levels first arrived, so a retried request (same ``Idempotency-Key``) is
encoded to the same rows. A prediction registers nothing: a level the vocabulary does not hold
is encoded as all-zero and reported (``unseen``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from fcl3.records import Column, RecordError, Schema, check_records, encode, needed_columns, parse_schema, typed_records
from service.store.reads import ModelMissing

if TYPE_CHECKING:
    from service.hosting import HostedModel
    from service.store.reads import Snapshot


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


def _width(columns: Sequence[Column], wanted: Sequence[Column]) -> int:
    """One past the last column of ``wanted``."""
    place = {c: j for j, c in enumerate(columns)}
    return max((place[c] + 1 for c in wanted), default=0)


def _engine_width(snap: Snapshot) -> int:
    learner = snap.learner
    return int(learner.n_features_in_) if learner.is_fitted else 0


def learning_rows(model: HostedModel, records: list[dict[str, Any]], text: bool = False) -> list[list[float]]:
    """``records`` of a batch to learn as rows; their new levels registered first. The rows end
    at the last column the batch uses (a narrower row holds 0 in the engine's later columns,
    ``grow_features``; a wider one brings new columns): the same records are the same rows
    whatever the engine has grown to since, so a retried request hashes the same."""
    snap = model.reader.snapshot()
    schema = require_schema(snap.info.get("settings"), model.name)
    if text:  # the cells of a text/csv body
        records = typed_records(schema, records)
    levels = check_records(schema, records)
    wanted = needed_columns(schema, levels)
    engine = _engine_width(snap)
    columns = model.vocabulary.ensure(wanted)
    if len(columns) < engine:  # cached before another process added columns
        columns = model.vocabulary.refresh()
    rows, _ = encode(schema, columns[: _width(columns, wanted)], records)
    return rows


def prediction_rows(
    model: HostedModel, snap: Snapshot, records: list[dict[str, Any]], text: bool = False
) -> tuple[list[list[float]], dict[str, list[str]]]:
    """``records`` to predict with ``snap`` as rows of its engine's width, and the levels its
    engine has never learned (encoded as all-zero), per category."""
    schema = require_schema(snap.info.get("settings"), model.name)
    if text:
        records = typed_records(schema, records)
    levels = check_records(schema, records)
    engine = _engine_width(snap)
    columns = model.vocabulary.columns()
    if len(columns) < engine or any(
        Column(f, "level", lv) not in columns for f, found in levels.items() for lv in found
    ):
        columns = model.vocabulary.refresh()  # another process may have added them
    # a model that has learned nothing yet (evaluation rows sent first): every column it has
    return encode(schema, columns[:engine] if engine else columns, records)


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
