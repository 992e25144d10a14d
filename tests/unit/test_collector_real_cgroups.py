"""The collector against this machine's real cgroup filesystem (needs root and a writable hierarchy).

Each test creates its own ``tidal-test-<random>`` cgroups below the cgroups this process is in
(so limits set on it still apply), moves a child process it started into them, measures, and
then kills that child and removes the cgroups, also when the test fails.
"""

from __future__ import annotations

import errno
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath

import pytest
from tidal.agent.collector.cgroups import (
    DEFAULT_CGROUP_ROOT,
    CgroupDriver,
    CgroupHierarchy,
    CgroupLayout,
    CgroupLayoutError,
    CgroupVersion,
    PodQOSClass,
    detect_hierarchy,
)
from tidal.agent.collector.rates import CounterRates
from tidal.agent.collector.readers import read_cpu_usage_ns, read_memory_working_set, parse_flat_keyed
from tidal.agent.collector.sampler import PodInfo, Sampler
from tidal.qos import QoSLevel

MiB = 1 << 20

CHILD = r"""
import os, sys
mode, cache_file, procs = sys.argv[1], sys.argv[2], sys.argv[3:]
for path in procs:
    with open(path, "w") as f:
        f.write(str(os.getpid()))
if "memory" in mode:
    anon = bytearray(b"\x01") * (100 << 20)  # 100 MiB, every page written
    chunk = os.urandom(1 << 20)
    with open(cache_file, "wb") as f:  # 100 MiB of page cache charged to this cgroup
        for _ in range(100):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
print("ready", flush=True)
if "spin" in mode:
    while True:
        pass
sys.stdin.read()
"""


