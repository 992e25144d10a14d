# SPDX-License-Identifier: Apache-2.0
"""The policy reconciler (leader-elected in tidal-manager): keeps the ColocationPolicy's status
— the rollout of its current generation to the nodes Tidal acts on — up to date.

Inputs are watched (the policy, the nodes whose mode is active — colocation or oversubscription,
by Tidal's labels or Volcano's aliases, `tidal.api.node_mode` — and the NodeProfiles, each
reduced to what the rollout needs), so a node reporting a new generation shows in the status
within about half a second; the status is patched only when it changes.
"""
from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from tidal.api import qos
from tidal.api.node_mode import node_mode
from tidal.kube import KubeAPI, ObjectWatch, Watcher
from tidal.api.policy import DEFAULT_POLICY_NAME, ColocationPolicy
from tidal.tasks import sleep_or_stop

from . import volcano_node_order
from .rollout import NodeReport, rollout_status
from .volcano_usage import render

log = logging.getLogger(__name__)

__all__ = ["run_policy_reconciler"]

POLICIES = f"/apis/{qos.API_GROUP}/{qos.API_VERSION}/colocationpolicies"
PROFILES = f"/apis/{qos.API_GROUP}/{qos.API_VERSION}/nodeprofiles"


def _name(obj) -> str:
    return obj["metadata"]["name"]


def active_node(obj) -> str | None:
    """What the reconciler keeps of a node: its name when its mode is active (either label, or
    either alias), else None (dropped from the watch cache). A label selector cannot say
    "colocation or oversubscription", so every node is watched and reduced to this."""
    meta = obj.get("metadata") or {}
    return meta.get("name") if node_mode(meta.get("labels"), meta.get("annotations")).active else None


async def run_policy_reconciler(api: KubeAPI, interval: float = 0.5, stop: asyncio.Event | None = None,
                                volcano=None, metrics: dict[str, str] | None = None) -> None:
    """Run until cancelled (or ``stop``); ``volcano`` a target of ``volcano_target`` (None: leave
    Volcano alone); ``metrics`` the Prometheus source to put in Volcano's configuration (None:
    leave it alone)."""
    stop = stop or asyncio.Event()
    policy = ObjectWatch(api, POLICIES, DEFAULT_POLICY_NAME, what=f"ColocationPolicy {DEFAULT_POLICY_NAME}")
    nodes = Watcher(api, "/api/v1/nodes", "nodes with an active mode", transform=active_node, page_size=500)
    profiles = Watcher(api, PROFILES, "NodeProfiles",
                       transform=lambda obj: (_name(obj), NodeReport.from_profile(obj)))
    watchers = [asyncio.create_task(w.run()) for w in (policy, nodes, profiles)]
    seen: Any = None
    try:
        await asyncio.gather(policy.synced.wait(), nodes.synced.wait(), profiles.synced.wait())
        while not stop.is_set():
            key = (policy.generation, nodes.generation, profiles.generation, int(datetime.now(UTC).timestamp()) // 30)
            obj = policy.object
            if obj is not None and key != seen:
                seen = key
                try:
                    scheduler = await _configure_volcano(api, volcano, obj, metrics)
                    await _reconcile(api, obj, nodes.objects.values(), dict(profiles.objects.values()), scheduler)
                except Exception as err:  # retried at the next change or within 30 s
                    log.warning("ColocationPolicy status not updated: %s", err)
                    seen = None
            await sleep_or_stop(stop, interval)
    finally:
        for w in watchers:
            w.cancel()


async def _configure_volcano(api: KubeAPI, target, obj, metrics) -> tuple[bool, str] | None:
    """Render the policy's load-aware scheduling, and node-affinity scoring for the admission
    webhook's preferences, into Volcano's configuration; (ok, message)."""
    if target is None:
        return None
    try:
        policy = ColocationPolicy.from_spec(obj.get("spec") or {})
        text, version = await target.read(api)
        rendered = volcano_node_order.render(render(text, policy.load_aware_scheduling, metrics))
        las = policy.load_aware_scheduling
        summary = (f"usage plugin {'on' if las.enabled else 'predicate off'}, thresholds cpu "
                   f"{las.cpu_threshold_percent}% memory {las.memory_threshold_percent}%; "
                   f"{volcano_node_order.PLUGIN} scores preferred node affinity")
        if rendered != text:
            await target.write(api, rendered, version)
            log.info("Volcano scheduler configuration (%s): %s", target.describe(), summary)
        return True, f"{target.describe()}: {summary}"
    except Exception as err:
        log.warning("Volcano scheduler configuration (%s) not updated: %s", target.describe(), err)
        return False, f"{target.describe()}: {err}"


async def _reconcile(api: KubeAPI, obj, node_names, reports, scheduler=None) -> None:
    generation = int(obj["metadata"].get("generation") or 0)
    current = obj.get("status") or {}
    status = rollout_status(generation, node_names, reports, datetime.now(UTC), current, scheduler)
    if status == current:
        return
    await api.merge_patch(f"{POLICIES}/{DEFAULT_POLICY_NAME}/status",
                           {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": status})
    if status["appliedNodes"] != current.get("appliedNodes") or generation != current.get("observedGeneration"):
        log.info("ColocationPolicy generation %d: %d/%d Tidal nodes applied", generation,
                 status["appliedNodes"], status["totalNodes"])
