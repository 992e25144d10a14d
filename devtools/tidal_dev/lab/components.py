# SPDX-License-Identifier: Apache-2.0
"""The lab's components: how each one is started and how its health is read.

Every component listens on 127.0.0.1, on ports chosen when the lab is first created and kept
across restarts (kubeconfigs handed out stay valid) — except what pods must reach: with real
nodes, the API server and the kubelet listen on the lab bridge's address (`network`).
"""
from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tidal_dev.lab import realnode
from tidal_dev.lab.pki import SERVICE_CLUSTER_IP_RANGE, LabPKI

# Every port the lab needs, by purpose.
PORT_NAMES = (
    "etcd_client", "etcd_peer", "etcd_metrics", "apiserver", "controller_manager",
    "volcano_scheduler_healthz", "volcano_scheduler_metrics",
    "volcano_controllers_healthz", "volcano_controllers_metrics", "kwok", "prometheus",
    "scheduler", "kubelet", "kubelet_healthz", "kube_proxy_healthz", "kube_proxy_metrics",
)

# What pods must reach listens on the lab bridge's address when the lab has real nodes: the API
# server (the `kubernetes` Service) and Prometheus (tidal-console's monitoring).
BRIDGE_PORTS = ("apiserver", "prometheus")

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# Under the lab directory: file_sd target files and rule files of Tidal's own processes.
PROMETHEUS_TARGETS_DIR = "prometheus-targets"
PROMETHEUS_RULES_DIR = "prometheus-rules"
KWOK_NODE_ANNOTATION_VALUE = "fake"


@dataclass
class LabContext:
    """What a component needs to build its command line."""

    lab_dir: Path
    bin_dir: Path
    assets_dir: Path
    ports: dict[str, int]
    pki: LabPKI
    admin_kubeconfig: Path
    controller_manager_kubeconfig: Path
    prometheus_binary: str
    # 127.0.0.1 without real nodes; the lab bridge's address with them.
    api_host: str = "127.0.0.1"
    real_nodes: int = 0

    @property
    def apiserver_url(self) -> str:
        return f"https://{self.api_host}:{self.ports['apiserver']}"

    def kubeconfig_of(self, identity: str) -> Path:
        """The kubeconfig of a lab identity (written by `Lab._context`)."""
        return self.lab_dir / "pki" / f"{identity}.kubeconfig"

    @property
    def real_node(self) -> "realnode.RealNode":
        return realnode.node_for(self.lab_dir, 0)

    def address(self, port_name: str) -> str:
        """`host:port` where the component behind `port_name` listens."""
        host = self.api_host if port_name in BRIDGE_PORTS else "127.0.0.1"
        return f"{host}:{self.ports[port_name]}"

    def url(self, port_name: str, path: str, scheme: str = "http") -> str:
        return f"{scheme}://{self.address(port_name)}{path}"


@dataclass(frozen=True)
class Health:
    healthy: bool
    detail: str


def probe(url: str, context: ssl.SSLContext | None = None, timeout: float = 2.0) -> Health:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
            body = resp.read(200).decode(errors="replace").strip()
            return Health(200 <= resp.status < 300, f"{resp.status} {body[:80]}")
    except urllib.error.HTTPError as err:
        return Health(False, f"{err.code} {err.read(200).decode(errors='replace').strip()[:120]}")
    except (OSError, ssl.SSLError) as err:
        return Health(False, str(getattr(err, "reason", err)))


def admin_tls(ctx: LabContext) -> ssl.SSLContext:
    tls = ssl.create_default_context(cafile=str(ctx.pki.ca.cert))
    tls.load_cert_chain(str(ctx.pki.admin.cert), str(ctx.pki.admin.key))
    return tls


def _unverified_tls() -> ssl.SSLContext:
    # kube-controller-manager serves /healthz with a self-signed certificate it makes itself.
    tls = ssl.create_default_context()
    tls.check_hostname = False
    tls.verify_mode = ssl.CERT_NONE
    return tls


@dataclass(frozen=True)
class Component:
    name: str
    command: Callable[[LabContext], list[str]]
    health: Callable[[LabContext], Health]
    endpoint: Callable[[LabContext], str]
    env: Callable[[LabContext], dict[str, str]] | None = None


