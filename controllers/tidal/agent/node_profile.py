"""Writing a node's NodeProfile status (the agent's only write to the API server)."""
from __future__ import annotations

from typing import Any

from tidal import qos
from tidal.kube import raw

PLURAL = "nodeprofiles"


async def write_status(api, node: str, status: dict[str, Any]) -> None:
    """Merge `status` into NodeProfile `node`'s status, creating the object first if needed."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException
    custom = client.CustomObjectsApi(api)
    body = {"status": status}
    try:
        await raw(custom.patch_cluster_custom_object_status(
            qos.API_GROUP, qos.API_VERSION, PLURAL, node, body,
            _content_type="application/merge-patch+json", _preload_content=False))
        return
    except ApiException as err:
        if err.status != 404:
            raise
    try:
        await raw(custom.create_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, PLURAL, {
            "apiVersion": qos.API_GROUP_VERSION, "kind": "NodeProfile", "metadata": {"name": node}},
            _preload_content=False))
    except ApiException as err:
        if err.status != 409:
            raise
    await raw(custom.patch_cluster_custom_object_status(
        qos.API_GROUP, qos.API_VERSION, PLURAL, node, body,
        _content_type="application/merge-patch+json", _preload_content=False))
