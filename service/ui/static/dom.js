// Building the page: elements with their attributes and children. Text always goes in as text
// (a text node, never parsed as markup), so no value from the API can become HTML.

const SVG_NS = "http://www.w3.org/2000/svg";

/** Append children (nodes, strings, numbers, nested arrays; null/undefined/false skipped). */
export function append(el, ...children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  return append(el, children);
}

/** An HTML element: h("td", {class: "num", "data-col": "rows"}, "12"). */
export const h = (tag, attrs, ...children) => build(document.createElement(tag), attrs, children);

/** An SVG element. */
export const svg = (tag, attrs, ...children) => build(document.createElementNS(SVG_NS, tag), attrs, children);

/** Replace an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** Redraw with fn() inside root and give the focus back to the control that had it (redraws
 * replace elements): found again by its id or its data-* key. */
export function keepFocus(root, fn) {
  const a = document.activeElement;
  let sel = null;
  if (a && a !== document.body && root.contains(a)) {
    const tag = a.tagName.toLowerCase();
    if (a.id) sel = `#${CSS.escape(a.id)}`;
    else {
      for (const key of ["page", "env", "task", "key"]) {
        if (a.dataset[key] !== undefined) { sel = `${tag}[data-${key}="${CSS.escape(a.dataset[key])}"]`; break; }
      }
      if (!sel && a.getAttribute("href")) sel = `a[href="${CSS.escape(a.getAttribute("href"))}"]`;
    }
  }
  fn();
  if (sel && !document.contains(a)) document.querySelector(sel)?.focus({ preventScroll: true });
}
