"""CPU burst on this machine's real cgroups: a bursty process in a quota-limited LS container is
throttled less once the engine has set ``cpu.cfs_burst_us`` (read from the kernel's cpu.stat);
a pod without a Tidal level asking with Volcano's annotations gets the kernel's burst file set."""
from __future__ import annotations

import secrets
import time

import pytest
from tidal.agent.collector.cgroups import CgroupVersion, PodQOSClass
from tidal.agent.qos.capabilities import probe, supported_map
from tidal.agent.qos.engine import QoSEngine
from tidal.agent.qos.pod_features import ContainerCPU, FeaturePodState, feature_views
from tidal.agent.qos.strategy import NodeState
from tidal.api.policy import ColocationPolicy
from tidal.api.qos import CPUBurstRequest, QoSLevel
from tidal_dev.testing.bursty import BurstyServer, ThrottleMeter
from tidal_dev.testing.local_kubelet import LocalKubelet

LIMIT_MILLICORES = 100  # quota 10 ms per 100 ms period
BURST_MS = 18           # each burst needs more than one period's quota
BURSTS = 12


def run_bursts(server: BurstyServer, meter: ThrottleMeter) -> dict[str, int]:
    meter.start()
    for _ in range(BURSTS):
        time.sleep(0.25)  # idle: the unused quota is banked (up to the burst)
        server.request([BURST_MS])
    return meter.counts()


def test_burst_reduces_throttling_of_a_bursty_ls_container(hierarchy, real, tmp_path):
    if hierarchy.version is not CgroupVersion.V1:
        pytest.skip("this machine test builds the v1 tree (v2 plans: test_qos_cpu_burst.py)")
    caps = supported_map(probe())
    if not caps.get("cpu.cfs_burst"):
        pytest.skip("kernel without CFS burst")
    kubelet = LocalKubelet(real)
    uid, cid = f"{secrets.token_hex(4)}-burst", f"containerd://{secrets.token_hex(32)}"
    dirs = kubelet.create_pod(uid, PodQOSClass.BURSTABLE, [cid])[cid]
    pod_cpu = kubelet.cpu_root / kubelet.layout.pod_relpath(uid, PodQOSClass.BURSTABLE)
    container_cpu = kubelet.cpu_root / kubelet.layout.container_relpath(uid, PodQOSClass.BURSTABLE, cid)
    for d in (pod_cpu, container_cpu):  # what the kubelet writes for a 200m CPU limit
        (d / "cpu.cfs_quota_us").write_text(str(LIMIT_MILLICORES * 100))

    pod = FeaturePodState(uid=uid, qos_class=PodQOSClass.BURSTABLE, tidal_level=QoSLevel.LS,
                          namespace="ns", name="web", cpu_burst=CPUBurstRequest(True),
                          cpu=(ContainerCPU(cid, 100, LIMIT_MILLICORES),))
    engine = QoSEngine(tmp_path / "journal.json")

    def reconcile(policy: ColocationPolicy):
        state = NodeState(pods=(pod,), node_cpus=2, online_usage_millicores=0, policy=policy,
                          capabilities=caps, layout=kubelet.layout, cpu_controller_root=kubelet.cpu_root)
        result, _ = engine.reconcile(state, enabled=True)
        assert result.errors == [] and result.restore_problems == []

    off = ColocationPolicy.from_spec({"features": {"cpuBurst": {"enabled": False}}})
    meter = ThrottleMeter((pod_cpu, container_cpu))  # the kernel throttles the level that runs out first
    with BurstyServer(dirs) as server:
        reconcile(off)
        assert (container_cpu / "cpu.cfs_burst_us").read_text().strip() == "0"
        without = run_bursts(server, meter)

        reconcile(ColocationPolicy())
        assert (container_cpu / "cpu.cfs_burst_us").read_text().strip() == "10000"
        assert (pod_cpu / "cpu.cfs_burst_us").read_text().strip() == "10000"
        with_burst = run_bursts(server, meter)

        reconcile(off)  # switched off: the engine restores the original
        assert (container_cpu / "cpu.cfs_burst_us").read_text().strip() == "0"
        assert (pod_cpu / "cpu.cfs_burst_us").read_text().strip() == "0"
    print(f"\nwithout burst {without}, with burst {with_burst}")
    assert without["nr_throttled"] >= 3, without  # the control: a 10 ms quota throttles 18 ms bursts
    assert with_burst["nr_bursts"] >= BURSTS // 2, with_burst
    assert with_burst["nr_throttled"] <= without["nr_throttled"] // 2, (without, with_burst)


def test_a_pod_without_a_level_bursts_from_volcano_annotations_on_real_cgroups(hierarchy, real, tmp_path):
    """The pod object goes through the agent's own pod views (no Tidal level, Volcano's keys) to
    the engine, which writes the kernel's burst file; dropping the annotation puts it back."""
    caps = supported_map(probe())
    if not caps.get("cpu.cfs_burst"):
        pytest.skip("kernel without CFS burst")
    kubelet = LocalKubelet(real)
    uid, cid = f"{secrets.token_hex(4)}-noqos", f"containerd://{secrets.token_hex(32)}"
    kubelet.create_pod(uid, PodQOSClass.BURSTABLE, [cid])
    pod_cpu = kubelet.cpu_root / kubelet.layout.pod_relpath(uid, PodQOSClass.BURSTABLE)
    container_cpu = kubelet.cpu_root / kubelet.layout.container_relpath(uid, PodQOSClass.BURSTABLE, cid)
    v1 = hierarchy.version is CgroupVersion.V1
    burst_file = "cpu.cfs_burst_us" if v1 else "cpu.max.burst"
    for d in (pod_cpu, container_cpu):  # a 200m CPU limit, as the kubelet writes it
        if v1:
            (d / "cpu.cfs_quota_us").write_text("20000")
        else:
            (d / "cpu.max").write_text("20000 100000")

    def pod(annotations):
        obj = {"metadata": {"uid": uid, "namespace": "ns", "name": "web", "annotations": annotations},
               "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "200m"}}}]},
               "status": {"phase": "Running", "qosClass": "Burstable",
                          "containerStatuses": [{"name": "c", "containerID": cid}]}}
        _, state = feature_views(obj)
        assert state.tidal_level is None
        return state

    engine = QoSEngine(tmp_path / "journal.json")

    def reconcile(*pods):
        state = NodeState(pods=pods, node_cpus=2, online_usage_millicores=0, policy=ColocationPolicy(),
                          capabilities=caps, layout=kubelet.layout, cpu_controller_root=kubelet.cpu_root)
        result, _ = engine.reconcile(state, enabled=True)
        assert result.errors == [] and result.restore_problems == []

    def burst():
        return (container_cpu / burst_file).read_text().strip(), (pod_cpu / burst_file).read_text().strip()

    assert burst() == ("0", "0")
    reconcile(pod({"volcano.sh/enable-quota-burst": "true"}))  # default: the quota
    assert burst() == ("20000", "20000")
    reconcile(pod({"volcano.sh/enable-quota-burst": "true", "volcano.sh/quota-burst-time": "5000"}))
    assert burst() == ("5000", "5000")
    reconcile(pod({}))  # annotation removed: left alone again, the original put back
    assert burst() == ("0", "0")
