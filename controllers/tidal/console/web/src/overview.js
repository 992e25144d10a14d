import { api, ApiError } from "./api.js";
import { el, fill, formatValue } from "./ui.js";

// The workflow comes from the API (GET /workflow): the snippets are what the roles write, the
// example a BE Job the admission webhook accepts; a test keeps both in step with the sources.
function stepCard(step, i) {
  const title = step.link ? el("a", { href: step.link }, step.title) : step.title;
  return el("div", { class: "card step", "data-step": String(i + 1) },
    el("h3", {}, el("span", { class: "n" }, String(i + 1)), title),
    el("ul", {}, step.text.map((t) => el("li", {}, t))),
    step.snippets.map((s) => el("details", { class: "snippet", "data-snippet": s.source, open: s.source === "example" },
      el("summary", {}, s.title),
      el("pre", {}, el("code", { class: `language-${s.language}` }, s.text)))),
    step.docs ? el("p", { class: "muted docs" }, "More: ", el("code", {}, step.docs), " in Tidal's documentation") : null);
}

// At 0, the oversell master's reason is written under the figures; its notes (the cause: no
// report, a stale one, a node not oversold...) once under the node's name.
function batchCell(batch, key, unit) {
  const a = batch.allocatable[key], r = batch.requested[key];
  const why = a === 0 ? batch.why[key] : null;
  return el("td", { class: a === 0 ? "errors" : null,
    title: a === 0 ? [why || "no batch resources published on this node", ...batch.why.notes].join("\n") : null },
    `${formatValue(r, unit)} of ${formatValue(a, unit)}`,
    why ? el("div", { class: "muted why" }, why) : null);
}

function nodesTable(nodes) {
  if (!nodes.length) return el("p", { class: "muted" }, "No nodes.");
  return el("table", { id: "overview-nodes" },
    el("thead", {}, el("tr", {}, ["Node", "Mode", "Status", "Batch CPU requested of allocatable",
      "Batch memory requested of allocatable", "BE pods running / starting", "Agent", "Problems"].map((h) => el("th", {}, h)))),
    el("tbody", {}, nodes.map((n) => el("tr", { "data-node": n.name },
      el("td", {}, el("strong", {}, n.name),
        n.batch.allocatable.cpuMillicores === 0 || n.batch.allocatable.memoryBytes === 0
          ? n.batch.why.notes.map((note) => el("div", { class: "muted why-notes" }, note)) : null),
      el("td", {}, n.mode),
      el("td", {}, n.ready ? "Ready" : el("span", { class: "errors" }, "NotReady"),
        n.unschedulable ? el("div", { class: "muted" }, "cordoned") : null,
        n.evicting ? el("div", { class: "errors" }, "evicting offline pods (taint)") : null),
      batchCell(n.batch, "cpuMillicores", "millicores"),
      batchCell(n.batch, "memoryBytes", "bytes"),
      el("td", {}, `${n.bePods.running} / ${n.bePods.starting}`),
      el("td", {}, !n.agentReported ? el("span", { class: n.mode === "off" ? "muted" : "errors" }, "not reported")
        : n.replayed ? el("span", { class: "chip replayed", title: "NodeProfile written by tidal-agent replay" }, "replayed") : "reported"),
      el("td", { class: n.problems.length ? "errors" : "muted" }, n.problems.length ? n.problems.map((p) => el("div", {}, p)) : "none")))));
}

