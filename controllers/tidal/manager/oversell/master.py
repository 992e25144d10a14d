# SPDX-License-Identifier: Apache-2.0
"""The oversell master's I/O: one cycle takes the nodes and NodeProfiles, decides (pure, in
`node_decision`), and writes only what changed beyond the threshold.

Inputs: once :meth:`OversellMaster.start` ran (the manager's loop), watch caches — every node
that is oversold (`node_decision.mode_of`: Tidal's label or Volcano's alias) or still carries
batch amounts or the master's Volcano-label marker (the others are dropped as their events
arrive, so a node labelled later shows up at once), and every NodeProfile — re-listed every
:data:`RESYNC_SECONDS` as a safety net. A cycle then makes no reads at all. Without ``start`` (a
one-off cycle) it lists both afresh. Either way a profile's age is judged against the clock at
each cycle, so a profile its agent stopped updating still drives its node to 0.

Writes per node, only when `should_write` says so for either resource:
- mode ``extendedResources``: a JSON patch of the Node's status (capacity and allocatable
  of ``kubernetes.io/batch-cpu`` / ``kubernetes.io/batch-memory``);
- mode ``volcanoAnnotations``: Volcano's ``volcano.sh/oversubscription-cpu|memory``
  annotations and the ``volcano.sh/oversubscription=true`` label, marked in the same patch
  with ``colocation.tidal.io/volcano-oversubscription-written: "true"`` so the label is not read
  back as the alias (`node_decision.volcano_label_changes`);
and then the breakdown into ``NodeProfile.status.oversell``, plus an Event when a value
drops by half or more (sent at the cycle's end; one the API server did not take is tried again
at the next cycle, in order: :mod:`tidal.kube.event_queue`). Nodes no longer oversold (a
colocation-only node included) are driven to 0; in ``volcanoAnnotations`` mode the label and
marker the master wrote then go too.
"""
from __future__ import annotations

import asyncio
import datetime
import logging
from dataclasses import dataclass, field
from typing import Any

from tidal.api import qos
from tidal.api.json_patch import escape as _escape
from tidal.kube import KubeAPI, NotFound, Watcher, custom_path, error_summary
from tidal.kube.event_queue import EventQueue, PendingEvent
from tidal.manager.oversell.arithmetic import should_write
from tidal.tasks import cancel_and_wait
from tidal.manager.oversell.node_decision import (VOLCANO_CPU_ANNOTATION, VOLCANO_LABEL_WRITTEN_ANNOTATION,
                                                  VOLCANO_MEMORY_ANNOTATION, NodeDecision, OversellSettings,
                                                  breakdown_disagrees, current_amounts, decide_node,
                                                  master_wrote_volcano_label, mode_of, volcano_label_changes)

log = logging.getLogger(__name__)
NODES = "/api/v1/nodes"
NODE_PROFILES = custom_path("nodeprofiles")
EVENTS = "/api/v1/namespaces/default/events"
LARGE_DROP_FRACTION = 0.5
MAX_CONCURRENT_WRITES = 32
#: seconds between two full re-lists of the watched nodes and NodeProfiles
RESYNC_SECONDS = 60.0
REPORTING_MODES = ("extendedResources", "volcanoAnnotations")


@dataclass
class CycleResult:
    nodes: int = 0
    node_patches: int = 0
    profile_patches: int = 0
    events: int = 0
    decisions: dict[str, NodeDecision] = field(default_factory=dict)
    #: node -> why its writes failed this cycle (retried by the next one; the others went on)
    failed: dict[str, str] = field(default_factory=dict)
    #: node -> the batch amounts it carried when the cycle read it
    current: dict[str, dict[str, int]] = field(default_factory=dict)
    #: nodes whose batch amounts this cycle wrote (a later write for the node may have failed)
    published: set[str] = field(default_factory=set)

    def on_node(self, name: str) -> dict[str, int]:
        """The batch amounts on the decided node after the cycle: the decision where this cycle
        wrote it, else what the node carried (a change within the threshold, or a failed write;
        none at all is 0)."""
        if name in self.published:
            return self.decisions[name].amounts
        return {k: v or 0 for k, v in self.current[name].items()}


def other_mode_leftovers(node: dict, reporting_mode: str) -> tuple[str, Any] | None:
    """What the other reporting mode left on the node, to undo (None: nothing), after the
    policy's ``reportingMode`` changed: in ``volcanoAnnotations`` mode, batch extended resources
    in its status (``("status", json patch)`` to 0); in ``extendedResources`` mode, the Volcano
    label, marker and annotations the master wrote (``("metadata", strategic patch)`` removing
    them; a Volcano label it did not write, and its annotations, are left alone)."""
    if reporting_mode == "volcanoAnnotations":
        stale = [k for k, v in current_amounts(node, "extendedResources").items() if v]
        return ("status", node_status_patch(node, {k: 0 for k in stale})) if stale else None
    if not master_wrote_volcano_label(node):
        return None
    labels = (node.get("metadata") or {}).get("labels") or {}
    metadata: dict[str, Any] = {"annotations": {VOLCANO_LABEL_WRITTEN_ANNOTATION: None, VOLCANO_CPU_ANNOTATION: None,
                                                VOLCANO_MEMORY_ANNOTATION: None}}
    if qos.VOLCANO_OVERSUBSCRIPTION_LABEL in labels:
        metadata["labels"] = {qos.VOLCANO_OVERSUBSCRIPTION_LABEL: None}
    return ("metadata", {"metadata": metadata})


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


