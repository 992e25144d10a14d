"""Memory reclamation: the level (table-driven), the plans on v1 and v2, the adapter on a recorded v2
tree (memory.high + memory.reclaim, restored when switched off), and the real v1 soft limit."""
from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from tidal.agent.collector.cgroups import CgroupDriver, CgroupHierarchy, CgroupLayout, CgroupVersion, PodQOSClass
from tidal.agent.qos.feature import Counter
from tidal.agent.qos.memory_reclaim import MemoryReclaimer, ReclaimLevel, ceiling_bytes, reclaim_plan, reclaim_requests
from tidal.agent.qos.strategy import ContainerState, PodState
from tidal.api.policy import ColocationPolicy
from tidal.api.qos import QoSLevel
from tidal_dev.testing.local_kubelet import LocalKubelet

MiB = 1 << 20


def config(**kw):
    return ColocationPolicy.from_spec({"features": {"memoryReclaim": kw}}).features.memory_reclaim


@pytest.mark.parametrize("samples, levels", [
    # (time, memory %) -> level after the step; interval 5 s, trigger 50 %
    ([(0, 40), (5, 45)], [0, 0]),
    ([(0, 60), (5, 70), (10, 80)], [1, 2, 3]),             # harder while usage stays high
    ([(0, 60), (1, 60), (4.9, 60), (5, 60)], [1, 1, 1, 2]),  # at most once per interval
    ([(0, 60), (5, 60), (10, 50), (15, 10), (20, 10)], [1, 2, 1, 0, 0]),  # relaxes as it recovers
    ([(0, 60), (5, None), (10, 60)], [1, 1, 2]),           # no sample: level kept
])
def test_level(samples, levels):
    machine, cfg = ReclaimLevel(), config()
    assert [machine.step(t, m, cfg) for t, m in samples] == levels


def test_level_is_capped():
    machine, cfg = ReclaimLevel(), config(stepPercent=40)
    assert [machine.step(t * 5, 99, cfg) for t in range(5)] == [1, 2, 2, 2, 2]


@pytest.mark.parametrize("limit, level, step, expected", [
    (1000 * 4096, 1, 10, 900 * 4096),
    (1000 * 4096, 5, 10, 500 * 4096),
    (1000 * 4096, 10, 10, 100 * 4096),   # never below one step
    (1000 * 4096, 99, 10, 100 * 4096),
    (1001 * 4096 + 7, 1, 10, 900 * 4096),  # page-aligned, rounded down
    (4096, 9, 10, 4096),                 # at least a page
])
def test_ceiling(limit, level, step, expected):
    assert ceiling_bytes(limit, level, step) == expected


def layout(version, root=Path("/sys/fs/cgroup")):
    if version is CgroupVersion.V1:
        return CgroupLayout(CgroupHierarchy(version, root / "cpu,cpuacct", root / "memory"), CgroupDriver.CGROUPFS)
    return CgroupLayout(CgroupHierarchy(version, root, root), CgroupDriver.SYSTEMD)


BE = PodState("aaaa-1111", PodQOSClass.BEST_EFFORT, QoSLevel.BE,
              (ContainerState("containerd://a", 500, 400 * MiB), ContainerState("containerd://b", 0, 100 * MiB)))
BE_UNLIMITED = PodState("bbbb-2222", PodQOSClass.BEST_EFFORT, QoSLevel.BE, (ContainerState("containerd://c", 500, 0),))
LS = PodState("cccc-3333", PodQOSClass.BURSTABLE, QoSLevel.LS, (ContainerState("containerd://d"),))


def test_v1_soft_limit_on_limited_be_pods_only():
    plan = reclaim_plan(2, config(), [BE, BE_UNLIMITED, LS], layout(CgroupVersion.V1))
    assert [(str(w.target), w.value) for w in plan] == [
        ("/sys/fs/cgroup/memory/kubepods/besteffort/podaaaa-1111/memory.soft_limit_in_bytes", str(400 * MiB)),
    ]
    assert reclaim_plan(0, config(), [BE], layout(CgroupVersion.V1)) == []
    assert reclaim_requests(2, config(), [BE], layout(CgroupVersion.V1), {BE.uid: 300 * MiB}) == []