def _etcd(ctx: LabContext) -> list[str]:
    peer = ctx.url("etcd_peer", "")
    return [
        str(ctx.bin_dir / "etcd"), "--name", "lab", "--data-dir", str(ctx.lab_dir / "etcd"),
        "--listen-client-urls", ctx.url("etcd_client", ""),
        "--advertise-client-urls", ctx.url("etcd_client", ""),
        "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
        "--initial-cluster", f"lab={peer}",
        "--listen-metrics-urls", ctx.url("etcd_metrics", ""),
        # A lab survives losing its last writes on a crash; skipping fsync keeps the
        # API server fast on a shared disk.
        "--unsafe-no-fsync", "--quota-backend-bytes", str(2 * 1024**3),
        "--log-level", "warn",
    ]


def _apiserver(ctx: LabContext) -> list[str]:
    pki = ctx.pki
    return [
        str(ctx.bin_dir / "kube-apiserver"),
        "--etcd-servers", ctx.url("etcd_client", ""),
        "--bind-address", ctx.api_host, "--advertise-address", ctx.api_host,
        "--secure-port", str(ctx.ports["apiserver"]),
        "--kubelet-client-certificate", str(pki.kubelet_client.cert),
        "--kubelet-client-key", str(pki.kubelet_client.key),
        "--kubelet-preferred-address-types", "InternalIP",
        "--cert-dir", str(ctx.lab_dir / "apiserver-certs"),
        "--tls-cert-file", str(pki.apiserver.cert), "--tls-private-key-file", str(pki.apiserver.key),
        "--client-ca-file", str(pki.ca.cert),
        "--service-account-key-file", str(pki.service_account_pub),
        "--service-account-signing-key-file", str(pki.service_account_key),
        "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
        "--api-audiences", "https://kubernetes.default.svc.cluster.local",
        "--service-cluster-ip-range", SERVICE_CLUSTER_IP_RANGE,
        "--authorization-mode", "Node,RBAC",
        "--enable-admission-plugins", "NodeRestriction",
        "--allow-privileged=true",
        "--profiling=false",
        "--v=1",
    ]


def _controller_manager(ctx: LabContext) -> list[str]:
    kubeconfig = str(ctx.controller_manager_kubeconfig)
    return [
        str(ctx.bin_dir / "kube-controller-manager"),
        "--kubeconfig", kubeconfig, "--authentication-kubeconfig", kubeconfig,
        "--authorization-kubeconfig", kubeconfig,
        "--bind-address", "127.0.0.1", "--secure-port", str(ctx.ports["controller_manager"]),
        "--cert-dir", str(ctx.lab_dir / "controller-manager-certs"),
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        "--service-account-private-key-file", str(ctx.pki.service_account_key),
        "--root-ca-file", str(ctx.pki.ca.cert),
        "--cluster-signing-cert-file", str(ctx.pki.ca.cert),
        "--cluster-signing-key-file", str(ctx.pki.ca.key),
        "--service-cluster-ip-range", SERVICE_CLUSTER_IP_RANGE,
        "--controllers", "*",
        "--v=1",
    ]


def _scheduler(ctx: LabContext) -> list[str]:
    kubeconfig = str(ctx.kubeconfig_of("kube-scheduler"))
    return [
        str(ctx.bin_dir / "kube-scheduler"),
        "--kubeconfig", kubeconfig, "--authentication-kubeconfig", kubeconfig,
        "--authorization-kubeconfig", kubeconfig,
        "--bind-address", "127.0.0.1", "--secure-port", str(ctx.ports["scheduler"]),
        "--leader-elect=false", "--v=1",
    ]


def _containerd(ctx: LabContext) -> list[str]:
    return [str(ctx.bin_dir / "containerd"), "--config", str(ctx.real_node.containerd_config)]


def _kubelet(ctx: LabContext) -> list[str]:
    node = ctx.real_node
    return [
        str(ctx.bin_dir / "kubelet"),
        "--config", str(node.kubelet_config),
        "--kubeconfig", str(ctx.kubeconfig_of(f"node-{node.name}")),
        "--root-dir", str(node.kubelet_dir),
        "--cert-dir", str(node.kubelet_dir / "pki"),
        "--hostname-override", node.name, "--node-ip", ctx.api_host,
        "--node-labels", "type=real,node.kubernetes.io/instance-type=lab-real",
        "--v=1",
    ]


