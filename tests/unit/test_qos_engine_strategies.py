"""Desired cgroup values of each QoS strategy, for cgroup v1 and v2 (pure: no filesystem)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from tidal.agent.collector.cgroups import (
    CgroupDriver,
    CgroupHierarchy,
    CgroupLayout,
    CgroupVersion,
    PodQOSClass,
)
from tidal.agent.qos.be_batch_resources import (
    BEBatchResources,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
    shares_to_weight,
)
from tidal.agent.qos.be_cpu_priority import BECPUPriority
from tidal.agent.qos.be_cpu_suppression import BECPUSuppression, bound_millicores, suppressed_millicores
from tidal.agent.qos.strategy import (
    CgroupWrite,
    ContainerState,
    NodeState,
    PodState,
    compose,
    cpu_controller_root,
)
from tidal.api.policy import ColocationPolicy
from tidal.api.qos import QoSLevel

UID = "11111111-2222-4333-8444-555555555555"
LS_UID = "99999999-2222-4333-8444-555555555555"
GiB = 1 << 30

V1 = CgroupLayout(
    CgroupHierarchy(CgroupVersion.V1, Path("/cg/cpuacct"), Path("/cg/memory")), CgroupDriver.CGROUPFS
)
V1_COMOUNT = CgroupLayout(
    CgroupHierarchy(CgroupVersion.V1, Path("/cg/cpu,cpuacct"), Path("/cg/memory")), CgroupDriver.CGROUPFS
)
V2 = CgroupLayout(CgroupHierarchy(CgroupVersion.V2, Path("/cg"), Path("/cg")), CgroupDriver.SYSTEMD)

BE_POD = PodState(
    UID, PodQOSClass.BEST_EFFORT, QoSLevel.BE,
    (ContainerState("containerd://aaa", 500, GiB), ContainerState("containerd://bbb", 1500, 2 * GiB)),
)
LS_POD = PodState(LS_UID, PodQOSClass.BURSTABLE, QoSLevel.LS, (ContainerState("containerd://ccc"),))


#: the BE idle group switched off (it is on by default): BE pods below kubepods only, as on a node
#: without NRI or for pods created before the switch (test_be_cpu_priority_in_the_idle_group)
IDLE_OFF = ColocationPolicy.from_spec({"beIsolation": {"cpuPriority": {"idleGroup": False}}})


def state(layout, caps=None, pods=(BE_POD, LS_POD), cpus=8.0, online=2000.0):
    return NodeState(
        pods=tuple(pods), node_cpus=cpus, online_usage_millicores=online,
        policy=IDLE_OFF, capabilities=caps or {}, layout=layout,
    )


def table(writes):
    return [(str(w.path), w.file, w.value) for w in writes]


def test_cpu_controller_root_follows_the_mounts():
    assert cpu_controller_root(V1) == Path("/cg/cpu")
    assert cpu_controller_root(V1_COMOUNT) == Path("/cg/cpu,cpuacct")
    assert cpu_controller_root(V2) == Path("/cg")
    assert cpu_controller_root(V1, Path("/x")) == Path("/x")


SD_POD = f"/cg/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice"


@pytest.mark.parametrize(
    "layout, caps, expected",
    [
        # the BE parent first (where BE competes with the online pods' groups), then each BE pod;
        # the parent keeps the kubelet's minimum weight, never cpu.idle (the kubelet could not
        # write its weight and would not start again: issue 15)
        (V1, {"cpu.idle": True}, [("/cg/cpu/kubepods/besteffort", "cpu.shares", "2"),
                                  (f"/cg/cpu/kubepods/besteffort/pod{UID}", "cpu.idle", "1")]),
        (V1, {}, [("/cg/cpu/kubepods/besteffort", "cpu.shares", "2"),
                  (f"/cg/cpu/kubepods/besteffort/pod{UID}", "cpu.shares", "2")]),
        (
            V1_COMOUNT, {"openeuler.cpu.qos_level": True},
            [
                ("/cg/cpu,cpuacct/kubepods/besteffort", "cpu.shares", "2"),
                ("/cg/cpu,cpuacct/kubepods/besteffort", "cpu.qos_level", "-1"),
                (f"/cg/cpu,cpuacct/kubepods/besteffort/pod{UID}", "cpu.shares", "2"),
                (f"/cg/cpu,cpuacct/kubepods/besteffort/pod{UID}", "cpu.qos_level", "-1"),
            ],
        ),
        (
            V2, {"cpu.idle": True},
            [("/cg/kubepods.slice/kubepods-besteffort.slice", "cpu.weight", "1"), (SD_POD, "cpu.idle", "1")],
        ),
        (
            V2, {},
            [("/cg/kubepods.slice/kubepods-besteffort.slice", "cpu.weight", "1"), (SD_POD, "cpu.weight", "1")],
        ),
    ],
)
def test_be_cpu_priority(layout, caps, expected):
    assert table(BECPUPriority().plan(state(layout, caps))) == expected


IDLE_POD = PodState(uid=LS_UID.replace("9", "7"), qos_class=PodQOSClass.BE_IDLE_GROUP, tidal_level=QoSLevel.BE)
IDLE_ON = ColocationPolicy.from_spec({"beIsolation": {"cpuPriority": {"idleGroup": True}}})


@pytest.mark.parametrize("pods, policy, expected", [
    # a BE pod in the idle group: the group itself idle (Tidal's own: no kubelet writes its weight), and the pod
    ([IDLE_POD], ColocationPolicy(), [("/cg/cpu/tidal-be", "cpu.idle", "1"),
                                      (f"/cg/cpu/tidal-be/pod{IDLE_POD.uid}", "cpu.idle", "1")]),
    # switched on, no BE pod yet: the group idle before the first BE container lands there
    ([LS_POD], IDLE_ON, [("/cg/cpu/tidal-be", "cpu.idle", "1")]),
    # ... as by default
    ([LS_POD], ColocationPolicy(), [("/cg/cpu/tidal-be", "cpu.idle", "1")]),
    # switched off: nothing for a node of online pods only
    ([LS_POD], IDLE_OFF, []),
    # both parents hold BE pods (one created before the switch)
    ([BE_POD, IDLE_POD], IDLE_ON, [("/cg/cpu/kubepods/besteffort", "cpu.shares", "2"),
                                   ("/cg/cpu/tidal-be", "cpu.idle", "1"),
                                   (f"/cg/cpu/kubepods/besteffort/pod{UID}", "cpu.idle", "1"),
                                   (f"/cg/cpu/tidal-be/pod{IDLE_POD.uid}", "cpu.idle", "1")]),
])
def test_be_cpu_priority_in_the_idle_group(pods, policy, expected):
    node = NodeState(pods=tuple(pods), node_cpus=8.0, online_usage_millicores=2000.0, policy=policy,
                     capabilities={"cpu.idle": True}, layout=V1)
    assert table(BECPUPriority().plan(node)) == expected


@pytest.mark.parametrize("pods, expected", [
    ([], [("/cg/cpu/kubepods/besteffort", "cpu.cfs_quota_us", "400000")]),  # as before the idle group
    ([BE_POD], [("/cg/cpu/kubepods/besteffort", "cpu.cfs_quota_us", "400000")]),
    ([IDLE_POD], [("/cg/cpu/tidal-be", "cpu.cfs_quota_us", "400000")]),
    # pods under both parents: an equal share each, BE together within the quota
    ([BE_POD, IDLE_POD], [("/cg/cpu/kubepods/besteffort", "cpu.cfs_quota_us", "200000"),
                          ("/cg/cpu/tidal-be", "cpu.cfs_quota_us", "200000")]),
])
def test_the_suppression_quota_on_every_be_parent(pods, expected):
    from tidal.agent.qos.be_cpu_suppression import quota_writes
    node = NodeState(pods=tuple(pods), node_cpus=8.0, online_usage_millicores=2000.0, policy=ColocationPolicy(),
                     capabilities={}, layout=V1)
    assert [w for w in table(quota_writes(node, 4000)) if w[1] == "cpu.cfs_quota_us"] == expected


def test_be_cpu_priority_leaves_non_be_pods_alone():
    assert BECPUPriority().plan(state(V1, {"cpu.idle": True}, pods=[LS_POD])) == []


@pytest.mark.parametrize(
    "millicores, quota, shares, weight",
    [(1, 1000, 2, 1), (100, 10000, 102, 4), (500, 50000, 512, 20), (2000, 200000, 2048, 79)],
)
def test_conversions(millicores, quota, shares, weight):
    assert milli_cpu_to_quota(millicores) == quota
    assert milli_cpu_to_shares(millicores) == shares
    assert shares_to_weight(shares) == weight


def test_be_batch_resources_v1():
    pod = f"/cg/cpu/kubepods/besteffort/pod{UID}"
    mem = f"/cg/memory/kubepods/besteffort/pod{UID}"
    assert table(BEBatchResources().plan(state(V1))) == [
        (pod, "cpu.cfs_period_us", "100000"),
        (pod, "cpu.cfs_quota_us", "200000"),
        (mem, "memory.limit_in_bytes", str(3 * GiB)),
        (f"{pod}/aaa", "cpu.cfs_period_us", "100000"),
        (f"{pod}/aaa", "cpu.cfs_quota_us", "50000"),
        (f"{pod}/aaa", "cpu.shares", "512"),
        (f"{mem}/aaa", "memory.limit_in_bytes", str(GiB)),
        (f"{pod}/bbb", "cpu.cfs_period_us", "100000"),
        (f"{pod}/bbb", "cpu.cfs_quota_us", "150000"),
        (f"{pod}/bbb", "cpu.shares", "1536"),
        (f"{mem}/bbb", "memory.limit_in_bytes", str(2 * GiB)),
    ]


def test_be_batch_resources_v2_systemd():
    pod = f"/cg/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice"
    assert table(BEBatchResources().plan(state(V2))) == [
        (pod, "cpu.max", "200000 100000"),
        (pod, "memory.max", str(3 * GiB)),
        (f"{pod}/cri-containerd-aaa.scope", "cpu.max", "50000 100000"),
        (f"{pod}/cri-containerd-aaa.scope", "cpu.weight", "20"),
        (f"{pod}/cri-containerd-aaa.scope", "memory.max", str(GiB)),
        (f"{pod}/cri-containerd-bbb.scope", "cpu.max", "150000 100000"),
        (f"{pod}/cri-containerd-bbb.scope", "cpu.weight", "59"),
        (f"{pod}/cri-containerd-bbb.scope", "memory.max", str(2 * GiB)),
    ]


def test_be_batch_resources_without_a_request_sets_no_limit():
    pod = PodState(
        UID, PodQOSClass.BEST_EFFORT, QoSLevel.BE,
        (ContainerState("containerd://aaa", 500, 0), ContainerState("containerd://bbb", 0, GiB)),
    )
    files = table(BEBatchResources().plan(state(V1, pods=[pod])))
    root = f"/cg/cpu/kubepods/besteffort/pod{UID}"
    # no pod-level limit unless every container asks for the resource
    assert not [f for f in files if f[0] in (root, root.replace("cpu", "memory", 1))]
    assert (f"{root}/aaa", "cpu.cfs_quota_us", "50000") in files
    assert not [f for f in files if f[0].endswith("/aaa") and f[1].startswith("memory")]
    assert not [f for f in files if f[0].endswith("/bbb") and f[1].startswith("cpu")]
    assert BEBatchResources().plan(state(V1, pods=[LS_POD])) == []


@pytest.mark.parametrize(
    "cpus, online, threshold, floor, allowed",
    [
        (8, 2000, 0.65, 500, 3200),   # 8 × 0.65 = 5.2 CPUs − 2 online
        (8, 5000, 0.65, 500, 500),    # 5.2 − 5 = 0.2 < floor
        (8, 9000, 0.65, 500, 500),    # overloaded: floor, never 0
        (4, 0, 1.0, 250, 4000),
        (2, 1000, 0.5, 100, 100),     # exactly 0 left -> floor
    ],
)
def test_suppressed_millicores(cpus, online, threshold, floor, allowed):
    assert suppressed_millicores(cpus, online, threshold, floor) == allowed


@pytest.mark.parametrize(
    "online, system, allowed",
    [
        (2000, 0, 3200),     # includeSystemUsage off (or nothing outside the pods): 5.2 CPUs − 2 online
        (2000, 1500, 1700),  # daemons using 1.5 CPUs leave BE that much less
        (2000, 4000, 500),   # a node busy with its own daemons: the floor
    ],
)
def test_the_suppression_bound_leaves_system_usage_to_the_system(online, system, allowed):
    s = dataclasses.replace(state(V1, online=online), system_usage_millicores=system)
    assert bound_millicores(s, 0.65, 500) == allowed
    assert BECPUSuppression(0.65, 500).allowed_millicores(s) == allowed


@pytest.mark.parametrize(
    "layout, expected",
    [
        (V1, [("/cg/cpu/kubepods/besteffort", "cpu.cfs_period_us", "100000"),
              ("/cg/cpu/kubepods/besteffort", "cpu.cfs_quota_us", "320000")]),
        (V2, [("/cg/kubepods.slice/kubepods-besteffort.slice", "cpu.max", "320000 100000")]),
    ],
)
def test_be_cpu_suppression_limits_the_besteffort_parent(layout, expected):
    assert table(BECPUSuppression().plan(state(layout))) == expected


def test_be_cpu_suppression_rejects_bad_settings():
    with pytest.raises(ValueError):
        BECPUSuppression(threshold=0)
    with pytest.raises(ValueError):
        BECPUSuppression(floor_millicores=0)


def test_compose_clamps_v1_quotas_to_ancestors_and_dedupes():
    tight = state(V1, online=5000.0)  # suppression at the floor: 0.5 CPU on besteffort
    plan = compose([BECPUSuppression().plan(tight), BECPUPriority().plan(tight), BEBatchResources().plan(tight)], CgroupVersion.V1)
    quotas = {str(w.path): w.value for w in plan if w.file == "cpu.cfs_quota_us"}
    pod = f"/cg/cpu/kubepods/besteffort/pod{UID}"
    assert quotas == {
        "/cg/cpu/kubepods/besteffort": "50000",
        pod: "50000",
        f"{pod}/aaa": "50000",
        f"{pod}/bbb": "50000",
    }
    a = CgroupWrite(Path("/x"), "cpu.shares", "2")
    b = CgroupWrite(Path("/x"), "cpu.shares", "3")
    assert compose([[a], [b]], CgroupVersion.V1) == [b]
    # v2 nests freely: nothing clamped
    v2 = compose([BECPUSuppression().plan(state(V2, online=5000.0)), BEBatchResources().plan(state(V2))], CgroupVersion.V2)
    assert any(w.value == "200000 100000" for w in v2)


def test_memory_limit_is_planned_page_aligned():
    from tidal.agent.qos.be_batch_resources import PAGE_SIZE

    pod = PodState(UID, PodQOSClass.BEST_EFFORT, QoSLevel.BE, (ContainerState("containerd://aaa", 0, 10 * PAGE_SIZE + 123),))
    values = {w.value for w in BEBatchResources().plan(state(V1, pods=[pod])) if w.file == "memory.limit_in_bytes"}
    assert values == {str(10 * PAGE_SIZE)}
