// tidal-console's web UI: three pages behind hash routes, all data from /api/v1.
import { api, ApiError, setToken, token } from "./api.js";
import { el } from "./ui.js";
import { overview } from "./overview.js";
import { policyPage } from "./policy.js";
import { leaveMonitoring, monitoringPage } from "./monitoring.js";

const PAGES = { overview, policy: policyPage, monitoring: monitoringPage };
let me = null;

function loginForm(root, message) {
  const area = el("textarea", { id: "token", "aria-label": "bearer token", placeholder: "eyJhbGciOi…" });
  const form = el("form", { class: "card login", id: "login" },
    el("h1", {}, "Sign in with a Kubernetes token"),
    el("p", { class: "muted" }, "Paste a bearer token (for example from `kubectl create token <serviceaccount>`). "
      + "The console asks the API server who you are and what you may do; the token stays in this browser tab."),
    message ? el("p", { class: "errors" }, message) : null,
    area, el("div", { class: "actions" }, el("button", { type: "submit" }, "Sign in")));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); setToken(area.value); me = null; render(); });
  root.replaceChildren(form);
}

async function render() {
  const root = document.getElementById("page");
  const name = (location.hash.replace(/^#\//, "").split("?")[0]) || "overview";
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === name);
  leaveMonitoring();
  if (!token()) return loginForm(root);
  try {
    me ??= await api("GET", "/whoami");
    document.getElementById("whoami").replaceChildren(`${me.username}`,
      el("button", { type: "button", class: "secondary", style: "margin-left:8px;padding:2px 8px",
        onclick: () => { setToken(null); me = null; render(); } }, "Sign out"));
    root.replaceChildren();
    root.dataset.page = name;
    root.dataset.ready = "false";
    await (PAGES[name] || overview)(root, me);
    root.dataset.ready = "true";
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) { setToken(null); me = null; return loginForm(root, err.message); }
    root.append(el("p", { class: "errors", role: "alert" }, err.message));
    root.dataset.ready = "error";
  }
}

window.addEventListener("hashchange", render);
render();
