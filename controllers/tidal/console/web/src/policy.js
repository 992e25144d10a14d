import { api, ApiError } from "./api.js";
import { el, fill, formatValue, toast } from "./ui.js";

const SECTIONS = [
  ["spec.loadAwareScheduling", "Load-aware scheduling"],
  ["spec.evictionWatermarks", "Watermark eviction"],
  ["spec.beIsolation", "BE isolation"],
  ["spec.beIsolation.cpuInterference", "BE CPU interference control (online run-queue delay)"],
  ["spec.overselling", "Overselling"],
  ["spec.features.cpuBurst", "CPU burst"],
  ["spec.features.memoryReclaim", "Memory reclaim"],
  ["spec.features.cacheLimits", "LLC / memory bandwidth limits"],
  ["spec.features.psiInterference", "PSI interference"],
  ["spec.features.numaAffinity", "NUMA affinity"],
  ["spec.features.egressBandwidth", "Egress bandwidth"],
  ["spec.features.blockIO", "BE block I/O (disk read / write caps)"],
  ["spec.features.kernelQoSLevel", "Kernel QoS level (openEuler cpu / memory.qos_level)"],
  ["spec.features.onlineSchedSlice", "Online wake-up slice (EEVDF sched_runtime)"],
];

function capabilityChips(node) {
  if (!node.capabilities.length) return el("span", { class: "muted" }, node.profile.present ? "none reported" : "no NodeProfile");
  // A replayed node (tidal-agent replay) shows the capabilities of the machine running the replay.
  const replayed = node.profile.replayed
    ? el("span", { class: "chip replayed", title: "reported by tidal-agent replay: the replaying machine's capabilities" }, "replayed")
    : null;
  return [replayed, ...node.capabilities.map((c) => c.supported
    ? el("span", { class: "chip", "data-capability": c.name }, c.name)
    : el("span", { class: "chip off", "data-capability": c.name, title: c.reason, "aria-disabled": "true" },
      `${c.name}`, el("span", { class: "visually-reason" }, ` (${c.reason})`)))];
}

// The node's mode selector: the four modes (from the API; what each means is in the legend under
// the table and each option's title), the current one's meaning below it; after a change, the
// answer's line (and any warning, e.g. a volcano.sh alias label that keeps the node in another mode).
function modeCell(node, modes, canWrite) {
  const select = el("select", {
    class: "mode", "aria-label": `mode of ${node.name}`, "data-node": node.name,
    disabled: !canWrite, title: canWrite ? null : "read-only: your user may not patch nodes",
  }, modes.map((m) => el("option", { value: m.name, title: `${m.meaning}; BE evicted: ${m.evictionRule}` }, m.name)));
  select.value = node.mode.name;
  const line = el("div", { class: "muted mode-meaning", "data-node": node.name }, node.mode.meaning);
  const warnings = el("div", { class: "errors mode-warnings" },
    [...node.mode.conflicts, ...node.mode.problems].map((w) => el("div", {}, w)));
  const agent = node.mode.evictionReason
    ? el("div", { class: "muted", title: "the node's tidal-agent (NodeProfile status.mode)" },
      `eviction ${node.mode.evictionAllowed ? "may act" : "holds"}: ${node.mode.evictionReason}`)
    : null;
  let current = node.mode.name;
  select.addEventListener("change", async () => {
    select.disabled = true;
    try {
      const result = await api("PUT", `/nodes/${encodeURIComponent(node.name)}/colocation`, { mode: select.value });
      // Another mode than asked for (an alias label): the message says why.
      toast(result.message, result.mode === select.value ? "info" : "error");
      current = result.mode;
      select.value = current;
      fill(line, result.meaning);
      fill(warnings, result.warnings.map((w) => el("div", {}, w)));
    } catch (err) {
      toast(err.body && err.body.message ? err.body.message : err.message, "error");
      select.value = current;
    } finally {
      select.disabled = !canWrite;
    }
  });
  return el("td", {}, select, line, warnings, agent);
}

function overselling(node) {
  if (!node.mode.oversubscription) return "off";
  return el("span", { title: `BE evicted: ${node.mode.evictionRule}` }, `on (${node.mode.oversellTypes.join(", ") || "none"})`);
}

function nodeRow(node, modes, canWrite) {
  const b = node.batch;
  return el("tr", { "data-node": node.name },
    modeCell(node, modes, canWrite),
    el("td", {}, el("strong", {}, node.name), node.evicting ? el("div", { class: "errors" }, "evicting offline pods") : null),
    el("td", {}, node.ready ? "Ready" : el("span", { class: "errors", title: node.readyMessage }, "NotReady"),
      node.unschedulable ? el("div", { class: "muted" }, "cordoned") : null),
    el("td", {}, overselling(node)),
    el("td", {}, `${node.podsByQoS.HLS} / ${node.podsByQoS.LS} / ${node.podsByQoS.BE}`),
    el("td", {}, `${formatValue(b.requested.cpuMillicores, "millicores")} of ${formatValue(b.allocatable.cpuMillicores, "millicores")}`),
    el("td", {}, `${formatValue(b.requested.memoryBytes, "bytes")} of ${formatValue(b.allocatable.memoryBytes, "bytes")}`),
    el("td", {}, capabilityChips(node)),
    el("td", {}, node.profile.appliedGeneration ?? "–"),
  );
}

