"""make bench-memory: does an online service whose latency depends on memory keep it next to a
memory-hungry BE job, inside a node-sized memory budget?

The node is a memory budget: the kubelet root's cgroup (every pod below it) gets
``memory.limit_in_bytes`` = ``--budget-gib`` (6 GiB; cgroup v1 memory controller), so the pods
compete for 6 GiB as on a 6 GiB node, while the rest of this shared 24 GiB machine stays out of
it. "Node memory used" is that cgroup's usage (page cache included) over its limit; its working
set (usage minus inactive page cache, what the agent and the kubelet count) is reported too.

The online service is nginx (Debian's ``nginx-light``) serving a file set of ``--fileset-gib``
(2.5 GiB of 64 KiB files) from the page cache to an open-loop fixed-rate client drawing a file
at random per request (bench/loadgen ``-urls``), from an LS "pod". nginx rather than Redis: its
memory is the page cache, which the kernel takes back from it silently when a neighbour needs
memory (a cache miss becomes a disk read, the latency the issue is about), whereas Redis's
dataset is anonymous memory that, without swap (this machine has none), cannot be taken — Redis
would only show OOM kills, not latency; and loadgen speaks HTTP, not RESP.

The BE job (a "pod" of its own) holds ``--be-anon-gib`` (1.5 GiB) of anonymous working memory
and streams through a file larger than the budget (``--stream-gib``, 8 GiB) in a loop, as an
ETL or sort job does, at most ``--be-pace-mb`` (300 MB/s: a job paced by its own processing —
unpaced, its reads would take a whole core of this 2-core machine in every treatment, and CPU
is bench-isolation's subject); its throughput is MB/s read. Its page cache grows without bound
unless something limits it. With ``--be-anon-from-limit PCT`` the job instead sizes its anonymous
memory from what it sees, as a JVM's ``-XX:MaxRAMPercentage`` does: PCT % of its cgroup's memory
limit, or of the node's memory (the budget) when it has none — which is what a BestEffort pod
has under Kubernetes' default, so there it takes PCT % of the node, beside nginx's file set;
under Tidal it sees its batch-memory limit (each line reports ``be_anon_mib``).

Treatments, interleaved over ``--rounds`` rounds (carry-over balanced, bench/round_order.py; medians, and the
spread min–max), every one starting from nginx's file set fully cached and the BE's stream
file uncached:

* ``solo``          the online service alone; its ``be_mb_per_s`` is the BE job's alone (run
                    separately with the online service idle), the reference for BE throughput;
* ``agent_solo``    the online service alone with ``tidal-agent run`` enforcing as in ``tidal``:
                    what the agent itself (its rounds, its API traffic to the lab) costs the
                    online service, the part of ``tidal``'s figures no BE job causes;
* ``no_isolation``  both, every cgroup at its defaults, ``oom_score_adj`` 0;
* ``k8s_default``   as Kubernetes treats a BestEffort BE pod's memory: no memory limit,
                    ``oom_score_adj`` 1000; the LS pod's nginx at the kubelet's Burstable
                    ``oom_score_adj``;
* ``tidal``         ``tidal-agent run --node-memory-cgroup <budget>`` enforcing, against a private
                    lab where a kwok node (memory capacity = the budget) stands for this machine:
                    the BE pod's ``memory.limit_in_bytes`` from its ``kubernetes.io/batch-memory``
                    request (set before the job starts, as the NRI plugin does at creation),
                    memory reclaim, memory watermark eviction, PSI-based eviction on memory.
                    An eviction ends the BE job (the bench stands in for the kubelet) and is
                    counted, with the agent's reason logged.
* ``tidal_idle_group`` (only with ``--lead-be-idle-group``) ``tidal`` with the BE job's cpu
                    cgroup an idle group at the cpu hierarchy's root (bench-isolation's
                    ``be_idle_group``) instead of its pod's; its memory and every other cgroup stay
                    its pod's, under the agent. The CPU side of the BE idle group Tidal ships on
                    by default since 2026-12-05 (``beIsolation.cpuPriority.idleGroup``), which
                    ``tidal`` leaves off: that group sits at the machine's root, outside the
                    budget cgroup that stands for the node here (on a node its memory is bounded
                    as ``kubepods``).
* ``agent_solo_variant``, ``tidal_variant`` (only with ``--variant-policy JSON`` and/or
                    ``--variant-agent-args ARGS``) ``agent_solo`` and ``tidal`` with the policy's
                    spec patched by JSON (put back after the run) and the agent started with ARGS
                    added: an A/B of a policy or agent change in the same rounds, e.g. what
                    part of ``agent_solo``'s cost a feature of the agent makes.

By default (``--cpu defaults``) CPU is left at its defaults in every treatment — no ``cpu.shares``
2 for k8s_default, Tidal's CPU priority and suppression off — so the figures show memory alone
(``make bench-isolation`` measures CPU; on this shared machine a CPU-deprioritised BE job would
yield to other people's work too, which says nothing about memory). ``--cpu as-shipped`` gives
the BE pod the CPU treatment each side ships with instead: ``cpu.shares`` 2 on the pod and the
besteffort parent for k8s_default, the policy's CPU defaults for Tidal (``cpu.idle``,
suppression, the interference control) — what a user's node sees, where the BE job's own
reclaim work is CPU the online service competes with. The load generator runs at SCHED_FIFO 1
as in bench-isolation: it stands for clients on other machines.

``--disk-read-mbps MB`` / ``--disk-read-iops N`` make the disk under ``--workdir-parent`` a
volume of that many MB/s and reads per second shared by the pods, as a node's network volume is (a
cloud's general-purpose volume: 125 MB/s and 3,000 IOPS): one blkio cgroup of the v1 hierarchy,
its throttle on the whole disk, holds nginx's and the BE job's processes (the v1 throttle is not
hierarchical, so the pods cannot keep cgroups of their own there), nothing else. This machine's
virtual disk reads 64 KiB at random in 0.6 ms and sequentially at 1–2 GB/s, faster than such a
volume, so without it a page-cache miss of nginx costs little and the BE job's stream queues no
one. Every line reports ``damon_pageout_mib``: what the machine's DAMON page-out schemes
reclaimed meanwhile (bench/damon.py; machine-wide, not only the bench's cgroups); ``--pause-damon``
switches them off for the run.

``--background lab`` runs the bench beside the load of a node's daemons, as bench-isolation does
(bench/lab_background.py: the bench's lab control plane under a stream of API writes, outside the
budget and every pod cgroup, for the whole run, every treatment alike): their CPU is what the
online service and the BE job's reclaim compete with on a real node. Their memory stays outside
the budget, as a node's system reservation does.  ``--daemons-cgroup system.slice`` puts them
in one ``system.slice`` cpu group beside ``kubepods`` (``cpu.shares`` 1024 against the kubelet's
CPUs × 1024), as on a systemd node; ``root`` (the default) leaves them loose in the root cgroup.

Output: one JSON line per treatment and round, then the medians as the last line:
``{"solo": R, "agent_solo": R, "no_isolation": R, "k8s_default": R, "tidal": R, "background": B}`` with R =
``{"p50_ms", "p99_ms", "errors", "be_mb_per_s", "node_mem_used_pct", "oom_kills", "evictions"}``
(plus the spreads and the reclaim figures; see :func:`summarise`). ``online_disk_read_kib`` is
what nginx's processes read from the disk during the measured seconds (``/proc/PID/io``): a
request whose file left the page cache waits for the disk, behind whatever the BE job reads.
``p99_pooled_ms`` is one p99 over every round's requests of a treatment (bench/loadgen
``-latencies``): one stall sets a 15-s window's p99 by itself, so the median of rounds' p99s
says mostly in which rounds a stall fell; pooled, a stall counts by the requests it delayed.
``online_stall_ms`` is how long nginx's processes were delayed during the measured seconds, by
kind (``cpu``: waiting for a CPU, ``memory``/``memory_full``: in reclaim or refaulting, ``io``:
waiting for block I/O; PSI of a cgroup of the unified hierarchy holding them, bench/stalls.py);
``node_stall_ms`` the same for the whole machine (``/proc/pressure``). ``--stall-causes`` adds
``ls_stalls`` to every line with requests (pooled over the rounds in the medians): what each
run-queue wait of an nginx thread longer than ``--stall-over-ms`` (1 ms: the p99 here is 2–3 ms,
so a wait of a few milliseconds is what sets it) waited behind — the hypervisor, the BE job,
nginx's own threads or other work (the agent, the lab's daemons, the load client, kernel threads),
from the kernel's scheduler trace of the measured seconds (bench/stall_causes.py, as
bench-isolation's).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import agent_pod  # noqa: E402  (bench/, on the path just above)
import damon  # noqa: E402
from isolation import policy_patch, undo_patch  # noqa: E402
import lab_background  # noqa: E402
from round_order import round_order  # noqa: E402
import stall_causes  # noqa: E402
import stalls  # noqa: E402

TREATMENTS = ("solo", "agent_solo", "no_isolation", "k8s_default", "tidal")
#: the runs of one round: ``be_solo`` is the BE job alone, folded into ``solo``'s record
RUNS = ("solo", "agent_solo", "be_solo", "no_isolation", "k8s_default", "tidal")
#: ``--lead-be-idle-group``'s treatment, run only when asked for (the BE idle group's CPU side, its
#: memory kept in the budget)
LEADS = ("tidal_idle_group",)
#: ``--variant-policy`` / ``--variant-agent-args``' runs: ``agent_solo`` and ``tidal`` with the variant
VARIANTS = ("agent_solo_variant", "tidal_variant")
#: what the summary and the verdict report, in this order (a lead or a variant only when it ran)
REPORTED = (*TREATMENTS, *LEADS, *VARIANTS)
#: the runs with ``tidal-agent run`` enforcing
AGENT_RUNS = ("agent_solo", "tidal", *LEADS, *VARIANTS)
#: the runs without the BE job (the online service alone, with or without the agent)
ONLINE_ALONE = ("solo", "agent_solo", "agent_solo_variant")
SUMMARY_KEYS = ("p50_ms", "p99_ms", "errors", "be_mb_per_s", "node_mem_used_pct", "oom_kills", "evictions")
GiB = 1 << 30
BLKIO_ROOT = Path("/sys/fs/cgroup/blkio")
MiB = 1 << 20
#: a 64 KiB file: a product image, a JS bundle
FILE_BYTES = 64 * 1024


def log(msg: str) -> None:
    print(f"[bench-memory] {msg}", file=sys.stderr, flush=True)


# -- pure parts (tests/unit/test_bench_memory.py) --------------------------------------------

def parse_flat(text: str) -> dict[str, int]:
    """``key value`` lines (``memory.stat``, ``memory.oom_control``) into a dict of integers."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        try:
            out[key] = int(value)
        except ValueError:
            continue
    return out


