"""Property tests (hypothesis) on the embedded default and on PostgreSQL: any records,
any ``text/csv`` body and any mangled model file is answered with a 2xx or a clear 4xx, never a
5xx, and a refusal changes nothing (the model's version and vocabulary, the list of models).
Examples are bounded so that the three properties take seconds per backend."""
from __future__ import annotations

import io
import json
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import unique_name

FEATURES = [{"name": "x", "type": "number", "nullable": True}, {"name": "cat", "type": "category"},
            {"name": "b", "type": "boolean", "nullable": True}]
FAST = settings(max_examples=30, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])

text = st.text(st.characters(codec=None, exclude_categories=()), max_size=8)  # control characters, surrogates
#: Values no backend stores, or that the rules refuse: beside valid ones, so that a record is often
#: valid but for one field, and a batch often brings new levels.
nasty = st.sampled_from([10**400, -10**400, 10**250, "\x00", "a\ud800", "\x1b[0m", "x" * 201, float("nan"),
                         float("inf"), 1e308, [], {}, True, "", "NA", " A"])
value = st.one_of(st.none(), st.booleans(), st.integers(-10**500, 10**500), st.floats(), text,
                  st.lists(st.integers(), max_size=2), st.dictionaries(text, st.integers(), max_size=2), nasty)
record = st.fixed_dictionaries(
    {"x": st.one_of(st.none(), st.floats(-1e6, 1e6), st.integers(-1000, 1000), nasty),
     "cat": st.one_of(st.sampled_from(["A", "B"]), st.text(max_size=4), st.integers(-5, 5), nasty),
     "b": st.one_of(st.none(), st.booleans(), nasty)},
    optional={"extra": value, "X": value})


def model(c) -> str:
    name = unique_name("prop")
    r = c.post("/models", json={"name": name, "kind": "regression", "estimator": "STL", "features": FEATURES})
    assert r.status_code == 201, r.text
    r = c.post(f"/models/{name}/tasks/t/data", json={"records": [{"x": 1.0, "cat": "A", "b": True},
                                                                {"x": 2.0, "cat": "B", "b": None}], "y": [1.0, 2.0]})
    assert r.status_code == 200, r.text
    return name


def seen(c, name) -> tuple:
    m = c.get(f"/models/{name}").json()
    return m["version"], tuple(m["columns"])


def send_json(c, path, body):
    """``body`` as JSON with every non-ASCII character escaped (lone surrogates included)."""
    return c.post(path, content=json.dumps(body, allow_nan=True).encode(), headers={"content-type": "application/json"})


TYPES = {f["name"]: f["type"] for f in FEATURES}


def cell(key: str, v) -> str | None:
    """``v`` as the CSV cell that reads back as ``v`` by the JSON rules, None if there is none."""
    kind = TYPES.get(key, "category")
    if v is None:
        return ""
    if isinstance(v, bool):
        return ("true" if v else "false") if kind == "boolean" else None
    if isinstance(v, int):
        return str(v) if kind != "boolean" and abs(v) < 10**4000 else None
    if isinstance(v, float):
        return json.dumps(v) if kind == "number" and math.isfinite(v) else None
    if isinstance(v, str) and kind == "category" and v and not set(v) & set(',"\r\n') and "\ud800" not in v:
        return v
    return None


def as_csv(records, y) -> bytes | None:
    """The ``text/csv`` twin of a JSON batch, None when a value has none."""
    keys = list(dict.fromkeys(k for r in records for k in r))
    if len(y) != len(records) or "y" in keys or not keys or any(set(k) & set(',"\r\n') for k in keys):
        return None
    lines = [",".join([*keys, "y"])]
    for r, target in zip(records, y):
        cells = [cell(k, r[k]) if k in r else None for k in keys]
        if any(x is None for x in cells) or any(k not in r for k in keys):
            return None
        lines.append(",".join([*cells, json.dumps(target)]))
    return ("\n".join(lines) + "\n").encode()


def test_any_records_are_learned_or_refused_and_a_refusal_changes_nothing(backend_app):
    """JSON records, and their ``text/csv`` twin sent to a twin model: the same answer."""
    c = backend_app(FCL3_ESTIMATOR="STL", FCL3_PARAMS={})
    name, twin = model(c), model(c)

    @FAST
    @given(records=st.lists(record, min_size=1, max_size=3),
           y=st.lists(st.one_of(st.floats(-10, 10), st.sampled_from([1e400, 10**400])), min_size=1, max_size=3),
           same_length=st.booleans())
    def prop(records, y, same_length):
        if same_length:  # a batch of one target per record (else: lengths that differ)
            y = (y * 3)[: len(records)]
        before = seen(c, name)
        r = send_json(c, f"/models/{name}/tasks/t/data", {"records": records, "y": y})
        assert r.status_code in (200, 422), r.text
        if r.status_code != 200:
            assert seen(c, name) == before
        p = send_json(c, f"/models/{name}/predict", {"task_id": "t", "records": records})
        assert p.status_code in (200, 422), p.text
        body = as_csv(records, y)
        if body is not None and seen(c, twin)[1] == before[1]:  # the twin has the same columns: the same answer
            t = c.post(f"/models/{twin}/tasks/t/data", content=body, headers={"content-type": "text/csv"})
            assert t.status_code == r.status_code, (body, r.text, t.text)
            assert seen(c, twin)[1] == seen(c, name)[1]

    prop()


