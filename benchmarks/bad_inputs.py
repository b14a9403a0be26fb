"""Bad inputs (records, remembered predictions, imports), each sent to a running
service and checked: answered with its 4xx (never a 5xx) and nothing changed — the model's
version, its vocabulary and its list of models as they were. One list of cases for the tests
(``tests/service/test_refusals_change_nothing.py``, on SQLite and PostgreSQL) and for the fault
suite (``python -m benchmarks.faults --faults bad-input-sqlite,bad-input-postgres``).

:func:`run_cases` takes an httpx-like client (``httpx.Client`` or FastAPI's ``TestClient``) with
the write key in its headers, and optionally a client with a read key only.
"""
from __future__ import annotations

import io
import json
import uuid
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FEATURES = [{"name": "x", "type": "number"}, {"name": "cat", "type": "category"}]
CSV = {"content-type": "text/csv"}


@dataclass
class Case:
    """One bad input: ``send(client, ctx)`` returns the response; ``expect`` the status it must get."""

    name: str
    expect: int
    send: Callable[[Any, dict[str, Any]], Any]
    read_key: bool = False  # sent with the read-only client


def _records(n: int, prefix: str = "new") -> list[dict[str, Any]]:
    return [{"x": float(i), "cat": f"{prefix}{i}"} for i in range(n)]


def _data(ctx: dict[str, Any], body: Any, **kw: Any) -> Callable[[Any, dict[str, Any]], Any]:
    return lambda c, _: c.post(f"/models/{ctx['model']}/tasks/t/data", json=body, **kw)


