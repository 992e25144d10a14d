"""tidal.api.node_profile: the typed NodeProfile status, its JSON both ways."""

from __future__ import annotations

import copy

from tidal.api.node_profile import (
    Capability,
    NodeProfileStatus,
    PolicyReport,
    Statistics,
    UsageWindow,
)

STATS = {"avg": 1, "p50": 2, "p90": 3, "p95": 4, "p99": 5, "max": 6}

#: A status as the agent writes it (tidal.agent.run.report + the master's oversell part).
STATUS = {
    "observedAt": "2025-01-02T03:04:05Z",
    "usage": [
        {"windowSeconds": 60, "samples": 59, "cpuMillicores": STATS, "memoryBytes": STATS},
        {"windowSeconds": 300, "samples": 0},
    ],
    "systemUsage": [{"windowSeconds": 60, "samples": 59, "cpuMillicores": STATS,
                     "memoryBytes": STATS}],
    "perQoS": {"HLS": {"pods": 0, "usage": []}, "LS": {"pods": 1},
               "BE": {"pods": 2, "podsAtRequest": [{"name": "b", "resources": ["cpu"]}]}},
    "predictions": {"predictor": "tidal", "onlinePeak": {"cpuMillicores": 1500}},
    "oversell": {"batch": {"cpuMillicores": 100}},
    "capabilities": [{"name": "cpuBurst", "supported": True, "reason": ""},
                     {"name": "cacheLimits", "supported": False, "reason": "resctrl not mounted"}],
    "policy": {"appliedGeneration": 3, "effective": {"overselling": {"enabled": True}},
               "problems": ["psiInterference: no PSI"]},
    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2025-01-02T03:04:05Z",
                    "reason": "Reporting", "message": "", "observedGeneration": 1}],
}


def test_a_status_round_trips_through_the_types() -> None:
    status = NodeProfileStatus.from_status(copy.deepcopy(STATUS))
    assert status.usage[0] == UsageWindow(window_seconds=60, samples=59,
                                          cpu_millicores=Statistics(**STATS),
                                          memory_bytes=Statistics(**STATS))
    assert status.policy.problems == ("psiInterference: no PSI",)
    assert status.capabilities[1] == Capability(name="cacheLimits", supported=False,
                                                reason="resctrl not mounted")
    assert status.to_status() == STATUS


def test_absent_parts_are_left_out_so_a_merge_patch_keeps_them() -> None:
    status = NodeProfileStatus(policy=PolicyReport(applied_generation=4, problems=()))
    assert status.to_status() == {"policy": {"appliedGeneration": 4, "problems": []}}


def test_reading_is_lenient() -> None:
    assert NodeProfileStatus.from_status(None) == NodeProfileStatus()
    assert NodeProfileStatus.from_status({}) == NodeProfileStatus()
    status = NodeProfileStatus.from_status({
        "observedAt": 17, "predictions": "x", "unknown": 1,
        "usage": [{"samples": 3}, {"windowSeconds": 60.0, "samples": True}],
        "capabilities": [{"name": "cpuBurst"}, "junk"],
        "policy": {"appliedGeneration": "3"},
    })
    assert status.observed_at is None and status.predictions is None
    assert status.usage == (UsageWindow(window_seconds=60),)  # an entry without its key is dropped
    assert status.capabilities == ()
    assert status.policy == PolicyReport()

