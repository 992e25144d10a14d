"""The ColocationPolicy rollout status from NodeProfiles (pure)."""
from datetime import UTC, datetime, timedelta

import pytest
from tidal.api import qos
from tidal.api.node_mode import VOLCANO_COLOCATION_LABEL, VOLCANO_LABEL_WRITTEN_ANNOTATION
from tidal.kube import Watcher
from tidal.manager.policy.reconciler import active_node
from tidal.manager.policy.rollout import NodeReport, rollout_status

NOW = datetime(2026, 11, 22, 6, 0, tzinfo=UTC)


def report(generation, problems=(), age=5):
    return NodeReport(generation, tuple(problems), NOW - timedelta(seconds=age))


@pytest.mark.parametrize("reports, applied, reasons, applied_status, problems_status", [
    ({"a": report(3), "b": report(3)}, 2, {"a": "", "b": ""}, "True", "False"),
    ({"a": report(3), "b": report(2)}, 1, {"a": "", "b": "tidal-agent runs generation 2"}, "False", "False"),
    ({"a": report(3)}, 1, {"a": "", "b": "no NodeProfile: tidal-agent is not running on this node"}, "False", "False"),
    ({"a": report(3), "b": report(3, age=600)}, 1, {"a": "", "b": "tidal-agent last reported 600s ago"}, "False", "False"),
    ({"a": report(None), "b": report(3, ["spec.features.cacheLimits: enabled but not supported", "x"])}, 1,
     {"a": "tidal-agent has not reported a policy generation yet",
      "b": "applied with problems: spec.features.cacheLimits: enabled but not supported (+1 more)"}, "False", "True"),
])
def test_rollout(reports, applied, reasons, applied_status, problems_status):
    status = rollout_status(3, ["b", "a"], reports, NOW)
    assert (status["observedGeneration"], status["totalNodes"], status["appliedNodes"]) == (3, 2, applied)
    assert {n["name"]: n["reason"] for n in status["nodes"]} == reasons
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Applied"]["status"] == applied_status
    assert conditions["NodeProblems"]["status"] == problems_status


def test_condition_transition_time_holds_while_the_status_holds():
    first = rollout_status(3, ["a"], {"a": report(2)}, NOW)
    later = rollout_status(3, ["a"], {"a": report(2)}, NOW + timedelta(minutes=1), first)
    assert later["conditions"] == first["conditions"]
    fresh = NodeReport(3, (), NOW + timedelta(minutes=2))
    flipped = rollout_status(3, ["a"], {"a": fresh}, NOW + timedelta(minutes=2), later)
    applied = next(c for c in flipped["conditions"] if c["type"] == "Applied")
    assert applied["status"] == "True" and applied["lastTransitionTime"] == "2026-11-22T06:02:00Z"
    assert applied["message"] == "1/1 Tidal nodes run generation 3"


def test_node_report_reads_the_profile_and_tolerates_missing_parts():
    r = NodeReport.from_profile({"status": {"observedAt": "2026-11-22T05:59:00Z",
                                            "policy": {"appliedGeneration": 7, "problems": ["p"]}}})
    assert r == NodeReport(7, ("p",), datetime(2026, 11, 22, 5, 59, tzinfo=UTC))
    assert NodeReport.from_profile({}) == NodeReport(None)


def test_the_status_reads_back_through_its_type():
    from tidal.api.policy_crd import PolicyStatus

    status = rollout_status(3, ["a", "b"], {"a": report(3), "b": report(None)}, NOW)
    typed = PolicyStatus.from_status(status)
    assert typed.nodes[1].applied_generation is None and typed.conditions[0].type == "Applied"
    assert typed.to_status() == status


CO, OV, VOV = qos.COLOCATION_NODE_LABEL, qos.OVERSUBSCRIPTION_NODE_LABEL, qos.VOLCANO_OVERSUBSCRIPTION_LABEL


def a_node(name, labels=None, annotations=None):
    return {"metadata": {"name": name, "uid": "uid-" + name, "labels": labels or {}, "annotations": annotations or {}}}


@pytest.mark.parametrize("labels, annotations, kept", [
    ({}, {}, False),
    ({CO: "true"}, {}, True),                         # colocation
    ({OV: "true"}, {}, True),                         # oversubscription only: no colocation label
    ({CO: "true", OV: "true"}, {}, True),
    ({VOLCANO_COLOCATION_LABEL: "true"}, {}, True),   # the aliases count
    ({VOV: "true"}, {}, True),
    ({VOV: "true"}, {VOLCANO_LABEL_WRITTEN_ANNOTATION: "true"}, False),  # the master's own write does not
    ({CO: "false", VOLCANO_COLOCATION_LABEL: "true"}, {}, False),       # Tidal's label wins
    ({CO: "yes"}, {}, False),                         # not understood: absent
])
def test_the_rollout_covers_every_node_whose_mode_is_active(labels, annotations, kept):
    assert active_node(a_node("n1", labels, annotations)) == ("n1" if kept else None)


def test_the_node_watch_keeps_active_nodes_and_drops_a_node_switched_off():
    nodes = Watcher(None, "/api/v1/nodes", "nodes", transform=active_node)
    nodes.apply("ADDED", a_node("co", {CO: "true"}))
    nodes.apply("ADDED", a_node("ov", {OV: "true"}))
    nodes.apply("ADDED", a_node("off"))
    assert sorted(nodes.objects.values()) == ["co", "ov"]
    status = rollout_status(3, nodes.objects.values(), {"co": report(3)}, NOW)
    assert {n["name"]: n["reason"] for n in status["nodes"]} == {
        "co": "", "ov": "no NodeProfile: tidal-agent is not running on this node"}
    nodes.apply("MODIFIED", a_node("ov", {OV: "false"}))
    nodes.apply("MODIFIED", a_node("off", {VOV: "true"}))
    assert sorted(nodes.objects.values()) == ["co", "off"]
