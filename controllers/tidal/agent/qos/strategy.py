# SPDX-License-Identifier: Apache-2.0
"""The cgroup strategy interface, the node state it plans from, and composing plans.

* :class:`Strategy` ``.plan(state) -> list[CgroupWrite]`` is pure: it computes desired file
  values from a :class:`NodeState` and never looks at the filesystem.
* :func:`compose` merges several plans (later writes win; v1 quotas nest).
* The writing itself (:func:`apply`, :func:`restore`, :class:`RestoreJournal`, the safety check)
  is the executor's (:mod:`tidal.agent.executor.cgroupfs`), re-exported here for its callers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Protocol

from tidal.agent.collector.cgroups import CgroupLayout, CgroupVersion, PodQOSClass
from tidal.agent.executor.cgroupfs import (  # noqa: F401  (re-exported: the executor writes)
    V1_QUOTA_FILE,
    ApplyResult,
    CgroupWrite,
    RestoreJournal,
    UnsafeWriteError,
    _check_safe,
    apply,
    restore,
)
from tidal.api.policy import ColocationPolicy
from tidal.api.qos import QoSLevel

__all__ = [
    "CgroupWrite",
    "ContainerState",
    "PodState",
    "NodeState",
    "Strategy",
    "RestoreJournal",
    "ApplyResult",
    "UnsafeWriteError",
    "cpu_controller_root",
    "cpu_dir",
    "memory_dir",
    "allowed_roots",
    "be_parent_classes",
    "compose",
    "apply",
    "restore",
]


@dataclass(frozen=True)
class ContainerState:
    """One container: its ID (``<runtime>://<id>``) and its batch resource requests."""

    id: str
    batch_cpu_millicores: int = 0
    batch_memory_bytes: int = 0


@dataclass(frozen=True)
class PodState:
    """A pod running on this node, as the QoS engine needs it."""

    uid: str
    qos_class: PodQOSClass
    tidal_level: QoSLevel | None
    containers: tuple[ContainerState, ...] = ()
    namespace: str = ""
    name: str = ""
    priority: int = 0
    #: what the pod takes of the node's requests, native and batch together (cpu millicores,
    #: memory bytes; :func:`tidal.api.pod_resources.pod_node_requests`)
    node_requests: tuple[int, int] = (0, 0)
    #: deletionTimestamp set: on its way out (evicted, maybe by an earlier run of the agent)
    terminating: bool = False
    #: the pod-level batch amount (cpu millicores, memory bytes) from its spec, as the scheduler
    #: reserves it — every container, sidecars (restartable init containers) included, started
    #: or not (:func:`tidal.api.pod_resources.pod_batch`) —, 0 for a resource some container has
    #: no batch limit of (the pod then has no pod-level limit, as the kubelet's rule); None: the
    #: sum of ``containers`` (a state built without the pod's spec)
    pod_batch: tuple[int, int] | None = None
    #: an ordinary init container of it has a runtime ID (it runs, or ran, before ``containers``
    #: start): where the pod's containers go (kubepods or the BE idle group) is decided
    init_started: bool = False

    @property
    def is_be(self) -> bool:
        return self.tidal_level is QoSLevel.BE

    @property
    def batch_cpu_millicores(self) -> int:
        if self.pod_batch is not None:
            return self.pod_batch[0]
        return sum(c.batch_cpu_millicores for c in self.containers) \
            if all(c.batch_cpu_millicores > 0 for c in self.containers) else 0

    @property
    def batch_memory_bytes(self) -> int:
        if self.pod_batch is not None:
            return self.pod_batch[1]
        return sum(c.batch_memory_bytes for c in self.containers) \
            if all(c.batch_memory_bytes > 0 for c in self.containers) else 0


@dataclass(frozen=True)
class NodeState:
    """Everything a strategy plans from (plain data; built by the agent each round)."""

    pods: tuple[PodState, ...]
    node_cpus: float
    online_usage_millicores: float
    policy: ColocationPolicy
    capabilities: Mapping[str, bool]
    layout: CgroupLayout
    #: v1 only: where the ``cpu`` controller is mounted when it differs from the cpuacct root of
    #: ``layout`` (e.g. separate ``/sys/fs/cgroup/cpu`` and ``/sys/fs/cgroup/cpuacct``).
    cpu_controller_root: Path | None = None
    #: the node's CPU usage outside Tidal's pods (node − pods with a QoS level: daemons, kubelet,
    #: runtime, kernel, pods without a level)
    #: when ``overselling.includeSystemUsage`` counts it, else 0; BE CPU suppression leaves it
    #: to them as it leaves online usage
    system_usage_millicores: float = 0.0

    def supports(self, capability: str) -> bool:
        return bool(self.capabilities.get(capability, False))

    def be_pods(self) -> list[PodState]:
        return [p for p in self.pods if p.is_be]


class Strategy(Protocol):
    """One node QoS strategy. ``plan`` must be pure and deterministic."""

    name: str
    #: True when the plan reads usage (recomputed every round); False when it depends only on
    #: pods, policy, capabilities and layout (recomputed when those change).
    uses_usage: bool

    def plan(self, state: NodeState) -> list[CgroupWrite]: ...


def cpu_controller_root(layout: CgroupLayout, override: Path | None = None) -> Path:
    """Root of the hierarchy holding ``cpu.shares``/``cpu.cfs_quota_us`` (v1) or ``cpu.max`` (v2).

    The layout's ``cpu_root`` is where CPU *accounting* is: on v1 that is the cpuacct hierarchy.
    When cpu and cpuacct are co-mounted (``cpu,cpuacct``) it is the same directory; when cpuacct is
    mounted alone, the cpu controller is its sibling ``cpu``. Pure: decided by name only.
    """
    if override is not None:
        return override
    root = layout.hierarchy.cpu_root
    if layout.version is CgroupVersion.V2 or root.name in ("cpu,cpuacct", "cpuacct,cpu"):
        return root
    if root.name == "cpuacct":
        return root.parent / "cpu"
    return root


def cpu_dir(state: NodeState, relpath: PurePosixPath) -> Path:
    return cpu_controller_root(state.layout, state.cpu_controller_root) / relpath


def memory_dir(state: NodeState, relpath: PurePosixPath) -> Path:
    return state.layout.memory_dir(relpath)


def be_parent_classes(state: NodeState) -> list[PodQOSClass]:
    """The parents of the node's BE pods, as classes: ``kubepods/besteffort`` while it holds BE
    pods, or when no BE pod is anywhere (as before the BE idle group), and the BE idle group
    while it holds BE pods (:mod:`tidal.agent.be_placement`)."""
    classes = {p.qos_class for p in state.be_pods()}
    below = not classes or any(c is not PodQOSClass.BE_IDLE_GROUP for c in classes)
    return [*([PodQOSClass.BEST_EFFORT] if below else []),
            *([PodQOSClass.BE_IDLE_GROUP] if PodQOSClass.BE_IDLE_GROUP in classes else [])]


def allowed_roots(layout: CgroupLayout, cpu_root_override: Path | None = None) -> tuple[Path, ...]:
    """The only directories :func:`apply` may write below: ``kubepods`` and the BE idle group in
    each hierarchy."""
    roots = set()
    for relpath in (layout.kubepods_relpath(), layout.qos_relpath(PodQOSClass.BE_IDLE_GROUP)):
        roots |= {cpu_controller_root(layout, cpu_root_override) / relpath, layout.memory_dir(relpath)}
    return tuple(sorted(roots))



def compose(plans: Iterable[Iterable[CgroupWrite]], version: CgroupVersion) -> list[CgroupWrite]:
    """Merge the plans of several strategies into one consistent plan.

    * A later write to the same file replaces an earlier one (keeping the earlier position).
    * cgroup v1 refuses a ``cpu.cfs_quota_us`` above an ancestor's quota (EINVAL), and such a
      quota would not be worth more than the ancestor's anyway: every planned v1 quota is clamped
      to the smallest quota planned on its ancestors (e.g. BE containers under a suppressed
      ``kubepods/besteffort``). v2 has no such rule (``cpu.max`` nests freely).
    """
    merged: dict[tuple[Path, str], CgroupWrite] = {}
    for plan in plans:
        for write in plan:
            merged[(write.path, write.file)] = write
    if version is not CgroupVersion.V1:
        return list(merged.values())
    quotas = {
        str(path): int(w.value)
        for (path, file), w in merged.items()
        if file == V1_QUOTA_FILE and int(w.value) > 0
    }
    out = []
    for (path, file), write in merged.items():
        if file == V1_QUOTA_FILE:
            caps = [quotas[a] for a in _ancestors(str(path)) if a in quotas]
            if caps:
                own = int(write.value)
                limit = min(caps)
                if own <= 0 or own > limit:
                    write = replace(write, value=str(limit))
        out.append(write)
    return out


def _ancestors(path: str) -> list[str]:
    out = []
    while (parent := path.rsplit("/", 1)[0]) and parent != path:
        out.append(parent)
        path = parent
    return out
