"""The REST API against the lab: authentication and authorisation by the API server, node
switches (the four modes) seen at the API server, policy validation, and monitoring through the real Prometheus
scraping the real metrics of tidal-console, the replayed agent and the oversell master."""
import json
import time
import urllib.error
import urllib.request

import pytest
from kubernetes import client

from tidal.api import qos
from tidal_dev.lab.pytest_plugin import wait_for
from tidal_dev.testing.policy import put_spec

from .conftest import http, patch_profile_status, promql

pytestmark = pytest.mark.lab


def _label(core, node):
    return (core.read_node(node).metadata.labels or {}).get(qos.COLOCATION_NODE_LABEL)


def test_callers_are_authenticated_and_authorised_by_the_api_server(console, users, nodes, lab_api):
    core = client.CoreV1Api(lab_api)
    status, headers, body = http("GET", f"{console}/api/v1/nodes")
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    assert "bearer token" in body["error"]["message"]
    assert http("GET", f"{console}/api/v1/nodes", "not-a-token")[0] == 401
    status, _, body = http("GET", f"{console}/api/v1/nodes", users["nobody"])
    assert status == 403 and "may not list nodeprofiles.colocation.tidal.io" in body["error"]["message"]

    # The viewer reads but cannot write: no label changes, no policy written.
    assert http("GET", f"{console}/api/v1/nodes", users["viewer"])[0] == 200
    assert http("GET", f"{console}/api/v1/policy", users["viewer"])[0] == 200
    status, _, body = http("PUT", f"{console}/api/v1/nodes/{nodes['plain']}/colocation", users["viewer"],
                           {"enabled": True})
    assert status == 403 and f"may not patch nodes {nodes['plain']}" in body["error"]["message"]
    assert _label(core, nodes["plain"]) is None
    status, _, body = http("PUT", f"{console}/api/v1/policy", users["viewer"], {"spec": {}})
    assert status == 403 and "may not update colocationpolicies" in body["error"]["message"]
    # No anonymous writes either.
    assert http("PUT", f"{console}/api/v1/nodes/{nodes['plain']}/colocation", None, {"enabled": True})[0] == 401

    _, _, me = http("GET", f"{console}/api/v1/whoami", users["viewer"])
    assert me["username"] == f"system:serviceaccount:{users['namespace']}:viewer"
    assert me["permissions"] == {"readNodes": True, "readPolicy": True, "writeNodes": False, "writePolicy": False}
    _, _, me = http("GET", f"{console}/api/v1/whoami", users["editor"])
    assert me["permissions"] == {"readNodes": True, "readPolicy": True, "writeNodes": True, "writePolicy": True}


def _tidal_labels(core, node):
    labels = core.read_node(node).metadata.labels or {}
    return {k: v for k, v in labels.items() if k in (qos.COLOCATION_NODE_LABEL, qos.OVERSUBSCRIPTION_NODE_LABEL)}


MODE_LABELS = {
    "colocation": {qos.COLOCATION_NODE_LABEL: "true"},
    "oversubscription": {qos.OVERSUBSCRIPTION_NODE_LABEL: "true"},
    "colocation+oversubscription": {qos.COLOCATION_NODE_LABEL: "true", qos.OVERSUBSCRIPTION_NODE_LABEL: "true"},
    "off": {},
}


