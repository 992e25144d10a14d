"""Pure parts of the console, table-driven: the node switch (request and decision), the node view
(mode included), rollout, monitoring panels and time ranges, the Grafana dashboard (no drift
from the console's charts) and the Prometheus rules (promtool from the Debian package)."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tidal.api import qos
from tidal.console.dashboard import grafana_dashboard
from tidal.console.monitoring import MonitoringError, TimeRange, panels
from tidal.api.node_mode import VOLCANO_LABEL_WRITTEN_ANNOTATION, Mode
from tidal.console.views import SwitchRequestError, be_pods_left_message, mode_switch, modes, node_view, \
    rollout, switch_answer, switch_request

REPO = Path(__file__).resolve().parents[2]


def node(name="n1", labels=None, ready=True, unschedulable=False, allocatable=None, taints=None):
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"unschedulable": unschedulable, "taints": taints or []},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                       "message": "" if ready else "kubelet stopped posting node status"}],
                       "allocatable": allocatable or {"cpu": "16", "memory": "64Gi"}}}


ON = {qos.COLOCATION_NODE_LABEL: "true"}
BOTH = {qos.COLOCATION_NODE_LABEL: "true", qos.OVERSUBSCRIPTION_NODE_LABEL: "true"}
OVERSOLD = {qos.OVERSUBSCRIPTION_NODE_LABEL: "true"}
COLO, OVER = qos.COLOCATION_NODE_LABEL, qos.OVERSUBSCRIPTION_NODE_LABEL
MEANING = {m["name"]: m["meaning"] for m in modes()}


def _labels_after(current, decision):
    labels = dict(current["metadata"]["labels"])
    for key, value in ((decision.patch or {}).get("metadata", {}).get("labels") or {}).items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    return labels


@pytest.mark.parametrize("labels, requested, patch, after", [
    # from off to each of the four modes
    ({}, Mode.OFF, None, {}),
    ({}, Mode.COLOCATION, {COLO: "true"}, ON),
    ({}, Mode.OVERSUBSCRIPTION, {OVER: "true"}, OVERSOLD),
    ({}, Mode.COLOCATION_OVERSUBSCRIPTION, {COLO: "true", OVER: "true"}, BOTH),
    # from both to each of the four: a switch going off loses its label
    (BOTH, Mode.OFF, {COLO: None, OVER: None}, {}),
    (BOTH, Mode.COLOCATION, {OVER: None}, ON),
    (BOTH, Mode.OVERSUBSCRIPTION, {COLO: None}, OVERSOLD),
    (BOTH, Mode.COLOCATION_OVERSUBSCRIPTION, None, BOTH),
    # between the two one-switch modes
    (ON, Mode.OVERSUBSCRIPTION, {COLO: None, OVER: "true"}, OVERSOLD),
    (OVERSOLD, Mode.COLOCATION, {COLO: "true", OVER: None}, ON),
    # an explicit "false" is already off and is kept; a value not understood is cleaned up
    ({COLO: "false"}, Mode.OFF, None, {COLO: "false"}),
    ({COLO: "yes"}, Mode.OFF, {COLO: None}, {}),
    ({COLO: "yes"}, Mode.COLOCATION, {COLO: "true"}, ON),
    # labels that are not Tidal's two are never touched
    ({"team": "a", **BOTH}, Mode.OFF, {COLO: None, OVER: None}, {"team": "a"}),
])
def test_mode_switch_writes_tidals_two_labels(labels, requested, patch, after):
    current = node(labels=labels)
    decision = mode_switch("n1", current, requested)
    assert decision.status == 200
    assert (decision.patch["metadata"]["labels"] if decision.patch else None) == patch
    assert decision.changed == (patch is not None)
    assert _labels_after(current, decision) == after
    assert decision.result.mode == requested and decision.warnings == ()
    verb = "set to" if patch else "already in"
    assert decision.message == f"node n1 {verb} mode {requested}: {MEANING[str(requested)]}"
    assert decision.switched_off == any(v is None for v in (patch or {}).values())


@pytest.mark.parametrize("current, requested, status, message, stays", [
    (node(ready=False), Mode.COLOCATION, 409, "mode not changed on node n1: the node is not Ready "
                                              "(kubelet stopped posting node status); it stays in mode off", Mode.OFF),
    (node(unschedulable=True), Mode.COLOCATION_OVERSUBSCRIPTION, 409,
     "mode not changed on node n1: the node is cordoned (unschedulable), uncordon it first; it stays in mode off",
     Mode.OFF),
    # adding a switch to a cordoned node is refused too ...
    (node(labels=ON, unschedulable=True), Mode.COLOCATION_OVERSUBSCRIPTION, 409,
     "mode not changed on node n1: the node is cordoned (unschedulable), uncordon it first; "
     "it stays in mode colocation", Mode.COLOCATION),
    (node(labels=ON, unschedulable=True), Mode.OVERSUBSCRIPTION, 409,
     "mode not changed on node n1: the node is cordoned (unschedulable), uncordon it first; "
     "it stays in mode colocation", Mode.COLOCATION),
    (None, Mode.COLOCATION, 404, "mode not changed: node n1 does not exist", None),
    (None, Mode.OFF, 404, "mode not changed: node n1 does not exist", None),
])
def test_mode_switch_refuses_turning_a_switch_on_where_be_pods_could_not_start(current, requested, status, message,
                                                                                stays):
    decision = mode_switch("n1", current, requested)
    assert (decision.status, decision.message, decision.patch, decision.changed) == (status, message, None, False)
    assert (decision.result.mode if decision.result else None) == stays


@pytest.mark.parametrize("current, requested, mode", [
    # ... but turning switches off never is: a NotReady or cordoned node can always lose them
    (node(labels=BOTH, ready=False), Mode.OFF, Mode.OFF),
    (node(labels=BOTH, unschedulable=True), Mode.COLOCATION, Mode.COLOCATION),
])
def test_mode_switch_never_refuses_turning_switches_off(current, requested, mode):
    decision = mode_switch("n1", current, requested)
    assert decision.status == 200 and decision.changed and decision.result.mode == mode


@pytest.mark.parametrize("labels, requested, result, warning", [
    # off asked, an alias keeps a switch on: the console does not write volcano.sh labels, it says so
    ({**BOTH, "volcano.sh/colocation": "true"}, Mode.OFF, Mode.COLOCATION,
     "volcano.sh/colocation=true still present on node n1 (the console writes only Tidal's labels: "
     "remove it to reach mode off)"),
    ({"volcano.sh/oversubscription": "true"}, Mode.COLOCATION, Mode.COLOCATION_OVERSUBSCRIPTION,
     "volcano.sh/oversubscription=true still present on node n1 (the console writes only Tidal's labels: "
     "remove it to reach mode colocation)"),
])
def test_mode_switch_says_when_an_alias_label_keeps_another_mode(labels, requested, result, warning):
    decision = mode_switch("n1", node(labels=labels), requested)
    assert decision.status == 200 and decision.result.mode == result
    assert decision.warnings == (warning,)
    assert decision.message == (f"node n1 is in mode {result}, not {requested}: {warning}. "
                                f"{result}: {MEANING[str(result)]}")
    assert not any(k.startswith("volcano.sh/") for k in (decision.patch or {}).get("metadata", {}).get("labels", {}))


def test_mode_switch_reports_alias_conflicts_it_wins_over():
    # Tidal's label wins over an alias that disagrees: the requested mode holds, the conflict is told
    decision = mode_switch("n1", node(labels={"volcano.sh/colocation": "false"}), Mode.COLOCATION)
    assert decision.result.mode == Mode.COLOCATION
    assert decision.message == f"node n1 set to mode colocation: {MEANING['colocation']}"
    assert decision.warnings == ("node label colocation.tidal.io/colocation=true and its alias "
                                 "volcano.sh/colocation=false disagree: colocation.tidal.io/colocation wins",)


def test_the_oversell_masters_own_volcano_label_does_not_keep_a_node_oversold():
    labels = {**BOTH, "volcano.sh/oversubscription": "true"}
    current = node(labels=labels)
    current["metadata"]["annotations"] = {VOLCANO_LABEL_WRITTEN_ANNOTATION: "true"}
    decision = mode_switch("n1", current, Mode.OFF)
    assert decision.result.mode == Mode.OFF and decision.warnings == ()


@pytest.mark.parametrize("body, mode", [
    ({"mode": "off"}, Mode.OFF),
    ({"mode": "colocation"}, Mode.COLOCATION),
    ({"mode": "oversubscription"}, Mode.OVERSUBSCRIPTION),
    ({"mode": "colocation+oversubscription"}, Mode.COLOCATION_OVERSUBSCRIPTION),
    # the older boolean form: on is the mode in which BE pods get oversold resources
    ({"enabled": True}, Mode.COLOCATION_OVERSUBSCRIPTION),
    ({"enabled": False}, Mode.OFF),
])
def test_switch_request_reads_the_mode_or_the_boolean(body, mode):
    assert switch_request(body) == mode


ALLOWED = "off, colocation, oversubscription, colocation+oversubscription"


@pytest.mark.parametrize("body, field, message", [
    ({}, "mode", f"required: one of {ALLOWED}"),
    ({"mode": "on"}, "mode", f"must be one of {ALLOWED} (got 'on')"),
    ({"mode": "Colocation"}, "mode", f"must be one of {ALLOWED} (got 'Colocation')"),
    ({"mode": True}, "mode", f"must be one of {ALLOWED} (got True)"),
    ({"mode": None}, "mode", f"must be one of {ALLOWED} (got None)"),
    ({"enabled": "yes"}, "enabled", "must be true or false"),
    ({"enabled": 1}, "enabled", "must be true or false"),
    ({"mode": "off", "enabled": False}, "enabled", "send either mode or enabled, not both"),
    ({"mode": "off", "colour": "red"}, "colour", "unknown field (allowed: mode, or enabled)"),
])
def test_switch_request_refuses_bad_input_naming_the_field_and_the_allowed_values(body, field, message):
    with pytest.raises(SwitchRequestError) as err:
        switch_request(body)
    assert (err.value.field, err.value.message) == (field, message)


@pytest.mark.parametrize("labels, be_pods, requested, message", [
    (BOTH, 2, Mode.OFF, f"node n1 set to mode off: {MEANING['off']}; 2 BE pod(s) still run there until "
                        "they finish (the switch does not evict them)"),
    (BOTH, 2, Mode.COLOCATION, f"node n1 set to mode colocation: {MEANING['colocation']}; 2 BE pod(s) still "
                               "run there until they finish (the switch does not evict them)"),
    (BOTH, 0, Mode.OFF, f"node n1 set to mode off: {MEANING['off']}"),
    ({}, 3, Mode.OFF, f"node n1 already in mode off: {MEANING['off']}"),
    ({}, 3, Mode.COLOCATION, f"node n1 set to mode colocation: {MEANING['colocation']}"),  # nothing turned off
])
def test_turning_a_switch_off_tells_about_be_pods_left_running(labels, be_pods, requested, message):
    assert be_pods_left_message(mode_switch("n1", node(labels=labels), requested), be_pods) == message


def test_modes_lists_the_four_with_their_meaning_and_eviction_rule():
    assert [m["name"] for m in modes()] == ["off", "colocation", "oversubscription", "colocation+oversubscription"]
    assert all(m["meaning"] and m["evictionRule"] for m in modes())
    assert len({m["meaning"] for m in modes()}) == 4
    assert "100%" in next(m for m in modes() if m["name"] == "oversubscription")["evictionRule"]


def test_node_view_reports_the_mode_with_aliases_and_the_agents_eviction_word():
    plain = node_view(node(labels={"volcano.sh/colocation": "true", OVER: "maybe"},
                           allocatable={"cpu": "16", "memory": "64Gi"}), None)
    mode = plain["mode"]
    assert (mode["name"], mode["colocation"], mode["oversubscription"]) == ("colocation", True, False)
    assert (plain["colocation"], plain["oversubscription"]) == (True, False)
    assert mode["sources"]["colocation"] == "volcano.sh/colocation"
    assert mode["meaning"] == MEANING["colocation"] and mode["oversellTypes"] == ["cpu", "memory"]
    assert mode["problems"] and OVER in mode["problems"][0] and mode["conflicts"] == []
    assert (mode["agentMode"], mode["evictionAllowed"], mode["evictionReason"]) == (None, None, None)
    profile = {"status": {"mode": {"name": "oversubscription", "evictionAllowed": False,
                                   "evictionReason": "oversubscription-only node: requests cpu 40% of allocatable, "
                                                     "not above 100%"}}}
    current = node(labels=OVERSOLD)
    current["metadata"]["annotations"] = {"colocation.tidal.io/oversell-types": "cpu"}
    view = node_view(current, profile)["mode"]
    assert (view["name"], view["oversellTypes"], view["agentMode"], view["evictionAllowed"]) == \
        ("oversubscription", ["cpu"], "oversubscription", False)
    assert view["evictionReason"].startswith("oversubscription-only node")
    assert node_view(node(), {"status": {"mode": {"name": "bogus"}}})["mode"]["agentMode"] is None


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
    assert view["profile"] == {"present": True, "observedAt": None, "appliedGeneration": 4, "replayed": False}
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


def _openapi_validator(name):
    """A JSON Schema validator of one schema of the console's OpenAPI document (OpenAPI 3.0's
    ``nullable`` written as JSON Schema's null type)."""
    import jsonschema

    from tidal.console.openapi import openapi_document

    def convert(value):
        if isinstance(value, dict):
            out = {k: convert(v) for k, v in value.items() if k != "nullable"}
            if value.get("nullable"):
                out = {"anyOf": [out, {"type": "null"}]}
            return out
        if isinstance(value, list):
            return [convert(v) for v in value]
        return value
    document = convert(openapi_document())
    return jsonschema.Draft7Validator({"$ref": f"#/components/schemas/{name}", "components": document["components"]})


