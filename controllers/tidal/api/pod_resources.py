# SPDX-License-Identifier: Apache-2.0
"""What a pod object (raw JSON) requests. The one place that counts a pod's batch resources: the
agent's pod view and cgroup limits, the NRI plugin, the manager's batch-requested metric and the
console all read a pod through these functions, so they count it alike.

The rule for batch resources (``kubernetes.io/batch-cpu`` in millicores, ``kubernetes.io/batch-memory``
in bytes; extended resources are plain counts, so batch-cpu "2k" is 2,000 millicores):

* a container's amount is its request, else its limit: the API server defaults an extended
  resource's request to its limit and refuses a request that differs from the limit, so on a
  stored pod both are equal whenever both are set;
* a container whose amount does not parse counts as nothing (admission rejects those; a pod
  created before admission ran may have them);
* a pod's amount is what the scheduler reserves for it (``resource.PodRequests``): the sum over
  its containers and restartable init containers ("sidecars"), or, when larger, the largest
  ordinary init container plus the sidecars started before it.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tidal.api import qos
from tidal.api.quantities import QuantityError, cpu_millicores, memory_bytes

__all__ = ["BatchRequest", "batch_by_container", "batch_requested", "batch_requested_total", "container_batch",
           "container_native", "is_sidecar", "pod_batch", "pod_native", "pod_node_requests", "requested"]


@dataclass(frozen=True)
class BatchRequest:
    """A container's or pod's oversold resources: batch-cpu in millicores, batch-memory in bytes."""

    cpu_millicores: int = 0
    memory_bytes: int = 0

    def __add__(self, other: BatchRequest) -> BatchRequest:
        return BatchRequest(self.cpu_millicores + other.cpu_millicores, self.memory_bytes + other.memory_bytes)

    def max(self, other: BatchRequest) -> BatchRequest:
        """Per resource, the larger amount (as the scheduler compares init containers)."""
        return BatchRequest(max(self.cpu_millicores, other.cpu_millicores),
                            max(self.memory_bytes, other.memory_bytes))


NO_BATCH = BatchRequest()


def container_batch(container: Mapping[str, Any]) -> BatchRequest:
    """A container's batch amount: its request, else its limit; nothing when unparseable."""
    resources = container.get("resources") or {}
    amounts = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    try:
        return BatchRequest(
            cpu_millicores=memory_bytes(amounts[qos.BATCH_CPU_RESOURCE]) if qos.BATCH_CPU_RESOURCE in amounts else 0,
            memory_bytes=memory_bytes(amounts[qos.BATCH_MEMORY_RESOURCE]) if qos.BATCH_MEMORY_RESOURCE in amounts else 0)
    except QuantityError:
        return NO_BATCH


def batch_by_container(pod: Mapping[str, Any]) -> dict[str, BatchRequest]:
    """Per container name (init containers too, they have cgroups of their own), its batch amount."""
    spec = pod.get("spec") or {}
    return {container.get("name", ""): container_batch(container)
            for container in (spec.get("initContainers") or []) + (spec.get("containers") or [])}


def is_sidecar(container: Mapping[str, Any]) -> bool:
    """A restartable init container: it runs beside the pod's containers, as the scheduler counts it."""
    return container.get("restartPolicy") == "Always"


def pod_batch(pod: Mapping[str, Any]) -> BatchRequest:
    """The pod's batch amount as the scheduler reserves it (see the module's docstring)."""
    return _pod_amount(pod, container_batch)


def _pod_amount(pod: Mapping[str, Any], amount_of: Callable[[Mapping[str, Any]], BatchRequest]) -> BatchRequest:
    """``resource.PodRequests`` without overhead: the containers and sidecars, or, when larger per
    resource, the largest ordinary init container plus the sidecars started before it."""
    spec = pod.get("spec") or {}
    total = NO_BATCH
    for container in spec.get("containers") or []:
        total += amount_of(container)
    sidecars = init_peak = NO_BATCH
    for container in spec.get("initContainers") or []:
        amount = amount_of(container)
        if is_sidecar(container):
            total += amount
            sidecars += amount
            init_peak = init_peak.max(sidecars)
        else:
            init_peak = init_peak.max(amount + sidecars)
    return total.max(init_peak)


def batch_requested(pod: Mapping[str, Any]) -> tuple[int, int]:
    """(batch-cpu millicores, batch-memory bytes) of :func:`pod_batch`."""
    amount = pod_batch(pod)
    return amount.cpu_millicores, amount.memory_bytes


def batch_requested_total(pods: Iterable[Mapping[str, Any]]) -> BatchRequest:
    """The sum of :func:`pod_batch` over pods."""
    total = NO_BATCH
    for pod in pods:
        total += pod_batch(pod)
    return total


def requested(pod: Mapping[str, Any], cpu_key: str, memory_key: str,
              cpu_parse: Callable[[Any], int] = cpu_millicores) -> tuple[int, int]:
    """(cpu, memory) the pod's containers request of two native resources; a container whose
    amounts do not parse counts as nothing (admission rejects those; a pod from before it may have them)."""
    cpu = memory = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        requests = ((container.get("resources") or {}).get("requests")) or {}
        try:
            cpu += cpu_parse(requests[cpu_key]) if cpu_key in requests else 0
            memory += memory_bytes(requests[memory_key]) if memory_key in requests else 0
        except QuantityError:
            continue
    return cpu, memory


def container_native(container: Mapping[str, Any]) -> BatchRequest:
    """A container's native ``cpu`` (millicores) and ``memory`` (bytes) requests, in a
    :class:`BatchRequest` used as a plain pair. Requests only: the API server defaults a native
    request to its limit, so a stored pod has them; an amount that does not parse counts as 0."""
    requests = ((container.get("resources") or {}).get("requests")) or {}
    try:
        cpu = cpu_millicores(requests["cpu"]) if "cpu" in requests else 0
    except QuantityError:
        cpu = 0
    try:
        memory = memory_bytes(requests["memory"]) if "memory" in requests else 0
    except QuantityError:
        memory = 0
    return BatchRequest(cpu, memory)


def pod_native(pod: Mapping[str, Any]) -> BatchRequest:
    """The pod's native cpu / memory requests as the scheduler counts them on its node
    (``resource.PodRequests``): containers and init containers by the rule of the module's
    docstring, plus the pod's ``spec.overhead`` (its RuntimeClass's)."""
    overhead = container_native({"resources": {"requests": (pod.get("spec") or {}).get("overhead") or {}}})
    return _pod_amount(pod, container_native) + overhead


def pod_node_requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    """What the pod takes of its node's requests, native and batch together: (cpu millicores,
    memory bytes) = :func:`pod_native` + :func:`pod_batch`. The oversubscription-only node mode
    evicts only while the sum over the node's pods is above 100 % of its allocatable."""
    amount = pod_native(pod) + pod_batch(pod)
    return amount.cpu_millicores, amount.memory_bytes

