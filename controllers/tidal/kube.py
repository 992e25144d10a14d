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
