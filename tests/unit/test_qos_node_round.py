"""The node QoS round's pure helpers and its input handling (no API, no cgroups written)."""
import pytest
from tidal.api import qos
from tidal.agent.qos.capabilities import Capability
from tidal.agent.qos.eviction import WatermarkEviction
from tidal.agent.qos.node_actions import has_offline_taint, with_offline_taint
from tidal.agent.qos.node_qos import NodeQoS
from tidal.api.policy import ColocationPolicy

TAINT = {"key": qos.OFFLINE_EVICTING_TAINT_KEY, "effect": "NoSchedule"}
OTHER = {"key": "dedicated", "value": "gpu", "effect": "NoExecute"}


@pytest.mark.parametrize("taints, present, expected", [
    ([], True, [TAINT]),
    (None, False, []),
    ([OTHER], True, [OTHER, TAINT]),
    ([OTHER, TAINT], True, [OTHER, TAINT]),
    ([TAINT, OTHER], False, [OTHER]),
])
def test_our_taint_is_added_or_removed_and_every_other_taint_kept(taints, present, expected):
    assert with_offline_taint(taints, present) == expected
    assert has_offline_taint({"spec": {"taints": expected}}) is present


def _engine(tmp_path):
    from tidal.agent.collector.cgroups import CgroupDriver, CgroupHierarchy, CgroupLayout, CgroupVersion
    from tidal.agent.qos.engine import QoSEngine
    layout = CgroupLayout(CgroupHierarchy(CgroupVersion.V2, tmp_path, tmp_path), CgroupDriver.CGROUPFS)
    return NodeQoS("n1", layout, QoSEngine(tmp_path / "j.json"), {})


def _policy_obj(spec, rv):
    return {"metadata": {"name": "default", "resourceVersion": rv}, "spec": spec}


def test_policy_changes_apply_and_an_invalid_policy_keeps_the_one_in_force(tmp_path):
    node_qos = _engine(tmp_path)
    node_qos.observe_policy(None)
    assert node_qos.policy == ColocationPolicy()
    node_qos.observe_policy(_policy_obj({"beIsolation": {"cpuSuppression": {"thresholdPercent": 40}}}, "2"))
    assert node_qos.policy.be_isolation.cpu_suppression.threshold_percent == 40
    node_qos.observe_policy(_policy_obj({"beIsolation": {"cpuSuppression": {"thresholdPercent": 400}}}, "3"))
    assert node_qos.policy.be_isolation.cpu_suppression.threshold_percent == 40


def test_the_node_labels_switch_the_engine_and_an_unknown_node_keeps_the_last_known(tmp_path):
    node_qos = _engine(tmp_path)
    assert not node_qos.enabled
    on = {"metadata": {"labels": {qos.COLOCATION_NODE_LABEL: "true"}}, "spec": {"taints": [TAINT]}}
    node_qos.observe_node(on)
    assert node_qos.enabled and node_qos.node_tainted
    # restart-safe: a taint found at start is kept until usage is at or below the low marks
    assert node_qos.eviction.tainted and node_qos.want_taint
    node_qos.observe_node(None)  # API server unreachable
    assert node_qos.enabled
    node_qos.observe_node({"metadata": {"labels": {}}, "spec": {}})
    assert not node_qos.enabled and not node_qos.want_taint


def test_node_annotations_override_the_watermarks_and_bad_ones_change_nothing(tmp_path):
    node_qos = _engine(tmp_path)
    node_qos.observe_node({"metadata": {"annotations": {"colocation.tidal.io/eviction-cpu-high-percent": "90"}}})
    node_qos._refresh_watermarks()
    assert node_qos.eviction.config.cpu.high_percent == 90
    node_qos.observe_node({"metadata": {"annotations": {"colocation.tidal.io/eviction-cpu-high-percent": "x"}}})
    node_qos._refresh_watermarks()
    assert node_qos.eviction.config == WatermarkEviction().config


