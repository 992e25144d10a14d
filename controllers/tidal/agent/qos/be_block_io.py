# SPDX-License-Identifier: Apache-2.0
"""Block I/O of BE pods: the node's BE caps on each of its disks, shared by the BE containers.

A BE job streaming a file keeps the disk's queue full, and an online pod's read (a page-cache
miss, a database's random read) waits behind it: memory isolation keeps the online pod's pages,
not its place in the queue (docs/benchmarks.md, "With DAMON running"). The policy's
``features.blockIO`` sets the BE pods' caps per disk, together: ``readMiBPerSecond``,
``writeMiBPerSecond``, ``readIOPS``, ``writeIOPS`` (0: not capped).

The BE containers share each cap as they use it (pure, :func:`allot`, max-min fair), each share
written on the container's own cgroup (pure, :func:`plan_block_io`):

* a container held by its share (it used :data:`SATURATED` of it since the last round), or not
  known yet (new, or the agent just started), wants as much as it may get;
* a container using less keeps what it used and half as much again (:data:`HEADROOM`), and at
  least an eighth of an equal share (:data:`FLOOR`): a container that starts reading is held by
  that for one round, and gets its part of the rest in the next;
* those wanting more share what the others leave equally; what nobody wants is spread over all.

The shares never add up to more than the node's cap on a disk, so the online pods are protected
as much as with equal shares, and one BE job reading beside idle ones gets nearly all of it. The
counters are the cgroup's own (v1 ``blkio.throttle.io_service_bytes`` and ``io_serviced``, v2
``io.stat``), read in :meth:`BEBlockIO.sense`.

=====  ===============================================================  ================================
       v1 (blkio)                                                       v2 (io)
=====  ===============================================================  ================================
read   ``blkio.throttle.read_bps_device``, ``..._read_iops_device``     ``io.max`` ``rbps=``, ``riops=``
write  ``blkio.throttle.write_bps_device``, ``..._write_iops_device``   ``io.max`` ``wbps=``, ``wiops=``
=====  ===============================================================  ================================

Per container, on both versions: v1's throttling is flat (a limit applies to the tasks of its own
cgroup only, never to a child's), so a cap on ``kubepods/besteffort`` or on the pod cgroup would
hold nothing; and a BE pod may be Burstable (keeping native requests) or have its containers in
the BE idle group. v1 throttles reads and direct writes; buffered writes reach the
disk from the kernel's writeback, which v1 charges to the root cgroup.

The node's disks (:func:`node_disks`): every whole disk the kernel lists in ``/sys/block`` with a
driver behind it (a ``device`` entry: not loop, ram, zram or device-mapper devices; a
device-mapper volume's requests reach the disks below it, which are listed), re-read every
:data:`DISKS_REFRESH_SECONDS`. Switched off (or the node leaving colocation) the executor's
journal puts every file back (no line: no limit).

The disks' largest request (``queue/max_sectors_kb``) is read with them and logged with the caps:
on cgroup v1 a BE job's buffered writes reach the disk from the root cgroup's writeback, uncapped,
in requests of up to 4 MiB that an online read waits behind. The agent cannot change it (sysfs is
read-only in its container); the ``tidal.colocation.disk_queue`` role does, and a v1 node whose
disks take more than :data:`MAX_REQUEST_KIB` is warned about (:func:`large_requests`); the gauge
``tidal_disk_max_request_kib{disk}`` has each disk's value.
"""
from __future__ import annotations

import logging
import math
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tidal.agent.collector.cgroups import CgroupLayout, CgroupVersion, PodQOSClass
from tidal.agent.collector.readers import OpenFiles
from tidal.agent.executor.cgroupfs import DEVICE_SEPARATOR
from tidal.api.policy import BlockIO

from .feature import DEFAULT_OPTIONS, Context, Gauge, Options, Plan, Report
from .strategy import CgroupWrite, NodeState

__all__ = ["BEBlockIO", "DISKS_REFRESH_SECONDS", "Disk", "MAX_REQUEST_KIB", "Observed", "allot", "be_container_dirs",
           "demand", "disk_holding", "large_requests", "node_caps", "node_disks", "parse_counts", "plan_block_io",
           "rates"]

