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


def test_switched_off_a_group_still_holding_pods_runs_at_besteffort_s_weight(hierarchy, real):
    """Issue 14: with BE CPU priority switched off (or the node restored) the strategy's cpu.idle
    is put back to 0 and nothing else set the group's weight: its pods competed with kubepods at
    the default 1024, more than any BestEffort pod gets from the kubelet (cpu.shares 2)."""
    from tidal.agent.collector.cgroups import CgroupVersion
    layout = LocalKubelet(real).layout
    group = BEIdleGroup(layout, DEFAULT_CGROUP_ROOT)
    real.created.extend(group.ensure())
    d = group.cpu_root / group.relpath
    name, default, least = (("cpu.shares", "1024", "2") if layout.version is CgroupVersion.V1
                            else ("cpu.weight", "100", "1"))
    idle = d / "cpu.idle"
    try:
        if idle.exists():  # still idle (BE CPU priority on): lower yet, and the kernel refuses a weight
            idle.write_text("1")
            assert group.switched_off(holding=True) == [] and idle.read_text().strip() == "1"
            idle.write_text("0")
        (d / name).write_text(default)
        assert group.switched_off(holding=True) == []  # kept: a pod runs there
        assert (d / name).read_text().strip() == least
        assert group.hold_besteffort_weight() is None  # already so: nothing written
    finally:  # the group is the hierarchy's: leave it as the kernel makes it for whoever uses it next
        if d.is_dir():
            (d / name).write_text(default)


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
    group.switched_off(holding=False)
    assert group.problem is None


def _v1_tree(root):
    """A v1-shaped tree of plain directories (a hierarchy per controller): rmdir behaves as on
    cgroupfs for what the sweep needs (an empty group goes, one holding a pod's directory stays)."""
    from tidal.agent.collector.cgroups import CgroupDriver, CgroupHierarchy, CgroupLayout, CgroupVersion
    for name in ("cpu", "cpuacct", "memory", "pids", "unified"):
        (root / name).mkdir()
    return CgroupLayout(CgroupHierarchy(CgroupVersion.V1, root / "cpuacct", root / "memory"), CgroupDriver.CGROUPFS)


def test_switched_off_the_group_goes_from_every_hierarchy_with_its_last_pod(tmp_path):
    """Issue 14: switching idleGroup off left /tidal-be (idle, bounded) in every hierarchy, and
    uninstall.yml promises no residue on nodes."""
    layout = _v1_tree(tmp_path)
    group = BEIdleGroup(layout, tmp_path)
    assert {d.parent.name for d in group.ensure()} == {"cpu", "memory"}
    pod = layout.pod_relpath(str(uuid.uuid4()), PodQOSClass.BE_IDLE_GROUP)
    for hierarchy in ("cpu", "memory", "pids", "unified"):  # runc made the pod's cgroups everywhere
        (tmp_path / hierarchy / pod).mkdir(parents=True)

    assert group.switched_off(holding=True) == []  # a pod still runs there: nothing tried
    assert not group.swept and (tmp_path / "cpu" / "tidal-be").is_dir()
    (tmp_path / "cpu" / pod).rmdir()  # gone from one hierarchy only (a container not yet removed elsewhere)
    assert group.switched_off(holding=False) == [tmp_path / "cpu" / "tidal-be"]
    assert not group.swept and (tmp_path / "memory" / pod).is_dir()  # kept where it holds the pod: tried again
    for hierarchy in ("memory", "pids", "unified"):
        (tmp_path / hierarchy / pod).rmdir()
    removed = group.switched_off(holding=False)
    assert {d.parent.name for d in removed} == {"memory", "pids", "unified"}
    assert not any((tmp_path / h / "tidal-be").exists() for h in ("cpu", "cpuacct", "memory", "pids", "unified"))
    assert group.swept and group.switched_off(holding=False) == []  # swept: not again at every tick

    assert group.ensure()  # switched on again: made again, and swept again when off
    assert not group.swept and len(group.switched_off(holding=False)) == 2


def test_the_systemd_driver_s_group_is_systemd_s_to_remove(tmp_path):
    from tidal.agent.collector.cgroups import CgroupDriver, CgroupLayout
    v1 = _v1_tree(tmp_path)
    layout = CgroupLayout(v1.hierarchy, CgroupDriver.SYSTEMD)
    group = BEIdleGroup(layout, tmp_path)
    group.ensure()
    assert group.switched_off(holding=False) == [] and group.swept
    assert (tmp_path / "cpu" / "tidal_be.slice").is_dir()


def test_upkeep_makes_the_group_while_wanted_and_sweeps_it_when_not(tmp_path):
    """Wanted: the switch in force on a node whose mode is active. An agent kept on a node switched
    off (restore-pending) used to make the group again at every tick."""
    layout = _v1_tree(tmp_path)
    group = BEIdleGroup(layout, tmp_path)
    assert {d.parent.name for d in group.upkeep(wanted=True, holding=False)} == {"cpu", "memory"}
    assert group.upkeep(wanted=True, holding=False) == []  # there already
    assert {d.parent.name for d in group.upkeep(wanted=False, holding=False)} == {"cpu", "memory"}
    assert group.upkeep(wanted=False, holding=False) == [] and not (tmp_path / "cpu" / "tidal-be").exists()
