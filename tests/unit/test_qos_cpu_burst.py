"""CPU burst: the pure load scaling, the plan on v1 and v2 layouts, and pod features parsing."""
from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest
from tidal.agent.collector.cgroups import CgroupDriver, CgroupHierarchy, CgroupLayout, CgroupVersion, PodQOSClass
from tidal.agent.qos.cpu_burst import CPUBurst, burst_factor, burst_us
from tidal.agent.qos.engine import strategies_for
from tidal.agent.qos.pod_features import ContainerCPU, FeaturePodState, feature_pod_state, feature_views
from tidal.agent.qos.strategy import NodeState, PodState
from tidal.api.policy import ColocationPolicy
from tidal.api.qos import CPUBurstRequest, QoSLevel


@pytest.mark.parametrize("load, factor", [
    (0, 1.0), (59.9, 1.0), (60, 1.0), (61, 0.95), (70, 0.5), (79, 0.05), (79.9, 0.0), (80, 0.0), (100, 0.0),
])
def test_burst_shrinks_linearly_between_high_and_alert(load, factor):
    assert burst_factor(load, 60, 80) == pytest.approx(factor)


@pytest.mark.parametrize("quota, requested, factor, expected", [
    (50_000, None, 1.0, 50_000),      # default: the quota
    (50_000, 20_000, 1.0, 20_000),    # annotation asks less
    (50_000, 900_000, 1.0, 50_000),   # capped at the quota (the kernel refuses more)
    (50_000, None, 0.5, 25_000),
    (50_000, 0, 1.0, 50_000),         # 0 is the default too (Volcano's agent)
    (50_000, None, 0.0, 0),
])
def test_burst_us(quota, requested, factor, expected):
    assert burst_us(quota, requested, factor) == expected


def layout(version: CgroupVersion) -> CgroupLayout:
    root = Path("/sys/fs/cgroup")
    if version is CgroupVersion.V1:
        h = CgroupHierarchy(version, root / "cpu,cpuacct", root / "memory")
    else:
        h = CgroupHierarchy(version, root, root)
    return CgroupLayout(h, CgroupDriver.CGROUPFS)


def ls_pod(uid="u1", burst=CPUBurstRequest(True), cpu=(ContainerCPU("containerd://a", 500, 1000),
                                                        ContainerCPU("containerd://b", 0, 500)), level=QoSLevel.LS):
    return FeaturePodState(uid=uid, qos_class=PodQOSClass.BURSTABLE, tidal_level=level, cpu_burst=burst, cpu=cpu)


def state(pods, version=CgroupVersion.V1, online=0.0, caps=None):
    return NodeState(pods=tuple(pods), node_cpus=4, online_usage_millicores=online, policy=ColocationPolicy(),
                     capabilities={"cpu.cfs_burst": True} if caps is None else caps, layout=layout(version))


def files(writes):
    return {f"{w.path.relative_to('/sys/fs/cgroup')}/{w.file}": w.value for w in writes}


def test_v1_plan_sets_burst_on_containers_and_pod():
    assert files(CPUBurst().plan(state([ls_pod()]))) == {
        "cpu,cpuacct/kubepods/burstable/podu1/cpu.cfs_burst_us": "150000",
        "cpu,cpuacct/kubepods/burstable/podu1/a/cpu.cfs_burst_us": "100000",
        "cpu,cpuacct/kubepods/burstable/podu1/b/cpu.cfs_burst_us": "50000",
    }


def test_v2_plan_uses_cpu_max_burst_and_load_scales_it():
    # online 2.8 of 4 CPUs = 70 %: half the burst
    assert files(CPUBurst().plan(state([ls_pod()], CgroupVersion.V2, online=2800))) == {
        "kubepods/burstable/podu1/cpu.max.burst": "75000",
        "kubepods/burstable/podu1/a/cpu.max.burst": "50000",
        "kubepods/burstable/podu1/b/cpu.max.burst": "25000",
    }


