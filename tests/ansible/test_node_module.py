"""tidal.colocation.node end to end in-process against a fake CoreV1Api, table-driven: the order
of its API calls (a node's labels, taint and batch resources go before its BE pods are evicted),
a PodDisruptionBudget's 429 reported as `blocked` with the failure and the label change kept,
check mode and diff, and the refusals that name the option. The integration target
tests/integration/targets/node runs the module against the lab's API server."""
import copy
import json
from types import SimpleNamespace

import pytest
from ansible.module_utils.testing import patch_module_args
from kubernetes.client.exceptions import ApiException

from ansible_collections.tidal.colocation.plugins.module_utils import kube
from ansible_collections.tidal.colocation.plugins.module_utils.errors import ModuleError
from ansible_collections.tidal.colocation.plugins.modules import node as node_module

COLOCATION = "colocation.tidal.io/colocation"
OVERSUBSCRIPTION = "colocation.tidal.io/oversubscription"
ON = {COLOCATION: "true", OVERSUBSCRIPTION: "true"}
TAINT = {"key": "colocation.tidal.io/offline-evicting", "effect": "NoSchedule"}
BATCH = {"cpu": "8", "kubernetes.io/batch-cpu": "3000", "kubernetes.io/batch-memory": "1073741824"}
PDB_STATUS = {
    "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429, "reason": "TooManyRequests",
    "message": "Cannot evict pod as it would violate the pod's disruption budget.",
    "details": {"causes": [{"reason": "DisruptionBudget",
                            "message": "The disruption budget train needs 1 healthy pods and has 1 currently"}]},
}
PDB_MESSAGE = ("Cannot evict pod as it would violate the pod's disruption budget "
               "(The disruption budget train needs 1 healthy pods and has 1 currently)")


def a_node(name, labels=None, taints=(), capacity=None):
    return {"metadata": {"name": name, "labels": dict(labels or {}), "annotations": {}},
            "spec": {"taints": list(taints)},
            "status": {"capacity": dict(capacity or {}), "allocatable": dict(capacity or {})}}


def a_pod(namespace, name, node, qos="BE", batch=False):
    container = {"name": "c"}
    if batch:  # what the mutating webhook makes of a BE pod on an oversold node
        container["resources"] = {"requests": {"kubernetes.io/batch-cpu": "500"},
                                  "limits": {"kubernetes.io/batch-cpu": "500"}}
    return {"metadata": {"namespace": namespace, "name": name,
                         "annotations": {"colocation.tidal.io/qos-level": qos}},
            "spec": {"nodeName": node, "containers": [container]}, "status": {"phase": "Running"}}


def api_error(status, body=None):
    err = ApiException(status=status, reason="refused")
    err.body = json.dumps(body) if body is not None else None
    return err


class FakeCore:
    """The CoreV1Api calls the module makes, on dicts. `calls` records the writes in order, each
    with the node's labels at that moment; `errors` maps a call ("evict ns/name", "patch_node
    name", "list_pods name") to the ApiException it raises."""

    def __init__(self, nodes, pods=(), errors=None):
        self.nodes = {n["metadata"]["name"]: copy.deepcopy(n) for n in nodes}
        self.pods = [copy.deepcopy(p) for p in pods]
        self.errors = errors or {}
        self.calls = []
        self.api_client = SimpleNamespace(sanitize_for_serialization=copy.deepcopy)

    def _raise(self, key):
        if key in self.errors:
            raise self.errors[key]

    def list_node(self, label_selector):
        key, _, value = label_selector.partition("=")
        return SimpleNamespace(items=[n for n in self.nodes.values() if n["metadata"]["labels"].get(key) == value])

    def read_node(self, name):
        if name not in self.nodes:
            raise api_error(404, {"message": 'nodes "%s" not found' % name})
        return self.nodes[name]

    def list_pod_for_all_namespaces(self, field_selector):
        node = field_selector.split("=", 1)[1]
        self._raise("list_pods " + node)
        self.calls.append(("list_pods", node, self._labels(node)))
        return SimpleNamespace(items=[p for p in self.pods if p["spec"]["nodeName"] == node])

    def patch_node(self, name, body):
        self._raise("patch_node " + name)
        metadata = self.nodes[name]["metadata"]
        for section in ("labels", "annotations"):
            for key, value in (body.get("metadata") or {}).get(section, {}).items():
                if value is None:
                    metadata[section].pop(key, None)
                else:
                    metadata[section][key] = value
        if "spec" in body:
            self.nodes[name]["spec"]["taints"] = body["spec"]["taints"]
        self.calls.append(("patch_node", name, self._labels(name)))

    def patch_node_status(self, name, operations):
        status = self.nodes[name]["status"]
        for operation in operations:
            _, _, section, resource = operation["path"].split("/")
            del status[section][resource.replace("~1", "/").replace("~0", "~")]
        self.calls.append(("patch_node_status", name, self._labels(name)))

    def create_namespaced_pod_eviction(self, name, namespace, body):
        assert (body.metadata.name, body.metadata.namespace) == (name, namespace)
        pod = next(p for p in self.pods if (p["metadata"]["namespace"], p["metadata"]["name"]) == (namespace, name))
        node = pod["spec"]["nodeName"]
        self.calls.append(("evict", "%s/%s" % (namespace, name), self._labels(node)))
        self._raise("evict %s/%s" % (namespace, name))
        self.pods.remove(pod)

    def _labels(self, node):
        labels = self.nodes[node]["metadata"]["labels"]
        return {k: v for k, v in labels.items() if k.startswith("colocation.tidal.io/")}

    def writes(self):
        return [(call, target) for call, target, _ in self.calls if call != "list_pods"]


