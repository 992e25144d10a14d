"""The node-mode matrix end to end, one row at a time (issue 19, DESIGN.md "Node modes").

Scheduling: four kwok nodes, one per row, and the admission webhook with Volcano: BE pods that
use batch resources land only on oversubscription nodes (with or without colocation), BE pods
that keep native requests only on colocation nodes, nothing of BE on a node with neither label.

Eviction: tidal-agent on a kwok node standing for this machine (its real cgroups, as in
test_agent_qos.py), BE pods spinning above the high watermark: the colocation-only and the
colocation+oversubscription rows evict, the oversubscription-only row does not while the node's
requests are at or below 100 % of allocatable and does once they are above, and a node with
neither label is left alone.
"""
from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tidal.api import qos
from tidal.api.node_mode import OVERSELL_ANNOTATION
from tidal_dev.lab import processes
from tidal_dev.lab.ports import free_port
from tidal_dev.lab.pytest_plugin import wait_for
from tidal_dev.testing.kwok import kwok_node

pytestmark = pytest.mark.lab
sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_fixtures import (CPUS, _agent, _be, _busy_percent, _pod, create_machine_node,  # noqa: E402,F401
                            delete_machine_node, hierarchy, kubelet)
from test_admission_e2e import manager  # noqa: E402,F401  (the webhook as a lab process)

CO, OV = qos.COLOCATION_NODE_LABEL, qos.OVERSUBSCRIPTION_NODE_LABEL
ROWS = {
    "off": {},
    "colocation": {CO: "true"},
    "oversubscription": {OV: "true"},
    "colocation+oversubscription": {CO: "true", OV: "true"},
}
GROUP = "tidal-test/node-modes"


def _profile(lab_api, node):
    try:
        return client.CustomObjectsApi(lab_api).get_cluster_custom_object(
            qos.API_GROUP, qos.API_VERSION, "nodeprofiles", node)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


# --- scheduling: which BE pods go where --------------------------------------------------------


@pytest.fixture
def mode_nodes(core):
    """One kwok node per row, all in one test group (a label the pods select, so the lab's other
    nodes never take them); the oversubscription nodes carry batch resources."""
    group = uuid.uuid4().hex[:6]
    names = {}
    for row, labels in ROWS.items():
        name = f"mode-{row.replace('+', '-')}-{group}"
        capacity = {"cpu": "8", "memory": str(16 << 30), "pods": "110"}
        if OV in labels:
            capacity |= {qos.BATCH_CPU_RESOURCE: "8000", qos.BATCH_MEMORY_RESOURCE: str(16 << 30)}
        kwok_node(core, name, capacity, {**labels, GROUP: group})
        names[row] = name
    yield group, names
    for name in names.values():
        core.delete_node(name)


def _placements(core, namespace, expected):
    pods = core.list_namespaced_pod(namespace).items
    if len(pods) == expected and all(p.status.phase == "Running" for p in pods):
        return {p.metadata.name: p.spec.node_name for p in pods}
    return None


def test_be_pods_land_on_the_nodes_their_mode_allows(manager, mode_nodes, core, namespace):  # noqa: F811
    group, nodes = mode_nodes
    select = {"nodeSelector": {GROUP: group}}
    pinned = {"nodeSelector": {GROUP: group, "kubernetes.io/hostname": nodes["oversubscription"]}}
    bodies = [_admitted(f"be-batch-{index}", **select) for index in range(4)]
    bodies.append(_admitted("be-batch-ov", **pinned))
    bodies += [_admitted(f"be-native-{index}", native=True, **select) for index in range(4)]
    bodies.append(_admitted("be-native-ov", native=True, **pinned))
    for body in bodies:
        core.create_namespaced_pod(namespace, body)
    stored = core.read_namespaced_pod("be-native-0", namespace).spec
    assert stored.containers[0].resources.requests == {"cpu": "500m", "memory": "256Mi"}, \
        "an opted-out BE pod keeps its native requests"
    stored = core.read_namespaced_pod("be-batch-0", namespace).spec
    assert set(stored.containers[0].resources.requests) == {qos.BATCH_CPU_RESOURCE, qos.BATCH_MEMORY_RESOURCE}

    def placed_but_one():
        pods = {p.metadata.name: p for p in core.list_namespaced_pod(namespace).items}
        running = {n: p.spec.node_name for n, p in pods.items() if p.status.phase == "Running"}
        return running if len(running) == len(bodies) - 1 else None

    placed = wait_for(placed_but_one, 120, "every BE pod but be-native-ov Running", interval=1)
    oversold = {nodes["oversubscription"], nodes["colocation+oversubscription"]}
    colocation = {nodes["colocation"], nodes["colocation+oversubscription"]}
    assert {placed[f"be-batch-{i}"] for i in range(4)} <= oversold, placed
    assert {placed[f"be-native-{i}"] for i in range(4)} <= colocation, placed
    # the new row: an oversubscription-only node takes BE pods on batch resources...
    assert placed["be-batch-ov"] == nodes["oversubscription"], placed
    # ...but not BE pods that keep native requests: those need colocation (BE isolation)
    assert "be-native-ov" not in placed
    assert not core.read_namespaced_pod("be-native-ov", namespace).spec.node_name
    assert nodes["off"] not in set(placed.values()), placed