MiB = 1 << 20
#: how often the disks are listed again (a disk added to a running node is capped within it)
DISKS_REFRESH_SECONDS = 60.0
CAPABILITY = "blkio.throttle"


@dataclass(frozen=True, order=True)
class Disk:
    name: str
    #: ``major:minor``, as the throttling files name it
    device: str
    #: the largest request the disk is sent (``queue/max_sectors_kb``); None: not read
    max_request_kib: int | None = None


#: the largest request under which an online read does not wait long behind writes (the
#: ``tidal.colocation.disk_queue`` role's default); a cgroup v1 node whose disks take larger ones
#: is warned about, since BE writeback reaches them uncapped
MAX_REQUEST_KIB = 64


def node_disks(sys_root: Path = Path("/sys")) -> tuple[Disk, ...]:
    """The whole disks with a driver behind them, by name."""
    disks = []
    try:
        entries = sorted((sys_root / "block").iterdir())
    except OSError:
        return ()
    for entry in entries:
        try:
            if not (entry / "device").exists():
                continue
            device = (entry / "dev").read_text(encoding="ascii").strip()
        except OSError:
            continue
        if device.count(":") == 1 and all(part.isdigit() for part in device.split(":")):
            disks.append(Disk(entry.name, device, _max_request_kib(entry)))
    return tuple(disks)


def _max_request_kib(entry: Path) -> int | None:
    try:
        return int((entry / "queue" / "max_sectors_kb").read_text(encoding="ascii"))
    except (OSError, ValueError):
        return None


def disk_holding(path: Path, sys_root: Path = Path("/sys")) -> Disk | None:
    """The disk of :func:`node_disks` that holds ``path``'s file system; None when the file system
    is not on one (a partition, tmpfs, overlay, device-mapper volume)."""
    dev = os.stat(path).st_dev
    return next((d for d in node_disks(sys_root) if d.device == f"{os.major(dev)}:{os.minor(dev)}"), None)


KINDS = ("rbps", "wbps", "riops", "wiops")
#: v1: each kind's throttling file
V1_LIMITS = {"rbps": "blkio.throttle.read_bps_device", "wbps": "blkio.throttle.write_bps_device",
             "riops": "blkio.throttle.read_iops_device", "wiops": "blkio.throttle.write_iops_device"}
#: v1: the files counting what a cgroup's tasks did, and the kinds of their ``Read`` and ``Write`` lines
V1_COUNTS = {"blkio.throttle.io_service_bytes": ("rbps", "wbps"), "blkio.throttle.io_serviced": ("riops", "wiops")}
#: v2: ``io.stat``'s keys and their kinds
V2_COUNTS = {"rbytes": "rbps", "wbytes": "wbps", "rios": "riops", "wios": "wiops"}

#: a container using this much of its cap is held by it: it wants more
SATURATED = 0.9
#: a container below its cap keeps this much more than it used
HEADROOM = 1.5
#: the part of an equal share every container keeps however little it used: the cap it starts
#: from when it begins reading (for one round: then it is held by it, and wants more)
FLOOR = 0.125

#: what each container did per second on each disk, by ``(device, kind)`` (its blkio dir as key)
Usage = Mapping[str, Mapping[tuple[str, str], float]]


def node_caps(config: BlockIO) -> dict[str, int]:
    """The node's BE caps per disk, by kind (bytes or requests per second); kinds not capped left out."""
    caps = {"rbps": config.read_mib_per_second * MiB, "wbps": config.write_mib_per_second * MiB,
            "riops": config.read_iops, "wiops": config.write_iops}
    return {kind: cap for kind, cap in caps.items() if cap > 0}


def demand(used: float | None, held: int | None) -> float | None:
    """What a container wants of a cap, from what it used of the one it held: None (as much as it
    may get) when unknown (new, or nothing held yet) or held by its cap; else its use and headroom."""
    if used is None or held is None or used >= SATURATED * held:
        return None
    return used * HEADROOM


