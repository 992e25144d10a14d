"""The QoS strategies against this machine's real cgroup filesystem (needs root, writable cgroups).

Each test builds a kubelet-like tree ``<own cgroup>/tidal-test-<random>/kubepods/...`` in every
hierarchy it uses (below the cgroups this process is in, as the collector's real-cgroup tests do,
whose helpers are reused), points a :class:`CgroupLayout` at it through ``kubelet_root``, runs the
strategies, and reads the kernel's files back. Cgroups and child processes are removed also when
a test fails.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import pytest
from tidal.agent.collector.cgroups import (
    DEFAULT_CGROUP_ROOT,
    CgroupDriver,
    CgroupHierarchy,
    CgroupLayout,
    CgroupVersion,
    PodQOSClass,
)
from tidal.agent.collector.readers import read_cpu_usage_ns
from tidal.agent.qos.be_batch_resources import BEBatchResources
from tidal.agent.qos.be_cpu_priority import BECPUPriority
from tidal.agent.qos.be_cpu_suppression import BECPUSuppression
from tidal.agent.qos.capabilities import probe, supported_map
from tidal.agent.qos.strategy import (
    ContainerState,
    NodeState,
    PodState,
    RestoreJournal,
    allowed_roots,
    apply,
    compose,
    restore,
)
from tidal.api.policy import ColocationPolicy
from tidal.api.qos import QoSLevel
from tidal_dev.testing.real_cgroups import RealCgroups, below_own


MiB = 1 << 20


@pytest.fixture
def hierarchy(hierarchy: CgroupHierarchy) -> CgroupHierarchy:
    """The conftest's hierarchy, narrowed to what these tests build: a v1 tree with a cpu controller."""
    if hierarchy.version is not CgroupVersion.V1:
        pytest.skip("these tests build a cgroup v1 tree (v2 plans are covered by the pure tests)")
    if not (DEFAULT_CGROUP_ROOT / "cpu" / "cpu.cfs_quota_us").is_file():
        pytest.skip("no v1 cpu controller at /sys/fs/cgroup/cpu")
    return hierarchy


def uid() -> str:
    return f"{secrets.token_hex(4)}-0000-4000-8000-{secrets.token_hex(6)}"


#: suppression's quota in force every round (the default, onInterference, leaves it to the
#: interference control, which these tests do not run); the BE idle group off (on by default):
#: these pods are below the test's kubepods, and the group would be the machine's own /tidal-be
ALWAYS = ColocationPolicy.from_spec({"beIsolation": {"cpuSuppression": {"quota": "always"},
                                                     "cpuPriority": {"idleGroup": False}}})


class Node:
    """A kubelet-like v1 tree under the test cgroup, in the cpu, cpuacct and memory hierarchies."""

    def __init__(self, hierarchy: CgroupHierarchy, real: RealCgroups) -> None:
        self.real = real
        self.cpu_root = below_own(DEFAULT_CGROUP_ROOT / "cpu", "cpu")
        self.layout = CgroupLayout(
            CgroupHierarchy(
                CgroupVersion.V1,
                below_own(hierarchy.cpu_root, "cpuacct"),
                below_own(hierarchy.memory_root, "memory"),
            ),
            CgroupDriver.CGROUPFS,
            kubelet_root=f"/{real.name}",
        )
        self.roots = allowed_roots(self.layout, self.cpu_root)

    def dirs(self, relpath) -> dict[str, Path]:
        return {
            "cpu": self.real.make(self.cpu_root / relpath),
            "cpuacct": self.real.make(self.layout.cpu_dir(relpath)),
            "memory": self.real.make(self.layout.memory_dir(relpath)),
        }

    def add_pod(self, pod: PodState) -> dict[str, dict[str, Path]]:
        out = {"pod": self.dirs(self.layout.pod_relpath(pod.uid, pod.qos_class))}
        for c in pod.containers:
            out[c.id] = self.dirs(self.layout.container_relpath(pod.uid, pod.qos_class, c.id))
        return out

    def state(self, pods, caps, *, cpus=2.0, online=0.0) -> NodeState:
        return NodeState(
            pods=tuple(pods), node_cpus=cpus, online_usage_millicores=online,
            policy=ALWAYS, capabilities=caps, layout=self.layout,
            cpu_controller_root=self.cpu_root,
        )


def read(path: Path) -> str:
    return path.read_text().strip()


def snapshot(dirs: list[Path]) -> dict[str, str]:
    files = ("cpu.idle", "cpu.shares", "cpu.cfs_quota_us", "cpu.cfs_period_us", "memory.limit_in_bytes")
    return {str(d / f): read(d / f) for d in dirs for f in files if (d / f).exists()}


