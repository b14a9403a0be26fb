"""The API docs and the dashboard in a real browser (headless Chromium through Playwright),
against a real uvicorn server: offline assets only, the model's tasks, environments and
charts, live updates, the key prompt, 1,000 tasks, a narrow screen."""
from __future__ import annotations

import re
import time

import httpx
import pytest

from .conftest import READ_KEY, WRITE_KEY, clustered_stream, post_batch

pytestmark = pytest.mark.slow

expect = pytest.importorskip("playwright.sync_api").expect


def test_docs_render_their_operations_offline(service, context, artifacts):
    page = context.new_page()
    page.goto(service.url + "/docs")
    page.wait_for_selector(".opblock", timeout=20_000)
    expect(page.get_by_text("/models/{name}/tasks/{task_id}/data").first).to_be_visible()
    assert page.locator(".opblock").count() >= 10
    page.screenshot(path=artifacts / "docs.png")

    page.goto(service.url + "/redoc")
    expect(page.get_by_role("heading", name=re.compile("FCL3 service"))).to_be_visible(timeout=20_000)
    expect(page.get_by_text("/models/{name}/tasks/{task_id}/data").first).to_be_attached()
    page.wait_for_load_state("networkidle")
    page.screenshot(path=artifacts / "redoc.png")
    assert context.requests.remote() == [], "a request left the host"
    assert context.errors == []
    assert any(u.endswith("/redoc.standalone.js") for u in context.requests.urls)


def test_dashboard_shows_models_tasks_environments_and_charts(service, context, artifacts):
    page = context.new_page()
    page.goto(service.url + "/ui")
    table = page.locator("#models-table")
    expect(table).to_be_visible()
    expect(table.get_by_role("link", name="stream")).to_be_visible()
    expect(table.get_by_role("link", name="big")).to_be_visible()
    page.screenshot(path=artifacts / "models.png", full_page=True)

    table.get_by_role("link", name="stream").click()
    expect(page).to_have_url(re.compile(r"#/models/stream$"))
    model = service.client.get("/models/stream").json()
    expect(page.locator("#page-info")).to_contain_text(f"of {model['n_tasks']} tasks")
    assert model["n_representatives"] >= 2
    expect(page.locator("#model-reps")).to_have_text(str(model["n_representatives"]))
    # environments: one card per representative (plus, maybe, the tasks assigned to none)
    envs = page.locator("#envs article.env:not(.loose)")
    expect(envs).to_have_count(model["n_representatives"])
    for rep in model["representatives"]:
        expect(page.locator(f'#envs article[data-rep="{rep}"]')).to_be_visible()
    # the Z^t heat-map: a cell per (task, open representative) and per outlier slot
    cells = page.locator("#zmap svg.heatmap rect.cell")
    assert cells.count() >= 20
    # searching and sorting the tasks
    page.fill("#task-search", "task-19")  # its row (and any task that leans on it)
    expect(page.locator('#tasks-body tr[data-task="task-19"]')).to_be_visible()
    expect(page.locator('#tasks-body tr[data-task="task-00"]')).to_have_count(0)
    page.fill("#task-search", "")
    # sorting, from the keyboard: the column header is a button
    page.focus("#tasks-table button.sort[data-key=rows]")
    page.keyboard.press("Enter")
    expect(page.locator("#tasks-table th[data-key=rows]")).to_have_attribute("aria-sort", "descending")
    page.get_by_role("button", name="Task", exact=True).click()
    expect(page.locator("#tasks-table th[data-key=task]")).to_have_attribute("aria-sort", "ascending")
    expect(page.locator("#tasks-body tr").first.locator("th")).to_contain_text("task-00")
    # one task's assignment Z^t and code, from the keyboard
    page.focus('button.task-open[data-task="task-04"]')
    page.keyboard.press("Enter")
    detail = page.locator('tr[data-detail="task-04"]')
    expect(detail).to_contain_text("new environment (e)")
    expect(detail.locator("ul.bars li")).to_have_count(model["n_representatives"] + 1)
    expect(page.locator('button.task-open[data-task="task-04"]')).to_have_attribute("aria-expanded", "true")
    if service.evaluation:  # issue 13's online evaluation: prequential and held-out scores, accuracy matrix
        expect(page.locator("#card-preq .big .score")).to_be_visible()
        expect(page.locator("#card-heldout .big .score")).to_be_visible()
        expect(page.locator("#preq svg.linechart path.series")).to_have_count(2)
        assert page.locator("#acc svg.heatmap rect.cell").count() >= 20 * 21 // 2  # the lower triangle
        expect(page.locator('#tasks-body tr[data-task="task-00"] td').nth(4)).to_contain_text("vs")  # prequential
        expect(page.locator('#tasks-body tr[data-task="task-00"] td').nth(5)).to_contain_text("vs")  # held-out
    page.screenshot(path=artifacts / "dashboard.png", full_page=True)
    page.screenshot(path=artifacts / "dashboard-top.png", full_page=True, clip={"x": 0, "y": 0, "width": 1280, "height": 1180})
    page.locator("#sec-z").screenshot(path=artifacts / "assignments.png")
    assert context.requests.remote() == []
    assert context.errors == []