def test_the_switch_sets_each_of_the_four_modes_on_a_node(console, users, nodes, lab_api):
    core = client.CoreV1Api(lab_api)
    node, url = nodes["plain"], f"{console}/api/v1/nodes/{nodes['plain']}/colocation"
    _, _, listing = http("GET", f"{console}/api/v1/nodes", users["viewer"])
    meaning = {m["name"]: m["meaning"] for m in listing["modes"]}
    assert list(meaning) == ["off", "colocation", "oversubscription", "colocation+oversubscription"]
    assert _tidal_labels(core, node) == {}
    try:
        for mode, labels in MODE_LABELS.items():
            status, _, body = http("PUT", url, users["editor"], {"mode": mode})
            assert status == 200, body
            assert (body["mode"], body["meaning"], body["changed"], body["warnings"]) == (mode, meaning[mode], True, [])
            assert body["message"] == f"node {node} set to mode {mode}: {meaning[mode]}"
            assert _tidal_labels(core, node) == labels, mode
            _, _, view = http("GET", f"{console}/api/v1/nodes/{node}", users["viewer"])
            assert (view["mode"]["name"], view["mode"]["meaning"]) == (mode, meaning[mode])
            _, _, body = http("PUT", url, users["editor"], {"mode": mode})
            assert (body["changed"], body["message"]) == (False, f"node {node} already in mode {mode}: {meaning[mode]}")
        # Bad input names the field and the allowed values, and changes nothing.
        core.patch_node(node, {"metadata": {"labels": MODE_LABELS["colocation"]}})
        for bad, field in (({"mode": "on"}, "mode"), ({}, "mode"), ({"mode": "off", "enabled": False}, "enabled")):
            status, _, body = http("PUT", url, users["editor"], bad)
            assert status == 400 and body["error"]["fields"][0]["field"] == field, (bad, body)
        status, _, body = http("PUT", url, users["editor"], {"mode": "on"})
        assert "off, colocation, oversubscription, colocation+oversubscription" in body["error"]["fields"][0]["message"]
        assert _tidal_labels(core, node) == MODE_LABELS["colocation"]
        # A Volcano alias the console does not write keeps the node in another mode: the answer says so.
        core.patch_node(node, {"metadata": {"labels": {"volcano.sh/colocation": "true"}}})
        status, _, body = http("PUT", url, users["editor"], {"mode": "off"})
        assert status == 200 and body["mode"] == "colocation" and _tidal_labels(core, node) == {}
        assert "volcano.sh/colocation=true still present" in body["warnings"][0]
        assert (core.read_node(node).metadata.labels or {}).get("volcano.sh/colocation") == "true"
    finally:
        core.patch_node(node, {"metadata": {"labels": {qos.COLOCATION_NODE_LABEL: None,
                                                       qos.OVERSUBSCRIPTION_NODE_LABEL: None,
                                                       "volcano.sh/colocation": None}}})


def test_the_boolean_switch_still_works_and_says_what_the_node_does(console, users, nodes, lab_api):
    core = client.CoreV1Api(lab_api)
    node, url = nodes["plain"], f"{console}/api/v1/nodes/{nodes['plain']}/colocation"
    both = MODE_LABELS["colocation+oversubscription"]
    status, _, body = http("PUT", url + "?dryRun=All", users["editor"], {"enabled": True})
    assert status == 200 and body["message"].startswith("dry run:") and _tidal_labels(core, node) == {}

    # enabled: true is the mode in which BE pods get oversold resources (issue 20)
    status, _, body = http("PUT", url, users["editor"], {"enabled": True})
    assert (status, body["mode"], body["changed"]) == (200, "colocation+oversubscription", True)
    assert body["message"] == f"node {node} set to mode colocation+oversubscription: {body['meaning']}"
    assert _tidal_labels(core, node) == both
    _, _, body = http("PUT", url, users["editor"], {"enabled": True})
    assert body["changed"] is False and body["message"].startswith(f"node {node} already in mode")
    _, _, listing = http("GET", f"{console}/api/v1/nodes", users["viewer"])
    entry = next(n for n in listing["items"] if n["name"] == node)
    assert entry["colocation"] is True and entry["oversubscription"] is True

    status, _, body = http("PUT", url, users["editor"], {"enabled": False})
    assert (status, body["mode"], body["message"]) == (200, "off", f"node {node} set to mode off: {body['meaning']}")
    assert _tidal_labels(core, node) == {}

    # Why not: a cordoned node, a node that does not exist, a body without a boolean.
    core.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        status, _, body = http("PUT", url, users["editor"], {"enabled": True})
        assert status == 409 and "cordoned" in body["message"] and _tidal_labels(core, node) == {}
        assert body["mode"] == "off"
    finally:
        core.patch_node(node, {"spec": {"unschedulable": None}})
    status, _, body = http("PUT", f"{console}/api/v1/nodes/console-no-such-node/colocation", users["editor"],
                           {"enabled": True})
    assert status == 404 and body["message"] == "mode not changed: node console-no-such-node does not exist"
    status, _, body = http("PUT", url, users["editor"], {"enabled": "yes"})
    assert status == 400 and body["error"]["fields"] == [{"field": "enabled", "message": "must be true or false"}]


