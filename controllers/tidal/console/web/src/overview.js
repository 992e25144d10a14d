import { api } from "./api.js";
import { el, fill } from "./ui.js";

const STEPS = [
  { title: "Environment preparation", link: null, text: [
    "Run the Ansible collection tidal.colocation (make site / playbooks/site.yml) on every node:",
    "kubelet: static CPU manager policy, reserved system CPUs, topology manager; restart and wait for Ready.",
    "containerd: NRI enabled, so the tidal-agent's plugin applies QoS resources when containers start.",
    "Cluster: Volcano scheduler, Tidal CRDs, RBAC, PriorityClasses tidal-hls / tidal-ls / tidal-be, tidal-manager and tidal-agent.",
  ] },
  { title: "Policy configuration", link: "#/policy", text: [
    "Set each node's mode: off, colocation (label colocation.tidal.io/colocation=true: BE isolation, native requests), oversubscription (colocation.tidal.io/oversubscription=true: oversold batch resources) or both.",
    "Tune load-aware scheduling, watermark eviction, overselling and advanced features in the ColocationPolicy.",
  ] },
  { title: "Workload deployment", link: null, text: [
    "Annotate pods with colocation.tidal.io/qos-level: HLS (Guaranteed, whole cores), LS (online, elastic) or BE (offline).",
    "BE pods ask for kubernetes.io/batch-cpu and batch-memory; the admission webhook rewrites native requests and schedules them with Volcano.",
  ] },
  { title: "Monitoring", link: "#/monitoring", text: [
    "CPU and memory by QoS level, batch allocatable vs requested, evictions and pressure stall, per cluster or node.",
  ] },
];

export async function overview(root) {
  root.append(el("h1", {}, "Colocation workflow"));
  root.append(el("div", { class: "steps" }, STEPS.map((s, i) => el("div", { class: "card step", "data-step": String(i + 1) },
    el("h3", {}, el("span", { class: "n" }, String(i + 1)), s.link ? el("a", { href: s.link }, s.title) : s.title),
    el("ul", {}, s.text.map((t) => el("li", {}, t)))))));
  const summary = el("div", { class: "card", id: "summary" }, "Loading cluster state…");
  root.append(el("h2", {}, "Cluster state"), summary);
  const [nodes, rollout] = await Promise.all([api("GET", "/nodes"), api("GET", "/policy/rollout")]);
  const byMode = nodes.modes.map((m) => `${m.name} ${nodes.items.filter((n) => n.mode.name === m.name).length}`);
  const evicting = nodes.items.filter((n) => n.evicting).map((n) => n.name);
  fill(summary,
    el("p", {}, `${nodes.items.length} nodes by mode: ${byMode.join(", ")}.`),
    el("p", {}, rollout.generation === null ? "No ColocationPolicy yet: the defaults apply."
      : `Policy generation ${rollout.generation}: applied on ${rollout.appliedNodes} of ${rollout.totalNodes} nodes Tidal acts on.`),
    evicting.length ? el("p", { class: "errors" }, `Evicting offline pods: ${evicting.join(", ")}`) : null,
  );
}
