// View: the feed of the model's updates as they are committed (the event stream, or polling).
import { fill, h } from "./dom.js";
import { primary, scoreView } from "./format.js";

/** One committed update (an UpdateEvent, or the same fields read from a task) as feed text. */
export function describeUpdate(d, row) {
  if (d.taken_back) {
    const t = d.taken_back;
    return [h("strong", {}, `v${d.version}`), " took back batch ", h("strong", {}, `v${t.batch_version}`), " of task ",
      h("code", {}, d.task_id), ` · ${t.n_samples} ${t.n_samples === 1 ? "row" : "rows"}`, t.task_removed ? " · the task went with it" : "",
      ` · ${d.n_representatives} representatives`];
  }
  const env = d.new_representative ? "opened a new environment" : row?.isRep ? "a representative"
    : row?.lean ? ["leans on ", h("code", {}, row.lean.rep)] : null;
  return [h("strong", {}, `v${d.version}`), " task ", h("code", {}, d.task_id),
    ` · ${d.new_task ? "new task" : d.source === "labels" ? "labels that arrived later" : "more data"}`,
    env ? [" · ", env] : null, ` · ${d.n_representatives} representatives`,
    d.prequential ? [" · prequential ", scoreView(primary(d.prequential))] : null];
}

export function liveView(ctx) {
  const feed = [];
  const list = h("ol", { class: "feed", id: "feed", "aria-live": "polite" });
  const help = h("p", { class: "muted", id: "live-help" }, "Updates appear here as they are committed, without reloading.");
  const el = h("section", { id: "sec-live", tabindex: "-1" }, h("h2", {}, "Live updates"), help, list);

  /** Add an entry: parts() builds its content (called at each redraw). */
  function push(version, parts) {
    feed.unshift({ version, parts, when: new Date().toLocaleTimeString() });
    feed.length = Math.min(feed.length, 100);
  }

  function render() {
    fill(list, feed.length ? feed.map((f) => h("li", { "data-version": f.version ?? "" }, h("span", { class: "when" }, f.when), " ", f.parts()))
      : h("li", { class: "empty" }, "Nothing yet since the page opened."));
    help.textContent = ctx.s.live === "polling"
      ? "Updates appear here as they are committed (checked every 2 s: this service has no event stream), without reloading."
      : "Updates appear here as they are committed (the model's event stream), without reloading.";
  }
  return { el, render, push };
}
