"""The admission webhook registered with the real kube-apiserver over TLS."""
import copy
import json
import sys
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.utils import parse_quantity

from tidal.api import qos
from tidal_dev.lab import processes
from tidal_dev.lab.apply import create_or_replace_all
from tidal_dev.lab.ports import free_ports
from tidal_dev.lab.pki import ensure_ca, issue
from tidal_dev.lab.pytest_plugin import wait_for
from tidal.manager.admission.configuration import WEBHOOK_NAME, webhook_configurations

pytestmark = pytest.mark.lab

MANAGER = str(Path(sys.executable).with_name("tidal-manager"))
OVERSOLD_NODES = ("lab-node-1", "lab-node-2")
PLAIN_NODE = "lab-node-0"
BATCH = {qos.BATCH_CPU_RESOURCE: "8000", qos.BATCH_MEMORY_RESOURCE: str(32 * 1024**3)}



class Manager:
    """tidal-manager as a local process serving the webhook with a lab-CA certificate."""

    def __init__(self, lab, workdir):
        ca = ensure_ca(lab.dir / "pki")
        self.cert = issue(ca, workdir, "webhook", "tidal-manager.tidal-system.svc", server=True,
                          dns_names=("localhost",), ip_addresses=("127.0.0.1",))
        self.ca_pem = ca.cert.read_bytes()
        self.port, self.health_port = free_ports(2)
        self.log = workdir / "tidal-manager.log"
        self.record = None

    @property
    def url(self):
        return f"https://127.0.0.1:{self.port}"

    def start(self):
        self.record = processes.start("tidal-manager", [
            MANAGER, "--webhook-cert-file", str(self.cert.cert), "--webhook-key-file", str(self.cert.key),
            "--webhook-address", "127.0.0.1", "--webhook-port", str(self.port),
            "--health-address", "127.0.0.1", "--health-port", str(self.health_port)], self.log)
        wait_for(self.ready, 30, "tidal-manager /readyz")

    def ready(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=1) as r:
                return r.status == 200
        except OSError:
            assert processes.alive(self.record), self.log.read_text()
            return False

    def stop(self):
        if self.record:
            processes.stop(self.record)

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/metrics", timeout=2) as r:
            return r.read().decode()


@pytest.fixture(scope="module")
def manager(lab, lab_api, tmp_path_factory):
    create_or_replace_all(lab_api, qos.priority_class_manifests())
    mgr = Manager(lab, tmp_path_factory.mktemp("manager"))
    mgr.start()
    create_or_replace_all(lab_api, webhook_configurations(mgr.ca_pem, url=mgr.url))
    yield mgr
    admission = client.AdmissionregistrationV1Api(lab_api)
    admission.delete_mutating_webhook_configuration(WEBHOOK_NAME)
    admission.delete_validating_webhook_configuration(WEBHOOK_NAME)
    mgr.stop()


@pytest.fixture(scope="module")
def oversold_nodes(lab_api):
    """Two lab nodes with both Tidal labels and batch resources; lab-node-0 stays plain."""
    core = client.CoreV1Api(lab_api)
    labels = {qos.COLOCATION_NODE_LABEL: "true", qos.OVERSUBSCRIPTION_NODE_LABEL: "true"}
    escaped = {k.replace("/", "~1"): v for k, v in BATCH.items()}
    for name in OVERSOLD_NODES:
        core.patch_node(name, {"metadata": {"labels": labels}})
        ops = [{"op": "add", "path": f"/status/{field}/{key}", "value": value}
               for field in ("capacity", "allocatable") for key, value in escaped.items()]
        core.api_client.call_api(f"/api/v1/nodes/{name}/status", "PATCH", body=ops,
                                 header_params={"Content-Type": "application/json-patch+json"},
                                 auth_settings=["BearerToken"], response_type="object")
    yield OVERSOLD_NODES
    for name in OVERSOLD_NODES:
        core.patch_node(name, {"metadata": {"labels": {k: None for k in labels}}})
        ops = [{"op": "remove", "path": f"/status/{field}/{key}"}
               for field in ("capacity", "allocatable") for key in escaped]
        core.api_client.call_api(f"/api/v1/nodes/{name}/status", "PATCH", body=ops,
                                 header_params={"Content-Type": "application/json-patch+json"},
                                 auth_settings=["BearerToken"], response_type="object")


def _pod(name, level=None, *, cpu="1", memory="1Gi", limits=None, annotation=qos.QOS_ANNOTATION, **spec):
    resources = {"requests": {"cpu": cpu, "memory": memory}}
    if limits:
        resources["limits"] = limits
    meta = {"name": name}
    if level:
        meta["annotations"] = {annotation: level}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "main", "image": "registry.invalid/app:1",
                                     "resources": resources}], **spec}}