function pendingTable(be, reasons) {
  const byReason = Object.entries(be.pendingByReason);
  return [
    el("p", { id: "be-summary" }, `BE pods: ${be.running} running, ${be.pending} pending`
      + (byReason.length ? ` (${byReason.map(([r, n]) => `${r} ${n}`).join(", ")})` : "") + "."),
    be.pendingPods.length ? el("table", { id: "pending-pods" },
      el("thead", {}, el("tr", {}, ["Pod", "Why pending", "Details"].map((h) => el("th", {}, h)))),
      el("tbody", {}, be.pendingPods.map((p) => el("tr", { "data-pod": `${p.namespace}/${p.name}`, "data-reason": p.reason },
        el("td", {}, `${p.namespace}/${p.name}`),
        el("td", { title: reasons[p.reason] || "" }, p.reason),
        el("td", {}, p.message, p.schedulerMessage && !p.message.includes(p.schedulerMessage)
          ? el("div", { class: "muted" }, `scheduler: ${p.schedulerMessage}`) : null))))) : null,
    be.truncated ? el("p", { class: "muted", id: "pending-truncated" }, `Showing the ${be.pendingPods.length} oldest of ${be.pending} pending BE pods.`) : null,
  ];
}

function eventsTable(events, limit) {
  if (!events.items.length) return el("p", { class: "muted", id: "events-empty" }, "No Tidal Events (evictions, blocked evictions, the offline-evicting taint, dropped batch resources) in the API server's retention (1 h by default).");
  return [
    el("table", { id: "tidal-events" },
      el("thead", {}, el("tr", {}, ["Time", "Reason", "Object", "Message"].map((h) => el("th", {}, h)))),
      el("tbody", {}, events.items.map((e) => el("tr", { "data-reason": e.reason, class: e.type === "Warning" ? "warning" : null },
        el("td", {}, e.time ? new Date(e.time).toLocaleString() : "–"),
        el("td", {}, e.reason),
        el("td", {}, `${e.object.kind} ${e.object.namespace ? `${e.object.namespace}/` : ""}${e.object.name}`,
          e.node && e.object.kind !== "Node" ? el("div", { class: "muted" }, `on ${e.node}`) : null),
        el("td", {}, e.message, e.count > 1 ? el("span", { class: "muted" }, ` (×${e.count})`) : null))))),
    events.truncated ? el("p", { class: "muted", id: "events-truncated" }, `Showing the newest ${limit} Tidal Events.`) : null,
  ];
}

export async function overview(root) {
  root.append(el("h1", {}, "Colocation workflow"));
  const steps = el("div", { class: "steps" });
  root.append(steps);
  const summary = el("div", { class: "card", id: "summary" }, "Loading cluster state…");
  const state = el("div", { id: "cluster-state" });
  root.append(el("h2", {}, "Cluster state"), summary, state);
  const [workflow, nodes, rollout] = await Promise.all([api("GET", "/workflow"), api("GET", "/nodes"), api("GET", "/policy/rollout")]);
  fill(steps, workflow.steps.map(stepCard));
  const byMode = nodes.modes.map((m) => `${m.name} ${nodes.items.filter((n) => n.mode.name === m.name).length}`);
  const evicting = nodes.items.filter((n) => n.evicting).map((n) => n.name);
  fill(summary,
    el("p", {}, `${nodes.items.length} nodes by mode: ${byMode.join(", ")}.`),
    el("p", {}, rollout.generation === null ? "No ColocationPolicy yet: the defaults apply."
      : `Policy generation ${rollout.generation}: applied on ${rollout.appliedNodes} of ${rollout.totalNodes} nodes Tidal acts on.`),
    evicting.length ? el("p", { class: "errors" }, `Evicting offline pods: ${evicting.join(", ")}`) : null,
  );
  // Is it working, and if not why: needs list on nodes, pods and Events besides the node list.
  try {
    const o = await api("GET", "/overview");
    fill(state,
      el("div", { class: "card" }, el("h3", {}, "Nodes"), nodesTable(o.nodes)),
      el("div", { class: "card" }, el("h3", {}, "BE pods"), pendingTable(o.bePods, o.pendingReasons)),
      el("div", { class: "card" }, el("h3", {}, "Recent Tidal Events"), eventsTable(o.events, o.limits.events)));
  } catch (err) {
    if (!(err instanceof ApiError) || err.status === 401) throw err;
    fill(state, el("p", { class: "errors", id: "overview-error" }, `The cluster's state is not shown: ${err.message}`));
  }
}
