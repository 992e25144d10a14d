"""The one rule for a pod's batch amounts (tidal.api.pod_resources), table-driven."""
from __future__ import annotations

import pytest

from tidal.api.pod_resources import (BatchRequest, batch_by_container, batch_requested, batch_requested_total,
                                     container_native, pod_batch, pod_native, pod_node_requests)

CPU, MEM = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
GiB = 1 << 30


def container(name, requests=None, limits=None, restart_policy=None):
    out = {"name": name, "resources": {}}
    if requests is not None:
        out["resources"]["requests"] = requests
    if limits is not None:
        out["resources"]["limits"] = limits
    if restart_policy:
        out["restartPolicy"] = restart_policy
    return out


def pod(containers=(), init=()):
    return {"spec": {"containers": list(containers), "initContainers": list(init)}}


@pytest.mark.parametrize("spec, expected", [
    pytest.param(container("a"), BatchRequest(), id="no-resources"),
    pytest.param(container("a", requests={CPU: "1500", MEM: "1Gi"}, limits={CPU: "1500", MEM: "1Gi"}),
                 BatchRequest(1500, GiB), id="requests-equal-limits"),
    pytest.param(container("a", limits={CPU: "2k", MEM: "512Mi"}), BatchRequest(2000, 512 << 20),
                 id="limits-only-as-the-api-server-defaults-requests"),
    pytest.param(container("a", requests={CPU: "300"}), BatchRequest(300, 0), id="requests-only"),
    pytest.param(container("a", requests={CPU: "1"}, limits={CPU: "2k"}), BatchRequest(1, 0),
                 id="request-wins-over-a-different-limit"),
    pytest.param(container("a", requests={CPU: "one core", MEM: "1Gi"}), BatchRequest(), id="unparseable-counts-nothing"),
    pytest.param(container("a", requests={"cpu": "2", "memory": "1Gi"}), BatchRequest(), id="native-only"),
])
def test_a_containers_batch_amount_is_its_request_else_its_limit(spec, expected):
    assert batch_by_container(pod([spec])) == {"a": expected}


@pytest.mark.parametrize("containers, init, expected", [
    pytest.param([], [], BatchRequest(), id="empty"),
    pytest.param([container("a", {CPU: "1000", MEM: "1Gi"}), container("b", {CPU: "500"})], [],
                 BatchRequest(1500, GiB), id="containers-add-up"),
    pytest.param([container("a", {CPU: "1000", MEM: "1Gi"})], [container("i", {CPU: "4000"})],
                 BatchRequest(4000, GiB), id="a-larger-init-container-wins-per-resource"),
    pytest.param([container("a", {CPU: "1000"})], [container("i1", {CPU: "300"}), container("i2", {CPU: "700"})],
                 BatchRequest(1000, 0), id="init-containers-run-one-at-a-time"),
    pytest.param([container("a", {CPU: "1000"})], [container("s", {CPU: "200"}, restart_policy="Always")],
                 BatchRequest(1200, 0), id="a-sidecar-adds-to-the-containers"),
    pytest.param([container("a", {CPU: "100"})],
                 [container("s", {CPU: "200"}, restart_policy="Always"), container("i", {CPU: "1000"})],
                 BatchRequest(1200, 0), id="an-init-container-after-a-sidecar-runs-beside-it"),
    pytest.param([container("a", {CPU: "100"})],
                 [container("i", {CPU: "1000"}), container("s", {CPU: "200"}, restart_policy="Always")],
                 BatchRequest(1000, 0), id="an-init-container-before-a-sidecar-runs-alone"),
])
def test_a_pods_batch_amount_is_what_the_scheduler_reserves(containers, init, expected):
    assert pod_batch(pod(containers, init)) == expected
    assert batch_requested(pod(containers, init)) == (expected.cpu_millicores, expected.memory_bytes)


def test_init_containers_have_their_own_entries_per_container():
    spec = pod([container("a", {CPU: "1000"}), container("b")], [container("i", {CPU: "100"})])
    assert batch_by_container(spec) == {"i": BatchRequest(100, 0), "a": BatchRequest(1000, 0), "b": BatchRequest()}


