import * as echarts from "echarts/core";
import { LineChart } from "echarts/charts";
import { GridComponent, LegendComponent, TooltipComponent, TitleComponent } from "echarts/components";
import { CanvasRenderer } from "echarts/renderers";
import { api } from "./api.js";
import { el, formatValue } from "./ui.js";

echarts.use([LineChart, GridComponent, LegendComponent, TooltipComponent, TitleComponent, CanvasRenderer]);

const RANGES = [["15m", 900], ["1h", 3600], ["6h", 21600], ["24h", 86400]];
const charts = new Set();

function option(panel, start, end) {
  return {
    animation: false,
    title: { text: panel.title, textStyle: { fontSize: 13 } },
    tooltip: { trigger: "axis", className: "chart-tooltip", valueFormatter: (v) => formatValue(v, panel.unit) },
    legend: { type: "scroll", top: 24, data: panel.series.map((s) => s.name) },
    grid: { top: 60, left: 70, right: 20, bottom: 30 },
    xAxis: { type: "time", min: start * 1000, max: end * 1000 },
    yAxis: { type: "value", axisLabel: { formatter: (v) => formatValue(v, panel.unit) } },
    series: panel.series.map((s) => ({ name: s.name, type: "line", showSymbol: false, connectNulls: false,
      data: s.points.map(([t, v]) => [t * 1000, v]) })),
  };
}

const REFRESH_MS = 30000;
let refreshTimer = null;

/** Stops the charts' refresh and frees them (called before any page renders). */
export function leaveMonitoring() {
  clearInterval(refreshTimer);
  refreshTimer = null;
  for (const c of charts) c.dispose();
  charts.clear();
}

// One node: that node's view; several: the cluster view filtered to them (one line per node).
async function fetchPanels(nodes, range) {
  const end = Math.floor(Date.now() / 1000);
  const q = `start=${end - range}&end=${end}`;
  if (nodes.length === 1) return api("GET", `/monitoring/nodes/${encodeURIComponent(nodes[0])}?${q}`);
  return api("GET", `/monitoring/cluster?${q}${nodes.length ? `&nodes=${encodeURIComponent(nodes.join(","))}` : ""}`);
}

export async function monitoringPage(root) {
  leaveMonitoring();
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  // ?node=a (one node, kept for links) or ?nodes=a,b (several); neither: the whole cluster.
  const chosen = [...new Set([params.get("node"), ...(params.get("nodes") || "").split(",")].filter(Boolean))];
  const range = Number(params.get("range") || 3600);
  const nodes = await api("GET", "/nodes");
  const nodeSelect = el("select", { id: "node-filter", multiple: true, size: String(Math.min(6, Math.max(2, nodes.items.length))),
    "aria-label": "node filter (none selected: the whole cluster)" },
  nodes.items.map((n) => el("option", { value: n.name }, n.name)));
  for (const option of nodeSelect.options) option.selected = chosen.includes(option.value);
  const rangeSelect = el("select", { id: "range", "aria-label": "time range" }, RANGES.map(([l, s]) => el("option", { value: String(s) }, l)));
  rangeSelect.value = String(range);
  const go = (names) => {
    const query = new URLSearchParams({ range: rangeSelect.value });
    if (names.length) query.set("nodes", names.join(","));
    location.hash = `#/monitoring?${query}`;
  };
  const selected = () => [...nodeSelect.selectedOptions].map((o) => o.value);
  nodeSelect.addEventListener("change", () => go(selected()));
  rangeSelect.addEventListener("change", () => go(selected()));
  const all = el("button", { type: "button", class: "secondary", id: "whole-cluster", onclick: () => go([]) }, "Whole cluster");
  const title = chosen.length === 0 ? "Monitoring: cluster" : chosen.length === 1 ? `Monitoring: node ${chosen[0]}`
    : `Monitoring: nodes ${chosen.join(", ")}`;
  root.append(el("h1", {}, title),
    el("div", { class: "toolbar" }, el("label", { class: "node-filter" }, "Nodes ", nodeSelect), all,
      el("label", {}, "Range ", rangeSelect),
      el("span", { class: "muted" }, `ctrl/cmd-click for several nodes; refreshed every ${REFRESH_MS / 1000} s`)));
  const data = await fetchPanels(chosen, range);
  const grid = el("div", { class: "charts" });
  root.append(grid);
  const byName = new Map();
  for (const panel of data.panels) {
    const box = el("div", { class: "chart", "data-panel": panel.name, "data-series": String(panel.series.length) });
    const empty = el("div", { class: "muted" }, panel.series.length ? "" : "no data yet");
    grid.append(el("div", { class: "card" }, box, empty,
      el("details", {}, el("summary", { class: "muted" }, "PromQL"), el("code", {}, panel.query))));
    const chart = echarts.init(box, null, { renderer: "canvas" });
    chart.setOption(option(panel, data.start, data.end));
    charts.add(chart);
    byName.set(panel.name, { chart, box, empty });
  }
  refreshTimer = setInterval(async () => {
    if (document.hidden) return;
    try {
      const fresh = await fetchPanels(chosen, range);
      for (const panel of fresh.panels) {
        const target = byName.get(panel.name);
        if (!target) continue;
        // Merging keeps the legend selection the user made.
        target.chart.setOption(option(panel, fresh.start, fresh.end), { replaceMerge: ["series"] });
        target.box.dataset.series = String(panel.series.length);
        target.empty.textContent = panel.series.length ? "" : "no data yet";
      }
    } catch (err) {
      // the next round tries again; a 401 shows at the next navigation
    }
  }, REFRESH_MS);
}

window.addEventListener("resize", () => { for (const c of charts) c.resize(); });
