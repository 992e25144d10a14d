"""``tidal-agent nri`` as a process against the runtime harness, and its pod lookup against the
lab's real kube-apiserver."""
from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from tidal.api.pod_resources import BatchRequest
from tidal.agent.nri.main import nested_quota_rule
from tidal.agent.nri.pod_lookup import ApiServerPods
from tidal.kube import KubeAPI
from tidal_dev.lab.pytest_plugin import wait_for


def agent(*args: str) -> list[str]:
    return [sys.executable, "-c", "from tidal.agent.main import main; raise SystemExit(main())", *args]


def test_tidal_agent_nri_process_adjusts_and_stops_on_sigterm(runtime):
    proc = subprocess.Popen(agent("nri", "--socket", str(runtime.socket)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        runtime.cmd("wait_plugins", n=1, timeout_ms=20_000)
        runtime.cmd("run_pod", pod={"id": "p", "name": "batch", "namespace": "ns", "uid": "u", "annotations": {
            "colocation.tidal.io/qos-level": "BE",
            "colocation.tidal.io/batch-resources": json.dumps({"w": {"kubernetes.io/batch-cpu": "250"}})}})
        answer = runtime.cmd("create", pod_id="p", container={"id": "c", "name": "w"})
        cpu = answer["adjust"]["linux"]["resources"]["cpu"]
        assert cpu["shares"]["value"] == "256"
        # the quota: none where the node's cpu controller is cgroup v1 (a quota above an
        # ancestor's is refused there: the agent's round sets it), else the batch-cpu's
        if nested_quota_rule(Path("/sys/fs/cgroup")):
            assert "quota" not in cpu
        else:
            assert cpu["quota"]["value"] == "25000"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    assert "registered as 10-tidal" in out and "create ns/batch container w (BE)" in out


@pytest.mark.parametrize("args, message", [
    (("--plugin-index", "7"), "plugin index '7': must be two digits"),
    (("--plugin-name", "a/b"), "plugin name 'a/b'"),
])
def test_tidal_agent_nri_rejects_bad_options(args, message):
    out = subprocess.run(agent("nri", "--socket", "/nonexistent/nri.sock", *args), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1 and message in out.stderr


@pytest.mark.lab
def test_pod_lookup_reads_the_pod_object_from_the_api_server(lab, lab_api):
    core = client.CoreV1Api(lab_api)
    ns = f"t-nri-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    # pods need the namespace's default ServiceAccount, which a controller creates a moment later
    wait_for(lambda: core.list_namespaced_service_account(ns).items, 30, f"serviceaccount in {ns}")
    try:
        # no QoS annotation: admission leaves it alone; it stays Pending (no node has the resource)
        pod = core.create_namespaced_pod(ns, {
            "metadata": {"name": "batch"},
            "spec": {"containers": [{"name": "w", "image": "busybox", "resources": {
                "requests": {"kubernetes.io/batch-cpu": "1500", "kubernetes.io/batch-memory": "268435456"},
                "limits": {"kubernetes.io/batch-cpu": "1500", "kubernetes.io/batch-memory": "268435456"}}}]}})

        async def lookup():
            async with KubeAPI.from_kubeconfig(lab.kubeconfig_path) as api:
                pods = ApiServerPods(api)
                return (await pods(ns, "batch", pod.metadata.uid), await pods(ns, "batch", "another-uid"))

        found, other = asyncio.run(lookup())
        assert found == {"w": BatchRequest(cpu_millicores=1500, memory_bytes=268435456)}
        assert other is None
    finally:
        core.delete_namespace(ns)