def test_node_list_shows_capabilities_with_reasons_pods_by_qos_and_batch_requests(console, users, nodes, lab_api):
    core = client.CoreV1Api(lab_api)
    node = nodes["oversold"]
    patch_profile_status(lab_api, node, {"capabilities": [
        {"name": "cpuBurst", "supported": True, "reason": ""},
        {"name": "cacheLimits", "supported": False, "reason": "resctrl not mounted"}]})
    namespace = users["namespace"]
    be = {"metadata": {"name": "be", "annotations": {qos.QOS_ANNOTATION: "BE"}},
          "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox", "resources": {
              "requests": {qos.BATCH_CPU_RESOURCE: "1500", qos.BATCH_MEMORY_RESOURCE: str(2 * 1024**3)},
              "limits": {qos.BATCH_CPU_RESOURCE: "1500", qos.BATCH_MEMORY_RESOURCE: str(2 * 1024**3)}}}]}}
    ls = {"metadata": {"name": "ls", "annotations": {qos.QOS_ANNOTATION: "LS"}},
          "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox",
                                                     "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}
    for pod in (be, ls):
        core.create_namespaced_pod(namespace, pod)
    try:
        status, _, view = http("GET", f"{console}/api/v1/nodes/{node}", users["viewer"])
        assert status == 200
        assert view["colocation"] and view["oversubscription"]
        assert view["mode"]["name"] == "colocation+oversubscription"
        assert {"name": "cacheLimits", "supported": False, "reason": "resctrl not mounted"} in view["capabilities"]
        assert view["podsByQoS"] == {"HLS": 0, "LS": 1, "BE": 1, "none": 0}
        assert view["batch"]["requested"] == {"cpuMillicores": 1500, "memoryBytes": 2 * 1024**3}
        assert view["allocatable"] == {"cpuMillicores": 16000, "memoryBytes": 64 * 1024**3}
        status, _, body = http("GET", f"{console}/api/v1/nodes/Bad_Name", users["viewer"])
        assert status == 400 and body["error"]["fields"][0]["field"] == "name"
    finally:
        for pod in ("be", "ls"):
            core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)


def test_an_invalid_policy_is_refused_naming_each_field_and_rule_and_changes_nothing(console, users, lab_api):
    before = http("GET", f"{console}/api/v1/policy", users["viewer"])[2]
    status, _, body = http("PUT", f"{console}/api/v1/policy", users["editor"], {"spec": {
        "evictionWatermarks": {"cpu": {"highPercent": 50, "lowPercent": 70}},
        "overselling": {"ratioPercent": 150}}})
    assert status == 422
    fields = {f["field"]: f["message"] for f in body["error"]["fields"]}
    assert "must be lower than highPercent" in fields["spec.evictionWatermarks.cpu.lowPercent"]
    assert "150" in fields["spec.overselling.ratioPercent"] and "100" in fields["spec.overselling.ratioPercent"]
    after = http("GET", f"{console}/api/v1/policy", users["viewer"])[2]
    # generation and spec, not resourceVersion: the manager may write the policy's status meanwhile
    assert (after["generation"], after["spec"]) == (before["generation"], before["spec"])
    status, _, body = http("PUT", f"{console}/api/v1/policy", users["editor"], {"spec": {}, "extra": 1})
    assert status == 422 and body["error"]["fields"][0]["field"] == "extra"


