# SPDX-License-Identifier: Apache-2.0
"""Batch resources of a pod read from the API server, for BE pods without the annotation.

The CRI carries no extended resources, so when admission did not record them on the pod
(:data:`.decisions.BATCH_RESOURCES_ANNOTATION`), the plugin reads the pod object once, by
namespace and name, and checks its uid (a pod recreated under the same name is another pod).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidal.api import qos
from tidal.api.quantities import QuantityError, memory_bytes

from .decisions import BatchRequest

__all__ = ["ApiServerPods", "batch_requests_from_pod"]


def _count(resources: Mapping[str, Any], key: str) -> int:
    try:
        # extended resources are plain counts (batch-cpu in millicores)
        return memory_bytes(resources[key]) if key in resources else 0
    except QuantityError:
        return 0


def batch_requests_from_pod(pod: Mapping[str, Any]) -> dict[str, BatchRequest]:
    """Per container (init containers too), its batch limits, else its batch requests."""
    spec = pod.get("spec") or {}
    out = {}
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        res = container.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        source = {k: limits.get(k, requests.get(k)) for k in (qos.BATCH_CPU_RESOURCE, qos.BATCH_MEMORY_RESOURCE)
                  if k in limits or k in requests}
        out[container.get("name", "")] = BatchRequest(cpu_millicores=_count(source, qos.BATCH_CPU_RESOURCE),
                                                      memory_bytes=_count(source, qos.BATCH_MEMORY_RESOURCE))
    return out


class ApiServerPods:
    """``PodLookup`` over a kubernetes_asyncio ApiClient (one GET per BE pod lacking the annotation)."""

    def __init__(self, api) -> None:
        from kubernetes_asyncio import client
        self.core = client.CoreV1Api(api)

    async def __call__(self, namespace: str, name: str, uid: str) -> dict[str, BatchRequest] | None:
        from tidal.kube import raw_json
        pod = await raw_json(self.core.read_namespaced_pod(name, namespace, _preload_content=False))
        if uid and (pod.get("metadata") or {}).get("uid") != uid:
            return None
        return batch_requests_from_pod(pod)
