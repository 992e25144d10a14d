"""Acceptance of the lab: a real control plane where Volcano schedules and preempts."""
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tidal.api import qos
from tidal_dev.lab.apply import create_or_replace_all
from tidal_dev.lab.components import KWOK_NODE_ANNOTATION, KWOK_NODE_ANNOTATION_VALUE

from tidal_dev.lab.pytest_plugin import wait_for

pytestmark = pytest.mark.lab


def _pod(name, *, cpu, priority_class=None, pool=None):
    spec = {
        "schedulerName": qos.SCHEDULER_NAME,
        "containers": [{"name": "main", "image": "registry.invalid/fake:1",
                        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if pool:
        spec["nodeSelector"] = {"tidal-test/pool": pool}
        spec["tolerations"] = [{"key": "tidal-test/pool", "operator": "Equal", "value": pool,
                                "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _running_on(core, namespace, name):
    try:
        pod = core.read_namespaced_pod(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return pod.spec.node_name if pod.status.phase == "Running" else None


def test_three_kwok_nodes_are_ready(lab, core):
    nodes = {n.metadata.name: n for n in core.list_node().items}
    lab_nodes = [n for name, n in nodes.items() if name.startswith("lab-node-")]
    assert len(lab_nodes) >= 3
    for node in lab_nodes:
        ready = {c.type: c.status for c in node.status.conditions}["Ready"]
        assert ready == "True", node.metadata.name
        assert node.status.allocatable["cpu"] == "16"
        assert node.metadata.annotations[KWOK_NODE_ANNOTATION] == KWOK_NODE_ANNOTATION_VALUE


def test_volcano_binds_a_pod_and_kwok_runs_it(core, namespace):
    core.create_namespaced_pod(namespace, _pod("web", cpu="500m"))
    node = wait_for(lambda: _running_on(core, namespace, "web"), 60, "pod web Running")
    assert node.startswith("lab-node-")
    pod = core.read_namespaced_pod("web", namespace)
    # Volcano's controller made a PodGroup for the plain pod and its scheduler bound it.
    assert pod.metadata.annotations.get("scheduling.k8s.io/group-name")
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=web").items
    assert any(e.reason == "Scheduled" and e.source.component == "volcano" for e in events), \
        [(e.reason, e.source.component) for e in events]


@pytest.fixture
def small_node(core):
    """A 4-CPU kwok node reserved (by taint) for the test that fills it."""
    name = "preempt-node"
    body = {
        "metadata": {"name": name,
                     "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE},
                     "labels": {"kubernetes.io/hostname": name, "tidal-test/pool": "preempt"}},
        "spec": {"taints": [{"key": "tidal-test/pool", "value": "preempt", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                   "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    }
    try:
        core.create_node(body)
    except ApiException as err:
        if err.status != 409:
            raise

    def ready():
        node = core.read_node(name)
        return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

    wait_for(ready, 60, f"node {name} Ready")
    yield name
    core.delete_node(name)


def test_higher_priority_pod_preempts_a_lower_one_on_a_full_node(lab_api, core, namespace, small_node):
    create_or_replace_all(lab_api, qos.priority_class_manifests())
    core.create_namespaced_pod(namespace, _pod("offline", cpu="3", priority_class="tidal-be", pool="preempt"))
    assert wait_for(lambda: _running_on(core, namespace, "offline"), 60, "offline Running") == small_node

    # 3 of 4 CPUs are taken: the online pod fits only if the offline pod goes.
    core.create_namespaced_pod(namespace, _pod("online", cpu="3", priority_class="tidal-ls", pool="preempt"))
    assert wait_for(lambda: _running_on(core, namespace, "online"), 120, "online Running") == small_node

    def offline_gone():
        try:
            pod = core.read_namespaced_pod("offline", namespace)
        except ApiException as err:
            return err.status == 404
        return pod.metadata.deletion_timestamp is not None and pod.status.phase != "Running"

    wait_for(offline_gone, 60, "offline pod evicted")
    # The Priority admission plugin resolved the class into the stored pod's priority.
    stored = core.read_namespaced_pod("online", namespace)
    assert stored.spec.priority == qos.PRIORITY_CLASS_BY_LEVEL[qos.QoSLevel.LS].value


def test_prometheus_scrapes_every_lab_target(lab):
    import json
    import urllib.parse
    import urllib.request

    def targets_up():
        query = urllib.parse.urlencode({"query": "up"})
        with urllib.request.urlopen(f"{lab.prometheus_url}/api/v1/query?{query}", timeout=5) as r:
            result = json.load(r)["data"]["result"]
        jobs = {s["metric"]["job"]: s["value"][1] for s in result}
        expected = {"prometheus", "etcd", "kube-apiserver", "volcano-scheduler",
                    "volcano-controller-manager", "kwok"}
        return jobs if expected <= set(jobs) and all(jobs[j] == "1" for j in expected) else None

    jobs = wait_for(targets_up, 60, "every scrape target up", interval=2)
    assert jobs["kube-apiserver"] == "1"
