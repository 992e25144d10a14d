"""The oversell master's loop: read the policy, run one cycle, sleep; only while leading."""
from __future__ import annotations

import asyncio
import dataclasses
import logging

from tidal.kube import read_policy
from tidal.manager.oversell.master import OversellMaster
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


async def run_master(api, interval_seconds: float) -> None:
    while True:
        try:
            result = await OversellMaster(api, await read_settings(api)).cycle()
            log.info("oversell cycle: %d nodes, %d node patches", result.nodes, result.node_patches)
        except asyncio.CancelledError:
            raise
        except Exception:  # one bad cycle must not end the leader's work
            log.exception("oversell cycle failed")
        await asyncio.sleep(interval_seconds)
