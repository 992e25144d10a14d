"""PSI interference with real pressure on this machine: a BE "pod" (kubelet-style cgroups) thrashes
its page cache, so the node's memory pressure (/proc/pressure/memory, the v1 hybrid's only PSI)
rises. When the node is short of memory — the node is a memory cgroup (the agent's
``--node-memory-cgroup``) with a tight limit, which the thrashing hits — the node round, reading
the pressure, the node's limit hits and the real sampler's per-pod usage, decides to evict that
pod, not the idle BE pod next to it, and the cooldown holds the next one. When the node has
room and the BE pod thrashes inside its own limit, the same pressure is the limit doing its
work: no eviction.

Memory pressure is used because this shared machine's CPU pressure is rarely low enough to show
interference on top of it; its memory pressure is ~0 unless something thrashes.
"""
from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest
from tidal.api import qos
from tidal.agent.collector.cgroups import PodQOSClass
from tidal.agent.collector.sampler import PodInfo, Sampler
from tidal.agent.qos.capabilities import probe, supported_map
from tidal.agent.qos.engine import QoSEngine
from tidal.agent.qos.node_qos import NodeQoS
from tidal.agent.qos.psi_interference import PSIDecision, parse_some_avg10
from tidal.agent.qos.strategy import ContainerState, PodState
from tidal.api.qos import QoSLevel
from tidal_dev.testing.local_kubelet import LocalKubelet
from tidal_dev.testing.pressure import Thrasher

THRESHOLD = 5.0  # the policy default


def node_memory_avg10() -> float:
    return parse_some_avg10(Path("/proc/pressure/memory").read_text())


def psi_node(kubelet, caps, tmp_path) -> NodeQoS:
    node_qos = NodeQoS("n1", kubelet.layout, QoSEngine(tmp_path / "journal.json"), caps,
                       cpu_controller_root=kubelet.cpu_root)
    node_qos.observe_node({"metadata": {"labels": {qos.COLOCATION_NODE_LABEL: "true"}}})
    node_qos.observe_policy({"metadata": {"resourceVersion": "1"}, "spec": {
        "beIsolation": {"cpuSuppression": {"enabled": False}, "cpuPriority": {"enabled": False},
                        "batchResources": {"enabled": False}},
        "evictionWatermarks": {"enabled": False},
        "features": {"psiInterference": {"enabled": True, "resources": ["memory"]}}}})
    return node_qos


def _be_pods(kubelet):
    pods, infos, dirs = [], [], {}
    for name in ("thrash", "quiet"):
        uid, cid = f"{secrets.token_hex(4)}-{name}", f"containerd://{secrets.token_hex(32)}"
        dirs[name] = kubelet.create_pod(uid, PodQOSClass.BEST_EFFORT, [cid])[cid]
        pods.append(PodState(uid, PodQOSClass.BEST_EFFORT, QoSLevel.BE, (ContainerState(cid),), "batch", name))
        infos.append(PodInfo(uid, "batch", name, PodQOSClass.BEST_EFFORT, QoSLevel.BE, (cid,)))
    return pods, infos, dirs


def _quiet_node(caps):
    if not caps.get("psi"):
        pytest.skip("no PSI on this kernel")
    deadline = time.monotonic() + 30
    while node_memory_avg10() >= THRESHOLD / 2:  # someone else thrashing: let it settle
        if time.monotonic() > deadline:
            pytest.skip(f"node memory pressure stays at {node_memory_avg10():.1f}%")
        time.sleep(2)


def test_real_memory_pressure_evicts_the_interfering_be_pod(hierarchy, real, tmp_path):
    caps = supported_map(probe())
    _quiet_node(caps)
    kubelet = LocalKubelet(real)
    pods, infos, dirs = _be_pods(kubelet)
    node_cgroup = kubelet.layout.hierarchy.memory_root / kubelet.kubelet_root.lstrip("/")
    sampler = Sampler(kubelet.layout, node_memory_cgroup=node_cgroup)
    node_qos = psi_node(kubelet, caps, tmp_path)
    sampler.sample(infos)
    assert not node_qos.round(sampler, pods).decisions, "no pressure yet, no decision"

    decision = None
    with Thrasher(tmp_path, dirs["thrash"], node_cgroup):  # the node's limit: the node is short
        start = time.monotonic()
        while decision is None and time.monotonic() - start < 45:
            time.sleep(1.0)  # the agent's round period
            sampler.sample(infos)
            decision = next((d for d in node_qos.round(sampler, pods).decisions if isinstance(d, PSIDecision)), None)
        took = time.monotonic() - start
        if decision is not None:
            # the cooldown (60 s default) holds the next one back although pressure stays high
            sampler.sample(infos)
            assert not node_qos.round(sampler, pods).decisions
    print(f"\ndecided after {took:.1f}s: {decision.reason if decision else None}")
    assert decision is not None, f"no PSI decision in 45 s (memory some avg10 {node_memory_avg10():.2f}%)"
    assert decision.pod_uid == pods[0].uid and decision.resource == "memory"
    assert decision.avg10_percent > THRESHOLD
    assert "batch/thrash" in decision.reason and "(node)" in decision.reason


def test_a_be_pod_stalling_inside_its_own_limit_is_not_interference(hierarchy, real, tmp_path):
    caps = supported_map(probe())
    _quiet_node(caps)
    kubelet = LocalKubelet(real)
    pods, infos, dirs = _be_pods(kubelet)
    node_cgroup = kubelet.layout.hierarchy.memory_root / kubelet.kubelet_root.lstrip("/")
    sampler = Sampler(kubelet.layout, node_memory_cgroup=node_cgroup)  # no limit: room to spare
    node_qos = psi_node(kubelet, caps, tmp_path)
    sampler.sample(infos)
    node_qos.round(sampler, pods)
    own = kubelet.layout.memory_dir(kubelet.layout.container_relpath(pods[0].uid, pods[0].qos_class,
                                                                   pods[0].containers[0].id))
    seen, decisions = 0.0, []
    with Thrasher(tmp_path, dirs["thrash"], own):  # the BE pod's own limit
        start = time.monotonic()
        while time.monotonic() - start < 25:
            time.sleep(1.0)
            sampler.sample(infos)
            decisions += [d for d in node_qos.round(sampler, pods).decisions if isinstance(d, PSIDecision)]
            seen = max(seen, node_memory_avg10())
    print(f"\nnode memory some avg10 up to {seen:.1f}% while the BE pod thrashed in its own limit")
    if seen <= THRESHOLD:
        pytest.skip(f"the thrashing did not raise the node's memory pressure above {THRESHOLD}% ({seen:.1f}%)")
    assert decisions == [], [d.reason for d in decisions]
    if (node_cgroup / "memory.failcnt").exists():  # v1: the node never hit a limit
        assert int((node_cgroup / "memory.failcnt").read_text()) == 0
