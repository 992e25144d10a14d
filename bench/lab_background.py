# SPDX-License-Identifier: Apache-2.0
"""``--background lab``: the load a node's own daemons put beside the pods, for the benches.

A node running Tidal is never quiet: the kubelet, the container runtime, the agent and other
daemons wake up all the time. The benches stand for that with a running lab's control plane
under a steady stream of API work, outside every pod cgroup (plain CFS tasks, like system
daemons):

* the bench's private kwok-only lab (etcd, kube-apiserver, kube-controller-manager,
  kube-scheduler, the Volcano scheduler and controllers, kwok, Prometheus) — already running for
  the bench's own agent;
* plus ``NODES`` more kwok nodes (kwok heartbeats their leases and status);
* plus this module's writer process, at a fixed rate (open loop, ``--rate`` operations per
  second): every operation patches one of 20 ConfigMaps (a new 1 KiB value: an etcd write, a
  watch event to every watcher), and every 10th one creates a pod bound to one of the kwok nodes
  (kwok runs it: status updates) and deletes the oldest once 30 exist (pods churn as a node's
  do).

``--daemons-cgroup`` says where those daemons run on the cpu hierarchy: loose in the root cgroup
(``root``) or in one ``system.slice`` beside ``kubepods``, as on a systemd node.

Run as a process: ``python bench/lab_background.py --kubeconfig K --rate 50 --out F``; on
SIGTERM it writes ``{"ops": n, "seconds": s, "errors": e}`` to ``F``.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

NODES = 10
NAMESPACE = "background"
CONFIGMAPS = 20
MAX_PODS = 30


class Background:
    """Starts the extra kwok nodes and the writer against a running lab; ``stop`` reports."""

    def __init__(self, kubeconfig: Path, workdir: Path, rate: int) -> None:
        from kubernetes import client, config

        from tidal_dev.testing.kwok import kwok_node
        self.out = workdir / "background.json"
        api = config.new_client_from_config(str(kubeconfig))
        core = client.CoreV1Api(api)
        for i in range(NODES):
            kwok_node(core, f"background-{i}", {"cpu": "8", "memory": "32Gi", "pods": "110"})
        self.proc = subprocess.Popen([sys.executable, __file__, "--kubeconfig", str(kubeconfig),
                                      "--rate", str(rate), "--out", str(self.out)],
                                     stdout=subprocess.DEVNULL, stderr=open(workdir / "background.log", "w"))
        self.core = core
        self.rate = rate

    def wait_writing(self, timeout: float = 60) -> None:
        """Until the writer runs (its ConfigMaps exist and change), or SystemExit."""
        deadline = time.monotonic() + timeout
        seen = None
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"the background writer exited ({self.proc.returncode}): see background.log")
            try:
                cms = self.core.list_namespaced_config_map(NAMESPACE).items
                versions = {c.metadata.name: c.metadata.resource_version for c in cms if c.metadata.name.startswith("cm-")}
            except Exception:
                versions = {}
            if len(versions) >= CONFIGMAPS and seen is not None and versions != seen:
                return
            seen = versions if len(versions) >= CONFIGMAPS else None
            if time.monotonic() > deadline:
                raise SystemExit("the background writer did not start writing within 60 s")
            time.sleep(0.5)

    def describe(self) -> str:
        return (f"the bench's kwok-only lab control plane + {NODES} kwok nodes + a writer at {self.rate} API "
                f"operations/s (ConfigMap patches, pod create/delete every 10th)")

    def stop(self) -> dict:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        try:
            return json.loads(self.out.read_text())
        except (OSError, ValueError):
            return {}


DAEMONS_CGROUPS = ("root", "system.slice")
#: the cpu hierarchy's root cgroup (cgroup v1, which the bench's --daemons-cgroup needs)
CPU_ROOT = Path("/sys/fs/cgroup/cpu")


def daemons_in_system_slice(kubelet, cgroups, pid: int | None = None) -> Path:
    """``--daemons-cgroup system.slice``: the bench process (``pid``, default this one; and so
    every daemon it starts after this: the lab, the background writer, the agent) moves to a
    ``system.slice`` cpu cgroup beside ``kubepods`` below the bench's node cgroup, kubepods getting the kubelet's
    ``cpu.shares`` for the node's CPUs: the two groups a systemd node's root has (user.slice
    aside). Returns the slice's directory."""
    from tidal.agent.collector.cgroups import PodQOSClass
    kubepods = kubelet.qos_dirs(PodQOSClass.GUARANTEED)[0]
    if not str(kubepods).startswith(str(CPU_ROOT) + "/"):
        raise SystemExit(f"--daemons-cgroup system.slice needs the cgroup v1 cpu hierarchy at {CPU_ROOT}")
    system_slice = cgroups.make(kubepods.parent / "system.slice")
    cgroups.make(kubepods)
    (kubepods / "cpu.shares").write_text(str((os.cpu_count() or 1) * 1024))
    (system_slice / "cpu.shares").write_text("1024")
    (system_slice / "cgroup.procs").write_text(str(pid or os.getpid()))
    return system_slice


