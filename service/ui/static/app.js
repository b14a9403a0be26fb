// The FCL3 dashboard: models, one model's tasks, environments, Z^t, scores, live updates.
// Plain ES modules; every byte comes from this service (see service/api/routes/ui.py).
import * as api from "./api.js";
import { BLUES, VIRIDIS, esc, heatmap, legend, lineChart } from "./charts.js";

const main = document.getElementById("main");
let current = null; // the view on screen: {stop()}

// ------------------------------------------------------------------ formatting
const intFmt = new Intl.NumberFormat("en");
const fmtInt = (v) => (Number.isFinite(v) ? intFmt.format(v) : "—");
function fmtNum(v, digits = 3) {
  if (v === null || v === undefined || !Number.isFinite(Number(v))) return "—";
  v = Number(v);
  if (v !== 0 && (Math.abs(v) >= 1e5 || Math.abs(v) < 1e-3)) return v.toExponential(2);
  return (+v.toPrecision(digits)).toString();
}
function ago(iso) {
  if (!iso) return "—";
  const s = (Date.now() - Date.parse(iso)) / 1000;
  if (!Number.isFinite(s)) return esc(iso);
  const text = s < 5 ? "just now" : s < 60 ? `${Math.round(s)} s ago` : s < 3600 ? `${Math.round(s / 60)} min ago`
    : s < 86400 ? `${Math.round(s / 3600)} h ago` : `${Math.round(s / 86400)} d ago`;
  return `<time datetime="${esc(iso)}" title="${esc(new Date(iso).toISOString())}">${text}</time>`;
}
const lowerIsBetter = (metric) => !/auc|acc|r2|score|precision|recall|f1/i.test(metric || "rmse");
const metricName = (m) => ({ rmse: "RMSE", log_loss: "log loss", mae: "MAE", accuracy: "accuracy", auc: "AUC" })[m] ?? m ?? "error";

/** A score and its baseline: from the API's Scores ({n, rmse, baseline_rmse, ...} for regression,
 * {n, log_loss, baseline_log_loss, accuracy, ...} for classification), or a plain number. */
function scorePair(x) {
  if (x === null || x === undefined) return null;
  if (typeof x === "number") return { model: x, baseline: null, metric: null };
  if (typeof x !== "object") return null;
  for (const metric of ["rmse", "log_loss"]) {
    if (typeof x[metric] === "number") {
      return { model: x[metric], baseline: typeof x[`baseline_${metric}`] === "number" ? x[`baseline_${metric}`] : null,
               metric, n: typeof x.n === "number" ? x.n : null };
    }
  }
  const pick = (...keys) => { for (const k of keys) if (typeof x[k] === "number") return x[k]; return null; };
  const model = pick("model", "value", "score", "error", "mean", "fcl3", "learner");
  const baseline = pick("baseline", "baseline_error", "baseline_score", "stl", "reference");
  if (model === null && baseline === null) return null;
  return { model, baseline, metric: x.metric ?? null, baselineName: x.baseline_name ?? x.baseline_estimator ?? null, n: pick("n", "count", "n_predictions") };
}
function fmtScore(x, fallbackMetric) {
  const p = scorePair(x);
  if (!p || p.model === null) return `<span class="muted">no data yet</span>`;
  const metric = p.metric ?? fallbackMetric;
  const tip = `${(metric ?? "score").replace("_", " ")}${p.n !== null && p.n !== undefined ? ` over ${p.n} rows` : ""}; the baseline is each task's own single-task model`;
  let out = `<span class="score" title="${esc(tip)}">${fmtNum(p.model)}</span>`;
  if (p.baseline !== null) {
    const better = lowerIsBetter(metric) ? p.model < p.baseline : p.model > p.baseline;
    const same = p.model === p.baseline;
    out += ` <span class="vs">vs ${fmtNum(p.baseline)}</span>`;
    out += same ? "" : better ? ` <span class="good" title="better than the baseline">▲ better</span>`
      : ` <span class="bad" title="worse than the baseline">▼ worse</span>`;
  }
  return out;
}
const scoreValue = (x) => scorePair(x)?.model ?? null;

/** Redraw with fn() and give the focus back to the control that had it (redraws replace elements). */
function keepFocus(fn) {
  const a = document.activeElement;
  let sel = null;
  if (a && a !== document.body && main.contains(a)) {
    if (a.id) sel = `#${CSS.escape(a.id)}`;
    else if (a.dataset.page) sel = `button[data-page="${CSS.escape(a.dataset.page)}"]`;
    else if (a.dataset.env) sel = `button[data-env="${CSS.escape(a.dataset.env)}"]`;
    else if (a.dataset.task) sel = `button.task-open[data-task="${CSS.escape(a.dataset.task)}"]`;
    else if (a.dataset.key) sel = `button.sort[data-key="${CSS.escape(a.dataset.key)}"]`;
    else if (a.getAttribute("href")) sel = `a[href="${CSS.escape(a.getAttribute("href"))}"]`;
  }
  fn();
  if (sel && !document.contains(a)) document.querySelector(sel)?.focus({ preventScroll: true });
}

// ------------------------------------------------------------------ the key
const dialog = document.getElementById("key-dialog");
const keyForm = document.getElementById("key-form");
const keyInput = document.getElementById("key-input");
const keyRemember = document.getElementById("key-remember");
const keyError = document.getElementById("key-error");
const keySubmit = document.getElementById("key-submit");
let keyResolve = null;

function updateKeybox() {
  document.getElementById("keybox").hidden = !api.hasKey();
}

function promptForKey(reason) {
  if (keyResolve) return new Promise((r) => { const prev = keyResolve; keyResolve = (v) => { prev(v); r(v); }; });
  keyError.hidden = true;
  if (reason && api.hasKey()) {
    keyError.textContent = `The stored key was refused: ${reason}. Enter another key.`;
    keyError.hidden = false;
  }
  keyInput.value = "";
  dialog.showModal();
  keyInput.focus();
  return new Promise((resolve) => { keyResolve = resolve; });
}

function finishPrompt(ok) {
  if (dialog.open) dialog.close();
  const r = keyResolve;
  keyResolve = null;
  updateKeybox();
  r?.(ok);
}