def oom_kills(oom_control: str) -> int:
    """``oom_kill`` of a v1 ``memory.oom_control`` (kills of tasks in that cgroup; 0 on kernels
    before 4.13, which lack the line)."""
    return parse_flat(oom_control).get("oom_kill", 0)


def kubelet_burstable_oom_score_adj(memory_request: int, memory_capacity: int) -> int:
    """The kubelet's ``oom_score_adj`` of a Burstable container (pkg/kubelet/qos/policy.go)."""
    adj = 1000 - (1000 * memory_request) // memory_capacity
    if adj < 1000 - 997:  # above a Guaranteed pod's (-997) share of the node
        return 1000 - 997
    return 999 if adj == 1000 else adj  # below BestEffort's 1000


def rate_between(before: tuple[float, int] | None, after: tuple[float, int] | None) -> float:
    """MB/s (10^6 bytes) between two (monotonic seconds, cumulative bytes) progress records."""
    if before is None or after is None or after[0] <= before[0]:
        return 0.0
    return (after[1] - before[1]) / (after[0] - before[0]) / 1e6


def parse_progress(text: str) -> tuple[float, int] | None:
    """The BE job's progress record ``<monotonic seconds> <bytes read>`` (None when unreadable)."""
    fields = text.split()
    if len(fields) != 2:
        return None
    try:
        return float(fields[0]), int(fields[1])
    except ValueError:
        return None


def metric_total(text: str, name: str, labels: Mapping[str, str] | None = None) -> float:
    """Sum of the samples of ``name`` in Prometheus text whose labels include ``labels``."""
    total = 0.0
    pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})?\s+(\S+)$")
    for line in text.splitlines():
        match = pattern.match(line)
        if not match:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if all(have.get(k) == v for k, v in (labels or {}).items()):
            total += float(match.group(2))
    return total


def spread(values: Iterable[float]) -> list[float]:
    values = list(values)
    return [round(min(values), 3), round(max(values), 3)] if values else []


