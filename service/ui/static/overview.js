// View: one model's header (GET /models/{name}) and its summary cards: prequential and
// held-out error beside the baseline, update rate, update latency (GET /metrics).
import { fill, h } from "./dom.js";
import { ago, fmtInt, fmtNum, metricName, primary, scoreView } from "./format.js";

const LIVE = { live: "live", polling: "live (polling)", connecting: "connecting…", reconnecting: "reconnecting…", offline: "not live" };

export function headView(ctx) {
  const el = h("div", { class: "model-head", id: "model-head" });
  const badge = h("span", { id: "live-state", role: "status", class: "live-badge" });
  function setLive(state) {
    badge.textContent = LIVE[state] ?? state;
    badge.classList.toggle("on", state === "live" || state === "polling");
  }
  function render() {
    const m = ctx.s.model;
    const fact = (label, value, id = null) => h("div", {}, h("dt", {}, label), h("dd", { id }, value));
    setLive(ctx.s.live);
    fill(el, h("p", { class: "crumbs" }, h("a", { href: "#/" }, "Models"), " / "),
      h("h1", {}, m.name, " ", badge),
      h("dl", { class: "facts" }, fact("Kind", m.kind), fact("Estimator", m.estimator), fact("Version", fmtInt(m.version), "model-version"),
        fact("Tasks", fmtInt(m.n_tasks), "model-tasks"), fact("Batches", fmtInt(m.n_batches)),
        fact("Representatives", fmtInt(m.n_representatives), "model-reps"), fact("Features d", m.d ?? "—"),
        fact("Code length p", m.p ?? "—"), fact("Last update", ago(m.updated_at))),
      schemaView(m));
  }
  return { el, render, setLive };
}

/** A model's feature schema and the columns its records are encoded into (its vocabulary):
 *  one row per feature; null when the model takes rows of numbers only. */
export function schemaView(m) {
  if (!m.features?.length) return null;
  const levels = new Map();
  for (const c of m.columns ?? []) {
    const i = c.indexOf("=");
    if (i < 0) continue;
    const name = c.slice(0, i);
    if (!levels.has(name)) levels.set(name, []);
    levels.get(name).push(c.slice(i + 1));
  }
  const encoded = (f) => {
    const found = levels.get(f.name) ?? [];
    if (f.type !== "category") {
      return f.nullable ? `1 column + missing indicator (missing → ${fmtNum(f.fill ?? 0, 4)})` : "1 column";
    }
    const known = found.filter((v, i) => !(f.nullable && v === "null" && i === 0));
    return `${known.length} level${known.length === 1 ? "" : "s"}${known.length ? ": " + known.join(", ") : ""}` +
      (f.nullable ? " + missing level" : "");
  };
  return h("div", { class: "schema", id: "model-schema" },
    h("p", { class: "schema-title" }, `Feature schema: ${m.features.length} features, encoded into ${fmtInt((m.columns ?? []).length)} columns`),
    h("table", { class: "schema-table" },
      h("thead", {}, h("tr", {}, h("th", {}, "feature"), h("th", {}, "type"), h("th", {}, "nullable"), h("th", {}, "encoded as"))),
      h("tbody", {}, m.features.map((f) => h("tr", { "data-feature": f.name }, h("td", {}, h("code", {}, f.name)),
        h("td", {}, f.type), h("td", {}, f.nullable ? "yes" : "—"), h("td", {}, encoded(f)))))));
}

/** Mean and p95 of fcl3_update_duration_seconds from Prometheus text (all labels summed). */
export function parseLatency(text) {
  let sum = 0, count = 0;
  const buckets = new Map();
  for (const line of text.split("\n")) {
    if (line.startsWith("#")) continue;
    let m = /^fcl3_update_duration_seconds_(sum|count)(?:\{[^}]*\})?\s+(\S+)/.exec(line);
    if (m) { if (m[1] === "sum") sum += Number(m[2]); else count += Number(m[2]); continue; }
    m = /^fcl3_update_duration_seconds_bucket\{[^}]*le="([^"]+)"[^}]*\}\s+(\S+)/.exec(line);
    if (m) buckets.set(m[1], (buckets.get(m[1]) ?? 0) + Number(m[2]));
  }
  if (!count) return { count: 0 };
  const sorted = [...buckets].map(([le, c]) => [le === "+Inf" ? Infinity : Number(le), c]).sort((a, b) => a[0] - b[0]);
  const p95 = sorted.find(([, c]) => c >= 0.95 * count)?.[0] ?? NaN;
  return { count, mean: sum / count, p95: Number.isFinite(p95) ? p95 : NaN };
}

