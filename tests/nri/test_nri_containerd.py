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
from tidal.agent.nri.main import nested_quota_rule

# the first run builds containerd from source (a few minutes on 2 cores) inside the fixture
pytestmark = pytest.mark.timeout(1800)

CGROUP = Path("/sys/fs/cgroup")
V2 = (CGROUP / "cgroup.controllers").exists()
#: as `tidal-agent nri` decides it on this machine: cgroup v1 refuses a quota above an ancestor's
RULE = nested_quota_rule(CGROUP)


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


def assert_be_v1(container_dir: str, *, shares: int, quota: int, memory: int) -> None:
    assert cgroup_file("cpu", container_dir, "cpu.shares") == str(shares)
    assert cgroup_file("cpu", container_dir, "cpu.cfs_quota_us") == str(quota)
    assert cgroup_file("cpu", container_dir, "cpu.cfs_period_us") == "100000"
    assert cgroup_file("memory", container_dir, "memory.limit_in_bytes") == str(memory)


def wait_ready(plugin: PluginThread, containerd: Containerd) -> None:
    deadline = time.monotonic() + 20
    while not (plugin.plugin and plugin.plugin.ready.is_set()):
        assert time.monotonic() < deadline, f"plugin did not synchronize\n{containerd.tail()}"
        time.sleep(0.1)


def wait_file(controller: str, relpath: str, name: str, expected: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while (value := cgroup_file(controller, relpath, name)) != expected:
        assert time.monotonic() < deadline, f"{relpath}/{name} = {value}, expected {expected}"
        time.sleep(0.1)


def run_pod(c: Containerd, annotations: dict[str, str]) -> tuple[dict, str]:
    tag = uuid.uuid4().hex[:8]
    parent = f"/tidal-nri-{tag}/pod{tag}"
    result = c.cri("-pod-annotations", json.dumps(annotations), "-image", IMAGE, "-cgroup-parent", parent,
                   "-name", f"p-{tag}", "-uid", f"uid-{tag}")
    assert "error" not in result, f"{result['error']}\ncontainerd log:\n{c.tail()}"
    return result, parent


def test_be_container_gets_its_limits_in_real_cgroups(containerd):
    plugin = PluginThread(containerd.nri_socket, nested_quota_rule=RULE)
    try:
        wait_ready(plugin, containerd)
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
                assert_be_v1(be_dir, shares=512, quota=-1, memory=page_rounded(300_000_000))  # quota: the agent's
                # the LS container keeps what the CRI request asked for (shares 2, no quota)
                assert cgroup_file("cpu", ls_dir, "cpu.shares") == "2"
                assert cgroup_file("cpu", ls_dir, "cpu.cfs_quota_us") == "-1"
            # the kubelet's reconciliation of a BestEffort container does not undo the limits
            assert "error" not in containerd.cri("-update", be["container"])
            if V2:
                assert cgroup_file("cpu", be_dir, "cpu.max") == "50000 100000"
            else:
                assert_be_v1(be_dir, shares=512, quota=-1, memory=page_rounded(300_000_000))
        finally:
            for pod, parent in ((be, be_parent), (ls, ls_parent)):
                containerd.cri("-cleanup", pod["pod"])
                remove_cgroup_tree(parent)
    finally:
        plugin.stop()


def test_be_container_starts_under_a_parent_whose_quota_is_below_its_batch_cpu(containerd):
    """A BE pod created while its parent is held to less CPU than the pod's batch-cpu (the
    agent's suppression or interference quota on ``kubepods/besteffort``) must start. On cgroup
    v1 the kernel refuses a container quota above an ancestor's (EINVAL): a plugin setting the
    batch quota at creation made runc fail the container — checked here too — so it sets none
    there and the container runs within its parent's bound; v2's ``cpu.max`` nests freely."""
    tag = uuid.uuid4().hex[:8]
    top = f"/tidal-nri-{tag}"
    quota_dir = CGROUP / ("" if V2 else "cpu") / top.lstrip("/")
    quota_dir.mkdir()
    (quota_dir / ("cpu.max" if V2 else "cpu.cfs_quota_us")).write_text("20000 100000" if V2 else "20000")
    batch = {"worker": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "300000000"}}
    annotations = json.dumps({"colocation.tidal.io/qos-level": "BE", BATCH_RESOURCES_ANNOTATION: json.dumps(batch)})
    pods = []

    def create(name: str) -> dict:
        result = containerd.cri("-pod-annotations", annotations, "-image", IMAGE, "-cgroup-parent",
                                f"{top}/pod{name}", "-name", f"p-{name}", "-uid", f"uid-{name}")
        if "pod" in result:
            pods.append(result["pod"])
        return result

    try:
        if not V2:  # what the plugin did before: the batch quota at creation, refused by the kernel
            old = PluginThread(containerd.nri_socket, nested_quota_rule=False)
            try:
                wait_ready(old, containerd)
                refused = create(f"{tag}a")
                assert "error" in refused and "invalid argument" in refused["error"].lower(), refused
            finally:
                old.stop()
        plugin = PluginThread(containerd.nri_socket, nested_quota_rule=RULE)
        try:
            wait_ready(plugin, containerd)
            created = create(f"{tag}b")
            assert "error" not in created, f"{created['error']}\ncontainerd log:\n{containerd.tail()}"
            be_dir = f"{top}/pod{tag}b/{created['container']}"
            if V2:
                assert cgroup_file("cpu", be_dir, "cpu.max") == "50000 100000"
            else:
                assert_be_v1(be_dir, shares=512, quota=-1, memory=page_rounded(300_000_000))
        finally:
            plugin.stop()
    finally:
        for pod in pods:
            containerd.cri("-cleanup", pod)
        remove_cgroup_tree(top)


