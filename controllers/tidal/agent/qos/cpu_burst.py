# SPDX-License-Identifier: Apache-2.0
"""CPU burst (elastic CFS throttling) for pods that opt in.

A CFS quota caps a cgroup at ``quota`` µs of CPU per 100 ms period, so a latency-sensitive
server whose *average* use is well below its limit is still throttled by short bursts (a few
requests arriving together). CFS burst (kernel >= 5.14) lets a cgroup bank unused quota, up to
``burst`` µs, and spend it in a later period: ``cpu.cfs_burst_us`` (v1) / ``cpu.max.burst`` (v2).

Who: every pod annotated ``colocation.tidal.io/cpu-burst: "true"`` (or Volcano's
``volcano.sh/enable-quota-burst``, or only a burst time: see
:func:`tidal.api.qos.cpu_burst_of`), whatever its Tidal QoS level and also without one — as
Volcano's agent, which bursts any pod that asks. It is the one thing the agent does to a pod
without a QoS level: the pod asked for it by annotation. BE pods excepted (:func:`bursts`).
Where: every container with a CPU limit and the pod cgroup (whose quota, the sum of the limits,
throttles too). How much: ``colocation.tidal.io/cpu-burst-quota-us``
(``volcano.sh/quota-burst-time``), default (also for 0) and maximum the container's quota (the
kernel refuses a burst above the quota) — Volcano's ``cfs_burst_us = cfs_quota_us``.

Dynamic by load (Tidal's addition; Volcano's agent sets the burst once): online CPU usage in
percent of the node's CPUs (BE pods run at idle priority and yield to a burst, so online load
is what a burst competes with): full burst up to ``loadHighPercent`` (60), shrinking linearly to
none at ``loadAlertPercent`` (80), in steps of 5 % so a hovering load does not rewrite files
every round.
"""
from __future__ import annotations

import math
from typing import TypeGuard

from tidal.agent.collector.cgroups import CgroupVersion
from tidal.api.qos import QoSLevel

from .be_batch_resources import milli_cpu_to_quota
from .feature import StrategyFeature
from .pod_features import FeaturePodState
from .strategy import CgroupWrite, NodeState, PodState, cpu_dir

__all__ = ["feature", "CPUBurst", "bursts", "burst_factor", "burst_us", "burst_file"]

STEP = 0.05


def bursts(pod: PodState) -> TypeGuard[FeaturePodState]:
    """Whether ``pod`` gets CPU burst: it asks for it (annotation enabled), it has started
    containers with their CPU data, and it is not BE. Its Tidal level does not matter otherwise:
    HLS, LS and pods without a level alike. BE pods never burst: their CFS quota is Tidal's own
    (the batch-cpu limit, under the suppressed BE parent), and a burst would spend banked quota
    of offline work exactly when online load rises."""
    return (isinstance(pod, FeaturePodState) and pod.tidal_level is not QoSLevel.BE
            and pod.cpu_burst is not None and pod.cpu_burst.enabled and bool(pod.cpu))


def burst_factor(load_percent: float, high_percent: float, alert_percent: float) -> float:
    """1.0 at or below ``high``, 0.0 at or above ``alert``, linear in between (in 5 % steps,
    rounded down so a burst never exceeds what the load allows)."""
    if load_percent <= high_percent:
        return 1.0
    if load_percent >= alert_percent:
        return 0.0
    fraction = (alert_percent - load_percent) / (alert_percent - high_percent)
    return math.floor(fraction / STEP + 1e-9) * STEP


def burst_us(quota_us: int, requested_us: int | None, factor: float) -> int:
    """The burst to write: the requested burst (default — None or 0 — the quota), capped at the
    quota, scaled."""
    base = quota_us if not requested_us else min(requested_us, quota_us)
    return int(base * factor)


def burst_file(version: CgroupVersion) -> str:
    return "cpu.cfs_burst_us" if version is CgroupVersion.V1 else "cpu.max.burst"


class CPUBurst:
    name = "cpu-burst"
    uses_usage = True

    def __init__(self, load_high_percent: float = 60, load_alert_percent: float = 80) -> None:
        if not 0 <= load_high_percent < load_alert_percent <= 100:
            raise ValueError(
                f"loadHighPercent {load_high_percent}, loadAlertPercent {load_alert_percent}: "
                "need 0 <= high < alert <= 100")
        self.high = load_high_percent
        self.alert = load_alert_percent

    def factor(self, state: NodeState) -> float:
        if state.node_cpus <= 0:
            return 0.0
        load = state.online_usage_millicores / (state.node_cpus * 1000) * 100
        return burst_factor(load, self.high, self.alert)

    def plan(self, state: NodeState) -> list[CgroupWrite]:
        if not state.supports("cpu.cfs_burst"):
            return []
        layout = state.layout
        file = burst_file(layout.version)
        factor = self.factor(state)
        writes: list[CgroupWrite] = []
        for pod in state.pods:
            if not bursts(pod):
                continue
            requested = pod.cpu_burst.quota_us
            quotas = []
            for container in pod.cpu:
                if container.limit_millicores <= 0:
                    continue
                quota = milli_cpu_to_quota(container.limit_millicores)
                quotas.append(quota)
                rel = layout.container_relpath(pod.uid, pod.qos_class, container.id)
                writes.append(CgroupWrite(cpu_dir(state, rel), file,
                                          str(burst_us(quota, requested, factor))))
            if quotas and len(quotas) == len(pod.cpu):
                # The pod cgroup's quota is the sum of its containers' (kubelet); its burst is
                # the sum of theirs so a container's burst is not throttled one level up.
                pod_quota = milli_cpu_to_quota(sum(c.limit_millicores for c in pod.cpu))
                total = min(pod_quota, sum(burst_us(q, requested, factor) for q in quotas))
                writes.insert(len(writes) - len(quotas), CgroupWrite(
                    cpu_dir(state, layout.pod_relpath(pod.uid, pod.qos_class)), file, str(total)))
        return writes


def feature() -> StrategyFeature:
    """``features.cpuBurst``, recomputed every round (it follows online load)."""
    def build(policy):
        burst = policy.features.cpu_burst
        return CPUBurst(burst.load_high_percent, burst.load_alert_percent)
    return StrategyFeature(CPUBurst.name, lambda p: p.features.cpu_burst.enabled, build,
                           uses_usage=CPUBurst.uses_usage)
