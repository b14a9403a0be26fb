// Numbers, times and scores as the page shows them. Scores are the API's Scores objects
// (fcl3/schemas.py): regression {n, rmse, mae, baseline_rmse, baseline_mae}; classification
// {n, log_loss, accuracy, auc, baseline_log_loss, baseline_accuracy, baseline_auc}.
import { h } from "./dom.js";

const intFmt = new Intl.NumberFormat("en");
export const fmtInt = (v) => (Number.isFinite(v) ? intFmt.format(v) : "—");

export function fmtNum(v, digits = 3) {
  if (typeof v !== "number" || !Number.isFinite(v)) return "—";
  if (v !== 0 && (Math.abs(v) >= 1e5 || Math.abs(v) < 1e-3)) return v.toExponential(2);
  return (+v.toPrecision(digits)).toString();
}

/** A <time> saying how long ago an RFC 3339 time was. */
export function ago(iso) {
  const s = (Date.now() - Date.parse(iso)) / 1000;
  if (!iso || !Number.isFinite(s)) return "—";
  const text = s < 5 ? "just now" : s < 60 ? `${Math.round(s)} s ago` : s < 3600 ? `${Math.round(s / 60)} min ago`
    : s < 86400 ? `${Math.round(s / 3600)} h ago` : `${Math.round(s / 86400)} d ago`;
  return h("time", { datetime: iso, title: new Date(iso).toISOString() }, text);
}

export const metricName = (m) => ({ rmse: "RMSE", log_loss: "log loss", mae: "MAE", accuracy: "accuracy", auc: "AUC" })[m] ?? m;

/** The primary error metric of a Scores object (RMSE or log loss: lower is better) beside its
 * baseline: {metric, model, baseline, n}; null for no scores. */
export function primary(scores) {
  if (!scores) return null;
  const metric = "rmse" in scores ? "rmse" : "log_loss";
  return { metric, model: scores[metric], baseline: scores[`baseline_${metric}`], n: scores.n };
}

/** A primary score (see primary) as "0.41 vs 0.52 ▲ better". */
export function scoreView(p) {
  if (!p || typeof p.model !== "number") return h("span", { class: "muted" }, "no data yet");
  const tip = `${metricName(p.metric)}${Number.isFinite(p.n) ? ` over ${p.n} rows` : ""}; the baseline is each task's own single-task model`;
  const out = [h("span", { class: "score", title: tip }, fmtNum(p.model))];
  if (typeof p.baseline === "number") {
    out.push(" ", h("span", { class: "vs" }, `vs ${fmtNum(p.baseline)}`));
    if (p.model < p.baseline) out.push(" ", h("span", { class: "good", title: "better than the baseline" }, "▲ better"));
    else if (p.model > p.baseline) out.push(" ", h("span", { class: "bad", title: "worse than the baseline" }, "▼ worse"));
  }
  return out;
}

/** Every figure of a Scores object, as "rmse 0.41 · mae 0.3 · …". */
export function scoresText(scores) {
  return Object.entries(scores).filter(([, v]) => typeof v === "number").map(([k, v]) => `${k.replaceAll("_", " ")} ${fmtNum(v)}`).join(" · ");
}