def test_a_new_update_appears_live(service, context, artifacts):
    page = context.new_page()
    page.goto(service.url + "/ui#/models/stream")
    expect(page.locator("#tasks-body tr").first).to_be_visible()
    expect(page.locator("#live-state")).to_have_text(re.compile("^live"), timeout=10_000)
    before = int(page.locator("#model-version").inner_text())
    _, _, X, y, _, _ = next(iter(clustered_stream(1, seed=7)))
    out = post_batch(service.client, "stream", "live-task", X, y)
    assert out["version"] == before + 1
    # no reload: the feed, the header and the table follow the commit
    expect(page.locator(f'#feed li[data-version="{out["version"]}"]')).to_contain_text("live-task", timeout=10_000)
    expect(page.locator("#model-version")).to_have_text(str(out["version"]))
    expect(page.locator('#tasks-body tr[data-task="live-task"]')).to_be_visible()
    # a burst: more data for a known task and another new task, back to back
    for task_id, _, X, y, _, _ in clustered_stream(2, seed=8):
        out = post_batch(service.client, "stream", task_id if task_id == "task-00" else "live-task-2", X, y)
    expect(page.locator("#model-version")).to_have_text(str(out["version"]), timeout=10_000)
    expect(page.locator("#feed li[data-version]")).to_have_count(3)
    expect(page.locator('#tasks-body tr[data-task="live-task-2"]')).to_be_visible()
    page.locator("#sec-live").scroll_into_view_if_needed()
    page.screenshot(path=artifacts / "live.png")
    assert context.requests.remote() == []
    assert context.errors == []


def test_without_an_event_stream_the_page_polls(service, context):
    page = context.new_page()
    page.route(re.compile(r".*/events(\?.*)?$"), lambda route: route.fulfill(status=404, json={"detail": "Not Found"}))
    page.goto(service.url + "/ui#/models/stream")
    expect(page.locator("#live-state")).to_have_text("live (polling)", timeout=10_000)
    _, _, X, y, _, _ = next(iter(clustered_stream(1, seed=9)))
    out = post_batch(service.client, "stream", "polled-task", X, y)
    expect(page.locator(f'#feed li[data-version="{out["version"]}"]')).to_contain_text("polled-task", timeout=10_000)
    expect(page.locator('#tasks-body tr[data-task="polled-task"]')).to_be_visible()
    assert context.errors == []


def test_the_key_prompt_asks_for_a_read_key(keyed_service, context, artifacts):
    page = context.new_page()
    api_auth = []
    page.on("request", lambda r: api_auth.append((r.url, r.headers.get("authorization"))) if "/models" in r.url else None)
    page.goto(keyed_service.url + "/ui")
    dialog = page.get_by_role("dialog", name="API key needed")
    expect(dialog).to_be_visible()
    page.fill("#key-input", "not-a-key")
    page.click("#key-submit")
    expect(page.locator("#key-error")).to_contain_text("refused")
    expect(page.locator("#key-error")).to_contain_text("unknown API key")
    page.screenshot(path=artifacts / "key-prompt-wrong-key.png")
    page.fill("#key-input", READ_KEY)
    page.click("#key-submit")
    expect(dialog).to_be_hidden()
    expect(page.locator("#models-table").get_by_role("link", name="keyed")).to_be_visible()
    page.locator("#models-table").get_by_role("link", name="keyed").click()
    expect(page.locator("#tasks-body tr")).to_have_count(6)
    assert ("Bearer " + READ_KEY) in {h for _, h in api_auth}
    assert all(h in (None, "Bearer not-a-key", "Bearer " + READ_KEY) for _, h in api_auth)
    # a write with the same key is refused: the page's key only reads
    r = httpx.post(keyed_service.url + "/models/keyed/tasks/x/data", json={"X": [[0.0] * 5], "y": [0.0]},
                   headers={"Authorization": f"Bearer {READ_KEY}"}, trust_env=False)
    assert r.status_code == 403
    assert WRITE_KEY not in str(api_auth)
    page.screenshot(path=artifacts / "keyed-dashboard.png")
    page.get_by_role("button", name="Forget").click()  # the key is dropped: the prompt is back
    expect(dialog).to_be_visible()
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("button", name="Enter a read key")).to_be_visible()
    assert context.requests.remote() == []
    assert context.errors == []


def test_a_thousand_tasks_page_and_a_narrow_screen(service, browser, artifacts):
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=1)
    try:
        page = ctx.new_page()
        t0 = time.monotonic()
        page.goto(service.url + "/ui#/models/big")
        expect(page.locator("#page-info")).to_contain_text("of 1,000 tasks", timeout=20_000)
        shown = time.monotonic() - t0
        assert shown < 10, f"a 1,000-task model took {shown:.1f}s to show"
        expect(page.locator("#tasks-body tr")).to_have_count(50)
        page.get_by_role("button", name="Last »").click()
        expect(page.locator("#page-info")).to_contain_text("951–1,000 of 1,000 tasks")
        page.fill("#task-search", "b0999")
        expect(page.locator("#tasks-body tr")).to_have_count(1)
        page.fill("#task-search", "")
        # keyboard: the search box, then Tab to the next control
        page.focus("#task-search")
        page.keyboard.type("b05")
        expect(page.locator("#page-info")).to_contain_text("of 100 tasks")
        assert page.locator("#zmap svg.heatmap rect.cell").count() >= 1000
        # narrow screen: nothing wider than the viewport but the scrollable tables and charts
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"the page is {overflow}px wider than a 390px screen"
        page.screenshot(path=artifacts / "narrow-big-model.png", full_page=False)
        page.goto(service.url + "/ui#/models/stream")
        expect(page.locator("#page-info")).to_contain_text("tasks")
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"the page is {overflow}px wider than a 390px screen"
        page.screenshot(path=artifacts / "narrow-stream-model.png", full_page=True)
        page.set_viewport_size({"width": 1280, "height": 900})
        page.goto(service.url + "/ui#/models/big")
        expect(page.locator("#page-info")).to_contain_text("of 1,000 tasks", timeout=20_000)
        page.screenshot(path=artifacts / "big-model.png", full_page=True)
    finally:
        ctx.close()
    learn, imported = service.big_seconds
    assert imported < 20, f"importing the 1,000-task model took {imported:.1f}s"