def volcano_patch(amounts: dict[str, int], label_changes: dict[str, dict] | None = None) -> dict[str, Any]:
    """Strategic merge patch of Volcano's annotations, with `volcano_label_changes` (the
    ``volcano.sh/oversubscription`` label and the master's marker; None values remove)."""
    changes = label_changes or {}
    metadata: dict[str, Any] = {
        "annotations": {VOLCANO_CPU_ANNOTATION: str(amounts[qos.BATCH_CPU_RESOURCE]),
                        VOLCANO_MEMORY_ANNOTATION: str(amounts[qos.BATCH_MEMORY_RESOURCE]),
                        **changes.get("annotations", {})}}
    if changes.get("labels"):
        metadata["labels"] = dict(changes["labels"])
    return {"metadata": metadata}


def master_node(node: dict) -> dict | None:
    """What the master keeps of a node: None for a node it has nothing to do with (not oversold,
    no batch amounts in any reporting mode, no Volcano label of its own to remove); else the node
    without its image list and managed fields, which no decision reads and which make most of a
    real node's size."""
    meta = node.get("metadata") or {}
    if (not mode_of(node).oversold and not master_wrote_volcano_label(node)
            and not any(any(current_amounts(node, mode).values()) for mode in REPORTING_MODES)):
        return None
    status = node.get("status") or {}
    slim = dict(node)
    slim["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    if "images" in status:
        slim["status"] = {k: v for k, v in status.items() if k != "images"}
    return slim


def _profile(obj: dict) -> dict:
    meta = obj.get("metadata") or {}
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}} if "managedFields" in meta \
        else obj


