"""The node-agent fixtures and helpers of the agent's lab tests (test_agent_qos.py and the
advanced-feature tests): a kwok node standing for this machine, a LocalKubelet playing the kubelet's
part on this machine's real cgroups, and tidal-agent run against both. Imported by path (the test
modules put tests/lab on sys.path), so fixtures are plain imports."""
from __future__ import annotations

import os
import secrets
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from tidal.api import qos
from tidal.agent.collector.readers import read_meminfo
from tidal.crds import crd_manifests
from tidal_dev.lab import processes
from tidal_dev.lab.apply import create_or_replace_all
from tidal_dev.testing.kwok import kwok_node
from tidal_dev.testing.local_kubelet import LocalKubelet
from tidal_dev.testing.real_cgroups import RealCgroups

CPUS = os.cpu_count() or 1
POLICY = ("colocation.tidal.io", "v1alpha1", "colocationpolicies", "default")


@pytest.fixture
def kubelet(tmp_path, hierarchy):
    if hierarchy.version.value != "v1":
        pytest.skip("the cgroup v1 paths below are this machine's; v2 trees are covered by recorded trees")
    cgroups = RealCgroups(tmp_path)
    try:
        yield LocalKubelet(cgroups)
    finally:
        cgroups.cleanup()


@pytest.fixture
def hierarchy():
    from tidal.agent.collector.cgroups import DEFAULT_CGROUP_ROOT, detect_hierarchy
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups")
    return detect_hierarchy(DEFAULT_CGROUP_ROOT)


def create_machine_node(core, lab_api, labels) -> str:
    """A kwok node standing for this machine (its CPUs and memory, batch resources to match),
    labelled ``labels``; Tidal's CRDs installed first."""
    create_or_replace_all(lab_api, crd_manifests(), wait_established=True)
    name = f"tidal-qos-{secrets.token_hex(3)}"
    memory = read_meminfo("/proc/meminfo").total_bytes
    capacity = {"cpu": str(CPUS), "memory": str(memory), "pods": "110",
                qos.BATCH_CPU_RESOURCE: str(CPUS * 1000), qos.BATCH_MEMORY_RESOURCE: str(memory)}
    kwok_node(core, name, capacity, {"type": "kwok", **labels})
    return name


def delete_machine_node(core, lab_api, name) -> None:
    core.delete_node(name)
    try:
        client.CustomObjectsApi(lab_api).delete_cluster_custom_object(
            qos.API_GROUP, qos.API_VERSION, "nodeprofiles", name)
    except ApiException:
        pass


@pytest.fixture
def node(core, lab_api):
    name = create_machine_node(core, lab_api, {qos.COLOCATION_NODE_LABEL: qos.NODE_LABEL_ENABLED_VALUE})
    yield name
    delete_machine_node(core, lab_api, name)


def _pod(node, name, level, requests, labels=None, limits=None):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}, "annotations": {qos.QOS_ANNOTATION: level}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                     "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "main", "image": "registry.invalid/app:1",
                                     "resources": {"requests": requests, "limits": limits or {}}}]}}


def _be(node, name, millicores, memory="256Mi", labels=None):
    batch = {qos.BATCH_CPU_RESOURCE: str(millicores), qos.BATCH_MEMORY_RESOURCE: memory}
    return _pod(node, name, "BE", batch, labels, limits=dict(batch))  # extended: limits = requests


def _agent(lab, node, kubelet, tmp_path, port, *extra):
    return processes.start("agent", [
        str(Path(sys.executable).with_name("tidal-agent")), "run", "--node", node,
        "--kubeconfig", str(lab.kubeconfig_path), "--report-interval", "2",
        "--cgroup-driver", "cgroupfs", "--kubelet-cgroup-root", kubelet.kubelet_root,
        "--state-dir", str(tmp_path / "state"), "--metrics-address", "127.0.0.1",
        "--metrics-port", str(port), *extra], tmp_path / "agent.log")


def scraped(port: int, name: str, **labels: str) -> float | None:
    """The value of the first sample ``name`` whose labels include ``labels`` on the agent's
    ``/metrics`` at ``port`` (parsed by prometheus_client); None when there is none."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return next((sample.value for family in text_string_to_metric_families(text) for sample in family.samples
                 if sample.name == name and labels.items() <= sample.labels.items()), None)


def _read(path: Path) -> str:
    return path.read_text().strip()


def _busy_percent(seconds=3.0) -> float:
    from tidal.agent.collector.readers import read_proc_stat
    from tidal.agent.collector.rates import node_cpu_cores
    before = read_proc_stat("/proc/stat")
    time.sleep(seconds)
    return node_cpu_cores(before, read_proc_stat("/proc/stat")) / CPUS * 100


def _cpu_cores(dirs, seconds=2.0) -> float:
    usage = next(d for d in dirs if (d / "cpuacct.usage").exists()) / "cpuacct.usage"
    a, t0 = int(_read(usage)), time.monotonic()
    time.sleep(seconds)
    return (int(_read(usage)) - a) / 1e9 / (time.monotonic() - t0)