def test_a_valid_policy_is_written_and_its_rollout_lists_the_colocation_nodes(console, users, nodes, lab_api):
    custom = client.CustomObjectsApi(lab_api)
    group = (qos.API_GROUP, qos.API_VERSION, "colocationpolicies")
    before = http("GET", f"{console}/api/v1/policy", users["viewer"])[2]
    spec = before["spec"]
    spec["features"]["cpuBurst"]["enabled"] = not spec["features"]["cpuBurst"]["enabled"]
    try:
        status, _, body = http("PUT", f"{console}/api/v1/policy", users["editor"], {"spec": spec})
        assert status == 200, body
        assert body["message"] == f"policy updated: generation {body['generation']}"
        stored = custom.get_cluster_custom_object(*group, "default")
        assert stored["spec"]["features"]["cpuBurst"]["enabled"] == spec["features"]["cpuBurst"]["enabled"]
        # A partial spec is merged into the stored one (issue 20): what it does not send is kept.
        ratio = 45 if spec["overselling"]["ratioPercent"] != 45 else 46
        status, _, body = http("PUT", f"{console}/api/v1/policy", users["editor"],
                               {"spec": {"overselling": {"ratioPercent": ratio}}})
        assert status == 200, body
        assert body["spec"] == {**spec, "overselling": {**spec["overselling"], "ratioPercent": ratio}}
        # A stale resourceVersion is a conflict, not a silent overwrite.
        status, _, _ = http("PUT", f"{console}/api/v1/policy", users["editor"],
                            {"spec": before["spec"], "resourceVersion": before["resourceVersion"] or "1"})
        assert status == 409
        _, _, rollout = http("GET", f"{console}/api/v1/policy/rollout", users["viewer"])
        assert rollout["generation"] == body["generation"]
        row = next(r for r in rollout["nodes"] if r["name"] == nodes["oversold"])
        assert not row["upToDate"] and row["reason"]
        assert row["mode"] == "colocation+oversubscription" and row["replayed"] is False
        assert nodes["plain"] not in {r["name"] for r in rollout["nodes"]}
    finally:
        spec["features"]["cpuBurst"]["enabled"] = not spec["features"]["cpuBurst"]["enabled"]
        if before["exists"]:
            put_spec(custom, (*group, "default"), before["spec"])
        else:
            custom.delete_cluster_custom_object(*group, "default")


def test_monitoring_reads_the_components_metrics_through_prometheus(console, users, nodes, components, prometheus):
    node = nodes["oversold"]

    def scraped():
        return (promql(prometheus, f'tidal_qos_cpu_usage_millicores{{node="{node}",qos="LS"}} > 0')
                and promql(prometheus, f'tidal_node_batch_allocatable{{node="{node}",resource="cpu"}} > 0')
                and promql(prometheus, 'tidal_console_requests_total{component="tidal-console"}'))
    wait_for(scraped, 90, f"Prometheus to scrape the replayed agent, the master and the console "
                          f"(exporter log: {components['log']})")
    time.sleep(6)  # one more scrape: a range query needs two points to draw a line
    status, _, body = http("GET", f"{console}/api/v1/monitoring/nodes/{node}?step=5&start={time.time() - 300:.0f}",
                           users["viewer"])
    assert status == 200 and body["scope"] == "node" and body["node"] == node
    charts = {p["name"]: p for p in body["panels"]}
    assert set(charts) == {"cpuByQoS", "memoryByQoS", "nodeCPU", "nodeMemory", "batchCPU", "batchMemory",
                           "evictions", "psi"}  # the node and workload counts are the cluster view's
    ls = next(s for s in charts["cpuByQoS"]["series"] if s["name"] == "LS")
    assert [v for _, v in ls["points"] if v] and all(1000 <= v <= 6000 for _, v in ls["points"] if v)
    assert {s["name"] for s in charts["cpuByQoS"]["series"]} == {"HLS", "LS", "BE"}
    assert "allocatable" in {s["name"] for s in charts["batchCPU"]["series"]}

    _, _, cluster = http("GET", f"{console}/api/v1/monitoring/cluster?start={time.time() - 300:.0f}",
                         users["viewer"])
    per_node = next(p for p in cluster["panels"] if p["name"] == "nodeCPU")
    assert node in {s["name"] for s in per_node["series"]}

    # The recording rules run on the same data.
    wait_for(lambda: promql(prometheus, 'tidal:qos_cpu_usage_millicores:sum{qos="LS"} > 0'), 45,
             "the recording rule tidal:qos_cpu_usage_millicores:sum (evaluated every 15 s)")

    # Bad ranges name the parameter and the rule.
    for query, field in (("step=0", "step"), ("start=200&end=100", "start"), ("end=yesterday", "end"),
                         ("start=0&end=9999999&step=1", "start")):
        status, _, body = http("GET", f"{console}/api/v1/monitoring/cluster?{query}", users["viewer"])
        assert status == 400 and body["error"]["fields"][0]["field"] == field, (query, body)
    status, _, body = http("GET", f"{console}/api/v1/monitoring/nodes/x%22%20or%20vector(1)", users["viewer"])
    assert status == 400 and body["error"]["fields"][0]["field"] == "node"  # no PromQL injection


