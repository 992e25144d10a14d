# SPDX-License-Identifier: Apache-2.0
"""The one asyncio Kubernetes client of Tidal's controllers (tidal-agent, tidal-manager,
tidal-console); the lab alone uses the sync ``kubernetes`` client.

- :mod:`.config`: where a controller finds its cluster (a kubeconfig, else the pod's service
  account);
- :mod:`.client`: :class:`KubeAPI`, JSON over aiohttp (get, paged lists, watch, create,
  replace, delete, merge / strategic / JSON patches, server-side apply);
- :mod:`.errors`: typed API errors (:class:`ApiError` and :class:`NotFound`, :class:`Conflict`,
  :class:`Gone`, :class:`Forbidden`, :class:`TooManyRequests`) and the one Status reader;
- :mod:`.watch`: :class:`Watcher` / :class:`ObjectWatch`, list + watch caches that resume, re-list
  on 410 Gone and optionally resync.

Everything here stays light: the agent's footprint budget counts every import.
"""
from __future__ import annotations

from tidal.kube.config import (SERVICE_ACCOUNT, SERVICE_HOST_ENV, SERVICE_PORT_ENV, ClusterAccessError,
                               in_cluster_missing, in_cluster_server, resolve_kubeconfig)
from tidal.kube.errors import (ApiError, Conflict, Forbidden, Gone, NotFound, TooManyRequests, api_error,
                               error_summary, status_message, status_object)
from tidal.kube.client import KubeAPI, KubeconfigError  # noqa: E402 - after config, which it imports
from tidal.kube.watch import ObjectWatch, Watcher  # noqa: E402

__all__ = ["SERVICE_ACCOUNT", "SERVICE_HOST_ENV", "SERVICE_PORT_ENV", "ApiError", "ClusterAccessError", "Conflict",
           "Forbidden", "Gone", "KubeAPI", "KubeconfigError", "NotFound", "ObjectWatch", "TooManyRequests", "Watcher",
           "api_error", "connect", "custom_path", "error_summary", "in_cluster_missing", "in_cluster_server",
           "read_policy", "resolve_kubeconfig", "status_message", "status_object", "stop_on_signals"]


def connect(kubeconfig: str | None, user_agent: str) -> KubeAPI:
    """The client of a controller's ``--kubeconfig`` (else the in-cluster service account);
    raises ClusterAccessError (a KubeconfigError) when there is neither, or it is unusable."""
    return KubeAPI.from_kubeconfig(kubeconfig, user_agent=user_agent)


def custom_path(plural: str, name: str | None = None, subresource: str | None = None, *,
                group: str | None = None, version: str | None = None) -> str:
    """The path of a cluster-scoped custom resource (Tidal's API group unless ``group``):
    ``/apis/GROUP/VERSION/PLURAL[/NAME[/SUBRESOURCE]]``."""
    if group is None or version is None:
        from tidal.api import qos
        group, version = group or qos.API_GROUP, version or qos.API_VERSION
    path = f"/apis/{group}/{version}/{plural}"
    if name:
        path += f"/{name}"
        if subresource:
            path += f"/{subresource}"
    return path


def stop_on_signals():
    """An asyncio.Event set by SIGTERM or SIGINT (call inside the running loop)."""
    import asyncio
    import signal
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def read_policy(api: KubeAPI):
    """The ColocationPolicy `default`; the defaults when it (or its CRD) does not exist or, which
    its CRD schema should make impossible, when it does not validate."""
    import logging

    from tidal.api.policy import DEFAULT_POLICY_NAME, ColocationPolicy, PolicyValidationError
    obj = await api.get_optional(custom_path("colocationpolicies", DEFAULT_POLICY_NAME))
    if obj is not None:
        try:
            return ColocationPolicy.from_spec(obj.get("spec") or {})
        except PolicyValidationError as err:
            logging.getLogger(__name__).error("ColocationPolicy is invalid (%s): using the defaults", err)
    return ColocationPolicy.from_spec({})
