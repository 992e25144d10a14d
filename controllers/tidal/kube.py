"""Small helpers around kubernetes_asyncio shared by the controllers."""
from __future__ import annotations

import json
from typing import Any, Awaitable


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


async def api_client(kubeconfig: str | None):
    """A kubernetes_asyncio ApiClient: from `kubeconfig`, else the in-cluster service account."""
    from kubernetes_asyncio import client, config
    if kubeconfig:
        return await config.new_client_from_config(config_file=kubeconfig)
    config.load_incluster_config()
    return client.ApiClient()


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

    from tidal import qos
    from tidal.policy import DEFAULT_POLICY_NAME, ColocationPolicy, PolicyValidationError
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
