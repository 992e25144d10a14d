# SPDX-License-Identifier: Apache-2.0
"""The Kubernetes REST client of every Tidal controller: aiohttp plus kubeconfig / in-cluster
credentials, JSON in and out.

Why not kubernetes_asyncio (or the sync client): the agent runs on every node with a footprint
budget of 60 MiB RSS, and importing kubernetes_asyncio's client (its ~900 generated models) alone
costs 36 MiB. The controllers make a handful of kinds of calls — get, list (paged), watch,
create, replace, delete, merge / strategic / JSON patches, server-side apply, reviews — which need
JSON over HTTPS and nothing else; answers are plain dicts (the API's own JSON field names).

Credentials: a kubeconfig's current context (server, CA, client certificate or bearer token;
exec and auth-provider plugins are refused with a clear error), or the in-cluster service account
(token file re-read on every request, as kubelet rotates it).

Errors: a non-2xx answer raises :class:`~tidal.kube.errors.ApiError`, of its code's subclass
(``NotFound``, ``Conflict``, ``Gone``, ``Forbidden``, ``TooManyRequests``).
"""
from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

from tidal.kube.config import SERVICE_ACCOUNT, ClusterAccessError, in_cluster_missing, in_cluster_server
from tidal.kube.errors import ApiError, api_error

__all__ = ["ApiError", "KubeAPI", "KubeconfigError", "MERGE_PATCH", "STRATEGIC_MERGE_PATCH", "JSON_PATCH",
           "APPLY_PATCH"]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"  # JSON is YAML: server-side apply takes the JSON body


class KubeconfigError(ClusterAccessError, ValueError):
    """A kubeconfig Tidal cannot use, or no kubeconfig and no in-cluster configuration."""


def _materialise(data_b64: str | None, path: str | None, base: Path, what: str,
                 temporary: list[str]) -> str | None:
    """A file path for ``*-data`` (a private 0600 temporary file, listed in ``temporary`` for the
    caller to remove once loaded) or ``*`` fields (relative to the kubeconfig's directory)."""
    if data_b64:
        fd, name = tempfile.mkstemp(prefix=f"tidal-agent-{what}-")
        temporary.append(name)
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(data_b64))
        return name
    if path:
        return str((base / path) if not os.path.isabs(path) else Path(path))
    return None


