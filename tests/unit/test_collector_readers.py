"""tidal.agent.collector.readers: parsing cgroup and /proc files, and reading recorded trees."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path, PurePosixPath

import pytest
from tidal.agent.collector.cgroups import CgroupVersion, PodQOSClass, detect_layout
from tidal.agent.collector.readers import (
    CpuTimes,
    MemInfo,
    ParseError,
    parse_cpu_stat_usage_ns,
    parse_cpuacct_usage,
    parse_flat_keyed,
    node_memory_in_cgroup,
    parse_meminfo,
    parse_memory_limit,
    parse_memory_working_set,
    parse_proc_stat,
    read_cpu_usage_ns,
    read_meminfo,
    read_memory_working_set,
    read_proc_stat,
    working_set_bytes,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "cgroups"
TREES = ("v1-cgroupfs", "v1-systemd", "v2-cgroupfs", "v2-systemd")
V1, V2 = CgroupVersion.V1, CgroupVersion.V2
MiB = 1 << 20

V2_CPU_STAT = """usage_usec 5582675933
user_usec 4615333479
system_usec 967342454
nr_periods 0
nr_throttled 0
throttled_usec 0
"""


# --- CPU --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected_ns"),
    [("5536702394802\n", 5536702394802), ("0\n", 0), ("  42  \n\n", 42), (f"{2**64 - 1}\n", 2**64 - 1)],
)
def test_cpuacct_usage_is_nanoseconds(text, expected_ns):
    assert parse_cpuacct_usage(text) == expected_ns


def test_cpu_stat_usage_usec_becomes_nanoseconds():
    assert parse_cpu_stat_usage_ns(V2_CPU_STAT) == 5582675933 * 1000


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (parse_cpuacct_usage, "", "expected one integer, got 0 non-empty lines"),
        (parse_cpuacct_usage, "1\n2\n", "expected one integer, got 2 non-empty lines"),
        (parse_cpuacct_usage, "12x\n", "line 1: expected a non-negative integer, got '12x'"),
        (parse_cpuacct_usage, "\n-5\n", "line 2: expected a non-negative integer, got negative -5"),
        (parse_cpu_stat_usage_ns, "user_usec 1\n", "no 'usage_usec' line"),
        (parse_cpu_stat_usage_ns, "usage_usec 1\nuser_usec\n", "line 2: expected '<key> <integer>', got 'user_usec'"),
        (parse_cpu_stat_usage_ns, "usage_usec 1.5\n", "line 1: expected an integer for 'usage_usec', got '1.5'"),
    ],
)
def test_malformed_cpu_file_error_names_the_file_and_line(parse, text, message):
    with pytest.raises(ParseError) as error:
        parse(text, "/sys/fs/cgroup/x/file")
    assert str(error.value).startswith("/sys/fs/cgroup/x/file")
    assert message in str(error.value)


# --- Memory -----------------------------------------------------------------------------------

V1_STAT = """cache 14614528
rss 1683456
inactive_file 0
active_file 0
total_cache 14614528
total_rss 1683456
total_inactive_file 10223616
total_active_file 4390912
"""
V2_STAT = """anon 104857600
file 52428800
inactive_file 41943040
active_file 10485760
"""


@pytest.mark.parametrize(
    ("version", "usage", "stat", "expected_bytes"),
    [
        # v1 subtracts the hierarchical total_inactive_file, not the cgroup's own inactive_file
        (V1, "16298112\n", V1_STAT, 16298112 - 10223616),
        (V2, f"{160 * MiB}\n", V2_STAT, 160 * MiB - 40 * MiB),
        # usage below the inactive cache (v1 charge batching): clamped at 0, never negative
        (V1, "1000\n", V1_STAT, 0),
        (V2, "0\n", V2_STAT, 0),
    ],
)
def test_working_set_is_usage_without_inactive_page_cache(version, usage, stat, expected_bytes):
    assert parse_memory_working_set(version, usage, stat) == expected_bytes


@pytest.mark.parametrize(
    ("usage", "inactive", "expected_bytes"), [(10, 3, 7), (3, 10, 0), (0, 0, 0), (2**63, 1, 2**63 - 1)]
)
def test_working_set_bytes_clamps_at_zero(usage, inactive, expected_bytes):
    assert working_set_bytes(usage, inactive) == expected_bytes


@pytest.mark.parametrize(
    ("version", "stat", "message"),
    [
        (V1, "inactive_file 5\n", "memory.stat: no 'total_inactive_file' line"),
        (V2, "total_inactive_file 5\n", "memory.stat: no 'inactive_file' line"),
        (
            V2,
            "anon 1\ninactive_file five\n",
            "memory.stat, line 2: expected an integer for 'inactive_file', got 'five'",
        ),
    ],
)
def test_memory_stat_without_inactive_file_is_an_error_not_usage_with_cache(version, stat, message):
    with pytest.raises(ParseError, match=message):
        parse_memory_working_set(version, "100\n", stat)


def test_flat_keyed_reads_every_pair_and_skips_blank_lines():
    assert parse_flat_keyed("a 1\n\nb 2\n", "f") == {"a": 1, "b": 2}


# --- /proc ------------------------------------------------------------------------------------

PROC_STAT = """cpu  461536 10 91576 264752 4488 7 5158 5510 3 0
cpu0 212227 0 43728 154010 1140 0 2194 2914 0 0
cpu1 249309 0 47848 110741 3347 0 2964 2595 0 0
intr 1 2 3
ctxt 12345
btime 1700000000
"""


def test_proc_stat_busy_excludes_idle_iowait_and_steal_and_guest_is_not_counted_twice():
    times = parse_proc_stat(PROC_STAT)
    total = 461536 + 10 + 91576 + 264752 + 4488 + 7 + 5158 + 5510  # guest (3) is inside user
    assert times == CpuTimes(total=total, idle=264752, iowait=4488, cpus=2, steal=5510)
    assert times.busy == 461536 + 10 + 91576 + 7 + 5158  # user nice system irq softirq


def test_proc_stat_of_an_old_kernel_with_five_counters_is_read():
    assert parse_proc_stat("cpu 10 0 5 100 1\ncpu0 10 0 5 100 1\n") == CpuTimes(116, 100, 1, 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cpu0 1 2 3 4 5\n", "/proc/stat: no aggregate 'cpu' line"),
        ("cpu  1 2 3 4 5\n", "/proc/stat: no per-CPU 'cpuN' lines"),
        ("intr 1\ncpu  1 2 3\ncpu0 1 2 3\n", "/proc/stat, line 2: expected at least 5 counters"),
        ("cpu  1 2 x 4 5\ncpu0 1 2 3 4 5\n", "/proc/stat, line 1: expected a tick count, got 'x'"),
    ],
)
def test_malformed_proc_stat_error_names_the_line(text, message):
    with pytest.raises(ParseError, match=message):
        parse_proc_stat(text)


MEMINFO = """MemTotal:       24684092 kB
MemFree:        21396696 kB
MemAvailable:   22131984 kB
Buffers:             972 kB
Cached:           656296 kB
HugePages_Total:       0
"""


def test_meminfo_used_is_total_minus_available_in_bytes():
    info = parse_meminfo(MEMINFO)
    assert info == MemInfo(total_bytes=24684092 * 1024, available_bytes=22131984 * 1024)  # no Inactive(file) line
    assert info.used_bytes == (24684092 - 22131984) * 1024


def test_the_node_working_set_counts_active_page_cache_as_a_pods_does():
    """MemTotal − MemFree − Inactive(file), the basis of a pod's working set (usage − inactive
    file): system usage = node − pods on MemAvailable's basis lost the pods' active page cache
    (400 MB a pod read back made system usage fall by 410 MiB on this machine's kernel)."""
    info = parse_meminfo(MEMINFO + "Inactive(file):   500000 kB\n")
    assert info.working_set_bytes == (24684092 - 21396696 - 500000) * 1024
    assert info.used_bytes == (24684092 - 22131984) * 1024  # the usage reported and the watermarks: unchanged


GiB = 1 << 30


@pytest.mark.parametrize(
    ("text", "version", "limit"),
    [
        ("6442450944\n", V1, 6 * GiB),
        ("9223372036854771712\n", V1, None),  # v1's "no limit"
        ("6442450944\n", V2, 6 * GiB),
        ("max\n", V2, None),
    ],
)
def test_memory_limit_of_a_cgroup_in_bytes_or_none(text, version, limit):
    assert parse_memory_limit(text, version, "memory.limit_in_bytes") == limit


@pytest.mark.parametrize(("text", "version"), [("max\n", V1), ("lots\n", V2)])
def test_malformed_memory_limit_error_names_the_file(text, version):
    with pytest.raises(ParseError, match="^x/memory.max: expected an integer"):
        parse_memory_limit(text, version, "x/memory.max")


@pytest.mark.parametrize(
    ("limit", "working_set", "expected"),
    [
        # a 6 GiB budget on a 24 GiB machine: the node is the budget, used is its working set
        (6 * GiB, 5 * GiB, MemInfo(total_bytes=6 * GiB, available_bytes=1 * GiB)),
        # no limit: the machine's memory
        (None, 5 * GiB, MemInfo(total_bytes=24 * GiB, available_bytes=19 * GiB)),
        # a limit above the machine's memory counts as the machine's
        (64 * GiB, 5 * GiB, MemInfo(total_bytes=24 * GiB, available_bytes=19 * GiB)),
        # working set above the limit (read a moment apart): nothing available, never negative
        (6 * GiB, 7 * GiB, MemInfo(total_bytes=6 * GiB, available_bytes=0)),
    ],
)
def test_node_memory_in_a_cgroup_is_its_limit_and_working_set(limit, working_set, expected):
    machine = MemInfo(total_bytes=24 * GiB, available_bytes=20 * GiB)
    info = node_memory_in_cgroup(machine, limit, working_set)
    assert info == dataclasses.replace(expected, working_set_bytes=working_set)  # the cgroup's: the pods' basis
    assert info.used_bytes == min(working_set, info.total_bytes)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("MemTotal: 10 kB\n", "/proc/meminfo: no MemAvailable line"),
        ("Cached: 1 kB\n", "/proc/meminfo: no MemTotal or MemAvailable line"),
        ("MemTotal: 10 kB\nMemAvailable: lots kB\n", "/proc/meminfo, line 2: expected an integer for MemAvailable"),
        ("MemTotal: 10 MB\nMemAvailable: 1 kB\n", "/proc/meminfo, line 1: expected 'MemTotal: <integer> kB'"),
    ],
)
def test_malformed_meminfo_error_names_the_line(text, message):
    with pytest.raises(ParseError, match=message):
        parse_meminfo(text)


