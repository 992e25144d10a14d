# SPDX-License-Identifier: Apache-2.0
"""BE resources from batch resources.

BE containers request ``kubernetes.io/batch-cpu`` (millicores) and ``kubernetes.io/batch-memory``
(bytes) instead of native cpu/memory, so the kubelet sets no CPU or memory limits for them (they
are BestEffort pods). This strategy sets them, on every BE container and on the pod cgroup (the
sum of its containers, when every container asks for the resource):

=========  ===========================================  =================================
resource   v1                                           v2
=========  ===========================================  =================================
CPU limit  ``cpu.cfs_period_us`` = 100000,              ``cpu.max`` = ``<quota> 100000``
           ``cpu.cfs_quota_us`` = m × 100 (≥ 1000)
CPU share  ``cpu.shares`` = m × 1024 / 1000 (≥ 2)       ``cpu.weight`` (kubelet's conversion)
memory     ``memory.limit_in_bytes`` = bytes            ``memory.max`` = bytes
=========  ===========================================  =================================

Shares go on containers only: the pod cgroup's weight belongs to :mod:`.be_cpu_priority`.
Tidal's NRI plugin sets a container's values as it is created, so the agent finds them in place
and has no original to journal: each write names the runtime's BestEffort value (:data:`PRISTINE`)
as the original for that case, so switching the strategy off puts it back.
On v1 a child's quota may not exceed its parent's; the pod quota (the sum) is planned before the
containers, and a lowering that the kernel refuses converges on the next round.
"""

from __future__ import annotations

import os
from dataclasses import replace

from tidal.agent.collector.cgroups import CgroupVersion, PodQOSClass

from .feature import StrategyFeature
from .strategy import CgroupWrite, NodeState, cpu_dir, memory_dir

__all__ = [
    "feature",
    "BEBatchResources",
    "CFS_PERIOD_US",
    "MIN_QUOTA_US",
    "PAGE_SIZE",
    "PRISTINE",
    "milli_cpu_to_quota",
    "milli_cpu_to_shares",
    "shares_to_weight",
]

#: The kernel stores memory limits in pages and reads them back rounded down; planning the
#: rounded value keeps apply idempotent.
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
CFS_PERIOD_US = 100_000
MIN_QUOTA_US = 1_000  # the kernel's minimum cfs quota (1 ms)


#: What the kubelet and runtime give a BestEffort pod's and container's cgroup files: the
#: originals journalled for values found already set (by Tidal's NRI plugin at creation).
PRISTINE = {
    CgroupVersion.V1: {"cpu.cfs_period_us": str(CFS_PERIOD_US), "cpu.cfs_quota_us": "-1", "cpu.shares": "2",
                       # unlimited, as v1 reads it back: the largest page-aligned long
                       "memory.limit_in_bytes": str((2 ** 63 - 1) // PAGE_SIZE * PAGE_SIZE)},
    CgroupVersion.V2: {"cpu.max": f"max {CFS_PERIOD_US}", "cpu.weight": "1", "memory.max": "max"},
}
BEST_EFFORT = (PodQOSClass.BEST_EFFORT, PodQOSClass.BE_IDLE_GROUP)


def milli_cpu_to_quota(millicores: int, period_us: int = CFS_PERIOD_US) -> int:
    return max(MIN_QUOTA_US, millicores * period_us // 1000)


def milli_cpu_to_shares(millicores: int) -> int:
    """The kubelet's ``MilliCPUToShares``."""
    return min(262_144, max(2, millicores * 1024 // 1000))


def shares_to_weight(shares: int) -> int:
    """The kubelet's v1 shares -> v2 weight conversion."""
    return 1 + ((shares - 2) * 9999) // 262_142


class BEBatchResources:
    name = "be-batch-resources"
    uses_usage = False

    def _cpu(self, state: NodeState, path, millicores: int, *, shares: bool) -> list[CgroupWrite]:
        quota = milli_cpu_to_quota(millicores)
        if state.layout.version is CgroupVersion.V1:
            writes = [
                CgroupWrite(path, "cpu.cfs_period_us", str(CFS_PERIOD_US)),
                CgroupWrite(path, "cpu.cfs_quota_us", str(quota)),
            ]
            if shares:
                writes.append(CgroupWrite(path, "cpu.shares", str(milli_cpu_to_shares(millicores))))
        else:
            writes = [CgroupWrite(path, "cpu.max", f"{quota} {CFS_PERIOD_US}")]
            if shares:
                weight = shares_to_weight(milli_cpu_to_shares(millicores))
                writes.append(CgroupWrite(path, "cpu.weight", str(weight)))
        return writes

    @staticmethod
    def _pristine(state: NodeState, writes: list[CgroupWrite]) -> list[CgroupWrite]:
        runtime = PRISTINE[state.layout.version]
        return [replace(w, pristine=runtime.get(w.file)) for w in writes]

    def _memory(self, state: NodeState, path, limit: int) -> CgroupWrite:
        file = "memory.limit_in_bytes" if state.layout.version is CgroupVersion.V1 else "memory.max"
        return CgroupWrite(path, file, str(max(PAGE_SIZE, limit - limit % PAGE_SIZE)))

    def plan(self, state: NodeState) -> list[CgroupWrite]:
        writes: list[CgroupWrite] = []
        layout = state.layout
        for pod in state.be_pods():
            if not pod.containers:
                continue
            start = len(writes)
            pod_rel = layout.pod_relpath(pod.uid, pod.qos_class)
            # the pod-level limits: every container's and sidecar's, started or not (PodState.pod_batch)
            if pod.batch_cpu_millicores > 0:
                writes += self._cpu(state, cpu_dir(state, pod_rel), pod.batch_cpu_millicores, shares=False)
            if pod.batch_memory_bytes > 0:
                writes.append(self._memory(state, memory_dir(state, pod_rel), pod.batch_memory_bytes))
            for container in pod.containers:
                rel = layout.container_relpath(pod.uid, pod.qos_class, container.id)
                if container.batch_cpu_millicores > 0:
                    writes += self._cpu(
                        state, cpu_dir(state, rel), container.batch_cpu_millicores, shares=True
                    )
                if container.batch_memory_bytes > 0:
                    writes.append(self._memory(state, memory_dir(state, rel), container.batch_memory_bytes))
            if pod.qos_class in BEST_EFFORT:  # the runtime's values are known: the plugin's may be there
                writes[start:] = self._pristine(state, writes[start:])
        return writes


def feature() -> StrategyFeature:
    """``beIsolation.batchResources``."""
    return StrategyFeature(BEBatchResources.name, lambda p: p.be_isolation.batch_resources.enabled,
                           lambda p: BEBatchResources(), uses_usage=BEBatchResources.uses_usage)
