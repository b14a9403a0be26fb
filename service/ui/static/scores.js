// Views: the prequential error over versions and the accuracy matrix with the transfer
// figures, both from GET /models/{name}/evaluation (EvaluationOut).
import { VIRIDIS, heatmap, legend, lineChart } from "./charts.js";
import { fill, h } from "./dom.js";
import { fmtNum, metricName, primary } from "./format.js";

/** Why there is nothing to draw when the evaluation could not be read. */
function missing(ctx, what) {
  if (ctx.s.evaluation !== null) return "";
  return ctx.s.evaluationError ? `: GET …/evaluation failed (${ctx.s.evaluationError})` : `: this service does not report ${what} (no GET …/evaluation)`;
}

export function prequentialView(ctx) {
  const box = h("div", { id: "preq", class: "chart-wrap" });
  const el = h("section", { id: "sec-preq", tabindex: "-1" }, h("h2", {}, "Prequential error over versions"),
    h("p", { class: "muted" }, "Each batch is predicted before it is learned (test-then-train), beside the baseline."), box);

  function render() {
    // EvaluationOut.prequential: [{version, task_id, new_task, batch: Scores | null, overall: Scores | null}]
    const points = (ctx.s.evaluation?.prequential ?? []).filter((p) => p.overall !== null).map((p) => [p.version, primary(p.overall)]);
    if (!points.length) {
      fill(box, h("p", { class: "empty" }, `No data yet${missing(ctx, "prequential scores")}.`));
      return;
    }
    const metric = metricName(points[0][1].metric);
    const series = [
      { name: `${ctx.s.model.estimator}, cumulative`, cls: "s-model", points: points.map(([v, p]) => [v, p.model]) },
      { name: "baseline (each task's own single-task model), cumulative", cls: "s-base", points: points.map(([v, p]) => [v, p.baseline]) },
    ];
    fill(box, lineChart({ series, xLabel: "version", yLabel: `prequential ${metric}`, label: `Prequential ${metric} over versions, beside the baseline` }),
      h("ul", { class: "keys" }, series.map((x) => h("li", {}, h("span", { class: `swatch ${x.cls}`, "aria-hidden": "true" }), x.name)),
        h("li", { class: "muted" }, "lower is better")));
  }
  return { el, render };
}

export function matrixView(ctx) {
  const box = h("div", { id: "acc" });
  const el = h("section", { id: "sec-acc", tabindex: "-1" }, h("h2", {}, "Accuracy matrix"),
    h("p", { class: "muted" }, "Held-out score of every task (columns) after each update (rows), with forgetting and transfer."), box);
  const figure = (label, value) => h("div", { class: "card small" }, h("h3", {}, label), h("p", { class: "big" }, fmtNum(value)));

  function render() {
    const ev = ctx.s.evaluation;
    const am = ev?.accuracy_matrix; // {metric, higher_is_better, tasks, rows: [{version, task_id, scores, baseline}]}
    if (!am?.rows.length) {
      fill(box, h("p", { class: "empty" }, `No data yet${missing(ctx, "held-out scores")}.`));
      return;
    }
    const { metric, tasks, rows } = am;
    const vals = rows.flatMap((r) => r.scores.filter((v) => v !== null));
    const lo = Math.min(...vals), hi = Math.max(...vals);
    const lowBetter = !am.higher_is_better;
    const scale = (v) => (hi > lo ? (lowBetter ? (hi - v) / (hi - lo) : (v - lo) / (hi - lo)) : 0.5);
    const cw = Math.max(3, Math.min(40, Math.floor(((box.clientWidth || 800) - 170) / Math.max(1, tasks.length))));
    const ch = rows.length > 150 ? 3 : rows.length > 60 ? 8 : 18;
    const name = metricName(metric);
    fill(box,
      h("div", { class: "cards" }, figure("Forgetting", ev.forgetting), figure("Backward transfer", ev.backward_transfer),
        figure("Forward transfer", ev.forward_transfer)),
      h("div", { class: "chart-wrap" }, heatmap({
        rows: rows.map((r) => (ch >= 14 ? `v${r.version} · ${r.task_id}` : "")), cols: tasks,
        cell: { w: cw, h: ch }, rowHeader: ch >= 14 ? 160 : 20, colHeader: cw >= 12 ? 70 : 0, padRight: cw >= 12 ? 50 : 4, showValues: true,
        label: `Accuracy matrix: ${metric} of ${tasks.length} tasks after ${rows.length} updates`,
        value: (i, j) => rows[i].scores[j],
        title: (i, j, v) => {
          const b = rows[i].baseline[j];
          return `after v${rows[i].version} (new task ${rows[i].task_id}), task ${tasks[j]}: ${name} ${fmtNum(v)}${b !== null ? ` (baseline ${fmtNum(b)})` : ""}`;
        },
        scale, stops: VIRIDIS,
        voidTitle: (i, j) => `after v${rows[i].version}: task ${tasks[j]} not learned yet`,
      })),
      legend(VIRIDIS, fmtNum(lowBetter ? hi : lo), fmtNum(lowBetter ? lo : hi), `${name} (${lowBetter ? "lower" : "higher"} is better: brighter is better)`),
      h("p", { class: "muted" }, "Forgetting: how much tasks got worse since their best (positive: forgot). Backward transfer: how later "
        + "tasks changed earlier ones (positive: improved them). Forward transfer: a new task's score right after learning it against "
        + "its own single-task model (positive: the shared library helped)."));
  }
  return { el, render };
}
