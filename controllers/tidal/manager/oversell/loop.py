"""The oversell master's loop: read the policy, run one cycle, sleep; only while leading."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from tidal import qos
from tidal.kube import read_policy
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
