"""Load-aware scheduling end to end: replayed node usage -> the lab's Prometheus -> Volcano's
usage plugin, with its thresholds rendered from the ColocationPolicy by tidal-manager's policy
reconciler into the scheduler's configuration file, which Volcano reloads without a restart."""
import json
import secrets
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tidal_dev.lab import processes
from tidal_dev.lab.components import PROMETHEUS_TARGETS_DIR
from tidal_dev.lab.pki import ensure_ca, issue
from tidal_dev.lab.ports import free_ports
from tidal_dev.lab.pytest_plugin import wait_for
from tidal_dev.testing.kwok import kwok_node
from tidal_dev.testing.prometheus_backfill import Series, backfill

pytestmark = pytest.mark.lab
BIN = Path(sys.executable).parent
# Volcano's own query (pkg/scheduler/metrics/source/metrics_client_prometheus.go, v1.14.1)
VOLCANO_CPU_QUERY = ('avg_over_time(clamp_min(100 - (avg by (instance) (rate(node_cpu_seconds_total{{mode="idle",'
                     'instance="{node}"}}[5m])) * 100), 0)[10m:30s])')


def _query(prometheus: str, promql: str) -> float | None:
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    result = json.loads(urllib.request.urlopen(url, timeout=10).read())["data"]["result"]
    return float(result[0]["value"][1]) if result else None


# What Volcano's usage plugin says of a node above the CPU threshold (plugins/usage, v1.14.1).
USAGE_REFUSAL = "CPU load of the node exceeds the upper limit"