def allot(cap: int, demands: Sequence[float | None]) -> list[int]:
    """The node cap shared by the containers, max-min fair: each wanting less than an equal part
    gets what it wants (at least :data:`FLOOR` of an equal part), the others share the rest
    equally; what nobody wants is spread over all. The parts never sum to more than the cap, and
    none is 0 (a limit of 0 means none): where the floor is below 1 it is 1, counted against the
    cap (a cap below one per container is the only case above the cap, one each)."""
    n = len(demands)
    if cap <= 0 or n == 0:
        return [0] * n
    floor = cap * FLOOR / n
    if cap >= n:  # room for 1 each: no part is rounded up past what the cap holds
        floor = max(floor, 1.0)
    wants = [math.inf if d is None else max(d, floor) for d in demands]
    parts, left = [0.0] * n, float(cap)
    for k, i in enumerate(sorted(range(n), key=wants.__getitem__)):
        parts[i] = min(wants[i], left / (n - k))
        left -= parts[i]
    return [max(1, int(p + left / n)) for p in parts]


def _render(version: CgroupVersion, caps: Mapping[tuple[str, str], int]) -> dict[str, str]:
    """One container's files from its caps (by ``(device, kind)``)."""
    devices = sorted({device for device, _ in caps})
    if version is CgroupVersion.V2:
        return {"io.max": DEVICE_SEPARATOR.join(
            f"{d} " + " ".join(f"{kind}={caps.get((d, kind)) or 'max'}" for kind in KINDS)
            for d in devices)} if devices else {}
    kinds = {kind for _, kind in caps}
    return {V1_LIMITS[kind]: DEVICE_SEPARATOR.join(f"{d} {caps[(d, kind)]}" for d in devices if (d, kind) in caps)
            for kind in KINDS if kind in kinds}


def be_container_dirs(layout: CgroupLayout, state: NodeState) -> list[Path]:
    """Every BE container's blkio cgroup (none without a blkio hierarchy)."""
    if layout.blkio_root is None:
        return []
    return [layout.blkio_dir(layout.container_relpath(pod.uid, pod.qos_class, c.id))
            for pod in state.be_pods() for c in pod.containers]


def plan_block_io(state: NodeState, config: BlockIO, disks: tuple[Disk, ...], used: Usage | None = None,
                  held: Usage | None = None, absent: Collection[str] = (), paths: Sequence[Path] | None = None
                  ) -> tuple[list[CgroupWrite], dict[str, dict[tuple[str, str], int]]]:
    """Every BE container's throttling files (the blkio hierarchy of ``state.layout``), and the
    caps they set (the next round's ``held``). ``used``: what each container did per second since
    the last round (not there: not known), under the caps ``held`` then; ``absent``: containers
    without a cgroup yet (not started), which read nothing and keep only the floor; ``paths``:
    :func:`be_container_dirs` of ``state`` when the caller has it."""
    layout = state.layout
    if layout.blkio_root is None:
        return [], {}
    used, held = used or {}, held or {}
    paths = be_container_dirs(layout, state) if paths is None else paths
    caps: dict[str, dict[tuple[str, str], int]] = {str(p): {} for p in paths}
    for kind, cap in node_caps(config).items():
        for disk in sorted(disks):
            key = (disk.device, kind)
            demands = []
            for path in map(str, paths):
                did = used.get(path)
                demands.append(0.0 if path in absent else
                               demand(None if did is None else did.get(key, 0.0), held.get(path, {}).get(key)))
            for path, part in zip(caps, allot(cap, demands)):
                caps[path][key] = part
    writes = [CgroupWrite(path, file, value) for path in paths
              for file, value in _render(layout.version, caps[str(path)]).items()]
    return writes, caps


def counter_files(version: CgroupVersion, config: BlockIO) -> tuple[str, ...]:
    """The files counting what a BE container did of the kinds ``config`` caps: v2's ``io.stat``;
    on v1 ``io_service_bytes`` for bandwidth caps, ``io_serviced`` for IOPS caps (none: nothing capped)."""
    kinds = node_caps(config)
    if version is CgroupVersion.V2:
        return ("io.stat",) if kinds else ()
    return tuple(file for file, counted in V1_COUNTS.items() if any(kind in kinds for kind in counted))