def own_cgroup(controller: str | None) -> PurePosixPath:
    """This process's cgroup in the v1 hierarchy of ``controller``, or in v2 when None."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hierarchy_id, controllers, path = line.split(":", 2)
        if controller is None and hierarchy_id == "0" and controllers == "":
            return PurePosixPath(path)
        if controller is not None and controller in controllers.split(","):
            return PurePosixPath(path)
    raise LookupError(f"no {controller or 'cgroup v2'} line in /proc/self/cgroup")


def below_own(root: Path, controller: str | None) -> Path:
    return root / own_cgroup(controller).relative_to("/")


class RealCgroups:
    """Cgroups and child processes created by one test, removed by :meth:`cleanup`."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.name = f"tidal-test-{secrets.token_hex(4)}"
        self.created: list[Path] = []
        self.children: list[subprocess.Popen] = []

    def make(self, path: Path) -> Path:
        """mkdir -p, remembering each level created (each level is a cgroup)."""
        missing = []
        p = path
        while not p.exists():
            missing.append(p)
            p = p.parent
        for p in reversed(missing):
            try:
                p.mkdir()
            except OSError as error:
                if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                    pytest.skip(f"cgroup hierarchy not writable: cannot create {p}: {error}")
                raise
            self.created.append(p)
        return path

    def spawn(self, mode: str, *cgroups: Path) -> subprocess.Popen:
        child = subprocess.Popen(
            [
                sys.executable, "-c", CHILD, mode, str(self.tmp_path / "cache-file"),
                *(str(c / "cgroup.procs") for c in cgroups),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.children.append(child)
        line = child.stdout.readline()
        assert line == "ready\n", f"child exited with {child.poll()} before it was ready"
        for cgroup in cgroups:
            assert str(child.pid) in (cgroup / "cgroup.procs").read_text().split(), f"{child.pid} not in {cgroup}"
        return child

    def cleanup(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=10)
        for path in reversed(self.created):
            deadline = time.monotonic() + 5
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as error:  # EBUSY while the killed task is being reaped
                    if error.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        (self.tmp_path / "cache-file").unlink(missing_ok=True)


@pytest.fixture
def hierarchy() -> CgroupHierarchy:
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups and move processes into them")
    try:
        return detect_hierarchy(DEFAULT_CGROUP_ROOT)
    except CgroupLayoutError as error:
        pytest.skip(f"no usable cgroup hierarchy here: {error}")


@pytest.fixture
def real(tmp_path):
    cgroups = RealCgroups(tmp_path)
    try:
        yield cgroups
    finally:
        cgroups.cleanup()
        for path in cgroups.created:
            assert not path.exists(), f"{path} left behind"


def cpu_controller(hierarchy: CgroupHierarchy) -> str | None:
    return "cpuacct" if hierarchy.version is CgroupVersion.V1 else None


def memory_controller(hierarchy: CgroupHierarchy) -> str | None:
    return "memory" if hierarchy.version is CgroupVersion.V1 else None


def measure_cores(cgroup: Path, version: CgroupVersion, seconds: float = 1.0) -> float:
    rates = CounterRates()
    rates.update("c", read_cpu_usage_ns(cgroup, version), time.monotonic())
    time.sleep(seconds)
    cores = rates.update("c", read_cpu_usage_ns(cgroup, version), time.monotonic())
    assert cores is not None
    return cores


def test_busy_loop_in_a_real_cgroup_measures_about_one_core(hierarchy, real):
    cgroup = real.make(below_own(hierarchy.cpu_root, cpu_controller(hierarchy)) / real.name)
    real.spawn("spin", cgroup)
    cores = measure_cores(cgroup, hierarchy.version)
    print(f"\n{hierarchy.version} {cgroup}: busy loop = {cores:.3f} cores")
    assert 0.7 <= cores <= 1.3, f"busy loop measured {cores:.3f} cores"


def test_busy_loop_on_the_hybrid_cgroup2_mount_measures_about_one_core(hierarchy, real):
    unified = DEFAULT_CGROUP_ROOT / "unified"
    if hierarchy.version is not CgroupVersion.V1 or not (unified / "cpu.stat").is_file():
        pytest.skip("no hybrid cgroup2 mount with cpu.stat at /sys/fs/cgroup/unified")
    cgroup = real.make(below_own(unified, None) / real.name)
    real.spawn("spin", cgroup)
    cores = measure_cores(cgroup, CgroupVersion.V2)
    print(f"\nv2 {cgroup}: busy loop = {cores:.3f} cores")
    assert 0.7 <= cores <= 1.3, f"busy loop measured {cores:.3f} cores"


def test_working_set_counts_touched_memory_but_not_page_cache(hierarchy, real):
    cgroup = real.make(below_own(hierarchy.memory_root, memory_controller(hierarchy)) / real.name)
    real.spawn("memory", cgroup)
    working_set = read_memory_working_set(cgroup, hierarchy.version)
    usage_file = "memory.usage_in_bytes" if hierarchy.version is CgroupVersion.V1 else "memory.current"
    usage = int((cgroup / usage_file).read_text())
    stat = parse_flat_keyed((cgroup / "memory.stat").read_text(), "memory.stat")
    inactive_file = stat["total_inactive_file" if hierarchy.version is CgroupVersion.V1 else "inactive_file"]
    print(
        f"\n{hierarchy.version} {cgroup}: usage {usage / MiB:.1f} MiB, inactive file {inactive_file / MiB:.1f} MiB,"
        f" working set {working_set / MiB:.1f} MiB"
    )
    # 100 MiB touched plus the interpreter's own few MiB
    assert 95 * MiB <= working_set <= 140 * MiB, f"working set {working_set / MiB:.1f} MiB"
    # the 100 MiB file written is charged to the cgroup, and left out of the working set
    assert usage - working_set >= 90 * MiB, f"usage {usage / MiB:.1f} MiB, working set {working_set / MiB:.1f} MiB"


def test_sampler_measures_a_real_pod_cgroup_laid_out_like_the_kubelet(hierarchy, real, tmp_path):
    # The "node" is this process's own cgroups; the kubelet's cgroupRoot is our test cgroup.
    layout = CgroupLayout(
        CgroupHierarchy(
            hierarchy.version,
            below_own(hierarchy.cpu_root, cpu_controller(hierarchy)),
            below_own(hierarchy.memory_root, memory_controller(hierarchy)),
        ),
        CgroupDriver.CGROUPFS,
        kubelet_root=f"/{real.name}",
    )
    pod = PodInfo(
        uid=f"{secrets.token_hex(4)}-0000-4000-8000-{secrets.token_hex(6)}",
        namespace="default",
        name="busy",
        qos_class=PodQOSClass.BURSTABLE,
        tidal_level=QoSLevel.LS,
        cpu_request_millicores=100,
        memory_request_bytes=10 * MiB,
    )
    relpath = layout.pod_relpath(pod.uid, pod.qos_class)
    cgroups = dict.fromkeys([real.make(layout.cpu_dir(relpath)), real.make(layout.memory_dir(relpath))])
    real.spawn("memory spin", *cgroups)

    sampler = Sampler(layout, windows=(60,))
    sampler.sample([pod])
    time.sleep(1.0)
    summary = sampler.sample([pod])

    usage = sampler.pod_usage(pod.uid)
    node = summary["usage"][0]
    ls = summary["perQoS"]["LS"]
    print(
        f"\nsampler: pod {usage.cpu_millicores:.0f} m, {usage.memory_bytes / MiB:.1f} MiB; "
        f"node {node['cpuMillicores']['max']} m, {node['memoryBytes']['max'] / MiB:.0f} MiB used"
    )
    assert 700 <= usage.cpu_millicores <= 1300
    assert 95 * MiB <= usage.memory_bytes <= 140 * MiB
    assert ls["podsAtRequest"] == []
    assert ls["current"] == {"cpuMillicores": round(usage.cpu_millicores), "memoryBytes": usage.memory_bytes}
    assert node["samples"] == 1
    assert 700 <= node["cpuMillicores"]["max"] <= 1000 * os.cpu_count()
    assert node["memoryBytes"]["max"] >= usage.memory_bytes
