// SVG charts built as elements: heat-maps and line charts (no library, no network).
import { h, svg } from "./dom.js";

function lerpColor(stops, t) {
  t = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 0));
  const x = t * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(x));
  const f = x - i;
  const a = stops[i], b = stops[i + 1];
  const c = [0, 1, 2].map((k) => Math.round(a[k] + (b[k] - a[k]) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

const hex = (s) => [1, 3, 5].map((i) => parseInt(s.slice(i, i + 2), 16));
/** White to dark blue: a weight of 0 is pale, 1 is dark (the paper's Z^t figure). */
export const BLUES = ["#f3f6fb", "#c6dbef", "#6baed6", "#2171b5", "#08306b"].map(hex);
/** Viridis (perceptually uniform, colour-blind safe). */
export const VIRIDIS = ["#440154", "#3b528b", "#21918c", "#5ec962", "#fde725"].map(hex);

export const color = (stops, t) => lerpColor(stops, t);

/** WCAG 2 relative luminance of "rgb(r,g,b)". */
function luminance(rgb) {
  const [r, g, b] = rgb.match(/\d+/g).map((c) => {
    const s = Number(c) / 255;
    return s <= 0.04045 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
  });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

/** Black or white text for a cell of this colour: whichever contrasts more (WCAG ratio; at
 * least 4.58:1 on any fill). The value text must not be restyled by CSS (style.css). */
export function inkFor(rgb) {
  const L = luminance(rgb);
  return (L + 0.05) / 0.05 >= 1.05 / (L + 0.05) ? "#000" : "#fff";
}

/**
 * A heat-map (an <svg>).
 * rows/cols: label arrays; value(i, j): number or null (null: no cell drawn);
 * title(i, j, v): the tooltip; voidTitle(i, j): the tooltip of a null value (drawn dashed; omitted: nothing drawn);
 * scale(v) -> [0, 1]; cell: {w, h}.
 */
export function heatmap({ rows, cols, value, title, scale, stops, cell, label, rowHeader = 140, colHeader = 0,
                          showValues = false, fmt = (v) => v.toFixed(2), colLabelEvery = 0, voidTitle = null, padRight = 4 }) {
  const W = rowHeader + cols.length * cell.w + padRight;
  const H = colHeader + rows.length * cell.h + 4;
  const out = svg("svg", { class: "heatmap", role: "img", "aria-label": label, width: W, height: H, viewBox: `0 0 ${W} ${H}` });
  const parts = [];
  rows.forEach((r, i) => {
    const y = colHeader + i * cell.h + cell.h / 2;
    parts.push(svg("text", { class: "rowlabel", x: rowHeader - 6, y, "text-anchor": "end", "dominant-baseline": "middle" }, r));
  });
  if (colHeader > 0) {
    const every = colLabelEvery || 1;
    cols.forEach((c, j) => {
      if (j % every) return;
      const x = rowHeader + j * cell.w + cell.w / 2;
      parts.push(svg("text", { class: "collabel", transform: `translate(${x},${colHeader - 6}) rotate(-55)`, "text-anchor": "start" }, c));
    });
  }
  for (let i = 0; i < rows.length; i++) {
    for (let j = 0; j < cols.length; j++) {
      const v = value(i, j);
      const x = rowHeader + j * cell.w, y = colHeader + i * cell.h;
      if (v === null && voidTitle) { // a cell that has no value (yet): dashed outline
        parts.push(svg("rect", { class: "void", x, y, width: cell.w, height: cell.h }, svg("title", {}, voidTitle(i, j))));
        continue;
      }
      if (typeof v !== "number" || !Number.isFinite(v)) continue;
      const fill = lerpColor(stops, scale(v));
      parts.push(svg("rect", { class: "cell", x, y, width: cell.w, height: cell.h, fill, "data-row": i, "data-col": j },
        svg("title", {}, title(i, j, v))));
      if (showValues && cell.w >= 34 && cell.h >= 16) {
        parts.push(svg("text", { class: "cellvalue", x: x + cell.w / 2, y: y + cell.h / 2, "text-anchor": "middle",
          "dominant-baseline": "middle", fill: inkFor(fill) }, fmt(v)));
      }
    }
  }
  out.append(...parts);
  return out;
}

/** A colour legend: a gradient bar with its end labels. */
export function legend(stops, lo, hi, caption) {
  const n = 24;
  const bar = svg("svg", { width: n * 8, height: 12, "aria-hidden": "true" },
    Array.from({ length: n }, (_, i) => svg("rect", { x: i * 8, y: 0, width: 8.5, height: 12, fill: lerpColor(stops, i / (n - 1)) })));
  return h("div", { class: "legend" }, h("span", {}, lo), bar, h("span", {}, hi), caption ? h("span", { class: "muted" }, caption) : null);
}

function niceTicks(lo, hi, n = 5) {
  if (!(hi > lo)) { const d = Math.abs(lo) || 1; lo -= d * 0.1; hi += d * 0.1; }
  const step0 = (hi - lo) / n;
  const mag = 10 ** Math.floor(Math.log10(step0));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= step0) ?? step0;
  const start = Math.floor(lo / step) * step, end = Math.ceil(hi / step) * step;
  const ticks = [];
  for (let v = start; v <= end + step / 2; v += step) ticks.push(+v.toPrecision(12));
  return ticks;
}

/**
 * A line chart (an <svg>, or null without a point). series: [{name, cls, points: [[x, y], ...]}].
 */
export function lineChart({ series, xLabel, yLabel, label, width = 640, height = 260 }) {
  const finite = ([x, y]) => Number.isFinite(x) && Number.isFinite(y);
  const pts = series.flatMap((s) => s.points).filter(finite);
  if (!pts.length) return null;
  const m = { l: 56, r: 12, t: 12, b: 40 };
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  const xt = niceTicks(Math.min(...xs), Math.max(...xs), 6), yt = niceTicks(Math.min(...ys), Math.max(...ys), 5);
  const [x0, x1, y0, y1] = [xt[0], xt.at(-1), yt[0], yt.at(-1)];
  const X = (x) => m.l + ((x - x0) / (x1 - x0 || 1)) * (width - m.l - m.r);
  const Y = (y) => height - m.b - ((y - y0) / (y1 - y0 || 1)) * (height - m.t - m.b);
  const fmt = (v) => (Math.abs(v) >= 1000 ? v.toExponential(1) : +v.toPrecision(4)).toString();
  const out = svg("svg", { class: "linechart", role: "img", "aria-label": label, viewBox: `0 0 ${width} ${height}`,
    preserveAspectRatio: "xMinYMin meet" });
  yt.forEach((v) => out.append(svg("line", { class: "grid", x1: m.l, x2: width - m.r, y1: Y(v), y2: Y(v) }),
    svg("text", { class: "tick", x: m.l - 6, y: Y(v), "text-anchor": "end", "dominant-baseline": "middle" }, fmt(v))));
  xt.forEach((v) => out.append(svg("text", { class: "tick", x: X(v), y: height - m.b + 16, "text-anchor": "middle" }, fmt(v))));
  out.append(
    svg("line", { class: "axis", x1: m.l, x2: width - m.r, y1: height - m.b, y2: height - m.b }),
    svg("text", { class: "axislabel", x: (m.l + width - m.r) / 2, y: height - 4, "text-anchor": "middle" }, xLabel),
    svg("text", { class: "axislabel", transform: `translate(12,${(m.t + height - m.b) / 2}) rotate(-90)`, "text-anchor": "middle" }, yLabel));
  for (const s of series) {
    const p = s.points.filter(finite);
    if (!p.length) continue;
    const d = p.map(([x, y], i) => `${i ? "L" : "M"}${X(x).toFixed(1)},${Y(y).toFixed(1)}`).join("");
    out.append(svg("path", { class: `series ${s.cls}`, d }, svg("title", {}, s.name)));
    if (p.length <= 60) {
      for (const [x, y] of p) {
        out.append(svg("circle", { class: `dot ${s.cls}`, cx: X(x), cy: Y(y), r: 2.5 }, svg("title", {}, `${s.name}: ${fmt(y)} at ${xLabel} ${x}`)));
      }
    }
  }
  return out;
}
