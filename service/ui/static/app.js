// The FCL3 dashboard: routes #/ (models.js) and #/models/<name> (model.js), and shows what
// stops a view (no key, an error). Plain ES modules; every byte comes from this service
// (service/api/routes/ui.py).
import * as api from "./api.js";
import { fill, h } from "./dom.js";
import { initKey, promptForKey, updateKeybox } from "./key.js";
import { modelView } from "./model.js";
import { modelsView } from "./models.js";

const main = document.getElementById("main");
let current = null; // the view on screen: {stop()}

/** Run a view's loader; on 401 ask for a key and start the view again. */
async function guarded(load) {
  try {
    await load();
  } catch (err) {
    if (err.name === "AbortError") return;
    if (err instanceof api.AuthError) {
      const ask = h("button", { type: "button", class: "primary", id: "ask-key" }, "Enter a read key");
      ask.addEventListener("click", async () => { if (await promptForKey()) route(); });
      fill(main, h("section", { class: "notice", role: "status" }, h("h1", {}, "API key needed"),
        h("p", {}, `This service asks for an API key to read (${err.message.replaceAll("`", "")}).`), h("p", {}, ask)));
      if (await promptForKey(err.message)) route();
      return;
    }
    fill(main, h("section", { class: "notice error", role: "alert" }, h("h1", {}, "Cannot load"), h("p", {}, err.message),
      h("p", {}, h("button", { type: "button", id: "retry", onclick: route }, "Retry"))));
  }
}

function route() {
  current?.stop();
  current = null;
  updateKeybox();
  const m = /^#\/models\/([^/]+)\/?$/.exec(location.hash);
  const app = { main, guarded, route };
  current = m ? modelView(app, decodeURIComponent(m[1])) : modelsView(app);
}

initKey(route);
window.addEventListener("hashchange", () => { if (location.hash === "" || location.hash.startsWith("#/")) route(); });
route();
