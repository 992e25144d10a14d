# SPDX-License-Identifier: Apache-2.0
"""What the NRI plugin asks the runtime for: the node engine's QoS decisions, made at creation.

Pure: no protobuf, no I/O. The plugin (:mod:`.plugin`) turns a :class:`Resources` into NRI
messages. The arithmetic is the node engine's (:mod:`tidal.agent.qos.be_batch_resources`), so a
container adjusted here and the same container reconciled later by the engine end up with the
same cgroup values:

=====  ==========================================================================================
level  container resources at CreateContainer (and kept at UpdateContainer)
=====  ==========================================================================================
BE     batch-cpu m > 0: cpu shares = ``milli_cpu_to_shares(m)``, quota = ``milli_cpu_to_quota(m)``,
       period = ``CFS_PERIOD_US`` (cgroup v1: no quota, see below); batch-cpu absent: shares = 2
       (the minimum weight).
       batch-memory b > 0: memory limit = b rounded down to the page size (≥ one page).
LS     the NUMA cpuset (cpus and mems) from the ``ls_cpuset`` hook when NUMA affinity is on
       (:mod:`.numa`: the node engine's placement, :mod:`tidal.agent.qos.numa_affinity`), else nothing
HLS    nothing: exclusive CPUs are the kubelet's static CPU manager's job
none   nothing (a pod without a QoS annotation is left alone)
=====  ==========================================================================================

BE CPU *priority* is a pod-level property: the engine writes ``cpu.idle = 1`` (or the minimum
weight) on the BE pod's cgroup, the parent of its containers. NRI adjusts containers only, and
the OCI spec has no ``cpu.idle``; ``cpu.idle`` through ``unified`` would land on the container
cgroup (where it only orders the pod's own containers) and would make runc fail the creation on
kernels without it, so the plugin leaves priority to the engine. A BE pod is BestEffort to the
kubelet (no native requests), so its pod cgroup already sits under the BestEffort cgroup, whose
weight the kubelet keeps at the minimum.

On cgroup v1 the plugin sets no CPU quota (``nested_quota_rule``): v1 refuses a container's
``cpu.cfs_quota_us`` above an ancestor's (EINVAL), and the BE parent carries a quota that moves
every round while BE is suppressed or delays the online threads; a quota checked against it at
creation could be above it by the time runc writes it, and the container would fail to start.
The container inherits its parents' bound until the agent's next round sets its quota, clamped
to theirs (:func:`tidal.agent.qos.strategy.compose`). v2's ``cpu.max`` nests freely.

Where the batch resources come from: the CRI (and so NRI) carries no extended resources. They
are read from the pod annotation :data:`BATCH_RESOURCES_ANNOTATION`, which admission writes
from the pod spec (``{"<container>": {"kubernetes.io/batch-cpu": "500", ...}}``, the container's
limits of the batch resources, quantities as in the spec). A BE container whose pod lacks it is
resolved from the API server after the fact (:mod:`.plugin` asks the runtime to update it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from tidal.api import qos
from tidal.agent.qos.be_batch_resources import (
    CFS_PERIOD_US,
    PAGE_SIZE,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
)
from tidal.agent.qos.be_cpu_priority import MIN_SHARES
from tidal.api.pod_resources import BatchRequest
from tidal.api.quantities import QuantityError, memory_bytes

__all__ = [
    "BATCH_RESOURCES_ANNOTATION",
    "BatchRequest",
    "BatchResourcesAnnotationError",
    "ContainerRef",
    "Cpuset",
    "Decision",
    "LSCpusetHook",
    "Resources",
    "batch_requests_of",
    "be_resources",
    "decide",
    "page_rounded",
    "shares_to_millicores",
    "sync_updates",
]

#: Written by admission on BE pods: per container, its ``kubernetes.io/batch-*`` limits.
BATCH_RESOURCES_ANNOTATION = qos.BATCH_RESOURCES_ANNOTATION  # written by admission
_BATCH_KEYS = (qos.BATCH_CPU_RESOURCE, qos.BATCH_MEMORY_RESOURCE)


@dataclass(frozen=True)
class Resources:
    """The container resources the plugin sets; None leaves a field to the runtime."""

    cpu_shares: int | None = None
    cpu_quota: int | None = None
    cpu_period: int | None = None
    memory_limit: int | None = None
    cpuset_cpus: str | None = None
    cpuset_mems: str | None = None

    def _fields(self) -> tuple[tuple[str, object], ...]:
        return (("cpu.shares", self.cpu_shares), ("cpu.quota", self.cpu_quota), ("cpu.period", self.cpu_period),
                ("memory.limit", self.memory_limit), ("cpuset.cpus", self.cpuset_cpus),
                ("cpuset.mems", self.cpuset_mems))

    def __bool__(self) -> bool:
        return any(v is not None for _, v in self._fields())

    def describe(self) -> str:
        return " ".join(f"{name}={value}" for name, value in self._fields() if value is not None) or "nothing"


@dataclass(frozen=True)
class ContainerRef:
    """What the decisions need of a pod and one of its containers (from NRI's PodSandbox and
    Container).

    Attributes:
        container_id: the runtime's id of the container.
        cpu_request_millicores: its CPU request, as the kubelet encodes it in the CPU shares
            (:func:`shares_to_millicores`; 0 without shares).
        cpuset_cpus: the CPUs the kubelet gives it (``""``: any): with the static CPU manager a
            shared container's cpuset is the shared pool, without it nothing.
        creating: the container is being created (CreateContainer): only then may a NUMA
            placement be chosen; at UpdateContainer and Synchronize one is only kept.
    """

    namespace: str
    pod_name: str
    pod_uid: str
    container_name: str
    pod_annotations: Mapping[str, str]
    container_id: str = ""
    cpu_request_millicores: int = 0
    cpuset_cpus: str = ""
    creating: bool = False


@dataclass(frozen=True)
class Cpuset:
    """An LS container's NUMA confinement: ``cpuset.cpus`` and ``cpuset.mems`` (kernel list format)."""

    cpus: str
    mems: str


