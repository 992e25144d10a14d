"""The collector against this machine's real cgroup filesystem (needs root and a writable hierarchy).

Each test creates its own ``tidal-test-<random>`` cgroups below the cgroups this process is in
(so limits set on it still apply), moves a child process it started into them, measures, and
then kills that child and removes the cgroups, also when the test fails.
"""

from __future__ import annotations

import os
import secrets
import subprocess
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
from tidal.agent.collector.rates import CounterRates
from tidal.agent.collector.readers import read_cpu_usage_ns, read_memory_working_set, parse_flat_keyed
from tidal.agent.collector.sampler import PodInfo, Sampler
from tidal.api.qos import QoSLevel
from tidal_dev.testing.real_cgroups import below_own

MiB = 1 << 20

def cpu_controller(hierarchy: CgroupHierarchy) -> str | None:
    return "cpuacct" if hierarchy.version is CgroupVersion.V1 else None


def memory_controller(hierarchy: CgroupHierarchy) -> str | None:
    return "memory" if hierarchy.version is CgroupVersion.V1 else None


def _process_cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` as the kernel accounts it to the task (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_cores(cgroup: Path, version: CgroupVersion, pid: int, seconds: float = 1.0) -> tuple[float, float]:
    """(cores the cgroup's counter measured, cores the process itself got) over the same
    interval: on a busy machine the busy loop gets less than a core, and the reader must still
    agree with what the kernel accounted to the task."""
    rates = CounterRates()
    rates.update("c", read_cpu_usage_ns(cgroup, version), time.monotonic())
    own = _process_cpu_seconds(pid)
    time.sleep(seconds)
    cores = rates.update("c", read_cpu_usage_ns(cgroup, version), time.monotonic())
    task = (_process_cpu_seconds(pid) - own) / seconds
    assert cores is not None
    return cores, task


def _assert_measures_the_busy_loop(cgroup: Path, version: CgroupVersion, pid: int) -> None:
    cores, task = measure_cores(cgroup, version, pid)
    print(f"\n{version} {cgroup}: busy loop = {cores:.3f} cores (the task itself: {task:.3f})")
    if task < 0.2:
        pytest.skip(f"this machine is too busy: the busy loop got {task:.2f} of a core")
    # clock ticks (10 ms) and the two reads' skew: a tenth of a core either way
    assert abs(cores - task) <= 0.1 + 0.1 * task, f"cgroup counter {cores:.3f} cores, task {task:.3f} cores"
    assert cores <= 1.3, f"a single-threaded busy loop measured {cores:.3f} cores"


def test_busy_loop_in_a_real_cgroup_measures_about_one_core(hierarchy, real):
    cgroup = real.make(below_own(hierarchy.cpu_root, cpu_controller(hierarchy)) / real.name)
    child = real.spawn("spin", cgroup)
    _assert_measures_the_busy_loop(cgroup, hierarchy.version, child.pid)


def test_busy_loop_on_the_hybrid_cgroup2_mount_measures_about_one_core(hierarchy, real):
    unified = DEFAULT_CGROUP_ROOT / "unified"
    if hierarchy.version is not CgroupVersion.V1 or not (unified / "cpu.stat").is_file():
        pytest.skip("no hybrid cgroup2 mount with cpu.stat at /sys/fs/cgroup/unified")
    cgroup = real.make(below_own(unified, None) / real.name)
    child = real.spawn("spin", cgroup)
    _assert_measures_the_busy_loop(cgroup, CgroupVersion.V2, child.pid)


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
    child = real.spawn("memory spin", *cgroups)

    sampler = Sampler(layout, windows=(60,))
    sampler.sample([pod])
    began, own = time.monotonic(), _process_cpu_seconds(child.pid)
    time.sleep(1.0)  # the measuring interval, not a wait for an outcome
    sampler.sample([pod])
    summary = sampler.summary()
    task = (_process_cpu_seconds(child.pid) - own) / (time.monotonic() - began) * 1000

    usage = sampler.pod_usage(pod.uid)
    node = summary["usage"][0]
    ls = summary["perQoS"]["LS"]
    print(
        f"\nsampler: pod {usage.cpu_millicores:.0f} m (the task itself: {task:.0f} m), "
        f"{usage.memory_bytes / MiB:.1f} MiB; node {node['cpuMillicores']['max']} m, "
        f"{node['memoryBytes']['max'] / MiB:.0f} MiB used"
    )
    if task < 200:
        pytest.skip(f"this machine is too busy: the busy loop got {task:.0f} m of a core")
    # what the kernel accounted to the task over the same second (a busy machine gives the loop
    # less than a core: the sampler must still agree), give or take clock ticks and read skew
    assert abs(usage.cpu_millicores - task) <= 100 + 0.1 * task
    assert usage.cpu_millicores <= 1300
    assert 95 * MiB <= usage.memory_bytes <= 140 * MiB
    assert ls["podsAtRequest"] == []
    assert ls["current"] == {"cpuMillicores": round(usage.cpu_millicores), "memoryBytes": usage.memory_bytes}
    assert node["samples"] == 1
    assert usage.cpu_millicores - 100 <= node["cpuMillicores"]["max"] <= 1000 * os.cpu_count()
    assert node["memoryBytes"]["max"] >= usage.memory_bytes


def wait_for_memory_stat(cgroup: Path, version: CgroupVersion, timeout: float = 10.0) -> None:
    """Until ``memory.stat`` counts what the usage counter does: the kernel flushes a cgroup's
    statistics lazily (every 2 s, or on a read after enough changes), so right after a child wrote
    its page cache the usage has it and ``memory.stat`` may not — the working set (usage minus
    inactive file pages) then counts the cache as used (seen: 204 MiB, with a ``memory.stat``
    of 62 MiB of anonymous memory and no cache at all)."""
    usage_file, keys = (("memory.usage_in_bytes", ("total_cache", "total_rss")) if version is CgroupVersion.V1
                        else ("memory.current", ("file", "anon")))
    deadline = time.monotonic() + timeout
    while True:
        stat = parse_flat_keyed((cgroup / "memory.stat").read_text(), "memory.stat")
        if sum(stat[k] for k in keys) >= int((cgroup / usage_file).read_text()) - 16 * MiB:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"{cgroup}/memory.stat did not catch up with {usage_file} within {timeout:g} s: {stat}")
        time.sleep(0.1)


def test_sampler_node_memory_is_the_node_cgroups_limit_and_working_set(hierarchy, real):
    # A memory budget standing for the node (tidal-agent run --node-memory-cgroup): a 512 MiB
    # limit on this machine's much larger memory, with 100 MiB touched and 100 MiB of page cache
    # written inside it.
    layout = CgroupLayout(
        CgroupHierarchy(hierarchy.version, below_own(hierarchy.cpu_root, cpu_controller(hierarchy)),
                        below_own(hierarchy.memory_root, memory_controller(hierarchy))),
        CgroupDriver.CGROUPFS, kubelet_root=f"/{real.name}")
    node = real.make(layout.hierarchy.memory_root / real.name)
    limit_file = "memory.limit_in_bytes" if hierarchy.version is CgroupVersion.V1 else "memory.max"
    (node / limit_file).write_text(str(512 * MiB))
    real.spawn("memory", real.make(node / "pod"))
    wait_for_memory_stat(node, hierarchy.version)

    sampler = Sampler(layout, windows=(60,), node_memory_cgroup=node)
    sampler.sample([])
    working_set = read_memory_working_set(node, hierarchy.version)
    print(f"\nnode cgroup {node}: {sampler.node_memory_bytes / MiB:.1f} of {sampler.node_memory_total_bytes / MiB:.0f} MiB"
          f" used (working set now {working_set / MiB:.1f} MiB)")
    assert sampler.node_memory_total_bytes == 512 * MiB
    # the touched 100 MiB and the interpreter, not the file's page cache — as far as the kernel
    # has it on the inactive list: freshly written pages sometimes land on the active one (seen
    # once in a full unit run: 173 MiB), and the working set counts those, as the kubelet's does
    stat = parse_flat_keyed((node / "memory.stat").read_text(), "memory.stat")
    active_file = stat["total_active_file" if hierarchy.version is CgroupVersion.V1 else "active_file"]
    assert 95 * MiB <= sampler.node_memory_bytes <= 140 * MiB + active_file
    assert abs(sampler.node_memory_bytes - working_set) <= 8 * MiB


def test_new_page_cache_is_not_working_set_between_memory_stat_reads(hierarchy, real):
    """``memory.stat`` (the inactive file cache subtracted from the usage) is read every 5th
    step; a 200 MiB file written between two reads counted as working set until the next one,
    a peak of the window out of nothing (411 MiB for a pod using 13). Usage grown since the last
    read has memory.stat read again at once."""
    layout = CgroupLayout(
        CgroupHierarchy(hierarchy.version, below_own(hierarchy.cpu_root, cpu_controller(hierarchy)),
                        below_own(hierarchy.memory_root, memory_controller(hierarchy))),
        CgroupDriver.CGROUPFS, kubelet_root=f"/{real.name}")
    pod = PodInfo(uid=f"{secrets.token_hex(4)}-0000-4000-8000-{secrets.token_hex(6)}", namespace="default",
                  name="cache", qos_class=PodQOSClass.BURSTABLE, tidal_level=QoSLevel.LS,
                  cpu_request_millicores=100, memory_request_bytes=10 * MiB)
    relpath = layout.pod_relpath(pod.uid, pod.qos_class)
    memory = real.make(layout.memory_dir(relpath))
    real.make(layout.cpu_dir(relpath))
    sampler = Sampler(layout, windows=(60,))
    sampler.sample([pod])  # memory.stat read: 4 steps to go before the next read
    before = sampler.pod_usage(pod.uid).memory_bytes
    target = real.tmp_path / "cache-file-200"
    writer = f"echo $$ > {memory}/cgroup.procs && dd if=/dev/zero of={target} bs=1M count=200 status=none"
    subprocess.run(["sh", "-c", writer], check=True, timeout=60)
    wait_for_memory_stat(memory, hierarchy.version)  # the kernel's statistics have the new cache
    sampler.sample([pod])
    seen = sampler.pod_usage(pod.uid).memory_bytes
    truth = read_memory_working_set(memory, hierarchy.version)
    print(f"\nworking set before {before / MiB:.1f} MiB; after a 200 MiB file: sampler {seen / MiB:.1f} MiB, "
          f"usage − inactive file now {truth / MiB:.1f} MiB")
    assert abs(seen - truth) <= 16 * MiB, (seen / MiB, truth / MiB)
    assert seen < before + 100 * MiB  # the file's cache is not working set