csv_cell = st.text(st.characters(codec="utf-8", exclude_characters="\r\n,\""), max_size=6)


def test_any_csv_body_is_learned_or_refused_and_a_refusal_changes_nothing(backend_app):
    c = backend_app(FCL3_ESTIMATOR="STL", FCL3_PARAMS={})
    name = model(c)

    @FAST
    @given(header=st.lists(st.one_of(st.sampled_from(["x", "cat", "b", "y", "Y"]), csv_cell), min_size=1, max_size=5),
           rows=st.lists(st.lists(csv_cell, min_size=1, max_size=5), min_size=1, max_size=3),
           charset=st.sampled_from([None, "utf-8", "latin-1", "UTF-8", "utf-16"]))
    def prop(header, rows, charset):
        body = "\n".join(",".join(r) for r in [header, *rows]).encode("utf-8")
        kind = "text/csv" + (f"; charset={charset}" if charset else "")
        before = seen(c, name)
        r = c.post(f"/models/{name}/tasks/t/data", content=body, headers={"content-type": kind})
        assert r.status_code in (200, 415, 422), r.text
        if r.status_code != 200:
            assert seen(c, name) == before
        p = c.post(f"/models/{name}/predict?task_id=t", content=body, headers={"content-type": kind})
        assert p.status_code in (200, 415, 422), p.text

    prop()


json_value = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), text),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                          max_leaves=6)
dtypes = st.sampled_from(["<f8", "<f4", "<i8", "<c16", "|b1", "<U3", "|S2", "<m8[s]"])


def test_any_mangled_model_file_is_imported_or_refused_and_never_half_made(backend_app):
    c = backend_app(FCL3_ESTIMATOR="STL", FCL3_PARAMS={})
    name = model(c)
    export = c.get(f"/models/{name}/state").content
    with np.load(io.BytesIO(export), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    header = json.loads(str(arrays["__meta__"][()]))
    entries = sorted(k for k in arrays if k != "__meta__")
    paths = [("params",), ("meta",), ("service", "settings"), ("service", "vocabulary"), ("service", "version"),
             ("service", "summary"), ("service", "tasks"), ("service", "settings", "features"),
             ("service", "settings", "kind"), ("service", "settings", "params"), ("tasks",), ("estimator",)]

    @FAST
    @given(path=st.sampled_from(paths), new=json_value, entry=st.sampled_from(entries), dtype=dtypes,
           scale=st.sampled_from([1.0, -1.0, 1e300, 0.0]), which=st.sampled_from(["header", "array", "both"]))
    def prop(path, new, entry, dtype, scale, which):
        h = json.loads(json.dumps(header))
        a = dict(arrays)
        if which in ("header", "both"):
            at = h
            for key in path[:-1]:
                at = at.setdefault(key, {}) if isinstance(at, dict) else {}
            if isinstance(at, dict):
                at[path[-1]] = new
        if which in ("array", "both"):
            try:
                a[entry] = (a[entry] * scale).astype(dtype)
            except (TypeError, ValueError, OverflowError):
                a[entry] = np.zeros(a[entry].shape, dtype=dtype)
        a["__meta__"] = np.array(json.dumps(h))
        buf = io.BytesIO()
        np.savez(buf, **a)
        target = unique_name("mangled")
        models_before = c.get("/models", params={"limit": 1000}).json()["total"]
        r = c.post(f"/models/{target}/state", content=buf.getvalue(), headers={"content-type": "application/octet-stream"})
        assert r.status_code in (201, 413, 422), r.text
        if r.status_code != 201:
            assert c.get(f"/models/{target}").status_code == 404
            assert c.get("/models", params={"limit": 1000}).json()["total"] == models_before
            return
        for path_ in (f"/models/{target}", f"/models/{target}/tasks", f"/models/{target}/state"):
            assert c.get(path_).status_code == 200
        learned = c.post(f"/models/{target}/tasks/t/data", json={"records": [{"x": 1.0, "cat": "A", "b": True}],
                                                                 "y": [1.0]})
        assert learned.status_code in (200, 422), learned.text
        assert c.delete(f"/models/{target}").status_code == 204

    prop()
