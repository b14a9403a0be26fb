"""A remembered row keeps its record (its label learns the levels it held), remembered
rows are bounded in storage and reported by /metrics, a model's columns are capped, CSV bodies
follow the JSON rules, and a take-back of the batch that brought a level."""
from __future__ import annotations

import time

import numpy as np
import pytest
from sqlalchemy import func, select

from service.store.tables import remembered_t

from .conftest import PARAMS, unique_name

FEATURES = [{"name": "x", "type": "number"}, {"name": "cat", "type": "category"}]


def new_model(c, features=FEATURES, estimator="STL", params=None, kind="regression"):
    name = unique_name("rel")
    r = c.post("/models", json={"name": name, "kind": kind, "estimator": estimator, "params": params or {},
                                "features": features})
    assert r.status_code == 201, r.text
    return name


def predict(c, name, recs, task="t"):
    r = c.post(f"/models/{name}/predict", json={"task_id": task, "records": recs})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_label_learns_the_level_its_record_held_unseen_when_served(backend_client):
    """The issue's reproduction: A and B learned with y = 0, a row of C remembered (C unseen),
    labelled y = 100: C is learned as C (it predicts about 100, no longer unseen), and an
    unseen Z predicts what "no level" learned (before: C stayed unseen and Z took its 100)."""
    c = backend_client
    name = new_model(c)
    recs = [{"x": 0.0, "cat": "A"}, {"x": 0.0, "cat": "B"}] * 3
    assert c.post(f"/models/{name}/tasks/t/data", json={"records": recs, "y": [0.0] * 6}).status_code == 200
    served = c.post(f"/models/{name}/predict", json={"task_id": "t", "records": [{"x": 0.0, "cat": "C"}],
                                                     "remember": True}).json()
    assert served["unseen"] == {"cat": ["C"]}
    r = c.post(f"/models/{name}/labels", json={"labels": [{"prediction_id": served["prediction_ids"][0], "y": 100.0}]})
    assert r.status_code == 200, r.text
    assert c.get(f"/models/{name}").json()["columns"] == ["x", "cat=A", "cat=B", "cat=C"]
    got_c, got_z = predict(c, name, [{"x": 0.0, "cat": "C"}]), predict(c, name, [{"x": 0.0, "cat": "Z"}])
    assert "unseen" not in got_c and got_z["unseen"] == {"cat": ["Z"]}
    assert got_c["predictions"][0] > 90 and got_c["predictions"][0] - got_z["predictions"][0] > 30


def test_a_label_batch_mixing_rows_of_several_widths_is_learned(backend_client):
    """Rows remembered before and after the model grew (their stored rows of two widths) make
    one batch: each is encoded from its record."""
    c = backend_client
    name = new_model(c)
    recs = [{"x": 1.0, "cat": "A"}, {"x": 2.0, "cat": "B"}]
    assert c.post(f"/models/{name}/tasks/t/data", json={"records": recs, "y": [1.0, 2.0]}).status_code == 200
    first = c.post(f"/models/{name}/predict", json={"task_id": "t", "records": recs[:1], "remember": True}).json()
    grow = [{"x": 3.0, "cat": "N"}]
    assert c.post(f"/models/{name}/tasks/t/data", json={"records": grow, "y": [3.0]}).status_code == 200
    second = c.post(f"/models/{name}/predict", json={"task_id": "t", "records": grow, "remember": True}).json()
    ids = first["prediction_ids"] + second["prediction_ids"]
    r = c.post(f"/models/{name}/labels", json={"labels": [{"prediction_id": i, "y": 1.0} for i in ids]})
    assert r.status_code == 200, r.text