keyForm.addEventListener("submit", async (e) => {
  e.preventDefault();
  const value = keyInput.value.trim();
  if (!value) return;
  keySubmit.disabled = true;
  keyError.hidden = true;
  const before = api.saveKey();
  api.setKey(value, keyRemember.checked);
  try {
    await api.get("models?limit=1");
    finishPrompt(true);
  } catch (err) {
    api.restoreKey(before); // a refused key never replaces the one in use
    keyError.textContent = err instanceof api.AuthError
      ? `This key was refused by the service (${err.message}). Use one of its read keys (API_READ_KEYS) or write keys.`
      : `Could not check the key: ${err.message}.`;
    keyError.hidden = false;
    keyInput.select();
  } finally {
    keySubmit.disabled = false;
  }
});
document.getElementById("key-cancel").addEventListener("click", () => finishPrompt(false));
dialog.addEventListener("cancel", (e) => { e.preventDefault(); finishPrompt(false); });
document.getElementById("key-forget").addEventListener("click", () => { api.forgetKey(); updateKeybox(); route(); });
document.getElementById("key-change").addEventListener("click", async () => { if (await promptForKey()) route(); });

/** Run a view's loader; on 401 ask for a key and start the view again. */
async function guarded(load) {
  try {
    await load();
  } catch (err) {
    if (err.name === "AbortError") return;
    if (err instanceof api.AuthError) {
      main.innerHTML = `<section class="notice" role="status"><h1>API key needed</h1>
        <p>This service asks for an API key to read (${esc(err.message.replaceAll("`", ""))}).</p>
        <p><button type="button" class="primary" id="ask-key">Enter a read key</button></p></section>`;
      document.getElementById("ask-key").addEventListener("click", async () => { if (await promptForKey()) route(); });
      if (await promptForKey(err.message)) route();
      return;
    }
    main.innerHTML = `<section class="notice error" role="alert"><h1>Cannot load</h1><p>${esc(err.message)}</p>
      <p><button type="button" id="retry">Retry</button></p></section>`;
    document.getElementById("retry").addEventListener("click", route);
  }
}

// ------------------------------------------------------------------ routing
function route() {
  current?.stop();
  current = null;
  updateKeybox();
  const m = /^#\/models\/([^/]+)\/?$/.exec(location.hash);
  current = m ? modelView(decodeURIComponent(m[1])) : modelsView();
}
window.addEventListener("hashchange", () => { if (location.hash === "" || location.hash.startsWith("#/")) route(); });

// ------------------------------------------------------------------ all models
function modelsView() {
  document.title = "Models · FCL3 dashboard";
  const ctrl = new AbortController();
  let timer = null;
  let limit = 100;
  main.innerHTML = `<h1>Models</h1><p class="muted">Every model this service hosts. Open one to see its tasks, environments and scores.</p>
    <div id="models-body" class="table-wrap"><p class="loading">Loading…</p></div>`;
  const body = document.getElementById("models-body");

  const details = new Map(); // name -> GET /models/{name} (it carries the prequential scores), by version
  async function detail(m) {
    const have = details.get(m.name);
    // GET /models lists "prequential": null (only GET /models/{name} carries the figures): read the model
    // unless the list has them or its details are already at this version.
    if ((m.prequential !== null && m.prequential !== undefined) || (have && have.version === m.version)) return;
    try {
      details.set(m.name, await api.get(`models/${encodeURIComponent(m.name)}`, { signal: ctrl.signal }));
    } catch (err) {
      if (err instanceof api.AuthError || err.name === "AbortError") throw err;
    }
  }
  const PREQ_HEAD = "Prequential error vs baseline (RMSE or log loss)";
  const preqOf = (m) => (m.prequential ?? details.get(m.name)?.prequential)?.overall ?? null;

  async function load() {
    const list = await api.get(`models?offset=0&limit=${limit}`, { signal: ctrl.signal });
    for (let i = 0; i < list.models.length; i += 8) await Promise.all(list.models.slice(i, i + 8).map(detail));
    keepFocus(() => render(list));
  }
  function render(list) {
    if (!list.models.length) {
      body.innerHTML = `<p class="empty">No model yet. Post a batch (<code>POST /tasks/{task_id}/data</code>) or create one (<code>POST /models</code>); it appears here.</p>`;
    } else {
      // Explicit roles: on a narrow screen the table is drawn as stacked cards (style.css), which must stay a table.
      const cell = (label, html, cls = "") => `<td role="cell" data-label="${esc(label)}"${cls ? ` class="${cls}"` : ""}>${html}</td>`;
      body.innerHTML = `<table class="data stack" id="models-table" role="table"><caption class="sr-only">Models</caption><thead role="rowgroup"><tr role="row">
        <th scope="col" role="columnheader">Model</th><th scope="col" role="columnheader">Kind</th><th scope="col" role="columnheader">Estimator</th>
        <th scope="col" role="columnheader" class="num">Tasks</th><th scope="col" role="columnheader" class="num">Representatives</th>
        <th scope="col" role="columnheader" class="num">Version</th><th scope="col" role="columnheader">Last update</th>
        <th scope="col" role="columnheader">${PREQ_HEAD}</th></tr></thead><tbody role="rowgroup">${list.models.map((m) => `<tr role="row" data-model="${esc(m.name)}">
        <th scope="row" role="rowheader"><a href="#/models/${encodeURIComponent(m.name)}">${esc(m.name)}</a></th>${cell("Kind", esc(m.kind))}${cell("Estimator", esc(m.estimator))}
        ${cell("Tasks", fmtInt(m.n_tasks), "num")}${cell("Representatives", fmtInt(m.n_representatives), "num")}${cell("Version", fmtInt(m.version), "num")}
        ${cell("Last update", ago(m.updated_at))}${cell(PREQ_HEAD, fmtScore(preqOf(m)), "score-cell")}</tr>`).join("")}</tbody></table>
        ${list.total > list.models.length ? `<p>${fmtInt(list.models.length)} of ${fmtInt(list.total)} models. <button type="button" id="more-models">Show more</button></p>` : ""}`;
      document.getElementById("more-models")?.addEventListener("click", () => { limit = Math.min(1000, limit + 100); refresh(); });
    }
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

// ------------------------------------------------------------------ one model
/** What a task leans on: its representative (itself for a representative) and the weight. */
function derive(task, reps) {
  const lu = task.last_update || {};
  const asg = Array.isArray(lu.assignment) ? lu.assignment : [];
  let best = null;
  for (const a of asg) if (!a.outlier && a.representative != null && (!best || a.weight > best.weight)) best = a;
  const outlier = asg.find((a) => a.outlier);
  task._isRep = reps.has(task.task_id);
  task._lean = task._isRep ? { rep: task.task_id, weight: null } : best ? { rep: best.representative, weight: best.weight } : null;
  task._e = typeof lu.outlier_probability === "number" ? lu.outlier_probability : outlier ? outlier.weight : null;
  task._weights = new Map(asg.filter((a) => !a.outlier && a.representative != null).map((a) => [a.representative, a.weight]));
  task._outlierWeight = outlier ? outlier.weight : null;
  return task;
}

const COLUMNS = [
  { key: "task", label: "Task", value: (t) => t.task_id, text: true },
  { key: "rows", label: "Rows", value: (t) => t.n_samples, num: true },
  { key: "batches", label: "Batches", value: (t) => t.n_batches, num: true },
  { key: "lean", label: "Leans on (weight)", value: (t) => t._lean?.rep ?? "", text: true },
  { key: "e", label: "Outlier prob. e", value: (t) => t._e, num: true },
  { key: "preq", label: "Prequential vs baseline", value: (t) => scoreValue(t.prequential ?? t._preq) },
  { key: "heldout", label: "Held-out vs baseline", value: (t) => scoreValue(t._heldout ?? t.evaluation) },
  { key: "version", label: "Version", value: (t) => t.version, num: true },
  { key: "updated", label: "Updated", value: (t) => t.updated_at, text: true },
];

function modelView(name) {
  document.title = `${name} · FCL3 dashboard`;
  const enc = encodeURIComponent(name);
  const base = `models/${enc}`;
  const ctrl = new AbortController();
  const timers = [];
  let stream = null;
  let stopped = false;
  const s = {
    model: null, tasks: [], byId: new Map(), evaluation: undefined, latency: null,
    versionTimes: [], feed: [], sort: { key: "updated", dir: -1 }, query: "", env: "", page: 0, pageSize: 50,
    zOrder: "arrival", live: "connecting", loadedVersion: 0, preqCache: new Map(), preqMissing: new Set(), open: new Set(),
  };

  main.innerHTML = `<div class="model-head" id="model-head"><p class="loading">Loading ${esc(name)}…</p></div>`;

  async function loadModel() { s.model = await api.get(base, { signal: ctrl.signal }); }
  async function loadTasks() {
    const out = [];
    for (let offset = 0; ; offset += 1000) {
      const page = await api.get(`${base}/tasks?offset=${offset}&limit=1000`, { signal: ctrl.signal });
      out.push(...page.tasks);
      if (page.count < 1000) break;
    }
    s.tasks = out;
    rederive();
  }
  function rederive() {
    const reps = new Set(s.model?.representatives ?? []);
    const held = new Map((s.evaluation?.tasks ?? []).map((e) => [e.task_id, e.score ?? null]));
    s.byId = new Map(s.tasks.map((t) => {
      derive(t, reps);
      t._heldout = held.get(t.task_id) ?? null;
      const p = s.preqCache.get(t.task_id);
      t._preq = p && p.version === t.version ? p.prequential : null;
      return [t.task_id, t];
    }));
  }
  // GET .../tasks lists no per-task prequential score: fetch it for the rows on screen (cached by version).
  let preqBusy = false;
  async function fetchVisiblePreq(slice) {
    // (a task's first batch is never scored: only tasks with more batches can have one)
    const want = slice.filter((t) => (t.prequential === undefined || (t.prequential === null && t.n_batches > 1))
                                     && s.preqCache.get(t.task_id)?.version !== t.version && !s.preqMissing.has(t.task_id));
    if (!want.length || preqBusy || stopped) return;
    preqBusy = true;
    try {
      for (let i = 0; i < want.length; i += 6) {
        await Promise.all(want.slice(i, i + 6).map(async (t) => {
          try {
            const one = await api.get(`${base}/tasks/${encodeURIComponent(t.task_id)}`, { signal: ctrl.signal });
            if (one.prequential === undefined) s.preqMissing.add(t.task_id);
            s.preqCache.set(t.task_id, { version: one.version, prequential: one.prequential ?? null });
          } catch (err) {
            if (err.name === "AbortError") throw err;
            s.preqMissing.add(t.task_id);
          }
        }));
      }
    } catch { return; } finally { preqBusy = false; }
    if (stopped) return;
    rederive();
    keepFocus(() => renderTable(false));
  }
  async function loadEvaluation() {
    try {
      s.evaluation = await api.get(`${base}/evaluation`, { signal: ctrl.signal, optional: true });
      s.evaluationError = null;
    } catch (err) {
      if (err instanceof api.AuthError || err.name === "AbortError") throw err;
      s.evaluation = null;
      s.evaluationError = err.message;
    }
  }
  async function loadLatency() {
    const text = await api.getText("metrics", { signal: ctrl.signal });
    s.latency = text ? parseLatency(text) : null;
  }

  function skeleton() {
    main.innerHTML = `
      <div class="model-head" id="model-head"></div>
      <nav class="jump" aria-label="Sections of this model">
        ${[["sec-envs", "Environments"], ["sec-z", "Assignments Zᵗ"], ["sec-preq", "Prequential"], ["sec-acc", "Accuracy matrix"],
           ["sec-tasks", "Tasks"], ["sec-live", "Live"]].map(([id, l]) => `<button type="button" class="link" data-jump="${id}">${l}</button>`).join("")}
      </nav>
      <section class="cards" id="cards" aria-label="Summary"></section>
      <section id="sec-envs" tabindex="-1"><h2>Environments</h2>
        <p class="muted">Each representative task with the tasks whose assignment Zᵗ leans on it most (their latest update).</p>
        <div id="envs"></div></section>
      <section id="sec-z" tabindex="-1"><h2>Assignments Zᵗ</h2>
        <p class="muted">One column per task, one row per representative and the outlier slot (the probability e of opening a new
        environment); darker is a larger weight; dashed: the representative did not exist yet at the task's latest update.</p>
        <div class="controls"><label for="z-order">Order tasks</label>
          <select id="z-order"><option value="arrival">by arrival</option><option value="env">by environment</option></select></div>
        <div id="zmap" class="chart-wrap"></div></section>
      <section id="sec-preq" tabindex="-1"><h2>Prequential error over versions</h2>
        <p class="muted">Each batch is predicted before it is learned (test-then-train), beside the baseline.</p>
        <div id="preq" class="chart-wrap"></div></section>
      <section id="sec-acc" tabindex="-1"><h2>Accuracy matrix</h2>
        <p class="muted">Held-out score of every task (columns) after each update (rows), with forgetting and transfer.</p>
        <div id="acc"></div></section>
      <section id="sec-tasks" tabindex="-1"><h2>Tasks</h2>
        <div class="controls">
          <label for="task-search">Search</label>
          <input id="task-search" type="search" placeholder="task or representative id" autocomplete="off">
          <label for="task-env">Environment</label><select id="task-env"></select>
          <label for="task-size">Rows per page</label>
          <select id="task-size"><option>25</option><option selected>50</option><option>100</option><option>250</option></select>
        </div>
        <div class="table-wrap"><table class="data stack" id="tasks-table" role="table"><caption class="sr-only">Tasks of ${esc(name)}; sortable columns</caption>
          <thead role="rowgroup"><tr role="row">${COLUMNS.map((c) => `<th scope="col" role="columnheader" class="${c.num ? "num" : ""}" data-key="${c.key}"><button type="button" class="sort" data-key="${c.key}">${esc(c.label)}<span class="arrow" aria-hidden="true"></span></button></th>`).join("")}</tr></thead>
          <tbody id="tasks-body" role="rowgroup"></tbody></table></div>
        <div class="pager" id="pager"></div></section>
      <section id="sec-live" tabindex="-1"><h2>Live updates</h2>
        <p class="muted" id="live-help">Updates appear here as they are committed, without reloading.</p>
        <ol class="feed" id="feed" aria-live="polite"></ol></section>`;
    main.querySelectorAll("[data-jump]").forEach((b) => b.addEventListener("click", () => {
      const el = document.getElementById(b.dataset.jump); el.scrollIntoView({ behavior: "smooth" }); el.focus({ preventScroll: true });
    }));
    document.getElementById("z-order").addEventListener("change", (e) => { s.zOrder = e.target.value; renderZ(); });
    document.getElementById("task-search").addEventListener("input", (e) => { s.query = e.target.value.trim().toLowerCase(); s.page = 0; renderTable(); });
    document.getElementById("task-env").addEventListener("change", (e) => { s.env = e.target.value; s.page = 0; renderTable(); });
    document.getElementById("task-size").addEventListener("change", (e) => { s.pageSize = Number(e.target.value); s.page = 0; renderTable(); });
    main.querySelectorAll("button.sort").forEach((b) => b.addEventListener("click", () => {
      const k = b.dataset.key;
      s.sort = s.sort.key === k ? { key: k, dir: -s.sort.dir } : { key: k, dir: COLUMNS.find((c) => c.key === k).text ? 1 : -1 };
      s.page = 0;
      renderTable();
    }));
  }

  // ---- header and cards
  function renderHead() {
    const m = s.model;
    const state = { live: "live", polling: "live (polling)", connecting: "connecting…", reconnecting: "reconnecting…", offline: "not live" }[s.live] ?? s.live;
    document.getElementById("model-head").innerHTML = `
      <p class="crumbs"><a href="#/">Models</a> / </p>
      <h1>${esc(m.name)} <span class="live-badge ${s.live === "live" || s.live === "polling" ? "on" : ""}" id="live-state" role="status">${esc(state)}</span></h1>
      <dl class="facts">
        <div><dt>Kind</dt><dd>${esc(m.kind)}</dd></div><div><dt>Estimator</dt><dd>${esc(m.estimator)}</dd></div>
        <div><dt>Version</dt><dd id="model-version">${fmtInt(m.version)}</dd></div><div><dt>Tasks</dt><dd id="model-tasks">${fmtInt(m.n_tasks)}</dd></div>
        <div><dt>Batches</dt><dd>${fmtInt(m.n_batches)}</dd></div><div><dt>Representatives</dt><dd id="model-reps">${fmtInt(m.n_representatives)}</dd></div>
        <div><dt>Features d</dt><dd>${m.d ?? "—"}</dd></div><div><dt>Code length p</dt><dd>${m.p ?? "—"}</dd></div>
        <div><dt>Last update</dt><dd>${ago(m.updated_at)}</dd></div>
      </dl>`;
  }

  function renderCards() {
    const m = s.model;
    const preq = m.prequential;
    const lifeMin = (Date.parse(m.updated_at) - Date.parse(m.created_at)) / 60000;
    const lifeRate = m.version > 1 && lifeMin > 0 ? (m.version - 1) / lifeMin : null;
    const now = Date.now();
    const recent = s.versionTimes.filter(([t]) => now - t < 5 * 60000);
    let liveRate = null;
    if (recent.length >= 1) {
      const span = Math.max(60000, now - Math.min(...recent.map(([t]) => t))) / 60000;
      liveRate = recent.reduce((a, [, n]) => a + n, 0) / span;
    }
    const lat = s.latency;
    const ev = s.evaluation;
    const scored = (ev?.tasks ?? []).map((e) => scorePair(e.score)).filter((p) => p && p.model !== null);
    const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const held = scored.length ? { model: mean(scored.map((p) => p.model)), metric: scored[0].metric,
      baseline: scored.every((p) => p.baseline !== null) ? mean(scored.map((p) => p.baseline)) : null } : null;
    document.getElementById("cards").innerHTML = `
      <div class="card" id="card-preq"><h3>Prequential error${preq?.overall ? ` (${esc(metricName(scorePair(preq.overall)?.metric))})` : ""}</h3>
        <p class="big">${fmtScore(preq?.overall ?? null)}</p>
        <p class="muted">each batch predicted before it is learned, vs each task's own single-task model</p>
        ${preq?.recent ? `<p class="muted">last ${esc(preq.window)} batches: ${fmtScore(preq.recent)}</p>` : ""}</div>
      <div class="card" id="card-heldout"><h3>Held-out error${held ? ` (${esc(metricName(held.metric))})` : ""}</h3><p class="big">${fmtScore(held)}</p>
        <p class="muted">${held ? `mean over the evaluation rows of ${fmtInt(scored.length)} tasks, vs the baseline` : "no task has evaluation rows yet (POST …/tasks/{task_id}/evaluation)"}</p></div>
      <div class="card"><h3>Update rate</h3><p class="big">${liveRate === null ? "—" : `${fmtNum(liveRate, 3)}/min`}</p>
        <p class="muted">seen live over the last 5 min</p><p class="muted">${lifeRate === null ? "no lifetime rate yet" : `${fmtNum(lifeRate, 3)}/min on average since creation`}</p></div>
      <div class="card"><h3>Update latency</h3><p class="big">${lat && lat.count ? `${fmtNum(lat.mean * 1000, 3)} ms` : "—"}</p>
        <p class="muted">${lat && lat.count ? `mean of ${fmtInt(lat.count)} updates, p95 ≤ ${fmtNum(lat.p95 * 1000, 3)} ms</p><p class="muted">all models of the process answering /metrics` : "no update timed by this process yet"}</p></div>`;
  }

  // ---- environments
  function environments() {
    const reps = s.model.representatives ?? [];
    const groups = new Map(reps.map((r) => [r, []]));
    const loose = [];
    for (const t of s.tasks) {
      const r = t._lean?.rep;
      if (r != null && groups.has(r)) groups.get(r).push(t); else loose.push(t);
    }
    return { reps, groups, loose };
  }

  function renderEnvs() {
    const { reps, groups, loose } = environments();
    const box = document.getElementById("envs");
    if (!reps.length) {
      box.innerHTML = `<p class="empty">${s.tasks.length ? "This estimator keeps no representatives." : "No task learned yet."}</p>`;
    } else {
      const card = (title, rep, members, cls = "") => {
        const shown = members.slice(0, 40);
        return `<article class="env ${cls}" data-rep="${esc(rep ?? "")}"><h3>${title}</h3>
          <p class="muted">${fmtInt(members.length)} task${members.length === 1 ? "" : "s"}</p>
          <ul class="chips">${shown.map((t) => `<li class="${t._isRep ? "rep" : ""}" title="${t._isRep ? "the representative" : `weight ${fmtNum(t._lean?.weight)}`}">${esc(t.task_id)}</li>`).join("")}
          ${members.length > shown.length ? `<li class="more">+ ${fmtInt(members.length - shown.length)} more</li>` : ""}</ul>
          ${members.length ? `<button type="button" class="link env-show" data-env="${esc(rep ?? "__none__")}">Show in the task table</button>` : ""}</article>`;
      };
      box.innerHTML = `<div class="envs">${reps.map((r, k) => card(`Environment ${k + 1} · <code>${esc(r)}</code>`, r, groups.get(r))).join("")}
        ${loose.length ? card("Not assigned", null, loose, "loose") : ""}</div>`;
      box.querySelectorAll(".env-show").forEach((b) => b.addEventListener("click", () => {
        s.env = b.dataset.env; s.page = 0;
        renderEnvSelect(); renderTable();
        const sec = document.getElementById("sec-tasks"); sec.scrollIntoView(); sec.focus({ preventScroll: true });
      }));
    }
    renderEnvSelect();
  }

  function renderEnvSelect() {
    const reps = s.model.representatives ?? [];
    const sel = document.getElementById("task-env");
    sel.innerHTML = `<option value="">all</option>${reps.map((r, k) => `<option value="${esc(r)}">${k + 1}: ${esc(r)}</option>`).join("")}<option value="__none__">not assigned</option>`;
    sel.value = s.env;
  }

  // ---- Z^t heat-map
  function renderZ() {
    const box = document.getElementById("zmap");
    const reps = s.model.representatives ?? [];
    const withZ = s.tasks.filter((t) => t._weights.size || t._outlierWeight !== null);
    if (!reps.length || !withZ.length) {
      box.innerHTML = `<p class="empty">No assignments yet${s.tasks.length ? " (this estimator has no Zᵗ)" : ""}.</p>`;
      return;
    }
    let cols = s.tasks;
    if (s.zOrder === "env") {
      const idx = new Map(reps.map((r, k) => [r, k]));
      cols = [...s.tasks].map((t, i) => [t, i]).sort((a, b) => ((idx.get(a[0]._lean?.rep) ?? 1e9) - (idx.get(b[0]._lean?.rep) ?? 1e9)) || a[1] - b[1]).map(([t]) => t);
    }
    const rows = [...reps.map((r, k) => `${k + 1}: ${r}`), "new environment (e)"];
    const avail = Math.max(240, (box.clientWidth || 800) - 160);
    const w = Math.max(2, Math.min(32, Math.floor(avail / cols.length)));
    const labelled = w >= 12;
    box.innerHTML = heatmap({
      rows, cols: cols.map((t) => t.task_id), cell: { w, h: 22 }, rowHeader: 150, colHeader: labelled ? 70 : 0, padRight: labelled ? 50 : 4,
      label: `Assignments Z^t of ${cols.length} tasks over ${reps.length} representatives`,
      value: (i, j) => {
        const t = cols[j];
        if (i === reps.length) return t._outlierWeight ?? t._e;
        return t._weights.has(reps[i]) ? t._weights.get(reps[i]) : null;
      },
      title: (i, j, v) => `${cols[j].task_id} → ${i === reps.length ? "new environment (outlier slot)" : reps[i]}: ${fmtNum(v)}`,
      voidTitle: (i, j) => `${cols[j].task_id}: ${reps[i]} was not a representative yet at its latest update`,
      scale: (v) => v, stops: BLUES,
    }) + `<div class="axis-note">${labelled ? "" : `tasks 1 … ${fmtInt(cols.length)} ${s.zOrder === "env" ? "grouped by environment" : "in order of arrival"} (hover a cell for its task)`}</div>`
      + legend(BLUES, "0", "1", "weight zₖ");
  }

  // ---- prequential over versions
  function noEvaluation(what) {
    if (s.evaluation !== null) return "";
    return s.evaluationError ? `: GET …/evaluation failed (${esc(s.evaluationError)})` : `: this service does not report ${what} (no GET …/evaluation)`;
  }

  /** EvaluationOut.prequential: [{version, task_id, new_task, batch: Scores, overall: Scores}]. */
  function preqSeries(ev) {
    const arr = Array.isArray(ev?.prequential) ? ev.prequential.filter((p) => p.overall) : [];
    if (!arr.length) return null;
    const overall = arr.map((p) => [p.version, scorePair(p.overall)]);
    return {
      metric: overall[0][1]?.metric ?? ev.metric,
      model: overall.map(([v, p]) => [v, p?.model ?? null]),
      baseline: overall.map(([v, p]) => [v, p?.baseline ?? null]),
      batch: ev.prequential.filter((p) => p.batch).map((p) => [p.version, scorePair(p.batch)?.model ?? null]),
    };
  }

  function renderPreq() {
    const box = document.getElementById("preq");
    const ser = preqSeries(s.evaluation);
    if (!ser) {
      box.innerHTML = `<p class="empty">No data yet${noEvaluation("prequential scores")}.</p>`;
      return;
    }
    const metric = metricName(ser.metric);
    const series = [{ name: `${s.model.estimator}, cumulative`, cls: "s-model", points: ser.model },
                    { name: "baseline (each task's own single-task model), cumulative", cls: "s-base", points: ser.baseline }];
    box.innerHTML = lineChart({ series, xLabel: "version", yLabel: `prequential ${metric}`, label: `Prequential ${metric} over versions, beside the baseline` }) +
      `<ul class="keys">${series.map((x) => `<li><span class="swatch ${x.cls}" aria-hidden="true"></span>${esc(x.name)}</li>`).join("")}
       <li class="muted">${lowerIsBetter(ser.metric) ? "lower is better" : "higher is better"}</li></ul>`;
  }

  // ---- accuracy matrix
  function renderAcc() {
    const box = document.getElementById("acc");
    const ev = s.evaluation;
    const am = ev?.accuracy_matrix;
    if (!am || !Array.isArray(am.rows) || !am.rows.length) {
      box.innerHTML = `<p class="empty">No data yet${noEvaluation("held-out scores")}.</p>`;
      return;
    }
    const metric = am.metric ?? "score";
    const tasks = am.tasks ?? [];
    const vals = am.rows.flatMap((r) => (r.scores ?? []).filter((v) => typeof v === "number"));
    const lo = Math.min(...vals), hi = Math.max(...vals);
    const lowBetter = typeof am.higher_is_better === "boolean" ? !am.higher_is_better : lowerIsBetter(metric);
    const scale = (v) => (hi > lo ? (lowBetter ? (hi - v) / (hi - lo) : (v - lo) / (hi - lo)) : 0.5);
    const cw = Math.max(3, Math.min(40, Math.floor(((document.getElementById("acc").clientWidth || 800) - 170) / Math.max(1, tasks.length))));
    const ch = am.rows.length > 150 ? 3 : am.rows.length > 60 ? 8 : 18;
    const stat = (label, x) => {
      if (x === undefined) return "";
      const v = typeof x === "number" ? fmtNum(x) : x && typeof x === "object" ? (scorePair(x) ? fmtScore(x, metric) : esc(JSON.stringify(x))) : "—";
      return `<div class="card small"><h3>${label}</h3><p class="big">${v}</p></div>`;
    };
    box.innerHTML = `<div class="cards">${stat("Forgetting", ev.forgetting)}${stat("Backward transfer", ev.backward_transfer)}${stat("Forward transfer", ev.forward_transfer)}</div>
      <div class="chart-wrap">${heatmap({
        rows: am.rows.map((r) => (ch >= 14 ? `v${r.version}${r.task_id ? ` · ${r.task_id}` : ""}` : "")), cols: tasks,
        cell: { w: cw, h: ch }, rowHeader: ch >= 14 ? 160 : 20, colHeader: cw >= 12 ? 70 : 0, padRight: cw >= 12 ? 50 : 4, showValues: true,
        label: `Accuracy matrix: ${metric} of ${tasks.length} tasks after ${am.rows.length} updates`,
        value: (i, j) => { const v = am.rows[i].scores?.[j]; return typeof v === "number" ? v : null; },
        title: (i, j, v) => { const b = am.rows[i].baseline?.[j]; return `after v${am.rows[i].version}${am.rows[i].task_id ? ` (new task ${am.rows[i].task_id})` : ""}, task ${tasks[j]}: ${metricName(metric)} ${fmtNum(v)}${typeof b === "number" ? ` (baseline ${fmtNum(b)})` : ""}`; },
        scale, stops: VIRIDIS,
        voidTitle: (i, j) => `after v${am.rows[i].version}: task ${tasks[j]} not learned yet`,
      })}</div>${legend(VIRIDIS, lowBetter ? fmtNum(hi) : fmtNum(lo), lowBetter ? fmtNum(lo) : fmtNum(hi), `${metricName(metric)} (${lowBetter ? "lower" : "higher"} is better: brighter is better)`)}
      <p class="muted">Forgetting: how much tasks got worse since their best (positive: forgot). Backward transfer: how later tasks changed earlier ones (positive: improved them). Forward transfer: a new task's score right after learning it against its own single-task model (positive: the shared library helped).</p>`;
  }

  // ---- tasks table
  function filtered() {
    const q = s.query;
    let rows = s.tasks;
    if (s.env === "__none__") rows = rows.filter((t) => !t._lean || !(s.model.representatives ?? []).includes(t._lean.rep));
    else if (s.env) rows = rows.filter((t) => t._lean?.rep === s.env);
    if (q) rows = rows.filter((t) => t.task_id.toLowerCase().includes(q) || (t._lean?.rep ?? "").toLowerCase().includes(q));
    const col = COLUMNS.find((c) => c.key === s.sort.key);
    const dir = s.sort.dir;
    return [...rows].sort((a, b) => {
      const x = col.value(a), y = col.value(b);
      if (x === null || x === undefined) return (y === null || y === undefined) ? 0 : 1; // missing last
      if (y === null || y === undefined) return -1;
      return (typeof x === "string" ? x.localeCompare(y, undefined, { numeric: true }) : x - y) * dir;
    });
  }

  function renderTable(fetchScores = true) {
    const rows = filtered();
    const pages = Math.max(1, Math.ceil(rows.length / s.pageSize));
    s.page = Math.min(s.page, pages - 1);
    const slice = rows.slice(s.page * s.pageSize, (s.page + 1) * s.pageSize);
    const metric = s.evaluation?.metric;
    const body = document.getElementById("tasks-body");
    const label = Object.fromEntries(COLUMNS.map((c) => [c.key, c.label]));
    const cell = (key, html, cls = "") => `<td role="cell" data-label="${esc(label[key])}" data-col="${key}"${cls ? ` class="${cls}"` : ""}>${html}</td>`;
    body.innerHTML = slice.length ? slice.map((t) => { const open = s.open.has(t.task_id); return `<tr role="row" data-task="${esc(t.task_id)}" class="${s.fresh?.has(t.task_id) ? "fresh" : ""}">
      <th scope="row" role="rowheader"><button type="button" class="link task-open" data-task="${esc(t.task_id)}" aria-expanded="${open}" title="show its assignment Zᵗ and code">${esc(t.task_id)}</button>${t._isRep ? ` <span class="badge" title="a representative task">rep</span>` : ""}</th>
      ${cell("rows", fmtInt(t.n_samples), "num")}${cell("batches", fmtInt(t.n_batches), "num")}
      ${cell("lean", t._isRep ? `<span class="muted">itself</span>` : t._lean ? `${esc(t._lean.rep)} <span class="muted">(${fmtNum(t._lean.weight)})</span>` : "—")}
      ${cell("e", fmtNum(t._e), "num")}${cell("preq", fmtScore(t.prequential ?? t._preq, metric), "score-cell")}${cell("heldout", fmtScore(t._heldout ?? t.evaluation, metric), "score-cell")}
      ${cell("version", fmtInt(t.version), "num")}${cell("updated", ago(t.updated_at))}</tr>
      ${open ? `<tr role="row" class="detail" data-detail="${esc(t.task_id)}"><td role="cell" colspan="${COLUMNS.length}">${taskDetail(t)}</td></tr>` : ""}`; }).join("")
      : `<tr role="row"><td role="cell" colspan="${COLUMNS.length}" class="empty">${s.tasks.length ? "No task matches." : "No task learned yet."}</td></tr>`;
    body.querySelectorAll("button.task-open").forEach((b) => b.addEventListener("click", () => {
      const id = b.dataset.task;
      if (s.open.has(id)) s.open.delete(id); else s.open.add(id);
      renderTable(false);
      body.querySelector(`button.task-open[data-task="${CSS.escape(id)}"]`)?.focus();
    }));
    main.querySelectorAll("#tasks-table th[data-key]").forEach((th) => {
      const on = th.dataset.key === s.sort.key;
      th.setAttribute("aria-sort", on ? (s.sort.dir > 0 ? "ascending" : "descending") : "none");
      th.querySelector(".arrow").textContent = on ? (s.sort.dir > 0 ? " ▲" : " ▼") : "";
    });
    const from = rows.length ? s.page * s.pageSize + 1 : 0;
    const pager = document.getElementById("pager");
    pager.innerHTML = `<span id="page-info" aria-live="polite">${fmtInt(from)}–${fmtInt(Math.min(rows.length, (s.page + 1) * s.pageSize))} of ${fmtInt(rows.length)} tasks${rows.length !== s.tasks.length ? ` (filtered from ${fmtInt(s.tasks.length)})` : ""}</span>
      <span class="pages"><button type="button" data-page="first" ${s.page === 0 ? "disabled" : ""}>« First</button>
      <button type="button" data-page="prev" ${s.page === 0 ? "disabled" : ""}>‹ Previous</button>
      <span>page ${s.page + 1} of ${pages}</span>
      <button type="button" data-page="next" ${s.page >= pages - 1 ? "disabled" : ""}>Next ›</button>
      <button type="button" data-page="last" ${s.page >= pages - 1 ? "disabled" : ""}>Last »</button></span>`;
    pager.querySelectorAll("button[data-page]").forEach((b) => b.addEventListener("click", () => {
      const p = b.dataset.page;
      s.page = p === "first" ? 0 : p === "prev" ? s.page - 1 : p === "next" ? s.page + 1 : pages - 1;
      renderTable();
      const order = p === "first" || p === "prev" ? [p, "next", "last"] : [p, "prev", "first"];
      for (const q of order) {
        const next = pager.querySelector(`button[data-page="${q}"]:not([disabled])`);
        if (next) { next.focus(); break; }
      }
    }));
    if (fetchScores) fetchVisiblePreq(slice);
  }

  /** One task's latest update: its assignment Zᵗ as bars, its code s_t, its scores in full. */
  function taskDetail(t) {
    const lu = t.last_update || {};
    const asg = Array.isArray(lu.assignment) ? lu.assignment : [];
    const bar = (w) => `<svg class="bar" width="160" height="12" aria-hidden="true"><rect class="track" width="160" height="12"/><rect class="fill" width="${(160 * Math.max(0, Math.min(1, w))).toFixed(1)}" height="12"/></svg>`;
    const scores = (label, x) => {
      if (!x) return "";
      const parts = Object.entries(x).filter(([, v]) => typeof v === "number").map(([k, v]) => `${esc(k.replaceAll("_", " "))} ${fmtNum(v)}`);
      return `<p><strong>${label}:</strong> ${parts.join(" · ")}</p>`;
    };
    return `<div class="task-detail">
      <div><h4>Assignment Zᵗ at its latest update (v${esc(t.version)})</h4>
        ${asg.length ? `<ul class="bars">${asg.map((a) => `<li><span class="lbl">${a.outlier ? "new environment (e)" : esc(a.representative)}</span>${bar(a.weight)}<span class="w">${fmtNum(a.weight)}</span></li>`).join("")}</ul>`
          : `<p class="muted">no assignment (this estimator keeps no representatives, or the task was imported without it)</p>`}
        ${lu.new_representative ? `<p>This update made it a representative (it opened an environment).</p>` : ""}</div>
      <div><h4>Code s<sub>t</sub></h4><p class="code">${Array.isArray(lu.code) ? `[${lu.code.map((v) => fmtNum(v)).join(", ")}]` : "—"}</p>
        ${scores("Prequential (cumulative)", t.prequential ?? t._preq)}${scores("Held-out", t._heldout ?? t.evaluation)}
        <p class="muted">created ${ago(t.created_at)}; labels: ${esc(t.labels ?? "—")}</p></div></div>`;
  }

  // ---- live
  function renderFeed() {
    const feed = document.getElementById("feed");
    feed.innerHTML = s.feed.length ? s.feed.map((f) => `<li data-version="${f.version ?? ""}"><span class="when">${esc(f.when)}</span> ${f.html}</li>`).join("")
      : `<li class="empty">Nothing yet since the page opened.</li>`;
    const help = document.getElementById("live-help");
    help.textContent = s.live === "polling"
      ? "Updates appear here as they are committed (checked every 2 s: this service has no event stream), without reloading."
      : "Updates appear here as they are committed (the model's event stream), without reloading.";
  }

  function pushFeed(version, html) {
    s.feed.unshift({ version, html, when: new Date().toLocaleTimeString() });
    s.feed.length = Math.min(s.feed.length, 100);
  }

  function describeUpdate(d, task) {
    const env = d.new_representative ? "opened a new environment" : task?._isRep ? "a representative"
      : task?._lean ? `leans on <code>${esc(task._lean.rep)}</code>` : "";
    const preq = d.prequential !== undefined && d.prequential !== null ? ` · prequential ${fmtScore(d.prequential)}` : "";
    return `<strong>v${esc(d.version)}</strong> task <code>${esc(d.task_id)}</code> · ${d.new_task ? "new task" : "more data"}${env ? ` · ${env}` : ""}${typeof d.n_representatives === "number" ? ` · ${d.n_representatives} representatives` : ""}${preq}`;
  }

  function renderAll() {
    if (stopped) return;
    keepFocus(() => { renderHead(); renderCards(); renderEnvs(); renderZ(); renderPreq(); renderAcc(); renderTable(); renderFeed(); });
  }

  const pending = new Map(); // key -> timer: bursts of one kind of event coalesce into one reload
  function soon(key, fn, ms = 200) {
    if (pending.has(key)) return;
    pending.set(key, setTimeout(async () => {
      pending.delete(key);
      if (stopped) return;
      try { await fn(); } catch (err) { if (err instanceof api.AuthError) route(); }
    }, ms));
  }

  function noteVersions(n) { if (n > 0) s.versionTimes.push([Date.now(), n]); s.versionTimes = s.versionTimes.filter(([t]) => Date.now() - t < 10 * 60000); }

  // Update events are applied in batches (one redraw per burst, not one per update).
  const queue = [];
  let needFull = false;
  function onUpdate(d) {
    const v = Number(d.version);
    if (Number.isFinite(v) && v <= s.loadedVersion) return; // already shown
    if (Number.isFinite(v) && v > s.loadedVersion + 1) needFull = true; // missed some: re-read every task
    noteVersions(Number.isFinite(v) ? v - s.loadedVersion : 1);
    if (Number.isFinite(v)) s.loadedVersion = v;
    queue.push(d);
    soon("update", applyUpdates, 150);
  }

  async function applyUpdates() {
    const batch = queue.splice(0);
    const ids = [...new Set(batch.map((d) => d.task_id).filter((x) => x !== undefined && x !== null))];
    await loadModel();
    if (needFull || ids.length > 25) {
      needFull = false;
      await loadTasks();
    } else {
      const got = await Promise.all(ids.map((id) => api.get(`${base}/tasks/${encodeURIComponent(id)}`, { signal: ctrl.signal })
        .catch((err) => { if (err instanceof api.AuthError || err.name === "AbortError") throw err; return null; })));
      for (const task of got) {
        if (!task) continue;
        const i = s.tasks.findIndex((t) => t.task_id === task.task_id);
        if (i >= 0) s.tasks[i] = task; else s.tasks.push(task);
      }
      rederive();
    }
    s.fresh = new Set(ids);
    for (const d of batch) pushFeed(d.version, describeUpdate(d, s.byId.get(d.task_id)));
    renderAll();
  }

  function onEvent({ event, data }) {
    if (stopped) return;
    if (event === "update" || (event === "message" && data && data.task_id !== undefined)) onUpdate(data);
    else if (event === "evaluation") soon("evaluation", async () => { await loadEvaluation(); rederive(); keepFocus(() => { renderCards(); renderPreq(); renderAcc(); renderTable(false); }); }, 300);
    else if (event === "reset") {
      soon("reset", async () => {
        if (data && data.version === null) { pushFeed(null, `<strong>the model is gone</strong> (deleted)`); renderFeed(); return; }
        await loadAll();
        pushFeed(s.model.version, `<strong>re-read</strong> at v${esc(s.model.version)}: the updates in between cannot be replayed (${esc(data?.reason ?? "reset")})`);
        renderAll();
      }, 100);
    }
  }

  async function poll() { // when the service has no event stream: the version, every 2 s
    if (stopped) return;
    try {
      const m = await api.get(base, { signal: ctrl.signal });
      if (m.version > s.loadedVersion) {
        const before = s.loadedVersion;
        noteVersions(m.version - before);
        s.model = m;
        await loadTasks();
        await loadEvaluation().catch(() => {});
        rederive();
        const changed = s.tasks.filter((t) => t.version > before).sort((a, b) => b.version - a.version);
        s.fresh = new Set(changed.map((t) => t.task_id));
        for (const t of changed.slice(0, 20).reverse()) {
          pushFeed(t.version, describeUpdate({ version: t.version, task_id: t.task_id, new_task: t.n_batches === 1,
            new_representative: !!t.last_update?.new_representative, n_representatives: t.last_update?.n_representatives }, t));
        }
        s.loadedVersion = m.version;
        renderAll();
      } else if (m.version < s.loadedVersion) { // deleted and created again
        s.model = m; s.loadedVersion = m.version; await loadTasks(); renderAll();
      }
    } catch (err) {
      if (err.name === "AbortError") return;
      if (err instanceof api.AuthError) { route(); return; }
    }
  }

  function startLive() {
    stream = api.followEvents(`${base}/events`, {
      lastEventId: s.loadedVersion,
      onEvent,
      onState(state) {
        if (stopped) return;
        if (state === "unsupported") { s.live = "polling"; timers.push(setInterval(poll, 2000)); }
        else if (state === "auth") { s.live = "offline"; route(); return; }
        else s.live = state;
        const badge = document.getElementById("live-state");
        if (badge) {
          badge.textContent = { live: "live", polling: "live (polling)", connecting: "connecting…", reconnecting: "reconnecting…" }[s.live] ?? s.live;
          badge.classList.toggle("on", s.live === "live" || s.live === "polling");
        }
        renderFeed();
      },
    });
  }

  async function loadAll() {
    await loadModel();
    await Promise.all([loadTasks(), loadEvaluation(), loadLatency()]);
    rederive();
    s.loadedVersion = s.model.version;
  }

  guarded(async () => {
    await loadAll();
    if (stopped) return;
    skeleton();
    renderAll();
    startLive();
    timers.push(setInterval(async () => { await loadLatency().catch(() => {}); if (!stopped) renderCards(); }, 10000));
    let width = main.clientWidth;
    const onResize = () => { if (Math.abs(main.clientWidth - width) > 40) { width = main.clientWidth; renderZ(); renderAcc(); } };
    window.addEventListener("resize", onResize);
    timers.push({ resize: onResize });
  });

  return {
    stop() {
      stopped = true;
      ctrl.abort();
      stream?.stop();
      for (const t of pending.values()) clearTimeout(t);
      for (const t of timers) t.resize ? window.removeEventListener("resize", t.resize) : clearInterval(t);
    },
  };
}

/** Mean and p95 of fcl3_update_duration_seconds from Prometheus text (all labels summed). */
function parseLatency(text) {
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

route();
