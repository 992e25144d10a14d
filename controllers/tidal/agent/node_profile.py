# SPDX-License-Identifier: Apache-2.0
"""Writing a node's NodeProfile status (the agent's only write to the API server besides the
eviction work of its QoS engine).

``request`` is ``KubeAPI.request`` (``tidal-agent run``) or ``tidal.kube.requester(api)`` over a
kubernetes_asyncio client (``tidal-agent replay``); both raise an error with ``.status``.
"""
from __future__ import annotations

from typing import Any

from tidal.api import qos

PLURAL = "nodeprofiles"
COLLECTION = f"/apis/{qos.API_GROUP}/{qos.API_VERSION}/{PLURAL}"


async def write_status(request, node: str, status: dict[str, Any]) -> None:
    """Merge `status` into NodeProfile `node`'s status, creating the object first if needed."""
    patch = {"method": "PATCH", "path": f"{COLLECTION}/{node}/status", "body": {"status": status},
             "content_type": "application/merge-patch+json"}
    try:
        await request(**patch)
        return
    except Exception as err:
        if getattr(err, "status", None) != 404:
            raise
    try:
        await request(method="POST", path=COLLECTION, body={
            "apiVersion": qos.API_GROUP_VERSION, "kind": "NodeProfile", "metadata": {"name": node}})
    except Exception as err:
        if getattr(err, "status", None) != 409:
            raise
    await request(**patch)
