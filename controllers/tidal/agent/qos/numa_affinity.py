# SPDX-License-Identifier: Apache-2.0
"""NUMA affinity for LS pods: each new LS container is confined to one NUMA node (cpuset cpus and
mems), the node with the most free CPU, so its threads and memory stay local.

Pure core:

* :func:`parse_cpu_manager_state` reads the kubelet's ``cpu_manager_state`` (static policy): the
  CPUs given exclusively to containers (HLS pods) and the shared pool (``defaultCpuSet``).
* :func:`assign` places containers: a container keeps the NUMA node it was given (no migration);
  a new one goes to the node with the most free CPU (its shareable CPUs — never a CPU the kubelet
  gave exclusively — minus the CPU requests of the LS containers already placed there), lowest
  node id on ties. When even that node is short of the container's request, the next freest nodes
  are added until the request fits (falling back to several nodes rather than none).
* :func:`numa_plan` turns assignments into ``cpuset.cpus`` / ``cpuset.mems`` writes on the
  containers' cgroups (v1: the ``cpuset`` hierarchy; v2: the unified one).

I/O: :func:`read_topology` (``/sys/devices/system/node``) and :class:`NUMAAffinityActuator`, which
applies the plan through :func:`apply` into its own journal (only below the cpuset ``kubepods``
trees), logs ``applied NUMA affinity for LS pod <ns>/<name> on NUMA node N`` once per container,
and restores everything when the feature is switched off or the node leaves colocation. With the
kubelet's static CPU manager the kubelet may rewrite shared containers' cpusets in its reconcile
loop; the actuator re-reads its files every few rounds and puts the confinement back.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tidal.agent.collector.cgroups import CgroupLayout, CgroupVersion
from tidal.api.qos import QoSLevel

from .capabilities import parse_cpu_list
from .pod_features import FeaturePodState
from .strategy import CgroupWrite, RestoreJournal, apply, restore

log = logging.getLogger(__name__)

__all__ = [
    "CPUManagerState", "NUMAAffinityActuator", "Placement", "assign", "format_cpu_list", "numa_plan",
    "parse_cpu_manager_state", "read_topology",
]

JOURNAL_NAME = "numa-journal.json"
DEFAULT_CPU_MANAGER_STATE = Path("/var/lib/kubelet/cpu_manager_state")


@dataclass(frozen=True)
class CPUManagerState:
    policy: str = "none"
    exclusive: frozenset[int] = frozenset()
    default_cpus: frozenset[int] | None = None  # None: no shared pool recorded (policy none)


def parse_cpu_manager_state(text: str) -> CPUManagerState:
    """``{"policyName": "static", "defaultCpuSet": "0,3-7", "entries": {uid: {name: "1-2"}}}``."""
    try:
        data = json.loads(text)
        policy = str(data.get("policyName") or "none")
        exclusive: set[int] = set()
        for containers in (data.get("entries") or {}).values():
            for cpus in (containers or {}).values():
                exclusive.update(parse_cpu_list(cpus))
        default = data.get("defaultCpuSet")
        default_cpus = frozenset(parse_cpu_list(default)) if default else None
    except (ValueError, AttributeError, TypeError) as err:
        raise ValueError(f"cpu_manager_state: {err}") from err
    return CPUManagerState(policy, frozenset(exclusive), default_cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> ``0-2,5,7-8`` (the kernel's list format)."""
    ordered = sorted(set(cpus))
    parts, start = [], None
    for i, cpu in enumerate(ordered):
        if start is None:
            start = cpu
        if i + 1 == len(ordered) or ordered[i + 1] != cpu + 1:
            parts.append(str(start) if start == cpu else f"{start}-{cpu}")
            start = None
    return ",".join(parts)


def read_topology(sys_root: Path = Path("/sys")) -> dict[int, frozenset[int]]:
    """NUMA node id -> its CPUs, from ``<sys_root>/devices/system/node``."""
    base = sys_root / "devices/system/node"
    nodes = parse_cpu_list((base / "online").read_text())
    return {n: frozenset(parse_cpu_list((base / f"node{n}" / "cpulist").read_text())) for n in nodes}


def shareable(topology: Mapping[int, frozenset[int]], cpu_state: CPUManagerState) -> dict[int, frozenset[int]]:
    out = {}
    for node, cpus in topology.items():
        allowed = cpus - cpu_state.exclusive
        if cpu_state.default_cpus is not None:
            allowed &= cpu_state.default_cpus
        out[node] = frozenset(allowed)
    return out


@dataclass(frozen=True)
class Placement:
    """A container confined to ``nodes`` (NUMA node ids)."""

    pod_uid: str
    container_id: str
    nodes: tuple[int, ...]
    request_millicores: int


def assign(free_cpus: Mapping[int, frozenset[int]], placed: Mapping[str, Placement],
           containers: Iterable[tuple[str, str, int]]) -> dict[str, Placement]:
    """``containers``: (pod uid, container id, CPU request in millicores), in a stable order.
    Returns container id -> placement (existing ones kept, gone ones dropped)."""
    containers = list(containers)
    present = {cid for _, cid, _ in containers}
    result = {cid: p for cid, p in placed.items() if cid in present}
    load = {node: 0 for node in free_cpus}
    for p in result.values():
        for node in p.nodes:
            if node in load:
                load[node] += p.request_millicores // len(p.nodes)
    for uid, cid, request in containers:
        if cid in result:
            continue
        spare = {node: len(cpus) * 1000 - load[node] for node, cpus in free_cpus.items() if cpus}
        if not spare:
            continue
        order = sorted(spare, key=lambda n: (-spare[n], n))
        chosen, room = [], 0
        for node in order:
            chosen.append(node)
            room += spare[node]
            if room >= request:
                break
        placement = Placement(uid, cid, tuple(sorted(chosen)), request)
        for node in chosen:
            load[node] += request // len(chosen)
        result[cid] = placement
    return result


