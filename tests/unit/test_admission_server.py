"""The webhook's HTTPS edge: a real tidal-manager process on loopback (no lab needed)."""
import json
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from cryptography import x509

from tidal_dev.lab import processes
from tidal_dev.lab.ports import free_ports
from tidal_dev.lab.pki import ensure_ca, issue
from tidal.manager.admission.configuration import EXCLUDED_NAMESPACES, webhook_configurations

MANAGER = str(Path(sys.executable).with_name("tidal-manager"))
TIDAL = str(Path(sys.executable).with_name("tidal"))

BE_REVIEW = {
    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
    "request": {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "default", "operation": "CREATE",
                "object": {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "p", "annotations": {"colocation.tidal.io/qos-level": "BE"}},
                           "spec": {"containers": [{"name": "c", "image": "x",
                                                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}},
}



@pytest.fixture
def server(tmp_path):
    ca = ensure_ca(tmp_path / "ca")
    cert = issue(ca, tmp_path, "first", "first.tidal.test", server=True, ip_addresses=("127.0.0.1",))
    port, health = free_ports(2)
    record = processes.start("tidal-manager", [
        MANAGER, "--webhook-cert-file", str(cert.cert), "--webhook-key-file", str(cert.key),
        "--webhook-address", "127.0.0.1", "--webhook-port", str(port), "--health-address", "127.0.0.1",
        "--health-port", str(health), "--tls-check-seconds", "0.2"], tmp_path / "manager.log")
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=1)
            break
        except OSError:
            assert processes.alive(record), (tmp_path / "manager.log").read_text()
            assert time.monotonic() < deadline, "tidal-manager not ready"
            time.sleep(0.1)
    tls = ssl.create_default_context(cafile=str(ca.cert))
    yield {"port": port, "health": health, "tls": tls, "ca": ca, "cert": cert, "dir": tmp_path}
    processes.stop(record)


def _post(server, path, data: bytes):
    req = urllib.request.Request(f"https://127.0.0.1:{server['port']}{path}", data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, context=server["tls"], timeout=5) as resp:
        return resp.status, json.loads(resp.read())


def _served_common_name(port):
    pem = ssl.get_server_certificate(("127.0.0.1", port))
    return x509.load_pem_x509_certificate(pem.encode()).subject.rfc4514_string()


def test_mutate_answers_with_a_patch_and_validate_without(server):
    status, mutated = _post(server, "/mutate", json.dumps(BE_REVIEW).encode())
    assert status == 200 and mutated["response"]["uid"] == "u-1" and mutated["response"]["allowed"]
    assert mutated["response"]["patchType"] == "JSONPatch" and mutated["response"]["patch"]
    _, validated = _post(server, "/validate", json.dumps(BE_REVIEW).encode())
    assert validated["response"]["allowed"] and "patch" not in validated["response"]


@pytest.mark.parametrize("body", [b"not json", b"", b"[]", b'{"request": 7}', b"\xff\xfe"])
def test_malformed_bodies_get_a_well_formed_denial_not_a_500(server, body):
    status, review = _post(server, "/mutate", body)
    assert status == 200
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    assert review["response"]["allowed"] is False and review["response"]["status"]["message"]


def test_rotated_certificate_files_are_served_without_a_restart(server):
    assert _served_common_name(server["port"]) == "CN=first.tidal.test"
    second = issue(server["ca"], server["dir"], "second", "second.tidal.test", server=True,
                   ip_addresses=("127.0.0.1",))
    # Rotate as a secret volume does: new files moved over the old names.
    Path(second.key).replace(server["cert"].key)
    Path(second.cert).replace(server["cert"].cert)
    deadline = time.monotonic() + 10
    while _served_common_name(server["port"]) != "CN=second.tidal.test":
        assert time.monotonic() < deadline, "certificate not reloaded"
        time.sleep(0.1)
    status, _ = _post(server, "/mutate", json.dumps(BE_REVIEW).encode())
    assert status == 200


def test_health_and_metrics_endpoints(server):
    _post(server, "/mutate", b"not json")
    _post(server, "/mutate", json.dumps(BE_REVIEW).encode())    # a BE pod: its requests become batch ones
    _post(server, "/validate", json.dumps(BE_REVIEW).encode())  # the same verdict, no patch
    base = f"http://127.0.0.1:{server['health']}"
    assert urllib.request.urlopen(base + "/healthz").read() == b"ok"
    metrics = urllib.request.urlopen(base + "/metrics").read().decode()
    assert 'tidal_admission_denials_total{reason="malformed-request",webhook="mutate"} 1.0' in metrics
    mutations = [line for line in metrics.splitlines() if line.startswith("tidal_admission_mutations_total{")]
    assert mutations == ['tidal_admission_mutations_total{kind="Pod",webhook="mutate"} 1.0'], mutations
    assert "tidal_admission_review_duration_seconds_bucket" in metrics


def test_cli_review_gives_the_same_answer_as_the_server(server):
    _, served = _post(server, "/mutate", json.dumps(BE_REVIEW).encode())
    out = subprocess.run([TIDAL, "admission", "review"], input=json.dumps(BE_REVIEW), capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out) == served


def test_missing_certificate_file_is_named_at_start(tmp_path):
    proc = subprocess.run([MANAGER, "--webhook-cert-file", str(tmp_path / "nope.crt"),
                           "--webhook-key-file", str(tmp_path / "nope.key")], capture_output=True, text=True)
    assert proc.returncode == 2 and "--webhook-cert-file" in proc.stdout + proc.stderr


def test_webhook_configurations_follow_the_documented_policy():
    mutating, validating = webhook_configurations(b"PEM", url="https://127.0.0.1:9443")
    for config, path in ((mutating, "/mutate"), (validating, "/validate")):
        hook = config["webhooks"][0]
        assert hook["clientConfig"]["url"] == "https://127.0.0.1:9443" + path
        assert hook["sideEffects"] == "None" and hook["failurePolicy"] == "Ignore"
        assert hook["timeoutSeconds"] <= 10 and hook["admissionReviewVersions"] == ["v1"]
        excluded = hook["namespaceSelector"]["matchExpressions"][0]
        assert excluded["operator"] == "NotIn" and set(excluded["values"]) == set(EXCLUDED_NAMESPACES)
    assert mutating["webhooks"][0]["reinvocationPolicy"] == "IfNeeded"
    validated = {r for rule in validating["webhooks"][0]["rules"] for r in rule["resources"]}
    assert validated == {"pods", "deployments", "statefulsets", "daemonsets", "replicasets", "jobs", "cronjobs"}
    service = webhook_configurations(b"PEM")[0]["webhooks"][0]["clientConfig"]["service"]
    assert service == {"name": "tidal-manager", "namespace": "tidal-system", "path": "/mutate", "port": 443}