@pytest.mark.parametrize("body", [{"mode": str(m)} for m in Mode] + [{"enabled": True}, {"enabled": False}])
def test_the_openapi_document_allows_every_body_the_switch_accepts(body):
    switch_request(body)
    assert _openapi_validator("ColocationRequest").is_valid(body)


@pytest.mark.parametrize("body", [
    {}, {"mode": "on"}, {"mode": None}, {"enabled": "yes"}, {"mode": "off", "enabled": False},
    {"mode": "off", "colour": "red"}, {"enabled": True, "mode": "colocation"},
])
def test_the_openapi_document_forbids_every_body_the_switch_refuses(body):
    with pytest.raises(SwitchRequestError):
        switch_request(body)
    assert not _openapi_validator("ColocationRequest").is_valid(body)


def test_node_views_and_switch_answers_match_the_openapi_document():
    profile = {"status": {"mode": {"name": "colocation", "evictionAllowed": True, "evictionReason": "x"}}}
    for view in (node_view(node(labels=BOTH), profile), node_view(node(labels={"volcano.sh/colocation": "x"}), None)):
        _openapi_validator("Node").validate(view)
    _openapi_validator("NodeList").validate({"items": [], "modes": modes()})
    for current, requested in ((node(), Mode.COLOCATION), (node(ready=False), Mode.COLOCATION), (None, Mode.OFF),
                               (node(labels={"volcano.sh/colocation": "true"}), Mode.OFF)):
        decision = mode_switch("n1", current, requested)
        _openapi_validator("ColocationResult").validate(switch_answer("n1", decision, decision.message))


