# SPDX-License-Identifier: Apache-2.0
"""The console's monitoring views: which PromQL each chart runs, the time range rules, and a
small Prometheus HTTP adapter.

`panels(node)` is pure: the charts of the cluster view (``node=None``, optionally filtered to
several nodes with ``nodes``) or of one node, each a PromQL expression over the metric names
fixed in `tidal.metrics` and the series label that names a line. Node names are checked against
the Kubernetes name rule before they reach PromQL (`node_filter`), so no query can be injected
through them. The cluster view also counts nodes and workloads over time, from the series Tidal
exports (there is no per-pod series: workloads are counted as the nodes running pods of each QoS
level). `TimeRange.parse` turns the ``start``,
``end`` and ``step`` query parameters into a range Prometheus accepts, or raises an error
naming the parameter and the rule.
"""
from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import aiohttp

__all__ = ["MAX_FILTER_NODES", "MonitoringError", "Panel", "PrometheusClient", "PrometheusError", "TimeRange",
           "node_filter", "nodes_parameter", "panels", "panels_for", "series_of", "valid_node_name"]

DEFAULT_RANGE_SECONDS = 3600
MAX_POINTS = 11000  # Prometheus refuses more points per series
MAX_RANGE_SECONDS = 32 * 86400
MAX_FILTER_NODES = 100
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class MonitoringError(ValueError):
    """A bad monitoring request; ``field`` names the query parameter."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


class PrometheusError(RuntimeError):
    """Prometheus could not answer (unreachable, or it rejected the query)."""


def valid_node_name(name: str) -> bool:
    return len(name) <= 253 and bool(_NODE_NAME.match(name))


@dataclass(frozen=True)
class Panel:
    """One chart: ``series_label`` names each line (None: a single line called ``title``)."""

    name: str
    title: str
    unit: str
    query: str
    series_label: str | None


def _selector(*matchers: str | None) -> str:
    present = [m for m in matchers if m]
    return "{" + ",".join(present) + "}" if present else ""


def _allocatable_vs_requested(resource: str, node: str | None) -> str:
    sel = _selector(node, f'resource="{resource}"')
    return (f'label_replace(sum(tidal_node_batch_allocatable{sel}), "kind", "allocatable", "", "") or '
            f'label_replace(sum(tidal_node_batch_requested{sel}), "kind", "requested", "", "")')


def nodes_parameter(value: str | None) -> list[str]:
    """The ``nodes`` query parameter (comma-separated node names) as a list: empty when absent
    (the whole cluster); duplicates dropped, order kept.

    Raises:
        MonitoringError: an empty value, a name that is not a node name (spaces included), or
            more than `MAX_FILTER_NODES`.
    """
    if value is None:
        return []
    if not value:
        raise MonitoringError("nodes", "empty: name at least one node, or leave the parameter out for the "
                                       "whole cluster")
    names = list(dict.fromkeys(value.split(",")))
    for name in names:
        if not valid_node_name(name):
            raise MonitoringError("nodes", f"{name!r} is not a valid node name (lowercase RFC 1123 subdomain)")
    if len(names) > MAX_FILTER_NODES:
        raise MonitoringError("nodes", f"at most {MAX_FILTER_NODES} nodes (got {len(names)})")
    return names


def node_filter(nodes: list[str]) -> str | None:
    """The PromQL label matcher selecting `nodes`: None for none (the whole cluster),
    ``node="a"`` for one, ``node=~"a|b\\\\.example"`` for several (each name's dots escaped, the
    only regular-expression character a node name may hold; Prometheus anchors the regex).

    Raises:
        MonitoringError: a name that is not a node name (nothing else can reach the query).
    """
    for name in nodes:
        if not valid_node_name(name):
            raise MonitoringError("nodes", f"{name!r} is not a valid node name (lowercase RFC 1123 subdomain)")
    if not nodes:
        return None
    if len(nodes) == 1:
        return f'node="{nodes[0]}"'
    # The PromQL string "a\\.b" is the regular expression a\.b: a literal dot.
    return 'node=~"' + "|".join(name.replace(".", "\\\\.") for name in nodes) + '"'


def panels(node: str | None = None, nodes: list[str] | None = None) -> list[Panel]:
    """The charts of one node's view (`node`), or of the cluster view, optionally only of `nodes`."""
    if node is not None:
        if not valid_node_name(node):
            raise MonitoringError("node", f"{node!r} is not a valid node name (lowercase RFC 1123 subdomain)")
        return panels_for(f'node="{node}"', per_node=False)
    return panels_for(node_filter(list(nodes or ())), per_node=True)