class OversellMaster:
    """`cycle()` periodically while leading, after `start()` (watch caches) and until `close()`;
    or a one-off `cycle()` (fresh lists)."""

    def __init__(self, api: KubeAPI, settings: OversellSettings,
                 clock=lambda: datetime.datetime.now(datetime.timezone.utc),
                 resync_seconds: float = RESYNC_SECONDS):
        self.api = api
        self.settings = settings
        self.clock = clock
        self.nodes = Watcher(api, NODES, "nodes (oversell)", transform=master_node, page_size=500,
                             resync_seconds=resync_seconds)
        self.profiles = Watcher(api, NODE_PROFILES, "NodeProfiles (oversell)", transform=_profile, page_size=500,
                                resync_seconds=resync_seconds)
        self._tasks: list[asyncio.Task] = []
        #: BatchResourcesDropped Events not sent yet (tidal.kube.event_queue)
        self.events = EventQueue("the oversell master's nodes", "tidal-oversell")

    async def start(self) -> None:
        """List both inputs once and keep them current by watching, until `close()`."""
        await self.nodes.relist()
        await self._relist_profiles()
        self._tasks = [asyncio.create_task(w.run()) for w in (self.nodes, self.profiles)]

    @property
    def running(self) -> bool:
        """Whether the watch caches run (`start()` was called, `close()` not yet)."""
        return bool(self._tasks)

    async def close(self) -> None:
        await cancel_and_wait(*self._tasks)
        self._tasks = []

    async def __aenter__(self) -> OversellMaster:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _relist_profiles(self) -> None:
        try:
            await self.profiles.relist()
        except Exception as err:  # CRD missing: every node degrades to 0, which is safe
            self.profiles.objects = {}
            log.warning("cannot list NodeProfiles (%s): every oversold node goes to 0", error_summary(err))

    async def _inputs(self) -> tuple[list[dict], dict[str, dict]]:
        """The nodes to decide and the NodeProfiles by name: the caches when started, else fresh lists."""
        if not self.running:
            await self.nodes.relist()
            await self._relist_profiles()
        elif self.nodes.failing:  # as a failed list did: no cycle on nodes the master cannot see
            raise RuntimeError(f"watch of nodes failing: {error_summary(self.nodes.last_error)}")
        elif self.profiles.failing and isinstance(self.profiles.last_error, NotFound):
            log.warning("no NodeProfiles (%s): every oversold node goes to 0",
                        error_summary(self.profiles.last_error))
        profiles = {}
        for item in self.profiles.objects.values():
            profiles[item["metadata"]["name"]] = item
        return list(self.nodes.objects.values()), profiles

    async def _patch_node_status(self, name: str, ops: list[dict]) -> None:
        await self.api.json_patch(f"{NODES}/{name}/status", ops)

    async def cycle(self) -> CycleResult:
        now = self.clock()
        result = CycleResult()
        raw_nodes, profiles = await self._inputs()
        writes = []
        volcano = self.settings.reporting_mode == "volcanoAnnotations"
        for node in raw_nodes:
            name = (node.get("metadata") or {}).get("name", "")
            mode = mode_of(node)
            current = current_amounts(node, self.settings.reporting_mode)
            label_changes = volcano_label_changes(node, mode) if volcano else {}
            leftovers = other_mode_leftovers(node, self.settings.reporting_mode)
            if not mode.oversold and not any(current.values()) and not label_changes and not leftovers:
                continue  # never oversold, nothing to undo
            result.nodes += 1
            decision = decide_node(node, profiles.get(name), self.settings, now)
            result.decisions[name] = decision
            result.current[name] = current
            desired = decision.amounts
            if label_changes or leftovers or any(
                    should_write(current[k], desired[k], self.settings.change_threshold_percent) for k in desired) \
                    or breakdown_disagrees(profiles.get(name), current, decision.notes):
                writes.append((name, self._write(node, decision, current, name in profiles, now, result,
                                                 label_changes, leftovers)))
        # Bounded concurrency: a cycle that changes thousands of nodes stays within seconds
        # without flooding the API server (its priority and fairness limits still apply).
        semaphore = asyncio.Semaphore(MAX_CONCURRENT_WRITES)

        async def bounded(name, write):
            async with semaphore:
                try:
                    await write
                except Exception as err:  # one node's failure (gone, throttled) stops no other's
                    result.failed[name] = error_summary(err)
                    log.warning("node %s: writing its batch resources failed, the next cycle retries: %s",
                                name, error_summary(err))

        await asyncio.gather(*(bounded(name, w) for name, w in writes))
        await self._send_events(result)
        return result

    async def _write(self, node: dict, decision: NodeDecision, current: dict, has_profile: bool,
                     now: datetime.datetime, result: CycleResult, label_changes: dict | None = None,
                     leftovers: tuple[str, Any] | None = None) -> None:
        name, desired = decision.node, decision.amounts
        if self.settings.reporting_mode == "volcanoAnnotations":
            await self.api.strategic_patch(f"{NODES}/{name}", volcano_patch(desired, label_changes))
        else:
            await self._patch_node_status(name, node_status_patch(node, desired))
        result.node_patches += 1
        result.published.add(name)
        if leftovers is not None:  # the other reporting mode's amounts, after a switch of reportingMode
            kind, patch = leftovers
            if kind == "status":
                await self._patch_node_status(name, patch)
            else:
                await self.api.strategic_patch(f"{NODES}/{name}", patch)
            log.info("node %s: what the other reporting mode wrote is undone (%s)", name, kind)
            result.node_patches += 1
        log.info("node %s: batch-cpu %s -> %s m, batch-memory %s -> %s bytes", name,
                 current[qos.BATCH_CPU_RESOURCE], desired[qos.BATCH_CPU_RESOURCE],
                 current[qos.BATCH_MEMORY_RESOURCE], desired[qos.BATCH_MEMORY_RESOURCE])
        if has_profile:
            await self.api.merge_patch(f"{NODE_PROFILES}/{name}/status",
                                       {"status": {"oversell": decision.to_status(now)}})
            result.profile_patches += 1
        if any(current[k] and desired[k] <= current[k] * (1 - LARGE_DROP_FRACTION) for k in desired):
            self._queue_event(name, decision, current, now)

    def _queue_event(self, name: str, decision: NodeDecision, current: dict, now: datetime.datetime) -> None:
        """The node's BatchResourcesDropped Event, sent at the cycle's end (:meth:`_send_events`)."""
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        message = (f"batch resources dropped: cpu {current[qos.BATCH_CPU_RESOURCE]} -> {decision.cpu.result} m, "
                   f"memory {current[qos.BATCH_MEMORY_RESOURCE]} -> {decision.memory.result} bytes; "
                   + "; ".join(decision.notes or (decision.cpu.reason,)))
        self.events.put("BatchResourcesDropped", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"namespace": "default"},
            "involvedObject": {"kind": "Node", "name": name, "uid": name, "apiVersion": "v1"},
            "reason": "BatchResourcesDropped", "message": message[:1024], "type": "Warning",
            "source": {"component": "tidal-manager"},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}, name_prefix=name)

    async def _send_events(self, result: CycleResult) -> None:
        """The Events waiting, in order; one the API server did not take waits for the next cycle
        with those after it (the node, written already, gives no second chance to send it)."""
        async def post(pending: PendingEvent) -> None:
            body = pending.payload
            body["metadata"]["name"] = pending.name
            await self.api.create(EVENTS, body)
            result.events += 1

        await self.events.send(post)