def run_node(monkeypatch, capsys, core, **args):
    """Run the module's main() against `core`; returns (exit code, result)."""
    monkeypatch.setattr(node_module, "_core_api", lambda params: core)
    with patch_module_args(args), pytest.raises(SystemExit) as stop:
        node_module.main()
    return stop.value.code, json.loads(capsys.readouterr().out)


OFF_NODE = a_node("w1", ON, [TAINT, {"key": "keep"}], BATCH)
OFF_PODS = [a_pod("batch", "a", "w1"), a_pod("batch", "b", "w1"), a_pod("web", "front", "w1", qos="LS")]
PLAIN_NODE = a_node("w2")


@pytest.mark.parametrize("case", [
    pytest.param(dict(
        nodes=[PLAIN_NODE], args=dict(colocation=True),
        writes=[("patch_node", "w2")], changed=True, code=0, blocked=[]), id="on"),
    pytest.param(dict(
        nodes=[a_node("w2", ON)], args=dict(colocation=True),
        writes=[], changed=False, code=0, blocked=[]), id="on-again"),
    pytest.param(dict(
        nodes=[OFF_NODE], pods=OFF_PODS, args=dict(colocation=False),
        writes=[("patch_node", "w1"), ("patch_node_status", "w1"), ("evict", "batch/a"), ("evict", "batch/b")],
        changed=True, code=0, blocked=[], evicted=["batch/a", "batch/b"]), id="off-labels-then-evictions"),
    pytest.param(dict(
        nodes=[OFF_NODE], pods=OFF_PODS, args=dict(colocation=False),
        errors={"evict batch/a": api_error(429, PDB_STATUS)},
        writes=[("patch_node", "w1"), ("patch_node_status", "w1"), ("evict", "batch/a"), ("evict", "batch/b")],
        changed=True, code=1, blocked=[{"node": "w1", "pod": "batch/a", "message": PDB_MESSAGE}],
        evicted=["batch/b"]), id="off-pdb-blocks-one-pod"),
    pytest.param(dict(
        nodes=[a_node("w1")], pods=[a_pod("batch", "a", "w1")], args=dict(colocation=False),
        errors={"evict batch/a": api_error(429, {"message": "Too many requests, please try again later."})},
        writes=[("evict", "batch/a")], changed=False, code=1,
        blocked=[{"node": "w1", "pod": "batch/a", "message": "Too many requests, please try again later."}],
        evicted=[]), id="already-off-only-a-blocked-eviction-left"),
    pytest.param(dict(
        nodes=[a_node("w1")], pods=[a_pod("batch", "a", "w1")], args=dict(colocation=False),
        errors={"evict batch/a": api_error(404, {"message": "pods \"a\" not found"})},
        writes=[("evict", "batch/a")], changed=True, code=0, blocked=[], evicted=["batch/a"]),
        id="off-pod-already-gone"),
    pytest.param(dict(
        nodes=[OFF_NODE], pods=OFF_PODS, args=dict(colocation=False, evict_be_pods=False),
        writes=[("patch_node", "w1"), ("patch_node_status", "w1")], changed=True, code=0, blocked=[],
        evicted=[]), id="off-without-evictions"),
    pytest.param(dict(
        nodes=[OFF_NODE, a_node("w3", ON)], pods=OFF_PODS + [a_pod("batch", "c", "w3")],
        args=dict(colocation=False), errors={"evict batch/b": api_error(429, PDB_STATUS)},
        writes=[("patch_node", "w1"), ("patch_node_status", "w1"), ("evict", "batch/a"), ("evict", "batch/b"),
                ("patch_node", "w3"), ("evict", "batch/c")],
        changed=True, code=1, blocked=[{"node": "w1", "pod": "batch/b", "message": PDB_MESSAGE}]),
        id="a-block-on-one-node-does-not-stop-the-next"),
])
def test_node_module_order_and_result(monkeypatch, capsys, case):
    core = FakeCore(case["nodes"], case.get("pods", ()), case.get("errors"))
    names = [n["metadata"]["name"] for n in case["nodes"]]
    code, result = run_node(monkeypatch, capsys, core, names=names, **case["args"])
    assert core.writes() == case["writes"]
    assert (code, result["changed"], result["blocked"]) == (case["code"], case["changed"], case["blocked"])
    assert result.get("failed", False) is bool(case["code"])
    for call, target, labels in core.calls:
        if call in ("evict", "list_pods"):   # a node's BE pods are looked up and evicted only once it is off
            assert labels == {}, (call, target, labels)
    assert result["mode"] == ("colocation+oversubscription" if case["args"]["colocation"] else "off")
    if not case["args"]["colocation"]:
        for name in names:       # the node changes stand, blocked or not
            assert core._labels(name) == {}
            assert all(t["key"] != TAINT["key"] for t in core.nodes[name]["spec"]["taints"])
            assert "kubernetes.io/batch-cpu" not in core.nodes[name]["status"]["capacity"]
    if "evicted" in case:
        assert result["nodes"][0]["evicted"] == case["evicted"]
        assert result["nodes"][0]["blocked"] == [{k: v for k, v in b.items() if k != "node"}
                                                  for b in case["blocked"] if b["node"] == names[0]]
    if case["blocked"]:
        assert "could not be evicted, the Eviction API answered 429 Too Many Requests" in result["msg"]
        assert all(b["pod"] in result["msg"] and b["message"] in result["msg"] for b in case["blocked"])
        assert "run the task again to retry the evictions" in result["msg"]


