# SPDX-License-Identifier: Apache-2.0
"""The BE idle group's cgroups path: table-driven, and the agent's layout finds what it names."""
from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from tidal.agent.collector.cgroups import CgroupDriver, PodQOSClass, container_cgroup_relpath
from tidal.agent.nri.placement import be_idle_group_cgroups_path

UID = "3f2a9c1e-0b7d-4e55-9a1c-2b8e6f0d4c11"
UID_ = UID.replace("-", "_")
CID = "5e7df40413eaa9b0d11dadaab052a20c1a69c57c598cdc481b17f5428c2bea8d"


@pytest.mark.parametrize("path, expected", [
    # cgroupfs: the kubelet's BestEffort pod, with and without a cgroupRoot
    (f"/kubepods/besteffort/pod{UID}/{CID}", f"/tidal-be/pod{UID}/{CID}"),
    (f"/node/a/kubepods/besteffort/pod{UID}/{CID}", f"/tidal-be/pod{UID}/{CID}"),  # at the root, always
    # systemd: slice:prefix:name, with and without a cgroupRoot slice
    (f"kubepods-besteffort-pod{UID_}.slice:cri-containerd:{CID}", f"tidal_be-pod{UID_}.slice:cri-containerd:{CID}"),
    (f"node-kubepods-besteffort-pod{UID_}.slice:cri-containerd:{CID}",
     f"tidal_be-pod{UID_}.slice:cri-containerd:{CID}"),
    # not a BestEffort pod's container: left alone
    (f"/kubepods/burstable/pod{UID}/{CID}", None),
    (f"/kubepods/pod{UID}/{CID}", None),
    (f"kubepods-burstable-pod{UID_}.slice:cri-containerd:{CID}", None),
    (f"/tidal-be/pod{UID}/{CID}", None),  # already moved
    (f"tidal_be-pod{UID_}.slice:cri-containerd:{CID}", None),
    (f"/kubepods/besteffort/pod{UID}", None),  # a pod, not a container
    (f"/kubepods/besteffort/pod{UID}/", None),
    (f"/kubepods/besteffort/sandbox/{CID}", None),
    (f"kubepods-besteffort-pod{UID_}.slice:cri-containerd", None),
    ("", None),
    ("/", None),
])
def test_a_besteffort_container_moves_into_the_idle_group_and_nothing_else_does(path, expected):
    assert be_idle_group_cgroups_path(path) == expected


def _runc_relpath(cgroups_path: str, driver: CgroupDriver) -> PurePosixPath:
    """Where runc puts a container given ``cgroups_path``, relative to the hierarchy root
    (systemd: ``slice:prefix:name``, the slice expanded as systemd nests ``a-b.slice`` in
    ``a.slice``; the unit ``<prefix>-<name>.scope``)."""
    if driver is CgroupDriver.CGROUPFS:
        return PurePosixPath(cgroups_path.lstrip("/"))
    slice_name, prefix, name = cgroups_path.split(":")
    words = slice_name.removesuffix(".slice").split("-")
    return PurePosixPath(*("-".join(words[: i + 1]) + ".slice" for i in range(len(words))), f"{prefix}-{name}.scope")


@pytest.mark.parametrize("driver, kubelet_root, original", [
    (CgroupDriver.CGROUPFS, "/", f"/kubepods/besteffort/pod{UID}/{CID}"),
    (CgroupDriver.CGROUPFS, "/node/a", f"/node/a/kubepods/besteffort/pod{UID}/{CID}"),
    (CgroupDriver.SYSTEMD, "/", f"kubepods-besteffort-pod{UID_}.slice:cri-containerd:{CID}"),
    (CgroupDriver.SYSTEMD, "/node.slice", f"node-kubepods-besteffort-pod{UID_}.slice:cri-containerd:{CID}"),
])
def test_the_agent_s_layout_finds_the_container_where_the_plugin_puts_it(driver, kubelet_root, original):
    # the kubelet's own path, as runc renders it, is the layout's BestEffort container path ...
    assert _runc_relpath(original, driver) == container_cgroup_relpath(
        UID, PodQOSClass.BEST_EFFORT, f"containerd://{CID}", driver, kubelet_root)
    # ... and the moved one the layout's BE idle group container path
    assert _runc_relpath(be_idle_group_cgroups_path(original), driver) == container_cgroup_relpath(
        UID, PodQOSClass.BE_IDLE_GROUP, f"containerd://{CID}", driver, kubelet_root)


@pytest.mark.parametrize("path, expected", [
    (f"/kubepods/besteffort/pod{UID}/{CID}", False),
    (f"/node/a/kubepods/besteffort/pod{UID}/{CID}", False),
    (f"kubepods-besteffort-pod{UID_}.slice:cri-containerd:{CID}", False),
    (f"/tidal-be/pod{UID}/{CID}", True),
    (f"tidal_be-pod{UID_}.slice:cri-containerd:{CID}", True),
    # neither: another QoS class, another shape
    (f"/kubepods/burstable/pod{UID}/{CID}", None),
    (f"kubepods-burstable-pod{UID_}.slice:cri-containerd:{CID}", None),
    (f"/tidal-be/pod{UID}", None),
    (f"/tidal-be/pod{UID}/{CID}/more", None),
    (f"/x/tidal-be/pod{UID}/{CID}", None),
    (f"tidal_be-pod{UID_}.slice::{CID}", None),
    (f"tidal_be-x.slice:cri-containerd:{CID}", None),
    ("", None),
])
def test_where_a_container_is(path, expected):
    from tidal.agent.nri.placement import in_be_idle_group
    assert in_be_idle_group(path) is expected


def test_pod_placements_decide_once_and_learn_from_existing_containers():
    from tidal.agent.nri.placement import PodPlacements
    placements = PodPlacements()
    assert placements.place("a", True) is True and placements.place("a", False) is True
    placements.learn("b", f"/kubepods/besteffort/podb/{CID}")
    placements.learn("b", f"/tidal-be/podb/{CID}")  # split before this rule: counted in the group
    placements.learn("b", f"/kubepods/besteffort/podb/{CID}")
    assert placements.place("b", False) is True
    placements.learn("c", f"/kubepods/burstable/podc/{CID}")  # not a BE path: nothing learnt
    assert "c" not in placements
    placements.keep_only({"b"})
    assert "a" not in placements and "b" in placements
    placements.forget("b")
    assert "b" not in placements