def summarise(runs: Mapping[str, list[dict]]) -> dict[str, dict]:
    """Per treatment the median of every round, and ``<key>_spread`` [min, max] for latency,
    BE throughput and memory used; the counters (errors, OOM kills, evictions) are summed over
    the rounds. ``solo`` takes ``be_mb_per_s`` from the ``be_solo`` runs."""
    out: dict[str, dict] = {}
    for treatment in REPORTED:
        rows = runs.get(treatment, [])
        if treatment == "solo":
            be_alone = [r["be_mb_per_s"] for r in runs.get("be_solo", [])]
            rows = [{**r, "be_mb_per_s": b} for r, b in zip(rows, be_alone)] or rows
        if not rows:
            continue
        record: dict = {}
        for key in SUMMARY_KEYS:
            values = [r[key] for r in rows]
            record[key] = sum(values) if key in ("errors", "oom_kills", "evictions") else \
                round(statistics.median(values), 3)
        for key in ("p99_ms", "be_mb_per_s", "node_mem_used_pct"):
            record[f"{key}_spread"] = spread(r[key] for r in rows)
        for key in ("node_workingset_pct", "online_refault_mib", "online_disk_read_kib", "budget_limit_hits",
                    "damon_pageout_mib"):
            if all(key in r for r in rows):
                record[key] = round(statistics.median(r[key] for r in rows), 3)
        for key in ("online_stall_ms", "node_stall_ms"):  # per kind of stall, the median of rounds
            if all(key in r for r in rows):
                record[key] = {k: round(statistics.median(r[key][k] for r in rows), 1) for k in rows[0][key]}
        solo_rows = runs.get("solo", [])
        if treatment != "solo" and len(solo_rows) == len(rows) and all(r["p99_ms"] for r in solo_rows):
            from isolation import vs_solo  # each round's p99 over the same round's solo
            record.update(vs_solo(rows, solo_rows))
        record["rounds"] = len(rows)
        out[treatment] = record
    return out


def verdict(summary: Mapping[str, dict]) -> list[str]:
    """The issue's bars, each as a line saying met or not."""
    lines = []
    solo, k8s, tidal = summary.get("solo"), summary.get("k8s_default"), summary.get("tidal")
    if not (solo and k8s and tidal) or not solo["p99_ms"]:
        return ["not every treatment measured: no verdict", *agent_lines(summary)]
    ratio, k8s_ratio = tidal["p99_ms"] / solo["p99_ms"], k8s["p99_ms"] / solo["p99_ms"]
    lines.append(f"tidal p99 {ratio:.2f}x solo (bar <= 1.2x): {'met' if ratio <= 1.2 else 'NOT met'}")
    lines.append(f"node memory used under tidal {tidal['node_mem_used_pct']:.1f}% (bar >= 90%): "
                 f"{'met' if tidal['node_mem_used_pct'] >= 90 else 'NOT met'}")
    lines.append(f"tidal p99 ratio {ratio:.2f} vs k8s default's {k8s_ratio:.2f} (bar <= half): "
                 f"{'met' if ratio <= k8s_ratio / 2 else 'NOT met'}")
    if "p99_vs_solo" in tidal and "p99_vs_solo" in k8s:
        lines.append("per round, p99 over the same round's solo (median, min-max): " + ", ".join(
            f"{name} {summary[name]['p99_vs_solo']:.2f}x ({summary[name]['p99_vs_solo_min']:.2f}-"
            f"{summary[name]['p99_vs_solo_max']:.2f})"
            for name in REPORTED if "p99_vs_solo" in summary.get(name, {})))
    if all(summary[name].get("p99_pooled_ms") for name in ("solo", "k8s_default", "tidal")):
        pooled = {name: summary[name]["p99_pooled_ms"] for name in REPORTED
                  if summary.get(name, {}).get("p99_pooled_ms")}
        solo_pooled = pooled["solo"]
        lines.append("p99 of all rounds' requests pooled, over solo's: " + ", ".join(
            f"{name} {value:.1f} ms ({value / solo_pooled:.2f}x)" for name, value in pooled.items()))
    lines.extend(agent_lines(summary))
    lines.append(f"OOM kills of the online service under tidal: {tidal.get('online_oom_kills', 0)} (bar 0)")
    if solo["be_mb_per_s"]:
        kept = tidal["be_mb_per_s"] / solo["be_mb_per_s"]
        lines.append(f"BE throughput under tidal {kept:.0%} of solo (bar >= 50%): {'met' if kept >= 0.5 else 'NOT met'}")
    return lines


def runs_of_round(runs: Iterable[str] | None, lead: bool, variant: bool) -> tuple[str, ...]:
    """The runs of each round: every one of :data:`RUNS` (the lead's and the variants' when asked
    for), or the ``--runs`` named among them, ``solo`` always (every ratio is over it)."""
    every = RUNS + (LEADS if lead else ()) + (VARIANTS if variant else ())
    if runs is None:
        return every
    named = set(runs)
    unknown = sorted(named - set(every))
    if unknown:
        raise ValueError(f"--runs: unknown or not asked for: {', '.join(unknown)}; allowed: {', '.join(every)} "
                         f"(tidal_idle_group with --lead-be-idle-group, the variants with --variant-policy or "
                         f"--variant-agent-args)")
    return tuple(r for r in every if r in named or r == "solo")


def agent_lines(summary: Mapping[str, dict]) -> list[str]:
    """What the agent alone costs the online service, and each variant against what it varies."""
    solo = summary.get("solo")
    if not (solo and solo["p99_ms"]):
        return []
    lines = []
    alone, tidal = summary.get("agent_solo"), summary.get("tidal")
    if alone and alone["p99_ms"]:
        lines.append(f"the agent alone (no BE job): p99 {alone['p99_ms'] / solo['p99_ms']:.2f}x solo"
                     + (f"; tidal {tidal['p99_ms'] / alone['p99_ms']:.2f}x that" if tidal else ""))

    def vs_solo(name: str) -> str:  # by the medians, and the rounds' own ratios where every round had solo
        rounds = f" (rounds {summary[name]['p99_vs_solo']:.2f}x)" if "p99_vs_solo" in summary[name] else ""
        return f"{summary[name]['p99_ms'] / solo['p99_ms']:.2f}x solo{rounds}"
    for name, base in (("agent_solo_variant", "agent_solo"), ("tidal_variant", "tidal")):
        if summary.get(name, {}).get("p99_ms") and summary.get(base, {}).get("p99_ms"):
            lines.append(f"{name}: p99 {vs_solo(name)}, {base} {vs_solo(base)}: the variant "
                         f"{summary[name]['p99_ms'] / summary[base]['p99_ms']:.2f}x {base}'s")
    return lines


def whole_disk(device: int, sysfs: Path = Path("/sys")) -> str:
    """``major:minor`` of the disk holding ``device`` (a ``st_dev``): the device itself, or the
    disk a partition belongs to (the v1 blkio throttle takes whole disks only)."""
    node = sysfs / "dev" / "block" / f"{os.major(device)}:{os.minor(device)}"
    if not node.exists():
        raise SystemExit(f"{os.major(device)}:{os.minor(device)} is not a block device (a tmpfs or overlay?): "
                         "--disk-read-mbps/--disk-read-iops need the work directory on a disk")
    if (node / "partition").exists():
        node = node.resolve().parent
    return (node / "dev").read_text().strip()


