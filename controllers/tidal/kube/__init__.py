# SPDX-License-Identifier: Apache-2.0
"""Small helpers around kubernetes_asyncio shared by the controllers, and where each controller
finds its cluster: an explicit kubeconfig, else (in a pod) the in-cluster service account.

The in-cluster configuration is the pod's ServiceAccount mount (``token`` and ``ca.crt`` under
:data:`SERVICE_ACCOUNT`) and the ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT`` the
kubelet sets in every container. The token is projected and rotated by the kubelet (hourly, valid
for about an hour more), so it must be re-read, never cached for the life of the process: the agent's
``KubeAPI`` reads it on every request, kubernetes_asyncio's loader at most a minute after the last read.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Awaitable

#: The ServiceAccount volume every pod gets (automountServiceAccountToken).
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
SERVICE_HOST_ENV, SERVICE_PORT_ENV = "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"


class ClusterAccessError(RuntimeError):
    """Neither a kubeconfig nor a usable in-cluster configuration; the message says what is missing."""


def in_cluster_missing(environ: Mapping[str, str] | None = None, account: Path = SERVICE_ACCOUNT) -> str | None:
    """Why the in-cluster configuration cannot be used here, or None when it can."""
    env = os.environ if environ is None else environ
    for name in (SERVICE_HOST_ENV, SERVICE_PORT_ENV):
        if not env.get(name):
            return f"{name} unset (not in a pod)"
    for name in ("token", "ca.crt"):
        if not (Path(account) / name).is_file():
            return f"no {Path(account) / name} (automountServiceAccountToken disabled?)"
    return None


def in_cluster_server(environ: Mapping[str, str] | None = None) -> str:
    """``https://HOST:PORT`` of the API server's Service, brackets around an IPv6 address."""
    env = os.environ if environ is None else environ
    host, port = env[SERVICE_HOST_ENV], env[SERVICE_PORT_ENV]
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def resolve_kubeconfig(kubeconfig: str | os.PathLike | None, environ: Mapping[str, str] | None = None,
                       account: Path = SERVICE_ACCOUNT) -> str | None:
    """The kubeconfig to use (a non-empty ``kubeconfig`` wins; ``--kubeconfig`` defaults to
    ``$KUBECONFIG``, which may be set but empty), else None for the in-cluster configuration.
    Raises ClusterAccessError when there is neither."""
    if kubeconfig:
        return os.fspath(kubeconfig)
    missing = in_cluster_missing(environ, account)
    if missing:
        raise ClusterAccessError(f"no --kubeconfig (or $KUBECONFIG) and no in-cluster configuration: {missing}")
    return None


async def raw(call: Awaitable[Any]) -> bytes:
    """Await a kubernetes_asyncio call made with ``_preload_content=False`` and return its body.

    With ``_preload_content=False`` the client skips its own status check, so an error answer
    (404, 409, 422, ...) would otherwise pass silently: raise ApiException for it here.
    """
    from kubernetes_asyncio.client.exceptions import ApiException
    response = await call
    body = await response.read()
    response.release()
    if not 200 <= response.status <= 299:
        error = ApiException(status=response.status, reason=response.reason)
        error.body = body.decode(errors="replace")
        raise error
    return body


async def raw_json(call: Awaitable[Any]) -> Any:
    return json.loads(await raw(call))


def api_status(err: BaseException) -> dict[str, Any]:
    """The API server's Status object in an ApiException's body ({} when there is none or it
    is not JSON): its ``message`` says what was wrong, ``details.causes`` which fields."""
    try:
        status = json.loads(getattr(err, "body", None) or "{}")
    except (ValueError, TypeError):
        return {}
    return status if isinstance(status, dict) else {}


def requester(api):
    """``request(method, path, params=, body=, content_type=)`` over a kubernetes_asyncio client,
    the same shape as the agent's ``KubeAPI.request`` (so code shared by both takes either)."""
    async def request(method: str, path: str, *, params=None, body=None,
                      content_type: str = "application/json"):
        call = api.call_api(path, method, query_params=list((params or {}).items()),
                            header_params={"Content-Type": content_type, "Accept": "application/json"},
                            body=body, auth_settings=["BearerToken"], _preload_content=False)
        data = await raw(call)
        return json.loads(data) if data else None
    return request


class RequestAPI:
    """A kubernetes_asyncio client with the agent's ``KubeAPI`` shape (``request`` and
    ``watch``), so the agent's watch and write code serves ``tidal-agent replay`` too."""

    def __init__(self, api) -> None:
        self.api = api
        self.request = requester(api)

    async def watch(self, path: str, params):
        import aiohttp
        query = {**params, "watch": "true"}
        query = {k: ("true" if v is True else str(v)) for k, v in query.items() if v is not None}
        seconds = int(query.get("timeoutSeconds", 300))
        response = await self.api.call_api(
            path, "GET", query_params=list(query.items()), header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"], _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(sock_connect=30, sock_read=seconds + 30))
        try:
            if not 200 <= response.status <= 299:
                from kubernetes_asyncio.client.exceptions import ApiException
                error = ApiException(status=response.status, reason=response.reason)
                error.body = (await response.read()).decode(errors="replace")
                raise error
            async for line in response.content:
                if line.strip():
                    yield json.loads(line)
        finally:
            response.release()


async def api_client(kubeconfig: str | None, *, environ: Mapping[str, str] | None = None,
                     account: Path = SERVICE_ACCOUNT):
    """A kubernetes_asyncio ApiClient: from `kubeconfig`, else the in-cluster service account
    (raises ClusterAccessError when neither is there).

    In-cluster, the configuration is the client's own (not kubernetes_asyncio's process-wide
    default) and keeps the loader's refresh hook, which re-reads the rotated token file."""
    from kubernetes_asyncio import client, config
    path = resolve_kubeconfig(kubeconfig, environ, account)
    if path:
        return await config.new_client_from_config(config_file=path)
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration, try_refresh_token=True,
                                 token_filename=str(Path(account) / "token"),
                                 cert_filename=str(Path(account) / "ca.crt"),
                                 environ=os.environ if environ is None else environ)
    return client.ApiClient(configuration=configuration)


def stop_on_signals():
    """An asyncio.Event set by SIGTERM or SIGINT (call inside the running loop)."""
    import asyncio
    import signal
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def read_policy(api):
    """The ColocationPolicy `default`; the defaults when it does not exist (or, which its
    CRD schema should make impossible, when it does not validate)."""
    import logging

    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    from tidal.api import qos
    from tidal.api.policy import DEFAULT_POLICY_NAME, ColocationPolicy, PolicyValidationError
    try:
        obj = await client.CustomObjectsApi(api).get_cluster_custom_object(
            qos.API_GROUP, qos.API_VERSION, "colocationpolicies", DEFAULT_POLICY_NAME)
        return ColocationPolicy.from_spec(obj.get("spec") or {})
    except ApiException as err:
        if err.status != 404:
            raise
    except PolicyValidationError as err:
        logging.getLogger(__name__).error("ColocationPolicy is invalid (%s): using the defaults", err)
    return ColocationPolicy.from_spec({})
