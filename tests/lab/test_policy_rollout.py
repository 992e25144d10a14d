"""Policy propagation: a ColocationPolicy change reaches the agents of every colocation node at
once, and tidal-manager's policy reconciler shows the rollout in the policy's status."""
import secrets
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tidal.api import qos
from tidal.crds import crd_manifests
from tidal_dev.lab import processes
from tidal_dev.lab.apply import create_or_replace_all
from tidal_dev.lab.pki import ensure_ca, issue
from tidal_dev.lab.ports import free_ports
from tidal_dev.lab.pytest_plugin import wait_for
from tidal_dev.testing.kwok import kwok_node

pytestmark = pytest.mark.lab
BIN = Path(sys.executable).parent
POLICY = ("colocation.tidal.io", "v1alpha1", "colocationpolicies", "default")


@pytest.fixture
def nodes(core, lab_api, tidal_namespace):
    create_or_replace_all(lab_api, crd_manifests(), wait_established=True)
    names = [f"tidal-rollout-{secrets.token_hex(3)}" for _ in range(2)]
    capacity = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    for name in names:
        kwok_node(core, name, capacity, {qos.COLOCATION_NODE_LABEL: "true"})
    yield names
    custom = client.CustomObjectsApi(lab_api)
    for name in names:
        core.delete_node(name)
        try:
            custom.delete_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles", name)
        except ApiException:
            pass


def _profile_generation(custom, name):
    try:
        profile = custom.get_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles", name)
    except ApiException:
        return None
    return ((profile.get("status") or {}).get("policy") or {}).get("appliedGeneration")


def test_a_policy_change_reaches_every_node_within_seconds_and_the_rollout_shows_it(
        lab, lab_api, core, nodes, policy, tmp_path):
    custom = client.CustomObjectsApi(lab_api)
    lease = f"rollout-{secrets.token_hex(3)}"  # its own election: another manager may run in the lab
    policy({})
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,series_id,usage,request\n" + "".join(
        f"{step * 300},web,{1 + step % 3},4\n" for step in range(12)))
    # A long report interval: the new generation must be reported at once, not at the next report.
    replay = processes.start("replay", [
        str(BIN / "tidal-agent"), "replay", "--kubeconfig", str(lab.kubeconfig_path), "--trace", str(trace),
        "--nodes", ",".join(nodes), "--report-interval", "60"], tmp_path / "replay.log")
    cert = issue(ensure_ca(tmp_path), tmp_path, "webhook", "tidal-manager", server=True, ip_addresses=("127.0.0.1",))
    port, health = free_ports(2)
    manager = processes.start("manager", [
        str(BIN / "tidal-manager"), "--kubeconfig", str(lab.kubeconfig_path), "--identity", "rollout-test", "--lease-name", lease,
        "--webhook-cert-file", str(cert.cert), "--webhook-key-file", str(cert.key),
        "--webhook-address", "127.0.0.1", "--webhook-port", str(port), "--health-address", "127.0.0.1",
        "--health-port", str(health)], tmp_path / "manager.log")
    try:
        generation = custom.get_cluster_custom_object(*POLICY)["metadata"]["generation"]
        wait_for(lambda: all(_profile_generation(custom, n) == generation for n in nodes), 60,
                 f"both nodes report generation {generation} (log {tmp_path / 'replay.log'})")

        def rollout_of(gen):
            status = custom.get_cluster_custom_object(*POLICY).get("status") or {}
            rows = {n["name"]: n for n in status.get("nodes") or []}
            if status.get("observedGeneration") != gen or not all(
                    rows.get(n, {}).get("appliedGeneration") == gen and rows[n]["reason"] == "" for n in nodes):
                return None
            return status
        wait_for(lambda: rollout_of(generation), 60, f"rollout status (log {tmp_path / 'manager.log'})")

        # A change: timed from the write to every node reporting it and the status showing it.
        policy({"evictionWatermarks": {"cpu": {"highPercent": 85, "lowPercent": 35}}})
        written = time.monotonic()
        new = custom.get_cluster_custom_object(*POLICY)["metadata"]["generation"]
        assert new == generation + 1
        wait_for(lambda: all(_profile_generation(custom, n) == new for n in nodes), 5,
                 "every node reports the new generation within 5 s")
        reported = time.monotonic() - written
        status = wait_for(lambda: rollout_of(new), 5, "the rollout status shows every node on it")
        assert status["appliedNodes"] >= len(nodes)
        applied = next(c for c in status["conditions"] if c["type"] == "Applied")
        assert applied["observedGeneration"] == new
        profile = custom.get_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles", nodes[0])
        assert profile["status"]["policy"]["effective"]["evictionWatermarks"]["cpu"] == {"highPercent": 85, "lowPercent": 35}
        print(f"propagation to {len(nodes)} nodes: {reported:.2f}s")

        # An invalid change is refused by the API server; the last good policy stays in force.
        with pytest.raises(ApiException) as refused:
            policy({"evictionWatermarks": {"cpu": {"highPercent": 30, "lowPercent": 35}}})
        assert refused.value.status == 422 and "lowPercent must be lower than highPercent" in refused.value.body
        time.sleep(2)
        assert custom.get_cluster_custom_object(*POLICY)["metadata"]["generation"] == new
        assert all(_profile_generation(custom, n) == new for n in nodes)
    finally:
        processes.stop(replay)
        processes.stop(manager)
        try:
            client.CoordinationV1Api(lab_api).delete_namespaced_lease(lease, qos.NAMESPACE)
        except ApiException:
            pass
