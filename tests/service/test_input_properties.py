"""Issue 55, property tests (hypothesis) on the embedded default and on PostgreSQL: any records,
any ``text/csv`` body and any mangled model file is answered with a 2xx or a clear 4xx, never a
5xx, and a refusal changes nothing (the model's version and vocabulary, the list of models).
Examples are bounded so that the three properties take seconds per backend."""
from __future__ import annotations

import io
import json

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
value = st.one_of(st.none(), st.booleans(), st.integers(-10**500, 10**500), st.floats(), text,
                  st.lists(st.integers(), max_size=2), st.dictionaries(text, st.integers(), max_size=2))
record = st.dictionaries(st.one_of(st.sampled_from(["x", "cat", "b"]), text), value, max_size=4)


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


def test_any_records_are_learned_or_refused_and_a_refusal_changes_nothing(backend_app):
    c = backend_app(FCL3_ESTIMATOR="STL", FCL3_PARAMS={})
    name = model(c)

    @FAST
    @given(records=st.lists(record, min_size=1, max_size=3), y=st.lists(st.floats(-10, 10), min_size=1, max_size=3))
    def prop(records, y):
        before = seen(c, name)
        r = send_json(c, f"/models/{name}/tasks/t/data", {"records": records, "y": y})
        assert r.status_code in (200, 422), r.text
        if r.status_code != 200:
            assert seen(c, name) == before
        p = send_json(c, f"/models/{name}/predict", {"task_id": "t", "records": records})
        assert p.status_code in (200, 422), p.text

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
