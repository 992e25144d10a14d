# SPDX-License-Identifier: Apache-2.0
"""Prometheus metric names every Tidal component exports (prefix ``tidal_``), in one place.

The console's PromQL, the recording rules, the alerts and the Grafana dashboard read these names;
components create their metrics through the factories below so a name is written once.
Each factory takes a ``registry`` so tests (and a process acting for several fake nodes) can keep
their own.
"""
from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["ConsoleMetrics", "ManagerMetrics", "NodeMetrics", "SchedulerUsageMetrics", "console_metrics",
           "manager_metrics", "node_metrics", "scheduler_usage_metrics"]


@dataclass(frozen=True)
class NodeMetrics:
    """What a node agent (``tidal-agent run``, or ``replay`` for fake nodes) reports per node."""

    #: node usage from the kernel (all pods and system daemons)
    node_cpu: Gauge        # tidal_node_cpu_usage_millicores{node}
    node_memory: Gauge     # tidal_node_memory_usage_bytes{node}
    #: usage summed per QoS level (HLS, LS, BE)
    qos_cpu: Gauge         # tidal_qos_cpu_usage_millicores{node,qos}
    qos_memory: Gauge      # tidal_qos_memory_usage_bytes{node,qos}
    #: watermark eviction
    evicting: Gauge        # tidal_node_evicting{node,resource} 1 while evicting for the resource
    tainted: Gauge         # tidal_node_offline_evicting_taint{node} 1 while the taint is on
    evictions: Counter     # tidal_evictions_total{node,resource,reason}
    #: evictions asked for that did not happen: refused by a PodDisruptionBudget, or the request failed
    eviction_failures: Counter  # tidal_eviction_failures_total{node,reason}
    #: BE CPU suppression: the quota on the BE parent cgroup
    be_cpu_quota: Gauge    # tidal_be_cpu_quota_millicores{node}
    #: BE CPU interference control: online threads' run-queue delay and the quota decreases
    online_runqueue_delay: Gauge  # tidal_online_runqueue_delay_microseconds{node} mean per slice
    online_runqueue_wait: Gauge   # tidal_online_runqueue_wait_ratio{node} Σ waited / wall time
    be_cpu_throttles: Counter     # tidal_be_cpu_interference_throttles_total{node}
    #: online wake-up slice: online pods whose threads ask for it
    online_sched_slice_pods: Gauge  # tidal_online_sched_slice_pods{node}
    #: BE block I/O: each disk's largest request (queue/max_sectors_kb), what BE writeback is sent in
    disk_max_request: Gauge  # tidal_disk_max_request_kib{node,disk}
    #: pressure stall information, some avg10 in percent
    psi: Gauge             # tidal_psi_some_avg10_percent{node,resource}
    #: proactive reclaim of BE pods' memory (features.memoryReclaim, cgroup v2 ``memory.reclaim``)
    be_memory_reclaims: Counter       # tidal_be_memory_reclaim_requests_total{node}
    be_memory_reclaim_bytes: Counter  # tidal_be_memory_reclaim_requested_bytes_total{node}
    #: cgroup writes the QoS engine made (changed values only) and failures
    cgroup_writes: Counter  # tidal_agent_cgroup_writes_total{node,strategy}
    cgroup_errors: Counter  # tidal_agent_cgroup_write_errors_total{node}
    #: ticks that failed on an unexpected error (logged; the next tick runs)
    tick_errors: Counter    # tidal_agent_tick_errors_total{node}
    #: node Events given up: rejected for good by the API server, or too many waiting
    node_events_dropped: Counter  # tidal_agent_node_events_dropped_total{node}


#: every (resource, reason) a node's evictions are counted under (watermarks: cpu and memory; PSI
#: interference: its resources, io included)
EVICTION_SERIES = (("cpu", "watermark"), ("memory", "watermark"),
                   ("cpu", "psi"), ("memory", "psi"), ("io", "psi"))
#: why an eviction Tidal asked for did not happen: a PodDisruptionBudget refused it (the pod is
#: tried again later, the next candidate at once), or the request failed (an API error or timeout)
EVICTION_FAILURE_REASONS = ("disruption-budget", "api-error")


def zero_evictions(metrics: NodeMetrics, node: str) -> None:
    """Create the node's ``tidal_evictions_total`` series at 0 when its agent starts. A series
    that appears at 1 shows no ``increase()`` in Prometheus, so without this a node's first
    eviction would be missing from every rate, alert and chart (the console's evictions chart).
    The same for ``tidal_eviction_failures_total``."""
    for resource, reason in EVICTION_SERIES:
        metrics.evictions.labels(node, resource, reason)
    for reason in EVICTION_FAILURE_REASONS:
        metrics.eviction_failures.labels(node, reason)


