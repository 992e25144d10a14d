# SPDX-License-Identifier: Apache-2.0
"""The oversell master's loop: read the policy, run one cycle, sleep; only while leading."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from tidal.api import qos
from tidal.kube import raw_json, read_policy
from tidal.api.pod_resources import batch_requested
from tidal.manager.oversell.master import CycleResult, OversellMaster
from tidal.metrics import ManagerMetrics
from tidal.manager.oversell.node_decision import OversellSettings

log = logging.getLogger(__name__)


async def read_settings(api) -> OversellSettings:
    """The policy's overselling settings. Overselling switched off offers nothing: the ratio
    becomes 0, so oversold nodes go to 0."""
    policy = await read_policy(api)
    settings = OversellSettings.from_policy(policy)
    if not policy.overselling.enabled:
        settings = dataclasses.replace(settings, ratio_percent=0)
    return settings


def export_cycle(metrics: ManagerMetrics, result: CycleResult, now: float) -> None:
    """The batch resources of every node the cycle decided, as of this cycle (nodes it no
    longer decides lose their series)."""
    metrics.batch_allocatable.clear()
    for name, decision in result.decisions.items():
        metrics.batch_allocatable.labels(name, "cpu").set(decision.amounts[qos.BATCH_CPU_RESOURCE])
        metrics.batch_allocatable.labels(name, "memory").set(decision.amounts[qos.BATCH_MEMORY_RESOURCE])
    metrics.cycles.labels("ok").inc()
    metrics.last_cycle.set(now)


async def run_master(api, interval_seconds: float, metrics: ManagerMetrics | None = None) -> None:
    while True:
        try:
            result = await OversellMaster(api, await read_settings(api)).cycle()
            log.info("oversell cycle: %d nodes, %d node patches", result.nodes, result.node_patches)
            if metrics is not None:
                export_cycle(metrics, result, time.time())
        except asyncio.CancelledError:
            raise
        except Exception:  # one bad cycle must not end the leader's work
            log.exception("oversell cycle failed")
            if metrics is not None:
                metrics.cycles.labels("error").inc()
        await asyncio.sleep(interval_seconds)


#: seconds between two counts of what BE pods request: a paged list of every live pod, so
#: slower than the master's cycle (the console's charts are 30-second resolution anyway).
BATCH_REQUESTED_INTERVAL = 30.0
_PAGE = 500


def batch_requested_by_node(pods, totals: dict[str, dict[str, int]] | None = None) -> dict[str, dict[str, int]]:
    """node -> {"cpu": batch millicores, "memory": batch bytes} requested by the BE pods bound
    to it and not finished, added to ``totals`` (one page of pods at a time). Pure: raw pod
    JSON in, sums out."""
    totals = {} if totals is None else totals
    for pod in pods:
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        node = spec.get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        try:
            level = qos.qos_level_of(meta.get("annotations"))
        except qos.AnnotationError:
            continue
        if level is not qos.QoSLevel.BE:
            continue
        cpu, memory = batch_requested(pod)
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


async def _count_live_pods(api) -> dict[str, dict[str, int]]:
    """Page through every pod that is not finished, keeping only the sums (not the pods)."""
    from kubernetes_asyncio import client
    core, totals, token = client.CoreV1Api(api), {}, None
    while True:
        page = await raw_json(core.list_pod_for_all_namespaces(
            field_selector="status.phase!=Succeeded,status.phase!=Failed", limit=_PAGE,
            _continue=token, _preload_content=False))
        batch_requested_by_node(page.get("items") or [], totals)
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return totals


async def run_batch_requested(api, metrics: ManagerMetrics,
                              interval_seconds: float = BATCH_REQUESTED_INTERVAL) -> None:
    """Keep ``tidal_node_batch_requested`` current while leading."""
    while True:
        try:
            export_batch_requested(metrics, await _count_live_pods(api))
        except asyncio.CancelledError:
            raise
        except Exception:  # the metric goes stale, the master goes on
            log.exception("counting BE pods' batch requests failed")
        await asyncio.sleep(interval_seconds)
