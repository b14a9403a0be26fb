// View: labels that arrive later and batches taken back — the predictions waiting for their
// labels and the labels received, per task (GET /models/{name}/labels, LabelsOut), and the
// model's versions as a timeline (GET …/evaluation's prequential points: a batch, a batch of
// labels, or a take-back), each take-back linked to the batch it removed.
import { fill, h, svg } from "./dom.js";
import { fmtInt } from "./format.js";

const plural = (n, one, many) => `${fmtInt(n)} ${n === 1 ? one : many}`;

/** What each version of the series did: "batch", "labels", "take-back"; and the batches taken back. */
export function versionKinds(points) {
  const takenBack = new Map(); // batch version -> the take-back's version
  for (const p of points) if (p.taken_back) takenBack.set(p.taken_back.batch_version, p.version);
  const kinds = points.map((p) => ({ ...p, kind: p.taken_back ? "take-back" : p.source === "labels" ? "labels" : "batch",
    removedBy: takenBack.get(p.version) ?? null }));
  return { kinds, takenBack };
}

function timeline(points, width) {
  const { kinds } = versionKinds(points);
  const first = kinds[0].version, last = kinds[kinds.length - 1].version;
  const pad = 28, W = Math.max(320, width), H = 86, y = 40;
  const x = (v) => (last > first ? pad + ((v - first) / (last - first)) * (W - 2 * pad) : W / 2);
  const byVersion = new Map(kinds.map((k) => [k.version, k]));
  const parts = [svg("line", { class: "tl-axis", x1: pad, x2: W - pad, y1: y, y2: y })];
  for (const k of kinds) { // a take-back's arc back to the batch it removed, under the marks
    if (k.kind !== "take-back") continue;
    const from = x(k.taken_back.batch_version), to = x(k.version);
    parts.push(svg("path", { class: "tl-arc", d: `M${from},${y - 8} Q${(from + to) / 2},${y - 34} ${to},${y - 8}` }));
  }
  for (const k of kinds) {
    const cx = x(k.version);
    const what = k.kind === "take-back"
      ? `v${k.version}: took back batch v${k.taken_back.batch_version} of task ${k.task_id} (${plural(k.taken_back.n_samples, "row", "rows")}${k.taken_back.task_removed ? "; the task went with it" : ""})`
      : `v${k.version}: ${k.kind === "labels" ? "labels that arrived later" : k.new_task ? "new task" : "batch"} of task ${k.task_id}`
        + (k.removedBy ? ` — taken back by v${k.removedBy}` : "");
    const mark = k.kind === "take-back"
      ? svg("path", { class: "tl-take-back", d: `M${cx - 6},${y + 7} L${cx},${y - 7} L${cx + 6},${y + 7} Z` }, svg("title", {}, what))
      : svg("circle", { class: `tl-${k.kind}${k.removedBy ? " tl-removed" : ""}`, cx, cy: y, r: 5 }, svg("title", {}, what));
    parts.push(mark);
    if (k.removedBy) parts.push(svg("path", { class: "tl-cross", d: `M${cx - 6},${y - 6} L${cx + 6},${y + 6} M${cx - 6},${y + 6} L${cx + 6},${y - 6}` }));
  }
  parts.push(svg("text", { class: "tl-label", x: pad, y: H - 8, "text-anchor": "start" }, `v${first}`),
    svg("text", { class: "tl-label", x: W - pad, y: H - 8, "text-anchor": "end" }, `v${last}`));
  const takeBacks = kinds.filter((k) => k.kind === "take-back").length;
  return svg("svg", { class: "timeline", id: "timeline", role: "img", width: W, height: H, viewBox: `0 0 ${W} ${H}`,
    "aria-label": `Versions v${first} to v${last}: ${kinds.length} versions, ${takeBacks} batches taken back` }, parts);
}

