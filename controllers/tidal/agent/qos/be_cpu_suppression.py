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
System usage is the node's usage outside the pods (daemons, kubelet, runtime, kernel), counted
while ``overselling.includeSystemUsage`` is on (the default; Koordinator's suppression subtracts
it too): a node busy with its own daemons leaves BE less, so the online pods keep the idle CPU
time they wake up into (measured: docs/benchmarks.md, Isolation).
"""

from __future__ import annotations

from tidal.agent.collector.cgroups import CgroupVersion, PodQOSClass

from .be_batch_resources import CFS_PERIOD_US, milli_cpu_to_quota
from .feature import StrategyFeature
from .strategy import CgroupWrite, NodeState, cpu_dir

__all__ = ["feature", "BECPUSuppression", "bound_millicores", "suppressed_millicores"]


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
        path = cpu_dir(state, state.layout.qos_relpath(PodQOSClass.BEST_EFFORT))
        quota = milli_cpu_to_quota(self.allowed_millicores(state))
        if state.layout.version is CgroupVersion.V1:
            return [
                CgroupWrite(path, "cpu.cfs_period_us", str(CFS_PERIOD_US)),
                CgroupWrite(path, "cpu.cfs_quota_us", str(quota)),
            ]
        return [CgroupWrite(path, "cpu.max", f"{quota} {CFS_PERIOD_US}")]


def feature() -> StrategyFeature:
    """``beIsolation.cpuSuppression``, recomputed every round (it follows online usage)."""
    def build(policy):
        s = policy.be_isolation.cpu_suppression
        return BECPUSuppression(threshold=s.threshold_percent / 100, floor_millicores=s.floor_millicores)
    return StrategyFeature(BECPUSuppression.name, lambda p: p.be_isolation.cpu_suppression.enabled, build,
                           uses_usage=BECPUSuppression.uses_usage)