@pytest.mark.parametrize("use_idle", [True, False], ids=["cpu.idle", "min-shares"])
def test_strategies_write_the_kernel_once_and_restore_everything(hierarchy, real, tmp_path, use_idle):
    node = Node(hierarchy, real)
    caps = supported_map(probe())
    if use_idle and not caps.get("cpu.idle"):
        pytest.skip("kernel without cpu.idle")
    caps["cpu.idle"] = use_idle
    be = PodState(uid(), PodQOSClass.BEST_EFFORT, QoSLevel.BE,
                  (ContainerState("containerd://c1", 500, 256 * MiB), ContainerState("containerd://c2", 250, 128 * MiB)))
    ls = PodState(uid(), PodQOSClass.BURSTABLE, QoSLevel.LS, (ContainerState("containerd://c3"),))
    be_dirs, ls_dirs = node.add_pod(be), node.add_pod(ls)
    besteffort = node.cpu_root / node.layout.qos_relpath(PodQOSClass.BEST_EFFORT)
    all_dirs = [besteffort] + [d for p in (be_dirs, ls_dirs) for c in p.values() for d in c.values()]
    before = snapshot(all_dirs)

    state = node.state([be, ls], caps, cpus=2.0, online=300.0)
    strategies = [BECPUSuppression(threshold=0.65, floor_millicores=500), BECPUPriority(), BEBatchResources()]
    plan = compose([s.plan(state) for s in strategies], node.layout.version)
    journal = RestoreJournal(tmp_path / "journal.json")
    result = apply(plan, journal, node.roots)
    assert result.errors == [] and result.missing == []

    pod_cpu, c1, c2 = be_dirs["pod"]["cpu"], be_dirs["containerd://c1"], be_dirs["containerd://c2"]
    if use_idle:
        assert read(pod_cpu / "cpu.idle") == "1"
    else:
        assert read(pod_cpu / "cpu.shares") == "2"
    # suppression: 2 CPUs × 0.65 − 0.3 online = 1.0 CPU on kubepods/besteffort
    assert read(besteffort / "cpu.cfs_quota_us") == "100000"
    assert read(pod_cpu / "cpu.cfs_quota_us") == "75000"
    assert read(c1["cpu"] / "cpu.cfs_quota_us") == "50000"
    assert read(c1["cpu"] / "cpu.shares") == "512"
    assert read(c2["cpu"] / "cpu.cfs_quota_us") == "25000"
    assert read(c1["memory"] / "memory.limit_in_bytes") == str(256 * MiB)
    assert read(be_dirs["pod"]["memory"] / "memory.limit_in_bytes") == str(384 * MiB)
    # the online pod is untouched
    assert snapshot([d for c in ls_dirs.values() for d in c.values()]) == {
        k: v for k, v in before.items() if k.startswith(str(node.cpu_root / node.layout.pod_relpath(ls.uid, ls.qos_class)))
        or k.startswith(str(node.layout.memory_dir(node.layout.pod_relpath(ls.uid, ls.qos_class))))
    }
    print(f"\nwrote {len(result.written)} files, {len(result.unchanged)} already right")

    # idempotent, also for a restarted agent (fresh journal object from the file)
    journal = RestoreJournal(tmp_path / "journal.json")
    again = apply(plan, journal, node.roots)
    assert again.written == [] and again.errors == []
    assert len(again.unchanged) == len(plan)

    # online load rises: the BE parent's quota drops to the floor (0.5 CPU), below the pod's
    # 0.75 CPU: v1 refuses a parent quota below a child's, so compose clamps the pod's quota and
    # apply retries the parent after the pod
    busier = node.state([be, ls], caps, cpus=2.0, online=1200.0)
    moved = apply(compose([s.plan(busier) for s in strategies], node.layout.version), journal, node.roots)
    assert moved.errors == []
    assert sorted(str(w.target) for w in moved.written) == sorted(
        [str(besteffort / "cpu.cfs_quota_us"), str(pod_cpu / "cpu.cfs_quota_us")]
    )
    assert read(besteffort / "cpu.cfs_quota_us") == "50000"
    assert read(pod_cpu / "cpu.cfs_quota_us") == "50000"
    assert read(c1["cpu"] / "cpu.cfs_quota_us") == "50000"
    # and back up: parent raised first (retry), pod back to 0.75 CPU
    back = apply(compose([s.plan(state) for s in strategies], node.layout.version), journal, node.roots)
    assert back.errors == [] and read(pod_cpu / "cpu.cfs_quota_us") == "75000"

    assert restore(journal) == []
    assert snapshot(all_dirs) == before
    assert json_originals(tmp_path / "journal.json") == {}


