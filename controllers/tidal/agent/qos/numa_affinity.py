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

The feature (:class:`NUMAAffinity`, ``numa-affinity``) reads in ``sense`` (the topology under
``/sys/devices/system/node`` once, the kubelet's ``cpu_manager_state`` every round), plans the
cpusets, which the executor applies into the one journal (only below the cpuset ``kubepods``
tree) and puts back when the feature is switched off or the node leaves colocation; it logs
``applied NUMA affinity for LS pod <ns>/<name> on NUMA node N`` once per container. With the
kubelet's static CPU manager the kubelet may rewrite shared containers' cpusets in its reconcile
loop; the executor re-reads the files every few rounds and puts the confinement back.
:class:`NUMAAffinityActuator` drives the feature alone with its own journal.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tidal.agent.collector.cgroups import CgroupLayout, CgroupVersion
from tidal.api.policy import ColocationPolicy
from tidal.api.qos import QoSLevel

from .capabilities import parse_cpu_list
from .feature import DEFAULT_OPTIONS, EMPTY, Context, Options, Plan
from .pod_features import FeaturePodState
from .strategy import CgroupWrite, NodeState

log = logging.getLogger(__name__)

__all__ = [
    "CPUManagerState", "JOURNAL_NAME", "NUMAAffinity", "NUMAAffinityActuator", "Placement", "assign", "format_cpu_list", "numa_plan",
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


@dataclass(frozen=True)
class Sensed:
    """What the NUMA feature read this round: the pods by uid, the LS containers (pod uid,
    container id, CPU request), the shareable CPUs per NUMA node, and the placements an
    earlier run of the agent made (recognised in the journal)."""

    pods: Mapping[str, FeaturePodState]
    containers: list[tuple[str, str, int]]
    free: Mapping[int, frozenset[int]]
    recovered: Mapping[str, Placement]


class NUMAAffinity:
    """``features.numaAffinity`` on nodes with several NUMA nodes (capability ``numa``)."""

    name = "numa-affinity"

    def __init__(self, options: Options = DEFAULT_OPTIONS) -> None:
        self.sys_root = options.sys_root
        self.cpu_manager_state = options.cpu_manager_state
        self.placements: dict[str, Placement] = {}
        self._topology: dict[int, frozenset[int]] | None = None
        self._logged: set[str] = set()

    def roots(self, layout: CgroupLayout) -> tuple[Path, ...]:
        """The cpuset ``kubepods`` tree: where this feature's writes may go."""
        return (cpuset_root(layout) / layout.kubepods_relpath(),)

    def enabled(self, ctx: Context) -> bool:
        return ctx.policy.features.numa_affinity.enabled and ctx.capabilities.get("numa", False)

    # -- reads -------------------------------------------------------------------------------

    def topology(self) -> dict[int, frozenset[int]]:
        if self._topology is None:
            self._topology = read_topology(self.sys_root)
        return self._topology

    def read_cpu_state(self) -> CPUManagerState:
        try:
            return parse_cpu_manager_state(self.cpu_manager_state.read_text())
        except FileNotFoundError:
            return CPUManagerState()

    def recovered(self, containers: Iterable[tuple[str, str, int]], pods: Mapping, layout: CgroupLayout,
                  journaled: Collection[str]) -> dict[str, Placement]:
        """Placements made by an earlier run of the agent (restart-safe: no container moves to
        another NUMA node because the agent restarted): an LS container not placed yet whose
        ``cpuset.mems`` this agent changed (it is in the journal) keeps the nodes it has now."""
        out = {}
        for uid, cid, request in containers:
            if cid in self.placements:
                continue
            pod = pods[uid]
            mems = cpuset_root(layout) / layout.container_relpath(pod.uid, pod.qos_class, cid) / "cpuset.mems"
            if str(mems) not in journaled:
                continue
            try:
                nodes = tuple(parse_cpu_list(mems.read_text()))
            except (OSError, ValueError):
                continue
            if nodes:
                out[cid] = Placement(uid, cid, nodes, request)
        return out

    def sense(self, ctx: Context) -> Sensed:
        pods = {p.uid: p for p in ctx.state.pods}
        containers = ls_containers(pods.values())
        free = shareable(self.topology(), self.read_cpu_state())
        return Sensed(pods, containers, free, self.recovered(containers, pods, ctx.state.layout, ctx.journaled))

    # -- plan --------------------------------------------------------------------------------

    def plan(self, ctx: Context) -> Plan:
        seen: Sensed = ctx.observed[self.name]
        self.placements.update(seen.recovered)
        self._logged.update(seen.recovered)  # placed by an earlier run: logged then
        self.placements = assign(seen.free, self.placements, seen.containers)
        return Plan(tuple(numa_plan(self.placements.values(), seen.free, seen.pods, ctx.state.layout)))

    def undo(self, ctx: Context) -> Plan:
        self.placements.clear()
        self._logged.clear()
        return EMPTY  # the cpusets are journalled: the executor puts them back

    def settle(self, ctx: Context, outcome) -> None:
        """Log each container's placement once, when its cpuset is in place."""
        if not self.placements:
            self._logged.clear()
            return
        pending = [p for p in self.placements.values() if p.container_id not in self._logged]
        if pending:
            result = outcome.result
            applied = {str(w.path) for w in (*result.written, *result.unchanged)}
            pods, layout = ctx.observed[self.name].pods, ctx.state.layout
            for p in pending:
                pod = pods[p.pod_uid]
                path = str(cpuset_root(layout) / layout.container_relpath(pod.uid, pod.qos_class, p.container_id))
                if path in applied:
                    self._logged.add(p.container_id)
                    log.info("applied NUMA affinity for LS pod %s/%s on NUMA node %s", pod.namespace, pod.name,
                             ",".join(map(str, p.nodes)))
        if len(self._logged) > len(self.placements):
            self._logged &= set(self.placements)


class NUMAAffinityActuator:
    """The feature alone, on its own journal: ``round`` is one agent round (tests and tools)."""

    def __init__(self, layout: CgroupLayout, journal_path: Path, sys_root: Path = Path("/sys"),
                 cpu_manager_state: Path = DEFAULT_CPU_MANAGER_STATE, verify_every: int = 5) -> None:
        from .engine import QoSEngine
        self.layout = layout
        self.feature = NUMAAffinity(Options(sys_root=sys_root, cpu_manager_state=cpu_manager_state))
        self.engine = QoSEngine(journal_path, verify_every, features=[self.feature], legacy_journals=())
        self._policy = ColocationPolicy.from_spec({"features": {"numaAffinity": {"enabled": True}}})

    @property
    def journal(self):
        return self.engine.journal

    @property
    def placements(self) -> dict[str, Placement]:
        return self.feature.placements

    def read_cpu_state(self) -> CPUManagerState:
        return self.feature.read_cpu_state()

    def round(self, enabled: bool, pods: Iterable) -> list[tuple[str, str]]:
        state = NodeState(tuple(pods), 0, 0, self._policy, {"numa": True}, self.layout)
        out = self.engine.run(Context(state, enabled))
        return [*((str(w.target), p) for w, p in out.result.errors), *out.result.restore_problems]
