// The API key: the dialog that asks for a read key, checks it with one read, and the
// "Change key" / "Forget" controls of the page's header (the markup is in index.html).
import * as api from "./api.js";

const dialog = document.getElementById("key-dialog");
const form = document.getElementById("key-form");
const input = document.getElementById("key-input");
const remember = document.getElementById("key-remember");
const error = document.getElementById("key-error");
const submit = document.getElementById("key-submit");
let resolveKey = null;

export function updateKeybox() {
  document.getElementById("keybox").hidden = !api.hasKey();
}

/** Ask for a key; resolves true once a key the service accepts is set, false on cancel. */
export function promptForKey(reason) {
  if (resolveKey) return new Promise((r) => { const prev = resolveKey; resolveKey = (v) => { prev(v); r(v); }; });
  error.hidden = true;
  if (reason && api.hasKey()) {
    error.textContent = `The stored key was refused: ${reason}. Enter another key.`;
    error.hidden = false;
  }
  input.value = "";
  dialog.showModal();
  input.focus();
  return new Promise((resolve) => { resolveKey = resolve; });
}

function finish(ok) {
  if (dialog.open) dialog.close();
  const r = resolveKey;
  resolveKey = null;
  updateKeybox();
  r?.(ok);
}

/** Wire the dialog and the header's controls; onChange() runs when the key in use changed. */
export function initKey(onChange) {
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const value = input.value.trim();
    if (!value) return;
    submit.disabled = true;
    error.hidden = true;
    const before = api.saveKey();
    api.setKey(value, remember.checked);
    try {
      await api.get("models?limit=1");
      finish(true);
    } catch (err) {
      api.restoreKey(before); // a refused key never replaces the one in use
      error.textContent = err instanceof api.AuthError
        ? `This key was refused by the service (${err.message}). Use one of its read keys (API_READ_KEYS) or write keys.`
        : `Could not check the key: ${err.message}.`;
      error.hidden = false;
      input.select();
    } finally {
      submit.disabled = false;
    }
  });
  document.getElementById("key-cancel").addEventListener("click", () => finish(false));
  dialog.addEventListener("cancel", (e) => { e.preventDefault(); finish(false); });
  document.getElementById("key-forget").addEventListener("click", () => { api.forgetKey(); updateKeybox(); onChange(); });
  document.getElementById("key-change").addEventListener("click", async () => { if (await promptForKey()) onChange(); });
}