@pytest.mark.parametrize("level", [QoSLevel.LS, QoSLevel.HLS, None])
def test_every_pod_that_asks_bursts_level_or_not(level):
    # Volcano's agent bursts any pod annotated enable-quota-burst; so does Tidal, also a pod
    # without a Tidal level (the one thing the agent does to such a pod: it asked)
    assert files(CPUBurst().plan(state([ls_pod(level=level)]))) == {
        "cpu,cpuacct/kubepods/burstable/podu1/cpu.cfs_burst_us": "150000",
        "cpu,cpuacct/kubepods/burstable/podu1/a/cpu.cfs_burst_us": "100000",
        "cpu,cpuacct/kubepods/burstable/podu1/b/cpu.cfs_burst_us": "50000",
    }


@pytest.mark.parametrize("pod, why", [
    (ls_pod(burst=None), "no annotation"),
    (ls_pod(level=None, burst=None), "no level, no annotation: left alone"),
    (ls_pod(burst=CPUBurstRequest(False, 1000)), "explicit false"),
    (ls_pod(level=QoSLevel.BE), "BE pods never burst: their quota is Tidal's batch-cpu limit"),
    (ls_pod(cpu=(ContainerCPU("containerd://a", 500, 0),)), "no CPU limit: nothing throttles it"),
    (ls_pod(cpu=()), "no started container"),
    (PodState("u1", PodQOSClass.BURSTABLE, QoSLevel.LS), "plain PodState: no feature data"),
])
def test_pods_that_get_no_burst(pod, why):
    assert CPUBurst().plan(state([pod])) == [], why


@pytest.mark.parametrize("request_, container_a, container_b, pod_total", [
    (CPUBurstRequest(True), "100000", "50000", "150000"),            # default: each quota
    (CPUBurstRequest(True, 20_000), "20000", "20000", "40000"),      # asks less than both
    (CPUBurstRequest(True, 70_000), "70000", "50000", "120000"),     # capped per container
])
def test_burst_amount_default_and_cap(request_, container_a, container_b, pod_total):
    plan = files(CPUBurst().plan(state([ls_pod(level=None, burst=request_)])))
    base = "cpu,cpuacct/kubepods/burstable/podu1"
    assert (plan[f"{base}/a/cpu.cfs_burst_us"], plan[f"{base}/b/cpu.cfs_burst_us"],
            plan[f"{base}/cpu.cfs_burst_us"]) == (container_a, container_b, pod_total)


def test_pod_cgroup_skipped_when_a_container_is_unlimited():
    pod = ls_pod(cpu=(ContainerCPU("containerd://a", 0, 1000), ContainerCPU("containerd://b", 0, 0)))
    assert list(files(CPUBurst().plan(state([pod])))) == ["cpu,cpuacct/kubepods/burstable/podu1/a/cpu.cfs_burst_us"]


def test_no_kernel_support_no_plan():
    assert CPUBurst().plan(state([ls_pod()], caps={"cpu.cfs_burst": False})) == []


def test_invalid_watermarks_are_refused():
    with pytest.raises(ValueError, match="loadHighPercent 80, loadAlertPercent 60"):
        CPUBurst(80, 60)


def test_policy_switches_it():
    assert "cpu-burst" in [s.name for s in strategies_for(ColocationPolicy())]
    off = ColocationPolicy.from_spec({"features": {"cpuBurst": {"enabled": False}}})
    assert "cpu-burst" not in [s.name for s in strategies_for(off)]
    custom = ColocationPolicy.from_spec({"features": {"cpuBurst": {"loadHighPercent": 10, "loadAlertPercent": 20}}})
    (burst,) = [s for s in strategies_for(custom) if s.name == "cpu-burst"]
    assert (burst.high, burst.alert) == (10, 20)


def pod_object(annotations, limits=None, status=True):
    return {
        "metadata": {"uid": "u1", "namespace": "ns", "name": "web", "annotations": annotations},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {
            "requests": {"cpu": "250m", "memory": "64Mi"}, "limits": limits or {"cpu": "1", "memory": "64Mi"}}}]},
        "status": {"phase": "Running", "qosClass": "Burstable", "containerStatuses": [
            {"name": "c", "containerID": "containerd://abc"}] if status else []},
    }