def _denied(create, body):
    with pytest.raises(ApiException) as err:
        create(body)
    return json.loads(err.value.body)["message"]


def test_be_pod_is_stored_mutated_for_oversold_nodes(manager, core, namespace):
    stored = core.create_namespaced_pod(namespace, _pod("batch", "BE", cpu="2", memory="1Gi",
                                                        limits={"cpu": "3", "memory": "2Gi"}))
    spec = stored.spec
    assert spec.scheduler_name == "volcano"
    assert spec.priority_class_name == "tidal-be"
    assert spec.priority == qos.PRIORITY_CLASS_BY_LEVEL[qos.QoSLevel.BE].value
    resources = spec.containers[0].resources
    # The API server stores quantities canonically ("3000" millicores comes back as "3k").
    requests = {k: parse_quantity(v) for k, v in resources.requests.items()}
    assert requests == {qos.BATCH_CPU_RESOURCE: 3000, qos.BATCH_MEMORY_RESOURCE: 2 * 1024**3}
    assert resources.limits == resources.requests
    terms = spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    # issue 19: oversold nodes with or without the colocation label
    assert {(e.key, e.operator, tuple(e.values)) for e in terms[0].match_expressions} == {
        (qos.OVERSUBSCRIPTION_NODE_LABEL, "In", ("true",))}


def test_be_pod_opted_out_of_overselling_is_stored_with_native_requests(manager, core, namespace):
    """colocation.tidal.io/oversell: "false" on the pod: native requests kept, colocation nodes
    required, oversold ones preferred; no batch-resources annotation."""
    body = _pod("native-batch", "BE", cpu="2", memory="1Gi", limits={"cpu": "3", "memory": "2Gi"})
    body["metadata"]["annotations"]["colocation.tidal.io/oversell"] = "false"
    stored = core.create_namespaced_pod(namespace, body)
    assert (stored.spec.scheduler_name, stored.spec.priority_class_name) == ("volcano", "tidal-be")
    resources = stored.spec.containers[0].resources
    assert {k: parse_quantity(v) for k, v in resources.requests.items()} == {"cpu": 2, "memory": 1024**3}
    assert qos.BATCH_RESOURCES_ANNOTATION not in (stored.metadata.annotations or {})
    node_affinity = stored.spec.affinity.node_affinity
    terms = node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    assert [(e.key, e.operator, e.values) for e in terms[0].match_expressions] == [
        (qos.COLOCATION_NODE_LABEL, "In", ["true"])]
    preferred = node_affinity.preferred_during_scheduling_ignored_during_execution
    assert [(p.weight, p.preference.match_expressions[0].key) for p in preferred] == [
        (50, qos.OVERSUBSCRIPTION_NODE_LABEL)]


@pytest.mark.parametrize("level, annotation, priority_class", [
    ("HLS", qos.QOS_ANNOTATION, "tidal-hls"),
    ("LS", qos.QOS_ANNOTATION, "tidal-ls"),
    ("LC", qos.VOLCANO_QOS_ANNOTATION, "tidal-hls"),
    ("LS", qos.OPENFUYAO_QOS_ANNOTATION, "tidal-ls"),
])
def test_online_pod_gets_its_priority_and_tolerates_the_evicting_taint(manager, core, namespace,
                                                                      level, annotation, priority_class):
    body = _pod("online", level, cpu="2", memory="1Gi", limits={"cpu": "2", "memory": "1Gi"},
                annotation=annotation)
    stored = core.create_namespaced_pod(namespace, body)
    assert stored.spec.priority_class_name == priority_class
    # The Priority admission plugin runs before webhooks: the stored priority must match the class.
    expected = next(p.value for p in qos.PRIORITY_CLASS_BY_LEVEL.values() if p.name == priority_class)
    assert stored.spec.priority == expected
    assert stored.spec.scheduler_name == "volcano"
    assert any(t.key == qos.OFFLINE_EVICTING_TAINT_KEY and t.effect == "NoSchedule"
               for t in stored.spec.tolerations)
    assert stored.spec.containers[0].resources.requests == {"cpu": "2", "memory": "1Gi"}


def test_pod_without_qos_annotation_is_stored_untouched(manager, core, namespace):
    stored = core.create_namespaced_pod(namespace, _pod("plain"))
    assert stored.spec.scheduler_name == "default-scheduler"
    assert stored.spec.priority_class_name is None


def test_invalid_pods_are_refused_with_the_rule(manager, core, namespace):
    create = lambda body: core.create_namespaced_pod(namespace, body)  # noqa: E731
    message = _denied(create, _pod("bad-hls", "HLS", cpu="500m", limits={"cpu": "1", "memory": "1Gi"}))
    assert 'container "main": HLS requires requests.cpu == limits.cpu (got 500m / 1)' in message
    message = _denied(create, _pod("bad-level", "GOLD"))
    assert qos.QOS_ANNOTATION in message and "GOLD" in message and "HLS, LS, BE" in message
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("bad-hls", namespace)
    assert err.value.status == 404