function inputFor(field, value) {
  const common = { name: field.path, id: field.path, "data-path": field.path, "aria-describedby": `${field.path}.error` };
  if (field.type === "boolean") {
    const i = el("input", { type: "checkbox", ...common });
    i.checked = Boolean(value);
    return i;
  }
  if (field.type === "string" && field.enum) {
    const s = el("select", common, field.enum.map((v) => el("option", { value: v }, v)));
    s.value = value;
    return s;
  }
  if (field.type === "array" && field.enum) {
    return el("span", { ...common, role: "group" }, field.enum.map((v) => {
      const box = el("input", { type: "checkbox", value: v, "data-array": field.path });
      box.checked = (value || []).includes(v);
      return el("label", {}, box, ` ${v} `);
    }));
  }
  return el("input", { type: "number", step: field.type === "integer" ? "1" : "any", value: String(value), ...common });
}

function readForm(form, fields) {
  const spec = {};
  for (const f of fields) {
    if (f.type === "object") continue;
    let value;
    if (f.type === "array") {
      value = [...form.querySelectorAll(`input[data-array="${f.path}"]`)].filter((b) => b.checked).map((b) => b.value);
    } else {
      const input = form.elements.namedItem(f.path);
      if (!input) continue;
      if (f.type === "boolean") value = input.checked;
      else if (f.type === "integer" || f.type === "number") value = input.value === "" ? null : Number(input.value);
      else value = input.value;
    }
    const keys = f.path.split(".").slice(1);
    let obj = spec;
    for (const k of keys.slice(0, -1)) obj = obj[k] ??= {};
    obj[keys[keys.length - 1]] = value;
  }
  return spec;
}

function valueAt(spec, path) {
  return path.split(".").slice(1).reduce((o, k) => (o == null ? undefined : o[k]), spec);
}

// Which node cannot run a policy section, and why: the API decides (node.featureSupport, computed
// from the capability names the agent's probe writes); the page only shows it.
function unsupportedOn(nodes, section) {
  return nodes.filter((n) => n.mode.name !== "off" || n.capabilities.length)
    .flatMap((n) => (n.featureSupport || []).filter((f) => f.section === section && f.supported === false)
      .map((f) => `${n.name}: ${f.reason}`));
}

function showErrors(form, summary, err) {
  for (const e of form.querySelectorAll(".field-error")) e.textContent = "";
  for (const i of form.querySelectorAll("[aria-invalid]")) i.removeAttribute("aria-invalid");
  const unplaced = [];
  for (const f of err.fields) {
    const target = form.querySelector(`[data-path="${CSS.escape(f.field)}"]`);
    const slot = form.querySelector(`[id="${CSS.escape(f.field)}.error"]`);
    if (target && slot) {
      target.setAttribute("aria-invalid", "true");
      slot.textContent = `${f.field}: ${f.message}`;
    } else unplaced.push(`${f.field}: ${f.message}`);
  }
  fill(summary, el("p", {}, err.fields.length ? `The policy was not saved: ${err.fields.length} invalid field(s).` : err.message),
    unplaced.length ? el("ul", {}, unplaced.map((m) => el("li", {}, m))) : null);
}

function policyDialog(schema, policy, nodes, canWrite, onSaved) {
  const fields = schema.fields;
  const summary = el("div", { class: "errors", id: "policy-errors", role: "alert" });
  const form = el("form", { method: "dialog", novalidate: true, id: "policy-form" });
  for (const [prefix, title] of SECTIONS) {
    // A section's own fields: those of a nested section listed here (beIsolation.cpuInterference)
    // are shown (and dimmed) in that one only.
    const own = fields.filter((f) => f.type !== "object" && f.path.startsWith(`${prefix}.`)
      && !SECTIONS.some(([other]) => other.length > prefix.length && f.path.startsWith(`${other}.`)));
    const unsupported = unsupportedOn(nodes, prefix);
    const fs = el("fieldset", { "data-section": prefix, class: unsupported.length ? "dim" : null },
      el("legend", {}, title),
      unsupported.length ? el("p", { class: "muted", "data-unsupported": prefix },
        `Not supported on ${unsupported.join("; ")}`) : null,
      own.map((f) => {
        // a switch with needs of its own (beIsolation.cpuPriority.idleGroup) is dimmed alone
        const alone = unsupportedOn(nodes, f.path);
        return el("div", { class: `field${unsupported.length || alone.length ? " dim" : ""}` },
        el("label", { for: f.path }, f.path.slice(prefix.length + 1),
          el("div", { class: "hint" }, f.description + (f.minimum !== undefined ? ` [${f.minimum}–${f.maximum}]` : "")
          + ` (default ${Array.isArray(f.default) ? f.default.join(", ") : f.default})`),
          alone.length ? el("div", { class: "muted", "data-unsupported": f.path }, `Not supported on ${alone.join("; ")}`) : null),
        el("div", {}, inputFor(f, valueAt(policy.spec, f.path)), el("div", { class: "field-error", id: `${f.path}.error` })));
      }));
    form.append(fs);
  }
  const save = el("button", { type: "submit", id: "policy-save", disabled: !canWrite,
    title: canWrite ? null : "read-only: your user may not update the ColocationPolicy" }, "Save policy");
  const cancel = el("button", { type: "button", class: "secondary", onclick: () => dialog.close() }, "Cancel");
  form.append(summary, el("div", { class: "actions" }, cancel, save));
  const dialog = el("dialog", { id: "policy-dialog", "aria-label": "ColocationPolicy" }, form);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const saved = await api("PUT", "/policy", { spec: readForm(form, fields), resourceVersion: policy.resourceVersion || undefined });
      toast(saved.message);
      dialog.close();
      onSaved();
    } catch (err) {
      if (err instanceof ApiError) showErrors(form, summary, err); else throw err;
    }
  });
  return dialog;
}