def test_remembered_rows_are_bounded_in_storage_and_reported(backend_app):
    """MAX_REMEMBERED_PER_MODEL = 5: at most 5 rows wait and 5 labelled or dropped are kept (the
    older ones deleted, their ids still 410, not 404); /metrics reports the rows and the bound."""
    c = backend_app(MAX_REMEMBERED_PER_MODEL=5)
    name = new_model(c)
    recs = [{"x": 1.0, "cat": "A"}, {"x": 2.0, "cat": "B"}]
    assert c.post(f"/models/{name}/tasks/t/data", json={"records": recs, "y": [1.0, 2.0]}).status_code == 200
    ids = []
    for i in range(6):
        r = c.post(f"/models/{name}/predict", json={"task_id": "t", "remember": True,
                                                    "records": [{"x": float(i), "cat": "A"}] * 3})
        assert r.status_code == 200, r.text
        ids += r.json()["prediction_ids"]
        time.sleep(0.005)  # each request's rows expire after the last one's
    with c.app.state.engine.connect() as conn:
        stored = conn.execute(select(remembered_t.c.state, func.count()).where(remembered_t.c.model_name == name)
                              .group_by(remembered_t.c.state)).all()
    assert dict(stored) == {"p": 5, "d": 5}, stored
    for gone in (ids[0], ids[9]):  # deleted beyond the bound / dropped and kept
        r = c.post(f"/models/{name}/labels", json={"labels": [{"prediction_id": gone, "y": 1.0}]})
        assert r.status_code == 410, r.text
    assert c.post(f"/models/{name}/labels", json={"labels": [{"prediction_id": ids[-1], "y": 1.0}]}).status_code == 200
    text = c.get("/metrics").text
    assert f'fcl3_remembered_rows{{model="{name}",state="pending"}} 5.0' in text, text[-2000:]
    assert f'fcl3_remembered_rows{{model="{name}",state="done"}} 5.0' in text
    assert "fcl3_remembered_rows_bound 5.0" in text


def test_remembering_needs_the_write_key(backend_app):
    c = backend_app(API_WRITE_KEYS="w55", API_READ_KEYS="r55")
    c.headers["Authorization"] = "Bearer w55"
    name = new_model(c)
    recs = [{"x": 1.0, "cat": "A"}, {"x": 2.0, "cat": "B"}]
    assert c.post(f"/models/{name}/tasks/t/data", json={"records": recs, "y": [1.0, 2.0]}).status_code == 200
    body = {"task_id": "t", "records": recs, "remember": True}
    read = {"Authorization": "Bearer r55"}
    assert c.post(f"/models/{name}/predict", json=body, headers=read).status_code == 403
    assert c.post(f"/models/{name}/predict", json={**body, "remember": False}, headers=read).status_code == 200
    assert c.get(f"/models/{name}/labels").json()["pending"] == 0
    assert c.post(f"/models/{name}/predict", json=body).status_code == 200


def test_the_column_cap_refuses_schemas_at_once(backend_app):
    c = backend_app(MAX_COLUMNS=10)
    levels = {"name": "cat", "type": "category", "levels": [f"l{i}" for i in range(10)]}
    r = c.post("/models", json={"name": unique_name("cap"), "kind": "regression", "estimator": "STL",
                                "features": [{"name": "x", "type": "number"}, levels]})
    assert r.status_code == 422 and "11 columns; at most 10 (MAX_COLUMNS" in r.text, r.text
    name = new_model(c)
    many = [{"x": 1.0, "cat": f"n{i}"} for i in range(9)]
    r = c.post(f"/models/{name}/tasks/t/data", json={"records": many, "y": [0.0] * 9})
    assert r.status_code == 200, r.text  # 1 + 9 = 10 columns: the cap
    r = c.post(f"/models/{name}/tasks/t/data", json={"records": [{"x": 1.0, "cat": "one more"}], "y": [0.0]})
    assert r.status_code == 422 and "at most 10" in r.text, r.text
    assert len(c.get(f"/models/{name}").json()["columns"]) == 10


def test_the_engine_s_own_bound_caps_the_columns_too(backend_client):
    """FCL3 with 50 components solves for (columns + 1) x 50 unknowns, at most 3000: a schema of
    100 columns could never learn, and is refused at creation (before: 201, then every batch 422)."""
    levels = {"name": "cat", "type": "category", "levels": [f"l{i}" for i in range(99)]}
    r = backend_client.post("/models", json={"name": unique_name("eng"), "kind": "regression", "estimator": "FCL3",
                                             "params": {**PARAMS, "n_components": 50},
                                             "features": [{"name": "x", "type": "number"}, levels]})
    assert r.status_code == 422 and "100 columns; at most 60" in r.text, r.text


