"""Fixtures of the console tests: the lab's real Prometheus with Tidal's rules and file_sd
targets, users with tokens from the API server (TokenRequest) bound to the console's
ClusterRoles, kwok nodes of the test's own, tidal-console as a process, and a helper process
exporting the agent's and the oversell master's real metrics."""
from __future__ import annotations

import json
import shutil
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tidal.api import qos
from tidal.console.rbac import EDITOR_ROLE, VIEWER_ROLE, cluster_roles
from tidal.console.webbuild import build_web
from tidal.crds import crd_manifests
from tidal_dev.lab import processes
from tidal_dev.lab.apply import create_or_replace_all
from tidal_dev.lab.components import KWOK_NODE_ANNOTATION, KWOK_NODE_ANNOTATION_VALUE, PROMETHEUS_RULES_DIR, \
    PROMETHEUS_TARGETS_DIR
from tidal_dev.lab.ports import free_ports
from tidal_dev.lab.pytest_plugin import wait_for

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# tests/output/ is git-ignored: screenshots and process logs of the console tests stay there.
ARTEFACTS = REPO / "tests" / "output" / "console"
RUN = uuid.uuid4().hex[:6]


def http(method: str, url: str, token: str | None = None, body=None, timeout: float = 20.0):
    """(status, headers, parsed JSON or text) of one call; never raises on HTTP errors."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            status, headers, raw = resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        status, headers, raw = err.code, err.headers, err.read()
    try:
        return status, headers, json.loads(raw)
    except ValueError:
        return status, headers, raw.decode(errors="replace")


@pytest.fixture(scope="session")
def artefacts():
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    return ARTEFACTS


@pytest.fixture(scope="session")
def prometheus(lab):
    """The lab's Prometheus with Tidal's recording rules and alerts loaded."""
    url = lab.prometheus_url
    (lab.dir / PROMETHEUS_TARGETS_DIR).mkdir(exist_ok=True)
    rules = lab.dir / PROMETHEUS_RULES_DIR
    rules.mkdir(exist_ok=True)
    for name in ("rules.yml", "alerts.yml"):
        shutil.copyfile(REPO / "monitoring" / name, rules / f"tidal-{name}")
    urllib.request.urlopen(urllib.request.Request(f"{url}/-/reload", method="POST"), timeout=30).read()
    if "job_name: tidal\n" not in http("GET", f"{url}/api/v1/status/config")[2]["data"]["yaml"]:
        pytest.fail(f"the lab's {lab.dir / 'prometheus.yml'} predates the `tidal` file_sd job: run `tidal lab up` "
                    "(it rewrites the configuration; the reload here applies it)")

    def groups():
        _, _, body = http("GET", f"{url}/api/v1/rules")
        return {g["name"] for g in body["data"]["groups"]} >= {"tidal.recording", "tidal.alerts"}
    wait_for(groups, 30, "Prometheus to load monitoring/rules.yml and alerts.yml")
    return url


def promql(prometheus: str, query: str) -> list[dict]:
    _, _, body = http("GET", f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": query}))
    return body["data"]["result"]


def scrape_target(lab, name: str, port: int, component: str) -> Path:
    path = lab.dir / PROMETHEUS_TARGETS_DIR / f"{name}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"targets": [f"127.0.0.1:{port}"], "labels": {"component": component}}]))
    tmp.rename(path)
    return path


@pytest.fixture(scope="session")
def crds(lab_api):
    create_or_replace_all(lab_api, crd_manifests(), wait_established=True)


@pytest.fixture(scope="session")
def users(lab_api):
    """Tokens of three ServiceAccounts: viewer (the rules of tidal-console-viewer), editor
    (tidal-console-editor) and nobody (no binding); the console's own identity is the lab admin.
    The ClusterRoles are copies under names of this run, so a concurrent `tidal_controllers`
    uninstall in the shared lab cannot pull them away mid-test."""
    core, rbac = client.CoreV1Api(lab_api), client.RbacAuthorizationV1Api(lab_api)
    roles = {}
    for role in cluster_roles():
        original = role["metadata"]["name"]
        role["metadata"]["name"] = roles[original] = f"{original}-{RUN}"
        rbac.create_cluster_role(role)
    namespace = f"console-{RUN}"
    core.create_namespace({"metadata": {"name": namespace}})
    tokens, bindings = {}, []
    for user, role in (("viewer", VIEWER_ROLE), ("editor", EDITOR_ROLE), ("nobody", None)):
        core.create_namespaced_service_account(namespace, {"metadata": {"name": user}})
        if role:
            name = f"console-{RUN}-{user}"
            rbac.create_cluster_role_binding({
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": roles[role]},
                "subjects": [{"kind": "ServiceAccount", "name": user, "namespace": namespace}]})
            bindings.append(name)
        tokens[user] = core.create_namespaced_service_account_token(
            user, namespace, {"spec": {"expirationSeconds": 3600}}).status.token
    tokens["namespace"] = namespace
    yield tokens
    for name in bindings:
        rbac.delete_cluster_role_binding(name)
    for name in roles.values():
        rbac.delete_cluster_role(name)
    core.delete_namespace(namespace)


@pytest.fixture(scope="session")
def console(lab, prometheus, crds, artefacts):
    """tidal-console serving the built web console, acting as the lab admin."""
    web = build_web()
    port, = free_ports(1)
    record = processes.start("tidal-console", [
        str(BIN / "tidal-console"), "serve", "--kubeconfig", str(lab.kubeconfig_path), "--prometheus-url", prometheus,
        "--address", "127.0.0.1", "--port", str(port), "--web-dir", str(web)], artefacts / "tidal-console.log")
    url = f"http://127.0.0.1:{port}"
    target = scrape_target(lab, f"console-{RUN}", port, "tidal-console")
    try:
        wait_for(lambda: processes.alive(record) and _up(url), 30, f"tidal-console on {url}")
        yield url
    finally:
        target.unlink(missing_ok=True)
        processes.stop(record)


def _up(url: str) -> bool:
    try:
        return http("GET", f"{url}/healthz", timeout=2)[0] == 200
    except OSError:
        return False


def patch_profile_status(lab_api, node: str, status: dict) -> None:
    """Merge ``status`` into the node's NodeProfile, created empty first when it has none (as
    an agent or the oversell master would have written those parts)."""
    custom = client.CustomObjectsApi(lab_api)
    group = (qos.API_GROUP, qos.API_VERSION, "nodeprofiles")
    try:
        custom.create_cluster_custom_object(*group, {"apiVersion": qos.API_GROUP_VERSION, "kind": "NodeProfile",
                                                     "metadata": {"name": node}})
    except ApiException as err:
        if err.status != 409:
            raise
    custom.patch_cluster_custom_object_status(*group, node, {"status": status})


def kwok_node(name: str, labels: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE},
                         "labels": {"kubernetes.io/hostname": name, "type": "kwok", **(labels or {})}},
            "status": {"capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                       "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}}}


def _ready(core, name: str) -> bool:
    conditions = core.read_node(name).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


@pytest.fixture(scope="module")
def nodes(lab_api):
    """Two kwok nodes of this module: `plain` and `oversold` (labelled for colocation and
    overselling); deleted with their NodeProfiles afterwards."""
    core = client.CoreV1Api(lab_api)
    names = {"plain": f"console-{RUN}-plain", "oversold": f"console-{RUN}-oversold"}
    core.create_node(kwok_node(names["plain"]))
    core.create_node(kwok_node(names["oversold"], {qos.COLOCATION_NODE_LABEL: "true",
                                                   qos.OVERSUBSCRIPTION_NODE_LABEL: "true"}))
    for name in names.values():
        wait_for(lambda: _ready(core, name), 60, f"kwok to report {name} Ready")
    yield names
    custom = client.CustomObjectsApi(lab_api)
    for name in names.values():
        core.delete_node(name)
        try:
            custom.delete_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles", name)
        except ApiException as err:
            if err.status != 404:
                raise


@pytest.fixture(scope="module")
def components(lab, prometheus, nodes, tmp_path_factory, artefacts):
    """The replayed agent of both test nodes and the oversell master, exporting their metrics
    to the lab's Prometheus."""
    trace = tmp_path_factory.mktemp("trace") / "trace.csv"
    rows = ["timestamp,series_id,usage,request"]
    for step in range(12):
        rows += [f"{step * 300},web,{1 + step % 3},4", f"{step * 300},search,{1 + (step + 1) % 3},4"]
    trace.write_text("\n".join(rows) + "\n")
    port, = free_ports(1)
    record = processes.start("exporter", [sys.executable, str(Path(__file__).with_name("exporter.py")),
                                          str(lab.kubeconfig_path), str(trace), ",".join(nodes.values()), str(port)],
                             artefacts / "exporter.log")
    target = scrape_target(lab, f"exporter-{RUN}", port, "tidal-agent-replay")
    yield {"port": port, "log": artefacts / "exporter.log"}
    target.unlink(missing_ok=True)
    processes.stop(record)