def cpuset_root(layout: CgroupLayout) -> Path:
    if layout.version is CgroupVersion.V2:
        return layout.hierarchy.memory_root
    return layout.hierarchy.memory_root.parent / "cpuset"


def numa_plan(placements: Iterable[Placement], free_cpus: Mapping[int, frozenset[int]],
              pods: Mapping[str, FeaturePodState], layout: CgroupLayout) -> list[CgroupWrite]:
    root = cpuset_root(layout)
    writes = []
    for p in placements:
        pod = pods.get(p.pod_uid)
        if pod is None:
            continue
        cpus = frozenset().union(*(free_cpus.get(n, frozenset()) for n in p.nodes))
        if not cpus:
            continue
        path = root / layout.container_relpath(pod.uid, pod.qos_class, p.container_id)
        # mems first: a v1 cpuset needs both set, and neither may be empty
        writes.append(CgroupWrite(path, "cpuset.mems", format_cpu_list(p.nodes)))
        writes.append(CgroupWrite(path, "cpuset.cpus", format_cpu_list(cpus)))
    return writes


def ls_containers(pods: Iterable) -> list[tuple[str, str, int]]:
    out = []
    for pod in sorted(pods, key=lambda p: p.uid):
        if isinstance(pod, FeaturePodState) and pod.tidal_level is QoSLevel.LS:
            out += [(pod.uid, c.id, c.request_millicores) for c in pod.cpu]
    return out


@dataclass
class NUMAAffinityActuator:
    layout: CgroupLayout
    journal_path: Path
    sys_root: Path = Path("/sys")
    cpu_manager_state: Path = DEFAULT_CPU_MANAGER_STATE
    verify_every: int = 5
    placements: dict[str, Placement] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.journal = RestoreJournal(self.journal_path)
        self._topology: dict[int, frozenset[int]] | None = None
        self._rounds = 0
        self._known: dict[str, str] = {}
        self._logged: set[str] = set()

    def topology(self) -> dict[int, frozenset[int]]:
        if self._topology is None:
            self._topology = read_topology(self.sys_root)
        return self._topology

    def read_cpu_state(self) -> CPUManagerState:
        try:
            return parse_cpu_manager_state(self.cpu_manager_state.read_text())
        except FileNotFoundError:
            return CPUManagerState()

    def recovered(self, containers: Iterable[tuple[str, str, int]], pods: Mapping) -> dict[str, Placement]:
        """Placements made by an earlier run of the agent (restart-safe: no container moves to
        another NUMA node because the agent restarted): an LS container not placed yet whose
        ``cpuset.mems`` this agent changed (it is in the journal) keeps the nodes it has now."""
        out = {}
        for uid, cid, request in containers:
            if cid in self.placements:
                continue
            pod = pods[uid]
            mems = cpuset_root(self.layout) / self.layout.container_relpath(pod.uid, pod.qos_class, cid) / "cpuset.mems"
            if str(mems) not in self.journal.originals:
                continue
            try:
                nodes = tuple(parse_cpu_list(mems.read_text()))
            except (OSError, ValueError):
                continue
            if nodes:
                out[cid] = Placement(uid, cid, nodes, request)
                self._logged.add(cid)
        return out

    def round(self, enabled: bool, pods: Iterable) -> list[tuple[str, str]]:
        if not enabled:
            self.placements.clear()
            self._known.clear()
            self._logged.clear()
            return restore(self.journal)
        pods = {p.uid: p for p in pods}
        free = shareable(self.topology(), self.read_cpu_state())
        containers = ls_containers(pods.values())
        self.placements.update(self.recovered(containers, pods))
        self.placements = assign(free, self.placements, containers)
        plan = numa_plan(self.placements.values(), free, pods, self.layout)
        self._rounds += 1
        if self._rounds % self.verify_every == 0:
            self._known.clear()
        root = cpuset_root(self.layout) / self.layout.kubepods_relpath()
        result = apply(plan, self.journal, [root], self._known)
        wanted = {w.key for w in plan}
        problems = [(str(w.target), p) for w, p in result.errors]
        problems += restore(self.journal, [k for k in self.journal.originals if k not in wanted])
        applied = {str(w.path) for w in (*result.written, *result.unchanged)}
        for p in self.placements.values():
            pod = pods[p.pod_uid]
            path = str(cpuset_root(self.layout) / self.layout.container_relpath(pod.uid, pod.qos_class, p.container_id))
            if path in applied and p.container_id not in self._logged:
                self._logged.add(p.container_id)
                log.info("applied NUMA affinity for LS pod %s/%s on NUMA node %s", pod.namespace, pod.name,
                         ",".join(map(str, p.nodes)))
        self._logged &= set(self.placements)
        return problems


def numa_round(node_qos, enabled: bool) -> None:
    """One round for :class:`~.node_qos.NodeQoS` (only on nodes with several NUMA nodes)."""
    on = enabled and node_qos.policy.features.numa_affinity.enabled and node_qos.capabilities.get("numa", False)
    if not on and not node_qos.numa.journal.originals and not node_qos.numa.placements:
        return
    for file, problem in node_qos.numa.round(on, node_qos._states.values()):
        log.warning("NUMA affinity: %s: %s", file, problem)