def test_be_container_is_created_in_the_be_idle_group_with_its_limits(containerd):
    """``beIsolation.cpuPriority.idleGroup``: the BE container's cgroup is created in the BE
    idle group at the hierarchy's root, ``/tidal-be/pod<uid>``, with its batch limits, whatever
    the cgroup root of the pod's sandbox; the kubelet's pod cgroup keeps only the sandbox. An LS
    container stays where it was."""
    plugin = PluginThread(containerd.nri_socket, be_idle_group=lambda: True, nested_quota_rule=RULE)
    tag = uuid.uuid4().hex[:8]
    root, uid = f"/tidal-nri-{tag}", str(uuid.uuid4())
    pods: dict[str, tuple[dict, str]] = {}
    try:
        wait_ready(plugin, containerd)
        batch = {"worker": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "300000000"}}
        for level, qos_dir in (("BE", "besteffort"), ("LS", "burstable")):
            annotations = {"colocation.tidal.io/qos-level": level,
                           **({BATCH_RESOURCES_ANNOTATION: json.dumps(batch)} if level == "BE" else {})}
            parent = f"{root}/kubepods/{qos_dir}/pod{uid if level == 'BE' else tag}"
            result = containerd.cri("-pod-annotations", json.dumps(annotations), "-image", IMAGE,
                                    "-cgroup-parent", parent, "-name", f"p-{level}-{tag}", "-uid", f"uid-{level}-{tag}")
            assert "error" not in result, f"{result['error']}\ncontainerd log:\n{containerd.tail()}"
            pods[level] = (result, parent)
        be, _ = pods["BE"]
        moved = f"/tidal-be/pod{uid}/{be['container']}"
        if V2:
            assert cgroup_file("memory", moved, "memory.max") == str(page_rounded(300_000_000))
        else:
            assert_be_v1(moved, shares=512, quota=-1, memory=page_rounded(300_000_000))
        assert not (CGROUP / ("" if V2 else "memory") / f"{root}/kubepods/besteffort/pod{uid}/{be['container']}"
                    .lstrip("/")).exists()
        ls, ls_parent = pods["LS"]
        assert (CGROUP / ("" if V2 else "memory") / f"{ls_parent}/{ls['container']}".lstrip("/")).is_dir()
    finally:
        for result, _ in pods.values():
            containerd.cri("-cleanup", result["pod"])
        remove_cgroup_tree(root)
        remove_cgroup_tree(f"/tidal-be/pod{uid}")  # its container's cgroup went with the container
        plugin.stop()