#: NUMA affinity plugs in here (:class:`.numa.NUMAPlacer`): the cpuset of an LS container, or
#: None. A bare string is a cpus-only cpuset.
LSCpusetHook = Callable[[ContainerRef], "Cpuset | str | None"]


def shares_to_millicores(shares: int | None) -> int:
    """The CPU request behind the kubelet's CPU shares (the inverse of ``MilliCPUToShares``, to
    the millicore): 0 for the minimum (2) or none."""
    if not shares or shares <= 2:
        return 0
    return round(shares * 1000 / 1024)


@dataclass(frozen=True)
class Decision:
    """The plugin's answer for one container.

    Attributes:
        level: the pod's QoS level, None when it has none (or an invalid one).
        resources: what to set (empty: nothing).
        needs_lookup: a BE container whose batch resources are not in its pod's annotations;
            they must be read from the pod object and applied by a later update.
        problem: why a Tidal pod gets less than its level asks for (a bad annotation), for the log.
    """

    level: qos.QoSLevel | None
    resources: Resources = Resources()
    needs_lookup: bool = False
    problem: str | None = None


class BatchResourcesAnnotationError(ValueError):
    """The batch-resources annotation cannot be read; ``str(error)`` names the field and rule."""


#: The largest batch amounts the annotation may carry beyond what a quantity may be (memory:
#: int64 bytes, the quantity parser's own bound): a million CPUs, in millicores.
MAX_BATCH = {qos.BATCH_CPU_RESOURCE: 10 ** 9}


def _quantity(container: str, key: str, value: object) -> int:
    where = f"annotation {BATCH_RESOURCES_ANNOTATION!r}: container {container!r}: {key!r}"
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise BatchResourcesAnnotationError(f"{where}: must be a quantity string or an integer, got {value!r}")
    try:
        # Extended resources are plain counts: batch-cpu "2k" is 2,000 millicores.
        count = memory_bytes(str(value))
    except QuantityError as err:
        raise BatchResourcesAnnotationError(f"{where}: {err}") from None
    if count < 0:
        raise BatchResourcesAnnotationError(f"{where}: must not be negative, got {value!r}")
    most = MAX_BATCH.get(key)
    if most is not None and count > most:  # no node has it, and its quota (m × 100 µs) would not fit an int64
        raise BatchResourcesAnnotationError(f"{where}: at most {most}, got {value!r}")
    return count


def batch_requests_of(annotations: Mapping[str, str] | None) -> dict[str, BatchRequest] | None:
    """Per container name, the batch resources the annotation records; None without it.

    Raises:
        BatchResourcesAnnotationError: the value is not a JSON object of container names to
            objects holding only ``kubernetes.io/batch-cpu`` / ``kubernetes.io/batch-memory``
            quantities.
    """
    if not annotations or BATCH_RESOURCES_ANNOTATION not in annotations:
        return None
    raw = annotations[BATCH_RESOURCES_ANNOTATION]
    try:
        value = json.loads(raw)
    except ValueError as err:
        raise BatchResourcesAnnotationError(
            f"annotation {BATCH_RESOURCES_ANNOTATION!r}: must be a JSON object, not {raw!r} ({err})") from None
    if not isinstance(value, dict):
        raise BatchResourcesAnnotationError(
            f"annotation {BATCH_RESOURCES_ANNOTATION!r}: must be a JSON object of container names, got {raw!r}")
    out: dict[str, BatchRequest] = {}
    for name, resources in value.items():
        if not isinstance(resources, dict):
            raise BatchResourcesAnnotationError(
                f"annotation {BATCH_RESOURCES_ANNOTATION!r}: container {name!r}: must be an object "
                f"of {', '.join(_BATCH_KEYS)}, got {resources!r}")
        unknown = sorted(set(resources) - set(_BATCH_KEYS))
        if unknown:
            raise BatchResourcesAnnotationError(
                f"annotation {BATCH_RESOURCES_ANNOTATION!r}: container {name!r}: unknown resource "
                f"{unknown[0]!r}; allowed: {', '.join(_BATCH_KEYS)}")
        out[name] = BatchRequest(
            cpu_millicores=_quantity(name, qos.BATCH_CPU_RESOURCE, resources.get(qos.BATCH_CPU_RESOURCE, 0)),
            memory_bytes=_quantity(name, qos.BATCH_MEMORY_RESOURCE, resources.get(qos.BATCH_MEMORY_RESOURCE, 0)),
        )
    return out