def test_the_overview_says_why_a_be_pod_is_pending_and_lists_tidal_events(console, users, nodes, lab_api):
    """Issue 16: the overview answers "is it working, and if not why" from the cluster's state."""
    core = client.CoreV1Api(lab_api)
    namespace = users["namespace"]
    status, _, body = http("GET", f"{console}/api/v1/overview", users["nobody"])
    assert status == 403 and "may not list nodeprofiles" in body["error"]["message"]
    # A BE pod no node can take: whether or not Tidal's webhook adds its oversubscription
    # affinity, no node matches the selector, so no scheduler binds it.
    pod = core.create_namespaced_pod(namespace, {
        "metadata": {"name": "be-nowhere", "annotations": {qos.QOS_ANNOTATION: "BE"}},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": f"{nodes['plain']}-absent"},
                 "containers": [{"name": "main", "image": "busybox",
                                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                               "limits": {"cpu": "100m", "memory": "64Mi"}}}]}})
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    core.create_namespaced_event(namespace, {
        "metadata": {"generateName": "be-nowhere.tidal-"}, "reason": "TidalEvicted", "type": "Warning",
        "message": "test: cpu usage above the high watermark", "firstTimestamp": now, "lastTimestamp": now,
        "count": 1, "source": {"component": "tidal-agent", "host": nodes["oversold"]},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "be-nowhere", "namespace": namespace,
                           "uid": pod.metadata.uid}})
    try:
        status, _, body = http("GET", f"{console}/api/v1/overview", users["viewer"])
        assert status == 200, body
        rows = {n["name"]: n for n in body["nodes"]}
        assert rows[nodes["oversold"]]["mode"] == "colocation+oversubscription"
        assert rows[nodes["plain"]]["mode"] == "off"
        pending = {(p["namespace"], p["name"]): p for p in body["bePods"]["pendingPods"]}
        mine = pending.get((namespace, "be-nowhere"))
        assert mine is not None or body["bePods"]["truncated"], body["bePods"]
        if mine is not None:
            assert mine["reason"] == "NoNodeInMode", mine
        event = next(e for e in body["events"]["items"] if e["object"]["name"] == "be-nowhere")
        assert (event["reason"], event["node"], event["source"]) == ("TidalEvicted", nodes["oversold"], "tidal-agent")
        assert body["limits"] == {"pendingPods": 50, "events": 50}
    finally:
        core.delete_namespaced_pod("be-nowhere", namespace, grace_period_seconds=0)


def test_the_workflow_shows_what_the_roles_write(console, users):
    assert http("GET", f"{console}/api/v1/workflow", users["nobody"])[0] == 403
    status, _, body = http("GET", f"{console}/api/v1/workflow", users["viewer"])
    assert status == 200
    sources = [s["source"] for step in body["steps"] for s in step["snippets"]]
    assert sources == ["roles/kubelet_cpu_manager", "roles/containerd_nri", "example"]