@pytest.mark.parametrize("nodes, matcher", [
    ([], None),
    (["a"], 'node="a"'),
    (["a", "b.example"], 'node=~"a|b\\\\.example"'),
])
def test_node_filter_selects_one_or_several_nodes(nodes, matcher):
    from tidal.console.monitoring import node_filter
    assert node_filter(nodes) == matcher


@pytest.mark.parametrize("value, nodes", [
    (None, []), ("a", ["a"]), ("a,b.c,a", ["a", "b.c"]),
    ("", "nodes"), ("a,,b", "nodes"), (" a", "nodes"), ("a,B", "nodes"), ('a,x"} or vector(1)', "nodes"),
    (",".join(f"n{i}" for i in range(101)), "nodes"),
])
def test_the_nodes_parameter_is_a_list_of_node_names(value, nodes):
    from tidal.console.monitoring import nodes_parameter
    if nodes == "nodes":
        with pytest.raises(MonitoringError) as err:
            nodes_parameter(value)
        assert err.value.field == "nodes"
    else:
        assert nodes_parameter(value) == nodes


def test_the_cluster_view_counts_nodes_and_workloads_and_the_node_view_does_not():
    assert [p.name for p in panels(None)][-2:] == ["nodeCounts", "workloadCounts"]
    assert {"nodeCounts", "workloadCounts"}.isdisjoint(p.name for p in panels("n1"))
    assert all('node=~"a|b"' in p.query for p in panels(None, ["a", "b"]))


