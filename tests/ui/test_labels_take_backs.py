"""The dashboard's labels and take-backs (issue 23, part 3) in headless Chromium: predictions
waiting for their labels and labels received per task, taken-back batches in the timeline of
versions, and a take-back arriving live."""
from __future__ import annotations

import re

import numpy as np
import pytest

from .conftest import clustered_stream, create_model, post_batch

pytestmark = pytest.mark.slow

expect = pytest.importorskip("playwright.sync_api").expect


def _remember(client, model, task, X) -> list[str]:
    r = client.post(f"/models/{model}/predict", json={"task_id": task, "X": np.asarray(X).tolist(), "remember": True})
    assert r.status_code == 200, r.text
    return r.json()["prediction_ids"]


def _label(client, model, ids, y) -> dict:
    r = client.post(f"/models/{model}/labels", json={"labels": [{"prediction_id": i, "y": float(v)} for i, v in zip(ids, y)]})
    assert r.status_code == 200, r.text
    return r.json()


def test_pending_labels_received_and_taken_back_batches(service, context, artifacts):
    c, name = service.client, "history"
    create_model(c, name)
    stream = list(clustered_stream(4, rows=20, seed=11, eval_rows=10))
    for task_id, _, X, y, _, _ in stream:
        post_batch(c, name, task_id, X, y)
    # labels that arrive later: task-00 gets 6 of its 10 rows labelled, task-01 none of its 4
    (t0, _, _, _, X0, y0), (t1, _, _, _, X1, _) = stream[0], stream[1]
    ids0, ids1 = _remember(c, name, t0, X0), _remember(c, name, t1, X1[:4])
    labelled = _label(c, name, ids0[:6], y0[:6])
    # the poisoned batch: one row with a feature at 1e6, then taken back
    bad = post_batch(c, name, t1, [[0.5, 1e6, 0.0, 0.0, 0.0]], [1.0])
    r = c.delete(f"/models/{name}/batches/{bad['version']}")
    assert r.status_code == 200, r.text
    took = r.json()
    page = context.new_page()
    page.goto(service.url + f"/ui#/models/{name}")
    section = page.locator("#sec-history")
    expect(section).to_be_visible()
    expect(page.locator("#card-pending .big")).to_have_text("8")  # 4 + 4 remembered, not labelled
    expect(page.locator("#card-labels .big")).to_have_text("6")
    expect(page.locator("#card-take-backs .big")).to_have_text("1")
    expect(page.locator('#labels-table tr[data-task="task-00"] td').nth(0)).to_have_text("4")
    expect(page.locator('#labels-table tr[data-task="task-00"] td').nth(1)).to_have_text("6")
    expect(page.locator('#labels-table tr[data-task="task-01"] td').nth(0)).to_have_text("4")
    # the timeline: a mark per version, labels green, the take-back red and its batch crossed out
    expect(page.locator("#timeline circle")).to_have_count(took["version"] - 1)
    expect(page.locator("#timeline circle.tl-labels")).to_have_count(1)
    expect(page.locator("#timeline path.tl-take-back")).to_have_count(1)
    expect(page.locator("#timeline circle.tl-removed")).to_have_count(1)
    assert f"taken back by v{took['version']}" in page.locator("#timeline circle.tl-removed title").text_content()
    assert f"v{labelled['version']}: labels that arrived later" in page.locator(
        "#timeline circle.tl-labels title").text_content()
    expect(page.locator(f'#take-back-list li[data-version="{took["version"]}"]')).to_contain_text(
        f"took back batch v{bad['version']} of task task-01 · 1 row")
    section.scroll_into_view_if_needed()
    section.screenshot(path=artifacts / "labels-take-backs.png")

    # live: another take-back and a label arrive without reloading
    expect(page.locator("#live-state")).to_have_text(re.compile("^live"), timeout=10_000)
    r = c.delete(f"/models/{name}/batches/{labelled['version']}")  # the label batch itself
    assert r.status_code == 200, r.text
    v = r.json()["version"]
    expect(page.locator(f'#feed li[data-version="{v}"]')).to_contain_text(f"took back batch v{labelled['version']}",
                                                                          timeout=10_000)
    expect(page.locator("#card-take-backs .big")).to_have_text("2", timeout=10_000)
    expect(page.locator("#card-labels .big")).to_have_text("0")  # a label batch taken back no longer counts
    page.screenshot(path=artifacts / "labels-take-backs-page.png", full_page=True)
    assert context.requests.remote() == []
    assert context.errors == []
