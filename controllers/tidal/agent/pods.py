"""The pods of this node, from the API server: list, then watch with resume; re-list on 410.

Only this node's pods are listed and watched (server-side field selector on
``spec.nodeName``), so an agent's traffic does not grow with the cluster.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Mapping

from tidal import qos
from tidal.agent.collector.cgroups import ContainerID, PodQOSClass
from tidal.agent.collector.sampler import PodInfo
from tidal.agent.qos.strategy import ContainerState, PodState
from tidal.kube import raw_json
from tidal.manager.admission.quantities import QuantityError, cpu_millicores, memory_bytes

log = logging.getLogger(__name__)


def _requests(pod: Mapping[str, Any], cpu_key: str, memory_key: str, cpu_parse=cpu_millicores) -> tuple[int, int]:
    cpu = memory = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        requests = ((container.get("resources") or {}).get("requests")) or {}
        try:
            cpu += cpu_parse(requests[cpu_key]) if cpu_key in requests else 0
            memory += memory_bytes(requests[memory_key]) if memory_key in requests else 0
        except QuantityError:
            continue  # admission rejects these; a pod from before it counts without them
    return cpu, memory


def pod_info(pod: Mapping[str, Any]) -> PodInfo | None:
    """The sampler's view of a pod object (raw JSON); None for pods that hold no resources."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return None
    try:
        level = qos.qos_level_of(meta.get("annotations"))
    except qos.AnnotationError:
        level = None
    try:
        qos_class = PodQOSClass(status.get("qosClass") or "BestEffort")
    except ValueError:
        qos_class = PodQOSClass("BestEffort")
    if level is qos.QoSLevel.BE:
        # Extended resources are plain counts: batch-cpu "2k" is 2,000 millicores, not 2,000 cores.
        cpu, memory = _requests(pod, qos.BATCH_CPU_RESOURCE, qos.BATCH_MEMORY_RESOURCE, cpu_parse=memory_bytes)
    else:
        cpu, memory = _requests(pod, "cpu", "memory")
    ids = []
    for cs in (status.get("containerStatuses") or []):
        if cs.get("containerID"):
            try:
                ids.append(ContainerID.parse(cs["containerID"]))
            except ValueError:
                pass
    return PodInfo(uid=meta.get("uid", ""), namespace=meta.get("namespace", ""), name=meta.get("name", ""),
                   qos_class=qos_class, tidal_level=level, container_ids=tuple(ids),
                   cpu_request_millicores=cpu, memory_request_bytes=memory)


def _container_batch(container: Mapping[str, Any]) -> tuple[int, int]:
    resources = container.get("resources") or {}
    # Limits equal requests for extended resources; admission writes both.
    amounts = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    try:
        cpu = memory_bytes(amounts[qos.BATCH_CPU_RESOURCE]) if qos.BATCH_CPU_RESOURCE in amounts else 0
        memory = memory_bytes(amounts[qos.BATCH_MEMORY_RESOURCE]) if qos.BATCH_MEMORY_RESOURCE in amounts else 0
    except QuantityError:
        return 0, 0
    return cpu, memory


def pod_state(pod: Mapping[str, Any], info: PodInfo) -> PodState:
    """The QoS engine's view of a pod: its containers (by runtime ID, once running) with their
    batch resources, and its priority (lowest evicted first)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    ids = {cs.get("name"): cs.get("containerID") for cs in status.get("containerStatuses") or []}
    containers = []
    for container in spec.get("containers") or []:
        cid = ids.get(container.get("name"))
        if not cid:
            continue  # not started yet: its cgroup does not exist
        cpu, memory = _container_batch(container) if info.tidal_level is qos.QoSLevel.BE else (0, 0)
        containers.append(ContainerState(cid, cpu, memory))
    priority = spec.get("priority")
    return PodState(uid=info.uid, qos_class=info.qos_class, tidal_level=info.tidal_level,
                    containers=tuple(containers), namespace=info.namespace, name=info.name,
                    priority=priority if isinstance(priority, int) else 0)


class NodePods:
    """The current pods of one node, kept up to date by `run()`."""

    def __init__(self, api, node: str) -> None:
        from kubernetes_asyncio import client
        self.core = client.CoreV1Api(api)
        self.node = node
        self.pods: dict[str, PodInfo] = {}
        self.states: dict[str, PodState] = {}
        self.resource_version: str | None = None
        self.relists = 0
        self.synced = asyncio.Event()

    def _apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        uid = (obj.get("metadata") or {}).get("uid")
        if not uid:
            return
        info = pod_info(obj) if event_type != "DELETED" else None
        if info is None:
            self.pods.pop(uid, None)
            self.states.pop(uid, None)
        else:
            self.pods[uid] = info
            self.states[uid] = pod_state(obj, info)
        self.resource_version = (obj.get("metadata") or {}).get("resourceVersion") or self.resource_version

    async def relist(self) -> None:
        listing = await raw_json(self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.node}", _preload_content=False))
        pods, states = {}, {}
        for obj in listing.get("items", []):
            info = pod_info(obj)
            if info is not None:
                pods[info.uid] = info
                states[info.uid] = pod_state(obj, info)
        self.pods, self.states = pods, states
        self.resource_version = listing["metadata"]["resourceVersion"]
        self.relists += 1
        self.synced.set()

    async def run(self) -> None:
        from kubernetes_asyncio import watch
        from kubernetes_asyncio.client.exceptions import ApiException
        while True:
            try:
                if self.resource_version is None:
                    await self.relist()
                stream = watch.Watch().stream(
                    self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={self.node}",
                    resource_version=self.resource_version, allow_watch_bookmarks=True, timeout_seconds=300)
                async for event in stream:
                    kind, obj = event["type"], event["raw_object"]
                    if kind == "ERROR":
                        if obj.get("code") == 410:  # our resourceVersion is too old: start over
                            log.info("pod watch of %s expired (410): re-listing", self.node)
                            self.resource_version = None
                            break
                        raise RuntimeError(f"pod watch error: {obj}")
                    if kind == "BOOKMARK":
                        self.resource_version = obj["metadata"]["resourceVersion"]
                        continue
                    self._apply(kind, obj)
            except asyncio.CancelledError:
                raise
            except ApiException as err:
                if err.status == 410:
                    self.resource_version = None
                    continue
                log.warning("pod watch of %s failed (%s): retrying", self.node, err)
                await asyncio.sleep(1)
            except Exception as err:  # network trouble: resume from the last resourceVersion
                log.warning("pod watch of %s failed (%s): retrying", self.node, err)
                await asyncio.sleep(1)