def test_panel_queries_filtered_to_several_nodes_evaluate_as_intended(tmp_path):
    """promtool evaluates the cluster view's PromQL, filtered to a and b.c, over series of three
    nodes — one named bxc, which an unescaped dot would match."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool missing: install the Debian package prometheus (make test does)")
    by_name = {p.name: p.query for p in panels(None, ["a", "b.c"])}
    series = []
    for node, ls, be, batch, taint in (("a", 800, 300, 2000, 0), ("b.c", 500, 0, 0, 1), ("bxc", 900, 900, 4000, 1)):
        series += [
            {"series": f'tidal_node_cpu_usage_millicores{{node="{node}"}}', "values": f"{ls + be}x3"},
            {"series": f'tidal_qos_cpu_usage_millicores{{node="{node}",qos="LS"}}', "values": f"{ls}x3"},
            {"series": f'tidal_qos_cpu_usage_millicores{{node="{node}",qos="BE"}}', "values": f"{be}x3"},
            {"series": f'tidal_qos_cpu_usage_millicores{{node="{node}",qos="HLS"}}', "values": "0x3"},
            {"series": f'tidal_node_batch_allocatable{{node="{node}",resource="cpu"}}', "values": f"{batch}x3"},
            {"series": f'tidal_node_offline_evicting_taint{{node="{node}"}}', "values": f"{taint}x3"},
        ]
    tests = {"rule_files": [], "evaluation_interval": "1m", "tests": [{"interval": "1m", "input_series": series,
             "promql_expr_test": [
                 {"expr": by_name["nodeCPU"], "eval_time": "2m",
                  "exp_samples": [{"labels": '{node="a"}', "value": 1100}, {"labels": '{node="b.c"}', "value": 500}]},
                 {"expr": by_name["nodeCounts"], "eval_time": "2m",
                  "exp_samples": [{"labels": '{kind="reporting"}', "value": 2},
                                  {"labels": '{kind="with batch resources"}', "value": 1},
                                  {"labels": '{kind="evicting"}', "value": 1}]},
                 {"expr": by_name["workloadCounts"], "eval_time": "2m",
                  "exp_samples": [{"labels": '{qos="BE"}', "value": 1}, {"labels": '{qos="HLS"}', "value": 0},
                                  {"labels": '{qos="LS"}', "value": 2}]},
             ]}]}
    path = tmp_path / "panels_test.yml"
    path.write_text(json.dumps(tests))  # JSON is YAML
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