# --- Reading the recorded trees ---------------------------------------------------------------


@pytest.mark.parametrize("tree", TREES)
def test_recorded_pod_and_container_usage_is_read_through_the_layout(tree):
    layout = detect_layout(DATA / tree)
    pods = json.loads((DATA / f"{tree}.expected.json").read_text())["pods"]
    for uid, pod in pods.items():
        relpath = layout.pod_relpath(uid, PodQOSClass(pod["qosClass"]))
        assert read_cpu_usage_ns(layout.cpu_dir(relpath), layout.version) == pod["cpuUsageNs"], pod["name"]
        assert read_memory_working_set(layout.memory_dir(relpath), layout.version) == pod["workingSetBytes"]
        for container in pod["containers"].values():
            crel = PurePosixPath(container["relpath"])
            assert read_cpu_usage_ns(layout.cpu_dir(crel), layout.version) == container["cpuUsageNs"]
            assert read_memory_working_set(layout.memory_dir(crel), layout.version) == container["workingSetBytes"]


@pytest.mark.parametrize(
    ("tree", "uid", "working_set"),
    [
        # web-0: anon 300 MiB + active file 20 MiB + kernel 4 MiB, plus pause 256 KiB + 64 KiB;
        # its 60 MiB of inactive page cache is not counted.
        ("v1-cgroupfs", "6b3f0c2e-8f4a-4d1e-9c7b-1a2b3c4d5e6f", 324 * MiB + 320 * 1024),
        ("v2-systemd", "6b3f0c2e-8f4a-4d1e-9c7b-1a2b3c4d5e6f", 324 * MiB + 320 * 1024),
        # etl-q8w: only inactive page cache, and v1 usage lagging behind it: clamped to 0
        ("v1-systemd", "99999999-8888-4777-8666-555544443333", 0),
    ],
)
def test_recorded_working_sets_leave_out_inactive_page_cache(tree, uid, working_set):
    layout = detect_layout(DATA / tree)
    pod = json.loads((DATA / f"{tree}.expected.json").read_text())["pods"][uid]
    relpath = layout.pod_relpath(uid, PodQOSClass(pod["qosClass"]))
    assert read_memory_working_set(layout.memory_dir(relpath), layout.version) == working_set == pod["workingSetBytes"]


