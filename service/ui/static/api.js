// Reads of the FCL3 API, with the user's key as `Authorization: Bearer <key>` (service/security.py).
// Only GET requests, only to this page's own origin (relative URLs): the dashboard never writes.

const STORE = "fcl3.dashboard.key";

export class AuthError extends Error {
  constructor(message) { super(message); this.name = "AuthError"; }
}

export class ApiError extends Error {
  constructor(status, message) { super(message); this.name = "ApiError"; this.status = status; }
}

let key = sessionStorage.getItem(STORE) ?? localStorage.getItem(STORE) ?? null;

export const hasKey = () => key !== null;

/** The key in use and whether it is remembered on this device (to put it back, see restoreKey). */
export const saveKey = () => ({ key, remember: localStorage.getItem(STORE) !== null });
export function restoreKey(saved) {
  if (saved.key === null) forgetKey(); else setKey(saved.key, saved.remember);
}

export function setKey(value, remember) {
  key = value;
  sessionStorage.setItem(STORE, value);
  if (remember) localStorage.setItem(STORE, value); else localStorage.removeItem(STORE);
}

export function forgetKey() {
  key = null;
  sessionStorage.removeItem(STORE);
  localStorage.removeItem(STORE);
}

function headers(accept) {
  const h = { Accept: accept };
  if (key !== null) h.Authorization = `Bearer ${key}`;
  return h;
}

async function detail(response) {
  try {
    const body = await response.json();
    if (typeof body.detail === "string") return body.detail;
    if (Array.isArray(body.detail)) return body.detail.map((d) => d.msg ?? JSON.stringify(d)).join("; ");
    return JSON.stringify(body);
  } catch {
    return response.statusText || `HTTP ${response.status}`;
  }
}

/** GET a JSON route (a path relative to the page, e.g. "models?limit=100"). */
export async function get(path, { signal, optional = false } = {}) {
  let response;
  try {
    response = await fetch(path, { headers: headers("application/json"), signal, cache: "no-store" });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "the service does not answer (network error)");
  }
  if (response.status === 401) throw new AuthError(await detail(response));
  if (optional && (response.status === 404 || response.status === 405)) return null;
  if (!response.ok) throw new ApiError(response.status, await detail(response));
  return response.json();
}

/** GET a text route (e.g. /metrics); null when it is missing or refuses. */
export async function getText(path, { signal } = {}) {
  try {
    const response = await fetch(path, { headers: headers("text/plain"), signal, cache: "no-store" });
    return response.ok ? await response.text() : null;
  } catch {
    return null;
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Follow a server-sent event stream with fetch (EventSource cannot send an Authorization
 * header). Calls onEvent({event, id, data}) per event and onState(state) with "connecting",
 * "live", "reconnecting", "unsupported" (no such route: 404/405) or "auth" (401).
 * Reconnects with Last-Event-ID. Returns {stop()}.
 */
export function followEvents(path, { onEvent, onState, lastEventId = null }) {
  let stopped = false;
  let controller = null;
  let lastId = lastEventId;

  async function run() {
    let delay = 1000;
    while (!stopped) {
      controller = new AbortController();
      onState("connecting");
      try {
        const h = headers("text/event-stream");
        if (lastId !== null) h["Last-Event-ID"] = String(lastId);
        const response = await fetch(path, { headers: h, signal: controller.signal, cache: "no-store" });
        if (response.status === 404 || response.status === 405) { onState("unsupported"); return; }
        if (response.status === 401) { onState("auth"); return; }
        if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
        onState("live");
        delay = 1000;
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        let ev = { event: "message", id: null, data: [] };
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          for (;;) {
            const m = /\r\n|\r|\n/.exec(buffer);
            if (!m) break;
            if (m[0] === "\r" && m.index === buffer.length - 1) break; // maybe half of \r\n: wait
            const line = buffer.slice(0, m.index);
            buffer = buffer.slice(m.index + m[0].length);
            if (line === "") {
              if (ev.data.length) {
                if (ev.id !== null) lastId = ev.id;
                let data = ev.data.join("\n");
                try { data = JSON.parse(data); } catch { /* keep the text */ }
                onEvent({ event: ev.event, id: ev.id, data });
              }
              ev = { event: "message", id: null, data: [] };
            } else if (line[0] !== ":") {
              const colon = line.indexOf(":");
              const field = colon < 0 ? line : line.slice(0, colon);
              let val = colon < 0 ? "" : line.slice(colon + 1);
              if (val[0] === " ") val = val.slice(1);
              if (field === "data") ev.data.push(val);
              else if (field === "event") ev.event = val || "message";
              else if (field === "id") ev.id = val;
              else if (field === "retry" && /^\d+$/.test(val)) delay = Number(val);
            }
          }
        }
      } catch (err) {
        if (stopped) return;
      }
      if (stopped) return;
      onState("reconnecting");
      await sleep(delay);
      delay = Math.min(delay * 2, 15000);
    }
  }

  run();
  return {
    stop() { stopped = true; controller?.abort(); },
    get lastId() { return lastId; },
  };
}