def test_totals_add_pods():
    pods = [pod([container("a", {CPU: "1000", MEM: "1Gi"})]), pod([container("a", {CPU: "500"})]), {}]
    assert batch_requested_total(pods) == BatchRequest(1500, GiB)


@pytest.mark.parametrize("spec, expected", [
    pytest.param(container("a"), BatchRequest(), id="no-resources"),
    pytest.param(container("a", requests={"cpu": "1500m", "memory": "1Gi"}), BatchRequest(1500, GiB), id="requests"),
    pytest.param(container("a", requests={"cpu": "0.1"}), BatchRequest(100, 0), id="cpu-only-decimal-cores"),
    pytest.param(container("a", limits={"cpu": "2", "memory": "1Gi"}), BatchRequest(),
                 id="limits-are-not-requests"),
    pytest.param(container("a", requests={"cpu": "one core", "memory": "1Gi"}), BatchRequest(0, GiB),
                 id="an-unparseable-amount-counts-nothing-the-other-still-counts"),
    pytest.param(container("a", requests={CPU: "1000", MEM: "1Gi"}), BatchRequest(), id="batch-only-is-not-native"),
])
def test_a_containers_native_amount_is_its_request(spec, expected):
    assert container_native(spec) == expected


@pytest.mark.parametrize("containers, init, overhead, expected", [
    pytest.param([], [], None, BatchRequest(), id="empty"),
    pytest.param([container("a", {"cpu": "1", "memory": "1Gi"}), container("b", {"cpu": "500m"})], [], None,
                 BatchRequest(1500, GiB), id="containers-add-up"),
    pytest.param([container("a", {"cpu": "1", "memory": "1Gi"})], [container("i", {"cpu": "4"})], None,
                 BatchRequest(4000, GiB), id="max-of-sum-and-largest-init-per-resource"),
    pytest.param([container("a", {"cpu": "100m"})],
                 [container("s", {"cpu": "200m"}, restart_policy="Always"), container("i", {"cpu": "1"})], None,
                 BatchRequest(1200, 0), id="sidecar-then-init"),
    pytest.param([container("a", {"cpu": "1"})], [], {"cpu": "250m", "memory": "64Mi"},
                 BatchRequest(1250, 64 << 20), id="runtime-class-overhead-adds"),
])
def test_a_pods_native_amount_is_what_the_scheduler_counts(containers, init, overhead, expected):
    spec = pod(containers, init)
    if overhead:
        spec["spec"]["overhead"] = overhead
    assert pod_native(spec) == expected


@pytest.mark.parametrize("containers, expected", [
    pytest.param([container("a", {"cpu": "1", "memory": "1Gi"})], (1000, GiB), id="online-native-only"),
    pytest.param([container("a", {CPU: "2000", MEM: "2Gi"})], (2000, 2 * GiB), id="be-batch-only"),
    pytest.param([container("a", {"cpu": "1", CPU: "2000", MEM: "1Gi"})], (3000, GiB), id="both-add"),
    pytest.param([container("a")], (0, 0), id="best-effort-nothing"),
])
def test_a_pods_node_requests_are_native_plus_batch(containers, expected):
    assert pod_node_requests(pod(containers)) == expected


def test_no_other_module_reads_batch_resources_from_a_pod_spec():
    """One module counts batch amounts: any other reader of the batch resource names in a pod's
    container resources is a second rule (a correctness risk)."""
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parents[2] / "controllers" / "tidal"
    pattern = re.compile(r"\.get\(\s*(qos\.)?BATCH_(CPU|MEMORY)_RESOURCE|\[\s*(qos\.)?BATCH_(CPU|MEMORY)_RESOURCE\s*\]")
    offenders = []
    for path in root.rglob("*.py"):
        if path.name == "pod_resources.py" or "lab" in path.parts or "testing" in path.parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "requests" in line and pattern.search(line):
                offenders.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    assert not offenders, "batch amounts read outside tidal/api/pod_resources.py:\n" + "\n".join(offenders)
