"""The dashboard shows a model's feature schema and the columns its records are encoded into."""
from __future__ import annotations

import csv

import pytest

from tests.service.conftest import ESTIMATOR, PARAMS

from .conftest import ROOT

expect = pytest.importorskip("playwright.sync_api").expect

FEATURES = [{"name": "age", "type": "number", "nullable": True, "fill": 0.5},
            {"name": "urban", "type": "category", "levels": ["N", "Y"]},
            {"name": "livch", "type": "category"}]


def test_the_model_page_shows_the_schema_and_the_vocabulary(service, context, artifacts):
    c = service.client
    r = c.post("/models", json={"name": "records", "kind": "classification", "estimator": ESTIMATOR,
                                "params": PARAMS, "features": FEATURES})
    assert r.status_code == 201, r.text
    with open(ROOT / "examples" / "contraception.csv", newline="") as f:
        rows = list(csv.DictReader(f))[:160]
    by_task: dict[str, list[dict]] = {}
    for row in rows:
        by_task.setdefault(row["task"], []).append(row)
    for task, group in list(by_task.items())[:6]:
        recs = [{"age": float(g["age"]), "urban": g["urban"], "livch": g["livch"]} for g in group]
        recs[0]["age"] = None  # a missing value: the fill and the indicator
        r = c.post(f"/models/records/tasks/{task}/data", json={"records": recs, "y": [float(g["use"]) for g in group]})
        assert r.status_code == 200, r.text
    page = context.new_page()
    page.goto(service.url + "/ui#/models/records")
    schema = page.locator("#model-schema")
    expect(schema).to_be_visible()
    expect(schema.locator(".schema-title")).to_contain_text("3 features")
    expect(schema.locator('tr[data-feature="age"]')).to_contain_text("missing indicator")
    expect(schema.locator('tr[data-feature="urban"]')).to_contain_text("2 levels: N, Y")
    expect(schema.locator('tr[data-feature="livch"]')).to_contain_text("levels")
    page.locator("#model-head").screenshot(path=artifacts / "records-schema.png")
    page.goto(service.url + "/ui#/models/stream")  # a model without a schema shows none
    expect(page.locator("#model-head h1")).to_contain_text("stream")
    expect(page.locator("#model-schema")).to_have_count(0)
    assert context.errors == []
