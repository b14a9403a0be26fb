// View: the model's tasks as a table (search, environment filter, sortable columns, pages),
// each row opening its latest assignment Zᵗ, code and scores.
import { fill, h, svg } from "./dom.js";
import { ago, fmtInt, fmtNum, primary, scoreView, scoresText } from "./format.js";

/** The columns; value(row) sorts (missing values last). */
export const COLUMNS = [
  { key: "task", label: "Task", value: (r) => r.task.task_id, text: true },
  { key: "rows", label: "Rows", value: (r) => r.task.n_samples, num: true },
  { key: "batches", label: "Batches", value: (r) => r.task.n_batches, num: true },
  { key: "lean", label: "Leans on (weight)", value: (r) => r.lean?.rep ?? "", text: true },
  { key: "e", label: "Outlier prob. e", value: (r) => r.e, num: true },
  { key: "preq", label: "Prequential vs baseline", value: (r) => primary(r.preq)?.model ?? null },
  { key: "heldout", label: "Held-out vs baseline", value: (r) => primary(r.heldout)?.model ?? null },
  { key: "version", label: "Last batch", value: (r) => r.task.batch_version ?? r.task.version, num: true },
  { key: "updated", label: "Updated", value: (r) => r.task.updated_at, text: true },
];
const LABEL = Object.fromEntries(COLUMNS.map((c) => [c.key, c.label]));

/** One task's latest update: its assignment Zᵗ as bars, its code s_t, its scores in full. */
function detail(r) {
  const t = r.task, lu = t.last_update ?? {};
  const asg = lu.assignment ?? [];
  const bar = (w) => svg("svg", { class: "bar", width: 160, height: 12, "aria-hidden": "true" },
    svg("rect", { class: "track", width: 160, height: 12 }), svg("rect", { class: "fill", width: (160 * Math.max(0, Math.min(1, w))).toFixed(1), height: 12 }));
  const scores = (label, x) => (x ? h("p", {}, h("strong", {}, `${label}:`), " ", scoresText(x)) : null);
  return h("div", { class: "task-detail" },
    h("div", {}, h("h4", {}, `Assignment Zᵗ at its latest update (v${t.version})`),
      asg.length ? h("ul", { class: "bars" }, asg.map((a) => h("li", {}, h("span", { class: "lbl" }, a.outlier ? "new environment (e)" : a.representative),
        bar(a.weight), h("span", { class: "w" }, fmtNum(a.weight)))))
        : h("p", { class: "muted" }, "no assignment (this estimator keeps no representatives, or the task was imported without it)"),
      lu.new_representative ? h("p", {}, "This update made it a representative (it opened an environment).") : null),
    h("div", {}, h("h4", {}, "Code s", h("sub", {}, "t")), h("p", { class: "code" }, lu.code ? `[${lu.code.map((v) => fmtNum(v)).join(", ")}]` : "—"),
      scores("Prequential (cumulative)", r.preq), scores("Held-out", r.heldout),
      h("p", { class: "muted" }, "created ", ago(t.created_at), `; labels: ${t.labels ?? "—"}`)));
}

/** ctx.s.rows: the derived tasks (environments.js derive, plus preq and heldout Scores);
 * ctx.fetchScores(rows): read the prequential scores of the rows on screen. */