def place_daemons(args: argparse.Namespace, kubelet, cgroups, log) -> None:
    """Where ``--daemons-cgroup`` asks: with ``system.slice``, this process (and every daemon it
    starts from now on) moves there; ``root`` leaves it where it is."""
    if args.daemons_cgroup == "system.slice":
        system_slice = daemons_in_system_slice(kubelet, cgroups)
        log(f"daemons in {system_slice}, beside kubepods (cpu.shares {(os.cpu_count() or 1) * 1024})")


def release_daemons(args: argparse.Namespace) -> None:
    """After :func:`place_daemons`: this process back in the cpu hierarchy's root, so the bench's
    cgroups (its ``system.slice`` among them) can be removed."""
    if args.daemons_cgroup == "system.slice":
        (CPU_ROOT / "cgroup.procs").write_text(str(os.getpid()))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """A bench's ``--background``, ``--background-rate`` and ``--daemons-cgroup`` (bench-isolation,
    bench-memory)."""
    parser.add_argument("--background", choices=("none", "lab"), default="none",
                        help="lab: run beside a busy lab control plane (bench/lab_background.py), as a node "
                             "with a kubelet, an agent and other daemons; none (default): the lab idles")
    parser.add_argument("--background-rate", type=int, default=50,
                        help="API operations per second of the --background lab writer")
    parser.add_argument("--daemons-cgroup", choices=DAEMONS_CGROUPS, default="root",
                        help="where the node's daemons (the lab, the --background writer, the agent, the bench) "
                             "run on the cpu hierarchy: root = loose tasks in the root cgroup, each thread an "
                             "entity of its own beside the pods' one group; system.slice = as on a systemd node, "
                             "one group (cpu.shares 1024) beside kubepods (cpu.shares = the node's CPUs x 1024, "
                             "as the kubelet sets it) below the bench's node cgroup")


def start(args: argparse.Namespace, kubeconfig: Path, workdir: Path, log) -> tuple[Background | None, dict]:
    """The background ``args`` ask for, writing once this returns, and its report for the
    summary line (``{"kind": "none"}`` without one; :func:`stop` adds the writer's counts)."""
    if args.background != "lab":
        return None, {"kind": "none"}
    background = Background(kubeconfig, workdir, args.background_rate)
    log(f"background: {background.describe()}")
    try:
        background.wait_writing()
    except BaseException:
        background.stop()  # the writer does not outlive a bench that could not start
        raise
    return background, {"kind": "lab", "what": background.describe()}


def stop(background: Background | None, report: dict) -> dict:
    """Stops a started background (None: nothing to stop); the report with the writer's counts."""
    if background is None:
        return report
    return {**report, "writer": background.stop()}


def write_stream(kubeconfig: str, rate: int, out: Path) -> None:
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    api = config.new_client_from_config(kubeconfig)
    core = client.CoreV1Api(api)
    try:
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    except ApiException as err:
        if err.status != 409:
            raise
    while not core.list_namespaced_service_account(NAMESPACE).items:  # pods need "default"
        time.sleep(0.2)
    for i in range(CONFIGMAPS):
        try:
            core.create_namespaced_config_map(NAMESPACE, {"metadata": {"name": f"cm-{i}"}, "data": {"v": ""}})
        except ApiException as err:
            if err.status != 409:
                raise
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    ops = errors = 0
    pods: list[str] = []
    started = time.monotonic()
    interval = 1.0 / rate
    next_at = started
    while not stopping:
        try:
            if ops % 10 == 9:
                name = f"p-{ops}"
                core.create_namespaced_pod(NAMESPACE, {
                    "metadata": {"name": name},
                    "spec": {"nodeName": f"background-{ops % NODES}", "automountServiceAccountToken": False,
                             "tolerations": [{"operator": "Exists"}],
                             "containers": [{"name": "c", "image": "registry.invalid/app:1"}]}})
                pods.append(name)
                if len(pods) > MAX_PODS:
                    core.delete_namespaced_pod(pods.pop(0), NAMESPACE, grace_period_seconds=0)
            else:
                core.patch_namespaced_config_map(f"cm-{ops % CONFIGMAPS}", NAMESPACE,
                                                 {"data": {"v": str(ops) * (1024 // len(str(ops)))}})
        except ApiException:
            errors += 1
        ops += 1
        next_at += interval
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    out.write_text(json.dumps({"ops": ops, "seconds": round(time.monotonic() - started, 1), "errors": errors}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--rate", type=int, default=50)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    write_stream(args.kubeconfig, args.rate, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
