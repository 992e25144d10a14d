# SPDX-License-Identifier: Apache-2.0
"""Where a controller finds its cluster: an explicit kubeconfig, else (in a pod) the in-cluster
service account.

The in-cluster configuration is the pod's ServiceAccount mount (``token`` and ``ca.crt`` under
:data:`SERVICE_ACCOUNT`) and the ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT`` the
kubelet sets in every container. The token is projected and rotated by the kubelet (hourly, valid
for about an hour more), so it must be re-read, never cached for the life of the process:
:class:`~tidal.kube.client.KubeAPI` reads it on every request.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["SERVICE_ACCOUNT", "SERVICE_HOST_ENV", "SERVICE_PORT_ENV", "ClusterAccessError", "in_cluster_missing",
           "in_cluster_server", "resolve_kubeconfig"]

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