class KubeAPI:
    """One API server. ``token`` is called for every request (a rotated token file is re-read);
    the aiohttp session is opened on first use and closed by :meth:`close` (or ``async with``)."""

    def __init__(self, server: str, ssl_context: ssl.SSLContext | None,
                 token: Callable[[], str | None] = lambda: None, user_agent: str = "tidal") -> None:
        self.server = server.rstrip("/")
        self.ssl_context = ssl_context
        self.user_agent = user_agent
        self._token = token
        self._session = None

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_kubeconfig(cls, path: str | os.PathLike | None = None, *, user_agent: str | None = None,
                        environ: Mapping[str, str] | None = None, account: Path | None = None) -> KubeAPI:
        """From a kubeconfig file, else (``path`` None or empty: ``$KUBECONFIG`` may be set but
        empty) the in-cluster service account (``environ`` and ``account`` for tests)."""
        if not path:
            where = {k: v for k, v in (("account", account), ("environ", environ)) if v is not None}
            api = cls.in_cluster(**where)
            if user_agent:
                api.user_agent = user_agent
            return api
        import yaml
        path = Path(path)
        config = yaml.safe_load(path.read_text()) or {}
        base = path.parent
        context_name = config.get("current-context")
        contexts = {c["name"]: c.get("context") or {} for c in config.get("contexts") or []}
        if context_name not in contexts:
            raise KubeconfigError(f"{path}: current-context {context_name!r} is not among its contexts")
        context = contexts[context_name]
        clusters = {c["name"]: c.get("cluster") or {} for c in config.get("clusters") or []}
        users = {u["name"]: u.get("user") or {} for u in config.get("users") or []}
        cluster = clusters.get(context.get("cluster"))
        if cluster is None or not cluster.get("server"):
            raise KubeconfigError(f"{path}: context {context_name!r} names no cluster with a server")
        user = users.get(context.get("user"), {})
        for unsupported in ("exec", "auth-provider"):
            if unsupported in user:
                raise KubeconfigError(
                    f"{path}: user {context.get('user')!r} authenticates with {unsupported!r}; "
                    "Tidal supports client certificates and bearer tokens (or in-cluster)")
        ctx = None
        if cluster["server"].startswith("https://"):
            temporary: list[str] = []
            try:
                ctx = ssl.create_default_context(cafile=_materialise(
                    cluster.get("certificate-authority-data"), cluster.get("certificate-authority"), base,
                    "ca", temporary))
                if cluster.get("insecure-skip-tls-verify"):
                    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
                cert = _materialise(user.get("client-certificate-data"), user.get("client-certificate"), base,
                                    "cert", temporary)
                key = _materialise(user.get("client-key-data"), user.get("client-key"), base, "key", temporary)
                if cert and key:
                    ctx.load_cert_chain(cert, key)
            finally:  # loaded into the context: inline secrets never stay on disk
                for name in temporary:
                    os.unlink(name)
        token = user.get("token")
        token_file = user.get("tokenFile")
        agent = {"user_agent": user_agent} if user_agent else {}
        if token_file:
            return cls(cluster["server"], ctx, lambda: Path(base / token_file).read_text().strip(), **agent)
        return cls(cluster["server"], ctx, lambda: token, **agent)

    @classmethod
    def in_cluster(cls, account: Path = SERVICE_ACCOUNT, environ: Mapping[str, str] | None = None) -> KubeAPI:
        """The pod's service account: the API server's Service from the environment, its CA
        from ``ca.crt``, and the ``token`` file re-read on every request (the kubelet rotates it)."""
        missing = in_cluster_missing(environ, account)
        if missing:
            raise KubeconfigError(f"no --kubeconfig (or $KUBECONFIG) and no in-cluster configuration: {missing}")
        ctx = ssl.create_default_context(cafile=str(Path(account) / "ca.crt"))
        token = Path(account) / "token"
        return cls(in_cluster_server(environ), ctx, lambda: token.read_text().strip())

    # -- requests ----------------------------------------------------------------------------

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def _session_(self):
        import aiohttp
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.ssl_context or False))
        return self._session

    async def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                      body: Any = None, content_type: str = "application/json",
                      timeout: float = 30) -> Any:
        """One call; the decoded JSON answer (None when empty). Raises ApiError (its code's
        subclass) for non-2xx answers."""
        import aiohttp
        data = None if body is None else json.dumps(body).encode()
        async with self._session_().request(
                method, self.server + path, params=_params(params), data=data,
                headers=self._headers(content_type if data is not None else None),
                timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            payload = await response.read()
            if not 200 <= response.status <= 299:
                raise api_error(response.status, response.reason or "", payload)
            return json.loads(payload) if payload else None

    # -- verbs ---------------------------------------------------------------------------------

    async def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return await self.request("GET", path, params=params)

    async def get_optional(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """The object, or None when it (or its collection: a CRD not installed) does not exist."""
        from tidal.kube.errors import NotFound
        try:
            return await self.request("GET", path, params=params)
        except NotFound:
            return None

    async def list_pages(self, path: str, params: Mapping[str, Any] | None = None,
                         limit: int = 500) -> AsyncIterator[dict[str, Any]]:
        """The pages of a list (``limit`` objects each, one consistent snapshot): only a page is
        in memory at a time. The last page's ``metadata.resourceVersion`` is the snapshot's. A
        continue token that expired mid-list raises Gone: list again."""
        token = None
        while True:
            page = await self.request("GET", path, params={**(params or {}), "limit": limit, "continue": token})
            yield page
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    async def create(self, path: str, body: Any, params: Mapping[str, Any] | None = None) -> Any:
        """POST ``body`` to the collection ``path``."""
        return await self.request("POST", path, params=params, body=body)

    async def replace(self, path: str, body: Any, params: Mapping[str, Any] | None = None) -> Any:
        """PUT: the whole object (its ``metadata.resourceVersion`` makes it conditional)."""
        return await self.request("PUT", path, params=params, body=body)

    async def delete(self, path: str, params: Mapping[str, Any] | None = None, body: Any = None) -> Any:
        return await self.request("DELETE", path, params=params, body=body)

    async def merge_patch(self, path: str, patch: Mapping[str, Any],
                          params: Mapping[str, Any] | None = None) -> Any:
        """JSON merge patch (RFC 7386): maps merge, None deletes a key, lists are replaced."""
        return await self.request("PATCH", path, params=params, body=patch, content_type=MERGE_PATCH)

    async def strategic_patch(self, path: str, patch: Mapping[str, Any],
                              params: Mapping[str, Any] | None = None) -> Any:
        """Strategic merge patch (built-in kinds only): lists merge by their merge keys."""
        return await self.request("PATCH", path, params=params, body=patch, content_type=STRATEGIC_MERGE_PATCH)

    async def json_patch(self, path: str, operations: list[Mapping[str, Any]],
                         params: Mapping[str, Any] | None = None) -> Any:
        """JSON patch (RFC 6902): a list of ``{"op", "path", "value"}`` operations."""
        return await self.request("PATCH", path, params=params, body=list(operations), content_type=JSON_PATCH)

    async def apply(self, path: str, body: Mapping[str, Any], field_manager: str, *, force: bool = False,
                    params: Mapping[str, Any] | None = None) -> Any:
        """Server-side apply of ``body`` (the object's path, not its collection's) as ``field_manager``;
        ``force`` takes fields other managers own."""
        query = {**(params or {}), "fieldManager": field_manager, "force": True if force else None}
        return await self.request("PATCH", path, params=query, body=body, content_type=APPLY_PATCH)

    async def watch(self, path: str, params: Mapping[str, Any],
                    on_open: Callable[[], None] | None = None) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch (``{"type": ..., "object": ...}``), until the server ends it.
        An error answer at the start raises ApiError (Gone: the resourceVersion is too old);
        one during the watch is an ``ERROR`` event whose object is the Status. ``on_open`` is
        called once the server has accepted the watch."""
        import aiohttp
        query = {**params, "watch": "true"}
        seconds = int(query.get("timeoutSeconds", 300))
        async with self._session_().get(
                self.server + path, params=_params(query), headers=self._headers(None),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=seconds + 30)) as response:
            if not 200 <= response.status <= 299:
                raise api_error(response.status, response.reason or "", await response.read())
            if on_open is not None:
                on_open()
            buffer = b""
            async for chunk in response.content.iter_any():
                buffer += chunk
                if b"\n" not in chunk:
                    continue
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> KubeAPI:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


def _params(params: Mapping[str, Any] | None) -> dict[str, str] | None:
    if not params:
        return None
    return {k: ("true" if v is True else "false" if v is False else str(v))
            for k, v in params.items() if v is not None}
