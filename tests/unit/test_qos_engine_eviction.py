"""Watermark eviction state machine, driven by a fake clock (table-driven)."""

from __future__ import annotations

import pytest
from tidal.agent.qos.eviction import Action, Candidate, WatermarkEviction, watermark_usage_percent
from tidal.api.policy import EvictionWatermarks, Watermark

CONFIG = EvictionWatermarks(
    cpu=Watermark(high_percent=80, low_percent=30),
    memory=Watermark(high_percent=60, low_percent=30),
    dwell_seconds=10,
    cooldown_seconds=30,
)

PODS = (
    Candidate("online", is_be=False, priority=-100, usage={"cpu": 9000, "memory": 9e9}, name="online"),
    Candidate("be-hi-prio-big", is_be=True, priority=10, usage={"cpu": 4000, "memory": 4e9}),
    Candidate("be-lo-small", is_be=True, priority=0, usage={"cpu": 100, "memory": 1e9}),
    Candidate("be-lo-big", is_be=True, priority=0, usage={"cpu": 2000, "memory": 2e8}),
)


def run(steps, pods=PODS, config=CONFIG):
    """steps: (time, cpu %, memory %). Returns [(time, action, pod uid, resource)]."""
    machine = WatermarkEviction(config)
    out = []
    for now, cpu, memory in steps:
        usage = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
        for d in machine.step(now, usage, pods):
            out.append((now, d.action.value, d.pod_uid, d.resource))
    return out


@pytest.mark.parametrize(
    "name, steps, expected",
    [
        ("below high: nothing", [(0, 79, 59), (100, 80, 60)], []),
        ("spike shorter than dwell is ignored", [(0, 95, 10), (5, 95, 10), (9, 50, 10), (15, 95, 10), (24, 95, 10)], []),
        (
            "above high for the dwell: taint, then evict lowest priority, largest cpu first",
            [(0, 90, 10), (5, 90, 10), (10, 90, 10)],
            [(10, "taint", None, "cpu"), (10, "evict", "be-lo-big", "cpu")],
        ),
        (
            "memory picks the largest memory user among the lowest priority",
            [(0, 10, 70), (10, 10, 70)],
            [(10, "taint", None, "memory"), (10, "evict", "be-lo-small", "memory")],
        ),
        (
            "one at a time with cooldown, down to below low, then untaint",
            [(0, 90, 10), (10, 90, 10), (20, 70, 10), (40, 50, 10), (45, 30, 10), (80, 30, 10)],
            [
                (10, "taint", None, "cpu"), (10, "evict", "be-lo-big", "cpu"),
                (40, "evict", "be-lo-small", "cpu"),
                (45, "untaint", None, None),
            ],
        ),
        (
            "no flapping between low and high: stays tainted, no new trigger after untaint",
            [(0, 90, 10), (10, 90, 10), (12, 29, 10), (13, 79, 10), (50, 79, 10), (100, 81, 10), (105, 79, 10)],
            [(10, "taint", None, "cpu"), (10, "evict", "be-lo-big", "cpu"), (12, "untaint", None, None)],
        ),
        (
            "untaint waits for every resource at or below low",
            [(0, 90, 50), (10, 90, 50), (11, 20, 50), (12, 20, 30)],
            [(10, "taint", None, "cpu"), (10, "evict", "be-lo-big", "cpu"), (12, "untaint", None, None)],
        ),
        (
            "missing sample keeps state",
            [(0, 90, 10), (10, 90, None), (11, None, None)],
            [(10, "taint", None, "cpu"), (10, "evict", "be-lo-big", "cpu")],
        ),
    ],
)
def test_watermark_eviction(name, steps, expected):
    assert run(steps) == expected


def run_gated(steps, pods=PODS, config=CONFIG):
    """steps: (time, cpu %, allowed). Returns ([(time, action, pod uid)], tainted at the end)."""
    machine = WatermarkEviction(config)
    out = []
    for now, cpu, allowed in steps:
        for d in machine.step(now, {"cpu": cpu, "memory": 10}, pods, allowed=allowed):
            out.append((now, d.action.value, d.pod_uid))
    return out, machine.tainted


@pytest.mark.parametrize("steps, expected, tainted", [
    pytest.param([(0, 90, False), (10, 90, False), (60, 90, False)], [], False,
                 id="not-allowed-above-high-past-the-dwell-no-taint-no-eviction"),
    pytest.param([(0, 90, False), (10, 90, False), (20, 90, True)],
                 [(20, "taint", None), (20, "evict", "be-lo-big")], True,
                 id="the-dwell-counted-while-not-allowed-acts-at-once-when-allowed"),
    pytest.param([(0, 90, False), (5, 90, True), (10, 90, True)],
                 [(10, "taint", None), (10, "evict", "be-lo-big")], True,
                 id="allowed-before-the-dwell-ends-waits-for-it"),
    pytest.param([(0, 90, True), (10, 90, True), (40, 90, False), (70, 90, False)],
                 [(10, "taint", None), (10, "evict", "be-lo-big")], True,
                 id="no-longer-allowed-stops-evictions-the-taint-stays-while-usage-is-above-low"),
    pytest.param([(0, 90, True), (10, 90, True), (40, 90, False), (50, 25, False)],
                 [(10, "taint", None), (10, "evict", "be-lo-big"), (50, "untaint", None)], False,
                 id="an-existing-taint-goes-by-its-own-rule-at-or-below-low"),
    pytest.param([(0, 90, False), (10, 25, False), (20, 90, True), (25, 90, True)], [], False,
                 id="dropping-below-high-resets-the-dwell-whether-allowed-or-not"),
])
def test_eviction_not_allowed_tracks_usage_but_neither_taints_nor_evicts(steps, expected, tainted):
    assert run_gated(steps) == (expected, tainted)