@pytest.mark.parametrize("text, records", [
    ("x,cat,y\n1.5, A,1\n", [{"x": 1.5, "cat": " A"}]),  # cells are not stripped: the level " A"
    ("x,cat,y\n2,NA,1\n", [{"x": 2.0, "cat": "NA"}]),  # NA is a level; an empty cell is null
    ("x,cat,y\n-0.5e1,,1\n", [{"x": -5.0, "cat": None}]),
])
def test_a_csv_body_is_its_json_twin(backend_client, text, records):
    c = backend_client
    feats = [{"name": "x", "type": "number"}, {"name": "cat", "type": "category", "nullable": True}]
    a, b = new_model(c, feats), new_model(c, feats)
    ra = c.post(f"/models/{a}/tasks/t/data", content=text, headers={"content-type": "text/csv; charset=utf-8"})
    rb = c.post(f"/models/{b}/tasks/t/data", json={"records": records, "y": [1.0]})
    assert ra.status_code == rb.status_code == 200, (ra.text, rb.text)
    assert c.get(f"/models/{a}").json()["columns"] == c.get(f"/models/{b}").json()["columns"]
    assert ra.json()["version"] == rb.json()["version"]


@pytest.mark.parametrize("cell", ["1_000", " 1", "1.", ".5", "+1", "nan", "inf", "0x10", "1e400"])
def test_a_csv_number_is_a_json_number(backend_client, cell):
    c = backend_client
    name = new_model(c)
    r = c.post(f"/models/{name}/tasks/t/data", content=f"x,cat,y\n{cell},A,1\n", headers={"content-type": "text/csv"})
    assert r.status_code == 422 and r.json()["field"] == "x", r.text
    r = c.post(f"/models/{name}/tasks/t/data", content=f"x,cat,y\n1,A,{cell}\n", headers={"content-type": "text/csv"})
    assert r.status_code == 422, r.text
    assert c.get(f"/models/{name}").json()["version"] == 0


def test_a_csv_boolean_is_a_json_boolean(backend_client):
    c = backend_client
    name = new_model(c, [{"name": "b", "type": "boolean"}])
    for cell, status in (("True", 422), ("1", 422), ("true", 200)):
        r = c.post(f"/models/{name}/tasks/t/data", content=f"b,y\n{cell},1\n", headers={"content-type": "text/csv"})
        assert r.status_code == status, (cell, r.text)


def test_a_take_back_of_the_batch_that_brought_a_level(backend_client):
    """The level keeps its column (the vocabulary is append-only: later batches' stored rows and
    exported models number their columns by it) and the model is the replay of the other
    batches' stored rows, bit for bit: what the take-back promises. The level is reported
    unseen again, and predicts as one (its column has weight 0)."""
    c = backend_client
    name = new_model(c)
    base = [{"x": 0.0, "cat": "A"}, {"x": 1.0, "cat": "B"}] * 2
    assert c.post(f"/models/{name}/tasks/t/data", json={"records": base, "y": [0.0, 1.0] * 2}).status_code == 200
    r = c.post(f"/models/{name}/tasks/t/data", json={"records": [{"x": 2.0, "cat": "C"}], "y": [9.0]})
    brought = r.json()["version"]
    later = [{"x": 0.5, "cat": "D"}, {"x": 1.5, "cat": "A"}]
    assert c.post(f"/models/{name}/tasks/t/data", json={"records": later, "y": [1.0, 2.0]}).status_code == 200
    assert c.delete(f"/models/{name}/batches/{brought}").status_code == 200
    assert c.get(f"/models/{name}").json()["columns"] == ["x", "cat=A", "cat=B", "cat=C", "cat=D"]
    got_c, got_z = predict(c, name, [{"x": 0.0, "cat": "C"}]), predict(c, name, [{"x": 0.0, "cat": "Z"}])
    assert got_c.get("unseen") == {"cat": ["C"]}
    assert got_c["predictions"] == got_z["predictions"]
    # the replay of the stored rows: a model that learns the same rows (X) gives the same predictions
    other = unique_name("rows")
    assert c.post("/models", json={"name": other, "kind": "regression", "estimator": "STL",
                                   "params": {"grow_features": True}}).status_code == 201
    rows = [[0.0, 1.0, 0.0], [1.0, 0.0, 1.0]] * 2
    assert c.post(f"/models/{other}/tasks/t/data", json={"X": rows, "y": [0.0, 1.0] * 2}).status_code == 200
    assert c.post(f"/models/{other}/tasks/t/data",
                  json={"X": [[0.5, 0, 0, 0, 1], [1.5, 1, 0, 0, 0]], "y": [1.0, 2.0]}).status_code == 200
    probe = [[0.3, 0, 1, 0, 0]]
    mine = c.post(f"/models/{name}/predict", json={"task_id": "t", "X": probe}).json()["predictions"]
    assert mine == c.post(f"/models/{other}/predict", json={"task_id": "t", "X": probe}).json()["predictions"]
    assert np.isfinite(mine).all()