def test_the_policy_status_names_generation_effective_spec_and_what_the_node_cannot_do(tmp_path):
    from tidal.agent.qos.capabilities import Capability
    node_qos = _engine(tmp_path)
    node_qos.observe_policy({"metadata": {"resourceVersion": "7", "generation": 4},
                             "spec": {"features": {"cacheLimits": {"enabled": True}, "numaAffinity": {"enabled": True}}}})
    node_qos.observe_node({"metadata": {"annotations": {"colocation.tidal.io/eviction-cpu-high-percent": "90",
                                                        "colocation.tidal.io/eviction-dwell-seconds": "x"}}})
    caps = [Capability("resctrl.l3", False, "resctrl not mounted"), Capability("resctrl.mba", False, "resctrl not mounted"),
            Capability("numa", True, "2 NUMA nodes")]
    status = node_qos.policy_status(caps)
    assert status["appliedGeneration"] == 4
    assert status["effective"]["evictionWatermarks"]["cpu"]["highPercent"] == 80  # bad overrides: none applied
    assert status["problems"] == [
        "node annotation colocation.tidal.io/eviction-dwell-seconds='x': must be an integer in ASCII digits, e.g. 80",
        "spec.features.cacheLimits: enabled but not supported on this node "
        "(resctrl.l3: resctrl not mounted; resctrl.mba: resctrl not mounted)"]
    node_qos.observe_node({"metadata": {"annotations": {"colocation.tidal.io/eviction-cpu-high-percent": "90"}}})
    status = node_qos.policy_status(caps)
    assert status["effective"]["evictionWatermarks"]["cpu"]["highPercent"] == 90
    # an invalid policy object keeps the one in force, and says so
    node_qos.observe_policy({"metadata": {"resourceVersion": "8", "generation": 5},
                             "spec": {"evictionWatermarks": {"cpu": {"highPercent": 10, "lowPercent": 20}}}})
    status = node_qos.policy_status(caps)
    assert status["appliedGeneration"] == 4
    assert status["problems"][0].startswith("ColocationPolicy generation 5 not applied: invalid ColocationPolicy")


def _caps(**supported):
    from tidal.agent.qos.capabilities import Capability
    return [Capability(name.replace("_", "."), ok, "yes" if ok else f"no {name}") for name, ok in supported.items()]


@pytest.mark.parametrize("feature, caps, problem", [
    ("cacheLimits", _caps(resctrl_l3=True, resctrl_mba=False), None),  # L3 alone is enough
    ("cacheLimits", _caps(resctrl_l3=False, resctrl_mba=True), None),  # so is MBA alone
    ("cacheLimits", _caps(resctrl_l3=False, resctrl_mba=False),
     "spec.features.cacheLimits: enabled but not supported on this node (resctrl.l3: no resctrl_l3; "
     "resctrl.mba: no resctrl_mba)"),
    ("egressBandwidth", _caps(tc=False),
     "spec.features.egressBandwidth: enabled but not supported on this node (tc: no tc)"),
    ("egressBandwidth", _caps(tc=True), None),
    ("blockIO", [Capability("blkio.throttle", False, "no io.max under /sys/fs/cgroup")],
     "spec.features.blockIO: enabled but not supported on this node (blkio.throttle: no io.max under /sys/fs/cgroup)"),
    ("blockIO", [Capability("blkio.throttle", True, "/sys/fs/cgroup/blkio")], None),
    ("psiInterference", _caps(psi=False), "spec.features.psiInterference: enabled but not supported on this node (psi: no psi)"),
    ("numaAffinity", [], None),  # not probed (an older agent): nothing claimed either way
])
def test_an_enabled_feature_is_a_problem_only_when_no_capability_it_can_use_is_supported(feature, caps, problem):
    from tidal.agent.qos.policy_status import unsupported_features
    assert unsupported_features({"features": {feature: {"enabled": True}}}, caps) == ([problem] if problem else [])
    assert unsupported_features({"features": {feature: {"enabled": False}}}, caps) == []


def _usage(cpu, memory):
    from tidal.agent.collector.sampler import PodInfo, PodUsage
    pod = PodInfo("u1", "ns", "job", "BestEffort", qos.QoSLevel.BE, cpu_request_millicores=100,
                  memory_request_bytes=32 << 20)
    return PodUsage(pod, cpu, memory)


@pytest.mark.parametrize("measured, expected", [
    (None, {}),                                                     # not read by the sampler yet
    (_usage(None, None), {"cpu": 100.0, "memory": float(32 << 20)}),  # read once: at its request
    (_usage(250.0, None), {"cpu": 250.0, "memory": float(32 << 20)}),
    (_usage(0.0, 1024), {"cpu": 0.0, "memory": 1024.0}),            # measured idle stays idle
])
def test_a_candidate_not_measured_yet_counts_at_its_request(measured, expected):
    from tidal.agent.qos.node_qos import candidate_usage
    assert candidate_usage(measured) == expected


def test_a_spinning_pod_started_a_round_ago_is_chosen_before_an_idle_one():
    """The victim choice sees a BE pod the sampler has read once (no CPU rate yet) at its request,
    so an idle BE pod of the same priority measured at 0 is not evicted in its place."""
    from dataclasses import replace
    from tidal.agent.qos.eviction import Action, Candidate
    from tidal.agent.qos.node_qos import candidate_usage
    from tidal.api.policy import EvictionWatermarks
    idle = Candidate("a-idle", True, -100, {"cpu": 0.0, "memory": 1.0}, "ns", "transcode")
    new = Candidate("z-new", True, -100, candidate_usage(_usage(None, None)), "ns", "victim")
    eviction = WatermarkEviction(replace(EvictionWatermarks(), dwell_seconds=0))
    decisions = eviction.step(0.0, {"cpu": 95.0, "memory": 0.0}, [idle, new])
    assert [d.pod_uid for d in decisions if d.action is Action.EVICT] == ["z-new"]
