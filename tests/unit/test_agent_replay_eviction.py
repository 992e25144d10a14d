"""The replaying agent's demo: the scripted peak, the modelled usage its watermarks compare, and
eviction with the agent's own state machine, mode rule and API adapter (issue 16)."""
from __future__ import annotations

import asyncio

import pytest
from tidal.agent.replay import (MODEL, PEAK_USAGE, Peak, ReplayedEviction, ReplayedNode, modelled_usage,
                                parse_peak, peak_cores, replayed_mode_status)
from tidal.api.policy import ColocationPolicy

COLOCATION = {"colocation.tidal.io/colocation": "true"}
OVERSUBSCRIPTION = {"colocation.tidal.io/oversubscription": "true"}
CAPACITY = {"cpu": 16000.0, "memory": 64.0 * 1024**3}


@pytest.mark.parametrize("text, peak", [
    ("lab-node-0=90:120:95", Peak("lab-node-0", 90, 120, 95)),
    ("lab-node-0=90:120:95:300", Peak("lab-node-0", 90, 120, 95, 300)),
    (" n =0:1.5:100", Peak("n", 0, 1.5, 100)),
])
def test_a_peak_is_parsed(text, peak):
    assert parse_peak(text) == peak


@pytest.mark.parametrize("text, message", [
    ("lab-node-0", "expected NODE=START_S:DURATION_S:PERCENT"),
    ("=1:2:3", "expected NODE=START_S:DURATION_S:PERCENT"),
    ("n=1:2", "3 or 4 numbers after '=', got 2"),
    ("n=1:2:3:4:5", "3 or 4 numbers after '=', got 5"),
    ("n=a:2:3", "START_S 'a' must be a number"),
    ("n=1:2:x", "PERCENT 'x' must be a number"),
    ("n=-1:2:3", "START_S must be >= 0"),
    ("n=1:0:3", "DURATION_S must be > 0"),
    ("n=1:2:0", r"PERCENT must be in \(0, 100\]"),
    ("n=1:2:101", r"PERCENT must be in \(0, 100\]"),
    ("n=1:60:90:60", "EVERY_S must be greater than DURATION_S"),
])
def test_a_bad_peak_is_refused_naming_the_part_and_the_rule(text, message):
    with pytest.raises(ValueError, match=message):
        parse_peak(text)


@pytest.mark.parametrize("elapsed, active", [
    (0, False), (89.9, False), (90, True), (209.9, True), (210, False),
    (389.9, False), (390, True), (509, True), (510, False),
])
def test_a_repeating_peak_is_on_for_its_duration_every_period(elapsed, active):
    assert Peak("n", 90, 120, 95, every=300).active(elapsed) is active


@pytest.mark.parametrize("elapsed, active", [(89, False), (90, True), (210, False), (390, False)])
def test_a_single_peak_is_on_once(elapsed, active):
    assert Peak("n", 90, 120, 95).active(elapsed) is active


def test_peak_cores_are_the_active_peaks_share_of_the_nodes_cpus_on_that_node_only():
    peaks = [Peak("a", 0, 10, 50), Peak("a", 5, 10, 90), Peak("b", 0, 100, 100)]
    assert peak_cores(peaks, "a", 1, 16) == 8
    assert peak_cores(peaks, "a", 6, 16) == pytest.approx(14.4)
    assert peak_cores(peaks, "a", 20, 16) == 0
    assert peak_cores(peaks, "c", 6, 16) == 0


def test_the_modelled_usage_is_online_usage_plus_be_pods_at_their_batch_requests():
    assert modelled_usage(1200, 5 << 30, [(500, 512 << 20), (1000, 1 << 30)]) == {
        "cpu": 2700, "memory": (5 << 30) + (512 << 20) + (1 << 30)}
    assert modelled_usage(1200, 100, []) == {"cpu": 1200, "memory": 100}
    # a node uses no more than it has: an online peak at 95 % and 2 BE cores make 100 %, not 107.5 %
    assert modelled_usage(15200, 100, [(2000, 0)], {"cpu": 16000, "memory": 1000}) == {"cpu": 16000, "memory": 100}


def test_a_peak_raises_the_nodes_cpu_usage_but_not_the_predictors_history():
    node = ReplayedNode("a", 0, 300)
    node.observe([("vm", 1.0, 2.0)], now_wall=10.0, trace_time=0.0, memory_bytes_per_core=1 << 30, peak=12.0)
    usages = {u.pod.uid: u for u in node.pod_usages()}
    assert usages[PEAK_USAGE].cpu_millicores == pytest.approx(11000) and usages[PEAK_USAGE].memory_bytes == 0
    assert node.cpu.stats(60, 10.0).max == pytest.approx(12000)
    assert node.memory.stats(60, 10.0).max == 1 << 30  # a CPU peak: memory follows the trace
    assert node.predictions.history.open_history().total_usage.tolist() == [pytest.approx(1.0)]
    node.observe([("vm", 3.0, 4.0)], now_wall=11.0, trace_time=1.0, memory_bytes_per_core=1 << 30, peak=2.0)
    assert [u.pod.uid for u in node.pod_usages()] == ["vm"]  # the trace is above the peak: no extra usage


