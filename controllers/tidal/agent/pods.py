# SPDX-License-Identifier: Apache-2.0
"""The pods of this node, from the API server: list, then watch with resume; re-list on 410.

Only this node's pods are listed and watched (server-side field selector on
``spec.nodeName``), so an agent's traffic does not grow with the cluster.
"""
from __future__ import annotations

import logging
from typing import Any, Mapping

from tidal.api import qos
from tidal.api.pod_identity import node_uid
from tidal.agent.collector.cgroups import ContainerID, PodQOSClass
from tidal.agent.collector.sampler import PodInfo
from tidal.agent.qos.strategy import ContainerState, PodState
from tidal.kube.client import KubeAPI
from tidal.kube.watch import Watcher
from tidal.api.pod_resources import (BatchRequest, batch_requested, container_batch, is_sidecar, pod_batch,
                                     pod_node_requests, requested)

log = logging.getLogger(__name__)


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
        cpu, memory = batch_requested(pod)
    else:
        cpu, memory = requested(pod, "cpu", "memory")
    ids = []
    for cs in (status.get("containerStatuses") or []):
        if cs.get("containerID"):
            try:
                ids.append(ContainerID.parse(cs["containerID"]))
            except ValueError:
                pass
    # the uid on the node (a static pod's, not its mirror pod's): cgroups are named after it
    return PodInfo(uid=node_uid(pod), namespace=meta.get("namespace", ""), name=meta.get("name", ""),
                   qos_class=qos_class, tidal_level=level, container_ids=tuple(ids),
                   cpu_request_millicores=cpu, memory_request_bytes=memory)


def pod_state(pod: Mapping[str, Any], info: PodInfo) -> PodState:
    """The QoS engine's view of a pod: its containers (by runtime ID, once running) with their
    batch resources, its priority (lowest evicted first) and what it takes of the node's
    requests (native and batch, every level: the oversubscription-only mode's eviction rule)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    ids = {cs.get("name"): cs.get("containerID")
           for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]}
    be = info.tidal_level is qos.QoSLevel.BE
    # the containers that run beside each other: sidecars (restartable init containers) and the
    # ordinary containers (an ordinary init container has ended before these start)
    running = [c for c in spec.get("initContainers") or [] if is_sidecar(c)] + list(spec.get("containers") or [])
    batches = [container_batch(c) if be else BatchRequest() for c in running]
    containers = []
    for container, batch in zip(running, batches):
        cid = ids.get(container.get("name"))
        if not cid:
            continue  # not started yet: its cgroup does not exist
        containers.append(ContainerState(cid, batch.cpu_millicores, batch.memory_bytes))
    amount = None
    if be:  # the pod's limits count every container, started or not, as the scheduler does
        total = pod_batch(pod)
        amount = (total.cpu_millicores if all(b.cpu_millicores > 0 for b in batches) else 0,
                  total.memory_bytes if all(b.memory_bytes > 0 for b in batches) else 0)
    init_started = any(ids.get(c.get("name")) for c in spec.get("initContainers") or [] if not is_sidecar(c))
    priority = spec.get("priority")
    return PodState(uid=info.uid, qos_class=info.qos_class, tidal_level=info.tidal_level,
                    containers=tuple(containers), namespace=info.namespace, name=info.name,
                    priority=priority if isinstance(priority, int) else 0,
                    node_requests=pod_node_requests(pod),
                    terminating=bool((pod.get("metadata") or {}).get("deletionTimestamp")),
                    pod_batch=amount, init_started=init_started)


class NodePods(Watcher):
    """The current pods of one node, kept up to date by `run()`: ``pods`` (the sampler's view)
    and ``states`` (the QoS engine's view), by their uid on the node (a static pod's own, not its
    mirror pod's: :mod:`tidal.api.pod_identity`)."""

    def __init__(self, api: KubeAPI, node: str) -> None:
        super().__init__(api, "/api/v1/pods", f"pods of node {node}",
                         field_selector=f"spec.nodeName={node}", transform=_views)
        self.node = node

    @property
    def pods(self) -> dict[str, PodInfo]:
        return {views[0].uid: views[0] for views in self.objects.values()}

    @property
    def states(self) -> dict[str, PodState]:
        return {views[1].uid: views[1] for views in self.objects.values()}


def _views(obj: Mapping[str, Any]) -> tuple[PodInfo, PodState] | None:
    info = pod_info(obj)
    return None if info is None else (info, pod_state(obj, info))