def test_monitoring_filters_to_several_nodes(console, users, nodes, components, prometheus):
    wanted = sorted(nodes.values())
    wait_for(lambda: all(promql(prometheus, f'tidal_node_cpu_usage_millicores{{node="{n}"}}') for n in wanted), 90,
             f"Prometheus to scrape both test nodes (exporter log: {components['log']})")
    status, _, body = http("GET", f"{console}/api/v1/monitoring/cluster?nodes={','.join(wanted)}"
                                  f"&start={time.time() - 300:.0f}", users["viewer"])
    assert status == 200 and body["nodes"] == wanted
    charts = {p["name"]: p for p in body["panels"]}
    assert {s["name"] for s in charts["nodeCPU"]["series"]} == set(wanted)
    assert {"nodeCounts", "workloadCounts"} <= set(charts)
    reporting = next(s for s in charts["nodeCounts"]["series"] if s["name"] == "reporting")
    assert max(v for _, v in reporting["points"] if v is not None) == 2
    for query in ("nodes=", "nodes=A", f"nodes={wanted[0]},,{wanted[1]}"):
        status, _, body = http("GET", f"{console}/api/v1/monitoring/cluster?{query}", users["viewer"])
        assert status == 400 and body["error"]["fields"][0]["field"] == "nodes", (query, body)


def test_the_console_exports_its_own_metrics(console, users):
    http("GET", f"{console}/api/v1/nodes")
    status, _, text = http("GET", f"{console}/metrics")
    assert status == 200
    assert 'tidal_console_auth_denials_total{reason="unauthenticated"}' in text
    assert 'tidal_console_requests_total{code="401",method="GET",route="/api/v1/nodes"}' in text


def test_monitoring_without_prometheus_is_a_clear_502(lab, crds, users, artefacts):
    from tidal_dev.lab import processes
    from tidal_dev.lab.ports import free_ports

    from .conftest import BIN, _up
    port, dead = free_ports(2)
    record = processes.start("tidal-console-no-prometheus", [
        str(BIN / "tidal-console"), "serve", "--kubeconfig", str(lab.kubeconfig_path),
        "--prometheus-url", f"http://127.0.0.1:{dead}", "--port", str(port)], artefacts / "console-no-prometheus.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _up(url), 30, f"tidal-console on {url}")
        status, _, body = http("GET", f"{url}/api/v1/monitoring/cluster", users["viewer"])
        assert status == 502 and f"Prometheus at http://127.0.0.1:{dead} did not answer" in body["error"]["message"]
        assert "tidal_console_prometheus_errors_total 1.0" in http("GET", f"{url}/metrics")[2]
    finally:
        processes.stop(record)


def _raw(method: str, url: str, token: str, data: bytes):
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.mark.parametrize("data, status, message", [
    pytest.param(b'{"spec": {"x": "' + b"a" * (1024 * 1024) + b'"}}', 413, "larger than 1048576 bytes",
                 id="oversized"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply", id="deeply-nested"),
    pytest.param(b"[1, 2]", 400, "must be a JSON object", id="an-array"),
    pytest.param(b'"spec"', 400, "must be a JSON object", id="a-string"),
    pytest.param(b"12", 400, "must be a JSON object", id="a-number"),
    pytest.param(b"{spec: 1}", 400, "not valid JSON", id="not-json"),
    pytest.param("{\"spec\": \"\udc80\"}".encode("utf-8", "surrogatepass"), 400, "not valid JSON", id="not-utf-8"),
])
def test_every_write_endpoint_refuses_a_bad_body_with_a_clear_error_and_changes_nothing(
        console, users, nodes, lab_api, data, status, message):
    core = client.CoreV1Api(lab_api)
    before = http("GET", f"{console}/api/v1/policy", users["viewer"])[2]
    node = nodes["plain"]
    labels_before = core.read_node(node).metadata.labels
    for url in (f"{console}/api/v1/policy?dryRun=All", f"{console}/api/v1/nodes/{node}/colocation?dryRun=All",
                f"{console}/api/v1/policy", f"{console}/api/v1/nodes/{node}/colocation"):
        got, body = _raw("PUT", url, users["editor"], data)
        assert (got, body["error"]["code"]) == (status, status), (url, body)
        assert message in body["error"]["message"], (url, body)
        assert body["error"]["fields"][0]["field"] == "body"
    after = http("GET", f"{console}/api/v1/policy", users["viewer"])[2]
    assert (after["generation"], after["spec"]) == (before["generation"], before["spec"])
    assert core.read_node(node).metadata.labels == labels_before
