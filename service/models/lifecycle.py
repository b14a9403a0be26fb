"""A model's lifecycle: create (``POST /models``, and the default model when it is missing),
delete, export, import and fork (``/models``), with the log line of each. Every new model, its
vocabulary included, is written in one transaction (:meth:`service.store.writes.ModelWriter.create`),
after every check: a refused or failed create leaves no model."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import numpy as np

import core
from fcl3.records import Column, RecordError, base_columns, level_of, parse_schema
from service import metrics
from service.models import state_files
from service.models.history import ranges, read_history, replay
from service.models.learners import ModelConfigError, make_learner
from service.records.rows import check_column_count, check_schema_columns, column_cap
from service.store.reads import ModelMissing, Snapshot
from service.store.results import learner_summary
from service.store.writes import ModelExists, NewModel
from service.take_back import checkpoints
from service.writing.idempotency import IdempotencyKeys

if TYPE_CHECKING:
    from service.hosting import HostedModel, ModelRegistry

# "service.store": the logger name is part of each of its log lines (their "logger" field).
log = logging.getLogger("service.store")

#: The largest version an imported model may have (and a task counter in its file): 2^30. The
#: version columns are 32-bit integers on PostgreSQL (at most 2^31 - 1, the bound of a fork's
#: version too), so a model imported at 2^30 still has 2^30 updates before their end; a larger
#: one (2^63 - 1 was stored on SQLite, then every update failed) is refused.
MAX_IMPORTED_VERSION = 2**30
#: The largest magnitude an imported array may hold: far above what the engine learns from data
#: (sums of squares of rows of any sane scale), below where a product of two overflows (1e300).
MAX_IMPORTED_MAGNITUDE = 1e150


def check_settings(model_settings: dict[str, Any]) -> core.LifelongLearner:
    """An unfitted learner for a new model's settings; :class:`core.InputError` (422) when the
    estimator, kind or hyper-parameters are refused, or when ``d`` (if given) is too large for
    them (the learner's ``check_size``, where it has one: FCL3, ELLA)."""
    try:
        learner = make_learner(model_settings)
    except ModelConfigError as exc:
        raise core.InputError(
            str(exc).replace("FCL3_PARAMS", "params").replace("FCL3_ESTIMATOR", "estimator")
        ) from None
    d = model_settings.get("d")
    check_size = getattr(learner, "check_size", None)
    if d is not None and callable(check_size):
        check_size(int(d))
    return learner


def create_model(model: HostedModel, model_settings: dict[str, Any], max_columns: int) -> None:
    """Create ``model`` (version 0) with ``model_settings``; :class:`ModelExists` if taken, and
    :class:`service.records.rows.TooManyColumns` for a schema past the column cap."""
    learner = check_settings(model_settings)
    check_schema_columns(model.name, model_settings, max_columns)
    model.writer.create(NewModel(learner, model_settings, columns=schema_columns(model_settings)))
    log.info(
        "created model %r (%s, %s)",
        model.name,
        model_settings["estimator"],
        model_settings["kind"],
        extra={"event": "model_created", "model": model.name},
    )


def start(model: HostedModel) -> None:
    """At start-up: create the default model if it does not exist, load it, publish its gauges."""
    ensure_created(model)
    model.reader.snapshot()
    model.observe()


def ensure_created(model: HostedModel) -> None:
    """Create the model's row (version 0, unfitted, with the settings its writer holds) if it does
    not exist yet (the default model, at start-up and at its first write)."""
    if model.reader.stored_version() is not None:
        return
    s = model.writer.model_settings
    assert s is not None  # the default model's settings (only it is created by its first write)
    try:
        model.writer.create(NewModel(make_learner(s), s, columns=schema_columns(s)))
    except ModelExists:
        return  # another process created it first
    log.info("created model %r (%s, %s)", model.name, s["estimator"], s["kind"])


def current_for_write(model: HostedModel) -> Snapshot:
    """The stored version for a writer: a missing default model row is created (writes may
    write); any other missing model is unknown."""
    try:
        return model.reader.snapshot(check=True)
    except ModelMissing:
        if not model.default:
            raise
        ensure_created(model)
        return model.reader.snapshot(check=True)


def schema_columns(model_settings: dict[str, Any]) -> list[Column]:
    """A new model's first columns (values, indicators, declared levels), written with it, so
    that GET shows them before any batch; none without a feature schema."""
    features = model_settings.get("features")
    return base_columns(parse_schema(features)) if features else []


def delete_model(model: HostedModel, registry: ModelRegistry) -> None:
    """Delete ``model`` with its tasks and batches, under its update lock (so that no update
    of it is half-way); :class:`ModelMissing` if it does not exist."""
    with model.locks.hold(model.name):
        existed = model.writer.delete(also=[IdempotencyKeys.delete_model])
    registry.forget(model.name)
    model.vocabulary.forget()
    metrics.forget_model(model.name)
    model.reader.drop()
    if not existed:
        raise ModelMissing(model.name)
    log.info("deleted model %r", model.name, extra={"event": "model_deleted", "model": model.name})


def export_model(model: HostedModel) -> tuple[bytes, int]:
    """The served version of ``model`` as ``.npz`` bytes (:mod:`service.models.state_files`) and that version."""
    snap = model.reader.snapshot(check=True)
    tasks = {
        r["task_id"]: {"version": int(r["version"]), "n_batches": int(r["n_batches"]), "last_update": r["last_update"]}
        for r in model.reader.list_tasks(0, 2**62)
        if r["version"] <= snap.version
    }
    service = {
        "model": model.name,
        "version": snap.version,
        "kind": snap.info["kind"],
        "settings": snap.info.get("settings"),
        "summary": snap.info.get("summary") or {},
        "tasks": tasks,
    }
    if (snap.info.get("settings") or {}).get("features"):  # the schema is in the settings
        service["vocabulary"] = [c.to_json() for c in model.vocabulary.refresh()]
    return state_files.to_npz(snap.learner.get_state(), service), snap.version


def import_model(model: HostedModel, data: state_files.Source, max_columns: int) -> None:
    """Create ``model`` from the bytes of an exported ``.npz`` file. Everything is checked
    before anything is stored: a bad file is :class:`core.InputError` (422) with the reason.
    The settings stored are the engine's (estimator, kind, parameters), with the file's schema
    and ``d`` when they fit it; its vocabulary is within the column cap (``max_columns``)."""
    try:
        state, service = state_files.read_npz(data)
    except state_files.StateFileError as exc:
        raise core.InputError(f"bad model file: {exc}") from None
    _check_arrays(state)
    try:
        learner = core.load_state(state)
        learner.check_params()
        learner.get_state()  # every part exports again
        if learner.is_fitted:  # every task predicts, finitely: the arrays fit together
            zero = np.zeros((1, int(learner.n_features_in_)))
            for task_id in learner.task_ids:
                p = np.asarray(learner.predict(task_id, zero), dtype=float)
                if p.shape != (1,) or not np.all(np.isfinite(p)):
                    raise ValueError(f"task {task_id!r} does not predict a finite value")
    except Exception as exc:  # noqa: BLE001 - whatever the engine refuses is a bad file
        raise core.InputError(
            f"bad model file: the engine cannot load its state: {type(exc).__name__}: {exc}"
        ) from None
    settings = _imported_settings(learner, state.estimator, service.get("settings"))
    version = service.get("version")
    version = (
        version
        if isinstance(version, int) and not isinstance(version, bool) and version >= 0
        else int(learner.is_fitted)
    )
    if version > MAX_IMPORTED_VERSION:
        raise core.InputError(
            f"bad model file: version {version} is above the largest a model may have, {MAX_IMPORTED_VERSION} (2^30)"
        )
    stored = service.get("tasks")
    counted = stored if isinstance(stored, dict) else {}
    tasks = {t: _task_counters(counted.get(t), version) for t in learner.task_ids}
    summary = service.get("summary") if isinstance(service.get("summary"), dict) else None
    columns = _imported_vocabulary(settings, service.get("vocabulary"), learner)
    if columns:
        check_column_count(model.name, len(columns), column_cap(settings, max_columns), "the file's vocabulary")
    model.writer.create(
        NewModel(
            learner,
            settings,
            version=version,
            summary=summary or learner_summary(learner),
            tasks=tasks,
            origin={"import": {"model": service.get("model"), "version": version}},
            columns=columns,
        ),
        # the imported state: where a take-back of a batch learned after the import replays from
        also=[checkpoints.part(model.name, version, learner, summary or learner_summary(learner))],
    )
    log.info(
        "imported model %r at version %d",
        model.name,
        version,
        extra={"event": "model_imported", "model": model.name, "version": version},
    )


def _imported_settings(learner: core.LifelongLearner, estimator: str, stored: Any) -> dict[str, Any]:
    """The settings of an imported model: the file's, which must make the engine's learner again
    (its estimator, kind and every parameter: :class:`core.InputError` otherwise), or for a file
    without them (a learner exported offline) the engine's own; a ``d`` of 1-10^6 and a feature
    schema kept from the file (a schema needs an engine that grows its columns,
    ``grow_features``; it is checked with the vocabulary)."""
    params = learner.get_params()
    settings: dict[str, Any] = {
        "estimator": estimator,
        "kind": learner.kind,
        "params": {k: v for k, v in params.items() if k != "kind"},
        "d": None,
    }
    if stored is None or stored == {}:
        return settings
    try:
        same = (
            isinstance(stored, dict)
            and stored.get("estimator") == estimator
            and stored.get("kind") == learner.kind
            and make_learner(stored).get_params() == params
        )
    except (ModelConfigError, KeyError, TypeError, ValueError, AttributeError, core.InputError):
        same = False
    if not same:
        shown = json.dumps(stored, default=str)
        raise core.InputError(
            f"bad model file: its service settings {shown[:200]} do not make its engine's learner "
            f"({estimator}, {learner.kind}, {json.dumps(params, default=str)[:200]}): drop them to import "
            "the engine as it is"
        )
    settings["params"] = dict(stored.get("params") or {})
    d = stored.get("d")
    if isinstance(d, int) and not isinstance(d, bool) and 0 < d <= 10**6:
        settings["d"] = d
    features = stored.get("features")
    if features:
        if params.get("grow_features") is not True:
            raise core.InputError(
                "bad model file: it has a feature schema but its engine does not grow its columns "
                "(grow_features false): a model with features needs grow_features true"
            )
        settings["features"], settings["d"] = features, None
    return settings


def _imported_vocabulary(settings: dict[str, Any], vocabulary: Any, learner: core.LifelongLearner) -> list[Column]:
    """The columns of an imported model with a feature schema, checked: a valid schema, and a
    vocabulary holding its base columns first and at least as many columns as the engine has."""
    if not settings.get("features"):
        return []
    try:
        schema = parse_schema(settings["features"])
        columns = [Column(str(c["feature"]), str(c["role"]), str(c.get("level", ""))) for c in vocabulary or []]
    except (RecordError, TypeError, KeyError, AttributeError) as exc:
        raise core.InputError(f"bad model file: its feature schema or vocabulary: {exc}") from None
    base = base_columns(schema)
    names = {f.name for f in schema}
    if (
        columns[: len(base)] != base
        or len(set(columns)) != len(columns)
        or any(c.feature not in names or c.role not in ("value", "missing", "level") for c in columns)
        or any(level_of(c.level) != c.level if c.role == "level" else c.level != "" for c in columns)
    ):
        raise core.InputError("bad model file: its vocabulary does not fit its feature schema")
    if learner.is_fitted and len(columns) < int(learner.n_features_in_):
        raise core.InputError(
            f"bad model file: its vocabulary has {len(columns)} columns, its engine {learner.n_features_in_}"
        )
    return columns


def _check_arrays(state: core.ModelState) -> None:
    """:class:`core.InputError` (422) when an array of an imported state is not of real numbers
    (complex, text, bytes: the engine's are integers and floats) or holds NaN, infinity or a
    magnitude past :data:`MAX_IMPORTED_MAGNITUDE`: no model the engine learns has one, and such a
    model would refuse (or fail) every batch."""
    named = [(f"array {k!r}", a) for k, a in state.arrays.items()]
    named += [(f"array {k!r} of task {t!r}", a) for t, task in state.tasks.items() for k, a in task["arrays"].items()]
    for what, a in named:
        if a.dtype.kind not in "biuf":
            raise core.InputError(f"bad model file: {what} is of dtype {a.dtype.str}, not of real numbers")
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise core.InputError(f"bad model file: {what} holds NaN or infinity")
        if a.size and a.dtype.kind in "iuf" and max(abs(float(a.max())), abs(float(a.min()))) > MAX_IMPORTED_MAGNITUDE:
            raise core.InputError(
                f"bad model file: {what} holds a value of magnitude over {MAX_IMPORTED_MAGNITUDE:g}, "
                "which no learned model holds"
            )


def _task_counters(info: Any, version: int) -> dict[str, Any]:
    info = info if isinstance(info, dict) else {}
    v, n = info.get("version"), info.get("n_batches")

    def ok(x: Any) -> bool:
        return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_IMPORTED_VERSION

    return {
        "version": v if ok(v) and v <= version else version,
        "n_batches": n if ok(n) else 0,
        "last_update": info.get("last_update") if isinstance(info.get("last_update"), dict) else {},
    }


class ForkRefused(Exception):
    """A fork that cannot be made as asked (answered 409 with the reason)."""


def fork_model(model: HostedModel, parent: HostedModel, version: int | None) -> int:
    """Create ``model`` as ``parent`` was at ``version`` (default: its stored version), rebuilt
    by replaying, with ``parent``'s settings, the stored batches ``parent`` had learned at
    ``version`` (:mod:`service.models.history`); its batches and take-backs up to ``version`` are
    copied too. Returns the version. :class:`ForkRefused` when ``version`` is past ``parent``'s,
    or some of its history ``1..version`` is gone (an imported model has none);
    :class:`core.InputError` (422) when ``parent``'s stored settings or batches are refused by
    the engine now (a model stored before the parameter ranges existed)."""
    current = parent.reader.require()
    if version is None:
        version = current
    if version > current:
        raise ForkRefused(f"model {parent.name!r} is at version {current}: it has no version {version} to fork")
    info = parent.reader.model_info()
    history = read_history(parent.reader.bulk, parent.name).upto(version)
    missing = history.missing(version)
    if missing:
        raise ForkRefused(
            f"model {parent.name!r} cannot be rebuilt at version {version}: its stored batches "
            f"{ranges(missing)} are missing (an imported model keeps no batches: to copy it at its "
            "current version, export it and import the file under the new name)"
        )
    settings = info["settings"]
    rebuilt = replay(settings, history.learned(version), f"model {parent.name!r} cannot be forked: ")
    model.writer.create(
        NewModel(
            rebuilt.learner,
            settings,
            version=version,
            summary=rebuilt.summary,
            tasks=rebuilt.tasks,
            batches=[b.row() for b in history.batches],
            take_backs=list(history.take_backs.values()),
            origin={"fork": {"model": parent.name, "version": version}},
            # the parent's columns: a superset of what the fork learned
            columns=parent.vocabulary.refresh() if settings.get("features") else (),
        ),
        # the fork's first state: where a take-back of a batch it learns replays from
        also=[checkpoints.part(model.name, version, rebuilt.learner, rebuilt.summary)],
    )
    log.info(
        "forked model %r from %r at version %d",
        model.name,
        parent.name,
        version,
        extra={"event": "model_forked", "model": model.name, "version": version},
    )
    return version
