# SPDX-License-Identifier: Apache-2.0
"""Writing a node's NodeProfile status (the agent's only write to the API server besides the
eviction work of its QoS engine).

``request`` is ``KubeAPI.request`` (``tidal-agent run`` and ``tidal-agent replay``), which raises
the typed errors of :mod:`tidal.kube.errors`.
"""
from __future__ import annotations

from typing import Any

from tidal.api import qos
from tidal.kube.errors import Conflict, NotFound

PLURAL = "nodeprofiles"
COLLECTION = f"/apis/{qos.API_GROUP}/{qos.API_VERSION}/{PLURAL}"


async def write_status(request, node: str, status: dict[str, Any]) -> None:
    """Merge `status` into NodeProfile `node`'s status, creating the object first if needed."""
    patch = {"method": "PATCH", "path": f"{COLLECTION}/{node}/status", "body": {"status": status},
             "content_type": "application/merge-patch+json"}
    try:
        await request(**patch)
        return
    except NotFound:
        pass
    try:
        await request(method="POST", path=COLLECTION, body={
            "apiVersion": qos.API_GROUP_VERSION, "kind": "NodeProfile", "metadata": {"name": node}})
    except Conflict:
        pass
    await request(**patch)
