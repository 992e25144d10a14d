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

**A pod's containers stay together** (:class:`PodPlacements`). Where a BE pod's containers go is
decided at the first one the plugin sees and kept until the pod sandbox is removed, whatever the
switch says later: a container restarted (or an init container followed by the app's) after
``idleGroup`` changed goes where its pod's other containers are, not half in the group and half
below ``kubepods``, where the agent would find one part and read the other's usage as the
node's. A plugin that (re)connects learns the running pods' placement from the containers the
runtime lists (Synchronize).
"""

from __future__ import annotations

import re

from tidal.agent.collector.cgroups import BE_IDLE_GROUP

__all__ = ["be_idle_group_cgroups_path", "in_be_idle_group", "PodPlacements"]

_POD_RE = re.compile(r"pod[0-9A-Za-z][0-9A-Za-z_-]*")
#: the systemd driver's slice name of the BE idle group, before ``pod<uid_>.slice``
_SYSTEMD_GROUP_PREFIX = f"{BE_IDLE_GROUP.replace('-', '_')}-"
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
    slice_name = f"{_SYSTEMD_GROUP_PREFIX}{match['pod']}.slice"
    return ":".join([slice_name, fields[1], fields[2]])


def in_be_idle_group(path: str) -> bool | None:
    """Whether a container's cgroups path (as the runtime names it) is in the BE idle group
    (True), a BestEffort pod's below ``kubepods`` (False), or neither (None)."""
    if be_idle_group_cgroups_path(path) is not None:
        return False
    if path.startswith("/"):
        parts = path.split("/")[1:]
        return True if len(parts) == 3 and parts[0] == BE_IDLE_GROUP and _POD_RE.fullmatch(parts[1]) \
            and parts[2] else None
    fields = path.split(":")
    prefix = _SYSTEMD_GROUP_PREFIX
    if len(fields) == 3 and all(fields) and fields[0].startswith(prefix) and fields[0].endswith(".slice") \
            and _POD_RE.fullmatch(fields[0][len(prefix):-len(".slice")]):
        return True
    return None


class PodPlacements:
    """Per BE pod (by uid), whether its containers go in the BE idle group: decided at its first
    container, kept until :meth:`forget` (the sandbox removed)."""

    def __init__(self) -> None:
        self._in_group: dict[str, bool] = {}

    def place(self, pod_uid: str, switch_on: bool) -> bool:
        """Where the next container of ``pod_uid`` goes: where its earlier ones went, else where
        the switch says (remembered from now on)."""
        return self._in_group.setdefault(pod_uid, switch_on)

    def learn(self, pod_uid: str, cgroups_path: str) -> None:
        """An existing container of ``pod_uid`` (Synchronize): its pod is where it is. A pod
        already split between the two places (containers created before this rule) counts as in
        the group, as the agent counts it (:mod:`tidal.agent.be_placement`)."""
        where = in_be_idle_group(cgroups_path)
        if where is not None:
            self._in_group[pod_uid] = self._in_group.get(pod_uid, False) or where

    def forget(self, pod_uid: str) -> None:
        self._in_group.pop(pod_uid, None)

    def keep_only(self, pod_uids: set[str]) -> None:
        """Forget the pods that ended while the plugin was away."""
        self._in_group = {uid: where for uid, where in self._in_group.items() if uid in pod_uids}

    def __contains__(self, pod_uid: str) -> bool:
        return pod_uid in self._in_group