def _admitted(name, native=False, **spec):
    """A BE pod as a user writes it (native requests), to be mutated by the webhook."""
    body = _pod("", name, "BE", {"cpu": "500m", "memory": "256Mi"})
    del body["spec"]["nodeName"]
    del body["spec"]["tolerations"]
    body["spec"].update(spec)
    if native:
        body["metadata"]["annotations"][OVERSELL_ANNOTATION] = "false"
    return body


# --- eviction: the rule of each row -----------------------------------------------------------


@pytest.fixture
def machine_node(core, lab_api, request):
    """A kwok node standing for this machine, labelled as the test's row says."""
    name = create_machine_node(core, lab_api, ROWS[request.param])
    yield request.param, name
    delete_machine_node(core, lab_api, name)


def _tainted(core, node):
    taints = core.read_node(node).spec.taints or []
    return any(t.key == qos.OFFLINE_EVICTING_TAINT_KEY for t in taints)


@pytest.mark.parametrize("machine_node", list(ROWS), indirect=True)
def test_eviction_follows_the_rule_of_the_nodes_row(lab, lab_api, core, namespace, machine_node, kubelet,
                                                    policy, tmp_path):
    row, node = machine_node
    policy({"beIsolation": {"cpuSuppression": {"enabled": False}}})
    baseline = _busy_percent()
    if baseline > 35:
        pytest.skip(f"this machine is too busy for a watermark test: {baseline:.0f} % CPU before the pods start")
    # Two BE pods spin at 0.6 CPU each: 1.2 CPUs above the machine's own load. High = own load +
    # 0.5 CPU, low = own load + 0.25 CPU: at least one must go (both, on a quiet machine).
    high, low = round(baseline + 100 * 0.5 / CPUS), round(baseline + 100 * 0.25 / CPUS)
    core.patch_node(node, {"metadata": {"annotations": {
        "colocation.tidal.io/eviction-cpu-high-percent": str(high),
        "colocation.tidal.io/eviction-cpu-low-percent": str(low),
        "colocation.tidal.io/eviction-memory-high-percent": "99", "colocation.tidal.io/eviction-memory-low-percent": "98",
        "colocation.tidal.io/eviction-dwell-seconds": "2", "colocation.tidal.io/eviction-cooldown-seconds": "2"}}})
    workers = {}
    for name in ("be-a", "be-b"):
        dirs = kubelet.run_pod(core, namespace, _be(node, name, 600)).dirs
        workers[name] = kubelet.spin(dirs)

    def remaining():
        names = {p.metadata.name for p in core.list_namespaced_pod(namespace).items
                 if p.metadata.deletion_timestamp is None}
        for name, worker in workers.items():  # the kubelet stops the containers of evicted pods
            if name not in names and worker.poll() is None:
                worker.kill()
        return names

    def reported_mode():
        status = (_profile(lab_api, node) or {}).get("status") or {}
        mode = status.get("mode") or {}
        return mode if mode.get("name") == row else None

    agent = _agent(lab, node, kubelet, tmp_path, free_port())
    log = tmp_path / "agent.log"
    try:
        mode = wait_for(reported_mode, 40, f"NodeProfile status.mode {row} (log {log})")
        assert mode["evictionRule"]
        if row in ("colocation", "colocation+oversubscription"):
            wait_for(lambda: _tainted(core, node), 40, f"offline-evicting taint (log {log})")
            wait_for(lambda: {"be-a", "be-b"} - remaining(), 60, f"a BE pod evicted (log {log})")
            return
        # off, and oversubscription-only with requests at 2 × 600m = 1.2 CPUs of CPUS: no eviction.
        # A negative is observed over a bounded window: dwell (2 s) plus several 1 s rounds.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert not _tainted(core, node), f"{row}: tainted while eviction is not allowed (log {log})"
            assert {"be-a", "be-b"} <= remaining(), f"{row}: a BE pod was evicted (log {log})"
            time.sleep(0.5)
        if row == "off":
            assert mode["evictionAllowed"] is False
            return
        mode = wait_for(lambda: (m := reported_mode()) and m.get("evictionAllowed") is False and m, 20,
                        f"evictionAllowed false with the requests in the reason (log {log})")
        assert "requests" in mode["evictionReason"], mode
        # An online pod whose requests fill the node: requests above 100 % of allocatable.
        filler = _pod(node, "online-filler", "LS", {"cpu": str(CPUS), "memory": "64Mi"})
        core.create_namespaced_pod(namespace, filler)
        wait_for(lambda: _tainted(core, node), 40, f"taint once requests pass 100 % (log {log})")
        wait_for(lambda: {"be-a", "be-b"} - remaining(), 60, f"a BE pod evicted (log {log})")
        assert "online-filler" in remaining()
    finally:
        processes.stop(agent)
        for worker in workers.values():
            if worker.poll() is None:
                worker.kill()
