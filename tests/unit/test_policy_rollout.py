"""The ColocationPolicy rollout status from NodeProfiles (pure)."""
from datetime import UTC, datetime, timedelta

import pytest
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
    assert applied["message"] == "1/1 colocation nodes run generation 3"


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
