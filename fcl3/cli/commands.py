"""The ``fcl3`` command's commands (click): run the service, manage models, learn and predict from CSV
files, and replay a whole data set into a running service.

Every command has ``--help``. The commands that talk to a service take ``--url`` (or
``FCL3_URL``, default http://127.0.0.1:8000) and ``--api-key`` (or ``FCL3_API_KEY``).

Input files are checked in full before anything is sent; a bad one stops the command with
``FILE:LINE: column N (name): what is wrong`` and exit status 2. A batch the service refuses
stops it with the service's reason and exit status 1.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any, TypeVar

import click

from .._version import __version__
from ..client import DEFAULT_URL, APIError, Client, FCL3Error, NotFound
from ..records import RecordError, Schema, infer_schema, parse_schema, schema_json
from .errors import command_error
from .files import (
    file_digest,
    format_schema,
    infer_kind,
    read_csv,
    read_dataset,
    read_labels,
    read_records_csv,
    typed_rows,
)
from .replay import (
    add_evaluation,
    add_prequential,
    metrics_text,
    plan_batches,
    print_summary,
    replay_key,
    score_figures,
    send_batches,
)

MAX_BATCH = 10_000  # the service's default MAX_ROWS_PER_BATCH


#: A command function, which the options decorate.
F = TypeVar("F", bound=Callable[..., Any])


def _echo_json(value: Any) -> None:
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _client(url: str, api_key: str | None, timeout: float, retries: int) -> Client:
    return Client(url, api_key=api_key, timeout=timeout, retries=retries)


def connection_options(f: F) -> F:
    """``--url``, ``--api-key``, ``--timeout``, ``--retries`` (the first two also from the environment)."""
    f = click.option(
        "--retries",
        default=5,
        show_default=True,
        type=click.IntRange(0, 100),
        help="Retries of a request when that is safe (503, connection errors).",
    )(f)
    f = click.option(
        "--timeout",
        default=60.0,
        show_default=True,
        type=click.FloatRange(0.1),
        help="Seconds to wait for each answer.",
    )(f)
    f = click.option(
        "--api-key",
        envvar="FCL3_API_KEY",
        default=None,
        metavar="KEY",
        help="API key, sent as 'Authorization: Bearer KEY' [env FCL3_API_KEY].",
    )(f)
    f = click.option(
        "--url",
        envvar="FCL3_URL",
        default=DEFAULT_URL,
        show_default=True,
        metavar="URL",
        help="Base URL of the service [env FCL3_URL].",
    )(f)
    return f


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except FCL3Error as exc:  # anything a command did not turn into its own message
            raise command_error(exc, ctx.invoked_subcommand or "fcl3") from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="fcl3")
def main() -> None:
    """FCL3: an online lifelong learner served over HTTP.

    \b
    fcl3 serve                                  run the service
    fcl3 replay stream.csv --model demo         stream a data set into it
    fcl3 models list                            the models it holds
    """


def _refused(
    exc: FCL3Error, file: Path, lines: list[int], start: int, verb: str, task: str, model: str
) -> click.ClickException:
    """The error of a request of rows from ``file`` (its rows from ``start``; ``lines``: each
    row's line in the file): an unknown task or model is named as such, a refused row by its
    line (the answer's ``row``, else the request's first)."""
    if isinstance(exc, NotFound):
        hint = f"'fcl3 tasks {model}' lists the tasks the model has learned; 'fcl3 models list' the models"
        return command_error(exc, f"cannot {verb} task {task!r} of model {model!r}", hint)
    row = exc.row if isinstance(exc, APIError) and exc.row is not None else 0
    line = lines[start + row] if 0 <= start + row < len(lines) else lines[start]
    return command_error(exc, f"refused rows from {file}:{line}")


# ----------------------------------------------------------------------------- serve
#: The thread counts of BLAS and OpenMP that ``fcl3 serve`` sets unless the user has.
BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def one_blas_thread(environ: MutableMapping[str, str]) -> dict[str, str]:
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
@click.option(
    "--database-url",
    default=None,
    metavar="URL",
    help="DATABASE_URL, e.g. postgresql+psycopg://postgres@127.0.0.1:5432/fcl3 (default: an SQLite file).",
)
@click.option(
    "--sqlite-path", default=None, metavar="FILE", help="SQLITE_PATH, the file of the embedded default (fcl3.db)."
)
@click.option("--redis-url", default=None, metavar="URL", help="REDIS_URL, e.g. redis://127.0.0.1:6379/0.")
@click.option("--log-level", default=None, help="LOG_LEVEL of the service's JSON logs (INFO).")
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="NAME=VALUE",
    help="Any other setting, as its environment variable (repeatable), e.g. --set FCL3_KIND=classification.",
)
def serve(
    host: str,
    port: int,
    workers: int,
    database_url: str | None,
    sqlite_path: str | None,
    redis_url: str | None,
    log_level: str | None,
    settings: tuple[str, ...],
) -> None:
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
        raise click.ClickException(
            f"the service's dependencies are not installed ({exc.name}): "
            "pip install fcl3 (with the service), not only the client"
        ) from None
    values = {}
    for item in settings:
        name, sep, value = item.partition("=")
        name = name.strip().upper()
        if not sep or name not in Settings.model_fields:
            known = ", ".join(sorted(Settings.model_fields))
            raise click.BadParameter(f"{item!r}: expected NAME=VALUE with NAME one of {known}", param_hint="--set")
        values[name] = value
    given: tuple[tuple[str, str | None], ...] = (
        ("DATABASE_URL", database_url),
        ("SQLITE_PATH", sqlite_path),
        ("REDIS_URL", redis_url),
        ("LOG_LEVEL", log_level),
    )
    for setting, given_value in given:
        if given_value is not None:
            values[setting] = given_value
    os.environ.update(values)
    try:
        config = Settings()
    except ValidationError as exc:
        lines = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise click.ClickException("bad setting: " + "; ".join(lines)) from None
    where = config.DATABASE_URL and "the database of DATABASE_URL" or f"SQLite file {config.SQLITE_PATH}"
    click.echo(f"fcl3 serve: http://{host}:{port} on {where}", err=True)
    one_blas_thread(os.environ)  # before numpy is loaded (not yet: the app loads it), here and in the workers
    uvicorn.run(
        "service.main:app",
        host=host,
        port=port,
        workers=workers,
        http=HTTP_PROTOCOL,  # HEADER_TIMEOUT
        log_level=(config.LOG_LEVEL or "info").lower(),
    )


# ----------------------------------------------------------------------------- models
@main.group()
def models() -> None:
    """Create, list, show, delete, export, import and fork models."""


def _params(params: str | None) -> dict[str, Any]:
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
@click.option(
    "--estimator", default="FCL3", show_default=True, help="Learner class in core (FCL3, CL3, ELLA, STL, ...)."
)
@click.option("--params", default=None, metavar="JSON", help="Other hyper-parameters, e.g. '{\"lambda2\": 0.5}'.")
@click.option(
    "--d", "d", default=None, type=click.IntRange(1), help="Number of features (default: fixed by the first batch)."
)
@connection_options
def models_create(
    name: str,
    kind: str,
    estimator: str,
    params: str | None,
    d: int | None,
    url: str,
    api_key: str | None,
    timeout: float,
    retries: int,
) -> None:
    """Create the model NAME."""
    with _client(url, api_key, timeout, retries) as c:
        _echo_json(c.create_model(name, kind, estimator=estimator, params=_params(params), d=d))


@models.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the models as JSON.")
@connection_options
def models_list(as_json: bool, url: str, api_key: str | None, timeout: float, retries: int) -> None:
    """List the models."""
    with _client(url, api_key, timeout, retries) as c:
        got = list(c.iter_models())
    if as_json:
        _echo_json([m.model_dump(mode="json") for m in got])
        return
    head = ("name", "kind", "estimator", "d", "version", "tasks", "batches", "representatives")
    table = [head] + [
        (
            m.name,
            m.kind,
            m.estimator,
            str(m.d if m.d is not None else "-"),
            str(m.version),
            str(m.n_tasks),
            str(m.n_batches),
            str(m.n_representatives),
        )
        for m in got
    ]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for r in table:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


@models.command("show")
@click.argument("name")
@connection_options
def models_show(name: str, url: str, api_key: str | None, timeout: float, retries: int) -> None:
    """Show the model NAME (settings, version, tasks, representatives) as JSON."""
    with _client(url, api_key, timeout, retries) as c:
        _echo_json(c.get_model(name))


@models.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@connection_options
def models_delete(name: str, yes: bool, url: str, api_key: str | None, timeout: float, retries: int) -> None:
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
def models_export(name: str, file: str, url: str, api_key: str | None, timeout: float, retries: int) -> None:
    """Write the model NAME to FILE (one .npz file, no pickle)."""
    with _client(url, api_key, timeout, retries) as c:
        version = c.export_model(name, file)
    click.echo(f"exported {name} (version {version}) to {file}")


@models.command("import")
@click.argument("name")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@connection_options
def models_import(name: str, file: str, url: str, api_key: str | None, timeout: float, retries: int) -> None:
    """Create the model NAME from FILE (written by 'fcl3 models export')."""
    with _client(url, api_key, timeout, retries) as c:
        _echo_json(c.import_model(name, file))


@models.command("fork")
@click.argument("name")
@click.argument("source")
@click.option(
    "--version",
    "version",
    default=None,
    type=click.IntRange(0),
    help="SOURCE's version to start from (default: its current one).",
)
@connection_options
def models_fork(
    name: str, source: str, version: int | None, url: str, api_key: str | None, timeout: float, retries: int
) -> None:
    """Create NAME as the model SOURCE was at a version."""
    with _client(url, api_key, timeout, retries) as c:
        _echo_json(c.fork_model(name, source, version))


# ----------------------------------------------------------------------------- one task
@main.command()
@click.argument("model")
@click.argument("task")
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--batch-size", default=MAX_BATCH, show_default=True, type=click.IntRange(1, MAX_BATCH), help="Rows per request."
)
@click.option(
    "--idempotency-key",
    default=None,
    metavar="KEY",
    help="Key of the request (KEY-1, KEY-2, ... for several batches); run again with the same "
    "key, nothing is learned twice. Default: new keys.",
)
@connection_options
def learn(
    model: str,
    task: str,
    file: Path,
    batch_size: int,
    idempotency_key: str | None,
    url: str,
    api_key: str | None,
    timeout: float,
    retries: int,
) -> None:
    """Learn the rows of FILE for task TASK of MODEL.

    FILE is a CSV with a header: a 'y' column (the target) and the features in the other
    columns (a 'task' column, if any, is ignored).
    """
    rows = read_csv(file, task="ignored", target="required")
    assert rows.y is not None  # target="required"
    y = rows.y
    n = len(rows.X)
    with _client(url, api_key, timeout, retries) as c:
        for b, start in enumerate(range(0, n, batch_size)):
            key = None
            if idempotency_key:
                key = idempotency_key if n <= batch_size else f"{idempotency_key}-{b + 1}"
            try:
                r = c.learn_batch(
                    model,
                    task,
                    rows.X[start : start + batch_size],
                    y[start : start + batch_size],
                    idempotency_key=key,
                )
            except FCL3Error as exc:
                raise _refused(exc, file, rows.lines, start, "learn", task, model) from None
            u = r.update
            click.echo(
                f"learned {len(rows.X[start : start + batch_size])} rows of task {task!r}"
                f"{' (already applied: replayed)' if r.replayed else ''}: version {u.version}, "
                f"{u.n_samples} samples, {u.n_representatives} representatives"
                f"{', new representative' if u.new_representative else ''}"
            )


@main.command()
@click.argument("model")
@click.argument("task")
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--min-version", default=None, type=click.IntRange(0), help="Answer from this model version or a later one."
)
@click.option("--json", "as_json", is_flag=True, help="Print the service's answer as JSON.")
@click.option(
    "--remember",
    is_flag=True,
    help="Keep the rows for labels that arrive later: a prediction_id column comes first, for 'fcl3 label'.",
)
@connection_options
def predict(
    model: str,
    task: str,
    file: Path,
    min_version: int | None,
    as_json: bool,
    remember: bool,
    url: str,
    api_key: str | None,
    timeout: float,
    retries: int,
) -> None:
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
                got = c.predict(
                    model, task, rows.X[start : start + MAX_BATCH], min_version=min_version, remember=remember
                )
            except FCL3Error as exc:
                raise _refused(exc, file, rows.lines, start, "predict", task, model) from None
            if out is None:
                out = got
            else:
                out.predictions += got.predictions
                if out.probabilities is not None:
                    out.probabilities += got.probabilities or []
                if out.prediction_ids is not None:
                    out.prediction_ids += got.prediction_ids or []
    assert out is not None  # read_csv refuses a file without rows
    if as_json:
        _echo_json(out.model_dump(mode="json", exclude_none=True))
        return
    ids = out.prediction_ids
    click.echo(
        ("prediction_id," if ids is not None else "")
        + ("prediction,probability" if out.probabilities is not None else "prediction")
    )
    for i, p in enumerate(out.predictions):
        line = f"{p!r},{out.probabilities[i]!r}" if out.probabilities is not None else repr(p)
        click.echo(f"{ids[i]},{line}" if ids is not None else line)


@main.command()
@click.argument("model")
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--idempotency-key",
    default=None,
    metavar="KEY",
    help="Key of the request (KEY-1, KEY-2, ... for several batches); run again with the same "
    "key, nothing is learned twice. Default: new keys.",
)
@connection_options
def label(
    model: str, file: Path, idempotency_key: str | None, url: str, api_key: str | None, timeout: float, retries: int
) -> None:
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
    chunks = [idx[k : k + MAX_BATCH] for idx in groups.values() for k in range(0, len(idx), MAX_BATCH)]
    with _client(url, api_key, timeout, retries) as c:
        for n, idx in enumerate(chunks, 1):
            key = None
            if idempotency_key:
                key = idempotency_key if len(chunks) == 1 else f"{idempotency_key}-{n}"
            try:
                r = c.label_batch(model, [(ids[i], ys[i]) for i in idx], idempotency_key=key)
            except FCL3Error as exc:
                raise command_error(
                    exc, f"refused labels from {file}:{lines[idx[0]]}", f"{n - 1} of {len(chunks)} batches were learned"
                ) from None
            u = r.update
            preq = score_figures(u.prequential)
            click.echo(
                f"learned {len(idx)} labelled rows of task {u.task_id!r}"
                f"{' (already applied: replayed)' if r.replayed else ''}: version {u.version}, "
                f"{u.n_samples} samples" + (f"; served predictions: {metrics_text(preq)}" if preq else "")
            )


@main.command("take-back")
@click.argument("model")
@click.argument("version", type=click.IntRange(1, 2**31 - 1))
@click.option(
    "--idempotency-key",
    default=None,
    metavar="KEY",
    help="Key of the request; run again with the same key, the batch is taken back once. Default: a new key.",
)
@connection_options
def take_back(
    model: str, version: int, idempotency_key: str | None, url: str, api_key: str | None, timeout: float, retries: int
) -> None:
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
            raise command_error(exc, f"batch {version} of model {model!r} not taken back", hint) from None
    task = (
        f"task {r.task_id!r} removed (it was its only batch)"
        if r.task_removed
        else f"task {r.task_id!r} keeps {r.task_n_samples} rows"
    )
    click.echo(
        f"took back batch {r.batch_version} of model {model!r} ({r.n_samples} rows): version {r.version}, "
        f"{r.n_replayed} batches replayed; {task}"
    )


@main.command()
@click.argument("model")
@click.argument("task", required=False)
@connection_options
def tasks(model: str, task: str | None, url: str, api_key: str | None, timeout: float, retries: int) -> None:
    """Show MODEL's tasks (or one TASK) as JSON."""
    with _client(url, api_key, timeout, retries) as c:
        _echo_json(c.task(model, task) if task else c.tasks(model))


@main.command()
@click.argument("model")
@click.option("--last-event-id", default=None, metavar="VERSION", help="Resume after this model version.")
@click.option("--count", default=None, type=click.IntRange(1), help="Stop after this many events.")
@connection_options
def events(
    model: str,
    last_event_id: str | None,
    count: int | None,
    url: str,
    api_key: str | None,
    timeout: float,
    retries: int,
) -> None:
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
@click.option(
    "--kind",
    type=click.Choice(["regression", "classification"]),
    default=None,
    help="Kind of a model created here (default: an .npz's own; for a CSV, classification "
    "when every y is 0/1 or -1/1).",
)
@click.option("--batch-size", default=50, show_default=True, type=click.IntRange(1, MAX_BATCH), help="Rows per batch.")
@click.option(
    "--order",
    type=click.Choice(["file", "random"]),
    default="file",
    show_default=True,
    help="file: runs of consecutive rows of a task, in file order; random: each task's rows "
    "shuffled and the batches of all tasks interleaved at random.",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of --order random and --holdout.")
@click.option(
    "--holdout",
    default=0.0,
    show_default=True,
    type=click.FloatRange(0, 1, max_open=True),
    metavar="F",
    help="Fraction of each task's rows kept as its evaluation rows, not learned.",
)
@click.option("--estimator", default="FCL3", show_default=True, help="Learner of a model created here.")
@click.option("--params", default=None, metavar="JSON", help="Hyper-parameters of a model created here.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option(
    "--delay",
    default=None,
    type=click.IntRange(0),
    metavar="N",
    help="Labels that arrive later: each batch (but a task's first) is predicted with remember, and "
    "its labels are sent N batches later (0: right after its prediction).",
)
@click.option(
    "--task-column",
    default=None,
    metavar="NAME",
    help="Records: the CSV's column of task ids (the other columns but the target are named features, "
    "sent as records; default 'task' when a records option is given).",
)
@click.option("--target-column", default=None, metavar="NAME", help="Records: the CSV's target column (default 'y').")
@click.option(
    "--categorical",
    multiple=True,
    metavar="NAME",
    help="Records: a column that is a category even if its values are numbers (repeat, or comma-separated).",
)
@click.option(
    "--infer-schema",
    "infer_schema_",
    is_flag=True,
    help="Records: infer the feature schema from the file (numbers, booleans, categories with their "
    "levels, nullable where a cell is empty), print it, and create the model with it.",
)
@connection_options
def replay(
    path: Path,
    model: str,
    kind: str | None,
    batch_size: int,
    order: str,
    seed: int,
    holdout: float,
    estimator: str,
    params: str | None,
    as_json: bool,
    quiet: bool,
    delay: int | None,
    task_column: str | None,
    target_column: str | None,
    categorical: tuple[str, ...],
    infer_schema_: bool,
    url: str,
    api_key: str | None,
    timeout: float,
    retries: int,
) -> None:
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
    categories = [c.strip() for v in categorical for c in v.split(",") if c.strip()]
    as_records = bool(task_column or target_column or categories or infer_schema_)
    schema: Schema | None = None
    if as_records:
        rows, cells = read_records_csv(path, task_column or "task", target_column or "y")
        if infer_schema_ or categories:
            try:
                schema = infer_schema(cells, categories)
            except RecordError as exc:
                raise click.BadParameter(str(exc), param_hint="--categorical") from None
        if schema is not None and infer_schema_ and not as_json:
            click.echo(f"schema inferred from {path} ({len(schema)} features):\n{format_schema(schema)}")
    else:
        rows = read_dataset(path)
    assert rows.y is not None  # a replay's file has a target
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
                raise click.ClickException(
                    f"model {model!r} is a {info.kind} model but {path} is a {rows.kind} data set"
                )
            if as_records:
                if not info.features:
                    raise click.ClickException(
                        f"model {model!r} has no feature schema: it takes rows of numbers "
                        "(replay without the records options), or use another model"
                    )
                typed_rows(rows, parse_schema(info.features))  # the model's own schema
            elif info.d is not None and info.d != rows.width:
                raise click.ClickException(f"model {model!r} has {info.d} features but {path} has {rows.width}")
        except NotFound:
            if as_records and schema is None:
                raise click.ClickException(
                    f"model {model!r} does not exist: pass --infer-schema (and --categorical) "
                    "to create it with the schema of the file"
                ) from None
            if as_records and schema is not None:
                typed_rows(rows, schema)
            info = c.create_model(
                model,
                kind or file_kind,
                estimator=estimator,
                params=extra,
                features=None if schema is None else schema_json(schema),
            )
            created = True
        except FCL3Error as exc:
            raise command_error(exc, f"cannot reach model {model!r} at {url}") from None
        summary = send_batches(c, rows, batches, held, model, path, quiet, delay)
        info = c.get_model(model)
        if as_records:
            summary.update(features=info.features, columns=len(info.columns or []))
        summary.update(
            model=model,
            url=url,
            file=str(path),
            created=created,
            kind=info.kind,
            representatives=info.n_representatives,
            version=info.version,
            seconds=round(time.monotonic() - started, 2),
        )
        add_prequential(summary, info)
        if held:
            add_evaluation(summary, c, model, info.n_tasks)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        print_summary(summary)