def test_dry_run_is_answered_like_a_real_create(manager, core, namespace):
    stored = core.create_namespaced_pod(namespace, _pod("dry", "BE"), dry_run="All")
    assert stored.spec.scheduler_name == "volcano"
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("dry", namespace)
    assert err.value.status == 404


def test_changing_a_pods_qos_level_is_refused(manager, core, namespace):
    core.create_namespaced_pod(namespace, _pod("web", "LS"))
    patch = {"metadata": {"annotations": {qos.QOS_ANNOTATION: "BE"}}}
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("web", namespace, patch)
    assert err.value.status in (400, 403, 422) and "LS" in err.value.body and "BE" in err.value.body


def test_workload_with_a_bad_pod_template_is_refused_at_creation(manager, lab_api, namespace):
    apps = client.AppsV1Api(lab_api)
    template = {"metadata": {"labels": {"app": "web"}, "annotations": {qos.QOS_ANNOTATION: "HLS"}},
                "spec": _pod("x", cpu="1500m", limits={"cpu": "1500m", "memory": "1Gi"})["spec"]}
    template["spec"]["containers"][0]["resources"]["requests"]["memory"] = "1Gi"
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": template}}
    message = _denied(lambda body: apps.create_namespaced_deployment(namespace, body), deployment)
    assert "spec.template" in message and 'container "main"' in message and "whole number of CPUs" in message


def test_volcano_binds_be_pods_only_to_oversold_nodes(manager, oversold_nodes, core, namespace):
    # Kept to kwok's nodes: their image does not exist, so on the lab's real node (a plain node,
    # which HLS and LS pods prefer) they would never run (found by the CI: ls-2 Pending there).
    kwok = {"type": "kwok"}
    for index in range(6):
        core.create_namespaced_pod(namespace, _pod(f"be-{index}", "BE", cpu="1", memory="1Gi", nodeSelector=kwok))
    core.create_namespaced_pod(namespace, _pod("ls-plain", "LS", nodeSelector={"kubernetes.io/hostname": PLAIN_NODE}))
    for index in range(3):
        core.create_namespaced_pod(namespace, _pod(f"ls-{index}", "LS", nodeSelector=kwok))

    def placements():
        pods = core.list_namespaced_pod(namespace).items
        if len(pods) == 10 and all(p.status.phase == "Running" for p in pods):
            return {p.metadata.name: p.spec.node_name for p in pods}
        return None

    def pods_and_nodes():
        lines = []
        for p in core.list_namespaced_pod(namespace).items:
            conditions = "; ".join(f"{c.type}={c.status} {c.reason or ''} {c.message or ''}".strip()
                                   for c in p.status.conditions or [])
            lines.append(f"pod {p.metadata.name}: {p.status.phase} on {p.spec.node_name} [{conditions}]")
        for n in core.list_node().items:
            labels = {k: v for k, v in (n.metadata.labels or {}).items() if "colocation" in k or "oversubscription" in k}
            batch = {k: v for k, v in (n.status.allocatable or {}).items() if "batch" in k}
            lines.append(f"node {n.metadata.name}: labels {labels} taints "
                         f"{[(t.key, t.effect) for t in n.spec.taints or []]} batch {batch}")
        return "\n".join(lines)

    placed = wait_for(placements, 300, "all 10 pods Running", interval=1, describe=pods_and_nodes)
    assert {placed[f"be-{i}"] for i in range(6)} <= set(oversold_nodes), placed
    assert placed["ls-plain"] == PLAIN_NODE


def test_pod_created_while_the_webhook_is_down_is_admitted_unmutated(manager, core, namespace):
    manager.stop()
    try:
        stored = core.create_namespaced_pod(namespace, _pod("during-outage", "BE"))
        # failurePolicy Ignore: stored as written; it runs as an ordinary, fully accounted pod.
        assert stored.spec.scheduler_name == "default-scheduler"
        assert stored.spec.containers[0].resources.requests == {"cpu": "1", "memory": "1Gi"}
    finally:
        manager.start()
    stored = core.create_namespaced_pod(namespace, _pod("after-outage", "BE"))
    assert stored.spec.scheduler_name == "volcano"


def test_webhook_metrics_count_reviews_and_denials(manager, core, namespace):
    core.create_namespaced_pod(namespace, _pod("counted", "LS"))
    with pytest.raises(ApiException):
        core.create_namespaced_pod(namespace, _pod("refused", "GOLD"))
    text = manager.metrics()
    assert 'tidal_admission_requests_total{allowed="true",kind="Pod",operation="CREATE",webhook="mutate"}' in text
    assert "tidal_admission_denials_total" in text
    assert "tidal_admission_review_duration_seconds_bucket" in text