def test_a_restarted_be_container_goes_where_its_pod_is_when_the_switch_changed(containerd):
    """A BE pod's containers stay together: a container the kubelet creates again (attempt 1) after
    ``idleGroup`` changed goes where the pod's first one went — below ``kubepods`` for a pod
    created with the switch off, in ``/tidal-be`` for one created with it on."""
    switch = {"on": False}
    plugin = PluginThread(containerd.nri_socket, be_idle_group=lambda: switch["on"], nested_quota_rule=RULE)
    tag = uuid.uuid4().hex[:8]
    root = f"/tidal-nri-{tag}"
    uids = {"before": str(uuid.uuid4()), "after": str(uuid.uuid4())}
    annotations = json.dumps({"colocation.tidal.io/qos-level": "BE", BATCH_RESOURCES_ANNOTATION: json.dumps(
        {"worker": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "300000000"}})})
    pods: list[str] = []

    def create(which: str, attempt: int = 0, in_pod: str = "") -> dict:
        parent = f"{root}/kubepods/besteffort/pod{uids[which]}"
        result = containerd.cri("-pod-annotations", annotations, "-image", IMAGE, "-cgroup-parent", parent,
                                "-name", f"p-{which}-{tag}", "-uid", f"uid-{which}-{tag}",
                                "-attempt", str(attempt), *(("-in-pod", in_pod) if in_pod else ()))
        assert "error" not in result, f"{result['error']}\ncontainerd log:\n{containerd.tail()}"
        if not in_pod:
            pods.append(result["pod"])
        return result

    def memory_dir(path: str) -> Path:
        return CGROUP / ("" if V2 else "memory") / path.lstrip("/")

    try:
        wait_ready(plugin, containerd)
        before = create("before")  # the switch off: below kubepods
        switch["on"] = True
        again = create("before", attempt=1, in_pod=before["pod"])
        kubelet_dir = f"{root}/kubepods/besteffort/pod{uids['before']}"
        for c in (before, again):
            assert memory_dir(f"{kubelet_dir}/{c['container']}").is_dir(), c
            assert not memory_dir(f"/tidal-be/pod{uids['before']}/{c['container']}").exists(), c
        after = create("after")  # the switch on: in the group ...
        switch["on"] = False
        again = create("after", attempt=1, in_pod=after["pod"])  # ... and its next container too
        for c in (after, again):
            assert memory_dir(f"/tidal-be/pod{uids['after']}/{c['container']}").is_dir(), c
    finally:
        for pod in pods:
            containerd.cri("-cleanup", pod)
        remove_cgroup_tree(root)
        remove_cgroup_tree(f"/tidal-be/pod{uids['after']}")
        plugin.stop()


def test_existing_container_is_fixed_at_synchronize_and_lookup_updates_apply(containerd):
    """A BE container created while no plugin was connected gets its limits when the plugin
    connects (Synchronize); a BE pod without the annotation gets them through the plugin's own
    UpdateContainers request once the pod object is read."""
    batch = {"worker": {"kubernetes.io/batch-cpu": "250", "kubernetes.io/batch-memory": "200000000"}}
    early, early_parent = run_pod(containerd, {"colocation.tidal.io/qos-level": "BE",
                                               BATCH_RESOURCES_ANNOTATION: json.dumps(batch)})
    pods = [(early, early_parent)]
    early_dir = f"{early_parent}/{early['container']}"

    async def lookup(namespace, name, uid):
        from tidal.agent.nri.decisions import BatchRequest
        return {"worker": BatchRequest(cpu_millicores=750, memory_bytes=100_000_000)}

    plugin = PluginThread(containerd.nri_socket, pod_lookup=lookup, nested_quota_rule=RULE)
    try:
        if not V2:
            assert cgroup_file("cpu", early_dir, "cpu.cfs_quota_us") == "-1"
        wait_ready(plugin, containerd)
        if V2:
            wait_file("cpu", early_dir, "cpu.max", "25000 100000")
        else:
            wait_file("cpu", early_dir, "cpu.shares", "256")
            assert_be_v1(early_dir, shares=256, quota=-1, memory=page_rounded(200_000_000))

        late, late_parent = run_pod(containerd, {"colocation.tidal.io/qos-level": "BE"})
        pods.append((late, late_parent))
        late_dir = f"{late_parent}/{late['container']}"
        if V2:
            wait_file("cpu", late_dir, "cpu.max", "75000 100000")
            assert cgroup_file("memory", late_dir, "memory.max") == str(page_rounded(100_000_000))
        else:
            wait_file("cpu", late_dir, "cpu.shares", "768")
            assert_be_v1(late_dir, shares=768, quota=-1, memory=page_rounded(100_000_000))
    finally:
        plugin.stop()
        for pod, parent in pods:
            containerd.cri("-cleanup", pod["pod"])
            remove_cgroup_tree(parent)