def test_node_module_off_keeps_other_taints_and_reports_what_it_removed(monkeypatch, capsys):
    core = FakeCore([OFF_NODE], OFF_PODS)
    _, result = run_node(monkeypatch, capsys, core, names=["w1"], colocation=False)
    assert core.nodes["w1"]["spec"]["taints"] == [{"key": "keep"}]
    (entry,) = result["nodes"]
    assert entry["labels_before"] == ON and entry["labels_after"] == {}
    assert entry["removed"] == ["taint colocation.tidal.io/offline-evicting",
                                "/status/capacity/kubernetes.io~1batch-cpu", "/status/capacity/kubernetes.io~1batch-memory",
                                "/status/allocatable/kubernetes.io~1batch-cpu", "/status/allocatable/kubernetes.io~1batch-memory"]
    assert entry["be_pods"] == ["batch/a", "batch/b"]
    assert [p["metadata"]["name"] for p in core.pods] == ["front"]


@pytest.mark.parametrize("args, pods, changed", [
    (dict(colocation=False), OFF_PODS, True),
    (dict(colocation=True), (), True),
])
def test_node_module_check_mode_writes_nothing_and_diffs(monkeypatch, capsys, args, pods, changed):
    node = OFF_NODE if not args["colocation"] else PLAIN_NODE
    core = FakeCore([node], pods, errors={"evict batch/a": api_error(429, PDB_STATUS)})
    name = node["metadata"]["name"]
    code, result = run_node(monkeypatch, capsys, core, names=[name], _ansible_check_mode=True,
                            _ansible_diff=True, **args)
    assert code == 0 and result["changed"] is changed and result["blocked"] == []
    assert core.writes() == [] and core.nodes[name] == node
    after = {} if not args["colocation"] else ON
    assert result["diff"] == {"before": {name: node_module.node_state.tidal_labels(node)}, "after": {name: after}}
    if not args["colocation"]:
        assert result["nodes"][0]["be_pods"] == ["batch/a", "batch/b"] and result["nodes"][0]["evicted"] == []