def test_missing_cgroup_is_file_not_found_not_a_parse_error():
    layout = detect_layout(DATA / "v1-cgroupfs")
    relpath = layout.pod_relpath("00000000-0000-4000-8000-000000000000", PodQOSClass.BURSTABLE)
    with pytest.raises(FileNotFoundError):
        read_cpu_usage_ns(layout.cpu_dir(relpath), layout.version)
    with pytest.raises(FileNotFoundError):
        read_memory_working_set(layout.memory_dir(relpath), layout.version)


def test_malformed_file_on_disk_is_reported_with_its_path(tmp_path):
    (tmp_path / "memory.current").write_text("100\n")
    (tmp_path / "memory.stat").write_text("anon 1\ninactive_file\n")
    with pytest.raises(ParseError) as error:
        read_memory_working_set(tmp_path, V2)
    assert str(error.value).startswith(f"{tmp_path / 'memory.stat'}, line 2: ")


def test_recorded_proc_files_are_read():
    times = read_proc_stat(DATA / "proc" / "stat")
    assert times.cpus == 4
    assert times.busy == 2255318 + 1204 + 571230 + 30442  # user nice system softirq (steal 1513 is not busy)
    assert read_meminfo(DATA / "proc" / "meminfo").used_bytes == (16310948 - 11068260) * 1024


