# SPDX-License-Identifier: Apache-2.0
"""NUMA affinity at container creation: the NRI plugin's side of ``features.numaAffinity``.

An LS container is confined to one NUMA node (``cpuset.cpus`` and ``cpuset.mems`` in the OCI spec)
as containerd creates it, instead of on the agent's next round after it started. The choice is
the node engine's, made by the same pure functions (:mod:`tidal.agent.qos.numa_affinity`:
:func:`~tidal.agent.qos.numa_affinity.place`, :func:`~tidal.agent.qos.numa_affinity.cpuset_of`,
:func:`~tidal.agent.qos.numa_affinity.shareable`) on what the plugin knows, in memory (a handler
does no I/O):

* the NUMA topology, read once at start (``/sys/devices/system/node``);
* the shareable CPUs: the kubelet's cpuset of the container in the request — with the static CPU
  manager a shared container gets the shared pool (``defaultCpuSet``, the exclusive CPUs left
  out), without it nothing (every CPU) — the same set the agent reads from ``cpu_manager_state``;
* the CPU request, from the CPU shares the kubelet sets (to the millicore);
* the other LS containers' placements: those it pinned at creation since it started, and at
  Synchronize those the runtime reports pinned (``cpuset.mems`` a proper subset of the NUMA
  nodes). It cannot see the containers the agent's round confined after they started (cgroup
  writes, not the runtime's spec): until they are recreated they do not count in its choice of
  the freest node. The agent's round never moves a container the plugin pinned: it adopts the
  nodes it finds in ``cpuset.mems`` (:func:`~tidal.agent.qos.numa_affinity.pinned_nodes`).

Placements are sticky: at UpdateContainer (the kubelet's reconcile, which with the static CPU
manager rewrites shared containers' cpusets) the plugin returns the same NUMA nodes, their CPUs
within the kubelet's new pool; a container it did not pin at creation is never placed later (the
agent's round owns it). A stopped container's placement is forgotten.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from tidal.api import qos
from tidal.agent.qos.capabilities import parse_cpu_list
from tidal.agent.qos.numa_affinity import (
    CPUManagerState,
    Placement,
    cpuset_of,
    pinned_nodes,
    place,
    read_topology,
    shareable,
)

from .decisions import ContainerRef, Cpuset

log = logging.getLogger(__name__)

__all__ = ["NUMAPlacer", "node_topology"]


def node_topology(sys_root: Path = Path("/sys")) -> dict[int, frozenset[int]]:
    """The NUMA topology, or {} where the kernel reports none (NUMA affinity then does nothing)."""
    try:
        return read_topology(sys_root)
    except (OSError, ValueError) as err:
        log.info("NRI: no NUMA topology under %s (%s): NUMA affinity at creation off", sys_root, err)
        return {}


def _is_ls(ref: ContainerRef) -> bool:
    try:
        return qos.qos_level_of(ref.pod_annotations) is qos.QoSLevel.LS
    except qos.AnnotationError:
        return False


class NUMAPlacer:
    """The ``ls_cpuset`` hook of the plugin (:data:`.decisions.LSCpusetHook`) for NUMA affinity.

    Args:
        topology: NUMA node id -> its CPUs.
        enabled: whether the policy has ``features.numaAffinity.enabled`` (asked at each call).
    """

    def __init__(self, topology: Mapping[int, frozenset[int]], enabled: Callable[[], bool] = lambda: True) -> None:
        self.topology = dict(topology)
        self.enabled = enabled
        self.placements: dict[str, Placement] = {}  # container id -> its NUMA nodes

    def active(self) -> bool:
        """Several NUMA nodes (capability ``numa``) and the feature on."""
        return len(self.topology) > 1 and self.enabled()

    def free(self, pool: str) -> dict[int, frozenset[int]]:
        """The shareable CPUs per NUMA node within the kubelet's cpuset ``pool`` ("": every CPU)."""
        try:
            default = frozenset(parse_cpu_list(pool)) if pool else None
        except ValueError:
            default = None
        return shareable(self.topology, CPUManagerState(default_cpus=default))

    def __call__(self, ref: ContainerRef) -> Cpuset | None:
        if not self.active():
            return None
        free = self.free(ref.cpuset_cpus)
        placement = self.placements.get(ref.container_id)
        if placement is None:
            if not ref.creating or not ref.container_id:
                return None  # not pinned at creation: the agent's round places it
            placement = place(free, self.placements, ref.pod_uid, ref.container_id, ref.cpu_request_millicores)
            if placement is None:
                return None
            self.placements[ref.container_id] = placement
        cpuset = cpuset_of(placement.nodes, free)
        return Cpuset(*cpuset) if cpuset else None

    def learn(self, ref: ContainerRef, mems: str) -> None:
        """At Synchronize: an existing LS container confined to some NUMA nodes keeps them and
        counts in the later choices."""
        if ref.container_id in self.placements or not _is_ls(ref):
            return
        nodes = pinned_nodes(mems, self.topology)
        if nodes is not None:
            self.placements[ref.container_id] = Placement(ref.pod_uid, ref.container_id, nodes,
                                                          ref.cpu_request_millicores)

    def keep_only(self, container_ids: Collection[str]) -> None:
        """At Synchronize: the runtime's containers are all there is; placements of containers
        that ended while the plugin was away (their StopContainer never came) count no more."""
        for cid in [cid for cid in self.placements if cid not in container_ids]:
            del self.placements[cid]

    def forget(self, container_id: str) -> None:
        self.placements.pop(container_id, None)

    def forget_pod(self, pod_uid: str) -> None:
        for cid in [cid for cid, p in self.placements.items() if p.pod_uid == pod_uid]:
            del self.placements[cid]