export function historyView(ctx) {
  const cards = h("div", { class: "cards", id: "labels-cards" });
  const tl = h("div", { class: "chart-wrap", id: "timeline-box" });
  const list = h("div", { id: "take-backs" });
  const table = h("div", { id: "labels-tasks" });
  const el = h("section", { id: "sec-history", tabindex: "-1" }, h("h2", {}, "Labels and take-backs"),
    h("p", { class: "muted" }, "Predictions made with \u201cremember\u201d wait for labels that arrive later; a batch taken back "
      + "leaves the model as it would have been without it (its other batches replayed)."),
    cards, h("h3", { class: "sub" }, "Timeline of versions"), tl, list, h("h3", { class: "sub" }, "Per task"), table);
  const card = (id, label, value, note) => h("div", { class: "card small", id }, h("h3", {}, label),
    h("p", { class: "big" }, value), note ? h("p", { class: "muted" }, note) : null);

  function render() {
    const lab = ctx.s.labels; // LabelsOut, null when the service has no GET …/labels
    const points = ctx.s.evaluation?.prequential ?? [];
    const { kinds } = points.length ? versionKinds(points) : { kinds: [] };
    const takeBacks = kinds.filter((k) => k.kind === "take-back");
    fill(cards,
      card("card-pending", "Predictions waiting for labels", lab ? fmtInt(lab.pending) : "—",
        lab ? `over ${plural(lab.tasks.filter((t) => t.pending > 0).length, "task", "tasks")}` : "this service does not report labels"),
      card("card-labels", "Labels received", lab ? fmtInt(lab.labelled_rows) : "—", lab ? `rows, in ${plural(lab.label_batches, "batch", "batches")}` : null),
      card("card-take-backs", "Batches taken back", fmtInt(takeBacks.length), points.length ? `in the latest ${plural(points.length, "version", "versions")}` : null));
    if (!kinds.length) fill(tl, h("p", { class: "empty" }, "No versions yet."));
    else {
      fill(tl, timeline(points, Math.min(1200, (tl.clientWidth || 900) - 4)),
        h("ul", { class: "keys" }, h("li", {}, h("span", { class: "swatch tl-batch", "aria-hidden": "true" }), "a batch"),
          h("li", {}, h("span", { class: "swatch tl-labels", "aria-hidden": "true" }), "labels that arrived later"),
          h("li", {}, h("span", { class: "swatch tl-take-back", "aria-hidden": "true" }), "a take-back (arc: the batch it removed, crossed out)")));
    }
    fill(list, takeBacks.length
      ? h("ol", { class: "feed", id: "take-back-list" }, takeBacks.slice().reverse().map((k) => h("li", { "data-version": k.version },
        h("strong", {}, `v${k.version}`), " took back batch ", h("strong", {}, `v${k.taken_back.batch_version}`), " of task ",
        h("code", {}, k.task_id), ` · ${plural(k.taken_back.n_samples, "row", "rows")}`, k.taken_back.task_removed ? " · the task went with it" : "")))
      : h("p", { class: "empty" }, "No batch taken back."));
    if (!lab?.tasks.length) {
      fill(table, h("p", { class: "empty" }, lab ? "No prediction waits for its label, and no label was received." : "No data."));
      return;
    }
    fill(table, h("div", { class: "table-wrap" }, h("table", { class: "data stack", id: "labels-table" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Task"), h("th", { scope: "col", class: "num" }, "Waiting for labels"),
        h("th", { scope: "col", class: "num" }, "Labels received (rows)"), h("th", { scope: "col", class: "num" }, "Label batches"))),
      h("tbody", {}, lab.tasks.map((t) => h("tr", { "data-task": t.task_id }, h("th", { scope: "row" }, h("code", {}, t.task_id)),
        h("td", { class: "num", "data-label": "Waiting for labels" }, fmtInt(t.pending)),
        h("td", { class: "num", "data-label": "Labels received (rows)" }, fmtInt(t.labelled_rows)),
        h("td", { class: "num", "data-label": "Label batches" }, fmtInt(t.label_batches))))))));
  }
  return { el, render };
}