def _read_pod(core, namespace, name):
    try:
        return core.read_namespaced_pod(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _pod(name, group, node=None):
    selector = {"tidal-load-test": group}
    if node:
        selector["kubernetes.io/hostname"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": "volcano", "nodeSelector": selector,
                     "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "main", "image": "registry.invalid/app:1",
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


def test_volcano_keeps_pods_off_a_node_above_the_policy_threshold_until_it_is_raised(
        lab, core, namespace, policy, tidal_namespace, tmp_path):
    group = secrets.token_hex(3)
    hot, cool = f"tidal-hot-{group}", f"tidal-cool-{group}"
    capacity = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    for name in (hot, cool):
        kwok_node(core, name, capacity, {"tidal-load-test": group})
    prometheus = lab.prometheus_url
    started, targets = [], []
    conf = lab.dir / "volcano-scheduler.conf"
    original_conf = conf.read_text()
    try:
        policy({"loadAwareScheduling": {"enabled": True, "cpuThresholdPercent": 60, "memoryThresholdPercent": 90}})
        # Replayed usage: 12 of 16 CPUs (75 %) on one node, 4.8 (30 %) on the other. Volcano
        # averages 10 minutes of 5-minute rates: the nodes' last 15 minutes are backfilled with
        # the series the live scrape continues (same labels), as if their agents had been running.
        history = []
        for node, cores in ((hot, 12), (cool, 4.8)):
            labels = {"job": "tidal", "instance": node, "node": node, "component": "replay"}
            history += [Series("node_cpu_seconds_total", {**labels, "cpu": "all", "mode": "idle"}, "counter",
                               rate=1 - cores / 16),
                        Series("node_memory_MemTotal_bytes", labels, "gauge", value=64 << 30),
                        Series("node_memory_MemAvailable_bytes", labels, "gauge", value=(64 << 30) - cores * (4 << 30))]
        backfill(lab.dir / "prometheus-data", history, wait_until_visible=prometheus)
        for node, cores in ((hot, 12), (cool, 4.8)):
            trace = tmp_path / f"{node}.csv"
            trace.write_text("timestamp,series_id,usage,request\n" + "".join(
                f"{step * 300},app,{cores},16\n" for step in range(12)))
            port = free_ports(1)[0]
            started.append(processes.start(f"replay-{node}", [
                str(BIN / "tidal-agent"), "replay", "--kubeconfig", str(lab.kubeconfig_path), "--trace", str(trace),
                "--nodes", node, "--report-interval", "30", "--metrics-port", str(port),
                "--node-memory-bytes", str(64 << 30), "--node-cpus", "16"],
                tmp_path / f"replay-{node}.log"))
            target = lab.dir / PROMETHEUS_TARGETS_DIR / f"load-test-{node}.json"
            target.parent.mkdir(exist_ok=True)
            target.write_text(json.dumps([{"targets": [f"127.0.0.1:{port}"], "labels": {"component": "replay"}}]))
            targets.append(target)
        cert = issue(ensure_ca(tmp_path), tmp_path, "webhook", "tidal-manager", server=True,
                     ip_addresses=("127.0.0.1",))
        webhook, health = free_ports(2)
        started.append(processes.start("manager", [
            str(BIN / "tidal-manager"), "--kubeconfig", str(lab.kubeconfig_path), "--identity", f"load-{group}", "--lease-name", f"load-{group}",
            "--webhook-cert-file", str(cert.cert), "--webhook-key-file", str(cert.key),
            "--webhook-address", "127.0.0.1", "--webhook-port", str(webhook), "--health-address", "127.0.0.1",
            "--health-port", str(health), "--volcano-scheduler-config", f"file:{lab.dir / 'volcano-scheduler.conf'}",
            "--volcano-metrics-address", prometheus], tmp_path / "manager.log"))

        # The reconciler renders the thresholds into Volcano's configuration file.
        wait_for(lambda: "cpu: 60" in conf.read_text() and prometheus in conf.read_text(), 30,
                 f"usage plugin in {conf} (log {tmp_path / 'manager.log'})")
        # Volcano's own PromQL returns the replayed usage from the lab's Prometheus.
        def both():
            values = [_query(prometheus, VOLCANO_CPU_QUERY.format(node=n)) for n in (hot, cool)]
            return values if None not in values and 70 <= values[0] <= 80 and 25 <= values[1] <= 35 else None
        hot_cpu, cool_cpu = wait_for(both, 90, "Volcano's CPU query: about 75 % and 30 %")

        # Threshold 60 %: one pod pinned to the hot node waits. Volcano fetches node usage every
        # 30 s and lets every pod pass a node whose usage it has not fetched yet: until the pinned
        # pod is refused for the hot node's CPU load, a pod that got through is deleted and
        # created again (the refusal is the sign that Volcano has the usage).
        def refused_for_load():
            pod = _read_pod(core, namespace, "pinned-hot")
            if pod is None:
                core.create_namespaced_pod(namespace, _pod("pinned-hot", group, node=hot))
                return False
            if pod.metadata.deletion_timestamp:
                return False
            if pod.spec.node_name:
                try:
                    core.delete_namespaced_pod("pinned-hot", namespace, grace_period_seconds=0)
                except ApiException as err:
                    if err.status != 404:
                        raise
                return False
            return any(USAGE_REFUSAL in (c.message or "") for c in pod.status.conditions or []) or \
                any(USAGE_REFUSAL in (e.message or "") for e in core.list_namespaced_event(
                    namespace, field_selector="involvedObject.name=pinned-hot").items)
        wait_for(refused_for_load, 120, f"Volcano refusing the pod pinned to {hot} for its CPU load", interval=1)
        for i in range(4):
            core.create_namespaced_pod(namespace, _pod(f"free-{i}", group))

        def placed(names):
            pods = {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(namespace).items}
            return pods if all(pods.get(n) for n in names) else None
        pods = wait_for(lambda: placed([f"free-{i}" for i in range(4)]), 60, "free pods scheduled")
        assert {pods[f"free-{i}"] for i in range(4)} == {cool}, pods
        assert not core.read_namespaced_pod("pinned-hot", namespace).spec.node_name

        # Raise the threshold through the policy: Volcano reloads its file and the hot node takes
        # the waiting pod — nothing restarted.
        policy({"loadAwareScheduling": {"enabled": True, "cpuThresholdPercent": 80, "memoryThresholdPercent": 90}})
        wait_for(lambda: "cpu: 80" in conf.read_text(), 10, "threshold 80 in Volcano's configuration")
        wait_for(lambda: core.read_namespaced_pod("pinned-hot", namespace).spec.node_name == hot, 60,
                 "the pod pinned to the 75 % node scheduled after the threshold rose to 80 %")
        assert all(processes.alive(r) for r in started)
    finally:
        for record in started:
            processes.stop(record)
        for target in targets:
            target.unlink(missing_ok=True)
        try:
            client.CoordinationV1Api(core.api_client).delete_namespaced_lease(f"load-{group}", "tidal-system")
        except ApiException:
            pass
        conf.write_text(original_conf)  # the shared lab's scheduler as it was
        for name in (hot, cool):
            for delete in (lambda: core.delete_node(name), lambda: client.CustomObjectsApi(core.api_client)
                           .delete_cluster_custom_object("colocation.tidal.io", "v1alpha1", "nodeprofiles", name)):
                try:
                    delete()
                except ApiException:
                    pass
