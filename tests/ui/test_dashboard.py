"""The API docs and the dashboard in a real browser (headless Chromium through Playwright),
against a real uvicorn server: offline assets only, the model's tasks, environments and
charts, live updates, the key prompt, 1,000 tasks, a narrow screen."""
from __future__ import annotations

import re
import time

import httpx
import pytest

from .conftest import READ_KEY, clustered_stream, post_batch

pytestmark = pytest.mark.slow

expect = pytest.importorskip("playwright.sync_api").expect

#: The tasks table's sortable columns, in order (service/ui/static/tasks.js, COLUMNS).
COLUMN_KEYS = ["task", "rows", "batches", "lean", "e", "preq", "heldout", "version", "updated"]


# ----------------------------------------------------------------------------- helpers
def _luminance(rgb: tuple[float, float, float]) -> float:
    """WCAG 2 relative luminance of an sRGB colour (0-255 channels)."""
    lin = [c / 255 / 12.92 if c / 255 <= 0.04045 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast_ratio(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two CSS colours as computed by the browser ("rgb(r, g, b)")."""
    la, lb = (_luminance(tuple(float(x) for x in re.findall(r"[\d.]+", c)[:3])) for c in (a, b))
    return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)


#: Each value drawn on a heat-map: its cell's fill and its own text fill, as the page computes them
#: (CSS included), with its font size and weight.
CELL_TEXT_JS = """(root) => [...root.querySelectorAll("svg.heatmap text.cellvalue")].map((t) => {
  const cell = t.previousElementSibling, ts = getComputedStyle(t);
  return {value: t.textContent, cell: getComputedStyle(cell).fill, ink: ts.fill,
          size: parseFloat(ts.fontSize), weight: Number(ts.fontWeight) || 400};
})"""


def assert_readable(values: list[dict]) -> None:
    """WCAG AA: 4.5:1, or 3:1 for large text (24 px, or 18.66 px bold)."""
    assert values, "no value drawn on the heat-map"
    bad = []
    for v in values:
        large = v["size"] >= 24 or (v["size"] >= 18.66 and v["weight"] >= 700)
        ratio = contrast_ratio(v["cell"], v["ink"])
        if ratio < (3.0 if large else 4.5):
            bad.append(f'{v["value"]!r}: {v["ink"]} on {v["cell"]} is {ratio:.2f}:1')
    assert not bad, f"{len(bad)} of {len(values)} heat-map values are unreadable: " + "; ".join(bad[:8])


def assert_no_sideways_scroll(page) -> None:
    """The page is no wider than the screen, and no table scrolls sideways."""
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    width = page.evaluate("window.innerWidth")
    assert overflow <= 1, f"the page is {overflow}px wider than a {width}px screen"
    wide = page.evaluate("""[...document.querySelectorAll(".table-wrap")].filter((w) => w.scrollWidth > w.clientWidth + 1)
                            .map((w) => `${w.querySelector("table")?.id}: ${w.scrollWidth}px in ${w.clientWidth}px`)""")
    assert wide == [], f"tables scroll sideways: {wide}"


def assert_rows_fit(page, table: str, width: int) -> None:
    """Every cell of the table's rows is on the screen (horizontally) and says which column it is."""
    cells = page.evaluate("""(sel) => [...document.querySelectorAll(`${sel} > tbody > tr:not(.detail) > :is(th, td)`)]
      .filter((c) => !c.colSpan || c.colSpan === 1).map((c) => {
        const r = c.getBoundingClientRect(), before = getComputedStyle(c, "::before");
        return {row: c.parentElement.dataset.task ?? c.parentElement.dataset.model, col: c.dataset.label ?? c.tagName,
                left: r.left, right: r.right, label: c.dataset.label ?? null,
                shown: before.display !== "none" && before.content !== "none" && before.content !== "normal"};
      })""", table)
    assert cells, f"{table} has no row"
    off = [f'{c["row"]}/{c["col"]} at {c["left"]:.0f}-{c["right"]:.0f}px' for c in cells if c["left"] < -1 or c["right"] > width + 1]
    assert not off, f"{len(off)} cells of {table} are off a {width}px screen: {off[:6]}"
    unlabelled = [f'{c["row"]}/{c["col"]}' for c in cells if c["label"] and not c["shown"]]
    assert not unlabelled, f"cells without their column's name on a narrow screen: {unlabelled[:6]}"


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


def test_the_held_out_card_is_pooled_over_the_rows_as_replay_reports_it(service, context):
    """The card's figure is the root of the rows' mean squared error over every evaluation row
    (what ``fcl3 replay`` prints), not the mean of the tasks' RMSEs."""
    if not service.evaluation:
        pytest.skip("the service has no online evaluation")
    ev = service.client.get("/models/stream/evaluation", params={"matrix_limit": 0}).json()
    scored = [t["score"] for t in ev["tasks"] if t["score"]]
    rows = sum(s["n"] for s in scored)
    pooled = (sum(s["n"] * s["rmse"] ** 2 for s in scored) / rows) ** 0.5
    page = context.new_page()
    page.goto(service.url + "/ui#/models/stream")
    card = page.locator("#card-heldout")
    expect(card).to_contain_text(f"pooled over {rows:,} evaluation rows of {len(scored)} tasks")
    shown = float(re.search(r"[-0-9.]+", card.locator(".big .score").inner_text()).group())
    assert shown == float(f"{pooled:.3g}"), (shown, pooled)  # the card's 3 significant digits


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
    sent = []  # (method, url, Authorization) of every request the page makes
    page.on("request", lambda r: sent.append((r.method, r.url, r.headers.get("authorization"))))
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
    api_auth = [(u, h) for _, u, h in sent if "/models" in u]
    assert ("Bearer " + READ_KEY) in {h for _, h in api_auth}
    assert all(h in (None, "Bearer not-a-key", "Bearer " + READ_KEY) for _, h in api_auth)
    # the key goes with reads only, and only to this service
    keyed = [(m, u) for m, u, h in sent if h is not None]
    assert keyed and all(m == "GET" and u.startswith(keyed_service.url + "/") for m, u in keyed), keyed
    # a write with the same key is refused: the page's key only reads
    r = httpx.post(keyed_service.url + "/models/keyed/tasks/x/data", json={"X": [[0.0] * 5], "y": [0.0]},
                   headers={"Authorization": f"Bearer {READ_KEY}"}, trust_env=False)
    assert r.status_code == 403
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
        # keyboard: the search box, then Tab to the next control (the whole table: test_the_tasks_table_from_the_keyboard)
        page.focus("#task-search")
        page.keyboard.type("b05")
        expect(page.locator("#page-info")).to_contain_text("of 100 tasks")
        page.keyboard.press("Tab")
        expect(page.locator("#task-env")).to_be_focused()
        assert page.locator("#zmap svg.heatmap rect.cell").count() >= 1000
        # narrow screen: nothing wider than the viewport but the scrollable charts; the tables are
        # stacked cards, every column on screen
        assert_no_sideways_scroll(page)
        assert_rows_fit(page, "#tasks-table", 390)
        page.screenshot(path=artifacts / "narrow-big-model.png", full_page=False)
        page.goto(service.url + "/ui#/models/stream")
        expect(page.locator("#page-info")).to_contain_text("tasks")
        expect(page.locator('#tasks-body tr[data-task="task-00"] td[data-col=heldout]')).to_contain_text(
            "vs" if service.evaluation else "no data yet")
        assert_no_sideways_scroll(page)
        assert_rows_fit(page, "#tasks-table", 390)
        page.locator("#sec-tasks").screenshot(path=artifacts / "narrow-tasks.png")
        page.screenshot(path=artifacts / "narrow-stream-model.png", full_page=True)
        page.goto(service.url + "/ui#/")
        expect(page.locator('#models-table tr[data-model="stream"] td.score-cell .score')).to_be_visible()
        assert_no_sideways_scroll(page)
        assert_rows_fit(page, "#models-table", 390)
        page.screenshot(path=artifacts / "narrow-models.png", full_page=True)
        page.set_viewport_size({"width": 1280, "height": 900})
        page.goto(service.url + "/ui#/models/big")
        expect(page.locator("#page-info")).to_contain_text("of 1,000 tasks", timeout=20_000)
        page.screenshot(path=artifacts / "big-model.png", full_page=True)
    finally:
        ctx.close()
    learn, imported = service.big_seconds
    assert imported < 20, f"importing the 1,000-task model took {imported:.1f}s"


def test_the_models_list_shows_each_models_prequential_error(service, context, artifacts):
    """GET /models lists "prequential": null; the page reads each model (GET /models/{name}) for it."""
    page = context.new_page()
    page.goto(service.url + "/ui")
    cell = page.locator('#models-table tr[data-model="stream"] td.score-cell')
    expect(cell.locator(".score")).to_be_visible()
    overall = service.client.get("/models/stream").json()["prequential"]["overall"]
    assert overall is not None, "the stream model has second batches: it has prequential scores"
    assert float(cell.locator(".score").inner_text()) == pytest.approx(overall["rmse"], rel=5e-3)
    assert float(cell.locator(".vs").inner_text().removeprefix("vs ")) == pytest.approx(overall["baseline_rmse"], rel=5e-3)
    expect(cell).to_contain_text("better" if overall["rmse"] < overall["baseline_rmse"] else "worse")
    # imported with no batch scored: nothing yet
    expect(page.locator('#models-table tr[data-model="big"] td.score-cell')).to_have_text("no data yet")
    page.screenshot(path=artifacts / "models-prequential.png")
    assert context.errors == []


def test_heat_map_values_contrast_with_their_cells(service, context, artifacts):
    """Every value printed on a heat-map cell contrasts with the cell (WCAG AA), in the page as
    drawn and over the whole of both colour ramps."""
    page = context.new_page()
    page.goto(service.url + "/ui#/models/stream")
    expect(page.locator("#tasks-body tr").first).to_be_visible()
    if service.evaluation:
        expect(page.locator("#acc svg.heatmap text.cellvalue").first).to_be_attached()
        assert_readable(page.locator("#acc").evaluate(CELL_TEXT_JS))
        page.locator("#sec-acc").screenshot(path=artifacts / "accuracy-matrix.png")
    # every colour either ramp can give a cell, drawn by charts.js into the page (so its CSS applies)
    sweep = page.evaluate("""async () => {
      const { heatmap, VIRIDIS, BLUES } = await import("./ui/assets/charts.js");
      const box = document.createElement("div");
      box.id = "contrast-sweep";
      const cols = Array.from({ length: 101 }, (_, j) => `c${j}`);
      box.append(...[VIRIDIS, BLUES].map((stops) => heatmap({ rows: ["r"], cols, cell: { w: 40, h: 18 }, showValues: true,
        value: (i, j) => j / 100, title: () => "", scale: (v) => v, stops, label: "sweep" })));
      document.getElementById("acc").append(box);
      return true;
    }""")
    assert sweep
    values = page.locator("#contrast-sweep").evaluate(CELL_TEXT_JS)
    assert len(values) == 202
    assert_readable(values)
    assert context.errors == []


def test_the_tasks_table_from_the_keyboard(service, context, artifacts):
    """Tab from the search box through the filters, the sort headers, every row and the pager;
    Enter and Space act, and the focus stays where it was (or moves to a neighbour)."""
    page = context.new_page()
    page.goto(service.url + "/ui#/models/big")
    info = page.locator("#page-info")
    expect(info).to_contain_text("of 1,000 tasks", timeout=20_000)
    tab = lambda: page.keyboard.press("Tab")  # noqa: E731
    page.focus("#task-search")
    page.keyboard.type("b05")
    expect(info).to_have_text("1–50 of 100 tasks (filtered from 1,000)")
    tab()
    expect(page.locator("#task-env")).to_be_focused()
    tab()
    expect(page.locator("#task-size")).to_be_focused()
    for key in COLUMN_KEYS:
        tab()
        button = page.locator(f"#tasks-table button.sort[data-key={key}]")
        expect(button).to_be_focused()
        if key == "task":
            assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"  # focus is visible
            header = page.locator("#tasks-table th[data-key=task]")
            page.keyboard.press("Space")
            expect(header).to_have_attribute("aria-sort", "ascending")
            expect(button).to_be_focused()
            page.keyboard.press("Enter")
            expect(header).to_have_attribute("aria-sort", "descending")
            page.keyboard.press("Enter")
            expect(header).to_have_attribute("aria-sort", "ascending")
            expect(button).to_be_focused()
    # the rows: one stop per task, in the order shown (b0500 … b0549)
    ids = [f"b{n:04d}" for n in range(500, 550)]
    for k, task_id in enumerate(ids):
        tab()
        opener = page.locator(f'button.task-open[data-task="{task_id}"]')
        expect(opener).to_be_focused()
        if k == 1:
            page.keyboard.press("Enter")
            expect(page.locator(f'tr[data-detail="{task_id}"]')).to_contain_text("Assignment")
            expect(opener).to_have_attribute("aria-expanded", "true")
            expect(opener).to_be_focused()
            page.keyboard.press("Space")
            expect(page.locator(f'tr[data-detail="{task_id}"]')).to_have_count(0)
            expect(opener).to_have_attribute("aria-expanded", "false")
            expect(opener).to_be_focused()
    # the pager: « First and ‹ Previous are disabled on page 1 (skipped)
    tab()
    expect(page.locator("#pager button[data-page=next]")).to_be_focused()
    tab()
    expect(page.locator("#pager button[data-page=last]")).to_be_focused()
    page.keyboard.press("Shift+Tab")
    expect(page.locator("#pager button[data-page=next]")).to_be_focused()
    page.keyboard.press("Enter")  # to the last page: Next is disabled, the focus moves to Previous
    expect(info).to_have_text("51–100 of 100 tasks (filtered from 1,000)")
    expect(page.locator("#pager button[data-page=prev]")).to_be_focused()
    page.keyboard.press("Space")
    expect(info).to_have_text("1–50 of 100 tasks (filtered from 1,000)")
    expect(page.locator("#pager button[data-page=next]")).to_be_focused()
    page.keyboard.press("Shift+Tab")  # back into the table: its last row
    expect(page.locator('button.task-open[data-task="b0549"]')).to_be_focused()
    page.screenshot(path=artifacts / "keyboard.png")
    assert context.errors == []


def test_the_dashboard_only_reads(service, context, artifacts):
    """Every request the page makes while it is used, live updates included, is a read."""
    page = context.new_page()
    seen = []
    page.on("request", lambda r: seen.append((r.method, r.url, r.post_data)))
    page.goto(service.url + "/ui")
    expect(page.locator('#models-table tr[data-model="stream"] td.score-cell .score')).to_be_visible()
    page.locator("#models-table").get_by_role("link", name="stream").click()
    expect(page.locator("#live-state")).to_have_text(re.compile("^live"), timeout=10_000)
    page.locator("nav.jump").get_by_role("button", name="Tasks").click()
    page.select_option("#z-order", "env")
    page.fill("#task-search", "task-1")
    page.fill("#task-search", "")
    page.get_by_role("button", name="Rows", exact=True).click()
    page.select_option("#task-size", "25")
    page.locator("#tasks-body button.task-open").first.click()
    page.locator("#envs button.env-show").first.click()
    page.select_option("#task-env", "")
    _, _, X, y, _, _ = next(iter(clustered_stream(1, seed=11)))
    out = post_batch(service.client, "stream", "read-only-task", X, y)  # the test writes; the page follows
    expect(page.locator(f'#feed li[data-version="{out["version"]}"]')).to_contain_text("read-only-task", timeout=10_000)
    page.get_by_role("link", name="Models", exact=True).first.click()
    expect(page.locator('#models-table tr[data-model="stream"] td.score-cell .score')).to_be_visible()
    page.go_back()
    expect(page.locator("#live-state")).to_have_text(re.compile("^live"), timeout=10_000)
    urls = [u for _, u, _ in seen]
    assert any(u.startswith(service.url + "/models/stream/events") for u in urls), "no event stream was read"
    assert any(u.startswith(service.url + "/models/stream/tasks") for u in urls)
    writes = [(m, u) for m, u, body in seen if m not in ("GET", "HEAD") or body is not None]
    assert writes == [], f"the dashboard sent {len(writes)} requests that are not reads: {writes[:5]}"
    assert [u for u in urls if not u.startswith(("data:", service.url + "/"))] == []
    assert context.pages == [page]
    assert context.errors == []