def test_node_module_blocked_failure_keeps_the_diff(monkeypatch, capsys):
    core = FakeCore([OFF_NODE], OFF_PODS, errors={"evict batch/a": api_error(429, PDB_STATUS)})
    code, result = run_node(monkeypatch, capsys, core, names=["w1"], colocation=False, _ansible_diff=True)
    assert code == 1 and result["changed"]
    assert result["diff"] == {"before": {"w1": ON}, "after": {"w1": {}}}


@pytest.mark.parametrize("errors, message, changed, writes", [
    ({"patch_node w1": api_error(403, {"message": "nodes \"w1\" is forbidden"})},
     'cannot update node w1: nodes "w1" is forbidden', False, []),
    ({"list_pods w1": api_error(500, {"message": "etcdserver: request timed out"})},
     "cannot list the pods on node w1: etcdserver: request timed out", True,
     [("patch_node", "w1"), ("patch_node_status", "w1")]),
    ({"evict batch/a": api_error(500, {"message": "This pod has more than one PodDisruptionBudget"})},
     "cannot evict the BE pods on node w1: This pod has more than one PodDisruptionBudget", True,
     [("patch_node", "w1"), ("patch_node_status", "w1"), ("evict", "batch/a")]),
])
def test_node_module_api_errors_fail_once_with_what_was_done(monkeypatch, capsys, errors, message, changed, writes):
    core = FakeCore([OFF_NODE], OFF_PODS, errors=errors)
    code, result = run_node(monkeypatch, capsys, core, names=["w1"], colocation=False)
    assert code == 1 and result["msg"] == message
    assert result["changed"] is changed and core.writes() == writes
    assert [n["name"] for n in result["nodes"]] == ["w1"]


@pytest.mark.parametrize("args, message", [
    (dict(names=[], label_selector="", colocation=True),
     "names, label_selector: one of them must name at least one node"),
    (dict(names=["w1", "nope"], colocation=True), "names: node(s) not found: nope; nothing was changed"),
    (dict(label_selector="pool=none", colocation=True),
     "label_selector: 'pool=none' matches no node; nothing was changed"),
    (dict(names=["w1"], colocation="sometimes"), "colocation"),
])
def test_node_module_refusals_name_the_option_and_change_nothing(monkeypatch, capsys, args, message):
    core = FakeCore([OFF_NODE])
    code, result = run_node(monkeypatch, capsys, core, **args)
    assert code == 1 and message in result["msg"]
    assert core.calls == []


def test_helpers_raise_and_only_main_fails(monkeypatch):
    """kubernetes.core's pattern: the helpers raise ModuleError carrying the result keys."""
    core = FakeCore([OFF_NODE], OFF_PODS, errors={"evict batch/a": api_error(429, PDB_STATUS)})
    params = dict(names=["w1"], label_selector=None, colocation=False, oversubscription=None, evict_be_pods=True)
    with pytest.raises(ModuleError) as err:
        node_module.run(core, params)
    assert err.value.result["changed"] is True
    assert err.value.result["blocked"] == [{"node": "w1", "pod": "batch/a", "message": PDB_MESSAGE}]
    assert err.value.result["msg"] == err.value.msg
    with pytest.raises(ModuleError, match="cannot load the Kubernetes client configuration"):
        kube.build_api_client({"kubeconfig": "/nonexistent/kubeconfig"})


def test_eviction_refusal_message_joins_status_and_causes():
    assert kube.api_error_causes(api_error(429, PDB_STATUS)) == [PDB_STATUS["details"]["causes"][0]["message"]]
    assert kube.api_error_causes(api_error(429)) == []
    assert kube.api_error_causes(api_error(429, {"details": {"causes": [{"reason": "x"}]}})) == []


CO_ONLY = {COLOCATION: "true"}
OV_ONLY = {OVERSUBSCRIPTION: "true"}
VOLCANO_WRITTEN = {"volcano.sh/oversubscription-cpu": "3000", "volcano.sh/oversubscription-memory": "1024",
                   "colocation.tidal.io/volcano-oversubscription-written": "true"}
# on node w1: a BE pod on native requests, a BE pod on batch resources, an online pod
MIXED_PODS = [a_pod("batch", "native", "w1"), a_pod("batch", "oversold", "w1", batch=True),
              a_pod("web", "front", "w1", qos="LS")]
