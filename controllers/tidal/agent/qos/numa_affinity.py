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
* :func:`place` is :func:`assign` for one new container next to the placements known (the NRI
  plugin's entry point at CreateContainer); :func:`cpuset_of` is a placement's ``cpuset.cpus`` /
  ``cpuset.mems`` values (the NUMA nodes' shareable CPUs, the nodes), written by both paths.
* :func:`pinned_nodes` recognises a container already confined to some NUMA nodes (its
  ``cpuset.mems`` names a proper subset of the node's NUMA nodes): the NRI plugin pinned it at
  creation, and the agent's round adopts that placement instead of choosing again.
* :func:`numa_plan` turns assignments into ``cpuset.cpus`` / ``cpuset.mems`` writes on the
  containers' cgroups (v1: the ``cpuset`` hierarchy; v2: the unified one).

The feature (:class:`NUMAAffinity`, ``numa-affinity``) reads in ``sense`` (the topology under
``/sys/devices/system/node`` once, the kubelet's ``cpu_manager_state`` every round), plans the
cpusets, which the executor applies into the one journal (only below the cpuset ``kubepods``
tree) and puts back when the feature is switched off or the node leaves colocation; it logs
:data:`SUCCESS_LOG` (``Successfully set NUMA affinity for container <ns>/<pod>/<container>:
cpus=<list> mems=<list>``, the line the NRI plugin logs when it pins a container at creation)
once per container it pins. A container the NRI plugin pinned at creation is adopted (kept on its
NUMA nodes, not logged again). With the
kubelet's static CPU manager the kubelet may rewrite shared containers' cpusets in its reconcile
loop; the executor re-reads the files every few rounds and puts the confinement back.
:class:`NUMAAffinityActuator` drives the feature alone with its own journal.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
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
    "CPUManagerState", "JOURNAL_NAME", "NUMAAffinity", "NUMAAffinityActuator", "Placement", "SUCCESS_LOG", "assign",
    "cpuset_of", "format_cpu_list", "numa_plan", "parse_cpu_manager_state", "pinned_nodes", "place", "read_topology",
    "shareable",
]

#: The one INFO line per pinned container, from the agent's round and the NRI plugin alike
#: (namespace, pod, container, cpus, mems): what operators grep for.
SUCCESS_LOG = "Successfully set NUMA affinity for container %s/%s/%s: cpus=%s mems=%s"

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


def place(free_cpus: Mapping[int, frozenset[int]], placed: Mapping[str, Placement], pod_uid: str,
          container_id: str, request_millicores: int) -> Placement | None:
    """Where one new container goes, next to ``placed`` (all kept): :func:`assign`'s choice.
    None when no NUMA node has a shareable CPU."""
    others = [(p.pod_uid, cid, p.request_millicores) for cid, p in placed.items() if cid != container_id]
    result = assign(free_cpus, {cid: p for cid, p in placed.items() if cid != container_id},
                    [*others, (pod_uid, container_id, request_millicores)])
    return result.get(container_id)


def cpuset_of(nodes: Iterable[int], free_cpus: Mapping[int, frozenset[int]]) -> tuple[str, str] | None:
    """``(cpuset.cpus, cpuset.mems)`` of a container confined to ``nodes``: their shareable CPUs
    and the nodes, in the kernel's list format; None when those nodes have no shareable CPU."""
    nodes = sorted(set(nodes))
    cpus = frozenset().union(*(free_cpus.get(n, frozenset()) for n in nodes))
    if not cpus or not nodes:
        return None
    return format_cpu_list(cpus), format_cpu_list(nodes)


def pinned_nodes(mems: str | None, numa_nodes: Collection[int]) -> tuple[int, ...] | None:
    """The NUMA nodes a container is confined to, when its ``cpuset.mems`` (kernel list format)
    names a non-empty proper subset of ``numa_nodes``; None otherwise (unset, every node, or
    unreadable): such a container is not pinned."""
    try:
        nodes = set(parse_cpu_list(mems or ""))
    except ValueError:
        return None
    if not nodes or not nodes < set(numa_nodes):
        return None
    return tuple(sorted(nodes))


def cpuset_root(layout: CgroupLayout) -> Path:
    if layout.version is CgroupVersion.V2:
        return layout.hierarchy.memory_root
    return layout.hierarchy.memory_root.parent / "cpuset"


def numa_plan(placements: Iterable[Placement], free_cpus: Mapping[int, frozenset[int]],
              pods: Mapping[str, FeaturePodState], layout: CgroupLayout) -> list[CgroupWrite]:
    root = cpuset_root(layout)
    writes = []
    # what the kubelet and runtime give an LS container: the shared pool, every NUMA node; the
    # original journalled for a cpuset Tidal's NRI plugin set as the container was created
    pool = frozenset().union(*free_cpus.values())
    pristine_cpus = format_cpu_list(pool) if pool else None
    pristine_mems = format_cpu_list(free_cpus) if free_cpus else None
    for p in placements:
        pod = pods.get(p.pod_uid)
        cpuset = cpuset_of(p.nodes, free_cpus)
        if pod is None or cpuset is None:
            continue
        cpus, mems = cpuset
        path = root / layout.container_relpath(pod.uid, pod.qos_class, p.container_id)
        # mems first: a v1 cpuset needs both set, and neither may be empty
        writes.append(CgroupWrite(path, "cpuset.mems", mems, pristine=pristine_mems))
        writes.append(CgroupWrite(path, "cpuset.cpus", cpus, pristine=pristine_cpus))
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
    container id, CPU request), the shareable CPUs per NUMA node, the placements an
    earlier run of the agent made (recognised in the journal), and the containers pinned at
    creation by the NRI plugin (``cpuset.mems`` a proper subset of the NUMA nodes)."""

    pods: Mapping[str, FeaturePodState]
    containers: list[tuple[str, str, int]]
    free: Mapping[int, frozenset[int]]
    recovered: Mapping[str, Placement]
    adopted: Mapping[str, Placement] = field(default_factory=dict)


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
                  journaled: Collection[str]) -> tuple[dict[str, Placement], dict[str, Placement]]:
        """Placements made before this round, from the containers' ``cpuset.mems``:

        * recovered — made by an earlier run of the agent (restart-safe: no container moves to
          another NUMA node because the agent restarted): an LS container not placed yet whose
          ``cpuset.mems`` this agent changed (it is in the journal) keeps the nodes it has now;
        * adopted — made by the NRI plugin at creation (the round must not fight it): an LS
          container not placed yet, not in the journal, whose ``cpuset.mems`` names a proper
          subset of the NUMA nodes (:func:`pinned_nodes`) keeps those nodes.
        """
        recovered, adopted = {}, {}
        for uid, cid, request in containers:
            if cid in self.placements:
                continue
            pod = pods[uid]
            mems = cpuset_root(layout) / layout.container_relpath(pod.uid, pod.qos_class, cid) / "cpuset.mems"
            try:
                text = mems.read_text()
            except OSError:
                continue
            if str(mems) in journaled:
                try:
                    nodes = tuple(parse_cpu_list(text))
                except ValueError:
                    continue
                if nodes:
                    recovered[cid] = Placement(uid, cid, nodes, request)
            elif (nodes := pinned_nodes(text, self.topology())) is not None:
                adopted[cid] = Placement(uid, cid, nodes, request)
        return recovered, adopted

    def sense(self, ctx: Context) -> Sensed:
        pods = {p.uid: p for p in ctx.state.pods}
        containers = ls_containers(pods.values())
        free = shareable(self.topology(), self.read_cpu_state())
        recovered, adopted = self.recovered(containers, pods, ctx.state.layout, ctx.journaled)
        return Sensed(pods, containers, free, recovered, adopted)

    # -- plan --------------------------------------------------------------------------------

    def plan(self, ctx: Context) -> Plan:
        seen: Sensed = ctx.observed[self.name]
        self.placements.update(seen.recovered)
        self._logged.update(seen.recovered)  # placed by an earlier run: logged then
        self.placements.update(seen.adopted)
        self._logged.update(seen.adopted)  # pinned at creation: the NRI plugin logged it
        for cid, p in seen.adopted.items():
            log.debug("NUMA affinity of container %s (pod %s) set at creation: kept on NUMA node %s", cid,
                      p.pod_uid, format_cpu_list(p.nodes))
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
                    cpus, mems = cpuset_of(p.nodes, ctx.observed[self.name].free) or ("", "")
                    name = next((c.name for c in pod.cpu if c.id == p.container_id), "") or p.container_id
                    log.info(SUCCESS_LOG, pod.namespace, pod.name, name, cpus, mems)
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
