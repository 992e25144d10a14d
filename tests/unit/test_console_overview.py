"""The console's overview (issue 16): why a BE pod is Pending, from the cluster's state and the
scheduler's message; Tidal's recent Events; per node mode, batch resources and BE pods; bounded
lists that say when they were cut. Pure: `tidal.console.overview`.

The OpenAPI document describes what the pure views answer (the lab's schemathesis run checks the
served answers; this checks them without a lab): the overview, the workflow and the rollout
validate against their schemas, with ``nullable`` (OpenAPI 3.0) read as JSON Schema's ``null``."""
from __future__ import annotations

import copy

import jsonschema
import pytest

from tidal.api import qos
from tidal.console.openapi import openapi_document
from tidal.console.overview import PENDING_REASONS, TIDAL_EVENT_REASONS, NodeFacts, node_facts, overview, \
    tidal_events, why_pending
from tidal.console.views import rollout
from tidal.console.workflow import workflow

OVERSOLD = {qos.OVERSUBSCRIPTION_NODE_LABEL: "true"}
BOTH = {qos.COLOCATION_NODE_LABEL: "true", qos.OVERSUBSCRIPTION_NODE_LABEL: "true"}
EVICTING = {"key": qos.OFFLINE_EVICTING_TAINT_KEY, "effect": "NoSchedule"}
# What the admission webhook gives a BE pod on batch resources: the oversubscription label required.
BE_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": qos.OVERSUBSCRIPTION_NODE_LABEL, "operator": "In", "values": ["true"]}]}]}}}


def facts(name="n1", labels=OVERSOLD, ready=True, unschedulable=False, taints=(), cpu=4000, memory=8 << 30):
    return NodeFacts(name, labels, ready, unschedulable, tuple(taints), cpu, memory)


def be_pod(name="job-0", cpu=1000, memory=1 << 30, node=None, phase="Pending", condition=None, affinity=BE_AFFINITY,
           tolerations=(), selector=None, waiting=None):
    spec = {"schedulerName": "volcano", "affinity": affinity, "tolerations": list(tolerations),
            "containers": [{"name": "main", "resources": {"requests": {
                qos.BATCH_CPU_RESOURCE: str(cpu), qos.BATCH_MEMORY_RESOURCE: str(memory)}}}]}
    if node:
        spec["nodeName"] = node
    if selector:
        spec["nodeSelector"] = selector
    status = {"phase": phase, "conditions": [condition] if condition else []}
    if waiting:
        status["containerStatuses"] = [{"name": "main", "state": {"waiting": waiting}}]
    return {"metadata": {"name": name, "namespace": "batch", "creationTimestamp": "2025-01-01T00:00:00Z",
                         "annotations": {qos.QOS_ANNOTATION: "BE"}}, "spec": spec, "status": status}


def unschedulable(message):
    return {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}


VOLCANO_BATCH = "0/2 nodes are unavailable: 2 Insufficient kubernetes.io/batch-cpu."
VOLCANO_TAINT = "0/1 nodes are unavailable: 1 node(s) had untolerated taint {colocation.tidal.io/offline-evicting: }."
VOLCANO_AFFINITY = "0/3 nodes are unavailable: 3 node(s) didn't match Pod's node affinity/selector."
VOLCANO_GANG = "pod group is not ready, 1 Pending, 2 minAvailable; Pending: 1 Unschedulable"