def test_values_the_nri_plugin_set_at_creation_go_back_to_the_runtimes(hierarchy, real, tmp_path):
    """Tidal's NRI plugin gives a BE container its shares and memory limit as it is created, so
    the agent's round finds them in place with no original to journal: switched off (or
    uninstalled) they used to stay for the container's life. The runtime's BestEffort values are
    journalled for them instead, and restored."""
    node = Node(hierarchy, real)
    be = PodState(uid(), PodQOSClass.BEST_EFFORT, QoSLevel.BE, (ContainerState("containerd://c1", 500, 256 * MiB),))
    dirs = node.add_pod(be)
    c1 = dirs["containerd://c1"]
    (c1["cpu"] / "cpu.shares").write_text("2")  # what runc sets from the CRI for a BestEffort container
    before = snapshot([c1["cpu"], c1["memory"], dirs["pod"]["cpu"], dirs["pod"]["memory"]])
    (c1["cpu"] / "cpu.shares").write_text("512")  # the plugin, at creation (v1: no quota, the agent's)
    (c1["memory"] / "memory.limit_in_bytes").write_text(str(256 * MiB))
    journal = RestoreJournal(tmp_path / "journal.json")
    plan = BEBatchResources().plan(node.state([be], supported_map(probe())))
    result = apply(plan, journal, node.roots)
    assert result.errors == []
    assert {str(w.target) for w in result.unchanged} >= {str(c1["cpu"] / "cpu.shares"),
                                                          str(c1["memory"] / "memory.limit_in_bytes")}
    originals = json_originals(tmp_path / "journal.json")
    assert originals[str(c1["cpu"] / "cpu.shares")] == "2"
    assert originals[str(c1["memory"] / "memory.limit_in_bytes")] == before[str(c1["memory"] / "memory.limit_in_bytes")]
    again = apply(plan, RestoreJournal(tmp_path / "journal.json"), node.roots)  # a restarted agent
    assert again.written == [] and json_originals(tmp_path / "journal.json") == originals
    assert restore(journal) == []
    assert snapshot([c1["cpu"], c1["memory"], dirs["pod"]["cpu"], dirs["pod"]["memory"]]) == before


def json_originals(path: Path) -> dict:
    import json

    return json.loads(path.read_text())["originals"]


def _throttled(cpu_cgroup: Path) -> int:
    return int(next(line.split()[1] for line in (cpu_cgroup / "cpu.stat").read_text().splitlines()
                    if line.startswith("nr_throttled ")))


def measure(cpuacct: Path, quota_at: Path, seconds: float = 1.0) -> tuple[float, int]:
    """(cores `cpuacct` used, CFS periods the quota of the cpu cgroup `quota_at` throttled) over
    `seconds` (a measuring interval). A quota shows as throttled periods however busy the machine
    is; the cores alone fall below the quota when other work takes the CPUs."""
    # the clock is read outside the usage reads, so a stall of this process between them can only
    # lengthen the interval divided by, never shorten it (no false excess over the quota)
    t0, u0, n0 = time.monotonic(), read_cpu_usage_ns(cpuacct, CgroupVersion.V1), _throttled(quota_at)
    time.sleep(seconds)
    n1, u1, t1 = _throttled(quota_at), read_cpu_usage_ns(cpuacct, CgroupVersion.V1), time.monotonic()
    return (u1 - u0) / 1e9 / (t1 - t0), n1 - n0


def until_throttled(cpuacct: Path, quota_at: Path, deadline: float = 15.0) -> tuple[float, int]:
    """Measure one-second windows until the quota of `quota_at` throttles the loop (or `deadline`
    seconds pass): (the most cores one window saw, periods throttled in the last window). On a
    busy machine the loop may not reach its quota in a given second; a later one shows it."""
    end, most = time.monotonic() + deadline, 0.0
    while True:
        cores, throttled = measure(cpuacct, quota_at)
        most = max(most, cores)
        if throttled or time.monotonic() >= end:
            return most, throttled


def _bitten(cores: float, throttled: int, quota: float) -> None:
    """The quota held the loop (never more than the quota, throttled at least once), or the machine
    was too busy for the loop to reach its quota in any window (a skip)."""
    assert cores <= quota + 0.1, f"quota {quota} CPU, measured {cores:.3f} cores"
    if not throttled:
        pytest.skip(f"this machine is too busy: the busy loop got at most {cores:.3f} cores, "
                    f"under its {quota} quota, and was never throttled")