def test_v2_memory_high_and_proactive_reclaim():
    lay = layout(CgroupVersion.V2)
    (w,) = reclaim_plan(1, config(), [BE, LS], lay)
    assert w.file == "memory.high" and w.value == str(450 * MiB)
    assert str(w.path).endswith("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podaaaa_1111.slice")
    assert reclaim_requests(1, config(), [BE, LS], lay, {BE.uid: 300 * MiB, LS.uid: 900 * MiB}) == [(w.path, 30 * MiB)]


def test_adapter_on_a_recorded_v2_tree_applies_reclaims_and_restores(tmp_path):
    lay = layout(CgroupVersion.V2, tmp_path)
    pod_dir = lay.memory_dir(lay.pod_relpath(BE.uid, BE.qos_class))
    pod_dir.mkdir(parents=True)
    (pod_dir / "memory.high").write_text("max\n")
    (pod_dir / "memory.reclaim").write_text("")
    reclaimer = MemoryReclaimer(lay, tmp_path / "journal.json")
    cfg, usage = config(), {BE.uid: 200 * MiB}
    assert reclaimer.round(0, True, cfg, 40.0, [BE], usage) == []
    assert (pod_dir / "memory.high").read_text().strip() == "max"          # below the trigger
    assert reclaimer.outcome.counters == []  # nothing asked of the kernel, nothing counted
    assert reclaimer.round(5, True, cfg, 70.0, [BE], usage) == []
    assert (pod_dir / "memory.high").read_text() == str(450 * MiB)
    assert (pod_dir / "memory.reclaim").read_text() == str(20 * MiB)
    # what the kernel was asked for, counted (tidal_be_memory_reclaim_requests_total, ..._bytes_total)
    assert reclaimer.outcome.counters == [Counter("be_memory_reclaims", (), 1),
                                          Counter("be_memory_reclaim_bytes", (), 20 * MiB)]
    assert reclaimer.round(6, True, cfg, 70.0, [BE], usage) == []
    assert reclaimer.outcome.counters == []  # within the interval: no request
    (pod_dir / "memory.reclaim").unlink()  # a request that fails is reported, not counted
    (pod_dir / "memory.reclaim").mkdir()
    ((file, _),) = reclaimer.round(10, True, cfg, 70.0, [BE], usage)
    assert file.endswith("memory.reclaim") and reclaimer.outcome.counters == []
    assert (pod_dir / "memory.high").read_text() == str(400 * MiB)
    # switched off in the policy: the original comes back, the level starts over
    assert reclaimer.round(11, True, config(enabled=False), 70.0, [BE], usage) == []
    assert (pod_dir / "memory.high").read_text() == "max"
    assert reclaimer.journal.originals == {} and reclaimer.level.level == 0
    # relaxing to level 0 also restores (the node left colocation: same)
    reclaimer.round(20, True, cfg, 70.0, [BE], usage)
    assert (pod_dir / "memory.high").read_text() == str(450 * MiB)
    reclaimer.round(25, True, cfg, 10.0, [BE], usage)
    assert (pod_dir / "memory.high").read_text() == "max"


def test_real_v1_soft_limit(hierarchy, real, tmp_path):
    if hierarchy.version is not CgroupVersion.V1:
        pytest.skip("the v1 tree is built here; v2 is covered on the recorded tree")
    kubelet = LocalKubelet(real)
    pod = PodState(f"{secrets.token_hex(4)}-reclaim", PodQOSClass.BEST_EFFORT, QoSLevel.BE,
                   (ContainerState(f"containerd://{secrets.token_hex(32)}", 500, 256 * MiB),))
    dirs = kubelet.create_pod(pod.uid, pod.qos_class, [pod.containers[0].id])[pod.containers[0].id]
    kubelet.idle(dirs)
    memory = kubelet.layout.memory_dir(kubelet.layout.pod_relpath(pod.uid, pod.qos_class))
    original = (memory / "memory.soft_limit_in_bytes").read_text().strip()
    reclaimer = MemoryReclaimer(kubelet.layout, tmp_path / "journal.json")
    cfg = config(stepPercent=25)
    assert reclaimer.round(0, True, cfg, 90.0, [pod], {}) == []
    assert (memory / "memory.soft_limit_in_bytes").read_text().strip() == str(192 * MiB)
    assert reclaimer.round(5, True, cfg, 90.0, [pod], {}) == []
    assert (memory / "memory.soft_limit_in_bytes").read_text().strip() == str(128 * MiB)
    assert reclaimer.round(6, False, cfg, 90.0, [pod], {}) == []  # node left colocation
    assert (memory / "memory.soft_limit_in_bytes").read_text().strip() == original
