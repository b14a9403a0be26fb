// Views: the environments (each representative task with the tasks that lean on it) and the
// assignments Zᵗ heat-map. Both read a task's latest update (TaskOut.last_update: its
// assignment over the representatives, then the outlier slot, and its outlier probability e).
import { BLUES, heatmap, legend } from "./charts.js";
import { fill, h } from "./dom.js";
import { fmtInt, fmtNum } from "./format.js";

/** A task with what it leans on: its representative (itself for a representative) and weight. */
export function derive(task, reps) {
  const lu = task.last_update ?? {};
  const asg = lu.assignment ?? [];
  const named = asg.filter((a) => !a.outlier && a.representative !== null);
  const best = named.reduce((b, a) => (!b || a.weight > b.weight ? a : b), null);
  const outlier = asg.find((a) => a.outlier) ?? null;
  const isRep = reps.has(task.task_id);
  return {
    task, isRep,
    lean: isRep ? { rep: task.task_id, weight: null } : best ? { rep: best.representative, weight: best.weight } : null,
    e: typeof lu.outlier_probability === "number" ? lu.outlier_probability : outlier?.weight ?? null,
    weights: new Map(named.map((a) => [a.representative, a.weight])),
    outlierWeight: outlier?.weight ?? null,
  };
}

export function environmentsView(ctx, { onShow }) {
  const box = h("div", { id: "envs" });
  const el = h("section", { id: "sec-envs", tabindex: "-1" }, h("h2", {}, "Environments"),
    h("p", { class: "muted" }, "Each representative task with the tasks whose assignment Zᵗ leans on it most (their latest update)."), box);

  function card(title, rep, members, cls = null) {
    const shown = members.slice(0, 40);
    return h("article", { class: `env${cls ? ` ${cls}` : ""}`, "data-rep": rep ?? "" }, h("h3", {}, title),
      h("p", { class: "muted" }, `${fmtInt(members.length)} task${members.length === 1 ? "" : "s"}`),
      h("ul", { class: "chips" }, shown.map((r) => h("li", { class: r.isRep ? "rep" : null,
        title: r.isRep ? "the representative" : `weight ${fmtNum(r.lean?.weight)}` }, r.task.task_id)),
        members.length > shown.length ? h("li", { class: "more" }, `+ ${fmtInt(members.length - shown.length)} more`) : null),
      members.length ? h("button", { type: "button", class: "link env-show", "data-env": rep ?? "__none__",
        onclick: () => onShow(rep ?? "__none__") }, "Show in the task table") : null);
  }

  function render() {
    const reps = ctx.s.model.representatives;
    if (!reps.length) {
      fill(box, h("p", { class: "empty" }, ctx.s.rows.length ? "This estimator keeps no representatives." : "No task learned yet."));
      return;
    }
    const groups = new Map(reps.map((r) => [r, []]));
    const loose = [];
    for (const r of ctx.s.rows) {
      const rep = r.lean?.rep;
      if (rep !== undefined && groups.has(rep)) groups.get(rep).push(r); else loose.push(r);
    }
    fill(box, h("div", { class: "envs" },
      reps.map((r, k) => card([`Environment ${k + 1} · `, h("code", {}, r)], r, groups.get(r))),
      loose.length ? card("Not assigned", null, loose, "loose") : null));
  }
  return { el, render };
}

export function assignmentsView(ctx) {
  let order = "arrival";
  const box = h("div", { id: "zmap", class: "chart-wrap" });
  const select = h("select", { id: "z-order", onchange: (e) => { order = e.target.value; render(); } },
    h("option", { value: "arrival" }, "by arrival"), h("option", { value: "env" }, "by environment"));
  const el = h("section", { id: "sec-z", tabindex: "-1" }, h("h2", {}, "Assignments Zᵗ"),
    h("p", { class: "muted" }, "One column per task, one row per representative and the outlier slot (the probability e of opening a new "
      + "environment); darker is a larger weight; dashed: the representative did not exist yet at the task's latest update."),
    h("div", { class: "controls" }, h("label", { for: "z-order" }, "Order tasks"), select), box);

  function render() {
    const reps = ctx.s.model.representatives;
    const rows = ctx.s.rows;
    if (!reps.length || !rows.some((r) => r.weights.size || r.outlierWeight !== null)) {
      fill(box, h("p", { class: "empty" }, `No assignments yet${rows.length ? " (this estimator has no Zᵗ)" : ""}.`));
      return;
    }
    let cols = rows;
    if (order === "env") {
      const idx = new Map(reps.map((r, k) => [r, k]));
      const at = (r) => idx.get(r.lean?.rep) ?? 1e9;
      cols = rows.map((r, i) => [r, i]).sort((a, b) => (at(a[0]) - at(b[0])) || a[1] - b[1]).map(([r]) => r);
    }
    const avail = Math.max(240, (box.clientWidth || 800) - 160);
    const w = Math.max(2, Math.min(32, Math.floor(avail / cols.length)));
    const labelled = w >= 12;
    fill(box, heatmap({
      rows: [...reps.map((r, k) => `${k + 1}: ${r}`), "new environment (e)"], cols: cols.map((r) => r.task.task_id),
      cell: { w, h: 22 }, rowHeader: 150, colHeader: labelled ? 70 : 0, padRight: labelled ? 50 : 4,
      label: `Assignments Z^t of ${cols.length} tasks over ${reps.length} representatives`,
      value: (i, j) => (i === reps.length ? cols[j].outlierWeight ?? cols[j].e : cols[j].weights.get(reps[i]) ?? null),
      title: (i, j, v) => `${cols[j].task.task_id} → ${i === reps.length ? "new environment (outlier slot)" : reps[i]}: ${fmtNum(v)}`,
      voidTitle: (i, j) => `${cols[j].task.task_id}: ${reps[i]} was not a representative yet at its latest update`,
      scale: (v) => v, stops: BLUES,
    }), h("div", { class: "axis-note" }, labelled ? "" : `tasks 1 … ${fmtInt(cols.length)} ${order === "env" ? "grouped by environment"
      : "in order of arrival"} (hover a cell for its task)`), legend(BLUES, "0", "1", "weight zₖ"));
  }
  return { el, render };
}
