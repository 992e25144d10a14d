"""The oversell master's loop: read the policy, run one cycle, sleep; only while leading."""
from __future__ import annotations

import asyncio
import dataclasses
import logging

from tidal import qos
from tidal.manager.oversell.master import OversellMaster
from tidal.manager.oversell.node_decision import OversellSettings
from tidal.policy import DEFAULT_POLICY_NAME, ColocationPolicy, PolicyValidationError

log = logging.getLogger(__name__)


async def read_settings(api) -> OversellSettings:
    """The policy's overselling settings; the defaults when there is no policy object.
    Overselling switched off offers nothing: the ratio becomes 0, so oversold nodes go to 0."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException
    try:
        obj = await client.CustomObjectsApi(api).get_cluster_custom_object(
            qos.API_GROUP, qos.API_VERSION, "colocationpolicies", DEFAULT_POLICY_NAME)
        policy = ColocationPolicy.from_spec(obj.get("spec") or {})
    except ApiException as err:
        if err.status != 404:
            raise
        policy = ColocationPolicy.from_spec({})
    except PolicyValidationError as err:  # the CRD's schema should make this impossible
        log.error("ColocationPolicy %s is invalid (%s): using the defaults", DEFAULT_POLICY_NAME, err)
        policy = ColocationPolicy.from_spec({})
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