@pytest.mark.parametrize("pod, nodes, reason, in_message", [
    # not pending
    (be_pod(phase="Running", node="n1"), [facts()], None, None),
    # bound, not started: the container's waiting reason
    (be_pod(node="n1", waiting={"reason": "ContainerCreating"}), [facts()], "Starting", "ContainerCreating"),
    (be_pod(), [], "NoNodes", "no node"),
    # the node's mode: off or colocation only, the BE pod requires the oversubscription label
    (be_pod(), [facts(labels={}), facts("n2", labels={qos.COLOCATION_NODE_LABEL: "true"})], "NoNodeInMode",
     f"{qos.OVERSUBSCRIPTION_NODE_LABEL}=true"),
    # a user node selector no node matches
    (be_pod(affinity=None, selector={"disk": "ssd"}), [facts()], "NoNodeInMode", "node selector"),
    # an empty selector term matches no node
    (be_pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{}]}}}), [facts()], "NoNodeInMode", "none of the 1 node(s)"),
    (be_pod(), [facts(ready=False), facts("n2", unschedulable=True)], "NodesUnavailable", "n1, n2"),
    (be_pod(), [facts(taints=[EVICTING]), facts("n2", labels=BOTH, taints=[EVICTING])], "OfflineEvicting", "n1, n2"),
    # a toleration of the taint (an online pod's) lets it through to the capacity check
    (be_pod(tolerations=[{"key": qos.OFFLINE_EVICTING_TAINT_KEY, "operator": "Exists"}], cpu=9000),
     [facts(taints=[EVICTING])], "NoBatchCapacity", "9000m"),
    (be_pod(), [facts(taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])], "Tainted", "dedicated"),
    # a PreferNoSchedule taint does not filter
    (be_pod(), [facts(taints=[{"key": "dedicated", "effect": "PreferNoSchedule"}])], "Scheduling", "1 node(s) fit"),
    # batch capacity: 0 published, or less free than asked (the roomiest node is named)
    (be_pod(), [facts(cpu=0, memory=0)], "NoBatchCapacity", "the most free on a node it may use is 0m"),
    (be_pod(memory=16 << 30), [facts(cpu=4000, memory=1 << 30), facts("n2", cpu=8000, memory=2 << 30)],
     "NoBatchCapacity", "batch-memory 16.0Gi; the most free on a node it may use is 8000m and 2.0Gi (node n2)"),
    (be_pod(memory=512 << 20), [facts(memory=100)], "NoBatchCapacity", "512.0Mi; the most free on a node it may "
                                                                       "use is 4000m and 100 bytes"),
    # requested beyond allocatable: negative free is shown as 0
    (be_pod(), [facts(cpu=-500)], "NoBatchCapacity", "is 0m"),
    # a node fits: the scheduler's word decides
    (be_pod(condition=unschedulable(VOLCANO_GANG)), [facts()], "Unschedulable", "pod group is not ready"),
    (be_pod(condition=unschedulable(VOLCANO_BATCH)), [facts()], "NoBatchCapacity", "the scheduler: 0/2"),
    (be_pod(condition=unschedulable(VOLCANO_TAINT)), [facts()], "OfflineEvicting", "the scheduler"),
    (be_pod(condition=unschedulable(VOLCANO_AFFINITY)), [facts()], "NoNodeInMode", "the scheduler"),
    (be_pod(), [facts()], "Scheduling", "volcano"),
    # the cluster's state first: the scheduler's older word is kept alongside
    (be_pod(condition=unschedulable(VOLCANO_GANG)), [facts(taints=[EVICTING])], "OfflineEvicting", "evicting"),
])
def test_why_a_be_pod_is_pending(pod, nodes, reason, in_message):
    answer = why_pending(pod, nodes)
    if reason is None:
        assert answer is None
        return
    assert answer.reason == reason, answer.message
    assert reason in PENDING_REASONS
    assert in_message in answer.message


def test_the_scheduler_message_is_kept_verbatim():
    answer = why_pending(be_pod(condition=unschedulable(VOLCANO_GANG)), [facts(taints=[EVICTING])])
    assert answer.to_json()["schedulerMessage"] == VOLCANO_GANG


