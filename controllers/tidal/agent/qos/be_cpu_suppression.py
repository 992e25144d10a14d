# SPDX-License-Identifier: Apache-2.0
"""BE CPU suppression: a dynamic CPU quota on the parent of all BE pods.

Which cgroup: BE pods have no native cpu/memory requests, so Kubernetes classes them BestEffort
and the kubelet puts them under ``kubepods/besteffort`` (systemd driver:
``kubepods.slice/kubepods-besteffort.slice``). That cgroup is the one parent holding every BE pod
and nothing online (HLS/LS pods are Guaranteed or Burstable, under ``kubepods`` and
``kubepods/burstable``), so one quota there caps all BE pods together, and a new BE pod is capped
the moment it starts. (Non-Tidal BestEffort pods there are capped too: they are offline by
nature.)

The quota, recomputed every round (the agent runs it every second)::

    allowed = max(floor, node CPUs × threshold − online usage − system usage)

with ``threshold`` a fraction (default 0.65) and ``floor`` in millicores (default 500 = 0.5 CPU)
so BE pods are never frozen entirely. v1: ``cpu.cfs_quota_us`` (period 100000); v2: ``cpu.max``.
System usage is the node's usage outside Tidal's pods (daemons, kubelet, runtime, kernel, pods
without a QoS level), counted
while ``overselling.includeSystemUsage`` is on (the default; Koordinator's suppression subtracts
it too): a node busy with its own daemons leaves BE less, so the online pods keep the idle CPU
time they wake up into (measured: docs/benchmarks.md, Isolation).

When the quota is in force (``cpuSuppression.quota``): ``always``, every round, as above;
``onInterference`` (the default), only while BE is shown to delay the online pods' threads: this
feature then writes nothing, and :mod:`.be_cpu_interference` puts the quota in force when the
online threads' run-queue delay it attributes to BE stays above its target, and lifts it when the
allowance is back at this bound. Without the delay signal (``cpuInterference`` off, no
``schedstat``) ``onInterference`` is ``always``. Why: on the 2-vCPU development guest a quota here,
even one never cut below 1.9 of 2 CPUs, cost the online server's p99 2.4 x solo, while BE at its
idle priority with no quota kept it at solo (docs/benchmarks.md, Isolation, 2026-11-29).
"""

from __future__ import annotations

from collections.abc import Callable

from tidal.agent.collector.cgroups import CgroupVersion
from tidal.api.policy import ColocationPolicy, SuppressionQuota

from .be_batch_resources import CFS_PERIOD_US, milli_cpu_to_quota
from .feature import StrategyFeature
from .strategy import CgroupWrite, NodeState, be_parent_classes, cpu_dir

__all__ = ["feature", "BECPUSuppression", "bound_millicores", "quota_on_interference", "quota_writes",
           "suppressed_millicores"]


def suppressed_millicores(
    node_cpus: float, online_millicores: float, threshold: float, floor_millicores: int
) -> int:
    allowed = node_cpus * 1000 * threshold - online_millicores
    return max(int(floor_millicores), int(allowed))


def bound_millicores(state: NodeState, threshold: float, floor_millicores: int) -> int:
    """This round's suppression quota: what online usage and system usage (0 unless
    ``overselling.includeSystemUsage``) leave under the threshold, at least the floor."""
    return suppressed_millicores(state.node_cpus, state.online_usage_millicores + state.system_usage_millicores,
                                 threshold, floor_millicores)


def quota_on_interference(policy: ColocationPolicy, supports: Callable[[str], bool]) -> bool:
    """Whether the quota waits for the interference control (``quota: onInterference`` with the
    delay signal): suppression then writes nothing of its own."""
    isolation = policy.be_isolation
    return (isolation.cpu_suppression.quota is SuppressionQuota.ON_INTERFERENCE
            and isolation.cpu_interference.enabled and supports("schedstat"))


def quota_writes(state: NodeState, millicores: float) -> list[CgroupWrite]:
    """The quota of ``millicores`` on the parent of all BE pods (v1 period and quota, v2
    ``cpu.max``); while BE pods sit below two parents (``kubepods/besteffort`` and the BE idle
    group: pods created before the idle group was switched on), each parent gets an equal share,
    so that BE together stays within ``millicores``."""
    classes = be_parent_classes(state)
    quota = milli_cpu_to_quota(int(millicores) // len(classes))
    writes = []
    for qos_class in classes:
        path = cpu_dir(state, state.layout.qos_relpath(qos_class))
        if state.layout.version is CgroupVersion.V1:
            writes += [CgroupWrite(path, "cpu.cfs_period_us", str(CFS_PERIOD_US)),
                       CgroupWrite(path, "cpu.cfs_quota_us", str(quota))]
        else:
            writes.append(CgroupWrite(path, "cpu.max", f"{quota} {CFS_PERIOD_US}"))
    return writes


class BECPUSuppression:
    name = "be-cpu-suppression"
    uses_usage = True

    def __init__(self, threshold: float = 0.65, floor_millicores: int = 500) -> None:
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold {threshold}: must be in (0, 1]")
        if floor_millicores <= 0:
            raise ValueError(f"floor {floor_millicores} millicores: must be positive")
        self.threshold = threshold
        self.floor_millicores = floor_millicores

    def allowed_millicores(self, state: NodeState) -> int:
        return bound_millicores(state, self.threshold, self.floor_millicores)

    def plan(self, state: NodeState) -> list[CgroupWrite]:
        if quota_on_interference(state.policy, state.supports):
            return []  # the interference control decides whether a quota is in force
        return quota_writes(state, self.allowed_millicores(state))


def feature() -> StrategyFeature:
    """``beIsolation.cpuSuppression``, recomputed every round (it follows online usage)."""
    def build(policy):
        s = policy.be_isolation.cpu_suppression
        return BECPUSuppression(threshold=s.threshold_percent / 100, floor_millicores=s.floor_millicores)
    return StrategyFeature(BECPUSuppression.name, lambda p: p.be_isolation.cpu_suppression.enabled, build,
                           uses_usage=BECPUSuppression.uses_usage)
