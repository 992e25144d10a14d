"""Writes the cgroup trees next to this file: ``python tests/data/cgroups/make_trees.py``.

The trees are small copies of what a kubelet node shows under /sys/fs/cgroup, in the four
layouts (cgroup v1 hybrid / v2 unified x cgroupfs / systemd driver), with six pods (two per QoS
class), their containers and the pause sandbox. File formats follow the kernel (the v1
``memory.stat`` key set is that of Linux 6.x; v2 ``memory.stat`` and ``cpu.stat`` likewise); the
numbers are chosen so that every working set is a round figure, see ``expected.json``.

Paths are written out literally here, on purpose not with ``tidal.agent.collector.cgroups``, so
that the tests of that module check it against an independent spelling of the kubelet's names.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
MiB = 1 << 20
PAGE = 4096

# name, QoS class, uid, runtime, containers: (name, cpu ns, anon, active_file, inactive_file, kernel)
PODS = [
    ("web-0", "Guaranteed", "6b3f0c2e-8f4a-4d1e-9c7b-1a2b3c4d5e6f", [
        ("web", 8_123_456_789_012, 300 * MiB, 20 * MiB, 60 * MiB, 4 * MiB),
    ]),
    ("db-0", "Guaranteed", "0d9a7e51-22c4-4b0f-8e3a-5f6e7d8c9b0a", [
        ("postgres", 52_000_000_000_000, 1800 * MiB, 200 * MiB, 900 * MiB, 24 * MiB),
        ("exporter", 310_000_000_000, 30 * MiB, 2 * MiB, 4 * MiB, 1 * MiB),
    ]),
    ("api-7d9f", "Burstable", "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d", [
        ("api", 4_400_000_000_000, 150 * MiB, 10 * MiB, 30 * MiB, 3 * MiB),
    ]),
    ("cache-1", "Burstable", "f0e1d2c3-b4a5-4968-8776-655443322110", [
        ("redis", 950_000_000_000, 512 * MiB, 0, 16 * MiB, 2 * MiB),
    ]),
    ("batch-job-x2k", "BestEffort", "11111111-2222-4333-8444-555555555555", [
        ("spark", 70_000_000_000_000, 2048 * MiB, 100 * MiB, 3000 * MiB, 40 * MiB),
    ]),
    ("etl-q8w", "BestEffort", "99999999-8888-4777-8666-555544443333", [
        # Cache-heavy job just started: in v1 the charged usage lags the page counters (per-CPU
        # charge batching), so inactive_file exceeds usage: the working set clamps at 0.
        ("etl", 12_000_000, 0, 0, 4 * MiB, 0),
    ]),
]
PAUSE = (3_000_000, 256 * 1024, 0, 0, 64 * 1024)  # cpu ns, anon, active_file, inactive_file, kernel
V1_USAGE_LAG = {"etl": 3 * MiB}  # bytes missing from memory.usage_in_bytes (v1 only)


def cid(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def v1_memory_stat(local: dict[str, int], total: dict[str, int]) -> str:
    keys = [
        "cache", "rss", "rss_huge", "shmem", "mapped_file", "dirty", "writeback",
        "workingset_refault_anon", "workingset_refault_file", "swap", "swapcached", "pgpgin",
        "pgpgout", "pgfault", "pgmajfault", "inactive_anon", "active_anon", "inactive_file",
        "active_file", "unevictable",
    ]
    lines = [f"{k} {local.get(k, 0)}" for k in keys]
    lines += ["hierarchical_memory_limit 9223372036854771712", "hierarchical_memsw_limit 9223372036854771712"]
    lines += [f"total_{k} {total.get(k, 0)}" for k in keys]
    return "\n".join(lines) + "\n"


def v2_memory_stat(s: dict[str, int]) -> str:
    keys = [
        "anon", "file", "kernel", "kernel_stack", "pagetables", "sec_pagetables", "percpu", "sock",
        "vmalloc", "shmem", "zswap", "zswapped", "file_mapped", "file_dirty", "file_writeback",
        "swapcached", "anon_thp", "file_thp", "shmem_thp", "inactive_anon", "active_anon",
        "inactive_file", "active_file", "unevictable", "slab_reclaimable", "slab_unreclaimable",
        "slab", "workingset_refault_anon", "workingset_refault_file", "workingset_activate_anon",
        "workingset_activate_file", "workingset_restore_anon", "workingset_restore_file",
        "workingset_nodereclaim", "pgscan", "pgsteal", "pgscan_kswapd", "pgscan_direct",
        "pgsteal_kswapd", "pgsteal_direct", "pgfault", "pgmajfault", "pgrefill", "pgactivate",
        "pgdeactivate", "pglazyfree", "pglazyfreed", "thp_fault_alloc", "thp_collapse_alloc",
    ]
    return "\n".join(f"{k} {s.get(k, 0)}" for k in keys) + "\n"


class Usage:
    def __init__(self, cpu_ns=0, anon=0, active_file=0, inactive_file=0, kernel=0, lag=0):
        self.cpu_ns, self.anon, self.active_file = cpu_ns, anon, active_file
        self.inactive_file, self.kernel, self.lag = inactive_file, kernel, lag

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(getattr(self, a) + getattr(other, a) for a in vars(self)))

    @property
    def usage(self) -> int:
        return self.anon + self.active_file + self.inactive_file + self.kernel

    @property
    def working_set(self) -> int:  # by construction, not by the formula under test
        return max(0, self.anon + self.active_file + self.kernel - self.lag)

    def page_counters(self) -> dict[str, int]:
        return {
            "cache": self.active_file + self.inactive_file, "rss": self.anon,
            "mapped_file": self.active_file // 2, "inactive_anon": self.anon // 8,
            "active_anon": self.anon - self.anon // 8, "inactive_file": self.inactive_file,
            "active_file": self.active_file, "pgfault": (self.anon // PAGE) * 3 + 17,
            "pgpgin": (self.usage // PAGE) + 100, "pgpgout": 100,
        }

    def v2_stat(self) -> dict[str, int]:
        slab = self.kernel // 2
        return {
            "anon": self.anon, "file": self.active_file + self.inactive_file, "kernel": self.kernel,
            "kernel_stack": self.kernel // 8, "pagetables": self.kernel // 4, "percpu": 4096,
            "file_mapped": self.active_file // 2, "inactive_anon": self.anon // 8,
            "active_anon": self.anon - self.anon // 8, "inactive_file": self.inactive_file,
            "active_file": self.active_file, "slab_reclaimable": slab - slab // 4,
            "slab_unreclaimable": slab // 4, "slab": slab, "pgfault": (self.anon // PAGE) * 3 + 17,
            "pgmajfault": 3,
        }


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_v1(cpu: Path, memory: Path, rel: str, u: Usage, local: Usage | None) -> None:
    # Only the files the collector reads; a real cgroup directory has many more.
    write(cpu / rel / "cpuacct.usage", f"{u.cpu_ns}\n")
    local = local if local is not None else Usage()
    write(memory / rel / "memory.usage_in_bytes", f"{max(0, u.usage - u.lag)}\n")
    write(memory / rel / "memory.stat", v1_memory_stat(local.page_counters(), u.page_counters()))


def write_v2(root: Path, rel: str, u: Usage) -> None:
    usec = u.cpu_ns // 1000
    write(root / rel / "cpu.stat", "\n".join([
        f"usage_usec {usec}", f"user_usec {usec * 4 // 5}", f"system_usec {usec - usec * 4 // 5}",
        "core_sched.force_idle_usec 0", "nr_periods 0", "nr_throttled 0", "throttled_usec 0",
        "nr_bursts 0", "burst_usec 0",
    ]) + "\n")
    if rel != ".":  # the root cgroup has no memory.current
        write(root / rel / "memory.current", f"{u.usage}\n")
    write(root / rel / "memory.stat", v2_memory_stat(u.v2_stat()))


def build(version: str, driver: str, openeuler: bool = False) -> dict:
    """``openeuler``: a v1 tree whose kernel has openEuler's ``cpu.qos_level`` and
    ``memory.qos_level`` in every cgroup (at the kernel's default, 0: online)."""
    tree = f"{version}-{driver}" + ("-openeuler" if openeuler else "")
    root = HERE / tree
    shutil.rmtree(root, ignore_errors=True)
    systemd = driver == "systemd"
    runtime = "docker" if (version == "v1" and systemd) else "containerd"
    kubepods = "kubepods.slice" if systemd else "kubepods"
    qos_dir = {
        "Guaranteed": kubepods,
        "Burstable": "kubepods.slice/kubepods-burstable.slice" if systemd else "kubepods/burstable",
        "BestEffort": "kubepods.slice/kubepods-besteffort.slice" if systemd else "kubepods/besteffort",
    }

    def pod_dir(qos: str, uid: str) -> str:
        if not systemd:
            return f"{qos_dir[qos]}/pod{uid}"
        middle = "" if qos == "Guaranteed" else qos.lower() + "-"
        return f"{qos_dir[qos]}/kubepods-{middle}pod{uid.replace('-', '_')}.slice"

    def container_dir(pod: str, container_id: str) -> str:
        if not systemd:
            return f"{pod}/{container_id}"
        prefix = {"containerd": "cri-containerd", "docker": "docker"}[runtime]
        return f"{pod}/{prefix}-{container_id}.scope"

    entries: dict[str, tuple[Usage, Usage | None]] = {}  # rel -> (hierarchical, local)
    expected = {"version": version, "driver": driver, "runtime": runtime, "pods": {}}
    qos_totals = {q: Usage() for q in qos_dir}
    for name, qos, uid, containers in PODS:
        pdir = pod_dir(qos, uid)
        total = Usage()
        cexp = {}
        for cname, *numbers in [("POD", *PAUSE), *containers]:
            container_id = cid(version, driver, uid, cname)
            u = Usage(*numbers, lag=V1_USAGE_LAG.get(cname, 0) if version == "v1" else 0)
            entries[container_dir(pdir, container_id)] = (u, u)
            total = total + u
            if cname != "POD":
                cexp[cname] = {
                    "containerID": f"{runtime}://{container_id}",
                    "relpath": container_dir(pdir, container_id),
                    "cpuUsageNs": u.cpu_ns if version == "v1" else u.cpu_ns // 1000 * 1000,
                    "workingSetBytes": u.working_set,
                }
        entries[pdir] = (total, None)
        qos_totals[qos] = qos_totals[qos] + total
        expected["pods"][uid] = {
            "name": name, "qosClass": qos, "relpath": pdir,
            "cpuUsageNs": total.cpu_ns if version == "v1" else total.cpu_ns // 1000 * 1000,
            "workingSetBytes": total.working_set, "containers": cexp,
        }
    for qos in ("Burstable", "BestEffort"):
        entries[qos_dir[qos]] = (qos_totals[qos], None)
    all_pods = qos_totals["Guaranteed"] + qos_totals["Burstable"] + qos_totals["BestEffort"]
    entries[kubepods] = (all_pods, None)
    system = Usage(
        cpu_ns=90_000_000_000_000, anon=700 * MiB, active_file=500 * MiB, inactive_file=1500 * MiB, kernel=200 * MiB
    )
    node = all_pods + system

    if version == "v1":
        cpu = root / ("cpuacct" if systemd else "cpu,cpuacct")
        memory = root / "memory"
        if systemd:  # separate cpu and cpuacct hierarchies, as some hybrid hosts mount them
            write(root / "cpu" / "cpu.shares", "1024\n")
        write(root / "unified" / "cgroup.controllers", "")  # hybrid: cgroup2 without controllers
        write_v1(cpu, memory, ".", node, system)
        for rel, (u, local) in entries.items():
            write_v1(cpu, memory, rel, u, local)
        if openeuler:
            for rel in [".", *entries]:
                write(cpu / rel / "cpu.qos_level", "0\n")
                write(memory / rel / "memory.qos_level", "0\n")
    else:
        write(root / "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
        write(root / "cgroup.subtree_control", "cpuset cpu io memory pids\n")
        write_v2(root, ".", node)
        for rel, (u, _) in entries.items():
            write_v2(root, rel, u)
    write(HERE / f"{tree}.expected.json", json.dumps(expected, indent=2) + "\n")
    return expected


if __name__ == "__main__":
    for version in ("v1", "v2"):
        for driver in ("cgroupfs", "systemd"):
            build(version, driver)
    build("v1", "cgroupfs", openeuler=True)