STATUS = ("patch_node_status", "w1")
MODE_NAMES = {(False, False): "off", (True, False): "colocation", (False, True): "oversubscription",
              (True, True): "colocation+oversubscription"}


def mode_node(labels, batch=False, taint=False, annotations=None):
    node = a_node("w1", labels, [TAINT, {"key": "keep"}] if taint else [{"key": "keep"}], BATCH if batch else None)
    node["metadata"]["annotations"].update(annotations or {})
    return node


@pytest.mark.parametrize("node, colocation, oversubscription, writes, labels, evicted, kept", [
    # from off to each mode: the labels, and BE pods the new mode cannot run are still evicted
    # (the wanted state decides, so a run after a blocked eviction retries it)
    pytest.param(mode_node({}), False, False, [("evict", "batch/native"), ("evict", "batch/oversold")], {},
                 ["batch/native", "batch/oversold"], [], id="off-again-evicts-leftover-be-pods"),
    pytest.param(mode_node({}), True, False, [("patch_node", "w1"), ("evict", "batch/oversold")], CO_ONLY,
                 ["batch/oversold"], ["batch/native"], id="off-to-colocation"),
    pytest.param(mode_node({}), False, True, [("patch_node", "w1")], OV_ONLY, [], ["batch/native", "batch/oversold"],
                 id="off-to-oversubscription"),
    pytest.param(mode_node({}), True, True, [("patch_node", "w1")], ON, [], ["batch/native", "batch/oversold"],
                 id="off-to-both"),
    # from both: colocation only loses the batch resources and the pods on them, not the taint
    pytest.param(mode_node(ON, batch=True, taint=True), True, False,
                 [("patch_node", "w1"), STATUS, ("evict", "batch/oversold")], CO_ONLY,
                 ["batch/oversold"], ["batch/native"], id="both-to-colocation"),
    # ... oversubscription only keeps everything: BE pods run on batch resources
    pytest.param(mode_node(ON, batch=True, taint=True), False, True, [("patch_node", "w1")], OV_ONLY,
                 [], ["batch/native", "batch/oversold"], id="both-to-oversubscription"),
    pytest.param(mode_node(ON, batch=True, taint=True), False, False,
                 [("patch_node", "w1"), STATUS, ("evict", "batch/native"), ("evict", "batch/oversold")], {},
                 ["batch/native", "batch/oversold"], [], id="both-to-off"),
    # between the single modes
    pytest.param(mode_node(CO_ONLY), False, True, [("patch_node", "w1")], OV_ONLY, [],
                 ["batch/native", "batch/oversold"], id="colocation-to-oversubscription"),
    pytest.param(mode_node(OV_ONLY, batch=True), True, False,
                 [("patch_node", "w1"), STATUS, ("evict", "batch/oversold")], CO_ONLY,
                 ["batch/oversold"], ["batch/native"], id="oversubscription-to-colocation"),
    pytest.param(mode_node(OV_ONLY, batch=True, taint=True), False, False,
                 [("patch_node", "w1"), STATUS, ("evict", "batch/native"), ("evict", "batch/oversold")], {},
                 ["batch/native", "batch/oversold"], [], id="oversubscription-to-off"),
    pytest.param(mode_node(CO_ONLY, taint=True), False, False,
                 [("patch_node", "w1"), ("evict", "batch/native"), ("evict", "batch/oversold")], {},
                 ["batch/native", "batch/oversold"], [], id="colocation-to-off"),
    pytest.param(mode_node(ON, batch=True), True, True, [], ON, [], ["batch/native", "batch/oversold"],
                 id="both-again"),
    # the wanted state, not the transition, decides: a BE pod on batch resources left on a
    # colocation node is evicted on the next run
    pytest.param(mode_node(CO_ONLY), True, False, [("evict", "batch/oversold")], CO_ONLY, ["batch/oversold"],
                 ["batch/native"], id="colocation-again-evicts-a-leftover-batch-pod"),
    # Volcano's label and annotations written by tidal-manager go with oversubscription
    pytest.param(mode_node(dict(ON, **{"volcano.sh/oversubscription": "true"}), annotations=VOLCANO_WRITTEN),
                 True, False, [("patch_node", "w1"), ("evict", "batch/oversold")], CO_ONLY, ["batch/oversold"],
                 ["batch/native"], id="volcano-output-goes-with-oversubscription"),
    # a user's Volcano colocation alias stays; Tidal's label says false and wins
    pytest.param(mode_node({"volcano.sh/colocation": "true"}), False, False,
                 [("patch_node", "w1"), ("evict", "batch/native"), ("evict", "batch/oversold")],
                 {COLOCATION: "false"}, ["batch/native", "batch/oversold"], [], id="volcano-colocation-alias-overruled"),
])
def test_node_module_four_modes_and_their_transitions(monkeypatch, capsys, node, colocation, oversubscription,
                                                      writes, labels, evicted, kept):
    core = FakeCore([node], MIXED_PODS)
    code, result = run_node(monkeypatch, capsys, core, names=["w1"], colocation=colocation,
                            oversubscription=oversubscription)
    assert code == 0, result.get("msg")
    assert core.writes() == writes
    assert result["changed"] is bool(writes)
    mode = MODE_NAMES[(colocation, oversubscription)]
    (entry,) = result["nodes"]
    assert result["mode"] == entry["mode"] == mode
    assert entry["mode_before"] == node_module.node_mode.node_mode(node["metadata"]["labels"],
                                                                   node["metadata"]["annotations"])
    assert entry["labels_after"] == labels == core._labels("w1")
    assert entry["be_pods"] == entry["evicted"] == evicted
    assert sorted("%s/%s" % (p["metadata"]["namespace"], p["metadata"]["name"]) for p in core.pods
                  if p["metadata"]["name"] != "front") == kept
    # the node is in its new mode (as Tidal reads it) before any pod is looked at or evicted
    for call, target, at_the_time in core.calls:
        if call in ("evict", "list_pods"):
            assert at_the_time == labels, (call, target, at_the_time)
    after = core.nodes["w1"]
    assert node_module.node_mode.node_mode(after["metadata"]["labels"], after["metadata"]["annotations"]) == mode
    # oversubscription off leaves none of it; the taint goes only with the mode off
    if not oversubscription:
        assert not any(k.startswith("kubernetes.io/batch-") for k in after["status"]["capacity"])
        assert not any(k.startswith("volcano.sh/oversubscription") for k in after["metadata"]["labels"])
        assert not any(k.startswith("volcano.sh/oversubscription") or k.endswith("-written")
                       for k in after["metadata"]["annotations"])
    had_taint = any(t["key"] == TAINT["key"] for t in node["spec"]["taints"])
    assert any(t["key"] == TAINT["key"] for t in after["spec"]["taints"]) is (had_taint and mode != "off")
    assert {"key": "keep"} in after["spec"]["taints"]