def node_metrics(registry: CollectorRegistry | None = None) -> NodeMetrics:
    r = REGISTRY if registry is None else registry
    return NodeMetrics(
        node_cpu=Gauge("tidal_node_cpu_usage_millicores", "Node CPU usage (all processes)",
                       ["node"], registry=r),
        node_memory=Gauge("tidal_node_memory_usage_bytes", "Node memory usage (MemTotal - MemAvailable)",
                          ["node"], registry=r),
        qos_cpu=Gauge("tidal_qos_cpu_usage_millicores", "CPU usage of the pods of a QoS level",
                      ["node", "qos"], registry=r),
        qos_memory=Gauge("tidal_qos_memory_usage_bytes", "Memory working set of the pods of a QoS level",
                         ["node", "qos"], registry=r),
        evicting=Gauge("tidal_node_evicting", "1 while the node evicts BE pods for this resource",
                       ["node", "resource"], registry=r),
        tainted=Gauge("tidal_node_offline_evicting_taint",
                      "1 while the node carries colocation.tidal.io/offline-evicting:NoSchedule",
                      ["node"], registry=r),
        evictions=Counter("tidal_evictions", "BE pods evicted by watermark or interference",
                          ["node", "resource", "reason"], registry=r),
        eviction_failures=Counter(
            "tidal_eviction_failures",
            "Evictions asked for that did not happen: refused by a PodDisruptionBudget (disruption-budget) "
            "or the request failed (api-error)", ["node", "reason"], registry=r),
        be_cpu_quota=Gauge("tidal_be_cpu_quota_millicores",
                           "CPU quota of the BE parent cgroup (BE CPU suppression; the node's CPUs while "
                           "cpuSuppression.quota onInterference holds none in force)", ["node"], registry=r),
        online_runqueue_delay=Gauge(
            "tidal_online_runqueue_delay_microseconds",
            "Mean run-queue delay per scheduling slice of the online (HLS/LS) pods' threads",
            ["node"], registry=r),
        online_runqueue_wait=Gauge(
            "tidal_online_runqueue_wait_ratio",
            "Time the online pods' threads waited on a run queue per second of wall time (summed over threads)",
            ["node"], registry=r),
        be_cpu_throttles=Counter(
            "tidal_be_cpu_interference_throttles",
            "Times the BE CPU quota was lowered because online threads waited on a run queue",
            ["node"], registry=r),
        online_sched_slice_pods=Gauge(
            "tidal_online_sched_slice_pods",
            "Online pods whose threads ask for the short scheduling slice (features.onlineSchedSlice)",
            ["node"], registry=r),
        disk_max_request=Gauge(
            "tidal_disk_max_request_kib",
            "The largest request a disk of the node is sent, in KiB (queue/max_sectors_kb; features.blockIO)",
            ["node", "disk"], registry=r),
        psi=Gauge("tidal_psi_some_avg10_percent", "Pressure stall information, some avg10",
                  ["node", "resource"], registry=r),
        be_memory_reclaims=Counter(
            "tidal_be_memory_reclaim_requests",
            "memory.reclaim writes the kernel took for BE pods (features.memoryReclaim, cgroup v2)",
            ["node"], registry=r),
        be_memory_reclaim_bytes=Counter(
            "tidal_be_memory_reclaim_requested_bytes",
            "Bytes those memory.reclaim writes asked the kernel to reclaim from BE pods",
            ["node"], registry=r),
        cgroup_writes=Counter("tidal_agent_cgroup_writes", "cgroup files the QoS engine changed",
                              ["node", "strategy"], registry=r),
        cgroup_errors=Counter("tidal_agent_cgroup_write_errors", "cgroup writes that failed",
                              ["node"], registry=r),
        tick_errors=Counter("tidal_agent_tick_errors", "agent ticks (sample, QoS round) that failed on an "
                            "unexpected error; the next tick runs", ["node"], registry=r),
        node_events_dropped=Counter(
            "tidal_agent_node_events_dropped",
            "Node Events the agent gave up sending: rejected for good by the API server (a 4xx other than "
            "408 and 429), or the oldest of too many waiting", ["node"], registry=r),
    )


@dataclass(frozen=True)
class ManagerMetrics:
    """What tidal-manager's oversell master reports, per node it oversells."""

    #: the batch resources the master published (resource = cpu in millicores, memory in bytes)
    batch_allocatable: Gauge  # tidal_node_batch_allocatable{node,resource}
    #: what BE pods bound to the node request of them
    batch_requested: Gauge    # tidal_node_batch_requested{node,resource}
    cycles: Counter           # tidal_oversell_cycles_total{result}
    #: nodes whose batch resources a cycle could not write (the next cycle tries again)
    write_failures: Counter   # tidal_oversell_write_failures_total{node}
    #: BatchResourcesDropped Events given up (rejected for good, or the oldest of too many waiting)
    events_dropped: Counter   # tidal_oversell_events_dropped_total
    last_cycle: Gauge         # tidal_oversell_last_cycle_timestamp_seconds