def _npz_with(ctx: dict[str, Any], change: Callable[[dict[str, Any], dict[str, Any]], None]) -> bytes:
    """The model's export with its header (``__meta__``) or arrays changed by ``change``."""
    import numpy as np

    with np.load(io.BytesIO(ctx["export"]), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    header = json.loads(str(arrays["__meta__"][()]))
    change(header, arrays)
    arrays["__meta__"] = np.array(json.dumps(header))
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _import(ctx: dict[str, Any], change: Callable[[dict[str, Any], dict[str, Any]], None]) -> Callable[..., Any]:
    def send(c: Any, _: dict[str, Any]) -> Any:
        return c.post(f"/models/imp-{uuid.uuid4().hex[:8]}/state", content=_npz_with(ctx, change),
                      headers={"content-type": "application/octet-stream"})
    return send


def _first_array(header: dict[str, Any]) -> str:
    return "a/" + header["arrays"][0]


def _complex(header: dict[str, Any], arrays: dict[str, Any]) -> None:
    k = _first_array(header)
    arrays[k] = arrays[k].astype(complex)


def _huge(header: dict[str, Any], arrays: dict[str, Any]) -> None:
    k = next(f"a/{n}" for n in header["arrays"] if arrays[f"a/{n}"].dtype.kind == "f" and arrays[f"a/{n}"].size)
    arrays[k] = arrays[k] * 0 + 1e300


def _vocabulary(n: int) -> Callable[[dict[str, Any], dict[str, Any]], None]:
    def change(header: dict[str, Any], arrays: dict[str, Any]) -> None:
        voc = header["service"]["vocabulary"]
        voc += [{"feature": "cat", "role": "level", "level": f"v{i}"} for i in range(n)]
    return change


def _schema_without_growth(header: dict[str, Any], arrays: dict[str, Any]) -> None:
    header["params"]["grow_features"] = False


def _kind_banana(header: dict[str, Any], arrays: dict[str, Any]) -> None:
    header["service"]["settings"]["kind"] = "banana"
    header["service"]["settings"]["params"]["n_components"] = 10**6


def _nul_vocabulary(header: dict[str, Any], arrays: dict[str, Any]) -> None:
    header["service"]["vocabulary"].append({"feature": "cat", "role": "level", "level": "a\u0000b"})


def _zip(text: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("__meta__.npy", text)
    return buf.getvalue()


def cases(ctx: dict[str, Any]) -> list[Case]:
    """The cases against the records model ``ctx['model']`` (``ctx``: see :func:`prepare`)."""
    m = ctx["model"]
    many = [{"x": 1.0, "cat": f"L{i}"} for i in range(1200)]

    def label(body: Callable[[dict[str, Any]], Any], **kw: Any) -> Callable[[Any, dict[str, Any]], Any]:
        return lambda c, x: c.post(f"/models/{m}/labels", json=body(x), **kw)

    return [
        # 1. refused batches with new levels register nothing
        Case("data: y longer than records, new level", 422, _data(ctx, {"records": _records(1), "y": [0, 1]})),
        Case("data: 1,200 new levels (past MAX_COLUMNS)", 422, _data(ctx, {"records": many, "y": [0.0] * 1200})),
        Case("data: a label that is not a number, new level", 422,
             _data(ctx, {"records": _records(1), "y": ["a"]})),
        Case("data: an Idempotency-Key reused with other records", 422,
             _data(ctx, {"records": _records(2, "other"), "y": [0.0, 1.0]}, headers={"Idempotency-Key": "k-used"})),
        Case("data: y NaN-like (1e400), new level", 422,
             lambda c, _: c.post(f"/models/{m}/tasks/t/data", content=b'{"records": [{"x": 1, "cat": "q"}], "y": [1e400]}',
                                 headers={"content-type": "application/json"})),
        # 6, 7. numbers and levels no backend stores
        Case("data: a 400-digit integer as a number", 422, _data(ctx, {"records": [{"x": 10**400, "cat": "a"}], "y": [0]})),
        Case("predict: a 400-digit integer as a number", 422,
             lambda c, _: c.post(f"/models/{m}/predict", json={"task_id": "t", "records": [{"x": 10**400, "cat": "a"}]})),
        Case("data: a 400-digit integer as a level", 422, _data(ctx, {"records": [{"x": 1, "cat": 10**400}], "y": [0]})),
        Case("data: NUL in a level", 422, _data(ctx, {"records": [{"x": 1, "cat": "a\u0000"}], "y": [0]})),
        Case("data: a lone surrogate in a level", 422,
             lambda c, _: c.post(f"/models/{m}/tasks/t/data", content=b'{"records": [{"x": 1, "cat": "\\ud800"}], "y": [0]}',
                                 headers={"content-type": "application/json"})),
        Case("data: ESC in a level", 422, _data(ctx, {"records": [{"x": 1, "cat": "\u001b[31m"}], "y": [0]})),
        Case("data: NUL in a field name", 422, _data(ctx, {"records": [{"x": 1, "cat": "a", "b\u0000": 1}], "y": [0]})),
        # 9. CSV bodies follow the JSON rules
        Case("csv: an unknown column (Cat for cat)", 422,
             lambda c, _: c.post(f"/models/{m}/tasks/t/data", content=b"x,Cat,y\n1,A,0\n", headers=CSV)),
        Case("csv: a duplicated column", 422,
             lambda c, _: c.post(f"/models/{m}/tasks/t/data", content=b"x,cat,cat,y\n1,A,B,0\n", headers=CSV)),
        Case("csv: 1_000 as a number", 422,
             lambda c, _: c.post(f"/models/{m}/tasks/t/data", content=b"x,cat,y\n1_000,A,0\n", headers=CSV)),
        Case("csv: NaN as the label", 422,
             lambda c, _: c.post(f"/models/{m}/tasks/t/data", content=b"x,cat,y\n1,A,nan\n", headers=CSV)),
        Case("csv: charset latin-1", 415,
             lambda c, _: c.post(f"/models/{m}/tasks/t/data", content="x,cat,y\n1,\u00e9,0\n".encode("latin-1"),
                                 headers={"content-type": "text/csv; charset=latin-1"})),
        Case("csv predict: charset utf-16", 415,
             lambda c, _: c.post(f"/models/{m}/predict?task_id=t", content="x,cat\n1,A\n".encode("utf-16"),
                                 headers={"content-type": "text/csv; charset=utf-16"})),
        # 4. remembering is a write; 3. labels of remembered rows with new levels
        Case("predict remember with a read key", 403,
             lambda c, _: c.post(f"/models/{m}/predict", json={"task_id": "t", "records": _records(1, "r"),
                                                               "remember": True}), read_key=True),
        Case("predict remember: more rows than MAX_REMEMBERED_PER_MODEL", 413,
             lambda c, x: c.post(f"/models/{m}/predict", json={"task_id": "t", "remember": True,
                                                               "records": _records(x["remember_cap"] + 1, "r")})),
        Case("labels: a remembered new level with an unknown id", 404,
             label(lambda x: {"labels": [{"prediction_id": x["pending"], "y": 1.0},
                                         {"prediction_id": f"{2**44:x}-0123456789abcdef", "y": 1.0}]})),
        Case("labels: a remembered new level, ids of two tasks", 422,
             label(lambda x: {"labels": [{"prediction_id": x["pending"], "y": 1.0},
                                         {"prediction_id": x["other_task"], "y": 1.0}]})),
        Case("labels: a remembered new level, a label not a number", 422,
             label(lambda x: {"labels": [{"prediction_id": x["pending"], "y": "one"}]})),
        Case("labels: an Idempotency-Key reused with other labels", 422,
             label(lambda x: {"labels": [{"prediction_id": x["pending"], "y": 2.0}]},
                   headers={"Idempotency-Key": "k-labels"})),
        # 14. a retry with the key of a batch taken back since
        Case("data: retry with the Idempotency-Key of a batch taken back", 410,
             _data(ctx, {"records": [{"x": 0.5, "cat": "gone"}], "y": [1.0]}, headers={"Idempotency-Key": "k-gone"})),
        # 1, 2, 10, 12. models that could never learn, or half made
        Case("create: NUL in a feature name", 422,
             lambda c, _: c.post("/models", json={"name": f"n-{uuid.uuid4().hex[:8]}", "kind": "regression",
                                                  "features": [{"name": "a\u0000b", "type": "number"}]})),
        Case("create: 700 declared levels (past MAX_COLUMNS)", 422,
             lambda c, _: c.post("/models", json={"name": f"n-{uuid.uuid4().hex[:8]}", "kind": "regression",
                                                  "features": [{"name": "c", "type": "category",
                                                                "levels": [f"l{i}" for i in range(700)]}]})),
        Case("create: 1,000 features of 50 levels", 422,
             lambda c, _: c.post("/models", json={"name": f"n-{uuid.uuid4().hex[:8]}", "kind": "regression",
                                                  "features": [{"name": f"f{j}", "type": "category",
                                                                "levels": [f"l{i}" for i in range(50)]}
                                                               for j in range(1000)]})),
        Case("create: a declared level with ESC", 422,
             lambda c, _: c.post("/models", json={"name": f"n-{uuid.uuid4().hex[:8]}", "kind": "regression",
                                                  "features": [{"name": "c", "type": "category", "levels": ["\u001b"]}]})),
        Case("fork: past the parent's version", 409,
             lambda c, _: c.post("/models", json={"name": f"n-{uuid.uuid4().hex[:8]}",
                                                  "fork": {"model": m, "version": 10**6}})),
        Case("fork: an unknown parent", 404,
             lambda c, _: c.post("/models", json={"name": f"n-{uuid.uuid4().hex[:8]}",
                                                  "fork": {"model": f"none-{uuid.uuid4().hex[:6]}", "version": 1}})),
        # 8, 11. imports the engine could not update
        Case("import: complex128 arrays", 422, _import(ctx, _complex)),
        Case("import: arrays of 1e300", 422, _import(ctx, _huge)),
        Case("import: a vocabulary past MAX_COLUMNS", 422, _import(ctx, _vocabulary(1200))),
        Case("import: a schema on an engine without grow_features", 422, _import(ctx, _schema_without_growth)),
        Case("import: NUL in a level of the vocabulary", 422, _import(ctx, _nul_vocabulary)),
        Case("import: settings of kind banana and n_components 10**6", 422, _import(ctx, _kind_banana)),
        Case("import: not a model file", 422,
             lambda c, _: c.post(f"/models/imp-{uuid.uuid4().hex[:8]}/state", content=_zip("{}"),
                                 headers={"content-type": "application/octet-stream"})),
    ]


def prepare(client: Any, estimator: str = "STL", params: dict[str, Any] | None = None) -> dict[str, Any]:
    """A records model that has learned a batch, a batch taken back after its key was used, a
    key used, rows remembered (one with a new level, one of another task), its export."""
    name = f"bad-{uuid.uuid4().hex[:10]}"
    r = client.post("/models", json={"name": name, "kind": "regression", "estimator": estimator,
                                     "params": params or {}, "features": FEATURES})
    assert r.status_code == 201, r.text
    recs = [{"x": 0.0, "cat": "A"}, {"x": 1.0, "cat": "B"}] * 3
    for task in ("t", "u"):
        r = client.post(f"/models/{name}/tasks/{task}/data", json={"records": recs, "y": [0.0] * 6})
        assert r.status_code == 200, r.text
    r = client.post(f"/models/{name}/tasks/t/data", json={"records": recs[:2], "y": [0.0, 1.0]},
                    headers={"Idempotency-Key": "k-used"})
    assert r.status_code == 200, r.text
    r = client.post(f"/models/{name}/tasks/t/data", json={"records": [{"x": 0.5, "cat": "gone"}], "y": [1.0]},
                    headers={"Idempotency-Key": "k-gone"})
    assert r.status_code == 200, r.text
    assert client.delete(f"/models/{name}/batches/{r.json()['version']}").status_code == 200
    ids = []
    for task, level in (("t", "C"), ("u", "D"), ("t", "E")):
        r = client.post(f"/models/{name}/predict", json={"task_id": task, "records": [{"x": 0.0, "cat": level}],
                                                         "remember": True})
        assert r.status_code == 200, r.text
        ids.append(r.json()["prediction_ids"][0])
    r = client.post(f"/models/{name}/labels", json={"labels": [{"prediction_id": ids[2], "y": 1.0}]},
                    headers={"Idempotency-Key": "k-labels"})
    assert r.status_code == 200, r.text
    r = client.get(f"/models/{name}/state")
    assert r.status_code == 200, r.text
    return {"model": name, "pending": ids[0], "other_task": ids[1], "export": r.content, "remember_cap": 100_000}


def state(client: Any, model: str) -> dict[str, Any]:
    """What a refusal must leave as it was: the model's version and columns, its remembered rows
    waiting, and the models there are."""
    m = client.get(f"/models/{model}").json()
    models = client.get("/models", params={"limit": 1000}).json()
    return {"version": m["version"], "columns": m["columns"], "n_tasks": m["n_tasks"],
            "pending": client.get(f"/models/{model}/labels").json()["pending"],
            "models": sorted(x["name"] for x in models["models"])}


def run_cases(client: Any, reader: Any | None = None, estimator: str = "STL",
              params: dict[str, Any] | None = None, remember_cap: int | None = None) -> list[dict[str, Any]]:
    """Every case sent, with its status, the start of its body, and whether it changed anything."""
    ctx = prepare(client, estimator, params)
    if remember_cap is not None:
        ctx["remember_cap"] = remember_cap
    out = []
    for case in cases(ctx):
        before = state(client, ctx["model"])
        r = case.send(reader if case.read_key and reader is not None else client, ctx)
        after = state(client, ctx["model"])
        out.append({"case": case.name, "expect": case.expect, "status": r.status_code, "body": r.text[:200],
                    "changed": sorted(k for k in before if before[k] != after[k])})
    return out
