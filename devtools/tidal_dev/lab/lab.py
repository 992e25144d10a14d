# SPDX-License-Identifier: Apache-2.0
"""The lab: a real Kubernetes control plane with Volcano and kwok nodes on loopback.

`Lab(dir).up(nodes=3, real_nodes=1)` builds the pinned binaries when they are not cached,
starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, Volcano's
controller-manager and scheduler, kwok and Prometheus, installs Volcano's CRDs, creates the
fake nodes and brings up the real node (containerd, kubelet, kube-proxy: `realnode`).
It is idempotent: components that are already running and healthy are reused.
State (ports, PIDs, PKI, etcd data, logs) lives in the lab directory; the built
binaries live in the shared cache and survive `down --wipe`.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import yaml

from tidal_dev.lab import build, kubeconfig, network, processes, realnode, versions
from tidal_dev.lab.components import (COMPONENT_NAMES, KWOK_NODE_ANNOTATION, KWOK_NODE_ANNOTATION_VALUE, PORT_NAMES,
                                  PROMETHEUS_RULES_DIR, PROMETHEUS_TARGETS_DIR, REAL_NODE_COMPONENTS, Component,
                                  LabContext, components, prometheus_config)
from tidal_dev.lab.pki import ensure_lab_pki
from tidal_dev.lab.ports import free_ports, port_free

ASSETS_IN_PACKAGE = Path(__file__).resolve().parent / "assets"
NODE_NAME_PREFIX = "lab-node-"
# Realistic capacity for a fake node: a mid-size online-serving machine.
NODE_CAPACITY = {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "200Gi"}
START_TIMEOUT_SECONDS = {"kube-apiserver": 180.0}
# Several kubelets on one machine would share its cgroups, iptables and ports: one is what the
# lab can run faithfully.
MAX_REAL_NODES = 1
# Which lab runs this machine's real node (its directory; its state says whether that node runs).
REAL_NODE_OWNER = Path("/run/tidal-lab/real-node.json")
REAL_NODE_COMPONENT_NAMES = frozenset(c.name for c in REAL_NODE_COMPONENTS)
DEFAULT_START_TIMEOUT_SECONDS = 90.0


def build_tag(reference: str, archive: Path) -> str:
    """`localhost/tidal:0.1.0` built into `.../<key>/archive` -> `localhost/tidal:0.1.0-<key>`."""
    return f"{reference}-{Path(archive).parent.name}"


class LabError(RuntimeError):
    """The lab cannot do what was asked; the message says why and what to do."""


@dataclass
class ComponentStatus:
    name: str
    healthy: bool
    pid: int | None
    endpoint: str
    detail: str


@dataclass
class LabStatus:
    lab_dir: str
    kubeconfig: str
    components: list[ComponentStatus] = field(default_factory=list)
    nodes: list[dict] = field(default_factory=list)
    prometheus_url: str = ""

    @property
    def healthy(self) -> bool:
        return bool(self.components) and all(c.healthy for c in self.components)

    def to_json(self) -> dict:
        return {"healthy": self.healthy, "lab_dir": self.lab_dir, "kubeconfig": self.kubeconfig,
                "components": [asdict(c) for c in self.components], "nodes": self.nodes,
                "prometheus_url": self.prometheus_url}


@dataclass
class UpResult:
    started: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    nodes_created: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)


def _log_tail(path: str, lines: int = 25) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Lab:
    def __init__(self, lab_dir: Path | str | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.dir = Path(lab_dir or versions.default_run_dir()).expanduser().resolve()
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))

    # -- paths and state ------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.dir / "lab.json"

    @property
    def kubeconfig_path(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def prometheus_url(self) -> str:
        """Where the lab's Prometheus answers (on the lab bridge when the lab has real nodes)."""
        state = self._load_state()
        return f"http://{network.api_host(int(state.get('real_nodes', 0)))}:{state['ports']['prometheus']}"

    @property
    def logs_dir(self) -> Path:
        return self.dir / "logs"

    def _load_state(self) -> dict:
        try:
            return json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}

    def _save_state(self, state: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_name("lab.json.tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.state_path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One `up`/`down` at a time per lab directory (make site and a test run may race)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _records(self, state: dict) -> dict[str, processes.ProcessRecord]:
        return {name: processes.ProcessRecord.from_json(rec)
                for name, rec in state.get("processes", {}).items()}

    def _context(self, ports: dict[str, int], real_nodes: int = 0) -> LabContext:
        api_host = network.api_host(real_nodes)
        pki = ensure_lab_pki(self.dir / "pki", api_host)
        server = f"https://{api_host}:{ports['apiserver']}"
        admin = kubeconfig.write(self.kubeconfig_path, server, pki.ca.cert, pki.admin, "tidal-lab-admin")
        identities = {"kube-controller-manager": (pki.controller_manager, "system:kube-controller-manager"),
                      "kube-scheduler": (pki.scheduler, "system:kube-scheduler"),
                      "kube-proxy": (pki.kube_proxy, "system:kube-proxy")}
        for index in range(real_nodes):
            name = realnode.node_for(self.dir, index).name
            identities[f"node-{name}"] = (pki.node(name), f"system:node:{name}")
        for file, (pair, user) in identities.items():
            kubeconfig.write(self.dir / "pki" / f"{file}.kubeconfig", server, pki.ca.cert, pair, user)
        return LabContext(lab_dir=self.dir, bin_dir=versions.bin_dir(), assets_dir=versions.assets_dir(),
                          ports=ports, pki=pki, admin_kubeconfig=admin,
                          controller_manager_kubeconfig=self.dir / "pki" / "kube-controller-manager.kubeconfig",
                          prometheus_binary=shutil.which("prometheus") or "prometheus",
                          api_host=api_host, real_nodes=real_nodes)

    def _choose_ports(self, state: dict, records: dict[str, processes.ProcessRecord]) -> dict[str, int]:
        ports = dict(state.get("ports", {}))
        if ports and not set(ports) >= set(PORT_NAMES):  # a lab from before a component was added
            missing = [n for n in PORT_NAMES if n not in ports]
            ports.update(zip(missing, free_ports(len(missing))))
        if set(ports) >= set(PORT_NAMES):
            if any(processes.alive(r) for r in records.values()):
                return ports
            if all(port_free(p) for p in ports.values()):
                return ports
            self.log("some recorded lab ports are taken by other programs: choosing new ports")
        return dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES))))

    # -- up -------------------------------------------------------------------
    def up(self, nodes: int = 3, build_binaries: bool = True, real_nodes: int = 1) -> UpResult:
        if nodes < 0:
            raise LabError(f"--nodes must be 0 or more (got {nodes})")
        if not 0 <= real_nodes <= MAX_REAL_NODES:
            raise LabError(f"--real-nodes must be 0 or {MAX_REAL_NODES} (got {real_nodes}): several kubelets "
                           "on one machine would share its cgroups, iptables rules and ports")
        if build_binaries:
            build.build(log=self.log)
        elif build.missing_binaries():
            missing = ", ".join(b.name for b in build.missing_binaries())
            raise LabError(f"lab binaries missing ({missing}): run `tidal lab build`")
        if shutil.which("prometheus") is None:
            raise LabError("Prometheus is not installed: install the Debian package `prometheus` "
                           "(`make test` does this).")
        with self._locked():
            return self._up_locked(nodes, real_nodes)

    def _up_locked(self, nodes: int, real_nodes: int) -> UpResult:
        state = self._load_state()
        records = self._records(state)
        ports = self._choose_ports(state, records)
        if real_nodes > 0:
            self._claim_real_node()
            try:
                network.ensure()
            except network.NetworkError as err:
                raise LabError(str(err)) from None
        ctx = self._context(ports, real_nodes)
        state.update(ports=ports, versions=versions.versions_key(), lab_dir=str(self.dir), real_nodes=real_nodes)
        self._write_configs(ctx)
        result = UpResult()
        wanted = components(real_nodes)
        for name in [n for n in records if n not in {c.name for c in wanted}]:
            if processes.stop(records.pop(name)):  # e.g. the real node of a lab now without one
                result.stopped.append(name)
        for component in wanted:
            record = records.get(component.name)
            # A changed command line (new ports, addresses, binaries) restarts the component.
            if (record and processes.alive(record) and list(record.argv) == component.command(ctx)
                    and component.health(ctx).healthy):
                result.reused.append(component.name)
                if component.name == "prometheus":
                    self._reload_prometheus(ctx)  # its configuration was just rewritten
            else:
                if record:
                    processes.stop(record)
                records[component.name] = self._start(component, ctx)
                state["processes"] = {n: r.to_json() for n, r in records.items()}
                self._save_state(state)
                result.started.append(component.name)
            if component.name == "kube-apiserver":
                # Every time, not only on first start: Volcano's controller-manager waits
                # forever for informers whose CRDs are missing. Server-side apply is idempotent.
                self._install_volcano_crds()
            if component.name == "containerd":
                realnode.ensure_cgroup_root()
            if component.name == "containerd" and realnode.ensure_pause_image(ctx.bin_dir, ctx.real_node):
                self.log(f"imported the sandbox image {realnode.PAUSE_IMAGE} into {ctx.real_node.name}'s containerd")
        result.nodes_created = self.ensure_nodes(nodes)
        self._wait_nodes_ready(real_nodes=[realnode.node_for(self.dir, i).name for i in range(real_nodes)])
        state["processes"] = {n: r.to_json() for n, r in records.items()}
        self._save_state(state)
        return result

    @staticmethod
    def _reload_prometheus(ctx: LabContext) -> None:
        import urllib.request
        request = urllib.request.Request(ctx.url("prometheus", "/-/reload"), method="POST")
        try:
            urllib.request.urlopen(request, timeout=10).read()
        except OSError as err:  # a stale configuration is not worth failing `up` for
            print(f"prometheus: configuration not reloaded: {err}", file=sys.stderr)

    def _write_configs(self, ctx: LabContext) -> None:
        conf = self.dir / "volcano-scheduler.conf"
        if not conf.exists():  # the policy reconciler edits it later: never overwrite
            shutil.copyfile(ASSETS_IN_PACKAGE / "volcano-scheduler.conf", conf)
        stages = sorted((ctx.assets_dir / "kwok-stages").glob("*.yaml"))
        if not stages:
            raise LabError(f"kwok stages missing under {ctx.assets_dir}: run `tidal lab build --force`")
        (self.dir / "kwok.yaml").write_text(
            "\n---\n".join(s.read_text().strip() for s in stages) + "\n")
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(prometheus_config(ctx), sort_keys=False))
        for sub in (PROMETHEUS_TARGETS_DIR, PROMETHEUS_RULES_DIR):  # file_sd targets and rules go here
            (self.dir / sub).mkdir(exist_ok=True)
        for index in range(ctx.real_nodes):
            realnode.write_configs(realnode.node_for(self.dir, index), ctx.pki.ca.cert,
                                   ctx.kubeconfig_of("kube-proxy"), ctx.ports)

    def _start(self, component: Component, ctx: LabContext) -> processes.ProcessRecord:
        self.log(f"starting {component.name}")
        record = processes.start(component.name, component.command(ctx),
                                 self.logs_dir / f"{component.name}.log", cwd=self.dir,
                                 env=component.env(ctx) if component.env else None)
        timeout = START_TIMEOUT_SECONDS.get(component.name, DEFAULT_START_TIMEOUT_SECONDS)
        deadline = time.monotonic() + timeout
        health = component.health(ctx)
        while not health.healthy:
            if not processes.alive(record):
                raise LabError(f"{component.name} exited during start-up; last lines of {record.log}:\n"
                               f"{_log_tail(record.log)}")
            if time.monotonic() > deadline:
                processes.stop(record)
                raise LabError(f"{component.name} not healthy after {timeout:.0f}s ({health.detail}); "
                               f"last lines of {record.log}:\n{_log_tail(record.log)}")
            time.sleep(0.5)
            health = component.health(ctx)
        return record

    # -- Kubernetes objects ---------------------------------------------------
    def api_client(self):
        """A `kubernetes` ApiClient authenticated as the lab admin."""
        from kubernetes import client, config
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(self.kubeconfig_path), client_configuration=cfg)
        return client.ApiClient(cfg)

    def _install_volcano_crds(self) -> None:
        from tidal_dev.lab.apply import create_or_replace_all
        crds = []
        for path in sorted((versions.assets_dir() / "volcano-crds").glob("*.yaml")):
            crds.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
        with self.api_client() as api:
            create_or_replace_all(api, crds, wait_established=True)
        self.log(f"installed {len(crds)} Volcano CRDs")

    def ensure_nodes(self, count: int) -> list[str]:
        """Create fake nodes `lab-node-0..count-1` that kwok manages; existing ones are kept."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException
        created = []
        with self.api_client() as api:
            core = client.CoreV1Api(api)
            for index in range(count):
                name = f"{NODE_NAME_PREFIX}{index}"
                body = {
                    "apiVersion": "v1", "kind": "Node",
                    "metadata": {
                        "name": name,
                        "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE,
                                        "node.alpha.kubernetes.io/ttl": "0"},
                        "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                   "kubernetes.io/arch": "amd64", "type": "kwok",
                                   "node.kubernetes.io/instance-type": "lab-16c64g"},
                    },
                    "status": {"capacity": NODE_CAPACITY, "allocatable": NODE_CAPACITY},
                }
                try:
                    core.create_node(body)
                    created.append(name)
                except ApiException as err:
                    if err.status != 409:
                        raise
        if created:
            self.log(f"created nodes: {', '.join(created)}")
        return created

    def node_summaries(self) -> list[dict]:
        from kubernetes import client
        with self.api_client() as api:
            items = client.CoreV1Api(api).list_node(_request_timeout=5).items
        out = []
        for node in items:
            ready = next((c.status for c in (node.status.conditions or []) if c.type == "Ready"), "Unknown")
            out.append({"name": node.metadata.name, "ready": ready == "True",
                        "cpu": node.status.allocatable.get("cpu") if node.status.allocatable else None,
                        "memory": node.status.allocatable.get("memory") if node.status.allocatable else None})
        return out

    def _wait_nodes_ready(self, timeout: float = 120.0, real_nodes: list[str] = ()) -> None:
        deadline = time.monotonic() + timeout
        while True:
            # Only the lab's own nodes: tests and benchmarks add nodes of their own.
            nodes = [n for n in self.node_summaries()
                     if n["name"].startswith(NODE_NAME_PREFIX) or n["name"] in real_nodes]
            missing = set(real_nodes) - {n["name"] for n in nodes}
            nodes += [{"name": name, "ready": False} for name in sorted(missing)]
            not_ready = [n["name"] for n in nodes if not n["ready"]]
            if not not_ready:
                return
            if time.monotonic() > deadline:
                raise LabError(f"nodes not Ready after {timeout:.0f}s: {', '.join(not_ready)} "
                               f"(see {self.logs_dir / 'kwok.log'} and {self.logs_dir / 'kubelet.log'})")
            time.sleep(0.5)

    # -- status / down ----------------------------------------------------------
    def status(self) -> LabStatus:
        state = self._load_state()
        records = self._records(state)
        result = LabStatus(lab_dir=str(self.dir), kubeconfig=str(self.kubeconfig_path))
        if not state.get("ports"):
            return result
        ctx = self._context(state["ports"], int(state.get("real_nodes", 0)))
        result.prometheus_url = ctx.url("prometheus", "")
        for component in components(ctx.real_nodes):
            record = records.get(component.name)
            running = bool(record and processes.alive(record))
            health = component.health(ctx) if running else None
            result.components.append(ComponentStatus(
                name=component.name, healthy=bool(health and health.healthy),
                pid=record.pid if running else None, endpoint=component.endpoint(ctx),
                detail=health.detail if health else "not running"))
        apiserver = next(c for c in result.components if c.name == "kube-apiserver")
        if apiserver.healthy:
            try:
                result.nodes = self.node_summaries()
            except Exception as err:  # status must still print when the API misbehaves
                result.nodes = [{"error": str(err)}]
        return result

    def stop(self, name: str) -> bool:
        """Stop one component; True when it was running."""
        with self._locked():
            records = self._records(self._load_state())
            return name in records and processes.stop(records[name])

    def restart(self, name: str) -> None:
        """Stop and start one component (the node roles' handlers: a changed kubelet or
        containerd configuration), then wait until it is healthy again."""
        with self._locked():
            state = self._load_state()
            records = self._records(state)
            if not state.get("ports"):
                raise LabError(f"the lab in {self.dir} has not been created: run `tidal lab up`")
            ctx = self._context(state["ports"], int(state.get("real_nodes", 0)))
            component = next((c for c in components(ctx.real_nodes) if c.name == name), None)
            if component is None:
                raise LabError(f"this lab has no component {name!r}; it has: "
                               f"{', '.join(c.name for c in components(ctx.real_nodes))}")
            if name in records:
                processes.stop(records[name])
            records[name] = self._start(component, ctx)
            state["processes"] = {n: r.to_json() for n, r in records.items()}
            self._save_state(state)

    def import_image(self, archive: Path) -> list[str]:
        """Import an OCI archive into the containerd of every running real node that does not
        hold that image yet (what a registry pull does in a cluster); returns those nodes."""
        from tidal_dev.lab.image import archive_image, import_image
        state = self._load_state()
        records = self._records(state)
        if "containerd" not in records or not processes.alive(records["containerd"]):
            return []
        name, digest, _ = archive_image(archive)
        names = []
        for index in range(int(state.get("real_nodes", 0))):
            node = realnode.node_for(self.dir, index)
            if realnode.image_digest(versions.bin_dir(), node, name) != digest:
                import_image(archive, versions.bin_dir() / "ctr", node.containerd_socket)
                names.append(node.name)
            # Also under a tag naming the build (its inputs' hash), which the lab deploys: a
            # change of the sources is a new tag, so `make site` rolls the pods onto it.
            if realnode.image_digest(versions.bin_dir(), node, build_tag(name, archive)) != digest:
                realnode.ctr(versions.bin_dir(), node, "images", "tag", "--force", name, build_tag(name, archive))
                if node.name not in names:
                    names.append(node.name)
        return names

    def _claim_real_node(self) -> None:
        """One lab at a time may run a real node on this machine (the bridge, the kubelet's
        cgroup root and kube-proxy's rules are the machine's): refuse while another lab's is up."""
        try:
            other = json.loads(REAL_NODE_OWNER.read_text()).get("lab_dir")
        except (OSError, ValueError):
            other = None
        if other and other != str(self.dir):
            owner = Lab(other, log=self.log)
            running = [name for name, record in owner._records(owner._load_state()).items()
                       if name in REAL_NODE_COMPONENT_NAMES and processes.alive(record)]
            if running:
                raise LabError(f"the lab in {other} runs this machine's real node ({', '.join(running)}): "
                               f"stop it first (`tidal lab --dir {other} down`) or use --real-nodes 0")
        REAL_NODE_OWNER.parent.mkdir(parents=True, exist_ok=True)
        REAL_NODE_OWNER.write_text(json.dumps({"lab_dir": str(self.dir)}))

    def _remove_real_nodes(self, count: int, kube_proxy: bool) -> list[str]:
        """What a real node leaves once its processes are stopped, then the lab network."""
        removed = []
        for index in range(count):
            node = realnode.node_for(self.dir, index)
            removed += [f"{node.name}: {what}" for what in realnode.cleanup(node, versions.bin_dir(), kube_proxy)]
        if count:
            removed += network.remove()
            try:
                if json.loads(REAL_NODE_OWNER.read_text()).get("lab_dir") == str(self.dir):
                    REAL_NODE_OWNER.unlink()
            except (OSError, ValueError):
                pass
        return removed

    def down(self, wipe: bool = False) -> list[str]:
        """Stop every process the lab started (reverse order); `wipe` also deletes its state."""
        from tidal_dev.lab import controllers
        with self._locked():
            # Tidal's own controllers (tidal lab controllers) talk to the API server: first.
            stopped = [f"controller {name}" for name in controllers.down(self.dir)]
            state = self._load_state()
            records = self._records(state)
            # Reverse start order (the state file sorts its keys); unknown names last.
            order = [n for n in reversed(COMPONENT_NAMES) if n in records]
            order += [n for n in records if n not in order]
            for name in order:
                if processes.stop(records[name]):
                    stopped.append(name)
            stopped += self._remove_real_nodes(int(state.get("real_nodes", 0)), "kube-proxy" in records)
            state["processes"] = {}
            if wipe:
                for child in self.dir.iterdir():
                    if child.name != ".lock":
                        shutil.rmtree(child) if child.is_dir() else child.unlink()
            else:
                self._save_state(state)
        return stopped
