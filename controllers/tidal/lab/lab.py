"""The lab: a real Kubernetes control plane with Volcano and kwok nodes on loopback.

`Lab(dir).up(nodes=3)` builds the pinned binaries when they are not cached, starts
etcd, kube-apiserver, kube-controller-manager, Volcano's controller-manager and
scheduler, kwok and Prometheus, installs Volcano's CRDs and creates the fake nodes.
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

from tidal.lab import build, kubeconfig, processes, versions
from tidal.lab.components import (COMPONENT_NAMES, COMPONENTS, KWOK_NODE_ANNOTATION, KWOK_NODE_ANNOTATION_VALUE,
                                  PORT_NAMES, Component, LabContext, prometheus_config)
from tidal.lab.pki import ensure_lab_pki
from tidal.lab.ports import free_ports, port_free

ASSETS_IN_PACKAGE = Path(__file__).resolve().parent / "assets"
NODE_NAME_PREFIX = "lab-node-"
# Realistic capacity for a fake node: a mid-size online-serving machine.
NODE_CAPACITY = {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "200Gi"}
START_TIMEOUT_SECONDS = {"kube-apiserver": 180.0}
DEFAULT_START_TIMEOUT_SECONDS = 90.0


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

    @property
    def healthy(self) -> bool:
        return bool(self.components) and all(c.healthy for c in self.components)

    def to_json(self) -> dict:
        return {"healthy": self.healthy, "lab_dir": self.lab_dir, "kubeconfig": self.kubeconfig,
                "components": [asdict(c) for c in self.components], "nodes": self.nodes}


@dataclass
class UpResult:
    started: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    nodes_created: list[str] = field(default_factory=list)


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

    def _context(self, ports: dict[str, int]) -> LabContext:
        pki = ensure_lab_pki(self.dir / "pki")
        server = f"https://127.0.0.1:{ports['apiserver']}"
        admin = kubeconfig.write(self.kubeconfig_path, server, pki.ca.cert, pki.admin, "tidal-lab-admin")
        kcm = kubeconfig.write(self.dir / "pki" / "kube-controller-manager.kubeconfig", server,
                               pki.ca.cert, pki.controller_manager, "system:kube-controller-manager")
        return LabContext(lab_dir=self.dir, bin_dir=versions.bin_dir(), assets_dir=versions.assets_dir(),
                          ports=ports, pki=pki, admin_kubeconfig=admin,
                          controller_manager_kubeconfig=kcm,
                          prometheus_binary=shutil.which("prometheus") or "prometheus")

    def _choose_ports(self, state: dict, records: dict[str, processes.ProcessRecord]) -> dict[str, int]:
        ports = state.get("ports", {})
        if set(ports) >= set(PORT_NAMES):
            if any(processes.alive(r) for r in records.values()):
                return ports
            if all(port_free(p) for p in ports.values()):
                return ports
            self.log("some recorded lab ports are taken by other programs: choosing new ports")
        return dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES))))

    # -- up -------------------------------------------------------------------
    def up(self, nodes: int = 3, build_binaries: bool = True) -> UpResult:
        if nodes < 0:
            raise LabError(f"--nodes must be 0 or more (got {nodes})")
        if build_binaries:
            build.build(log=self.log)
        elif build.missing_binaries():
            missing = ", ".join(b.name for b in build.missing_binaries())
            raise LabError(f"lab binaries missing ({missing}): run `tidal lab build`")
        if shutil.which("prometheus") is None:
            raise LabError("Prometheus is not installed: install the Debian package `prometheus` "
                           "(`make test` does this).")
        with self._locked():
            return self._up_locked(nodes)

    def _up_locked(self, nodes: int) -> UpResult:
        state = self._load_state()
        records = self._records(state)
        ports = self._choose_ports(state, records)
        ctx = self._context(ports)
        state.update(ports=ports, versions=versions.versions_key(), lab_dir=str(self.dir))
        self._write_configs(ctx)
        result = UpResult()
        for component in COMPONENTS:
            record = records.get(component.name)
            if record and processes.alive(record) and component.health(ctx).healthy:
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
        result.nodes_created = self.ensure_nodes(nodes)
        self._wait_nodes_ready()
        state["processes"] = {n: r.to_json() for n, r in records.items()}
        self._save_state(state)
        return result

    @staticmethod
    def _reload_prometheus(ctx: LabContext) -> None:
        import urllib.request
        request = urllib.request.Request(f"http://127.0.0.1:{ctx.ports['prometheus']}/-/reload", method="POST")
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

    def _start(self, component: Component, ctx: LabContext) -> processes.ProcessRecord:
        self.log(f"starting {component.name}")
        record = processes.start(component.name, component.command(ctx),
                                 self.logs_dir / f"{component.name}.log", cwd=self.dir)
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
        from tidal.lab.apply import create_or_replace_all
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

    def _wait_nodes_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            # Only the lab's own nodes: tests and benchmarks add nodes of their own.
            nodes = [n for n in self.node_summaries() if n["name"].startswith(NODE_NAME_PREFIX)]
            not_ready = [n["name"] for n in nodes if not n["ready"]]
            if not not_ready:
                return
            if time.monotonic() > deadline:
                raise LabError(f"nodes not Ready after {timeout:.0f}s: {', '.join(not_ready)} "
                               f"(see {self.logs_dir / 'kwok.log'})")
            time.sleep(0.5)

    # -- status / down ----------------------------------------------------------
    def status(self) -> LabStatus:
        state = self._load_state()
        records = self._records(state)
        result = LabStatus(lab_dir=str(self.dir), kubeconfig=str(self.kubeconfig_path))
        if not state.get("ports"):
            return result
        ctx = self._context(state["ports"])
        for component in COMPONENTS:
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

    def down(self, wipe: bool = False) -> list[str]:
        """Stop every process the lab started (reverse order); `wipe` also deletes its state."""
        from tidal.lab import controllers
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
            state["processes"] = {}
            if wipe:
                for child in self.dir.iterdir():
                    if child.name != ".lock":
                        shutil.rmtree(child) if child.is_dir() else child.unlink()
            else:
                self._save_state(state)
        return stopped