@pytest.mark.parametrize("expression, labels, matches", [
    ({"key": "zone", "operator": "In", "values": ["a", "b"]}, {"zone": "b"}, True),
    ({"key": "zone", "operator": "In", "values": ["a"]}, {}, False),
    ({"key": "zone", "operator": "NotIn", "values": ["a"]}, {}, True),
    ({"key": "zone", "operator": "NotIn", "values": ["a"]}, {"zone": "a"}, False),
    ({"key": "zone", "operator": "Exists"}, {"zone": ""}, True),
    ({"key": "zone", "operator": "DoesNotExist"}, {"zone": ""}, False),
    ({"key": "cores", "operator": "Gt", "values": ["8"]}, {"cores": "16"}, True),
    ({"key": "cores", "operator": "Lt", "values": ["8"]}, {"cores": "sixteen"}, False),
])
def test_node_affinity_operators(expression, labels, matches):
    pod = be_pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [expression]}]}}})
    answer = why_pending(pod, [facts(labels=labels)])
    assert (answer.reason != "NoNodeInMode") is matches


def test_node_facts_subtract_the_batch_requests_of_bound_unfinished_pods():
    node = {"metadata": {"name": "n1", "labels": OVERSOLD},
            "spec": {"taints": [EVICTING]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "allocatable": {qos.BATCH_CPU_RESOURCE: "3000", qos.BATCH_MEMORY_RESOURCE: str(4 << 30)}}}
    pods = [be_pod("a", node="n1", phase="Running"), be_pod("b", node="n1", phase="Succeeded")]
    got = node_facts(node, pods)
    assert (got.batch_free_cpu_millicores, got.batch_free_memory_bytes) == (2000, 3 << 30)
    assert got.ready and got.taints == (EVICTING,)


def _event(reason, time, name="job-0", kind="Pod", **extra):
    return {"metadata": {"name": f"{name}.x", "namespace": "batch"}, "reason": reason, "type": "Warning",
            "message": f"{reason} message", "lastTimestamp": time, "count": 1,
            "involvedObject": {"kind": kind, "name": name, "namespace": "batch"},
            "source": {"component": "tidal-agent", "host": "n1"}, **extra}


def test_tidal_events_newest_first_only_tidal_reasons_bounded():
    events = [_event("TidalEvicted", "2025-01-01T00:00:03Z"), _event("Scheduled", "2025-01-01T00:00:09Z"),
              _event("BatchResourcesDropped", "2025-01-01T00:00:05Z", name="n2", kind="Node", source={}),
              _event("TidalEvictionBlocked", "2025-01-01T00:00:01Z"),
              # events.k8s.io style: eventTime, no lastTimestamp
              {**_event("TidalOfflineEvicting", None, name="n1", kind="Node"), "eventTime": "2025-01-01T00:00:04Z"}]
    items, truncated = tidal_events(events, limit=3)
    assert [e["reason"] for e in items] == ["BatchResourcesDropped", "TidalOfflineEvicting", "TidalEvicted"]
    assert truncated
    assert items[0]["node"] == "n2"  # a Node event without a source host names its node
    assert items[2] == {"reason": "TidalEvicted", "type": "Warning", "message": "TidalEvicted message",
                        "time": "2025-01-01T00:00:03Z", "count": 1, "source": "tidal-agent", "node": "n1",
                        "object": {"kind": "Pod", "namespace": "batch", "name": "job-0"}}
    assert tidal_events(events, limit=4) == (tidal_events(events)[0], False)
    assert set(TIDAL_EVENT_REASONS) >= {e["reason"] for e in tidal_events(events)[0]}


def _node(name, labels, cpu="4000", taints=()):
    return {"metadata": {"name": name, "labels": labels}, "spec": {"taints": list(taints)},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "allocatable": {"cpu": "16", qos.BATCH_CPU_RESOURCE: cpu,
                                       qos.BATCH_MEMORY_RESOURCE: str(8 << 30)}}}