@pytest.mark.parametrize("annotations, burst", [
    ({"colocation.tidal.io/qos-level": "LS", "colocation.tidal.io/cpu-burst": "true"}, CPUBurstRequest(True)),
    ({"colocation.tidal.io/qos-level": "LS", "volcano.sh/quota-burst-time": "30000"}, CPUBurstRequest(True, 30000)),
    ({"colocation.tidal.io/qos-level": "LS", "volcano.sh/enable-quota-burst": "true",
      "colocation.tidal.io/cpu-burst-quota-us": "5000"}, CPUBurstRequest(True, 5000)),
    ({"colocation.tidal.io/qos-level": "LS", "colocation.tidal.io/cpu-burst": "yes"}, None),  # invalid: logged, off
    ({"colocation.tidal.io/qos-level": "LS"}, None),
])
def test_feature_pod_state_from_annotations(annotations, burst):
    _, pod = feature_views(pod_object(annotations))
    assert isinstance(pod, FeaturePodState) and isinstance(pod, PodState)
    assert pod.cpu_burst == burst
    assert pod.cpu == (ContainerCPU("containerd://abc", 250, 1000),)
    assert pod.tidal_level is QoSLevel.LS and pod.namespace == "ns"


@pytest.mark.parametrize("annotations, planned", [
    ({"volcano.sh/enable-quota-burst": "true"}, "100000"),
    ({"volcano.sh/enable-quota-burst": "true", "volcano.sh/quota-burst-time": "0"}, "100000"),
    ({"volcano.sh/enable-quota-burst": "True", "volcano.sh/quota-burst-time": "30000"}, "30000"),
    ({"volcano.sh/quota-burst-time": "30000"}, "30000"),       # rubik: the time alone enables it
    ({"colocation.tidal.io/cpu-burst": "true"}, "100000"),
    ({"volcano.sh/enable-quota-burst": "false"}, None),
    ({"volcano.sh/quota-burst-time": "0"}, None),
    ({}, None),
])
def test_pod_without_a_level_bursts_from_the_reference_annotations(annotations, planned):
    # the pod watcher keeps pods without a Tidal level; their burst comes from the annotations alone
    _, pod = feature_views(pod_object(annotations))
    assert pod.tidal_level is None
    plan = files(CPUBurst().plan(state([pod])))
    container = "cpu,cpuacct/kubepods/burstable/podu1/abc/cpu.cfs_burst_us"
    assert plan.get(container) == planned
    assert plan.get("cpu,cpuacct/kubepods/burstable/podu1/cpu.cfs_burst_us") == planned


def test_feature_pod_state_skips_unstarted_containers_and_bad_quantities():
    obj = pod_object({}, limits={"cpu": "lots"}, status=False)
    base = PodState("u1", PodQOSClass.BURSTABLE, None)
    assert feature_pod_state(obj, base).cpu == ()
    obj = pod_object({}, limits={"cpu": "lots"})
    assert feature_pod_state(obj, base).cpu == (ContainerCPU("containerd://abc", 250, 0),)


@pytest.mark.parametrize("spec_limit, applied, expected", [
    ("1", None, 1000),       # no resize: the spec's limit
    ("2", "1", 1000),        # an increase not applied yet (deferred, infeasible): the quota in force
    ("500m", "1", 500),      # a decrease: the new limit, so the burst never blocks the lower quota
    ("1", "1", 1000),
])
def test_the_burst_fits_the_limit_in_force_during_an_in_place_resize(spec_limit, applied, expected):
    """The kernel refuses a burst above the quota (and a quota lowered below the burst): the
    limit the burst is capped at is the smaller of the spec's and the kubelet's (status)."""
    obj = pod_object({}, limits={"cpu": spec_limit, "memory": "64Mi"})
    if applied:
        obj["status"]["containerStatuses"][0]["resources"] = {"limits": {"cpu": applied, "memory": "64Mi"}}
    base = PodState("u1", PodQOSClass.BURSTABLE, None)
    assert feature_pod_state(obj, base).cpu == (ContainerCPU("containerd://abc", 250, expected, "c"),)
