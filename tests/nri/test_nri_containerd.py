"""Test 2: the plugin with a real containerd (built from its Go module, NRI enabled) and runc
(Debian package): a host-network pod sandbox and a container created through CRI from a local
image; the container's real cgroup files carry the BE limits."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from containerd_env import IMAGE, Containerd, build_binaries
from nri_harness import PluginThread
from tidal.agent.nri.decisions import BATCH_RESOURCES_ANNOTATION, page_rounded

# the first run builds containerd from source (a few minutes on 2 cores) inside the fixture
pytestmark = pytest.mark.timeout(1800)

CGROUP = Path("/sys/fs/cgroup")
V2 = (CGROUP / "cgroup.controllers").exists()


@pytest.fixture(scope="module")
def containerd():
    if os.geteuid() != 0:
        pytest.skip("containerd and runc need root (creating namespaces, cgroups, mounts)")
    runc = shutil.which("runc") or "/usr/sbin/runc"
    if not os.path.exists(runc):
        pytest.fail("runc is missing: `make debian-packages` installs it (Debian package runc)")
    binaries = build_binaries()
    workdir = Path(tempfile.mkdtemp(prefix="nri-ctrd-", dir="/tmp"))  # short socket paths
    c = Containerd(binaries, workdir, runc)
    try:
        c.import_image()
        yield c
    finally:
        c.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def cgroup_file(controller: str, relpath: str, name: str) -> str:
    base = CGROUP if V2 else CGROUP / controller
    return (base / relpath.lstrip("/") / name).read_text().strip()


def remove_cgroup_tree(parent: str) -> None:
    top = parent.strip("/").split("/")[0]
    for root in ([CGROUP] if V2 else [p for p in CGROUP.iterdir() if p.is_dir()]):
        for path in sorted((root / top).glob("**/"), key=lambda p: len(p.parts), reverse=True):
            try:
                path.rmdir()
            except OSError:
                pass


def run_pod(c: Containerd, annotations: dict[str, str]) -> tuple[dict, str]:
    tag = uuid.uuid4().hex[:8]
    parent = f"/tidal-nri-{tag}/pod{tag}"
    result = c.cri("-pod-annotations", json.dumps(annotations), "-image", IMAGE, "-cgroup-parent", parent,
                   "-name", f"p-{tag}", "-uid", f"uid-{tag}")
    assert "error" not in result, f"{result['error']}\ncontainerd log:\n{c.tail()}"
    return result, parent


def test_be_container_gets_its_limits_in_real_cgroups(containerd):
    plugin = PluginThread(containerd.nri_socket)
    try:
        deadline = time.monotonic() + 20
        while not (plugin.plugin and plugin.plugin.ready.is_set()):
            assert time.monotonic() < deadline, f"plugin did not synchronize\n{containerd.tail()}"
            time.sleep(0.1)
        assert plugin.plugin.runtime[0] == "containerd"
        batch = {"worker": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "300000000"}}
        be, be_parent = run_pod(containerd, {"colocation.tidal.io/qos-level": "BE",
                                             BATCH_RESOURCES_ANNOTATION: json.dumps(batch)})
        ls, ls_parent = run_pod(containerd, {"colocation.tidal.io/qos-level": "LS"})
        try:
            be_dir, ls_dir = f"{be_parent}/{be['container']}", f"{ls_parent}/{ls['container']}"
            if V2:
                assert cgroup_file("cpu", be_dir, "cpu.max") == "50000 100000"
                assert cgroup_file("memory", be_dir, "memory.max") == str(page_rounded(300_000_000))
                assert cgroup_file("cpu", ls_dir, "cpu.max") == "max 100000"
            else:
                assert cgroup_file("cpu", be_dir, "cpu.shares") == "512"
                assert cgroup_file("cpu", be_dir, "cpu.cfs_quota_us") == "50000"
                assert cgroup_file("cpu", be_dir, "cpu.cfs_period_us") == "100000"
                assert cgroup_file("memory", be_dir, "memory.limit_in_bytes") == str(page_rounded(300_000_000))
                # the LS container keeps what the CRI request asked for (shares 2, no quota)
                assert cgroup_file("cpu", ls_dir, "cpu.shares") == "2"
                assert cgroup_file("cpu", ls_dir, "cpu.cfs_quota_us") == "-1"
        finally:
            for pod, parent in ((be, be_parent), (ls, ls_parent)):
                containerd.cri("-cleanup", pod["pod"])
                remove_cgroup_tree(parent)
    finally:
        plugin.stop()