export function tasksView(ctx) {
  const st = { sort: { key: "updated", dir: -1 }, query: "", env: "", page: 0, pageSize: 50, open: new Set() };
  const search = h("input", { id: "task-search", type: "search", placeholder: "task or representative id", autocomplete: "off",
    oninput: (e) => { st.query = e.target.value.trim().toLowerCase(); st.page = 0; render(); } });
  const envSelect = h("select", { id: "task-env", onchange: (e) => { st.env = e.target.value; st.page = 0; render(); } });
  const size = h("select", { id: "task-size", onchange: (e) => { st.pageSize = Number(e.target.value); st.page = 0; render(); } },
    [25, 50, 100, 250].map((n) => h("option", { selected: n === 50 }, n)));
  const headers = COLUMNS.map((c) => h("th", { scope: "col", role: "columnheader", class: c.num ? "num" : null, "data-key": c.key },
    h("button", { type: "button", class: "sort", "data-key": c.key, onclick: () => sortBy(c) }, c.label, h("span", { class: "arrow", "aria-hidden": "true" }))));
  const body = h("tbody", { id: "tasks-body", role: "rowgroup" });
  const pager = h("div", { class: "pager", id: "pager" });
  const el = h("section", { id: "sec-tasks", tabindex: "-1" }, h("h2", {}, "Tasks"),
    h("div", { class: "controls" }, h("label", { for: "task-search" }, "Search"), search,
      h("label", { for: "task-env" }, "Environment"), envSelect, h("label", { for: "task-size" }, "Rows per page"), size),
    h("div", { class: "table-wrap" }, h("table", { class: "data stack", id: "tasks-table", role: "table" },
      h("caption", { class: "sr-only" }, `Tasks of ${ctx.name}; sortable columns`),
      h("thead", { role: "rowgroup" }, h("tr", { role: "row" }, headers)), body)),
    pager);

  function sortBy(c) {
    st.sort = st.sort.key === c.key ? { key: c.key, dir: -st.sort.dir } : { key: c.key, dir: c.text ? 1 : -1 };
    st.page = 0;
    render();
  }

  function filtered() {
    const reps = ctx.s.model.representatives;
    let rows = ctx.s.rows;
    if (st.env === "__none__") rows = rows.filter((r) => !r.lean || !reps.includes(r.lean.rep));
    else if (st.env) rows = rows.filter((r) => r.lean?.rep === st.env);
    const q = st.query;
    if (q) rows = rows.filter((r) => r.task.task_id.toLowerCase().includes(q) || (r.lean?.rep ?? "").toLowerCase().includes(q));
    const col = COLUMNS.find((c) => c.key === st.sort.key);
    const none = (v) => v === null || v === undefined;
    return [...rows].sort((a, b) => {
      const x = col.value(a), y = col.value(b);
      if (none(x)) return none(y) ? 0 : 1;
      if (none(y)) return -1;
      return (typeof x === "string" ? x.localeCompare(y, undefined, { numeric: true }) : x - y) * st.sort.dir;
    });
  }

  function toggle(id) {
    if (st.open.has(id)) st.open.delete(id); else st.open.add(id);
    render(false);
    body.querySelector(`button.task-open[data-task="${CSS.escape(id)}"]`)?.focus();
  }

  function row(r) {
    const t = r.task, open = st.open.has(t.task_id);
    const cell = (key, content, cls = null) => h("td", { role: "cell", "data-label": LABEL[key], "data-col": key, class: cls }, content);
    const tr = h("tr", { role: "row", "data-task": t.task_id, class: ctx.s.fresh.has(t.task_id) ? "fresh" : null },
      h("th", { scope: "row", role: "rowheader" },
        h("button", { type: "button", class: "link task-open", "data-task": t.task_id, "aria-expanded": String(open),
          title: "show its assignment Zᵗ and code", onclick: () => toggle(t.task_id) }, t.task_id),
        r.isRep ? [" ", h("span", { class: "badge", title: "a representative task" }, "rep")] : null),
      cell("rows", fmtInt(t.n_samples), "num"), cell("batches", fmtInt(t.n_batches), "num"),
      cell("lean", r.isRep ? h("span", { class: "muted" }, "itself") : r.lean ? [r.lean.rep, " ", h("span", { class: "muted" }, `(${fmtNum(r.lean.weight)})`)] : "—"),
      cell("e", fmtNum(r.e), "num"), cell("preq", scoreView(primary(r.preq)), "score-cell"),
      cell("heldout", scoreView(primary(r.heldout)), "score-cell"), cell("version", fmtInt(t.batch_version ?? t.version), "num"), cell("updated", ago(t.updated_at)));
    if (!open) return tr;
    return [tr, h("tr", { role: "row", class: "detail", "data-detail": t.task_id }, h("td", { role: "cell", colspan: COLUMNS.length }, detail(r)))];
  }

  function go(p, pages) {
    st.page = p === "first" ? 0 : p === "prev" ? st.page - 1 : p === "next" ? st.page + 1 : pages - 1;
    render();
    const order = p === "first" || p === "prev" ? [p, "next", "last"] : [p, "prev", "first"];
    for (const q of order) {
      const next = pager.querySelector(`button[data-page="${q}"]:not([disabled])`);
      if (next) { next.focus(); break; }
    }
  }

  function renderPager(rows, pages) {
    const from = rows.length ? st.page * st.pageSize + 1 : 0, to = Math.min(rows.length, (st.page + 1) * st.pageSize);
    const all = ctx.s.rows.length;
    const button = (p, label, disabled) => h("button", { type: "button", "data-page": p, disabled, onclick: () => go(p, pages) }, label);
    fill(pager, h("span", { id: "page-info", "aria-live": "polite" },
      `${fmtInt(from)}–${fmtInt(to)} of ${fmtInt(rows.length)} tasks${rows.length !== all ? ` (filtered from ${fmtInt(all)})` : ""}`),
    " ", h("span", { class: "pages" }, button("first", "« First", st.page === 0), " ", button("prev", "‹ Previous", st.page === 0), " ",
      h("span", {}, `page ${st.page + 1} of ${pages}`), " ", button("next", "Next ›", st.page >= pages - 1), " ",
      button("last", "Last »", st.page >= pages - 1)));
  }

  function render(fetchScores = true) {
    const rows = filtered();
    const pages = Math.max(1, Math.ceil(rows.length / st.pageSize));
    st.page = Math.min(st.page, pages - 1);
    const slice = rows.slice(st.page * st.pageSize, (st.page + 1) * st.pageSize);
    fill(body, slice.length ? slice.map(row)
      : h("tr", { role: "row" }, h("td", { role: "cell", colspan: COLUMNS.length, class: "empty" }, ctx.s.rows.length ? "No task matches." : "No task learned yet.")));
    for (const th of headers) {
      const on = th.dataset.key === st.sort.key;
      th.setAttribute("aria-sort", on ? (st.sort.dir > 0 ? "ascending" : "descending") : "none");
      th.querySelector(".arrow").textContent = on ? (st.sort.dir > 0 ? " ▲" : " ▼") : "";
    }
    renderPager(rows, pages);
    if (fetchScores) ctx.fetchScores(slice);
  }

  function renderEnvSelect() {
    const reps = ctx.s.model.representatives;
    fill(envSelect, h("option", { value: "" }, "all"), reps.map((r, k) => h("option", { value: r }, `${k + 1}: ${r}`)),
      h("option", { value: "__none__" }, "not assigned"));
    envSelect.value = st.env;
  }

  /** Filter the table to one environment (a representative, or "__none__") and go to it. */
  function showEnvironment(rep) {
    st.env = rep;
    st.page = 0;
    renderEnvSelect();
    render();
    el.scrollIntoView();
    el.focus({ preventScroll: true });
  }

  return { el, render, renderEnvSelect, showEnvironment };
}
