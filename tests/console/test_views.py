"""Pure parts of the console, table-driven: the node switch decision, the node view, rollout,
monitoring panels and time ranges, the Grafana dashboard (no drift from the console's charts)
and the Prometheus rules (promtool from the Debian package)."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tidal.api import qos
from tidal.console.dashboard import grafana_dashboard
from tidal.console.monitoring import MonitoringError, TimeRange, panels
from tidal.console.views import colocation_toggle, disabled_message, node_view, rollout

REPO = Path(__file__).resolve().parents[2]


def node(name="n1", labels=None, ready=True, unschedulable=False, allocatable=None, taints=None):
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"unschedulable": unschedulable, "taints": taints or []},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                       "message": "" if ready else "kubelet stopped posting node status"}],
                       "allocatable": allocatable or {"cpu": "16", "memory": "64Gi"}}}


ON = {qos.COLOCATION_NODE_LABEL: "true"}
BOTH = {qos.COLOCATION_NODE_LABEL: "true", qos.OVERSUBSCRIPTION_NODE_LABEL: "true"}


@pytest.mark.parametrize("current, enabled, status, message, patch", [
    (node(), True, 200, "colocation enabled on node n1", {qos.COLOCATION_NODE_LABEL: "true"}),
    (node(labels=ON), True, 200, "colocation already enabled on node n1", None),
    (node(ready=False), True, 409,
     "colocation not enabled on node n1: the node is not Ready (kubelet stopped posting node status)", None),
    (node(unschedulable=True), True, 409,
     "colocation not enabled on node n1: the node is cordoned (unschedulable); uncordon it first", None),
    (None, True, 404, "colocation not changed: node n1 does not exist", None),
    (node(labels=BOTH), False, 200, "colocation disabled on node n1",
     {qos.COLOCATION_NODE_LABEL: None, qos.OVERSUBSCRIPTION_NODE_LABEL: None}),
    (node(), False, 200, "colocation already disabled on node n1", None),
    # disabling is never refused: a NotReady node can always lose the label
    (node(labels=ON, ready=False), False, 200, "colocation disabled on node n1",
     {qos.COLOCATION_NODE_LABEL: None, qos.OVERSUBSCRIPTION_NODE_LABEL: None}),
])
def test_colocation_toggle(current, enabled, status, message, patch):
    decision = colocation_toggle("n1", current, enabled)
    assert (decision.status, decision.message) == (status, message)
    assert (decision.patch["metadata"]["labels"] if decision.patch else None) == patch
    assert decision.changed == (patch is not None)


@pytest.mark.parametrize("labels, be_pods, message", [
    (BOTH, 2, "colocation disabled on node n1; 2 BE pod(s) still run there until they finish "
              "(the switch does not evict them)"),
    (BOTH, 0, "colocation disabled on node n1"),
    ({}, 3, "colocation already disabled on node n1"),
])
def test_disabling_tells_about_be_pods_left_running(labels, be_pods, message):
    assert disabled_message(colocation_toggle("n1", node(labels=labels), False), be_pods) == message


def pod(level, node_name="n1", phase="Running", requests=None):
    annotations = {qos.QOS_ANNOTATION: level} if level else {}
    return {"metadata": {"annotations": annotations}, "spec": {"nodeName": node_name, "containers": [
        {"resources": {"requests": requests or {}}}]}, "status": {"phase": phase}}


def test_node_view_counts_pods_by_qos_and_batch_requests_of_be_pods():
    pods = [pod("BE", requests={qos.BATCH_CPU_RESOURCE: "1500", qos.BATCH_MEMORY_RESOURCE: "1Gi"}),
            pod("BE", requests={qos.BATCH_CPU_RESOURCE: "500"}), pod("LS"), pod("HLS"), pod(None),
            pod("bogus")]
    # Capability names as the agent's probe writes them (tidal.agent.qos.capabilities).
    profile = {"status": {"capabilities": [{"name": "resctrl.l3", "supported": False,
                                            "reason": "resctrl not mounted"}],
                          "oversell": {"cpu": {"result": 3000}}, "policy": {"appliedGeneration": 4}}}
    view = node_view(node(labels=BOTH, allocatable={"cpu": "16", "memory": "64Gi", qos.BATCH_CPU_RESOURCE: "3000"},
                          taints=[{"key": qos.OFFLINE_EVICTING_TAINT_KEY, "effect": "NoSchedule"}]), profile, pods)
    assert view["podsByQoS"] == {"HLS": 1, "LS": 1, "BE": 2, "none": 2}
    assert view["batch"]["requested"] == {"cpuMillicores": 2000, "memoryBytes": 1024**3}
    assert view["batch"]["allocatable"] == {"cpuMillicores": 3000, "memoryBytes": 0}
    assert view["batch"]["breakdown"] == {"cpu": {"result": 3000}}
    assert view["capabilities"] == [{"name": "resctrl.l3", "supported": False, "reason": "resctrl not mounted"}]
    cache = next(f for f in view["featureSupport"] if f["section"] == "spec.features.cacheLimits")
    assert (cache["supported"], cache["reason"]) == (False, "resctrl.l3: resctrl not mounted")
    assert view["colocation"] and view["oversubscription"] and view["evicting"]
    assert view["profile"] == {"present": True, "observedAt": None, "appliedGeneration": 4}
    bare = node_view(node(), None)
    assert bare["profile"]["present"] is False and bare["capabilities"] == []


def test_rollout_lists_colocation_nodes_with_why_they_lag():
    policy = {"metadata": {"generation": 3}, "status": {"conditions": [
        {"type": "Applied", "status": "False", "reason": "NodesBehind", "message": "1/3 nodes", "lastTransitionTime": "x"}]}}
    nodes = [node("a", ON), node("b", ON), node("c", ON), node("d")]
    profiles = {"a": {"status": {"policy": {"appliedGeneration": 3}}},
                "b": {"status": {"policy": {"appliedGeneration": 2}}}}
    result = rollout(policy, nodes, profiles)
    assert (result["generation"], result["totalNodes"], result["appliedNodes"]) == (3, 3, 1)
    rows = {r["name"]: r for r in result["nodes"]}
    assert rows["a"]["upToDate"] and rows["a"]["reason"] == ""
    assert rows["b"]["reason"] == "the node's agent runs generation 2, the policy is at 3"
    assert rows["c"]["reason"] == "no NodeProfile: the node's tidal-agent has not reported"
    assert "d" not in rows
    assert result["conditions"] == [{"type": "Applied", "status": "False", "reason": "NodesBehind",
                                     "message": "1/3 nodes"}]
    assert rollout(None, nodes, {})["conditions"] == []


@pytest.mark.parametrize("query, field", [
    ({"step": "0"}, "step"), ({"step": "nan"}, "step"), ({"step": "abc"}, "step"),
    ({"start": "200", "end": "100"}, "start"), ({"end": "yesterday"}, "end"), ({"start": "-5"}, "start"),
    ({"start": "0", "end": str(40 * 86400)}, "start"), ({"start": "0", "end": "86400", "step": "1"}, "step"),
])
def test_bad_time_ranges_name_the_parameter(query, field):
    with pytest.raises(MonitoringError) as err:
        TimeRange.parse(query, now=1_000_000)
    assert err.value.field == field


def test_time_range_defaults_and_rfc3339():
    assert TimeRange.parse({}, now=7200) == TimeRange(3600, 7200, 15)
    r = TimeRange.parse({"start": "1970-01-01T00:00:00Z", "end": "1970-01-01T01:00:00Z", "step": "30"})
    assert (r.start, r.end, r.step) == (0, 3600, 30)


@pytest.mark.parametrize("name", ['a"} or vector(1) #', "UPPER", "a" * 254, "-a"])
def test_node_names_cannot_inject_promql(name):
    with pytest.raises(MonitoringError):
        panels(name)


def test_node_panels_select_only_that_node():
    for panel in panels("lab-node-1"):
        assert 'node="lab-node-1"' in panel.query


def test_committed_grafana_dashboard_is_generated_from_the_console_charts():
    committed = json.loads((REPO / "monitoring" / "grafana-dashboard.json").read_text())
    assert committed == grafana_dashboard(), "run: python -m tidal.console.dashboard > monitoring/grafana-dashboard.json"
    titles = {p["title"].removesuffix(" (m)") for p in committed["panels"]}
    assert titles == {p.title for p in panels(None)}


def test_prometheus_rules_pass_promtool():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool missing: install the Debian package prometheus (make test does)")
    monitoring = REPO / "monitoring"
    check = subprocess.run([promtool, "check", "rules", "rules.yml", "alerts.yml"], cwd=monitoring,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    test = subprocess.run([promtool, "test", "rules", "tests/rules_test.yml"], cwd=monitoring,
                          capture_output=True, text=True)
    assert test.returncode == 0, test.stdout + test.stderr


@pytest.mark.parametrize("header, token", [
    ("Bearer abc.def", "abc.def"), ("bearer  abc ", "abc"), ("Basic abc", None), ("Bearer", None),
    ("Bearer ", None), (None, None), ("", None),
])
def test_bearer_token_parsing(header, token):
    from tidal.console.auth import bearer_token
    assert bearer_token(header) == token


def test_auth_cache_expires_and_stays_bounded():
    from tidal.console.auth import _TTLCache
    now = [0.0]
    cache = _TTLCache(10.0, 2, clock=lambda: now[0])
    cache.put("a", 1)
    cache.put("b", 2)
    now[0] = 9.9
    cache.put("c", 3)  # "a", the oldest entry, is dropped
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (None, 2, 3)
    now[0] = 10.1
    assert (cache.get("b"), cache.get("c")) == (None, 3)  # "b" expired at 10 s
