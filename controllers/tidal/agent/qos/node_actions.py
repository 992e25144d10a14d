# SPDX-License-Identifier: Apache-2.0
"""The node engine's API calls: the offline-evicting taint, evictions, and Events (I/O only).

* The taint is set or removed with a merge patch carrying the node's ``resourceVersion`` as a
  precondition, so a concurrent change of other taints is never lost (409: retried next round).
* The restore-pending label is set or removed with a merge patch of that one key.
* Evictions go through the Eviction API (``pods/eviction``), so PodDisruptionBudgets are honoured:
  429 means a budget blocks it now.
* Events are ``core/v1`` Events from ``tidal-agent`` on the node or the pod, with the figures.
"""
from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from tidal.api import qos
from tidal.kube.client import ApiError, KubeAPI
from tidal.kube.errors import Conflict

log = logging.getLogger(__name__)

__all__ = ["EvictOutcome", "NodeActions", "has_offline_taint", "with_offline_taint"]

COMPONENT = "tidal-agent"


def has_offline_taint(node: Mapping[str, Any] | None) -> bool:
    return any(t.get("key") == qos.OFFLINE_EVICTING_TAINT_KEY
               for t in ((node or {}).get("spec") or {}).get("taints") or [])


def with_offline_taint(taints: list[dict[str, Any]] | None, present: bool) -> list[dict[str, Any]]:
    """The node's taints with ours added or removed; every other taint kept as it is (pure)."""
    others = [t for t in taints or [] if t.get("key") != qos.OFFLINE_EVICTING_TAINT_KEY]
    if present:
        others.append({"key": qos.OFFLINE_EVICTING_TAINT_KEY, "effect": qos.OFFLINE_EVICTING_TAINT_EFFECT})
    return others


class EvictOutcome(enum.StrEnum):
    EVICTED = "evicted"
    BLOCKED = "blocked"  # a PodDisruptionBudget does not allow it now (429)
    GONE = "gone"        # the pod is already gone (404)


class NodeActions:
    def __init__(self, api: KubeAPI, node: str) -> None:
        self.api = api
        self.node = node

    async def set_offline_taint(self, present: bool) -> bool:
        """Make the taint present or absent; True when the node was changed."""
        node = await self.api.request("GET", f"/api/v1/nodes/{self.node}")
        if has_offline_taint(node) == present:
            return False
        taints = (node.get("spec") or {}).get("taints") or []
        body = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": with_offline_taint(taints, present)}}
        await self.api.request("PATCH", f"/api/v1/nodes/{self.node}", body=body,
                               content_type="application/merge-patch+json")
        return True

    async def set_label(self, key: str, value: str | None) -> None:
        """Set (or, with None, remove) one label of the node: a merge patch of that key only, so
        no other label is touched."""
        await self.api.request("PATCH", f"/api/v1/nodes/{self.node}",
                               body={"metadata": {"labels": {key: value}}},
                               content_type="application/merge-patch+json")

    async def evict(self, namespace: str, name: str) -> EvictOutcome:
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace}}
        try:
            await self.api.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body=body)
        except ApiError as err:
            if err.status == 429:
                return EvictOutcome.BLOCKED
            if err.status == 404:
                return EvictOutcome.GONE
            raise
        return EvictOutcome.EVICTED

    async def event(self, *, kind: str, name: str, namespace: str, uid: str | None, reason: str,
                    message: str, warning: bool = False, event_name: str | None = None,
                    at: datetime | None = None) -> bool:
        """Record an Event on the object; False when `event_name` (a name of its own instead of a
        generated one: an Event that must exist once) names an Event that exists already. `at`:
        when it happened (now if not given; an Event sent again later keeps its time)."""
        now = (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
        ns = namespace or "default"
        meta = {"name": event_name} if event_name else {"generateName": f"{name}.tidal-"}
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {**meta, "namespace": ns},
            "involvedObject": {"apiVersion": "v1", "kind": kind, "name": name,
                               **({"namespace": namespace} if namespace else {}),
                               **({"uid": uid} if uid else {})},
            "reason": reason, "message": message[:1024], "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT, "host": self.node},
            "reportingComponent": COMPONENT, "reportingInstance": self.node,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            await self.api.request("POST", f"/api/v1/namespaces/{ns}/events", body=body)
        except Conflict:
            if event_name:
                return False
            raise
        return True


def evicted_event_name(pod: str, uid: str) -> str:
    """The name of the one TidalEvicted Event of a pod (its uid makes it unique): an agent that
    finishes an eviction after a restart cannot record it twice."""
    return f"{pod[:200]}.tidal-evicted.{uid}"
