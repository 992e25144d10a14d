# SPDX-License-Identifier: Apache-2.0
"""What the advanced node features need to know about a pod beyond :class:`PodState`.

:class:`PodState` carries what the BE isolation strategies need (containers with their batch
resources). CPU burst, cache limits and NUMA affinity also need a pod's opt-in annotations and its
online containers' native CPU requests and limits; the kernel QoS level needs the raw
``volcano.sh/qos-level`` value (Volcano's HLS is Tidal's LS, but one kernel level above LS). :class:`FeaturePodState` is a ``PodState``
with those extra fields (so every existing consumer sees a plain ``PodState``), built from the
raw pod object by :func:`feature_pod_state`; :class:`FeaturePods` is the agent's pod watcher
producing them. Annotations that do not parse are logged once and count as absent (admission
rejects them; a pod from before admission runs without the feature); the egress limit's problem
is kept in the state instead, for the egress feature to report.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidal.api import qos
from tidal.agent.collector.sampler import PodInfo
from tidal.agent.pods import NodePods, pod_info, pod_state
from tidal.api.quantities import QuantityError, cpu_millicores

from .strategy import PodState

log = logging.getLogger(__name__)

__all__ = ["ContainerCPU", "FeaturePodState", "FeaturePods", "feature_pod_state", "feature_views"]


@dataclass(frozen=True)
class ContainerCPU:
    """A started container's native CPU request and limit (millicores; 0 = not set), and its name."""

    id: str
    request_millicores: int = 0
    limit_millicores: int = 0
    #: for log lines only (the container is known by its id): not part of equality
    name: str = field(default="", compare=False)


@dataclass(frozen=True)
class FeaturePodState(PodState):
    cpu_burst: qos.CPUBurstRequest | None = None
    cache_limit: qos.CacheLimit | None = None
    cpu: tuple[ContainerCPU, ...] = ()
    #: ``colocation.tidal.io/egress-bandwidth-mbps`` (Mbit/s), None when absent or invalid
    egress_mbps: float | None = None
    #: why that annotation is invalid ("" when it is fine or absent)
    egress_problem: str = ""
    #: ``volcano.sh/qos-level`` as written (stripped), when it is read at all: only while the
    #: canonical ``colocation.tidal.io/qos-level`` is absent (:func:`tidal.api.qos.qos_level_of`)
    volcano_qos_level: str | None = None


def _millicores(amounts: Mapping[str, Any]) -> int:
    try:
        return cpu_millicores(amounts["cpu"]) if "cpu" in amounts else 0
    except QuantityError:
        return 0


def feature_pod_state(pod: Mapping[str, Any], base: PodState) -> FeaturePodState:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    annotations = meta.get("annotations") or {}
    label = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    burst = cache = None
    try:
        burst = qos.cpu_burst_of(annotations)
    except qos.AnnotationValueError as err:
        log.warning("pod %s: %s; no CPU burst", label, err)
    try:
        cache = qos.cache_limit_of(annotations)
    except qos.AnnotationValueError as err:
        log.warning("pod %s: %s; default cache level", label, err)
    egress, egress_problem = None, ""
    try:
        egress = qos.egress_bandwidth_limit_of(annotations)
    except qos.AnnotationValueError as err:
        egress_problem = str(err)
    statuses = {cs.get("name"): cs for cs in (pod.get("status") or {}).get("containerStatuses") or []}
    cpu = []
    for container in spec.get("containers") or []:
        status = statuses.get(container.get("name")) or {}
        cid = status.get("containerID")
        if not cid:
            continue
        resources = container.get("resources") or {}
        limit = _millicores(resources.get("limits") or {})
        # the limit in force: during an in-place resize the spec's and the kubelet's (the status's
        # resources, what its cgroups hold) differ; a burst must fit the smaller (the kernel refuses
        # a burst above the quota, and a quota lowered below the burst)
        applied = _millicores(((status.get("resources") or {}).get("limits")) or {})
        if limit and applied:
            limit = min(limit, applied)
        cpu.append(ContainerCPU(cid, _millicores(resources.get("requests") or {}), limit,
                                str(container.get("name") or "")))
    volcano = None
    if qos.QOS_ANNOTATION not in annotations and qos.VOLCANO_QOS_ANNOTATION in annotations:
        volcano = str(annotations[qos.VOLCANO_QOS_ANNOTATION]).strip()
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(PodState)}
    return FeaturePodState(**fields, cpu_burst=burst, cache_limit=cache, cpu=tuple(cpu),
                           egress_mbps=egress, egress_problem=egress_problem, volcano_qos_level=volcano)


def feature_views(obj: Mapping[str, Any]) -> tuple[PodInfo, PodState] | None:
    info = pod_info(obj)
    return None if info is None else (info, feature_pod_state(obj, pod_state(obj, info)))


class FeaturePods(NodePods):
    """:class:`NodePods` whose ``states`` are :class:`FeaturePodState`\\ s."""

    def __init__(self, api, node: str) -> None:
        super().__init__(api, node)
        self.transform = feature_views