// Rollout: one row shape for the nodes (every cell filled), the reconciler's conditions in a
// table of their own with its own header, so the two never share (and misalign) columns.
function rolloutSection(rollout) {
  const generation = rollout.generation === null ? "no policy (defaults)" : `generation ${rollout.generation}`;
  return [
    el("h2", {}, "Rollout"),
    el("p", { class: "muted", id: "rollout-summary" }, `${generation}: applied on ${rollout.appliedNodes} of ${rollout.totalNodes} nodes Tidal acts on.`),
    rollout.nodes.length
      ? el("table", { id: "rollout" },
        el("thead", {}, el("tr", {}, ["Node", "Mode", "Applied generation", "State", "Reported by"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rollout.nodes.map((r) => el("tr", { "data-node": r.name },
          el("td", {}, r.name),
          el("td", {}, r.mode),
          el("td", {}, r.appliedGeneration === null ? "none" : String(r.appliedGeneration)),
          el("td", { class: r.upToDate ? null : "errors" }, r.upToDate ? "applied" : r.reason),
          el("td", {}, r.replayed ? "tidal-agent replay" : "tidal-agent")))))
      : el("p", { class: "muted" }, "No node in a mode other than off."),
    el("h3", {}, "Policy reconciler conditions"),
    rollout.conditions.length
      ? el("table", { id: "policy-conditions" },
        el("thead", {}, el("tr", {}, ["Condition", "Status", "Reason", "Message"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rollout.conditions.map((c) => el("tr", { "data-condition": c.type },
          el("td", {}, c.type), el("td", {}, c.status), el("td", {}, c.reason || "–"), el("td", { class: "muted" }, c.message || "–")))))
      : el("p", { class: "muted", id: "policy-conditions" }, "The policy reconciler has written no conditions yet."),
  ];
}

export async function policyPage(root, me) {
  const [nodes, schema, policy, rollout] = await Promise.all([
    api("GET", "/nodes"), api("GET", "/policy/schema"), api("GET", "/policy"), api("GET", "/policy/rollout")]);
  const canWriteNodes = me.permissions.writeNodes, canWritePolicy = me.permissions.writePolicy;
  root.append(el("h1", {}, "Policy configuration"));
  const open = el("button", { id: "open-policy", type: "button" }, "Edit ColocationPolicy…");
  root.append(el("div", { class: "toolbar" }, open,
    el("span", { class: "muted" }, policy.exists ? `generation ${policy.generation}` : "not created yet: defaults apply"),
    !canWriteNodes ? el("span", { class: "muted" }, "read-only: node modes cannot be changed by your user") : null));
  root.append(el("table", { id: "nodes" },
    el("thead", {}, el("tr", {}, ["Mode", "Node", "Status", "Overselling", "Pods HLS / LS / BE", "Batch CPU requested of allocatable",
      "Batch memory requested of allocatable", "Capabilities", "Policy gen."].map((h) => el("th", {}, h)))),
    el("tbody", {}, nodes.items.map((n) => nodeRow(n, nodes.modes, canWriteNodes)))));
  root.append(el("dl", { id: "modes", class: "modes" }, nodes.modes.flatMap((m) => [
    el("dt", {}, m.name), el("dd", {}, `${m.meaning}. BE pods are evicted: ${m.evictionRule}.`)])));
  root.append(...rolloutSection(rollout));
  const dialog = policyDialog(schema, policy, nodes.items, canWritePolicy, () => window.dispatchEvent(new HashChangeEvent("hashchange")));
  root.append(dialog);
  open.addEventListener("click", () => dialog.showModal());
}