def test_busy_loop_in_a_be_container_gets_its_batch_cpu(hierarchy, real, tmp_path):
    node = Node(hierarchy, real)
    be = PodState(uid(), PodQOSClass.BEST_EFFORT, QoSLevel.BE, (ContainerState("containerd://spin", 200, 64 * MiB),))
    dirs = node.add_pod(be)["containerd://spin"]
    state = node.state([be], supported_map(probe()), cpus=float(os.cpu_count() or 1))
    journal = RestoreJournal(tmp_path / "journal.json")
    result = apply(BEBatchResources().plan(state), journal, node.roots)
    assert result.errors == [] and read(dirs["cpu"] / "cpu.cfs_quota_us") == "20000"

    real.spawn("spin", dirs["cpu"], dirs["cpuacct"])
    limited, throttled = until_throttled(dirs["cpuacct"], dirs["cpu"])
    # the quota is live: restored (to unlimited), the same loop is never throttled again
    assert restore(journal) == []
    assert read(dirs["cpu"] / "cpu.cfs_quota_us") == "-1"
    unlimited, throttled_after = measure(dirs["cpuacct"], dirs["cpu"])
    print(f"\nbusy loop with batch-cpu 200m: {limited:.3f} cores, {throttled} periods throttled; "
          f"after restore: {unlimited:.3f} cores, {throttled_after} throttled")
    _bitten(limited, throttled, 0.2)
    assert throttled_after == 0, f"{throttled_after} periods throttled with the quota restored to unlimited"


def test_suppression_caps_every_be_pod_through_the_besteffort_parent(hierarchy, real, tmp_path):
    node = Node(hierarchy, real)
    # no batch-cpu on the container: only the BE parent's quota limits it
    be = PodState(uid(), PodQOSClass.BEST_EFFORT, QoSLevel.BE, (ContainerState("containerd://spin"),))
    dirs = node.add_pod(be)["containerd://spin"]
    cpus = float(os.cpu_count() or 1)
    # online usage at the whole threshold: nothing left, so the floor (0.3 CPU) applies
    state = node.state([be], supported_map(probe()), cpus=cpus, online=cpus * 1000)
    journal = RestoreJournal(tmp_path / "journal.json")
    plan = compose([BECPUSuppression(threshold=0.65, floor_millicores=300).plan(state)], CgroupVersion.V1)
    assert apply(plan, journal, node.roots).errors == []
    besteffort = node.cpu_root / node.layout.qos_relpath(PodQOSClass.BEST_EFFORT)
    assert read(besteffort / "cpu.cfs_quota_us") == "30000"
    real.spawn("spin", dirs["cpu"], dirs["cpuacct"])
    suppressed, throttled = until_throttled(dirs["cpuacct"], besteffort)
    assert restore(journal) == [] and read(besteffort / "cpu.cfs_quota_us") == "-1"
    print(f"\nbusy loop in a BE pod, besteffort quota 0.3 CPU: {suppressed:.3f} cores, "
          f"{throttled} periods throttled")
    _bitten(suppressed, throttled, 0.3)


HOG = r"""
import sys
with open(sys.argv[1], "w") as f:
    f.write(str(__import__("os").getpid()))
print("in", flush=True)
hog = bytearray(b"\x01") * (200 << 20)  # 200 MiB, every page written
print("survived", flush=True)
"""


def test_batch_memory_limit_is_enforced_by_the_kernel(hierarchy, real, tmp_path):
    import signal
    import subprocess
    import sys

    if Path("/proc/swaps").read_text().count("\n") > 1:
        pytest.skip("swap is on: the hog would be swapped out, not killed")
    node = Node(hierarchy, real)
    be = PodState(uid(), PodQOSClass.BEST_EFFORT, QoSLevel.BE, (ContainerState("containerd://hog", 0, 64 * MiB),))
    dirs = node.add_pod(be)["containerd://hog"]
    journal = RestoreJournal(tmp_path / "journal.json")
    state = node.state([be], supported_map(probe()))
    assert apply(BEBatchResources().plan(state), journal, node.roots).errors == []
    assert read(dirs["memory"] / "memory.limit_in_bytes") == str(64 * MiB)

    child = subprocess.Popen(
        [sys.executable, "-c", HOG, str(dirs["memory"] / "cgroup.procs")], stdout=subprocess.PIPE, text=True
    )
    real.children.append(child)
    out, _ = child.communicate(timeout=30)
    oom = parse_oom_control(dirs["memory"])
    print(f"\n200 MiB hog under a 64 MiB batch-memory limit: exit {child.returncode}, oom_kill {oom.get('oom_kill')}")
    assert out.startswith("in") and "survived" not in out
    assert child.returncode == -signal.SIGKILL
    assert oom.get("oom_kill", 0) >= 1
    assert restore(journal) == []
    assert int(read(dirs["memory"] / "memory.limit_in_bytes")) > 1 << 40  # unlimited again


def parse_oom_control(cgroup: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in (cgroup / "memory.oom_control").read_text().splitlines())}