def page_rounded(limit: int) -> int:
    """A memory limit as the kernel stores it (the engine plans the same value)."""
    return max(PAGE_SIZE, limit - limit % PAGE_SIZE)


def be_resources(batch: BatchRequest | None, *, nested_quota_rule: bool = False) -> Resources:
    """A BE container's resources from its batch request (None: nothing requested).

    ``nested_quota_rule``: the kernel refuses a CPU quota above an ancestor's (cgroup v1); then
    no quota is set here (the module docstring says why), the agent's round sets it.
    """
    cpu = batch.cpu_millicores if batch else 0
    memory = batch.memory_bytes if batch else 0
    if cpu > 0:
        shares = milli_cpu_to_shares(cpu)
        quota, period = (None, None) if nested_quota_rule else (milli_cpu_to_quota(cpu), CFS_PERIOD_US)
    else:
        shares, quota, period = MIN_SHARES, None, None
    return Resources(cpu_shares=shares, cpu_quota=quota, cpu_period=period,
                     memory_limit=page_rounded(memory) if memory > 0 else None)


def decide(ref: ContainerRef, *, ls_cpuset: LSCpusetHook | None = None,
           looked_up: Mapping[str, BatchRequest] | None = None, nested_quota_rule: bool = False,
           batch_resources: bool = True) -> Decision:
    """The resources one container gets at creation or update.

    Args:
        ref: the container and its pod.
        ls_cpuset: the NUMA cpuset hook for LS containers (None: NUMA affinity off).
        looked_up: batch requests read from the pod object, used when the annotation is absent.
        nested_quota_rule: cgroup v1's rule that a quota may not exceed an ancestor's: no BE
            CPU quota is set (:func:`be_resources`).
        batch_resources: the policy's ``beIsolation.batchResources.enabled``; off, a BE container
            gets nothing here (the runtime's BestEffort values), as the agent's round then sets
            nothing either.
    """
    try:
        level = qos.qos_level_of(ref.pod_annotations)
    except qos.AnnotationError as err:
        return Decision(None, problem=str(err))
    if level is None or level is qos.QoSLevel.HLS:
        return Decision(level)
    if level is qos.QoSLevel.LS:
        cpuset = ls_cpuset(ref) if ls_cpuset else None
        if isinstance(cpuset, str):
            cpuset = Cpuset(cpuset, "")
        if not cpuset or not cpuset.cpus:
            return Decision(level)
        return Decision(level, Resources(cpuset_cpus=cpuset.cpus, cpuset_mems=cpuset.mems or None))
    if not batch_resources:
        return Decision(level)
    try:
        requests = batch_requests_of(ref.pod_annotations)
    except BatchResourcesAnnotationError as err:
        return Decision(level, be_resources(None), problem=str(err))
    if requests is None and looked_up is not None:
        requests = dict(looked_up)
    if requests is None:
        return Decision(level, be_resources(None), needs_lookup=True)
    return Decision(level, be_resources(requests.get(ref.container_name), nested_quota_rule=nested_quota_rule))


def _differs(wanted: Resources, current: Resources) -> bool:
    return any(w is not None and w != c for (_, w), (_, c) in zip(wanted._fields(), current._fields()))


def sync_updates(containers: Iterable[tuple[str, ContainerRef, Resources]], *,
                 ls_cpuset: LSCpusetHook | None = None, nested_quota_rule: bool = False,
                 looked_up: Mapping[str, Mapping[str, BatchRequest]] | None = None,
                 batch_resources: bool = True) -> list[tuple[str, Decision]]:
    """At Synchronize: the existing containers whose resources differ from their decision.

    Args:
        containers: (container id, its ref, its current resources) for every running container.
        nested_quota_rule: as :func:`decide`'s: the quota (the agent's, clamped) is not compared.
        looked_up: pod uid -> batch requests read from its pod object (:func:`decide`'s, per pod):
            without them a BE pod without the annotation would be set back to the minimum shares.
        batch_resources: as :func:`decide`'s.

    Returns:
        (container id, decision) for each container to update; already-right ones are left out,
        so a plugin that reconnects to an unchanged runtime asks for nothing.
    """
    out = []
    for container_id, ref, current in containers:
        decision = decide(ref, ls_cpuset=ls_cpuset, nested_quota_rule=nested_quota_rule,
                          looked_up=(looked_up or {}).get(ref.pod_uid), batch_resources=batch_resources)
        if decision.resources and _differs(decision.resources, current):
            out.append((container_id, decision))
    return out
