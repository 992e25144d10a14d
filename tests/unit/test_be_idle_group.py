# SPDX-License-Identifier: Apache-2.0
"""BEIdleGroup on this machine's cgroups: the group made ready, a gone pod's directories removed,
a pod still on the node and a directory still holding a container kept."""
from __future__ import annotations

import uuid

from tidal.agent.be_idle_group import BEIdleGroup
from tidal.agent.collector.cgroups import DEFAULT_CGROUP_ROOT, PodQOSClass
from tidal_dev.testing.local_kubelet import LocalKubelet


def test_the_group_is_made_and_a_gone_pods_directories_are_removed(hierarchy, real):
    kubelet = LocalKubelet(real)
    layout = kubelet.layout
    group = BEIdleGroup(layout, DEFAULT_CGROUP_ROOT)
    real.created.extend(group.ensure())  # removed with the test's cgroups (kept while another test uses it)
    assert layout.memory_dir(layout.qos_relpath(PodQOSClass.BE_IDLE_GROUP)).is_dir()
    assert group.ensure() == []  # once there, nothing to make
    gone, staying, busy = (str(uuid.uuid4()) for _ in range(3))
    dirs = {uid: kubelet.dirs(layout.pod_relpath(uid, PodQOSClass.BE_IDLE_GROUP)) for uid in (gone, staying, busy)}
    for uid in (gone, staying):
        kubelet.create_pod(uid, PodQOSClass.BE_IDLE_GROUP, [])
    kubelet.create_pod(busy, PodQOSClass.BE_IDLE_GROUP, ["containerd://" + uuid.uuid4().hex])  # not yet removed

    removed = group.remove_gone([gone, staying, busy], on_node=[staying])
    assert set(removed) == set(dirs[gone]) and not any(d.exists() for d in dirs[gone])
    assert all(d.is_dir() for d in dirs[staying] + dirs[busy])
    assert group.remove_gone([gone], on_node=[]) == []  # already gone: nothing to do


def test_the_group_s_memory_is_bounded_as_kubepods(hierarchy, real):
    kubelet = LocalKubelet(real)
    layout = kubelet.layout
    kubepods = real.make(layout.memory_dir(layout.kubepods_relpath()))
    name = "memory.limit_in_bytes" if (kubepods / "memory.limit_in_bytes").exists() else "memory.max"
    (kubepods / name).write_text(str(3 << 30))
    group = BEIdleGroup(layout, DEFAULT_CGROUP_ROOT)
    real.created.extend(group.ensure())
    try:
        assert group.bound_memory() == str(3 << 30)
        assert (layout.memory_dir(layout.qos_relpath(PodQOSClass.BE_IDLE_GROUP)) / name).read_text().strip() \
            == str(3 << 30)
        assert group.bound_memory() is None  # already bounded: nothing written
    finally:  # the group is the hierarchy's: leave it unbounded for whoever uses it next
        (layout.memory_dir(layout.qos_relpath(PodQOSClass.BE_IDLE_GROUP)) / name).write_text(
            "-1" if name == "memory.limit_in_bytes" else "max")


def test_a_group_the_kernel_refuses_to_create_is_a_reported_problem_not_a_crash(tmp_path):
    """Found with Tidal deployed as pods: the root of a v1 hierarchy is mode 0555, so an agent
    without CAP_DAC_OVERRIDE gets EACCES from mkdir, which ended the agent at every tick. Here
    the hierarchy's root is a file (ENOTDIR), the same path through ensure()."""
    from tidal.agent.collector.cgroups import CgroupDriver, CgroupHierarchy, CgroupLayout, CgroupVersion
    root = tmp_path / "not-a-directory"
    root.write_text("")
    group = BEIdleGroup(CgroupLayout(CgroupHierarchy(CgroupVersion.V2, root, root), CgroupDriver.CGROUPFS), tmp_path)
    assert group.ensure() == []
    assert group.problem.startswith("beIsolation.cpuPriority.idleGroup: cannot create the BE idle group (")
    assert str(root / "tidal-be") in group.problem and "CAP_DAC_OVERRIDE" in group.problem
    assert group.bound_memory() is None  # no group yet: nothing to bound, nothing logged every tick
    group.switched_off()
    assert group.problem is None
