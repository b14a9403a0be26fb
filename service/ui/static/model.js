// View: one model — it loads the model, its tasks and its evaluation, lays out the views
// (overview.js, environments.js, scores.js, tasks.js, live.js) and keeps them current from
// the model's event stream (or by polling its version when the service has none).
import * as api from "./api.js";
import { fill, h, keepFocus } from "./dom.js";
import { assignmentsView, derive, environmentsView } from "./environments.js";
import { historyView } from "./history.js";
import { liveView, describeUpdate } from "./live.js";
import { cardsView, headView, parseLatency } from "./overview.js";
import { matrixView, prequentialView } from "./scores.js";
import { tasksView } from "./tasks.js";

export function modelView({ main, guarded, route }, name) {
  document.title = `${name} · FCL3 dashboard`;
  const base = `models/${encodeURIComponent(name)}`;
  const ctrl = new AbortController();
  const signal = ctrl.signal;
  const timers = [];
  let stream = null;
  let stopped = false;
  const s = {
    model: null, tasks: [], rows: [], byId: new Map(), evaluation: undefined, evaluationError: null, latency: null,
    versionTimes: [], live: "connecting", loadedVersion: 0, fresh: new Set(), labels: null,
    preq: new Map(), // task id -> {version, scores}: TaskOut.prequential of GET .../tasks/{id} (the list carries none)
  };
  fill(main, h("div", { class: "model-head" }, h("p", { class: "loading" }, `Loading ${name}…`)));

  // ---- loading
  async function loadModel() { s.model = await api.get(base, { signal }); }
  async function loadTasks() {
    const out = [];
    for (let offset = 0; ; offset += 1000) {
      const page = await api.get(`${base}/tasks?offset=${offset}&limit=1000`, { signal });
      out.push(...page.tasks);
      if (page.count < 1000) break;
    }
    s.tasks = out;
    rederive();
  }
  async function loadEvaluation() {
    try {
      s.evaluation = await api.get(`${base}/evaluation?limit=1000&matrix_limit=10000`, { signal, optional: true });
      s.evaluationError = null;
    } catch (err) {
      if (err instanceof api.AuthError || err.name === "AbortError") throw err;
      s.evaluation = null;
      s.evaluationError = err.message;
    }
  }
  async function loadLabels() { // LabelsOut; null on a service without GET …/labels
    try {
      s.labels = await api.get(`${base}/labels`, { signal, optional: true });
    } catch (err) {
      if (err instanceof api.AuthError || err.name === "AbortError") throw err;
      s.labels = null;
    }
  }
  async function loadLatency() {
    const text = await api.getText("metrics", { signal });
    s.latency = text ? parseLatency(text) : null;
  }
  async function loadAll() {
    await loadModel();
    await Promise.all([loadTasks(), loadEvaluation(), loadLatency(), loadLabels()]);
    rederive();
    s.loadedVersion = s.model.version;
  }
  function rederive() {
    const reps = new Set(s.model?.representatives ?? []);
    const held = new Map((s.evaluation?.tasks ?? []).map((e) => [e.task_id, e.score]));
    s.rows = s.tasks.map((t) => {
      const p = s.preq.get(t.task_id);
      return { ...derive(t, reps), preq: p?.version === t.version ? p.scores : null, heldout: held.get(t.task_id) ?? null };
    });
    s.byId = new Map(s.rows.map((r) => [r.task.task_id, r]));
  }

  // A task's first batch is never scored: only tasks with more batches can have a prequential score.
  let preqBusy = false;
  async function fetchScores(rows) {
    const want = rows.filter((r) => r.task.n_batches > 1 && s.preq.get(r.task.task_id)?.version !== r.task.version);
    if (!want.length || preqBusy || stopped) return;
    preqBusy = true;
    try {
      for (let i = 0; i < want.length; i += 6) {
        await Promise.all(want.slice(i, i + 6).map(async (r) => {
          const one = await api.get(`${base}/tasks/${encodeURIComponent(r.task.task_id)}`, { signal });
          s.preq.set(one.task_id, { version: one.version, scores: one.prequential });
        }));
      }
    } catch { return; } finally { preqBusy = false; }
    if (stopped) return;
    rederive();
    keepFocus(main, () => views.tasks.render(false));
  }

  // ---- layout
  const ctx = { s, name, fetchScores };
  const views = {
    head: headView(ctx), cards: cardsView(ctx), envs: null, z: assignmentsView(ctx),
    preq: prequentialView(ctx), acc: matrixView(ctx), tasks: tasksView(ctx), live: liveView(ctx), history: historyView(ctx),
  };
  views.envs = environmentsView(ctx, { onShow: (rep) => views.tasks.showEnvironment(rep) });

  function layout() {
    const jump = (id, label) => h("button", { type: "button", class: "link", "data-jump": id, onclick: () => {
      const target = document.getElementById(id);
      target.scrollIntoView({ behavior: "smooth" });
      target.focus({ preventScroll: true });
    } }, label);
    fill(main, views.head.el,
      h("nav", { class: "jump", "aria-label": "Sections of this model" }, jump("sec-envs", "Environments"), jump("sec-z", "Assignments Zᵗ"),
        jump("sec-preq", "Prequential"), jump("sec-acc", "Accuracy matrix"), jump("sec-tasks", "Tasks"),
        jump("sec-history", "Labels and take-backs"), jump("sec-live", "Live")),
      views.cards.el, views.envs.el, views.z.el, views.preq.el, views.acc.el, views.tasks.el, views.history.el, views.live.el);
  }

  function renderAll() {
    if (stopped) return;
    keepFocus(main, () => {
      for (const v of [views.head, views.cards, views.envs, views.z, views.preq, views.acc, views.history]) v.render();
      views.tasks.renderEnvSelect();
      views.tasks.render();
      views.live.render();
    });
  }

  // ---- live
  const pending = new Map(); // key -> timer: bursts of one kind of event coalesce into one reload
  function soon(key, fn, ms = 200) {
    if (pending.has(key)) return;
    pending.set(key, setTimeout(async () => {
      pending.delete(key);
      if (stopped) return;
      try { await fn(); } catch (err) { if (err instanceof api.AuthError) route(); }
    }, ms));
  }

  function noteVersions(n) {
    if (n > 0) s.versionTimes.push([Date.now(), n]);
    s.versionTimes = s.versionTimes.filter(([t]) => Date.now() - t < 10 * 60000);
  }

  // Update events are applied in batches (one redraw per burst, not one per update).
  const queue = [];
  let needFull = false;
  function onUpdate(d) { // an UpdateEvent: {version, task_id, new_task, new_representative, n_representatives, prequential}
    if (d.version <= s.loadedVersion) return; // already shown
    if (d.version > s.loadedVersion + 1) needFull = true; // missed some: re-read every task
    noteVersions(d.version - s.loadedVersion);
    s.loadedVersion = d.version;
    queue.push(d);
    soon("update", applyUpdates, 150);
  }

  async function applyUpdates() {
    const batch = queue.splice(0);
    const ids = [...new Set(batch.map((d) => d.task_id))];
    await loadModel();
    await Promise.all([loadLabels(), loadEvaluation()]); // the timeline and the labels follow every version
    if (batch.some((d) => d.taken_back)) needFull = true; // a take-back rewrites every task (and may drop one)
    if (needFull || ids.length > 25) {
      needFull = false;
      await loadTasks();
    } else {
      const got = await Promise.all(ids.map((id) => api.get(`${base}/tasks/${encodeURIComponent(id)}`, { signal })
        .catch((err) => { if (err instanceof api.AuthError || err.name === "AbortError") throw err; return null; })));
      for (const task of got) {
        if (!task) continue;
        const i = s.tasks.findIndex((t) => t.task_id === task.task_id);
        if (i >= 0) s.tasks[i] = task; else s.tasks.push(task);
        s.preq.set(task.task_id, { version: task.version, scores: task.prequential });
      }
      rederive();
    }
    s.fresh = new Set(ids);
    for (const d of batch) views.live.push(d.version, () => describeUpdate(d, s.byId.get(d.task_id)));
    renderAll();
  }

  function onEvent({ event, data }) {
    if (stopped) return;
    if (event === "update") onUpdate(data);
    else if (event === "evaluation") {
      soon("evaluation", async () => {
        await loadEvaluation();
        rederive();
        keepFocus(main, () => { views.cards.render(); views.preq.render(); views.acc.render(); views.tasks.render(false); });
      }, 300);
    } else if (event === "reset") { // a ResetEvent: {version, reason}
      soon("reset", async () => {
        if (data.version === null) { views.live.push(null, () => [h("strong", {}, "the model is gone"), " (deleted)"]); views.live.render(); return; }
        await loadAll();
        const v = s.model.version;
        views.live.push(v, () => [h("strong", {}, "re-read"), ` at v${v}: the updates in between cannot be replayed (${data.reason})`]);
        renderAll();
      }, 100);
    }
  }

  async function poll() { // when the service has no event stream: the version, every 2 s
    if (stopped) return;
    try {
      const m = await api.get(base, { signal });
      if (m.version > s.loadedVersion) {
        const before = s.loadedVersion;
        // a task fed since: one with more batches (an update may also rewrite other tasks'
        // records, at its version: the scaling's warm-up, an evidence measured again)
        const batchesBefore = new Map((s.rows ?? []).map((r) => [r.task.task_id, r.task.n_batches]));
        noteVersions(m.version - before);
        s.model = m;
        await loadTasks();
        await loadEvaluation().catch(() => {});
        await loadLabels().catch(() => {});
        rederive();
        const changed = s.rows.filter((r) => r.task.version > before && r.task.n_batches !== batchesBefore.get(r.task.task_id))
          .sort((a, b) => b.task.version - a.task.version);
        s.fresh = new Set(changed.map((r) => r.task.task_id));
        for (const r of changed.slice(0, 20).reverse()) {
          const lu = r.task.last_update ?? {};
          const d = { version: r.task.version, task_id: r.task.task_id, new_task: r.task.n_batches === 1,
            new_representative: lu.new_representative ?? false, n_representatives: lu.n_representatives, prequential: null };
          views.live.push(d.version, () => describeUpdate(d, r));
        }
        s.loadedVersion = m.version;
        renderAll();
      } else if (m.version < s.loadedVersion) { // deleted and created again
        s.model = m; s.loadedVersion = m.version; await loadTasks(); renderAll();
      }
    } catch (err) {
      if (err.name === "AbortError") return;
      if (err instanceof api.AuthError) route();
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
        views.head.setLive(s.live);
        views.live.render();
      },
    });
  }

  guarded(async () => {
    await loadAll();
    if (stopped) return;
    layout();
    renderAll();
    startLive();
    timers.push(setInterval(async () => { await loadLatency().catch(() => {}); if (!stopped) views.cards.render(); }, 10000));
    let width = main.clientWidth;
    const onResize = () => { if (Math.abs(main.clientWidth - width) > 40) { width = main.clientWidth; views.z.render(); views.acc.render(); } };
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
