# SPDX-License-Identifier: Apache-2.0
"""The oversell master's I/O: one cycle reads nodes and NodeProfiles, decides (pure, in
`node_decision`), and writes only what changed beyond the threshold.

Writes per node, only when `should_write` says so for either resource:
- mode ``extendedResources``: a JSON patch of the Node's status (capacity and allocatable
  of ``kubernetes.io/batch-cpu`` / ``kubernetes.io/batch-memory``);
- mode ``volcanoAnnotations``: Volcano's ``volcano.sh/oversubscription-cpu|memory``
  annotations and the ``volcano.sh/oversubscription=true`` label;
and then the breakdown into ``NodeProfile.status.oversell``, plus an Event when a value
drops by half or more. Nodes that lost the oversubscription label are driven to 0.
"""
from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
from dataclasses import dataclass, field
from typing import Any

from tidal.api import qos
from tidal.api.json_patch import escape as _escape
from tidal.kube import raw, raw_json
from tidal.manager.oversell.arithmetic import should_write
from tidal.manager.oversell.node_decision import (VOLCANO_CPU_ANNOTATION, VOLCANO_MEMORY_ANNOTATION,
                                                  VOLCANO_OVERSUBSCRIPTION_LABEL, NodeDecision,
                                                  OversellSettings, current_amounts, decide_node)

log = logging.getLogger(__name__)
NODE_PROFILES = (qos.API_GROUP, qos.API_VERSION, "nodeprofiles")
LARGE_DROP_FRACTION = 0.5
MAX_CONCURRENT_WRITES = 32


@dataclass
class CycleResult:
    nodes: int = 0
    node_patches: int = 0
    profile_patches: int = 0
    events: int = 0
    decisions: dict[str, NodeDecision] = field(default_factory=dict)


def node_status_patch(node: dict, amounts: dict[str, int]) -> list[dict[str, Any]]:
    """JSON patch setting the batch resources in capacity and allocatable (adds missing maps)."""
    status = node.get("status") or {}
    ops: list[dict[str, Any]] = []
    for field_name in ("capacity", "allocatable"):
        if field_name not in status:
            ops.append({"op": "add", "path": f"/status/{field_name}", "value": {}})
        for name, value in amounts.items():
            ops.append({"op": "add", "path": f"/status/{field_name}/{_escape(name)}", "value": str(value)})
    return ops


def volcano_patch(amounts: dict[str, int]) -> dict[str, Any]:
    return {"metadata": {
        "labels": {VOLCANO_OVERSUBSCRIPTION_LABEL: "true"},
        "annotations": {VOLCANO_CPU_ANNOTATION: str(amounts[qos.BATCH_CPU_RESOURCE]),
                        VOLCANO_MEMORY_ANNOTATION: str(amounts[qos.BATCH_MEMORY_RESOURCE])}}}


class OversellMaster:
    """Run `cycle()` periodically while leading; `api` is a kubernetes_asyncio ApiClient."""

    def __init__(self, api, settings: OversellSettings, clock=lambda: datetime.datetime.now(datetime.timezone.utc)):
        from kubernetes_asyncio import client
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.api = api
        self.settings = settings
        self.clock = clock

    async def _patch_node_status(self, name: str, ops: list[dict]) -> None:
        # A list body is sent as application/json-patch+json; the answer is not needed.
        await raw(self.core.patch_node_status(name, ops, _preload_content=False))

    async def cycle(self) -> CycleResult:
        now = self.clock()
        result = CycleResult()
        raw_nodes = await self._list_nodes()
        profiles = await self._list_profiles()
        writes = []
        for node in raw_nodes:
            meta = node.get("metadata") or {}
            name = meta.get("name", "")
            labelled = (meta.get("labels") or {}).get(qos.OVERSUBSCRIPTION_NODE_LABEL) == "true"
            current = current_amounts(node, self.settings.reporting_mode)
            if not labelled and not any(current.values()):
                continue  # never oversold, nothing to undo
            result.nodes += 1
            decision = decide_node(node, profiles.get(name) if labelled else None, self.settings, now)
            if not labelled:
                decision = dataclasses.replace(decision, notes=(
                    f"node lost the {qos.OVERSUBSCRIPTION_NODE_LABEL} label: batch resources 0",))
            result.decisions[name] = decision
            desired = decision.amounts
            if any(should_write(current[k], desired[k], self.settings.change_threshold_percent) for k in desired):
                writes.append(self._write(node, decision, current, name in profiles, now, result))
        # Bounded concurrency: a cycle that changes thousands of nodes stays within seconds
        # without flooding the API server (its priority and fairness limits still apply).
        semaphore = asyncio.Semaphore(MAX_CONCURRENT_WRITES)

        async def bounded(write):
            async with semaphore:
                await write

        await asyncio.gather(*(bounded(w) for w in writes))
        return result

    async def _write(self, node: dict, decision: NodeDecision, current: dict, has_profile: bool,
                     now: datetime.datetime, result: CycleResult) -> None:
        name, desired = decision.node, decision.amounts
        if self.settings.reporting_mode == "volcanoAnnotations":
            await self.core.patch_node(name, volcano_patch(desired))
        else:
            await self._patch_node_status(name, node_status_patch(node, desired))
        result.node_patches += 1
        log.info("node %s: batch-cpu %s -> %s m, batch-memory %s -> %s bytes", name,
                 current[qos.BATCH_CPU_RESOURCE], desired[qos.BATCH_CPU_RESOURCE],
                 current[qos.BATCH_MEMORY_RESOURCE], desired[qos.BATCH_MEMORY_RESOURCE])
        if has_profile:
            await raw(self.custom.patch_cluster_custom_object_status(
                *NODE_PROFILES, name, {"status": {"oversell": decision.to_status(now)}},
                _content_type="application/merge-patch+json", _preload_content=False))
            result.profile_patches += 1
        if any(current[k] and desired[k] <= current[k] * (1 - LARGE_DROP_FRACTION) for k in desired):
            await self._event(name, decision, current, now)
            result.events += 1

    async def _list_nodes(self) -> list[dict]:
        # Raw JSON, not the generated models: a 5,000-node list deserialises several times faster.
        return (await raw_json(self.core.list_node(_preload_content=False))).get("items", [])

    async def _list_profiles(self) -> dict[str, dict]:
        try:
            listing = await raw_json(self.custom.list_cluster_custom_object(*NODE_PROFILES,
                                                                             _preload_content=False))
        except Exception as err:  # CRD missing: every node degrades to 0, which is safe
            log.warning("cannot list NodeProfiles (%s): every oversold node goes to 0", err)
            return {}
        return {item["metadata"]["name"]: item for item in listing.get("items", [])}

    async def _event(self, name: str, decision: NodeDecision, current: dict, now: datetime.datetime) -> None:
        from kubernetes_asyncio import client
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        message = (f"batch resources dropped: cpu {current[qos.BATCH_CPU_RESOURCE]} -> {decision.cpu.result} m, "
                   f"memory {current[qos.BATCH_MEMORY_RESOURCE]} -> {decision.memory.result} bytes; "
                   + "; ".join(decision.notes or (decision.cpu.reason,)))
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{name}.tidal-oversell.", namespace="default"),
            involved_object=client.V1ObjectReference(kind="Node", name=name, uid=name, api_version="v1"),
            reason="BatchResourcesDropped", message=message[:1024], type="Warning",
            source=client.V1EventSource(component="tidal-manager"),
            first_timestamp=stamp, last_timestamp=stamp, count=1)
        await self.core.create_namespaced_event("default", body)
