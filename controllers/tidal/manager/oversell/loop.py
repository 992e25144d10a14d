# SPDX-License-Identifier: Apache-2.0
"""The oversell master's loop: read the policy, run one cycle on the watch caches, sleep; only
while leading. Beside it, the count of what BE pods request per node, from a watch cache of the
live BE pods (re-listed, paged, every few minutes)."""
from __future__ import annotations

import asyncio
import logging
import time

from tidal.api import qos
from tidal.kube import KubeAPI, Watcher, read_policy
from tidal.kube.errors import error_summary, unavailable
from tidal.api.pod_resources import batch_requested
from tidal.manager.oversell.master import CycleResult, OversellMaster
from tidal.metrics import ManagerMetrics
from tidal.manager.oversell.node_decision import OversellSettings

log = logging.getLogger(__name__)


async def read_settings(api) -> OversellSettings:
    """The policy's overselling settings. Overselling switched off offers nothing: every oversold
    node goes to 0 (``OversellSettings.enabled``; a node's ratio annotation does not override it)."""
    return OversellSettings.from_policy(await read_policy(api))


def export_cycle(metrics: ManagerMetrics, result: CycleResult, now: float) -> None:
    """The batch resources of every node the cycle decided, as published after this cycle: a node
    whose write failed keeps what it carried (nodes no longer decided lose their series); and the
    nodes whose writes failed."""
    metrics.batch_allocatable.clear()
    for name in result.decisions:
        amounts = result.on_node(name)
        metrics.batch_allocatable.labels(name, "cpu").set(amounts[qos.BATCH_CPU_RESOURCE])
        metrics.batch_allocatable.labels(name, "memory").set(amounts[qos.BATCH_MEMORY_RESOURCE])
    for name in result.failed:
        metrics.write_failures.labels(name).inc()
    metrics.cycles.labels("ok").inc()
    metrics.last_cycle.set(now)


def new_master(api: KubeAPI, metrics: ManagerMetrics | None = None) -> OversellMaster:
    """The master :func:`run_master` drives; the Events it gives up are counted."""
    master = OversellMaster(api, OversellSettings())
    if metrics is not None:
        master.events.on_drop = metrics.events_dropped.inc
    return master


async def run_master(api: KubeAPI, interval_seconds: float, metrics: ManagerMetrics | None = None) -> None:
    master = new_master(api, metrics)
    try:
        while True:
            try:
                master.settings = await read_settings(api)
                if not master.running:  # the first cycle (or the first after a failed start) starts the caches
                    await master.start()
                result = await master.cycle()
                log.info("oversell cycle: %d nodes, %d node patches", result.nodes, result.node_patches)
                if metrics is not None:
                    export_cycle(metrics, result, time.time())
            except asyncio.CancelledError:
                raise
            except Exception as err:  # one bad cycle must not end the leader's work
                if unavailable(err):  # the API server away: one line per retry, no traceback
                    log.warning("oversell cycle failed: %s", error_summary(err))
                else:
                    log.exception("oversell cycle failed")
                if metrics is not None:
                    metrics.cycles.labels("error").inc()
            await asyncio.sleep(interval_seconds)
    finally:
        await master.close()


#: seconds between two exports of what BE pods request (the console's charts are 30-second
#: resolution); the watch cache behind them is current within a second
BATCH_REQUESTED_INTERVAL = 30.0
#: seconds between two full (paged) re-lists of the live pods behind the cache
PODS_RESYNC_SECONDS = 300.0
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
_PAGE = 500


def be_pod_request(pod) -> tuple[str, int, int] | None:
    """(node, batch millicores, batch bytes) a live BE pod bound to a node requests; None for
    any other pod (not BE, not bound, finished). Pure: raw pod JSON in."""
    spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
    node = spec.get("nodeName")
    if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return None
    try:
        level = qos.qos_level_of(meta.get("annotations"))
    except qos.AnnotationError:
        return None
    if level is not qos.QoSLevel.BE:
        return None
    cpu, memory = batch_requested(pod)
    return node, cpu, memory


def sum_by_node(requests, totals: dict[str, dict[str, int]] | None = None) -> dict[str, dict[str, int]]:
    """node -> {"cpu", "memory"}: the (node, cpu, memory) of `be_pod_request` summed, into ``totals``."""
    totals = {} if totals is None else totals
    for node, cpu, memory in requests:
        node_totals = totals.setdefault(node, {"cpu": 0, "memory": 0})
        node_totals["cpu"] += cpu
        node_totals["memory"] += memory
    return totals


def export_batch_requested(metrics: ManagerMetrics, totals: dict[str, dict[str, int]]) -> None:
    """Every node with BE pods gets both series; nodes without any lose theirs."""
    metrics.batch_requested.clear()
    for node, amounts in totals.items():
        for resource, value in amounts.items():
            metrics.batch_requested.labels(node, resource).set(value)


def be_pods_watch(api: KubeAPI, resync_seconds: float = PODS_RESYNC_SECONDS) -> Watcher:
    """A watch cache of the live BE pods bound to nodes, each reduced to `be_pod_request`'s
    (node, cpu, memory): pods are listed in pages and never kept whole."""
    return Watcher(api, "/api/v1/pods", "live pods (batch requests)", field_selector=LIVE_PODS,
                   transform=be_pod_request, page_size=_PAGE, resync_seconds=resync_seconds)


async def run_batch_requested(api: KubeAPI, metrics: ManagerMetrics,
                              interval_seconds: float = BATCH_REQUESTED_INTERVAL) -> None:
    """Keep ``tidal_node_batch_requested`` current while leading."""
    pods = be_pods_watch(api)
    watcher = asyncio.create_task(pods.run())
    try:
        while True:
            if pods.synced.is_set() and not pods.failing:
                export_batch_requested(metrics, sum_by_node(pods.objects.values()))
            elif pods.failing:  # the metric goes stale, the master goes on
                log.warning("BE pods' batch requests not counted: %s", pods.last_error)
            await asyncio.sleep(interval_seconds if pods.synced.is_set() else 1.0)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
