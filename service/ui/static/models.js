// View: every model the service hosts (GET /models), each with its prequential error beside
// the baseline (GET /models/{name}: the list carries "prequential": null).
import * as api from "./api.js";
import { fill, h, keepFocus } from "./dom.js";
import { ago, fmtInt, primary, scoreView } from "./format.js";

const PREQ_HEAD = "Prequential error vs baseline (RMSE or log loss)";

export function modelsView({ main, guarded }) {
  document.title = "Models · FCL3 dashboard";
  const ctrl = new AbortController();
  let timer = null;
  let limit = 100;
  const body = h("div", { id: "models-body", class: "table-wrap" }, h("p", { class: "loading" }, "Loading…"));
  fill(main, h("h1", {}, "Models"),
    h("p", { class: "muted" }, "Every model this service hosts. Open one to see its tasks, environments and scores."), body);

  const details = new Map(); // name -> GET /models/{name}, kept while its version holds
  async function detail(m) {
    if (details.get(m.name)?.version === m.version) return;
    try {
      details.set(m.name, await api.get(`models/${encodeURIComponent(m.name)}`, { signal: ctrl.signal }));
    } catch (err) {
      if (err instanceof api.AuthError || err.name === "AbortError") throw err;
    }
  }

  async function load() {
    const list = await api.get(`models?offset=0&limit=${limit}`, { signal: ctrl.signal });
    for (let i = 0; i < list.models.length; i += 8) await Promise.all(list.models.slice(i, i + 8).map(detail));
    keepFocus(main, () => render(list));
  }

  function row(m) {
    // Explicit roles: on a narrow screen the table is drawn as stacked cards (style.css), which must stay a table.
    const cell = (label, content, cls = null) => h("td", { role: "cell", "data-label": label, class: cls }, content);
    return h("tr", { role: "row", "data-model": m.name },
      h("th", { scope: "row", role: "rowheader" }, h("a", { href: `#/models/${encodeURIComponent(m.name)}` }, m.name)),
      cell("Kind", m.kind), cell("Estimator", m.estimator), cell("Tasks", fmtInt(m.n_tasks), "num"),
      cell("Representatives", fmtInt(m.n_representatives), "num"), cell("Version", fmtInt(m.version), "num"),
      cell("Last update", ago(m.updated_at)),
      cell(PREQ_HEAD, scoreView(primary(details.get(m.name)?.prequential?.overall)), "score-cell"));
  }

  function render(list) {
    if (!list.models.length) {
      fill(body, h("p", { class: "empty" }, "No model yet. Post a batch (", h("code", {}, "POST /tasks/{task_id}/data"),
        ") or create one (", h("code", {}, "POST /models"), "); it appears here."));
      return;
    }
    const col = (label, cls = null) => h("th", { scope: "col", role: "columnheader", class: cls }, label);
    const table = h("table", { class: "data stack", id: "models-table", role: "table" },
      h("caption", { class: "sr-only" }, "Models"),
      h("thead", { role: "rowgroup" }, h("tr", { role: "row" }, col("Model"), col("Kind"), col("Estimator"), col("Tasks", "num"),
        col("Representatives", "num"), col("Version", "num"), col("Last update"), col(PREQ_HEAD))),
      h("tbody", { role: "rowgroup" }, list.models.map(row)));
    const more = list.total > list.models.length
      ? h("p", {}, `${fmtInt(list.models.length)} of ${fmtInt(list.total)} models. `,
        h("button", { type: "button", id: "more-models", onclick: () => { limit = Math.min(1000, limit + 100); refresh(); } }, "Show more"))
      : null;
    fill(body, table, more);
  }

  async function refresh() {
    try { await load(); } catch (err) { if (err.name !== "AbortError") throw err; }
  }
  guarded(async () => {
    await load();
    timer = setInterval(() => refresh().catch(() => {}), 5000);
  });
  return { stop() { ctrl.abort(); clearInterval(timer); } };
}