def _kube_proxy(ctx: LabContext) -> list[str]:
    return [str(ctx.bin_dir / "kube-proxy"), "--config", str(ctx.real_node.kube_proxy_config), "--v=1"]


def _real_node_env(ctx: LabContext) -> dict[str, str]:
    # containerd finds its runc shim on PATH.
    import os
    return dict(os.environ, PATH=f"{ctx.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


def _containerd_health(ctx: LabContext) -> Health:
    import subprocess
    node = ctx.real_node
    if not node.containerd_socket.exists():
        return Health(False, f"no socket at {node.containerd_socket}")
    proc = subprocess.run([str(ctx.bin_dir / "ctr"), "--address", str(node.containerd_socket), "version"],
                          capture_output=True, text=True, timeout=10)
    if proc.returncode != 0:
        return Health(False, proc.stderr.strip()[:120])
    server = [line.split()[-1] for line in proc.stdout.splitlines() if line.strip().startswith("Version:")]
    return Health(True, f"containerd {server[-1] if server else '?'}")


def _volcano_controllers(ctx: LabContext) -> list[str]:
    return [
        str(ctx.bin_dir / "vc-controller-manager"), "--kubeconfig", str(ctx.admin_kubeconfig),
        "--scheduler-name", "volcano", "--leader-elect=false",
        "--enable-healthz", "--healthz-address", f"127.0.0.1:{ctx.ports['volcano_controllers_healthz']}",
        "--enable-metrics", "--listen-address", f"127.0.0.1:{ctx.ports['volcano_controllers_metrics']}",
        "--v=2",
    ]


def _volcano_scheduler(ctx: LabContext) -> list[str]:
    return [
        str(ctx.bin_dir / "vc-scheduler"), "--kubeconfig", str(ctx.admin_kubeconfig),
        "--scheduler-name", "volcano", "--leader-elect=false",
        "--scheduler-conf", str(ctx.lab_dir / "volcano-scheduler.conf"),
        "--enable-healthz", "--healthz-address", f"127.0.0.1:{ctx.ports['volcano_scheduler_healthz']}",
        "--enable-metrics", "--listen-address", f"127.0.0.1:{ctx.ports['volcano_scheduler_metrics']}",
        "--cache-dumper=false",
        "--v=3",
    ]


def _kwok(ctx: LabContext) -> list[str]:
    return [
        str(ctx.bin_dir / "kwok"), "--kubeconfig", str(ctx.admin_kubeconfig),
        "--config", str(ctx.lab_dir / "kwok.yaml"),
        "--manage-nodes-with-annotation-selector",
        f"{KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
        "--server-address", f"127.0.0.1:{ctx.ports['kwok']}",
        "--node-lease-duration-seconds", "40",
        "--cidr", "10.244.0.0/16", "--node-ip", "127.0.0.1",
    ]


def _prometheus(ctx: LabContext) -> list[str]:
    return [
        ctx.prometheus_binary, "--config.file", str(ctx.lab_dir / "prometheus.yml"),
        "--storage.tsdb.path", str(ctx.lab_dir / "prometheus-data"),
        "--storage.tsdb.retention.time", "2d",
        "--web.listen-address", ctx.address("prometheus"),
        "--web.enable-lifecycle",
        "--log.level", "warn",
    ]


def _http(port_name: str, path: str) -> Callable[[LabContext], Health]:
    return lambda ctx: probe(ctx.url(port_name, path))


# In start order: each component needs only those before it (`down` stops them in reverse).
COMPONENTS: tuple[Component, ...] = (
    Component("etcd", _etcd, _http("etcd_client", "/health"),
              lambda c: c.url("etcd_client", "")),
    Component("kube-apiserver", _apiserver,
              lambda c: probe(c.apiserver_url + "/readyz", admin_tls(c)),
              lambda c: c.apiserver_url),
    Component("kube-controller-manager", _controller_manager,
              lambda c: probe(c.url("controller_manager", "/healthz", "https"), _unverified_tls()),
              lambda c: c.url("controller_manager", "", "https")),
    Component("kube-scheduler", _scheduler,
              lambda c: probe(c.url("scheduler", "/healthz", "https"), _unverified_tls()),
              lambda c: c.url("scheduler", "", "https")),
    Component("volcano-controller-manager", _volcano_controllers,
              _http("volcano_controllers_healthz", "/healthz"),
              lambda c: c.url("volcano_controllers_healthz", "")),
    Component("volcano-scheduler", _volcano_scheduler,
              _http("volcano_scheduler_healthz", "/healthz"),
              lambda c: c.url("volcano_scheduler_healthz", "")),
    Component("kwok", _kwok, _http("kwok", "/healthz"), lambda c: c.url("kwok", "")),
    Component("prometheus", _prometheus, _http("prometheus", "/-/ready"),
              lambda c: c.url("prometheus", "")),
)

# A real node, started after the control plane (and stopped before it).
REAL_NODE_COMPONENTS: tuple[Component, ...] = (
    Component("containerd", _containerd, _containerd_health,
              lambda c: f"unix://{c.real_node.containerd_socket}", _real_node_env),
    Component("kubelet", _kubelet, _http("kubelet_healthz", "/healthz"),
              lambda c: f"https://{c.api_host}:{c.ports['kubelet']}", _real_node_env),
    Component("kube-proxy", _kube_proxy, _http("kube_proxy_healthz", "/healthz"),
              lambda c: c.url("kube_proxy_healthz", ""), _real_node_env),
)

COMPONENT_NAMES = tuple(c.name for c in COMPONENTS + REAL_NODE_COMPONENTS)


def components(real_nodes: int) -> tuple[Component, ...]:
    """In start order: the control plane, then the real node's runtime, kubelet and proxy."""
    return COMPONENTS + (REAL_NODE_COMPONENTS if real_nodes > 0 else ())


def prometheus_config(ctx: LabContext) -> dict:
    """Scrape every lab target that exposes metrics, each on loopback."""
    def static(job: str, port_name: str, **extra) -> dict:
        return {"job_name": job, "static_configs": [{"targets": [ctx.address(port_name)]}],
                **extra}

    admin_tls_config = {"ca_file": str(ctx.pki.ca.cert), "cert_file": str(ctx.pki.admin.cert),
                        "key_file": str(ctx.pki.admin.key)}
    return {
        "global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
        # Recording rules and alerts (monitoring/ of the repo) are copied here by whoever runs
        # Tidal's processes against the lab; POST /-/reload makes Prometheus read them.
        "rule_files": [str(ctx.lab_dir / PROMETHEUS_RULES_DIR / "*.yml")],
        "scrape_configs": [
            static("prometheus", "prometheus"),
            static("etcd", "etcd_metrics"),
            static("kube-apiserver", "apiserver", scheme="https", tls_config=admin_tls_config),
            static("volcano-scheduler", "volcano_scheduler_metrics"),
            static("volcano-controller-manager", "volcano_controllers_metrics"),
            static("kwok", "kwok"),
            # Tidal's own processes (tidal-manager, tidal-agent replay, tidal-console) run on
            # ports chosen at start: each drops a file_sd target file here (read within 5 s).
            {"job_name": "tidal",
             "file_sd_configs": [{"files": [str(ctx.lab_dir / PROMETHEUS_TARGETS_DIR / "*.json")],
                                  "refresh_interval": "5s"}],
             # A series' own `node` (the node it is about: tidal-manager reports every node's batch
             # resources) wins over the target's `node` (where the scraped pod runs); without it
             # Prometheus renames the series' label to exported_node and the manager's per-node
             # series all read as the manager's own node.
             "honor_labels": True,
             # Volcano's usage plugin matches node_exporter-style series by instance = node name;
             # agents (one process may act for many fake nodes) label each series with `node`.
             "metric_relabel_configs": [{"source_labels": ["node"], "regex": "(.+)",
                                         "target_label": "instance", "replacement": "$1"}]},
        ],
    }


__all__ = ["COMPONENTS", "COMPONENT_NAMES", "REAL_NODE_COMPONENTS", "components", "Component", "Health", "LabContext",
           "PORT_NAMES", "PROMETHEUS_RULES_DIR", "PROMETHEUS_TARGETS_DIR", "prometheus_config", "probe"]
