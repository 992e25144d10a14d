"""NUMA affinity for LS pods on recorded multi-NUMA sysfs trees and kubelet CPU manager states."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tidal.agent.collector.cgroups import CgroupDriver, CgroupHierarchy, CgroupLayout, CgroupVersion, PodQOSClass
from tidal.agent.qos.numa_affinity import (
    CPUManagerState,
    NUMAAffinityActuator,
    Placement,
    assign,
    format_cpu_list,
    parse_cpu_manager_state,
    read_topology,
    shareable,
)
from tidal.agent.qos.pod_features import ContainerCPU, FeaturePodState
from tidal.api.qos import QoSLevel

DATA = Path(__file__).resolve().parent.parent / "data" / "numa"
STATIC = DATA / "kubelet" / "cpu_manager_state.static"


def test_topologies():
    assert read_topology(DATA / "two-node") == {0: frozenset([*range(0, 8), *range(16, 24)]),
                                                1: frozenset([*range(8, 16), *range(24, 32)])}
    assert {n: format_cpu_list(c) for n, c in read_topology(DATA / "four-node").items()} == {
        0: "0-3", 1: "4-7", 2: "8-11", 3: "12-15"}


def test_cpu_manager_states():
    static = parse_cpu_manager_state(STATIC.read_text())
    assert static.policy == "static" and format_cpu_list(static.exclusive) == "2-5,8-9"
    assert format_cpu_list(static.default_cpus) == "0-1,6-7,10-31"
    none = parse_cpu_manager_state((DATA / "kubelet" / "cpu_manager_state.none").read_text())
    assert none == CPUManagerState("none", frozenset(), None)
    with pytest.raises(ValueError, match="cpu_manager_state"):
        parse_cpu_manager_state("{not json")


def test_exclusive_cpus_are_never_shareable():
    free = shareable(read_topology(DATA / "two-node"), parse_cpu_manager_state(STATIC.read_text()))
    assert {n: format_cpu_list(c) for n, c in free.items()} == {0: "0-1,6-7,16-23", 1: "10-15,24-31"}


@pytest.mark.parametrize("tree, containers, expected", [
    # two-node with HLS exclusive CPUs: node1 has 14 shareable CPUs, node0 12
    ("two-node", [("p1", "c1", 2000)], {"c1": (1,)}),
    ("two-node", [("p1", "c1", 2000), ("p2", "c2", 1000)], {"c1": (1,), "c2": (0,)}),  # tie 12/12 -> lowest id
    ("two-node", [("p1", "c1", 2000), ("p2", "c2", 1000), ("p3", "c3", 500)], {"c1": (1,), "c2": (0,), "c3": (1,)}),
    # a container bigger than any node falls back to the freest nodes together
    ("two-node", [("p1", "c1", 20000)], {"c1": (0, 1)}),
    ("four-node", [("p1", "c1", 3000), ("p2", "c2", 3000), ("p3", "c3", 3000), ("p4", "c4", 3000),
                   ("p5", "c5", 2000)], {"c1": (0,), "c2": (1,), "c3": (2,), "c4": (3,), "c5": (0, 1)}),  # every node short
    ("four-node", [("p1", "c1", 6000)], {"c1": (0, 1)}),
])
def test_assign(tree, containers, expected):
    free = shareable(read_topology(DATA / tree), parse_cpu_manager_state(STATIC.read_text()) if tree == "two-node"
                     else CPUManagerState())
    placed = assign(free, {}, containers)
    assert {cid: p.nodes for cid, p in placed.items()} == expected


def test_placements_are_sticky_and_gone_containers_dropped():
    free = shareable(read_topology(DATA / "four-node"), CPUManagerState())
    first = assign(free, {}, [("p1", "c1", 1000), ("p2", "c2", 1000)])
    assert {c: p.nodes for c, p in first.items()} == {"c1": (0,), "c2": (1,)}
    # c1 goes; c3 arrives: c2 stays on node 1, c3 takes the freest (node 0, now empty again)
    again = assign(free, first, [("p2", "c2", 1000), ("p3", "c3", 1000)])
    assert {c: p.nodes for c, p in again.items()} == {"c2": (1,), "c3": (0,)}
    assert again["c2"] is first["c2"]


def ls(uid, name, *containers, level=QoSLevel.LS):
    return FeaturePodState(uid=uid, qos_class=PodQOSClass.BURSTABLE, tidal_level=level, namespace="web", name=name,
                           cpu=tuple(ContainerCPU(cid, req, 0, *name) for cid, req, *name in containers))


@pytest.mark.parametrize("version", [CgroupVersion.V1, CgroupVersion.V2])
def test_actuator_on_a_recorded_tree(tmp_path, caplog, version):
    root = tmp_path / "cgroup"
    if version is CgroupVersion.V1:
        layout = CgroupLayout(CgroupHierarchy(version, root / "cpu,cpuacct", root / "memory"), CgroupDriver.CGROUPFS)
        cpuset = root / "cpuset"
    else:
        layout = CgroupLayout(CgroupHierarchy(version, root, root), CgroupDriver.SYSTEMD)
        cpuset = root
    api = ls("1111-aaaa", "api", ("containerd://a1", 2000, "app"))
    hls = ls("2222-bbbb", "db", ("containerd://h1", 4000), level=QoSLevel.HLS)
    be = ls("3333-cccc", "batch", ("containerd://b1", 0), level=QoSLevel.BE)
    dirs = {}
    for pod in (api, hls, be):
        for c in pod.cpu:
            d = cpuset / layout.container_relpath(pod.uid, pod.qos_class, c.id)
            d.mkdir(parents=True)
            (d / "cpuset.cpus").write_text("0-31\n")
            (d / "cpuset.mems").write_text("0-1\n")
            dirs[c.id] = d
    actuator = NUMAAffinityActuator(layout, tmp_path / "numa.json", sys_root=DATA / "two-node",
                                    cpu_manager_state=STATIC)
    with caplog.at_level(logging.INFO, logger="tidal.agent.qos.numa_affinity"):
        assert actuator.round(True, [api, hls, be]) == []
        assert actuator.round(True, [api, hls, be]) == []
    assert (dirs["containerd://a1"] / "cpuset.cpus").read_text() == "10-15,24-31"
    assert (dirs["containerd://a1"] / "cpuset.mems").read_text() == "1"
    for cid in ("containerd://h1", "containerd://b1"):  # HLS and BE pods are not touched
        assert (dirs[cid] / "cpuset.cpus").read_text() == "0-31\n"
    assert [r.getMessage() for r in caplog.records] == [
        "Successfully set NUMA affinity for container web/api/app: cpus=10-15,24-31 mems=1"]
    # switched off: the original cpuset comes back
    assert actuator.round(False, [api, hls, be]) == []
    assert (dirs["containerd://a1"] / "cpuset.cpus").read_text() == "0-31"
    assert (dirs["containerd://a1"] / "cpuset.mems").read_text() == "0-1"
    assert actuator.journal.originals == {} and actuator.placements == {}


def test_a_cpuset_the_nri_plugin_set_at_creation_goes_back_to_the_shared_pool(tmp_path):
    """The plugin pinned the LS container as it was created, so the agent finds the pin in place
    and has no original: switched off, the container gets the kubelet's shared pool and every
    NUMA node (it kept the pin for life before)."""
    layout = CgroupLayout(CgroupHierarchy(CgroupVersion.V2, tmp_path, tmp_path), CgroupDriver.SYSTEMD)
    api = ls("1111-aaaa", "api", ("containerd://a1", 2000, "app"))
    d = tmp_path / layout.container_relpath(api.uid, api.qos_class, "containerd://a1")
    d.mkdir(parents=True)
    (d / "cpuset.cpus").write_text("10-15,24-31\n")  # the plugin's, at creation
    (d / "cpuset.mems").write_text("1\n")
    actuator = NUMAAffinityActuator(layout, tmp_path / "numa.json", sys_root=DATA / "two-node",
                                    cpu_manager_state=STATIC)
    assert actuator.round(True, [api]) == []
    assert (d / "cpuset.cpus").read_text() == "10-15,24-31\n"  # nothing written: already right
    pool = format_cpu_list(frozenset().union(*shareable(read_topology(DATA / "two-node"),
                                                         parse_cpu_manager_state(STATIC.read_text())).values()))
    assert actuator.journal.originals == {str(d / "cpuset.cpus"): pool, str(d / "cpuset.mems"): "0-1"}
    assert actuator.round(False, [api]) == []
    assert (d / "cpuset.cpus").read_text() == pool and (d / "cpuset.mems").read_text() == "0-1"


def test_no_cpu_manager_state_file_means_every_cpu_is_shareable(tmp_path):
    actuator = NUMAAffinityActuator(CgroupLayout(CgroupHierarchy(CgroupVersion.V2, tmp_path, tmp_path),
                                                 CgroupDriver.CGROUPFS), tmp_path / "j.json",
                                    sys_root=DATA / "four-node", cpu_manager_state=tmp_path / "absent")
    assert actuator.read_cpu_state() == CPUManagerState()
    assert actuator.round(True, [ls("1111-aaaa", "api", ("containerd://a1", 1000))]) == []  # cgroup missing: skipped
    assert actuator.placements["containerd://a1"] == Placement("1111-aaaa", "containerd://a1", (0,), 1000)


def test_a_restarted_agent_keeps_the_numa_nodes_it_gave(tmp_path):
    layout = CgroupLayout(CgroupHierarchy(CgroupVersion.V2, tmp_path, tmp_path), CgroupDriver.SYSTEMD)
    first = ls("1111-aaaa", "api", ("containerd://a1", 1000))
    second = ls("2222-bbbb", "web", ("containerd://b1", 1000))
    third = ls("0000-cccc", "new", ("containerd://c1", 1000))  # sorts first: fresh placement would give it node 0
    for pod in (first, second, third):
        d = tmp_path / layout.container_relpath(pod.uid, pod.qos_class, pod.cpu[0].id)
        d.mkdir(parents=True)
        (d / "cpuset.cpus").write_text("0-15")
        (d / "cpuset.mems").write_text("0-3")
    kw = dict(sys_root=DATA / "four-node", cpu_manager_state=tmp_path / "absent")
    before = NUMAAffinityActuator(layout, tmp_path / "numa.json", **kw)
    before.round(True, [first])
    before.round(True, [first, second])
    assert {c: p.nodes for c, p in before.placements.items()} == {"containerd://a1": (0,), "containerd://b1": (1,)}
    # restarted, with a new LS pod: the placed containers keep their nodes, the new one gets the freest
    after = NUMAAffinityActuator(layout, tmp_path / "numa.json", **kw)
    assert after.round(True, [first, second, third]) == []
    assert {c: p.nodes for c, p in after.placements.items()} == {
        "containerd://a1": (0,), "containerd://b1": (1,), "containerd://c1": (2,)}
    assert after.round(False, [first, second, third]) == []
    d = tmp_path / layout.container_relpath(first.uid, first.qos_class, "containerd://a1")
    assert (d / "cpuset.mems").read_text() == "0-3" and (d / "cpuset.cpus").read_text() == "0-15"
