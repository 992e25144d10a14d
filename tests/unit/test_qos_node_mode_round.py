"""The node mode in the QoS round (no API, no cgroups of pods): which rows the agent acts on, the
eviction rule per row (the oversubscription-only row also needs the node's requests above 100 %
of allocatable), the taint that follows it, and the NodeProfile ``status.mode`` it reports."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from tidal.agent.collector.cgroups import CgroupDriver, CgroupHierarchy, CgroupLayout, CgroupVersion, PodQOSClass
from tidal.agent.collector.sampler import system_usage
from tidal.agent.qos.engine import QoSEngine
from tidal.agent.qos.node_qos import NodeQoS, mode_status, node_allocatable, node_requests_percent
from tidal.agent.qos.strategy import PodState
from tidal.api import qos
from tidal.api.node_mode import node_mode
from tidal.api.qos import QoSLevel

GiB = 1 << 30
CO, OV = qos.COLOCATION_NODE_LABEL, qos.OVERSUBSCRIPTION_NODE_LABEL
VCO, VOV = "volcano.sh/colocation", "volcano.sh/oversubscription"
ALLOCATABLE = {"cpu": "4", "memory": "16Gi"}


class Sample:
    """A node at 90 % CPU (high watermark 80 %), 10 % memory."""

    node_cpu_millicores, node_memory_bytes, node_memory_total_bytes = 3600.0, 1.6 * GiB, 16 * GiB
    pods_cpu_millicores, pods_memory_bytes = 3000.0, 1 * GiB

    @property
    def system_cpu_millicores(self):
        return system_usage(self.node_cpu_millicores, self.pods_cpu_millicores)

    def level_current(self, level):
        return 0.0, 0.0

    def pod_usage(self, uid):
        return SimpleNamespace(cpu_millicores=500.0, memory_bytes=GiB // 4)


def pods(cpu_percent: float, memory_percent: float = 10) -> list[PodState]:
    """An LS pod with native requests and a BE pod with batch requests, together taking these
    shares of ALLOCATABLE (half each)."""
    cpu, memory = round(4000 * cpu_percent / 100 / 2), round(16 * GiB * memory_percent / 100 / 2)
    return [PodState("ls", PodQOSClass.BURSTABLE, QoSLevel.LS, namespace="ns", name="online",
                     node_requests=(cpu, memory)),
            PodState("be", PodQOSClass.BEST_EFFORT, QoSLevel.BE, namespace="ns", name="batch",
                     node_requests=(cpu, memory))]


def node_qos(tmp_path, labels, allocatable=ALLOCATABLE, annotations=None) -> NodeQoS:
    layout = CgroupLayout(CgroupHierarchy(CgroupVersion.V2, tmp_path, tmp_path), CgroupDriver.CGROUPFS)
    out = NodeQoS("n1", layout, QoSEngine(tmp_path / "j.json"), {}, node_cpus=4, clock=lambda: 100.0)
    out.observe_policy({"metadata": {"resourceVersion": "1"}, "spec": {
        "evictionWatermarks": {"dwellSeconds": 0, "cooldownSeconds": 0}}})
    out.observe_node({"metadata": {"labels": labels, "annotations": annotations or {}},
                      "status": {"allocatable": allocatable} if allocatable is not None else {}})
    return out


@pytest.mark.parametrize("labels, cpu_requests, memory_requests, allocatable, evicts, reason", [
    pytest.param({OV: "true"}, 80, 10, ALLOCATABLE, False,
                 "oversubscription-only node: requests cpu 80%, memory 10% of allocatable, not above 100%",
                 id="oversubscription-only-requests-80-no-eviction-no-taint"),
    pytest.param({OV: "true"}, 100, 100, ALLOCATABLE, False,
                 "oversubscription-only node: requests cpu 100%, memory 100% of allocatable, not above 100%",
                 id="oversubscription-only-requests-exactly-100-is-not-above"),
    pytest.param({OV: "true"}, 120, 10, ALLOCATABLE, True, "node requests above allocatable (cpu 120%)",
                 id="oversubscription-only-requests-120-evicts"),
    pytest.param({OV: "true"}, 50, 130, ALLOCATABLE, True, "node requests above allocatable (memory 130%)",
                 id="oversubscription-only-memory-requests-over-is-enough"),
    pytest.param({VOV: "true"}, 120, 10, ALLOCATABLE, True, "node requests above allocatable (cpu 120%)",
                 id="volcano-oversubscription-alias-is-the-same-row"),
    pytest.param({OV: "true"}, 120, 10, None, False,
                 "oversubscription-only node: requests unknown of allocatable, not above 100%",
                 id="oversubscription-only-without-allocatable-does-not-evict"),
    pytest.param({CO: "true"}, 80, 10, ALLOCATABLE, True, "node usage above the high watermark",
                 id="colocation-only-evicts-whatever-the-requests"),
    pytest.param({VCO: "true"}, 80, 10, ALLOCATABLE, True, "node usage above the high watermark",
                 id="volcano-colocation-alias-evicts"),
    pytest.param({CO: "true", OV: "true"}, 80, 10, ALLOCATABLE, True, "node usage above the high watermark",
                 id="both-evicts-whatever-the-requests"),
    pytest.param({}, 120, 10, ALLOCATABLE, False, "node mode off: Tidal does nothing", id="off-does-nothing"),
])
def test_the_eviction_rule_per_row(tmp_path, labels, cpu_requests, memory_requests, allocatable, evicts, reason):
    agent = node_qos(tmp_path, labels, allocatable)
    round_ = agent.round(Sample(), pods(cpu_requests, memory_requests))
    actions = [(d.action.value, d.pod_uid) for d in round_.decisions]
    assert actions == ([("taint", None), ("evict", "be")] if evicts else [])
    assert agent.want_taint is evicts
    assert (round_.eviction_allowed, round_.eviction_reason) == (evicts, reason)
    status = agent.mode_status()
    assert (status["evictionAllowed"], status["evictionReason"]) == (evicts, reason)
    assert status["name"] == str(node_mode(labels).mode)
    # the state machine still tracked the usage: above high, evicting (except on a node it ignores)
    assert agent.eviction.resources["cpu"].evicting is bool(labels)


def test_requests_crossing_100_percent_evict_at_once_then_stop_evicting_below_but_keep_the_taint(tmp_path):
    agent = node_qos(tmp_path, {OV: "true"})
    assert agent.round(Sample(), pods(90)).decisions == []            # usage tracked: evicting, held back
    assert [d.action.value for d in agent.round(Sample(), pods(110)).decisions] == ["taint", "evict"]
    round_ = agent.round(Sample(), pods(95))                           # the evicted pod's requests freed
    assert round_.decisions == [] and not round_.eviction_allowed
    assert agent.want_taint  # no flapping: the taint goes by its own rule (usage at or below low)


def test_a_terminating_pod_is_never_chosen_again(tmp_path):
    """An agent restarted after it evicted a pod sees that pod terminating: it is no candidate,
    so the eviction falls to no one else here and nothing is evicted twice."""
    agent = node_qos(tmp_path, {CO: "true"})
    ls, be = pods(80)
    gone = PodState(be.uid, be.qos_class, be.tidal_level, namespace=be.namespace, name=be.name,
                    node_requests=be.node_requests, terminating=True)
    assert [(d.action.value, d.pod_uid) for d in agent.round(Sample(), [ls, gone]).decisions] == [("taint", None)]
    assert [(d.action.value, d.pod_uid) for d in agent.round(Sample(), [ls, be]).decisions] == [("evict", "be")]


def test_the_mode_going_off_restores_and_untaints(tmp_path):
    agent = node_qos(tmp_path, {OV: "true"})
    agent.round(Sample(), pods(120))
    assert agent.want_taint
    agent.observe_node({"metadata": {"labels": {}}, "status": {"allocatable": ALLOCATABLE}})
    round_ = agent.round(Sample(), pods(120))
    assert not round_.enabled and not agent.want_taint and round_.decisions == []


@pytest.mark.parametrize("states, allocatable, expected", [
    pytest.param([], {"cpu": 4000.0, "memory": 100.0}, {"cpu": 0.0, "memory": 0.0}, id="no-pods"),
    pytest.param([(1000, 30), (3000, 50)], {"cpu": 4000.0, "memory": 100.0}, {"cpu": 100.0, "memory": 80.0},
                 id="every-pod-adds"),
    pytest.param([(6000, 10)], {"cpu": 4000.0}, {"cpu": 150.0}, id="a-resource-without-allocatable-is-absent"),
    pytest.param([(6000, 10)], {}, {}, id="no-allocatable"),
])
def test_node_requests_percent(states, allocatable, expected):
    pods_ = [PodState(str(i), PodQOSClass.BURSTABLE, None, node_requests=r) for i, r in enumerate(states)]
    assert node_requests_percent(pods_, allocatable) == expected


@pytest.mark.parametrize("node, expected", [
    pytest.param({"status": {"allocatable": {"cpu": "3500m", "memory": "16Gi", "pods": "110"}}},
                 {"cpu": 3500.0, "memory": 16.0 * GiB}, id="native-allocatable"),
    pytest.param({"status": {"allocatable": {"cpu": "lots", "memory": "1Gi"}}}, {"memory": 1.0 * GiB},
                 id="unparseable-is-absent"),
    pytest.param({"status": {}}, {}, id="none"),
    pytest.param(None, {}, id="no-node"),
])
def test_node_allocatable(node, expected):
    assert node_allocatable(node) == expected


@pytest.mark.parametrize("labels, annotations, present", [
    pytest.param({OV: "true"}, {}, {}, id="clean-nulls-remove-old-conflicts-and-problems"),
    pytest.param({OV: "true", VOV: "false"}, {}, {"conflicts": 1}, id="conflict"),
    pytest.param({OV: "yes"}, {}, {"problems": 1}, id="problem"),
])
def test_status_mode_carries_the_mode_and_the_eviction_verdict(labels, annotations, present):
    mode = node_mode(labels, annotations)
    status = mode_status(mode, (False, "why"))
    assert status["evictionAllowed"] is False and status["evictionReason"] == "why"
    assert {k: v for k, v in mode.to_status().items()} == {k: status[k] for k in mode.to_status()}
    for key in ("conflicts", "problems"):
        assert (status[key] is None) if key not in present else len(status[key]) == present[key]


@pytest.mark.parametrize("labels, cpu_requests", [
    pytest.param({CO: "true", VOV: "false"}, 50, id="colocation-with-a-conflict"),
    pytest.param({OV: "true"}, 150, id="oversubscription-evicting"),
    pytest.param({OV: "maybe"}, 50, id="off-with-a-problem"),
])
def test_the_status_mode_is_the_typed_node_mode_report(tmp_path, labels, cpu_requests):
    """Every key and value the agent writes reads back through NodeModeReport unchanged (the
    CRD's schema is generated from that type)."""
    from tidal.api.node_profile import NodeModeReport
    from tidal.api.schema import from_json, to_json
    agent = node_qos(tmp_path, labels)
    agent.round(Sample(), pods(cpu_requests))
    status = {k: v for k, v in agent.mode_status().items() if v is not None}
    assert to_json(from_json(NodeModeReport, status)) == status


class _InterferenceEvicts:
    """A feature standing for PSI interference: it asks to evict the BE pod every round."""

    name = "psi-stand-in"

    def enabled(self, ctx):
        return True

    def plan(self, ctx):
        from tidal.agent.qos.eviction import Action, Decision
        from tidal.agent.qos.feature import Plan
        return Plan(effects=(Decision(Action.EVICT, "interference", "cpu", "be"),))

    def undo(self, ctx):
        from tidal.agent.qos.feature import Plan
        return Plan()


@pytest.mark.parametrize("labels, cpu_requests, evicts", [
    pytest.param({OV: "true"}, 80, False, id="oversubscription-only-requests-80-holds-interference-evictions"),
    pytest.param({OV: "true"}, 120, True, id="oversubscription-only-requests-120-lets-them-through"),
    pytest.param({CO: "true"}, 80, True, id="colocation-only-lets-them-through"),
])
def test_interference_evictions_follow_the_rule_of_the_row(tmp_path, labels, cpu_requests, evicts):
    agent = node_qos(tmp_path, labels)
    agent.engine = QoSEngine(tmp_path / "j2.json", features=[_InterferenceEvicts()])
    sample = Sample()
    sample.node_cpu_millicores = 100.0  # far below the watermarks: only the feature asks
    done = agent.round(sample, pods(cpu_requests))
    assert any(d.reason == "interference" for d in done.decisions) is evicts
