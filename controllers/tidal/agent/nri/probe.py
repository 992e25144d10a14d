# SPDX-License-Identifier: Apache-2.0
"""Whether the NRI path is available on this node, in the capability probe's shape.

The capability ``nri`` is supported when the runtime's NRI socket exists and is a socket: then
BE resources are set at container creation by ``tidal-agent nri``; otherwise the node engine's
reconcile sets them (after the container started). For the capability probe to list.
"""
from __future__ import annotations

import stat
from pathlib import Path

from tidal.agent.qos.capabilities import Capability

#: the runtime's NRI socket (containerd's default); `plugin.py` uses the same. Kept here so the
#: node agent can probe for NRI without importing the plugin's protobuf code.
DEFAULT_SOCKET = "/var/run/nri/nri.sock"

__all__ = ["NRI_CAPABILITY", "nri_capability"]

NRI_CAPABILITY = "nri"


def nri_capability(socket_path: str | Path = DEFAULT_SOCKET) -> Capability:
    path = Path(socket_path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return Capability(NRI_CAPABILITY, False,
                          f"no NRI socket at {path} (NRI disabled in containerd?): BE resources are set "
                          "by the agent's reconcile, after the container starts")
    except OSError as err:
        return Capability(NRI_CAPABILITY, False, f"NRI socket {path}: {err.strerror}")
    if not stat.S_ISSOCK(mode):
        return Capability(NRI_CAPABILITY, False, f"{path} exists but is not a socket")
    return Capability(NRI_CAPABILITY, True, f"NRI socket at {path}: BE resources are set at container creation")