def test_this_machines_proc_files_parse():
    times = read_proc_stat()
    assert times.cpus >= 1 and times.total > times.busy >= 0
    info = read_meminfo()
    assert 0 < info.used_bytes < info.total_bytes


THREADS = """import sys, threading
stop = threading.Event()
for _ in range(int(sys.argv[1])):
    threading.Thread(target=stop.wait, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""


def test_read_small_reads_a_thread_list_longer_than_a_page_whole(real):
    """Real cgroupfs: a cgroup's thread list is a seq_file, which gives about a page a read; a
    process of 1,200 threads lists several pages of TIDs, every one of which is read."""
    import subprocess
    import sys

    from tidal.agent.collector.readers import read_small
    from tidal_dev.testing.real_cgroups import below_own
    base = Path("/sys/fs/cgroup/cpu")
    if not (base / "tasks").exists():
        pytest.skip("no cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu")
    group = real.make(below_own(base, "cpu") / real.name)
    child = subprocess.Popen([sys.executable, "-c", THREADS, "1200"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        (group / "cgroup.procs").write_text(str(child.pid))
        with open(group / "tasks") as f:  # buffered reads to the end
            expected = f.read().split()
        assert len(expected) > 1200 and len(" ".join(expected)) > 4096
        assert read_small(group / "tasks").decode().split() == expected
    finally:
        child.kill()
        child.wait()