def test_never_evicts_online_pods_and_no_repeat_of_the_same_victim():
    pods = (PODS[0], PODS[2])
    out = run([(0, 90, 10), (10, 90, 10), (40, 90, 10), (70, 90, 10)], pods=pods)
    assert out == [(10, "taint", None, "cpu"), (10, "evict", "be-lo-small", "cpu")]


def test_evicted_pod_forgotten_once_gone_and_zero_dwell():
    config = EvictionWatermarks(dwell_seconds=0, cooldown_seconds=0)
    machine = WatermarkEviction(config)
    d = machine.step(0, {"cpu": 99, "memory": 0}, PODS)
    assert [x.action for x in d] == [Action.TAINT, Action.EVICT]
    assert d[1].pod_uid == "be-lo-big" and d[1].usage_percent == 99 and d[1].high_percent == 80
    assert "be-lo-big" in d[1].reason and "99.0%" in d[1].reason
    remaining = [p for p in PODS if p.uid != "be-lo-big"]
    assert [x.pod_uid for x in machine.step(1, {"cpu": 99}, remaining)] == ["be-lo-small"]
    assert machine.evicted == {"be-lo-small"}


def test_disabled_untaints_and_does_nothing():
    machine = WatermarkEviction(CONFIG)
    machine.step(0, {"cpu": 90, "memory": 10}, PODS)
    machine.step(10, {"cpu": 90, "memory": 10}, PODS)
    machine.config = EvictionWatermarks(enabled=False)
    assert [d.action for d in machine.step(11, {"cpu": 99, "memory": 99}, PODS)] == [Action.UNTAINT]
    assert machine.step(100, {"cpu": 99, "memory": 99}, PODS) == []


CAPACITY = {"cpu": 8000, "memory": 100}  # 8 cores; memory in units of 1 % for readability


@pytest.mark.parametrize(
    ("node", "pods", "capacity", "include", "expected"),
    [
        # includeSystemUsage true (default): node usage, system daemons included
        ({"cpu": 6800, "memory": 70}, {"cpu": 4000, "memory": 50}, CAPACITY, True, {"cpu": 85.0, "memory": 70.0}),
        # false: only the pods' usage — the same node is below the 80 % CPU / 60 % memory marks
        ({"cpu": 6800, "memory": 70}, {"cpu": 4000, "memory": 50}, CAPACITY, False, {"cpu": 50.0, "memory": 50.0}),
        # pods' sum above the node's (read ms apart): at most the node's usage
        ({"cpu": 4000, "memory": 40}, {"cpu": 4400, "memory": 41}, CAPACITY, False, {"cpu": 50.0, "memory": 40.0}),
        # no node CPU sample yet (first step): CPU absent either way, the machine keeps its state
        ({"cpu": None, "memory": 40}, {"cpu": 800, "memory": 20}, CAPACITY, True, {"memory": 40.0}),
        ({"cpu": None, "memory": 40}, {"cpu": 800, "memory": 20}, CAPACITY, False, {"memory": 20.0}),
        # no pods' sum: absent without system usage, irrelevant with it
        ({"cpu": 800, "memory": 40}, {}, CAPACITY, False, {}),
        ({"cpu": 800, "memory": 40}, {}, CAPACITY, True, {"cpu": 10.0, "memory": 40.0}),
        # unknown or zero capacity: absent
        ({"cpu": 800, "memory": 40}, {"cpu": 0, "memory": 0}, {"cpu": 0, "memory": None}, True, {}),
    ],
)
def test_watermark_usage_counts_system_usage_only_when_the_policy_says(node, pods, capacity, include, expected):
    assert watermark_usage_percent(node, pods, capacity, include) == expected


def test_excluding_system_usage_keeps_a_daemon_heavy_node_from_evicting():
    node, pods = {"cpu": 7200, "memory": 30}, {"cpu": 2400, "memory": 20}
    for include, actions in ((True, [Action.TAINT, Action.EVICT]), (False, [])):
        machine = WatermarkEviction(EvictionWatermarks(dwell_seconds=0, cooldown_seconds=0))
        usage = watermark_usage_percent(node, pods, CAPACITY, include)
        assert [d.action for d in machine.step(0, usage, PODS)] == actions