def disk_throttle(disk: str, mb_per_s: float, iops: int) -> dict[str, str]:
    """The v1 blkio throttle files that make ``disk`` (``major:minor``) a volume of ``mb_per_s``
    (10^6 bytes) and ``iops`` reads per second for the processes of one cgroup; 0 leaves one
    unlimited."""
    files = {}
    if mb_per_s:
        files["blkio.throttle.read_bps_device"] = f"{disk} {int(mb_per_s * 1e6)}"
    if iops:
        files["blkio.throttle.read_iops_device"] = f"{disk} {iops}"
    return files


# -- the workloads ----------------------------------------------------------------------------

WRITE_FILESET = r"""
import os, sys
root, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
block = os.urandom(size)
for i in range(count):
    with open(os.path.join(root, f"f{i:05d}.bin"), "wb") as f:
        f.write(i.to_bytes(8, "little") + block[8:])
"""

# Reads every file of the set (from the LS pod's cgroups: pages not cached yet are charged to it).
WARM_FILESET = r"""
import os, sys
root = sys.argv[1]
for name in os.listdir(root):
    with open(os.path.join(root, name), "rb") as f:
        while f.read(1 << 20):
            pass
"""

# The BE job: anonymous working memory, then stream the input file in a loop; progress
# "<monotonic> <bytes>" rewritten in place every 0.2 s.
BE_JOB = r"""
import mmap, os, sys, time
anon, path, progress, pace = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
if anon.startswith("limit:"):  # limit:<fraction>:<node bytes>: sized from the limit it sees
    fraction, node = float(anon.split(":")[1]), int(anon.split(":")[2])
    limit = node
    for line in open("/proc/self/cgroup"):
        _, controllers, where = line.rstrip("\n").split(":", 2)
        if "memory" in controllers.split(","):
            with open(f"/sys/fs/cgroup/memory{where}/memory.limit_in_bytes") as f:
                limit = min(node, int(f.read()))
    anon_bytes = int(fraction * limit)
else:
    anon_bytes = int(anon)
page = os.sysconf("SC_PAGE_SIZE")
anon = mmap.mmap(-1, anon_bytes)
for offset in range(0, anon_bytes, page):
    anon[offset] = 1
out = os.open(progress, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
fd = os.open(path, os.O_RDONLY)
buf = bytearray(1 << 20)
done = position = touch = 0
last = 0.0
print(f"ready {anon_bytes}", flush=True)
start = time.monotonic()
while True:
    ahead = done / pace - (time.monotonic() - start)  # at most `pace` bytes per second
    if ahead > 0:
        time.sleep(ahead)
    n = os.preadv(fd, [buf], position)
    if n <= 0:
        position = 0
        continue
    position += n
    done += n
    anon[touch] = (anon[touch] + 1) & 255  # the job's working memory stays in use
    touch = (touch + page) % anon_bytes
    now = time.monotonic()
    if now - last >= 0.2:
        os.pwrite(out, f"{now:.3f} {done}".ljust(48).encode(), 0)
        last = now
"""


def write_stream_file(path: Path, size: int) -> None:
    """The BE job's input, written from this process with its page cache dropped as it goes (it
    is charged outside the budget, and the job must start reading it cold)."""
    chunk = os.urandom(8 * MiB)
    with open(path, "wb") as f:
        for offset in range(0, size, len(chunk)):
            f.write(chunk)
            if offset % (256 * MiB) == 0:
                f.flush()
                os.fsync(f.fileno())
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def drop_file_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def set_oom_score_adj(pids: Iterable[int], value: int) -> None:
    for pid in pids:
        try:
            Path(f"/proc/{pid}/oom_score_adj").write_text(str(value))
        except (FileNotFoundError, ProcessLookupError):
            pass


def _listed(dirs: Iterable[Path], name: str) -> set[int]:
    ids: set[int] = set()
    for d in dirs:
        try:
            ids.update(int(i) for i in (d / name).read_text().split())
        except FileNotFoundError:
            pass
    return ids


def cgroup_pids(dirs: Iterable[Path]) -> set[int]:
    """The processes in ``dirs`` (``cgroup.procs``)."""
    return _listed(dirs, "cgroup.procs")


def cgroup_tids(dirs: Iterable[Path]) -> set[int]:
    """The threads in ``dirs`` (the ``tasks`` file of a v1 cgroup; dirs without one add nothing)."""
    return _listed(dirs, "tasks")


def process_tids(pid: int) -> set[int]:
    """The threads of process ``pid`` (none once it is gone)."""
    try:
        return {int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()}
    except FileNotFoundError:
        return set()


def disk_read_bytes(pids: Iterable[int]) -> int:
    """Bytes the processes have had read from storage (``read_bytes`` of /proc/PID/io: page-cache
    misses and readahead they caused, not reads the cache served)."""
    total = 0
    for pid in pids:
        try:
            io = parse_flat(Path(f"/proc/{pid}/io").read_text().replace(":", ""))
        except (FileNotFoundError, ProcessLookupError, PermissionError):  # gone, or not ours to read
            continue
        total += io.get("read_bytes", 0)
    return total


class BEJob:
    def __init__(self, python: str, dirs, anon: str, stream: Path, workdir: Path, oom_score_adj: int,
                 pace_bytes_per_s: float) -> None:
        """``anon``: the job's anonymous memory in bytes, or ``limit:<fraction>:<node bytes>``: that
        fraction of the memory limit its cgroup shows, of the node's memory without one."""
        from isolation import in_cgroups
        self.progress = workdir / f"be-progress-{secrets.token_hex(3)}"
        join = in_cgroups(dirs)

        def prepare():
            join()
            Path("/proc/self/oom_score_adj").write_text(str(oom_score_adj))
        self.proc = subprocess.Popen([python, "-c", BE_JOB, anon, str(stream), str(self.progress),
                                      str(pace_bytes_per_s)],
                                     preexec_fn=prepare, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline().split()
        if line[:1] != ["ready"]:
            raise RuntimeError(f"the BE job exited ({self.proc.wait()}) before it was ready")
        self.anon_bytes = int(line[1])

    def read(self) -> tuple[float, int] | None:
        try:
            return parse_progress(self.progress.read_text())
        except FileNotFoundError:
            return None

    def killed(self) -> bool:
        return self.proc.poll() is not None

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait(timeout=30)
        self.progress.unlink(missing_ok=True)
        return code


class MemorySampler(threading.Thread):
    """The budget's usage and working set (percent of its limit) every 0.5 s while running."""

    def __init__(self, budget: Path, limit: int) -> None:
        super().__init__(daemon=True)
        self.budget, self.limit = budget, limit
        self.used: list[float] = []
        self.workingset: list[float] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.5):
            usage = int((self.budget / "memory.usage_in_bytes").read_text())
            inactive = parse_flat((self.budget / "memory.stat").read_text()).get("total_inactive_file", 0)
            self.used.append(usage / self.limit * 100)
            self.workingset.append(max(0, usage - inactive) / self.limit * 100)

    def stop(self) -> tuple[float, float]:
        self.halt.set()
        self.join()
        med = (lambda xs: round(statistics.median(xs), 1) if xs else 0.0)
        return med(self.used), med(self.workingset)