def test_overview_per_node_and_pending_pods_bounded():
    nodes = [_node("n2", BOTH, cpu="1500"), _node("n1", {})]
    profiles = {"n2": {"status": {"policy": {"problems": ["spec.features.psiInterference: enabled but not supported"]},
                                  "conditions": [{"type": "Replayed", "status": "True", "reason": "TraceReplay",
                                                  "message": "m", "lastTransitionTime": "2025-01-01T00:00:00Z"}]}}}
    pods = [be_pod("run", node="n2", phase="Running"), be_pod("start", node="n2", cpu=100),
            *(be_pod(f"wait-{i}") for i in range(3)),
            {"metadata": {"name": "web", "annotations": {qos.QOS_ANNOTATION: "LS"}},
             "spec": {"nodeName": "n1"}, "status": {"phase": "Pending"}}]
    view = overview(nodes, profiles, pods, [_event("TidalEvicted", "2025-01-01T00:00:03Z")], max_pending=2)

    assert [n["name"] for n in view["nodes"]] == ["n1", "n2"]
    n1, n2 = view["nodes"]
    assert (n1["mode"], n1["agentReported"], n1["replayed"], n1["bePods"]) == \
        ("off", False, False, {"running": 0, "starting": 0})
    assert n2["mode"] == "colocation+oversubscription" and n2["replayed"] and n2["agentReported"]
    assert n2["batch"] == {"allocatable": {"cpuMillicores": 1500, "memoryBytes": 8 << 30},
                           "requested": {"cpuMillicores": 1100, "memoryBytes": 2 << 30},
                           "why": {"cpuMillicores": None, "memoryBytes": None, "notes": []}}
    assert n2["bePods"] == {"running": 1, "starting": 1}
    assert n2["problems"] == ["spec.features.psiInterference: enabled but not supported"]
    be = view["bePods"]
    # 400m free on n2, each waiting pod asks 1000m; the LS pod is not counted
    assert (be["running"], be["pending"], be["pendingByReason"]) == (1, 4, {"Starting": 1, "NoBatchCapacity": 3})
    assert len(be["pendingPods"]) == 2 and be["truncated"]
    assert view["events"] == {"items": tidal_events([_event("TidalEvicted", "2025-01-01T00:00:03Z")])[0],
                              "truncated": False}
    assert view["limits"] == {"pendingPods": 2, "events": 50}


@pytest.mark.parametrize("oversell, why", [
    pytest.param({"cpuMillicores": {"reason": "online peak, overhead and margin fill the capped allocatable"},
                  "memoryBytes": {"reason": "ok"},
                  "notes": ["NodeProfile has no prediction yet (...)"]},
                 {"cpuMillicores": "online peak, overhead and margin fill the capped allocatable",
                  "memoryBytes": "ok", "notes": ["NodeProfile has no prediction yet (...)"]}, id="decided"),
    pytest.param(None, {"cpuMillicores": None, "memoryBytes": None, "notes": []}, id="not-decided-yet"),
    pytest.param({"cpuMillicores": "0", "memoryBytes": {"reason": 7}, "notes": "one"},
                 {"cpuMillicores": None, "memoryBytes": None, "notes": []}, id="another-shape"),
])
def test_the_overview_says_why_the_master_decided_a_nodes_batch_resources(oversell, why):
    """At 0 batch resources the console shows the master's reason (issue 18: every number says
    where it came from), from the breakdown the master writes into the NodeProfile."""
    profiles = {"n2": {"status": {"oversell": oversell}}} if oversell is not None else {}
    view = overview([_node("n2", BOTH, cpu="0")], profiles, [], [])
    assert view["nodes"][0]["batch"]["why"] == why
    _validator("Overview").validate(view)


# -- the OpenAPI document's schemas ---------------------------------------------------------


def _json_schema(schema):
    """OpenAPI 3.0 schema -> JSON Schema (draft 4 semantics are enough here)."""
    if isinstance(schema, list):
        return [_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _json_schema(v) for k, v in schema.items() if k != "nullable"}
    if schema.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    if "$ref" in out:
        out["$ref"] = out["$ref"].replace("#/components/schemas/", "#/definitions/")
    return out


