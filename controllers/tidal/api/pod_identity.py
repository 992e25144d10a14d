# SPDX-License-Identifier: Apache-2.0
"""Which uid names a pod on its node.

The kubelet names a pod's cgroup (``pod<uid>``) and the runtime's sandbox after the pod's uid on
the node. For a pod from the API server that is its ``metadata.uid``; a static pod (a manifest
in the kubelet's ``staticPodPath``) has a uid of the kubelet's own, the hash of its manifest, and
the API server only holds its *mirror* pod, with a uid of its own and the kubelet's in the
annotation ``kubernetes.io/config.mirror``. Read by the uid of the API object, a static pod's
cgroup is never found: its usage counted as usage outside the pods and the pod at its request.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MIRROR_ANNOTATION", "node_uid"]

#: set by the kubelet on a static pod's mirror pod: the static pod's uid on the node
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def node_uid(pod: Mapping[str, Any]) -> str:
    """The uid the pod's cgroup and sandbox are named after on its node (pure)."""
    meta = pod.get("metadata") or {}
    mirror = (meta.get("annotations") or {}).get(MIRROR_ANNOTATION)
    return mirror if isinstance(mirror, str) and mirror else str(meta.get("uid") or "")
