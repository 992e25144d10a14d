# SPDX-License-Identifier: Apache-2.0
"""Kernel QoS levels (``features.kernelQoSLevel``): openEuler's ``cpu.qos_level`` for every pod
by its level, and ``memory.qos_level`` for BE pods, where the kernel has the files.

openEuler kernels (and kernels built from them) add two cgroup v1 files:

* ``cpu.qos_level``: 0 (the default) is online, -1 offline: online tasks preempt offline ones
  unconditionally. Newer kernels (multi-level co-location scheduling) also accept 1 and 2,
  online levels above 0, and -2; older ones refuse anything but 0 and -1 (EINVAL). The level
  counts among sibling cgroups, and a new cgroup inherits its parent's level.
* ``memory.qos_level``: 0 online, -1 offline: offline cgroups are chosen first when the kernel
  must kill for memory (only while ``vm.memcg_qos_enable`` is 1).

Levels, by Volcano's names for them (one table, :data:`CPU_QOS_LEVEL`): LC 2, HLS 1, LS 0, BE
-1. A pod's name is its Tidal level's: Tidal's HLS is Volcano's LC (2), Tidal's LS is LS (0)
unless the pod says ``volcano.sh/qos-level: HLS`` (1; that alias is read only when the
canonical ``colocation.tidal.io/qos-level`` is absent), BE is BE (-1). Pods without a Tidal level
are left alone. Volcano's agent writes only the pod cgroup, rubik the pod and its containers
(a container that started before the write keeps the level it inherited): here both. BE pods'
parent (``kubepods/besteffort``, the sibling of the online pods' groups) is made offline too,
the value :mod:`.be_cpu_priority` writes there: the two features agree on every file they share.

Nothing is detected beyond the files: a kernel with ``cpu.qos_level`` but only two levels
refuses the first positive level; the executor reports the refused write and this feature, from
then on (until the agent restarts), writes 0, what such a kernel accepts, for LC and HLS pods,
with one warning naming the kernel's reason. Switched off, the executor's journal puts every
original value back (a kernel that refuses an offline group going online again leaves that file
as it is, reported by the restore).
"""
from __future__ import annotations

import logging

from tidal.agent.collector.cgroups import PodQOSClass
from tidal.api.qos import QoSLevel

from .feature import EMPTY, Context, Plan, Report
from .pod_features import FeaturePodState
from .strategy import CgroupWrite, NodeState, PodState, cpu_dir, memory_dir

__all__ = ["CPU_QOS_LEVEL", "CPU_FILE", "MEMORY_FILE", "KernelQoSLevel", "kernel_level_name", "plan_writes"]

log = logging.getLogger(__name__)

CPU_FILE = "cpu.qos_level"
MEMORY_FILE = "memory.qos_level"
CPU_CAPABILITY = "openeuler.cpu.qos_level"
MEMORY_CAPABILITY = "openeuler.memory.qos_level"
#: Volcano's level names -> cpu.qos_level (issue 20). Volcano's own agent
#: (pkg/agent/apis/extension/qos.go) maps LC and HLS to 2 and LS to 1: see docs/node-engine.md.
CPU_QOS_LEVEL = {"LC": 2, "HLS": 1, "LS": 0, "BE": -1}
OFFLINE = -1
#: the level every cgroup has until it is written: online
ONLINE = 0
MEMCG_QOS_ENABLE = "sys/vm/memcg_qos_enable"


def kernel_level_name(pod: PodState) -> str | None:
    """Volcano's name for the pod's kernel level, or None for a pod without a Tidal level."""
    if pod.tidal_level is QoSLevel.HLS:
        return "LC"
    if pod.tidal_level is QoSLevel.LS:
        volcano = pod.volcano_qos_level if isinstance(pod, FeaturePodState) else None
        return "HLS" if volcano == "HLS" else "LS"
    if pod.tidal_level is QoSLevel.BE:
        return "BE"
    return None


def plan_writes(state: NodeState, multilevel: bool = True) -> list[CgroupWrite]:
    """The files to write (pure). ``multilevel`` False: the kernel refused a level above 0, so
    online levels are written 0 (what a two-level kernel accepts)."""
    return [w for _, _, writes in _plan_by_pod(state, multilevel) for w in writes]