def _validator(name):
    document = openapi_document()
    definitions = {k: _json_schema(v) for k, v in copy.deepcopy(document["components"]["schemas"]).items()}
    return jsonschema.Draft4Validator({**definitions[name], "definitions": definitions})


def _nodes():
    both = {qos.COLOCATION_NODE_LABEL: "true", qos.OVERSUBSCRIPTION_NODE_LABEL: "true"}
    return [_node("n1", both, taints=[{"key": qos.OFFLINE_EVICTING_TAINT_KEY, "effect": "NoSchedule"}]),
            _node("n2", {})]


def test_the_overview_matches_its_schema():
    pods = [be_pod("run", node="n1", phase="Running"), be_pod("wait")]
    answer = overview(_nodes(), {"n1": {"status": {"policy": {"problems": ["x"]}}}}, pods,
                      [_event("TidalEvicted", "2025-01-01T00:00:03Z"), _event("TidalOfflineEvicting", None)])
    _validator("Overview").validate(answer)
    assert answer["bePods"]["pendingPods"][0]["reason"] == "OfflineEvicting"


def test_an_empty_cluster_overview_matches_its_schema():
    _validator("Overview").validate(overview([], {}, [], []))


def test_the_workflow_matches_its_schema():
    _validator("Workflow").validate(workflow())


def test_the_rollout_matches_its_schema():
    profiles = {"n1": {"status": {"policy": {"appliedGeneration": 2},
                                  "conditions": [{"type": "Replayed", "status": "True", "reason": "TraceReplay",
                                                  "message": "m", "lastTransitionTime": "2025-01-01T00:00:00Z"}]}}}
    policy = {"metadata": {"generation": 3}, "status": {"conditions": [
        {"type": "Applied", "status": "False", "reason": "NodesBehind", "message": "1 node behind"}]}}
    _validator("Rollout").validate(rollout(policy, _nodes(), profiles))


@pytest.mark.parametrize("bad", [
    {"steps": [{"title": "t", "link": None, "docs": None, "text": [], "snippets": [], "extra": 1}]},
    {"steps": [{"title": "t", "link": None, "docs": None, "text": [],
                "snippets": [{"title": "s", "language": "json", "source": "x", "text": ""}]}]},
])
def test_the_schemas_are_precise(bad):
    with pytest.raises(jsonschema.ValidationError):
        _validator("Workflow").validate(bad)


def test_a_replayed_node_shows_the_replays_capabilities_marked_replayed():
    """tidal-agent replay's report (issue 16: "capabilities: none reported" on the demo's nodes)
    read back by the console: capabilities shown, the node marked replayed in every view."""
    import datetime

    from tidal.agent.qos.capabilities import Capability, to_status
    from tidal.agent.replay import replayed_report
    from tidal.console.views import node_view

    probed = to_status([Capability("cpu.cfs_burst", True, "/sys/fs/cgroup/cpu.max.burst"),
                        Capability("psi", False, "no /proc/pressure")])
    status = replayed_report(probed, datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc))
    profiles = {"n1": {"status": status}}
    nodes = _nodes()
    view = node_view(nodes[0], profiles["n1"])
    assert view["profile"]["replayed"]
    assert [(c["name"], c["supported"]) for c in view["capabilities"]] == [("cpu.cfs_burst", True), ("psi", False)]
    assert overview(nodes, profiles, [], [])["nodes"][0]["replayed"]
    assert rollout(None, nodes, profiles)["nodes"] == [
        {"name": "n1", "mode": "colocation+oversubscription", "appliedGeneration": None, "upToDate": False,
         "reason": "the node's agent reports no applied policy generation", "replayed": True}]
    # a real agent's profile (no condition) is not replayed
    assert not node_view(nodes[0], {"status": {"capabilities": probed}})["profile"]["replayed"]
