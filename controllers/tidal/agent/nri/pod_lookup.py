# SPDX-License-Identifier: Apache-2.0
"""Batch resources of a pod read from the API server, for BE pods without the annotation.

The CRI carries no extended resources, so when admission did not record them on the pod
(:data:`.decisions.BATCH_RESOURCES_ANNOTATION`), the plugin reads the pod object once, by
namespace and name, and checks its uid (a pod recreated under the same name is another pod): the
uid on the node, which for a static pod is its own, not its mirror pod's.
"""
from __future__ import annotations

from tidal.api.pod_identity import node_uid
from tidal.api.pod_resources import BatchRequest, batch_by_container
from tidal.kube.client import KubeAPI

__all__ = ["ApiServerPods"]


class ApiServerPods:
    """``PodLookup`` over a KubeAPI (one GET per BE pod lacking the annotation)."""

    def __init__(self, api: KubeAPI) -> None:
        self.api = api

    async def __call__(self, namespace: str, name: str, uid: str) -> dict[str, BatchRequest] | None:
        pod = await self.api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        if uid and node_uid(pod) != uid:
            return None
        return batch_by_container(pod)
