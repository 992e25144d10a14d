# SPDX-License-Identifier: Apache-2.0
"""Where a BE container's cgroup goes: in the BE idle group beside ``kubepods`` (pure).

The kubelet puts a BestEffort pod's containers below ``kubepods/besteffort/pod<uid>``; there a
BE pod competes with the online pods through ``besteffort``'s weight (the kubelet keeps it at
``cpu.shares = 2`` and fails to start when it is idle) and with the node's daemons through
``kubepods`` itself. With ``beIsolation.cpuPriority.idleGroup`` the NRI plugin creates a BE
pod's containers in ``tidal-be/pod<uid>`` instead (the runtime's OCI ``linux.cgroupsPath``),
a group that is idle where ``kubepods`` and ``system.slice`` compete; the pod's sandbox stays
where the kubelet put it (NRI cannot move it). docs/node-engine.md says what that costs.

The runtime hands the plugin the container's cgroups path in its cgroup driver's form:

=========  ======================================================  ==========================================
driver     the kubelet's (containerd's CRI)                          in the BE idle group
=========  ======================================================  ==========================================
cgroupfs   ``/kubepods/besteffort/pod<uid>/<id>``                     ``/tidal-be/pod<uid>/<id>``
systemd    ``kubepods-besteffort-pod<uid_>.slice:cri-containerd:<id>``  ``tidal_be-pod<uid_>.slice:cri-containerd:<id>``
=========  ======================================================  ==========================================

The idle group is at the hierarchy's root whatever the kubelet's ``cgroupRoot`` (cgroupfs
``/a/b``, systemd ``a-b``): below a cgroup that itself competes at the root it would not be idle
where it matters (docs/node-engine.md). Any other path (a Burstable or Guaranteed pod's, one
already moved, one of another shape) is left alone: None.
"""

from __future__ import annotations

import re

from tidal.agent.collector.cgroups import BE_IDLE_GROUP

__all__ = ["be_idle_group_cgroups_path"]

_POD_RE = re.compile(r"pod[0-9A-Za-z][0-9A-Za-z_-]*")
_SYSTEMD_SLICE_RE = re.compile(r"(?P<root>(?:[0-9A-Za-z_.]+-)*)kubepods-besteffort-(?P<pod>pod[0-9A-Za-z_]+)\.slice")


def be_idle_group_cgroups_path(path: str) -> str | None:
    """``path`` (a BestEffort pod's container, as the runtime names it) moved into the BE idle
    group; None when ``path`` is not a BestEffort pod's container cgroups path."""
    if path.startswith("/"):
        parts = path.split("/")[1:]
        if len(parts) < 4 or parts[-4:-2] != ["kubepods", "besteffort"] or not _POD_RE.fullmatch(parts[-2]) \
                or not parts[-1] or "" in parts:
            return None
        return "/" + "/".join([BE_IDLE_GROUP, parts[-2], parts[-1]])
    fields = path.split(":")
    if len(fields) != 3 or not all(fields):
        return None
    match = _SYSTEMD_SLICE_RE.fullmatch(fields[0])
    if match is None:
        return None
    slice_name = f"{BE_IDLE_GROUP.replace('-', '_')}-{match['pod']}.slice"
    return ":".join([slice_name, fields[1], fields[2]])
