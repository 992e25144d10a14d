"""End to end: replayed usage on kwok nodes -> NodeProfiles -> the running tidal-manager ->
batch resources on labelled nodes only; stopping the agent drives them to 0 in time."""
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.utils import parse_quantity

from tidal.api import qos
from tidal.crds import crd_manifests
from tidal_dev.lab import processes
from tidal_dev.lab.apply import create_or_replace_all
from tidal_dev.lab.pki import ensure_ca, issue
from tidal_dev.lab.ports import free_ports
from tidal_dev.lab.pytest_plugin import wait_for
from tidal.api.policy import ColocationPolicy, policy_manifest

pytestmark = pytest.mark.lab

BIN = Path(sys.executable).parent
LABELLED, UNLABELLED = "lab-node-1", "lab-node-2"
DEGRADE_SECONDS = 30  # the policy's minimum
# its own leader election: a tidal-manager deployed into the lab (tidal_controllers) may hold the default one
LEASE = "oversell-replay-test"


def _batch_cpu(core, name):
    value = (core.read_node(name).status.allocatable or {}).get(qos.BATCH_CPU_RESOURCE)
    return None if value is None else int(parse_quantity(value))


@pytest.fixture
def stack(lab, lab_api, core, tidal_namespace, tmp_path):
    create_or_replace_all(lab_api, crd_manifests(), wait_established=True)
    policy = ColocationPolicy.from_spec({"overselling": {"degradeSeconds": DEGRADE_SECONDS}})
    create_or_replace_all(lab_api, [policy_manifest(policy)])
    core.patch_node(LABELLED, {"metadata": {"labels": {qos.OVERSUBSCRIPTION_NODE_LABEL: "true"}}})
    trace = tmp_path / "trace.csv"
    rows = ["timestamp,series_id,usage,request"]
    for step in range(12):  # two online pods, 1-3 cores each, 5-minute steps
        rows += [f"{step * 300},web,{1 + step % 3},4", f"{step * 300},search,{1 + (step + 1) % 3},4"]
    trace.write_text("\n".join(rows) + "\n")
    cert = issue(ensure_ca(tmp_path), tmp_path, "webhook", "tidal-manager", server=True, ip_addresses=("127.0.0.1",))
    port, health = free_ports(2)
    agent = processes.start("replay", [
        str(BIN / "tidal-agent"), "replay", "--kubeconfig", str(lab.kubeconfig_path), "--trace", str(trace),
        "--nodes", f"{LABELLED},{UNLABELLED}", "--report-interval", "1", "--window", "60",
        "--predictor", "p95"], tmp_path / "agent.log")
    manager = processes.start("manager", [
        str(BIN / "tidal-manager"), "--kubeconfig", str(lab.kubeconfig_path), "--identity", "replay-test", "--lease-name", LEASE,
        "--oversell-interval", "1", "--webhook-cert-file", str(cert.cert), "--webhook-key-file", str(cert.key),
        "--webhook-address", "127.0.0.1", "--webhook-port", str(port), "--health-address", "127.0.0.1",
        "--health-port", str(health)], tmp_path / "manager.log")
    yield {"agent": agent, "manager": manager, "logs": tmp_path}
    core.patch_node(LABELLED, {"metadata": {"labels": {qos.OVERSUBSCRIPTION_NODE_LABEL: None}}})
    # The running master drives the unlabelled node back to 0 before it stops.
    wait_for(lambda: not _batch_cpu(core, LABELLED), 20, "batch resources removed after unlabelling")
    for record in (agent, manager):
        processes.stop(record)
    custom = client.CustomObjectsApi(lab_api)
    for name in (LABELLED, UNLABELLED):
        custom.delete_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles", name)
    custom.delete_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "colocationpolicies", "default")
    client.CoordinationV1Api(lab_api).delete_namespaced_lease(LEASE, qos.NAMESPACE)


def test_replayed_usage_becomes_batch_resources_and_a_stopped_agent_drives_them_to_zero(core, lab_api, stack):
    logs = stack["logs"]
    batch = wait_for(lambda: _batch_cpu(core, LABELLED), 60,
                     f"batch-cpu on {LABELLED} (agent log: {logs / 'agent.log'}, manager log: {logs / 'manager.log'})")
    # 16 CPUs × 60 % − online p95 (at most 6 cores) − 10 % margin
    assert 9600 - 6000 - 1600 <= batch <= 9600 - 2000 - 1600
    assert _batch_cpu(core, UNLABELLED) is None
    profile = client.CustomObjectsApi(lab_api).get_cluster_custom_object(
        qos.API_GROUP, qos.API_VERSION, "nodeprofiles", LABELLED)
    assert profile["status"]["predictions"]["predictor"] == "p95/60s"
    assert profile["status"]["oversell"]["cpuMillicores"]["result"] == batch

    processes.stop(stack["agent"])
    stopped = time.monotonic()
    wait_for(lambda: _batch_cpu(core, LABELLED) == 0, DEGRADE_SECONDS + 15, "batch-cpu back to 0")
    # degrade time + one report interval + one master cycle + scheduling slack on a loaded machine
    assert time.monotonic() - stopped <= DEGRADE_SECONDS + 8