def _plan_by_pod(state: NodeState, multilevel: bool) -> list[tuple[PodState | None, str, list[CgroupWrite]]]:
    """(pod or None for BE pods' parent, level name, its writes), in write order."""
    cpu, memory = state.supports(CPU_CAPABILITY), state.supports(MEMORY_CAPABILITY)
    if not (cpu or memory):
        return []
    layout = state.layout

    def files(rels: list, level: int) -> list[CgroupWrite]:
        out = []
        if cpu:
            out += [CgroupWrite(cpu_dir(state, rel), CPU_FILE, str(level)) for rel in rels]
        if memory and level < 0:  # memory.qos_level knows online (0, the default) and offline
            out += [CgroupWrite(memory_dir(state, rel), MEMORY_FILE, str(OFFLINE)) for rel in rels]
        return out

    planned: list[tuple[PodState | None, str, list[CgroupWrite]]] = []
    if state.be_pods():
        planned.append((None, "BE", files([layout.qos_relpath(PodQOSClass.BEST_EFFORT)], OFFLINE)))
    for pod in state.pods:
        name = kernel_level_name(pod)
        if name is None:
            continue
        level = CPU_QOS_LEVEL[name]
        if level > ONLINE and not multilevel:
            level = ONLINE
        rels = [layout.pod_relpath(pod.uid, pod.qos_class),
                *(layout.container_relpath(pod.uid, pod.qos_class, c.id) for c in pod.containers)]
        planned.append((pod, name, files(rels, level)))
    return planned


class KernelQoSLevel:
    name = "kernel-qos-level"
    #: recomputed every round: the plan follows what the kernel refused (cheap: no usage read)
    uses_usage = True

    def __init__(self) -> None:
        #: False once the kernel refused a level above 0 (an openEuler kernel with two levels)
        self.multilevel = True

    def enabled(self, ctx: Context) -> bool:
        return ctx.policy.features.kernel_qos_level.enabled

    def sense(self, ctx: Context) -> str | None:
        """``vm.memcg_qos_enable`` (None: no such file, or memory.qos_level not offered)."""
        if not ctx.supports(MEMORY_CAPABILITY):
            return None
        try:
            return (ctx.options.proc_root / MEMCG_QOS_ENABLE).read_text(encoding="ascii").strip()
        except OSError:
            return None

    def plan(self, ctx: Context) -> Plan:
        planned = _plan_by_pod(ctx.state, self.multilevel)
        writes = tuple(w for _, _, pod_writes in planned for w in pod_writes)
        if not writes:
            return EMPTY
        decisions = []
        for pod, name, pod_writes in planned:
            if pod is not None and pod_writes:
                values = ", ".join(sorted({f"{w.file} {w.value}" for w in pod_writes}))
                decisions.append(Report(f"kernel QoS level {name} for pod {pod.namespace}/{pod.name}: {values}",
                                        logger=__name__, written=tuple(w.key for w in pod_writes)))
        memory_keys = tuple(w.key for w in writes if w.file == MEMORY_FILE)
        if memory_keys and ctx.observed.get(self.name) == "0":
            decisions.append(Report(
                "memory.qos_level written, but vm.memcg_qos_enable is 0: the kernel ignores it until "
                "'sysctl -w vm.memcg_qos_enable=1' (Tidal's agent writes only cgroup files)",
                level=logging.WARNING, logger=__name__, written=memory_keys))
        return Plan(writes=writes, decisions=tuple(decisions))

    def undo(self, ctx: Context) -> Plan:
        return EMPTY  # cgroup files only: the executor's journal puts them back

    def settle(self, ctx: Context, outcome) -> None:
        """A refused level above 0: the kernel has only online and offline; write 0 from now on."""
        if not self.multilevel:
            return
        for write, problem in outcome.result.errors:
            if write.file == CPU_FILE and int(write.value) > ONLINE:
                self.multilevel = False
                log.warning("this kernel refused cpu.qos_level %s (%s): it offers only the levels 0 "
                            "(online) and -1 (offline); LC and HLS pods are written 0 from now on",
                            write.value, problem)
                return
