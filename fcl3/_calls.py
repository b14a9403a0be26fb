"""Every API call the client makes, independent of sync or async I/O: what to send, how to
read the answer, which retries are safe; and the client's options. The clients
(``fcl3/_async/client.py`` and the ``fcl3/_sync/client.py`` generated from it) send these."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from . import schemas
from ._version import __version__
from .errors import error_from
from .records import infer_schema, parse_schema, records_of, schema_json
from .retries import Retries
from .schemas import (
    EvaluationOut,
    EvaluationRowsOut,
    ModelList,
    ModelOut,
    PredictOut,
    TakeBackOut,
    TaskList,
    TaskOut,
    UpdateOut,
)

T = TypeVar("T")
DEFAULT_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True)
class BatchResult:
    """What :meth:`Client.learn_batch` returns: the service's answer, whether it was a replay of
    an earlier request with the same key (nothing applied this time), the key, and the number of
    attempts it took."""

    update: UpdateOut
    replayed: bool
    idempotency_key: str
    attempts: int


@dataclass
class Call(Generic[T]):
    """One API call: what to send, how to read the answer, and which retries are safe."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Resending after the request may have reached the server cannot apply anything twice.
    replay_safe: bool = False
    #: 409 means "retry" (a batch: its key still in flight, or a stale writer refused).
    retry_conflict: bool = False
    #: Busy answers (409 above, 503) are retried for ``Retries.patience`` seconds, past
    #: ``Retries.total`` (a batch: what a crashed request holds lasts up to ``LOCK_TTL``).
    patient: bool = False
    #: A retry that gets 404 means done (delete).
    missing_ok_on_retry: bool = False


def finish(call: Call[T], response: httpx.Response, attempt: int) -> T:
    """The call's result from its final answer, or the error the answer says."""
    if response.status_code == 404 and call.missing_ok_on_retry and attempt > 0:
        return None  # type: ignore[return-value]  # a delete whose first attempt went through
    if response.status_code >= 400:
        raise error_from(response)
    return call.parse(response)


# ----------------------------------------------------------------------------- bodies and paths
def _rows(X: Any, name: str = "X") -> list[list[Any]]:
    """Rows as lists (numpy arrays, lists of lists, tuples)."""
    rows = X.tolist() if hasattr(X, "tolist") else [r.tolist() if hasattr(r, "tolist") else list(r) for r in X]
    if rows and not isinstance(rows[0], list):
        raise ValueError(f"{name} must be 2-D (rows of features); got a flat sequence")
    return rows


def _values(y: Any) -> list[Any]:
    return y.tolist() if hasattr(y, "tolist") else list(y)


def is_records(X: Any) -> bool:
    """Whether ``X`` is records (a pandas DataFrame, or a list of dicts), not rows of numbers."""
    if hasattr(X, "columns") and hasattr(X, "to_dict"):
        return True
    return isinstance(X, (list, tuple)) and bool(X) and isinstance(X[0], dict)


def rows_body(X: Any) -> dict[str, Any]:
    """``{"records": [...]}`` for records (:func:`fcl3.records.records_of`), else ``{"X": [...]}``."""
    if is_records(X):
        return {"records": records_of(X)}
    return {"X": _rows(X)}


def _json(body: Any) -> bytes:
    try:
        return json.dumps(body, allow_nan=False, separators=(",", ":")).encode()
    except ValueError:
        raise ValueError("the rows hold NaN or infinity, which JSON cannot carry: nothing was sent") from None


_JSON = {"Content-Type": "application/json"}


