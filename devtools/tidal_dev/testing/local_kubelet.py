# SPDX-License-Identifier: Apache-2.0
"""A stand-in for the kubelet's cgroup work on this machine, for tests and benchmarks.

It creates the kubelet's cgroup tree (cgroupfs driver: ``kubepods/<qos>/pod<uid>/<container>``)
under a private ``--cgroup-root`` below this process's own cgroups, and runs real processes as
the pods' containers. ``tidal-agent run --kubelet-cgroup-root <kubelet_root>`` then finds and
controls them exactly as on a node. Everything is removed again by ``RealCgroups.cleanup``.
"""
from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from pathlib import Path, PurePosixPath

from tidal.agent.collector.cgroups import (
    DEFAULT_CGROUP_ROOT,
    CgroupDriver,
    CgroupVersion,
    ContainerID,
    PodQOSClass,
    detect_layout,
)
from tidal.agent.qos.strategy import cpu_controller_root
from tidal_dev.testing.real_cgroups import RealCgroups, own_cgroup

__all__ = ["LocalKubelet", "RunningPod"]


@dataclass(frozen=True)
class RunningPod:
    uid: str
    qos_class: PodQOSClass
    container_id: str
    #: the container's cgroup in every hierarchy
    dirs: list[Path]


class LocalKubelet:
    def __init__(self, cgroups: RealCgroups, root: Path = Path(DEFAULT_CGROUP_ROOT)) -> None:
        self.cgroups = cgroups
        probe = detect_layout(root, driver=CgroupDriver.CGROUPFS)
        # One kubelet root for every hierarchy: below our own memory cgroup on v1 (the one that
        # may carry a limit), below our own cgroup on v2. The cpu hierarchies accept any path.
        own = own_cgroup("memory" if probe.version is CgroupVersion.V1 else None)
        self.kubelet_root = str(own / cgroups.name)
        self.layout = detect_layout(root, driver=CgroupDriver.CGROUPFS, kubelet_root=self.kubelet_root)
        self.cpu_root = cpu_controller_root(self.layout)

    def dirs(self, relpath: PurePosixPath) -> list[Path]:
        """The directories of one cgroup in every hierarchy the agent uses (cpu, cpuacct, memory;
        blkio last, where v1 has it)."""
        out: list[Path] = []
        blkio = self.layout.blkio_dir(relpath)
        for d in (self.cpu_root / relpath, self.layout.cpu_dir(relpath), self.layout.memory_dir(relpath),
                  *([blkio] if blkio is not None else [])):
            if d not in out:
                out.append(d)
        return out

    def qos_dirs(self, qos_class: PodQOSClass) -> list[Path]:
        return self.dirs(self.layout.qos_relpath(qos_class))

    def create_pod(self, uid: str, qos_class: PodQOSClass, container_ids: Sequence[str]) -> dict[str, list[Path]]:
        """Pod and container cgroups (parents included); returns container ID -> its directories."""
        for d in self.dirs(self.layout.pod_relpath(uid, qos_class)):
            self.cgroups.make(d)
        containers = {}
        for cid in container_ids:
            ContainerID.parse(cid)
            dirs = self.dirs(self.layout.container_relpath(uid, qos_class, cid))
            for d in dirs:
                self.cgroups.make(d)
            containers[cid] = dirs
        return containers

    def run_pod(self, core, namespace: str, body: Mapping[str, Any], timeout: float = 60) -> RunningPod:
        """Create a one-container pod bound to a kwok node (``spec.nodeName``), wait until kwok
        runs it, report a container ID in its status as the kubelet would, and create its
        cgroups here. ``core`` is a ``kubernetes.client.CoreV1Api``."""
        name = body["metadata"]["name"]
        (container,) = body["spec"]["containers"]
        core.create_namespaced_pod(namespace, body)
        deadline = time.monotonic() + timeout
        while (pod := core.read_namespaced_pod(name, namespace)).status.phase != "Running":
            if time.monotonic() > deadline:
                raise TimeoutError(f"pod {namespace}/{name} not running after {timeout:g}s")
            time.sleep(0.2)
        cid = f"containerd://{secrets.token_hex(32)}"
        core.patch_namespaced_pod_status(name, namespace, {"status": {"containerStatuses": [{
            "name": container["name"], "image": container["image"], "imageID": "", "ready": True,
            "restartCount": 0, "containerID": cid,
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}})
        qos_class = PodQOSClass(pod.status.qos_class)
        dirs = self.create_pod(pod.metadata.uid, qos_class, [cid])[cid]
        return RunningPod(pod.metadata.uid, qos_class, cid, dirs)

    def spin(self, dirs: Sequence[Path]) -> subprocess.Popen:
        """A process burning one CPU inside the given cgroups."""
        return self.cgroups.spawn("spin", *dirs)

    def idle(self, dirs: Sequence[Path]) -> subprocess.Popen:
        return self.cgroups.spawn("idle", *dirs)

    @staticmethod
    def move(pid: int, dirs: Sequence[Path]) -> None:
        """Put an already running process into the cgroups (its later children follow)."""
        for d in dirs:
            (d / "cgroup.procs").write_text(str(pid))