def manager_metrics(registry: CollectorRegistry | None = None) -> ManagerMetrics:
    r = REGISTRY if registry is None else registry
    return ManagerMetrics(
        batch_allocatable=Gauge("tidal_node_batch_allocatable",
                                "Batch resources published on the node (cpu: millicores, memory: bytes)",
                                ["node", "resource"], registry=r),
        batch_requested=Gauge("tidal_node_batch_requested",
                              "Batch resources requested by BE pods on the node (cpu: millicores, memory: bytes)",
                              ["node", "resource"], registry=r),
        cycles=Counter("tidal_oversell_cycles", "Oversell master cycles, by result (ok, error)",
                       ["result"], registry=r),
        write_failures=Counter("tidal_oversell_write_failures",
                               "Cycles that could not write the node's batch resources or its NodeProfile's "
                               "breakdown (the node keeps what it carried; the next cycle tries again)",
                               ["node"], registry=r),
        events_dropped=Counter("tidal_oversell_events_dropped",
                               "BatchResourcesDropped Events the oversell master gave up sending: rejected for good "
                               "by the API server, or the oldest of too many waiting", registry=r),
        last_cycle=Gauge("tidal_oversell_last_cycle_timestamp_seconds",
                         "Unix time the last successful oversell cycle ended", registry=r),
    )


@dataclass(frozen=True)
class ConsoleMetrics:
    """What tidal-console reports about its own API."""

    requests: Counter        # tidal_console_requests_total{route,method,code}
    latency: Histogram       # tidal_console_request_duration_seconds{route}
    denials: Counter         # tidal_console_auth_denials_total{reason}
    prometheus_errors: Counter  # tidal_console_prometheus_errors_total
    writes: Counter          # tidal_console_writes_total{kind,result}


def console_metrics(registry: CollectorRegistry | None = None) -> ConsoleMetrics:
    r = REGISTRY if registry is None else registry
    return ConsoleMetrics(
        requests=Counter("tidal_console_requests", "API requests answered", ["route", "method", "code"],
                         registry=r),
        latency=Histogram("tidal_console_request_duration_seconds", "Time to answer one API request",
                          ["route"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                          registry=r),
        denials=Counter("tidal_console_auth_denials",
                        "Requests refused: unauthenticated (no or bad token) or forbidden (SubjectAccessReview)",
                        ["reason"], registry=r),
        prometheus_errors=Counter("tidal_console_prometheus_errors", "Monitoring queries Prometheus did not answer",
                                  registry=r),
        writes=Counter("tidal_console_writes", "Changes made through the console, by kind (node, policy) and result",
                       ["kind", "result"], registry=r),
    )


@dataclass(frozen=True)
class SchedulerUsageMetrics:
    """Node usage under node_exporter's names, which Volcano's Prometheus source queries for its
    ``usage`` plugin (``pkg/scheduler/metrics/source/metrics_client_prometheus.go``)::

        avg_over_time(clamp_min(100 - (avg by (instance) (rate(node_cpu_seconds_total{mode="idle",
            instance="<node>"}[5m])) * 100), 0)[10m:30s])
        100*avg_over_time(((1-node_memory_MemAvailable_bytes{instance="<node>"}
            /node_memory_MemTotal_bytes{instance="<node>"}))[10m:30s])

    Not ``tidal_``-prefixed: these are node_exporter's names, kept so Volcano reads them. Each
    series has a ``node`` label; the scrape copies it into ``instance`` (Volcano matches
    ``instance`` against the node name). The CPU counter is one series per node (``cpu="all"``)
    whose rate is the node's idle fraction, as node_exporter's per-CPU series averaged.
    """

    cpu_seconds: Counter   # node_cpu_seconds_total{node,cpu="all",mode="idle"}
    mem_available: Gauge   # node_memory_MemAvailable_bytes{node}
    mem_total: Gauge       # node_memory_MemTotal_bytes{node}

    def observe(self, node: str, idle_fraction: float, seconds: float, total: float, used: float) -> None:
        self.cpu_seconds.labels(node, "all", "idle").inc(max(0.0, min(1.0, idle_fraction)) * max(0.0, seconds))
        self.mem_total.labels(node).set(total)
        self.mem_available.labels(node).set(max(0.0, total - used))


def scheduler_usage_metrics(registry: CollectorRegistry | None = None) -> SchedulerUsageMetrics:
    r = REGISTRY if registry is None else registry
    return SchedulerUsageMetrics(
        cpu_seconds=Counter("node_cpu_seconds", "Seconds the node's CPUs spent idle, per CPU on average",
                            ["node", "cpu", "mode"], registry=r),
        mem_available=Gauge("node_memory_MemAvailable_bytes", "Memory available", ["node"], registry=r),
        mem_total=Gauge("node_memory_MemTotal_bytes", "Memory total", ["node"], registry=r),
    )