def segment(value: str) -> str:
    """One path segment, every reserved character quoted (task ids may hold any character), so
    that a value can never change the route: "." and ".." (which a URL resolves: "/models/../x"
    is "/x") are sent as "%2E" and "%2E%2E", which reach the server as the value itself."""
    quoted = quote(str(value), safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


def model_path(name: str) -> str:
    return f"/models/{segment(name)}"


def _task_path(model: str, task_id: str) -> str:
    return f"{model_path(model)}/tasks/{segment(task_id)}"


def _typed(model: type[BaseModel]) -> Callable[[httpx.Response], Any]:
    return lambda r: model.model_validate_json(r.content)


def _parsed_json(r: httpx.Response) -> Any:
    return r.json()


def _get(path: str, parse: Callable[[httpx.Response], T], params: Any = None) -> Call[T]:
    return Call("GET", path, parse, params=params, replay_safe=True)


# ----------------------------------------------------------------------------- models
def features_of(features: Any) -> list[dict[str, Any]] | None:
    """A schema given as a list of feature objects (dicts or :class:`fcl3.records.Feature`), or
    inferred from a pandas DataFrame (:func:`fcl3.records.infer_schema`)."""
    if features is None:
        return None
    if hasattr(features, "columns") and hasattr(features, "to_dict"):
        data = records_of(features)
        columns = {str(c): [r[str(c)] for r in data] for c in features.columns}
        return schema_json(infer_schema(columns))
    return schema_json(parse_schema(list(features)))


def create_model(
    name: str, kind: str | None, estimator: str, params: dict[str, Any] | None, d: int | None, features: Any = None
) -> Call[ModelOut]:
    body = schemas.ModelCreate(
        name=name, kind=kind, estimator=estimator, params=params or {}, d=d, features=features_of(features)
    )
    return Call(
        "POST",
        "/models",
        _typed(ModelOut),
        content=_json(body.model_dump(mode="json", exclude_none=True)),
        headers=_JSON,
    )


def fork_model(name: str, source: str, version: int | None) -> Call[ModelOut]:
    body = schemas.ModelCreate(name=name, fork=schemas.ForkFrom(model=source, version=version))
    return Call(
        "POST",
        "/models",
        _typed(ModelOut),
        content=_json(body.model_dump(mode="json", include={"name", "fork"}, exclude_none=True)),
        headers=_JSON,
    )


def list_models(offset: int, limit: int) -> Call[ModelList]:
    return _get("/models", _typed(ModelList), {"offset": offset, "limit": limit})


def get_model(name: str) -> Call[ModelOut]:
    return _get(model_path(name), _typed(ModelOut))


def delete_model(name: str) -> Call[None]:
    return Call("DELETE", model_path(name), lambda r: None, replay_safe=True, missing_ok_on_retry=True)


def _write_export(path: str | os.PathLike[str]) -> Callable[[httpx.Response], int]:
    def parse(r: httpx.Response) -> int:
        target = Path(path)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.part")
        tmp.write_bytes(r.content)
        os.replace(tmp, target)  # never a half-written file under the final name
        return int(r.headers.get("X-Model-Version", "-1"))

    return parse


def export_model(name: str, path: str | os.PathLike[str]) -> Call[int]:
    return _get(f"{model_path(name)}/state", _write_export(path))


def import_model(name: str, path: str | os.PathLike[str]) -> Call[ModelOut]:
    return Call(
        "POST",
        f"{model_path(name)}/state",
        _typed(ModelOut),
        content=Path(path).read_bytes(),
        headers={"Content-Type": "application/octet-stream"},
    )


# ----------------------------------------------------------------------------- one model
def learn(model: str, task_id: str, X: Any, y: Any, key: str) -> Call[tuple[UpdateOut, bool]]:
    def parse(r: httpx.Response) -> tuple[UpdateOut, bool]:
        return UpdateOut.model_validate_json(r.content), r.headers.get("Idempotent-Replayed") == "true"

    return Call(
        "POST",
        f"{_task_path(model, task_id)}/data",
        parse,
        content=_json({**rows_body(X), "y": _values(y)}),
        headers={**_JSON, "Idempotency-Key": key},
        replay_safe=True,
        retry_conflict=True,
        patient=True,
    )


def new_key(idempotency_key: str | None) -> str:
    """The batch's Idempotency-Key: the one given, else a new UUID."""
    return idempotency_key or str(uuid.uuid4())


def predict(model: str, task_id: str, X: Any, min_version: int | None, remember: bool = False) -> Call[PredictOut]:
    """A prediction; with ``remember`` the service stores the rows (a write): not resent once it
    may have arrived, so that no rows are remembered twice under ids nobody holds."""
    body = {"task_id": task_id, **rows_body(X)}
    if remember:
        body["remember"] = True
    return Call(
        "POST",
        f"{model_path(model)}/predict",
        _typed(PredictOut),
        params={"min_version": min_version} if min_version is not None else None,
        content=_json(body),
        headers=_JSON,
        replay_safe=not remember,
    )


def label_pairs(pairs: Any) -> list[dict[str, Any]]:
    """Labels as the service takes them, from ``{prediction_id: y}`` or ``(prediction_id, y)`` pairs."""
    items = pairs.items() if hasattr(pairs, "items") else pairs
    out = []
    for item in items:
        prediction_id, y = item
        out.append({"prediction_id": str(prediction_id), "y": y.item() if hasattr(y, "item") else y})
    if not out:
        raise ValueError("no labels: give at least one (prediction_id, y) pair")
    return out


def label(model: str, pairs: Any, key: str) -> Call[tuple[UpdateOut, bool]]:
    """Labels of remembered predictions, with an Idempotency-Key: resent safely. A 409 with
    ``Retry-After`` (the key still in flight) is waited out; one without is final: an id
    labelled already (its body says by which version)."""

    def parse(r: httpx.Response) -> tuple[UpdateOut, bool]:
        return UpdateOut.model_validate_json(r.content), r.headers.get("Idempotent-Replayed") == "true"

    return Call(
        "POST",
        f"{model_path(model)}/labels",
        parse,
        content=_json({"labels": label_pairs(pairs)}),
        headers={**_JSON, "Idempotency-Key": key},
        replay_safe=True,
        patient=True,
    )


def take_back(model: str, version: int, key: str) -> Call[TakeBackOut]:
    """Take the batch of ``version`` back, with an Idempotency-Key: resent safely (a retry
    whose first attempt went through gets the first answer). A 409 with ``Retry-After`` (the
    key still in flight) is waited out; one without is final (forked ancestry, batches not
    stored), as are 404 and 410 (taken back already: its body says by which version)."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"version must be a positive integer (the version a batch produced); got {version!r}")
    return Call(
        "DELETE",
        f"{model_path(model)}/batches/{version}",
        _typed(TakeBackOut),
        headers={"Idempotency-Key": key},
        replay_safe=True,
        patient=True,
    )


def tasks(model: str, offset: int, limit: int) -> Call[TaskList]:
    return _get(f"{model_path(model)}/tasks", _typed(TaskList), {"offset": offset, "limit": limit})


def task(model: str, task_id: str) -> Call[TaskOut]:
    return _get(_task_path(model, task_id), _typed(TaskOut))


def add_evaluation(model: str, task_id: str, X: Any, y: Any) -> Call[EvaluationRowsOut]:
    return Call(
        "POST",
        f"{_task_path(model, task_id)}/evaluation",
        _typed(EvaluationRowsOut),
        content=_json({**rows_body(X), "y": _values(y)}),
        headers=_JSON,
    )


def evaluation(model: str, limit: int | None, **pages: int | None) -> Call[EvaluationOut]:
    given = {"limit": limit, **pages}
    query = {k: v for k, v in given.items() if v is not None}
    return _get(f"{model_path(model)}/evaluation", _typed(EvaluationOut), query or None)


# ----------------------------------------------------------------------------- service
def healthz() -> Call[dict[str, Any]]:
    return _get("/healthz", _parsed_json)


def ready() -> Call[dict[str, Any]]:
    return _get("/readyz", _parsed_json)


def metrics() -> Call[str]:
    return Call("GET", "/metrics", lambda r: r.text, headers={"Accept": "text/plain"}, replay_safe=True)


# ----------------------------------------------------------------------------- options
def _headers(api_key: str | None, extra: dict[str, str] | None) -> dict[str, str]:
    h = {"User-Agent": f"fcl3-client/{__version__}", "Accept": "application/json"}
    if api_key:
        h["Authorization"] = f"Bearer {api_key}"
    h.update(extra or {})
    return h


def _timeout(timeout: float | httpx.Timeout | None) -> httpx.Timeout:
    if isinstance(timeout, httpx.Timeout):
        return timeout
    return httpx.Timeout(timeout, connect=min(timeout, 10.0) if timeout else None)


def _retries(total: int) -> Retries:
    """``retries=N``: N retries, and the default patience with busy batches; 0: none at all."""
    return Retries(total=total) if total > 0 else Retries(total=0, patience=0.0)


class Options:
    """A client's settings, checked once: base URL, retries, headers (key, user agent), timeout."""

    def __init__(
        self,
        url: str,
        api_key: str | None,
        timeout: float | httpx.Timeout | None,
        retries: int | Retries,
        headers: dict[str, str] | None,
    ):
        self.url = url.rstrip("/")
        self.retries = retries if isinstance(retries, Retries) else _retries(int(retries))
        self.headers = _headers(api_key, headers)
        self.timeout = _timeout(timeout)
