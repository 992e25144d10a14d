# SPDX-License-Identifier: Apache-2.0
"""The node agent's Kubernetes REST client: aiohttp plus kubeconfig / in-cluster credentials.

Why not kubernetes_asyncio here: the agent runs on every node with a footprint budget of
60 MiB RSS, and importing kubernetes_asyncio's client (its ~900 generated models) alone costs
36 MiB. The agent makes a handful of calls — list and watch with field selectors, merge patches,
evictions, Events — which need JSON over HTTPS and nothing else. The manager and the console,
which run once per cluster, keep using kubernetes_asyncio.

Credentials: a kubeconfig's current context (server, CA, client certificate or bearer token;
exec and auth-provider plugins are refused with a clear error), or the in-cluster service account
(token file re-read on every request, as kubelet rotates it).
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

from tidal.kube import SERVICE_ACCOUNT, in_cluster_missing, in_cluster_server

__all__ = ["ApiError", "KubeAPI", "KubeconfigError"]

class ApiError(Exception):
    """A non-2xx answer; ``status`` as the API server sent it (404, 409, 410, 429, ...)."""

    def __init__(self, status: int, reason: str, body: str = "") -> None:
        self.status, self.reason, self.body = status, reason, body
        detail = ""
        try:
            detail = json.loads(body).get("message", "")
        except (ValueError, AttributeError):
            pass
        super().__init__(f"{status} {reason}" + (f": {detail}" if detail else ""))


class KubeconfigError(ValueError):
    pass


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
    def __init__(self, server: str, ssl_context: ssl.SSLContext | None,
                 token: Callable[[], str | None] = lambda: None) -> None:
        self.server = server.rstrip("/")
        self.ssl_context = ssl_context
        self._token = token
        self._session = None

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_kubeconfig(cls, path: str | os.PathLike | None = None) -> KubeAPI:
        """From a kubeconfig file, else (``path`` None or empty: ``$KUBECONFIG`` may be set but
        empty) the in-cluster service account."""
        if not path:
            return cls.in_cluster()
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
                    "tidal-agent supports client certificates and bearer tokens (or in-cluster)")
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
        if token_file:
            return cls(cluster["server"], ctx, lambda: Path(base / token_file).read_text().strip())
        return cls(cluster["server"], ctx, lambda: token)

    @classmethod
    def in_cluster(cls, account: Path = SERVICE_ACCOUNT, environ: Mapping[str, str] | None = None) -> KubeAPI:
        """The pod's service account: the API server's Service from the environment, its CA
        from ``ca.crt``, and the ``token`` file re-read on every request (the kubelet rotates it)."""
        missing = in_cluster_missing(environ, account)
        if missing:
            raise KubeconfigError(f"no --kubeconfig and no in-cluster configuration: {missing}")
        ctx = ssl.create_default_context(cafile=str(Path(account) / "ca.crt"))
        token = Path(account) / "token"
        return cls(in_cluster_server(environ), ctx, lambda: token.read_text().strip())

    # -- requests ----------------------------------------------------------------------------

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "tidal-agent"}
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
        """One call; the decoded JSON answer. Raises ApiError for non-2xx answers."""
        import aiohttp
        data = None if body is None else json.dumps(body).encode()
        async with self._session_().request(
                method, self.server + path, params=_params(params), data=data,
                headers=self._headers(content_type if data is not None else None),
                timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            text = await response.text()
            if not 200 <= response.status <= 299:
                raise ApiError(response.status, response.reason or "", text)
            return json.loads(text) if text else None

    async def watch(self, path: str, params: Mapping[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch (``{"type": ..., "object": ...}``), until the server ends it."""
        import aiohttp
        query = {**params, "watch": "true"}
        seconds = int(query.get("timeoutSeconds", 300))
        async with self._session_().get(
                self.server + path, params=_params(query), headers=self._headers(None),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=seconds + 30)) as response:
            if not 200 <= response.status <= 299:
                raise ApiError(response.status, response.reason or "", await response.text())
            buffer = b""
            async for chunk in response.content.iter_any():
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
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