def _pod(uid, level, cpu, memory=0, priority=0, node="a"):
    batch = level == "BE"
    requests = ({"kubernetes.io/batch-cpu": str(cpu), "kubernetes.io/batch-memory": str(memory)} if batch
                else {"cpu": f"{cpu}m", "memory": str(memory)})
    return {"metadata": {"uid": uid, "name": uid, "namespace": "demo",
                         "annotations": {"colocation.tidal.io/qos-level": level}},
            "spec": {"nodeName": node, "priority": priority,
                     "containers": [{"name": "c", "resources": {"requests": requests, "limits": requests}}]},
            "status": {"phase": "Running"}}


def _node(labels, taints=None, allocatable=None, annotations=None):
    return {"metadata": {"name": "a", "labels": labels, "annotations": annotations or {}},
            "spec": {"taints": taints}, "status": {"allocatable": allocatable or {"cpu": "16", "memory": "64Gi"}}}


def _eviction(*pods):
    eviction = ReplayedEviction(None, "a")
    for pod in pods:
        eviction.pods.apply("ADDED", pod)
    return eviction


def _fast(high=80, low=30):
    return ColocationPolicy.from_spec({"evictionWatermarks": {"cpu": {"highPercent": high, "lowPercent": low},
                                                              "dwellSeconds": 10, "cooldownSeconds": 30}})


def test_a_peak_over_the_high_watermark_taints_after_the_dwell_and_evicts_be_pods_lowest_priority_first():
    ev = _eviction(_pod("be-1", "BE", 1000, priority=5), _pod("be-2", "BE", 1000, priority=1),
                   _pod("web", "LS", 2000))
    node, policy = _node(COLOCATION), _fast()
    # 12 cores online + 2 BE cores = 87.5 % > 80 %
    assert ev.decide(0, policy, node, 12000, 0, CAPACITY) == []
    decisions = ev.decide(10, policy, node, 12000, 0, CAPACITY)
    assert [(d.action, d.pod_uid) for d in decisions] == [("taint", None), ("evict", "be-2")]
    assert "cpu usage 87.5% above high watermark 80%" in decisions[0].reason
    assert ev.want_taint and ev.gate[0] and MODEL in ev.gate[1]
    assert ev.decide(20, policy, node, 12000, 0, CAPACITY) == []  # cooldown
    ev.pods.apply("DELETED", _pod("be-2", "BE", 1000))
    assert [(d.action, d.pod_uid) for d in ev.decide(40, policy, node, 12000, 0, CAPACITY)] == [("evict", "be-1")]
    # the peak is over: online 1 core + no BE left ... but be-1 is still listed until it is gone
    ev.pods.apply("DELETED", _pod("be-1", "BE", 1000))
    assert [d.action for d in ev.decide(50, policy, node, 1000, 0, CAPACITY)] == ["untaint"]
    assert not ev.want_taint


def test_be_pods_keep_the_node_above_the_low_watermark_until_enough_of_them_are_gone():
    ev = _eviction(*[_pod(f"be-{i}", "BE", 2000) for i in range(3)])
    node, policy = _node(COLOCATION), _fast(high=80, low=30)
    ev.decide(0, policy, node, 10000, 0, CAPACITY)
    assert [d.action for d in ev.decide(10, policy, node, 10000, 0, CAPACITY)] == ["taint", "evict"]
    # the peak is over: 1 core online + 3 × 2 cores BE = 43.75 % > low 30 %: still evicting
    assert [d.action for d in ev.decide(40, policy, node, 1000, 0, CAPACITY)] == ["evict"]


def test_the_oversubscription_only_mode_holds_eviction_back_while_requests_fit_the_node():
    ev = _eviction(_pod("be-1", "BE", 1000))
    node = _node(OVERSUBSCRIPTION)
    ev.decide(0, _fast(), node, 15000, 0, CAPACITY)
    assert ev.decide(10, _fast(), node, 15000, 0, CAPACITY) == []
    assert ev.gate[0] is False and "not above 100%" in ev.gate[1]
    status = replayed_mode_status(node, ev)
    assert (status["name"], status["evictionAllowed"]) == ("oversubscription", False)


