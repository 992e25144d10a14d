# SPDX-License-Identifier: Apache-2.0
"""BE CPU priority: BE pods run at the lowest CPU priority the kernel offers.

On every BE pod cgroup (containers below a pod only compete with each other):

* ``cpu.idle = 1`` where the kernel has it (v1 and v2, Linux >= 5.15): SCHED_IDLE for the group,
  so any online task preempts it;
* otherwise the minimum weight: ``cpu.shares = 2`` (v1) or ``cpu.weight = 1`` (v2);
* and, on openEuler kernels with ``cpu.qos_level``, ``cpu.qos_level = -1`` (offline).

On the parent of all BE pods (``kubepods/besteffort``, the sibling of the online pods' groups:
a group's idleness or weight only counts among its siblings): the minimum weight and
``cpu.qos_level``, never ``cpu.idle``. The kubelet owns that group's weight and writes it at every
start (``cpu.shares = 2``, ``cpu.weight = 1``); the kernel refuses a weight on an idle group
(EINVAL), and a kubelet that cannot write it does not start ("failed to initialize top level
QOS containers"): an idle parent made every kubelet restart on a Tidal node fail (issue 15's
kubelet-restart fault). The minimum weight is the kubelet's own value, so both agree.
"""

from __future__ import annotations

from tidal.agent.collector.cgroups import CgroupVersion, PodQOSClass

from .feature import StrategyFeature
from .strategy import CgroupWrite, NodeState, be_parent_classes, cpu_dir

__all__ = ["feature", "BECPUPriority", "MIN_SHARES", "MIN_WEIGHT", "OPENEULER_OFFLINE_QOS_LEVEL", "minimum_weight"]

MIN_SHARES = 2
MIN_WEIGHT = 1
OPENEULER_OFFLINE_QOS_LEVEL = -1


def minimum_weight(version: CgroupVersion) -> tuple[str, str]:
    """The file and value of the minimum CPU weight, the kubelet's for BestEffort pods: v1
    ``cpu.shares`` 2, v2 ``cpu.weight`` 1."""
    return ("cpu.shares", str(MIN_SHARES)) if version is CgroupVersion.V1 else ("cpu.weight", str(MIN_WEIGHT))


class BECPUPriority:
    name = "be-cpu-priority"
    uses_usage = False

    def plan(self, state: NodeState) -> list[CgroupWrite]:
        writes: list[CgroupWrite] = []
        # The priority must hold where BE competes with online pods: a group's cpu.idle or
        # weight only counts among its siblings. BE pods are BestEffort, so their parent
        # (kubepods/besteffort) is the sibling of the online pods' (kubepods/burstable and the
        # Guaranteed pods in kubepods): it keeps the minimum weight — the kubelet's own value;
        # never cpu.idle, which makes the kubelet's weight write fail and the kubelet not start
        # (see the module's docstring). Each BE pod is idle among the BestEffort pods.
        # The BE idle group (beside kubepods, Tidal's own: no kubelet writes its weight) is idle
        # itself: there BE is idle against the online pods and the node's daemons alike.
        parent = cpu_dir(state, state.layout.qos_relpath(PodQOSClass.BEST_EFFORT))
        classes = be_parent_classes(state) if state.be_pods() else []
        if state.policy.be_isolation.cpu_priority.idle_group and PodQOSClass.BE_IDLE_GROUP not in classes:
            classes.append(PodQOSClass.BE_IDLE_GROUP)  # idle before the first BE container lands there
        paths = [cpu_dir(state, state.layout.qos_relpath(c)) for c in classes]
        paths += [cpu_dir(state, state.layout.pod_relpath(p.uid, p.qos_class)) for p in state.be_pods()]
        for path in paths:
            if state.supports("cpu.idle") and path != parent:
                writes.append(CgroupWrite(path, "cpu.idle", "1"))
            else:
                writes.append(CgroupWrite(path, *minimum_weight(state.layout.version)))
            if state.supports("openeuler.cpu.qos_level"):
                writes.append(CgroupWrite(path, "cpu.qos_level", str(OPENEULER_OFFLINE_QOS_LEVEL)))
        return writes


def feature() -> StrategyFeature:
    """``beIsolation.cpuPriority``."""
    return StrategyFeature(BECPUPriority.name, lambda p: p.be_isolation.cpu_priority.enabled,
                           lambda p: BECPUPriority(), uses_usage=BECPUPriority.uses_usage)