def pooled_p99(latencies_us: Iterable[int]) -> float:
    """The p99 in milliseconds of requests pooled from several rounds (loadgen's own rule: the
    value at rank round(0.99 x (n - 1)) of the sorted latencies); 0.0 without any."""
    values = sorted(latencies_us)
    if not values:
        return 0.0
    return round(values[int(0.99 * (len(values) - 1) + 0.5)] / 1000, 3)


def loadgen_run(loadgen: Path, urls: Path, rate: int, seconds: float, latencies: Path | None = None) -> dict:
    from isolation import in_cgroups

    # SCHED_FIFO 1: the client stands for users on other machines (as in bench-isolation), in the
    # root cpu cgroup: with RT group scheduling a child group has no RT runtime (chrt is refused
    # there), and the bench itself may run in --daemons-cgroup system.slice
    out = subprocess.run(["chrt", "-f", "1", str(loadgen), "-urls", str(urls), "-rate", str(rate),
                          "-duration", f"{seconds}s", "-warmup", "100",
                          *(["-latencies", str(latencies)] if latencies else [])],
                         capture_output=True, text=True, timeout=seconds + 180,
                         preexec_fn=in_cgroups([lab_background.CPU_ROOT]))
    if out.returncode != 0:
        raise RuntimeError(f"loadgen failed: {out.stderr}")
    return json.loads(out.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15, help="measured seconds per treatment")
    parser.add_argument("--settle", type=float, default=6,
                        help="seconds before measuring, in every treatment (the BE job runs meanwhile; "
                             "the previous treatment's aftermath settles)")
    parser.add_argument("--rate", type=int, default=200, help="online requests per second")
    parser.add_argument("--budget-gib", type=float, default=6.0, help="the node's memory (the budget cgroup's limit)")
    parser.add_argument("--fileset-gib", type=float, default=2.5, help="nginx's file set (its working set)")
    parser.add_argument("--be-anon-gib", type=float, default=1.5, help="the BE job's anonymous memory")
    parser.add_argument("--be-anon-from-limit", type=float, default=0, metavar="PCT",
                        help="instead, the BE job sizes its anonymous memory at PCT %% of the memory limit its "
                             "cgroup shows, of the node's (the budget) without one, as a JVM's MaxRAMPercentage "
                             "does: under Kubernetes' default a BestEffort job sees the whole node")
    parser.add_argument("--stream-gib", type=float, default=8.0, help="the BE job's input file (> the budget)")
    parser.add_argument("--be-pace-mb", type=float, default=300,
                        help="the BE job reads at most this many MB/s (10^6 bytes; its own processing paces it)")
    parser.add_argument("--be-batch-memory-gib", type=float, default=3.0,
                        help="the BE pod's kubernetes.io/batch-memory request (its limit under Tidal)")
    parser.add_argument("--disk-read-mbps", type=float, default=0, metavar="MB",
                        help="make the disk under --workdir-parent a volume of MB/s (10^6 bytes) of reads shared "
                             "by the pods, as a node's network volume is (0: the machine's disk as it is)")
    parser.add_argument("--disk-read-iops", type=int, default=0, metavar="N",
                        help="and of N reads per second (0: unlimited)")
    parser.add_argument("--pause-damon", action="store_true",
                        help="switch the machine's DAMON page-out schemes off for the run (back on at its end): "
                             "they reclaim cold page cache, nginx's files included, in every treatment")
    parser.add_argument("--stall-causes", action="store_true",
                        help="say what each run-queue wait of an nginx thread over --stall-over-ms waited behind "
                             "(ls_stalls: the hypervisor, the BE job, nginx's own threads or other work; "
                             "bench/stall_causes.py, from the kernel's scheduler trace of the measured seconds)")
    parser.add_argument("--stall-over-ms", type=float, default=1.0, metavar="MS",
                        help="the shortest wait --stall-causes attributes (default 1 ms: the p99 here is 2-3 ms)")
    parser.add_argument("--memory-high", type=int, default=95, help="the policy's memory high watermark for tidal")
    parser.add_argument("--memory-low", type=int, default=85, help="the policy's memory low watermark for tidal")
    lab_background.add_arguments(parser)
    agent_pod.add_argument(parser)
    parser.add_argument("--lead-be-idle-group", action="store_true",
                        help="also run tidal_idle_group each round (the CPU side of the BE idle group): tidal "
                             "with the BE job's cpu cgroup an idle group at the cgroup root instead of its pod's "
                             "(its memory and other cgroups its pod's); see bench-isolation's be_idle_group")
    parser.add_argument("--workdir-parent", default="/var/tmp", help="where the files go (deleted at the end)")
    parser.add_argument("--cpu", choices=("defaults", "as-shipped"), default="defaults",
                        help="defaults: every cgroup's CPU at its defaults (memory alone); as-shipped: the BE "
                             "pod's CPU as each treatment ships it: cpu.shares 2 for k8s_default, Tidal's CPU "
                             "priority, suppression and interference control at the policy's defaults")
    parser.add_argument("--variant-policy", type=policy_patch, default=None, metavar="JSON",
                        help="also run agent_solo_variant and tidal_variant each round: agent_solo and tidal with "
                             "this merge patch over the policy's spec (put back after each), an A/B of a policy "
                             "change in one run")
    parser.add_argument("--variant-agent-args", type=shlex.split, default=[], metavar="ARGS",
                        help="the variants' agent is started with these arguments added to `tidal-agent run`'s "
                             "(with or without --variant-policy)")
    parser.add_argument("--runs", type=lambda text: [r.strip() for r in text.split(",") if r.strip()],
                        default=None, metavar="LIST",
                        help="run only these of each round's runs (solo always; the verdict needs solo, "
                             "k8s_default and tidal), e.g. solo,agent_solo,agent_solo_variant: more rounds of "
                             "what an A/B compares in the same time")
    args = parser.parse_args()
    args.variant_policy = args.variant_policy or {}
    try:
        runs = runs_of_round(args.runs, args.lead_be_idle_group, bool(args.variant_policy or args.variant_agent_args))
    except ValueError as err:
        parser.error(str(err))
    if args.stall_causes and (why := stall_causes.SchedTrace().available()):
        parser.error(f"--stall-causes cannot run here: {why}")
    if os.geteuid() != 0:
        raise SystemExit("bench-memory needs root: it creates cgroups and moves processes into them")
    if not (shutil.which("nginx") or Path("/usr/sbin/nginx").exists()):
        raise SystemExit("nginx is missing: run it through `make bench-memory`, which installs it")
    budget_bytes = int(args.budget_gib * GiB)
    need = int((args.fileset_gib + args.stream_gib) * GiB) + GiB
    free = shutil.disk_usage(args.workdir_parent).free
    if free < need + 10 * GiB:  # leave room for everyone else on this machine
        raise SystemExit(f"{args.workdir_parent}: {free / GiB:.1f} GiB free, the bench needs {need / GiB:.1f} "
                         "GiB plus 10 GiB to spare")

    # Ctrl-C and SIGTERM (make interrupted, a timeout) end the run through the clean-up below —
    # SIGINT too when the shell started the bench with it ignored (a background job).
    def interrupted(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)

    from admission import build_loadgen
    from isolation import Nginx, be_idle_group_dir, besteffort_cpu_shares, in_cgroups
    from kubernetes import client

    from tidal.agent.collector.cgroups import CgroupVersion
    from tidal.api import qos
    from tidal.crds import crd_manifests
    from tidal_dev.lab import processes
    from tidal_dev.lab.apply import create_or_replace_all
    from tidal_dev.lab.lab import Lab
    from tidal_dev.lab.ports import free_port
    from tidal_dev.testing.kwok import kwok_node
    from tidal_dev.testing.local_kubelet import LocalKubelet
    from tidal_dev.testing.real_cgroups import RealCgroups, below_own

    loadgen = build_loadgen()
    workdir = Path(tempfile.mkdtemp(prefix="tidal-bench-memory-", dir=args.workdir_parent))
    cgroups = RealCgroups(workdir)
    kubelet = LocalKubelet(cgroups)
    if kubelet.layout.version is not CgroupVersion.V1:
        shutil.rmtree(workdir)
        raise SystemExit("bench-memory is written for the cgroup v1 memory controller (memory.limit_in_bytes, "
                         "memory.oom_control) this machine has")
    lab = Lab(workdir / "lab")
    python = sys.executable
    nginx = agent = be = None
    paused_damon: list[Path] = []
    background = None
    background_report: dict = {"kind": "none"}
    node = "bench-node"
    cpus = os.cpu_count() or 1
    results: dict[str, list[dict]] = {r: [] for r in runs}
    load = {"start": os.getloadavg()}
    batch = {qos.BATCH_CPU_RESOURCE: str(cpus * 1000),
             qos.BATCH_MEMORY_RESOURCE: str(int(args.be_batch_memory_gib * GiB))}
    names: dict[str, str] = {}  # pod UID -> name
    pooled: dict[str, list[int]] = {}  # treatment -> every round's request latencies (µs)

    def pod(core, name, level, requests, limits):
        running = kubelet.run_pod(core, "bench", {
            "metadata": {"name": name, "annotations": {qos.QOS_ANNOTATION: level}},
            "spec": {"nodeName": node, "automountServiceAccountToken": False,
                     "containers": [{"name": "main", "image": "registry.invalid/app:1",
                                     "resources": {"requests": requests, "limits": limits}}]}})
        names[running.uid] = name
        return running

    def put_policy(patch: dict) -> None:
        with lab.api_client() as api:
            client.CustomObjectsApi(api).patch_cluster_custom_object(
                qos.API_GROUP, qos.API_VERSION, "colocationpolicies", "default", {"spec": patch})
    try:
        budget = cgroups.make(kubelet.layout.hierarchy.memory_root / kubelet.kubelet_root.lstrip("/"))
        (budget / "memory.limit_in_bytes").write_text(str(budget_bytes))
        log(f"node budget {budget} at {args.budget_gib:g} GiB; private lab in {lab.dir}")
        if args.pause_damon:
            paused_damon = damon.pause()
            log(f"DAMON page-out paused for the run: {', '.join(map(str, paused_damon)) or 'none was running'}")
        disk_dirs = []  # --disk-read-*: one blkio cgroup for every pod's processes (the node's volume)
        if args.disk_read_mbps or args.disk_read_iops:
            disk = whole_disk(os.stat(workdir).st_dev)
            volume = cgroups.make(below_own(BLKIO_ROOT, "blkio") / f"{cgroups.name}-volume")
            for name, value in disk_throttle(disk, args.disk_read_mbps, args.disk_read_iops).items():
                (volume / name).write_text(value)
            disk_dirs.append(volume)
            log(f"the pods read disk {disk} as one volume of {args.disk_read_mbps or 'unlimited'} MB/s and "
                f"{args.disk_read_iops or 'unlimited'} IOPS ({volume})")
        lab_background.place_daemons(args, kubelet, cgroups, log)
        agent_dirs = agent_pod.create(kubelet, log) if args.agent_cgroup == "pod" else None
        lab.up(nodes=0, real_nodes=0)
        with lab.api_client() as api:
            create_or_replace_all(api, crd_manifests(), wait_established=True)
            core = client.CoreV1Api(api)
            custom = client.CustomObjectsApi(api)
            custom.create_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "colocationpolicies", {
                "apiVersion": qos.API_GROUP_VERSION, "kind": "ColocationPolicy", "metadata": {"name": "default"},
                # the watermarks compare the pods' usage: other people's work on this shared
                # machine is not this node's (its memory is the budget cgroup's anyway)
                "spec": {"overselling": {"includeSystemUsage": False},
                         "evictionWatermarks": {"enabled": True, "memory": {"highPercent": args.memory_high,
                                                                            "lowPercent": args.memory_low},
                                                "cpu": {"highPercent": 99, "lowPercent": 98}},
                         # CPU stays at its defaults in every treatment (make bench-isolation measures it),
                         # unless --cpu as-shipped; the BE job's cgroups stay its pod's below the budget
                         # (the node): the BE idle group, on by default, is at the machine's root, where
                         # the budget would not hold it (--lead-be-idle-group puts its cpu cgroup there)
                         "beIsolation": {"cpuPriority": {"idleGroup": False}} if args.cpu == "as-shipped" else {
                             "cpuPriority": {"enabled": False}, "cpuSuppression": {"enabled": False}},
                         "features": {"memoryReclaim": {"enabled": True},
                                      "psiInterference": {"enabled": True, "resources": ["memory"]}}}})
            # what the other runs put back of the variant's fields after a variant's run
            undo_variant = undo_patch(args.variant_policy, custom.get_cluster_custom_object(
                qos.API_GROUP, qos.API_VERSION, "colocationpolicies", "default")["spec"])
            capacity = {"cpu": str(cpus), "memory": str(budget_bytes), "pods": "110",
                        qos.BATCH_CPU_RESOURCE: str(cpus * 1000),
                        qos.BATCH_MEMORY_RESOURCE: str(int(args.be_batch_memory_gib * GiB))}
            kwok_node(core, node, capacity, {qos.COLOCATION_NODE_LABEL: "true", qos.OVERSUBSCRIPTION_NODE_LABEL: "true"})
            core.create_namespace({"metadata": {"name": "bench"}})
            while not core.list_namespaced_service_account("bench").items:
                time.sleep(0.2)

            web_request = int((args.fileset_gib + 0.25) * GiB)
            web = pod(core, "web", "LS", {"cpu": "1", "memory": str(web_request)}, {})
            be_pods = [pod(core, "batch-1", "BE", batch, dict(batch))]
        web_adj = kubelet_burstable_oom_score_adj(web_request, budget_bytes)

        nginx = Nginx(workdir / "nginx", [*web.dirs, *disk_dirs])
        # nginx's processes also in a cgroup of the unified hierarchy (no controller there): their PSI
        web_psi = None
        if stalls.UNIFIED.is_dir():
            web_psi = stalls.group_for(cgroup_pids(web.dirs), cgroups.make(
                below_own(stalls.UNIFIED, None) / f"{cgroups.name}-nginx"))
        if web_psi is None:
            log("no writable cgroup v2 hierarchy: nginx's stalls (PSI) are not reported")
        files = workdir / "nginx" / "www" / "files"
        files.mkdir()
        count = int(args.fileset_gib * GiB) // FILE_BYTES
        log(f"writing the file set: {count} files of {FILE_BYTES // 1024} KiB, from the LS pod's cgroups")
        subprocess.run([python, "-c", WRITE_FILESET, str(files), str(count), str(FILE_BYTES)],
                       preexec_fn=in_cgroups(web.dirs), check=True)
        os.sync()  # the file set's writeback is over before anything is measured
        urls = workdir / "urls.txt"
        urls.write_text("".join(f"http://127.0.0.1:{nginx.port}/files/f{i:05d}.bin\n" for i in range(count)))
        stream = workdir / "stream.bin"
        log(f"writing the BE job's {args.stream_gib:g} GiB input file {stream}")
        write_stream_file(stream, int(args.stream_gib * GiB))
        anon = (f"limit:{args.be_anon_from_limit / 100}:{budget_bytes}" if args.be_anon_from_limit
                else str(int(args.be_anon_gib * GiB)))

        def warm() -> None:
            drop_file_cache(stream)
            subprocess.run([python, "-c", WARM_FILESET, str(files)], preexec_fn=in_cgroups(web.dirs), check=True)

        def oom_counts(dirs_list) -> int:
            total = 0
            for dirs in dirs_list:
                for d in dirs:
                    if (d / "memory.oom_control").exists():
                        total += oom_kills((d / "memory.oom_control").read_text())
            return total

        web_memory = [d for d in web.dirs if (d / "memory.stat").exists()]

        def run_once(run: str, round_: int) -> dict:
            nonlocal agent, be
            be_pod = be_pods[-1]
            trace = stall_causes.SchedTrace() if args.stall_causes and run != "be_solo" else None
            warm()
            set_oom_score_adj(cgroup_pids(web.dirs), web_adj if run in ("k8s_default", *AGENT_RUNS) else 0)
            shares = []  # --cpu as-shipped: Kubernetes' cpu.shares 2 of a BestEffort pod and its parent
            if run == "k8s_default" and args.cpu == "as-shipped":
                shares = besteffort_cpu_shares(kubelet, be_pod.uid, *be_pod.dirs)
                for f in shares:
                    f.write_text("2")
            metrics_port = None
            if run in VARIANTS and args.variant_policy:
                put_policy(args.variant_policy)
            if run in AGENT_RUNS:
                metrics_port = free_port()
                agent = processes.start("agent", [
                    str(Path(python).with_name("tidal-agent")), "run", "--node", node,
                    "--kubeconfig", str(lab.kubeconfig_path), "--cgroup-driver", "cgroupfs",
                    "--kubelet-cgroup-root", kubelet.kubelet_root, "--node-memory-cgroup", kubelet.kubelet_root,
                    "--state-dir", str(workdir / "agent"),
                    "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics_port),
                    *(args.variant_agent_args if run in VARIANTS else [])],
                    workdir / "agent.log")
                if agent_dirs:  # --agent-cgroup pod: where its DaemonSet would run it
                    kubelet.move(agent.pid, agent_dirs)
                limit_file = next(d for d in be_pod.dirs if (d / "memory.stat").exists()) / "memory.limit_in_bytes"
                want = int(args.be_batch_memory_gib * GiB)
                deadline = time.monotonic() + 30
                while abs(int(limit_file.read_text()) - want) > 4096:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the agent did not limit the BE pod's memory (log {workdir / 'agent.log'})")
                    time.sleep(0.2)
            events_before = 0
            with lab.api_client() as api:
                core = client.CoreV1Api(api)
                events_before = sum(1 for e in core.list_namespaced_event("bench").items if e.reason == "TidalEvicted")
            failcnt = int((budget / "memory.failcnt").read_text())
            refault = parse_flat((web_memory[0] / "memory.stat").read_text()).get("total_workingset_refault_file", 0)
            web_oom, be_oom = oom_counts([web.dirs]), oom_counts([be_pod.dirs])
            damon_before = damon.pageout_bytes()
            be = None
            if run not in ONLINE_ALONE:
                be_dirs = be_pod.dirs
                if run in LEADS:  # the same pod's cgroups but the cpu hierarchy's: the idle group's
                    be_dirs = [be_idle_group_dir(cgroups) if (d / "cpu.shares").exists() else d
                               for d in be_pod.dirs]
                be = BEJob(python, [*be_dirs, *disk_dirs], anon, stream, workdir,
                           1000 if run in ("k8s_default", "tidal", "tidal_variant", *LEADS) else 0,
                           args.be_pace_mb * 1e6)
            evicted = threading.Event()
            watching = threading.Event()

            def watch_be_pod():  # the kubelet's part: an evicted pod's containers are killed
                with lab.api_client() as api:
                    core = client.CoreV1Api(api)
                    while not watching.wait(0.5):
                        try:
                            p = core.read_namespaced_pod(names[be_pod.uid], "bench")
                            gone = p.metadata.deletion_timestamp is not None
                        except client.ApiException as err:
                            gone = err.status == 404
                        if gone:
                            evicted.set()
                            if be is not None and be.proc.poll() is None:
                                be.proc.kill()
                            return
            watcher = threading.Thread(target=watch_be_pod, daemon=True)
            watcher.start()
            time.sleep(args.settle)  # every treatment alike: the previous one's aftermath settles too
            sampler = MemorySampler(budget, budget_bytes)
            sampler.start()
            before = be.read() if be else None
            web_pids = cgroup_pids(web.dirs)
            web_read = disk_read_bytes(web_pids)
            stalled = (stalls.read_totals(web_psi) if web_psi else None, stalls.read_totals(Path("/proc/pressure")))
            if run == "be_solo":
                time.sleep(args.seconds)
                result = {"p50_ms": 0.0, "p99_ms": 0.0, "errors": 0, "ok_per_s": 0.0}
            else:
                latencies = workdir / "latencies.txt"
                web_tids = cgroup_tids(web.dirs)
                with trace.recording() if trace else contextlib.nullcontext():
                    result = loadgen_run(loadgen, urls, args.rate, args.seconds, latencies)
                if trace:  # read after the figures below, parsed after all of them: it takes seconds
                    web_tids |= cgroup_tids(web.dirs)
                    be_tids = process_tids(be.proc.pid) if be else set()
                pooled.setdefault(run, []).extend(int(v) for v in latencies.read_text().split())
            after = be.read() if be else None
            web_read = disk_read_bytes(web_pids) - web_read
            stall = {"node_stall_ms": stalls.stall_ms(stalled[1], stalls.read_totals(Path("/proc/pressure")))}
            if web_psi is not None:
                stall["online_stall_ms"] = stalls.stall_ms(stalled[0], stalls.read_totals(web_psi))
            used, workingset = sampler.stop()
            traced = trace.collect() if trace else None  # the tracing settings put back, its buffer freed
            watching.set()
            watcher.join()
            be_killed = be is not None and be.killed()
            be_anon_mib = round(be.anon_bytes / MiB) if be is not None else 0
            if be is not None:
                be.stop()
            for f in shares:
                f.write_text("1024")
            ls_stalls = {}
            if traced:
                text, overran = traced
                found = stall_causes.stalls(stall_causes.parse(text), web_tids, be_tids, args.stall_over_ms / 1000)
                ls_stalls = {"ls_stalls": {**stall_causes.summary(found), "trace_overran": overran}}
            be_rate = rate_between(before, after)
            agent_metrics = {}
            if run in AGENT_RUNS:
                text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
                agent_metrics = {"evictions_metric": metric_total(text, "tidal_evictions_total"),
                                 "cgroup_writes": {s: metric_total(text, "tidal_agent_cgroup_writes_total", {"strategy": s})
                                                   for s in ("be-batch-resources", "memory-reclaim")}}
                processes.stop(agent)
                agent = None
                for line in (workdir / "agent.log").read_text(errors="replace").splitlines():
                    if "evict" in line.lower() and "INFO" in line and ("evicting" in line or "evicted" in line):
                        log(f"agent: {line[:300]}")
                (workdir / "agent.log").rename(workdir / f"agent-{round_ + 1}.log")
                subprocess.run([str(Path(python).with_name("tidal-agent")), "restore", "--node", node,
                                "--kubeconfig", str(lab.kubeconfig_path), "--state-dir", str(workdir / "agent")],
                               check=True, capture_output=True)
            if run in VARIANTS and args.variant_policy:
                put_policy(undo_variant)
            with lab.api_client() as api:
                core = client.CoreV1Api(api)
                events = sum(1 for e in core.list_namespaced_event("bench").items if e.reason == "TidalEvicted")
            evictions = max(events - events_before, 1 if evicted.is_set() else 0)
            if evicted.is_set():  # a fresh BE pod for the next runs, as a job controller would
                log(f"{run}: the BE pod {names[be_pod.uid]} was evicted; creating another")
                with lab.api_client() as api:
                    core = client.CoreV1Api(api)
                    be_pods.append(pod(core, f"batch-{len(be_pods) + 1}", "BE", batch, dict(batch)))
            refault_after = parse_flat((web_memory[0] / "memory.stat").read_text()).get("total_workingset_refault_file", 0)
            web_oom_after, be_oom_after = oom_counts([web.dirs]), oom_counts([be_pod.dirs])
            return {"p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"], "max_ms": result.get("max_ms", 0.0),
                    "errors": result["errors"],
                    "be_mb_per_s": round(be_rate, 1), "node_mem_used_pct": used, "node_workingset_pct": workingset,
                    "oom_kills": (web_oom_after - web_oom) + (be_oom_after - be_oom),
                    "online_oom_kills": web_oom_after - web_oom, "be_killed": be_killed, "be_anon_mib": be_anon_mib,
                    "evictions": evictions, "online_refault_mib": round((refault_after - refault) * 4096 / MiB, 1),
                    "online_disk_read_kib": round(web_read / 1024),
                    "damon_pageout_mib": round((damon.pageout_bytes() - damon_before) / MiB, 1),
                    "budget_limit_hits": int((budget / "memory.failcnt").read_text()) - failcnt,
                    "load1": round(os.getloadavg()[0], 2), **stall, **ls_stalls, **agent_metrics}

        be_anon = (f"{args.be_anon_from_limit:g} % of its limit" if args.be_anon_from_limit
                   else f"{args.be_anon_gib:g} GiB")
        log(f"{args.rate} req/s for {args.seconds:g}s per treatment, {args.rounds} rounds; "
            f"BE: {be_anon} anonymous + streaming {args.stream_gib:g} GiB"
            + (f"; disk: {args.disk_read_mbps:g} MB/s, {args.disk_read_iops} IOPS" if disk_dirs else ""))
        # the files are written: from here on beside the daemons' load, if asked for
        background, background_report = lab_background.start(args, lab.kubeconfig_path, workdir, log)
        warm()
        loadgen_run(loadgen, urls, args.rate, 5)  # discarded: nginx's and the client's first requests
        for round_ in range(args.rounds):
            for run in round_order(runs, round_, "balanced"):
                r = run_once(run, round_)
                results[run].append(r)
                print(json.dumps({"round": round_ + 1, "treatment": run, **r}), flush=True)
    finally:
        load["end"] = os.getloadavg()
        if be is not None:
            be.stop()
        if agent is not None:
            processes.stop(agent)
        if nginx is not None:
            nginx.stop()
        background_report = lab_background.stop(background, background_report)
        try:
            lab.down(wipe=True)
        finally:
            damon.resume(paused_damon)
            lab_background.release_daemons(args)
            cgroups.cleanup()
            shutil.rmtree(workdir, ignore_errors=True)
    summary = summarise(results)
    for run, lines in results.items():  # --stall-causes: every round's waits of a treatment together
        if run in summary and lines and all("ls_stalls" in r for r in lines):
            summary[run]["ls_stalls"] = stall_causes.pooled([r["ls_stalls"] for r in lines])
    for run, values in pooled.items():  # one p99 over all rounds' requests: a stall weighs by its requests
        if run in summary:
            summary[run]["p99_pooled_ms"] = pooled_p99(values)
    for line in verdict({**summary, "tidal": {**summary.get("tidal", {}),
                                              "online_oom_kills": sum(r["online_oom_kills"] for r in results["tidal"])}}):
        log(line)
    log(f"load average at start {load['start'][0]:.2f}, at end {load['end'][0]:.2f}")
    print(json.dumps({**summary, "background": {**background_report, "daemons_cgroup": args.daemons_cgroup},
                      "disk": {"read_mb_per_s": args.disk_read_mbps, "read_iops": args.disk_read_iops}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