@pytest.mark.parametrize("node, colocation, oversubscription, be_pods, after", [
    (mode_node(ON, batch=True), True, False, ["batch/oversold"], CO_ONLY),
    (mode_node(ON, batch=True), False, True, [], OV_ONLY),
    (mode_node(CO_ONLY), False, False, ["batch/native", "batch/oversold"], {}),
    (mode_node({}), False, True, [], OV_ONLY),
])
def test_node_module_check_mode_in_every_mode_writes_nothing_and_diffs(monkeypatch, capsys, node, colocation,
                                                                       oversubscription, be_pods, after):
    core = FakeCore([node], MIXED_PODS)
    code, result = run_node(monkeypatch, capsys, core, names=["w1"], colocation=colocation,
                            oversubscription=oversubscription, _ansible_check_mode=True, _ansible_diff=True)
    assert code == 0 and result["changed"] is True
    assert core.writes() == [] and core.nodes["w1"] == node and len(core.pods) == len(MIXED_PODS)
    assert result["diff"] == {"before": {"w1": node_module.node_state.tidal_labels(node)}, "after": {"w1": after}}
    assert result["nodes"][0]["be_pods"] == be_pods and result["nodes"][0]["evicted"] == []
    assert result["mode"] == MODE_NAMES[(colocation, oversubscription)]


def test_node_module_blocked_eviction_on_a_colocation_node_names_its_mode(monkeypatch, capsys):
    core = FakeCore([mode_node(ON, batch=True)], MIXED_PODS,
                    errors={"evict batch/oversold": api_error(429, PDB_STATUS)})
    code, result = run_node(monkeypatch, capsys, core, names=["w1"], colocation=True, oversubscription=False)
    assert code == 1 and result["blocked"] == [{"node": "w1", "pod": "batch/oversold", "message": PDB_MESSAGE}]
    assert "in mode colocation all the same" in result["msg"] and core._labels("w1") == CO_ONLY