def parse_counts(version: CgroupVersion, texts: Mapping[str, str]) -> dict[tuple[str, str], int]:
    """A cgroup's I/O counters by ``(device, kind)``, from its v1 ``blkio.throttle.io_service_bytes``
    and ``io_serviced``, or its v2 ``io.stat`` (file name -> text)."""
    counts: dict[tuple[str, str], int] = {}
    if version is CgroupVersion.V2:
        for line in texts.get("io.stat", "").splitlines():
            device, *fields = line.split() or ("",)
            for key, _, value in (f.partition("=") for f in fields):
                if key in V2_COUNTS and value.isdigit():
                    counts[(device, V2_COUNTS[key])] = int(value)
        return counts
    for file, (read, write) in V1_COUNTS.items():
        for line in texts.get(file, "").splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[1] in ("Read", "Write") and fields[2].isdigit():
                counts[(fields[0], read if fields[1] == "Read" else write)] = int(fields[2])
    return counts


def rates(before: Mapping[str, Mapping[tuple[str, str], int]], after: Mapping[str, Mapping[tuple[str, str], int]],
          seconds: float) -> dict[str, dict[tuple[str, str], float]]:
    """Per container (in both samples, its counters not gone back: the same cgroup) what it did per second."""
    out = {}
    if seconds <= 0:
        return out
    for path, now in after.items():
        then = before.get(path)
        if then is None or any(now.get(key, 0) < value for key, value in then.items()):
            continue
        out[path] = {key: (value - then.get(key, 0)) / seconds for key, value in now.items()}
    return out


def _requests(disk: Disk) -> str:
    return "" if disk.max_request_kib is None else f", requests ≤ {disk.max_request_kib} KiB"


def describe(config: BlockIO, containers: int, disks: tuple[Disk, ...]) -> str:
    caps = [f"{label} {value}{unit}" for label, value, unit in (
        ("read", config.read_mib_per_second, " MiB/s"), ("write", config.write_mib_per_second, " MiB/s"),
        ("read", config.read_iops, " IOPS"), ("write", config.write_iops, " IOPS")) if value]
    names = ", ".join(f"{d.name} ({d.device}{_requests(d)})" for d in disks)
    return (f"block I/O of BE pods capped on {names}: {', '.join(caps) or 'no cap set'} per disk, "
            f"shared by {containers} BE container(s) as they use it")


def large_requests(version: CgroupVersion, disks: tuple[Disk, ...]) -> str | None:
    """The warning for a cgroup v1 node whose disks take requests above :data:`MAX_REQUEST_KIB`
    (None: nothing to warn about): v1 charges writeback to the root cgroup, so BE pods' buffered
    writes reach such a disk uncapped, in requests an online read waits behind."""
    large = [d for d in disks if d.max_request_kib is not None and d.max_request_kib > MAX_REQUEST_KIB]
    if version is not CgroupVersion.V1 or not large:
        return None
    return (f"buffered writes of BE pods are not capped on cgroup v1 (writeback is the root cgroup's), and "
            f"{', '.join(f'{d.name} takes requests up to {d.max_request_kib} KiB' for d in large)}: an online "
            f"read may wait seconds behind their writeback; the tidal.colocation.disk_queue role sets "
            f"{MAX_REQUEST_KIB} KiB (docs/node-engine.md, \"BE block I/O\")")


@dataclass(frozen=True)
class Observed:
    disks: tuple[Disk, ...]
    #: per BE container sampled in this round and the last, what it did per second
    used: Usage
    #: BE containers whose counters could not be read (no cgroup yet: not started, or gone)
    absent: frozenset[str] = frozenset()