def panels_for(node_matcher: str | None, per_node: bool) -> list[Panel]:
    """The charts with a label matcher on ``node`` (e.g. ``node="a"``, or Grafana's
    ``node=~"$node"``); ``per_node`` draws one line per node where a chart can."""
    sel = _selector(node_matcher)
    per = "node" if per_node else "resource"
    return [
        Panel("cpuByQoS", "CPU usage by QoS level", "millicores",
              f"sum by (qos) (tidal_qos_cpu_usage_millicores{sel})", "qos"),
        Panel("memoryByQoS", "Memory usage by QoS level", "bytes",
              f"sum by (qos) (tidal_qos_memory_usage_bytes{sel})", "qos"),
        Panel("nodeCPU", "CPU usage per node (total)", "millicores",
              f"sum by (node) (tidal_node_cpu_usage_millicores{sel})", "node"),
        Panel("nodeMemory", "Memory usage per node (total)", "bytes",
              f"sum by (node) (tidal_node_memory_usage_bytes{sel})", "node"),
        Panel("batchCPU", "Batch CPU: allocatable vs requested", "millicores",
              _allocatable_vs_requested("cpu", node_matcher), "kind"),
        Panel("batchMemory", "Batch memory: allocatable vs requested", "bytes",
              _allocatable_vs_requested("memory", node_matcher), "kind"),
        Panel("evictions", "BE evictions (per 5 min)", "pods",
              f"sum by ({per}) (increase(tidal_evictions_total{sel}[5m]))", per),
        Panel("psi", "Pressure stall (some avg10)", "percent",
              f"max by (resource) (tidal_psi_some_avg10_percent{sel})", "resource"),
        *(_count_panels(node_matcher) if per_node else ()),
    ]


def _count_panels(node_matcher: str | None) -> list[Panel]:
    """Nodes and workloads over time, from what Tidal exports: an agent's series per node it
    reports for, the oversell master's batch-cpu per node, the agent's offline-evicting taint
    gauge, and per QoS level the nodes whose pods of that level use CPU (no series counts pods)."""
    sel = _selector(node_matcher)
    batch = _selector(node_matcher, 'resource="cpu"')

    def kind(expression: str, name: str) -> str:
        return f'label_replace({expression}, "kind", "{name}", "", "")'
    return [
        Panel("nodeCounts", "Nodes: reporting, with batch resources, evicting", "count",
              " or ".join((kind(f"count(tidal_node_cpu_usage_millicores{sel})", "reporting"),
                           kind(f"sum(tidal_node_batch_allocatable{batch} > bool 0)", "with batch resources"),
                           kind(f"sum(max by (node) (tidal_node_offline_evicting_taint{sel}))", "evicting"))),
              "kind"),
        Panel("workloadCounts", "Nodes running pods, by QoS level", "count",
              f"sum by (qos) (tidal_qos_cpu_usage_millicores{sel} > bool 0)", "qos"),
    ]


def _instant(value: str, name: str) -> float:
    try:
        number = float(value)
    except ValueError:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise MonitoringError(name, f"{value!r} is neither Unix seconds nor an RFC 3339 time") from None
    if not math.isfinite(number) or number < 0:
        raise MonitoringError(name, f"{value!r} must be a finite, non-negative Unix time")
    return number


@dataclass(frozen=True)
class TimeRange:
    start: float
    end: float
    step: float

    @classmethod
    def parse(cls, query: Mapping[str, str], now: float | None = None) -> TimeRange:
        """``end`` defaults to now, ``start`` to an hour before ``end``, ``step`` to about 240
        points. Rules: start < end, the range at most 32 days, 1 s <= step, at most 11,000 points."""
        now = time.time() if now is None else now
        end = _instant(query["end"], "end") if query.get("end") else now
        start = _instant(query["start"], "start") if query.get("start") else end - DEFAULT_RANGE_SECONDS
        if start >= end:
            raise MonitoringError("start", "must be earlier than end")
        if end - start > MAX_RANGE_SECONDS:
            raise MonitoringError("start", f"the range may span at most {MAX_RANGE_SECONDS // 86400} days")
        if query.get("step"):
            try:
                step = float(query["step"])
            except ValueError:
                raise MonitoringError("step", f"{query['step']!r} is not a number of seconds") from None
            if not math.isfinite(step) or step < 1:
                raise MonitoringError("step", "must be at least 1 second")
        else:
            step = max(1.0, math.ceil((end - start) / 240))
        if (end - start) / step > MAX_POINTS:
            raise MonitoringError("step", f"too small for the range: at most {MAX_POINTS} points per series")
        return cls(start, end, step)


class PrometheusClient:
    """``query_range`` against Prometheus's HTTP API."""

    def __init__(self, base_url: str, session: aiohttp.ClientSession, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.session = session
        self.timeout = aiohttp.ClientTimeout(total=timeout)

    async def query_range(self, query: str, window: TimeRange) -> list[dict]:
        params = {"query": query, "start": f"{window.start:.3f}", "end": f"{window.end:.3f}",
                  "step": f"{window.step:g}"}
        try:
            async with self.session.get(f"{self.base_url}/api/v1/query_range", params=params,
                                        timeout=self.timeout) as resp:
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            raise PrometheusError(f"Prometheus at {self.base_url} did not answer: {err}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"Prometheus rejected the query: {body.get('error', body)}")
        return body["data"]["result"]


def series_of(panel: Panel, result: list[dict]) -> list[dict]:
    """Prometheus matrix → the console's series: a name, its labels and [time, value] points
    (NaN and infinities, which JSON cannot carry, become null)."""
    out = []
    for item in result:
        labels = item.get("metric") or {}
        name = labels.get(panel.series_label, "") if panel.series_label else panel.title
        points = []
        for t, v in item.get("values") or []:
            value = float(v)
            points.append([float(t), value if math.isfinite(value) else None])
        out.append({"name": name or panel.title, "labels": labels, "points": points})
    out.sort(key=lambda s: s["name"])
    return out