def test_a_node_switched_off_forgets_its_state_and_drops_its_taint():
    ev = _eviction(_pod("be-1", "BE", 1000))
    taint = [{"key": "colocation.tidal.io/offline-evicting", "effect": "NoSchedule"}]
    # restart-safe: the taint left on the node is adopted, kept while usage is above low
    assert ev.decide(0, _fast(), _node(COLOCATION, taint), 8000, 0, CAPACITY) == []
    assert ev.machine.tainted and ev.want_taint
    assert ev.decide(1, _fast(), _node({}, taint), 15000, 0, CAPACITY) == []
    assert not ev.want_taint and ev.gate == (False, "node mode off: Tidal does nothing")


def test_the_nodes_own_watermark_annotations_apply():
    ev = _eviction(_pod("be-1", "BE", 1000))
    node = _node(COLOCATION, annotations={"colocation.tidal.io/eviction-cpu-high-percent": "50",
                                          "colocation.tidal.io/eviction-dwell-seconds": "0"})
    assert [d.action for d in ev.decide(0, ColocationPolicy(), node, 8000, 0, CAPACITY)] == ["taint", "evict"]


class FakeAPI:
    """The calls NodeActions makes, recorded; the node's taints kept."""

    def __init__(self, evict_status=None):
        self.taints, self.calls, self.evict_status, self.events = [], [], evict_status, []

    async def request(self, method, path, body=None, content_type=None, **_):
        from tidal.kube.client import ApiError
        self.calls.append((method, path, (body or {}).get("reason")))
        if path.endswith("/events"):
            self.events.append(body)
        if method == "GET":
            return {"metadata": {"resourceVersion": "1"}, "spec": {"taints": self.taints}}
        if method == "PATCH":
            self.taints = body["spec"]["taints"]
        if path.endswith("/eviction") and self.evict_status:
            raise ApiError(self.evict_status, "TooManyRequests")
        return {}


def _acting(api, *pods):
    from prometheus_client import CollectorRegistry
    from tidal.metrics import node_metrics
    metrics = node_metrics(CollectorRegistry())
    ev = ReplayedEviction(api, "a", metrics)
    for pod in pods:
        ev.pods.apply("ADDED", pod)
    return ev, metrics


def test_decisions_are_carried_out_through_the_agents_api_adapter_with_its_events_and_metric():
    api = FakeAPI()
    ev, metrics = _acting(api, _pod("be-1", "BE", 1000))
    node, policy = _node(COLOCATION), _fast()
    ev.decide(0, policy, node, 15000, 0, CAPACITY)
    asyncio.run(ev.act(ev.decide(10, policy, node, 15000, 0, CAPACITY)))
    assert api.taints == [{"key": "colocation.tidal.io/offline-evicting", "effect": "NoSchedule"}]
    reasons = [reason for _, _, reason in api.calls if reason]
    assert reasons == ["TidalOfflineEvicting", "TidalEvicted"]
    assert ("POST", "/api/v1/namespaces/demo/pods/be-1/eviction", None) in api.calls
    assert metrics.evictions.labels("a", "cpu", "watermark")._value.get() == 1
    # named after the pod's uid, as the agent names it: one TidalEvicted Event per pod
    evicted = [e for e in api.events if e["reason"] == "TidalEvicted"]
    assert [e["metadata"]["name"] for e in evicted] == ["be-1.tidal-evicted.be-1"]
    ev.pods.apply("DELETED", _pod("be-1", "BE", 1000))
    asyncio.run(ev.act(ev.decide(20, policy, _node(COLOCATION, api.taints), 1000, 0, CAPACITY)))
    assert api.taints == []
    assert [reason for _, _, reason in api.calls if reason][-1] == "TidalOfflineEvictingCleared"


def test_an_eviction_a_budget_blocks_is_reported_and_the_pod_chosen_again():
    api = FakeAPI(evict_status=429)
    ev, metrics = _acting(api, _pod("be-1", "BE", 1000))
    node, policy = _node(COLOCATION), _fast()
    ev.decide(0, policy, node, 15000, 0, CAPACITY)
    asyncio.run(ev.act(ev.decide(10, policy, node, 15000, 0, CAPACITY)))
    assert [reason for _, _, reason in api.calls if reason] == ["TidalOfflineEvicting", "TidalEvictionBlocked"]
    assert metrics.evictions.labels("a", "cpu", "watermark")._value.get() == 0
    assert metrics.eviction_failures.labels("a", "disruption-budget")._value.get() == 1
    assert [d.pod_uid for d in ev.decide(11, policy, node, 15000, 0, CAPACITY)] == ["be-1"]