class BEBlockIO:
    """``features.blockIO`` where blkio throttling is offered (capability ``blkio.throttle``)."""

    name = "be-block-io"

    def __init__(self, options: Options = DEFAULT_OPTIONS) -> None:
        self.sys_root = options.sys_root
        self._disks: tuple[float, tuple[Disk, ...]] | None = None
        #: the description reported last (reported again when it changes)
        self._reported = ""
        #: the caps the last plan set, by container and ``(device, kind)``
        self._held: dict[str, dict[tuple[str, str], int]] = {}
        #: the last round's counters, by container, when and from which files they were read
        self._sample: tuple[float, tuple[str, ...], dict[str, dict[tuple[str, str], int]]] | None = None
        #: the counter files, kept open and re-read every round (50 BE containers: 50 reads a second)
        self._files = OpenFiles()
        #: the BE containers' blkio directories, by the pods and layout they were built from
        self._dirs: tuple[tuple, list[Path]] | None = None

    def roots(self, layout: CgroupLayout) -> tuple[Path, ...]:
        """The blkio ``kubepods`` tree and the BE idle group's: where this feature's writes may go."""
        root = layout.blkio_root
        if root is None:
            return ()
        return (root / layout.kubepods_relpath(), root / layout.qos_relpath(PodQOSClass.BE_IDLE_GROUP))

    def enabled(self, ctx: Context) -> bool:
        return ctx.policy.features.block_io.enabled and ctx.capabilities.get(CAPABILITY, False)

    def container_dirs(self, state: NodeState) -> list[Path]:
        """:func:`be_container_dirs`, built again only when the pods or the layout changed (sense
        and plan both walk them every round)."""
        key = (state.pods, state.layout)
        if self._dirs is None or self._dirs[0] != key:
            self._dirs = (key, be_container_dirs(state.layout, state))
        return self._dirs[1]

    def sense(self, ctx: Context) -> Observed:
        """The disks (listed again every :data:`DISKS_REFRESH_SECONDS`) and what each BE container
        did on them since the last round (its cgroup's counters)."""
        if self._disks is None or ctx.now - self._disks[0] >= DISKS_REFRESH_SECONDS or ctx.now < self._disks[0]:
            self._disks = (ctx.now, node_disks(self.sys_root))
        layout = ctx.state.layout
        files = counter_files(layout.version, ctx.policy.features.block_io)
        sample, absent = {}, set()
        for path in self.container_dirs(ctx.state):
            try:
                sample[str(path)] = parse_counts(layout.version, {f: self._files.read(f"{path}/{f}") for f in files})
            except OSError:  # no cgroup: not started yet, or gone
                absent.add(str(path))
        self._files.sweep()
        last, self._sample = self._sample, (ctx.now, files, sample)
        # counters of other files (a cap of another kind set since) are not the same counters
        used = rates(last[2], sample, ctx.now - last[0]) if last is not None and last[1] == files else {}
        return Observed(self._disks[1], used, frozenset(absent))

    def plan(self, ctx: Context) -> Plan:
        observed: Observed = ctx.observed.get(self.name, Observed((), {}))
        disks = observed.disks
        config = ctx.policy.features.block_io
        writes, self._held = plan_block_io(ctx.state, config, disks, observed.used, self._held, observed.absent,
                                           self.container_dirs(ctx.state))
        containers = sum(len(p.containers) for p in ctx.state.be_pods())
        message = describe(config, containers, disks)
        decisions: tuple = ()
        if message != self._reported and containers:
            self._reported = message
            if disks:
                decisions = (Report(message, logging.INFO, __name__),)
                warning = large_requests(ctx.state.layout.version, disks)
                if warning:
                    decisions += (Report(warning, logging.WARNING, __name__),)
            else:
                decisions = (Report(f"block I/O of BE pods not capped: no disk with a driver in "
                                    f"{self.sys_root}/block", logging.WARNING, __name__),)
        gauges = tuple(Gauge("disk_max_request", (d.name,), d.max_request_kib) for d in disks
                       if d.max_request_kib is not None)
        return Plan(writes=tuple(writes), decisions=decisions + gauges)

    def undo(self, ctx: Context) -> Plan:
        self._reported, self._held, self._sample, self._dirs = "", {}, None, None
        self._files.close()
        return Plan()
