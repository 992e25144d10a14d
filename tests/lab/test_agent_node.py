"""tidal-agent run: this machine's real /proc and cgroups, the lab's pods, its NodeProfile."""
import sys
from pathlib import Path

import pytest
from kubernetes import client

from tidal.api import qos
from tidal.crds import crd_manifests
from tidal_dev.lab import processes
from tidal_dev.lab.apply import create_or_replace_all
from tidal_dev.lab.pytest_plugin import wait_for

pytestmark = pytest.mark.lab


@pytest.fixture
def node(core, lab_api):
    """A kwok node of this test's own: the shared lab's nodes may be replayed by someone else."""
    import secrets

    from tidal_dev.testing.kwok import kwok_node
    name = f"tidal-agent-node-{secrets.token_hex(3)}"
    kwok_node(core, name, {"cpu": "16", "memory": "64Gi", "pods": "110"})
    yield name
    core.delete_node(name)


def _pod(name, level, cpu, node):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {qos.QOS_ANNOTATION: level}},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.invalid/app:1",
                                                        "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}


def test_agent_reports_real_node_usage_and_counts_unmeasured_pods_at_request(lab, lab_api, core, namespace, node,
                                                                           tmp_path):
    NODE = node
    create_or_replace_all(lab_api, crd_manifests(), wait_established=True)
    custom = client.CustomObjectsApi(lab_api)
    core.create_namespaced_pod(namespace, _pod("web", "LS", "1500m", node))
    agent = processes.start("agent", [str(Path(sys.executable).with_name("tidal-agent")), "run", "--node", NODE,
                                      "--kubeconfig", str(lab.kubeconfig_path), "--report-interval", "1",
                                      "--history-step-seconds", "2", "--state-dir", str(tmp_path / "state"),
                                      "--metrics-address", "127.0.0.1", "--metrics-port", "0"],
                            tmp_path / "agent.log")

    def profile_with(predicate):
        def check():
            try:
                status = custom.get_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles", NODE)["status"]
            except Exception:
                return None
            return status if predicate(status) else None
        return check

    def pods_at_request(status):
        return {p["name"] for p in status.get("perQoS", {}).get("LS", {}).get("podsAtRequest", [])}

    try:
        status = wait_for(profile_with(lambda s: "web" in pods_at_request(s) and "predictions" in s), 60,
                          f"NodeProfile {NODE} with pod web (log {tmp_path / 'agent.log'})")
        # Real node usage from /proc: some CPU and memory are always in use on this machine.
        minute = next(u for u in status["usage"] if u["windowSeconds"] == 60)
        assert minute["samples"] >= 1 and minute["memoryBytes"]["max"] > 100 * 1024**2
        # The policy's default predictor (Tidal's own) ran on the agent's history; the kwok pod has
        # no cgroup and is young, so it is reserved at its full request.
        assert status["predictions"]["predictor"] == "tidal"
        # What this machine's kernel supports, each missing feature with its reason.
        capabilities = {c["name"]: c for c in status["capabilities"]}
        assert capabilities["cpu.idle"]["supported"] is True
        assert capabilities["resctrl.l3"]["supported"] is False and capabilities["resctrl.l3"]["reason"]
        assert status["predictions"]["onlinePeak"]["cpuMillicores"] >= 1500
        # A pod created later reaches the agent through its watch.
        core.create_namespaced_pod(namespace, _pod("search", "LS", "500m", node))
        wait_for(profile_with(lambda s: "search" in pods_at_request(s)), 30, "pod search reported")
        core.delete_namespaced_pod("web", namespace, grace_period_seconds=0)
        wait_for(profile_with(lambda s: "web" not in pods_at_request(s)), 30, "pod web gone from the report")
    finally:
        processes.stop(agent)
        custom.delete_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles", NODE)