export function cardsView(ctx) {
  const el = h("section", { class: "cards", id: "cards", "aria-label": "Summary" });
  const card = (attrs, title, ...body) => h("div", { class: "card", ...attrs }, h("h3", {}, title), body);
  const muted = (...text) => h("p", { class: "muted" }, text);

  function rates() {
    const { model: m, versionTimes } = ctx.s;
    const lifeMin = (Date.parse(m.updated_at) - Date.parse(m.created_at)) / 60000;
    const lifetime = m.version > 1 && lifeMin > 0 ? (m.version - 1) / lifeMin : null;
    const now = Date.now();
    const recent = versionTimes.filter(([t]) => now - t < 5 * 60000);
    const span = recent.length ? Math.max(60000, now - Math.min(...recent.map(([t]) => t))) / 60000 : 0;
    return { lifetime, live: recent.length ? recent.reduce((a, [, n]) => a + n, 0) / span : null };
  }

  /** The held-out error pooled over every evaluation row of every scored task, as `fcl3 replay`
   * reports it: RMSE is the root of the rows' mean squared error, log loss the rows' mean. */
  function heldOut() {
    const scored = (ctx.s.evaluation?.tasks ?? []).map((e) => primary(e.score)).filter((p) => p !== null && p.n > 0);
    if (!scored.length) return { n: 0, rows: 0, score: null };
    const rows = scored.reduce((a, p) => a + p.n, 0);
    const rmse = scored[0].metric === "rmse";
    const pool = (key) => {
      const sum = scored.reduce((a, p) => a + p.n * (rmse ? p[key] ** 2 : p[key]), 0) / rows;
      return rmse ? Math.sqrt(sum) : sum;
    };
    return { n: scored.length, rows, score: { metric: scored[0].metric, model: pool("model"),
      baseline: typeof scored[0].baseline === "number" ? pool("baseline") : null, n: rows } };
  }

  function render() {
    const preq = ctx.s.model.prequential;
    const overall = primary(preq?.overall);
    const held = heldOut();
    const rate = rates();
    const lat = ctx.s.latency;
    fill(el,
      card({ id: "card-preq" }, `Prequential error${overall ? ` (${metricName(overall.metric)})` : ""}`,
        h("p", { class: "big" }, scoreView(overall)),
        muted("each batch predicted before it is learned, vs each task's own single-task model"),
        preq?.recent ? muted(`last ${preq.window} batches: `, scoreView(primary(preq.recent))) : null),
      card({ id: "card-heldout" }, `Held-out error${held.score ? ` (${metricName(held.score.metric)})` : ""}`,
        h("p", { class: "big" }, scoreView(held.score)),
        muted(held.n ? `pooled over ${fmtInt(held.rows)} evaluation rows of ${fmtInt(held.n)} tasks, vs the baseline`
          : "no task has evaluation rows yet (POST …/tasks/{task_id}/evaluation)")),
      card({}, "Update rate", h("p", { class: "big" }, rate.live === null ? "—" : `${fmtNum(rate.live, 3)}/min`),
        muted("seen live over the last 5 min"),
        muted(rate.lifetime === null ? "no lifetime rate yet" : `${fmtNum(rate.lifetime, 3)}/min on average since creation`)),
      card({}, "Update latency", h("p", { class: "big" }, lat?.count ? `${fmtNum(lat.mean * 1000, 3)} ms` : "—"),
        lat?.count ? [muted(`mean of ${fmtInt(lat.count)} updates, p95 ≤ ${fmtNum(lat.p95 * 1000, 3)} ms`),
          muted("all models of the process answering /metrics")] : muted("no update timed by this process yet")));
  }
  return { el, render };
}
