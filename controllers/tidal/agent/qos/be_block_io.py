# SPDX-License-Identifier: Apache-2.0
"""Block I/O of BE pods: the node's BE caps on each of its disks, shared by the BE containers.

A BE job streaming a file keeps the disk's queue full, and an online pod's read (a page-cache
miss, a database's random read) waits behind it: memory isolation keeps the online pod's pages,
not its place in the queue (docs/benchmarks.md, "With DAMON running"). The policy's
``features.blockIO`` sets the BE pods' caps per disk, together: ``readMiBPerSecond``,
``writeMiBPerSecond``, ``readIOPS``, ``writeIOPS`` (0: not capped).

Each BE container gets an equal share of each cap (pure, :func:`share`), written on its own
cgroup (pure, :func:`plan_block_io`):

=====  ===============================================================  ================================
       v1 (blkio)                                                       v2 (io)
=====  ===============================================================  ================================
read   ``blkio.throttle.read_bps_device``, ``..._read_iops_device``     ``io.max`` ``rbps=``, ``riops=``
write  ``blkio.throttle.write_bps_device``, ``..._write_iops_device``   ``io.max`` ``wbps=``, ``wiops=``
=====  ===============================================================  ================================

Per container, on both versions: v1's throttling is flat (a limit applies to the tasks of its own
cgroup only, never to a child's), so a cap on ``kubepods/besteffort`` or on the pod cgroup would
hold nothing; and a BE pod may be Burstable (keeping native requests) or have its containers in
the BE idle group. The shares do not follow demand: one BE container reading while three sit
idle gets a quarter of the cap. v1 throttles reads and direct writes; buffered writes reach the
disk from the kernel's writeback, which v1 charges to the root cgroup.

The node's disks (:func:`node_disks`): every whole disk the kernel lists in ``/sys/block`` with a
driver behind it (a ``device`` entry: not loop, ram, zram or device-mapper devices; a
device-mapper volume's requests reach the disks below it, which are listed), re-read every :data:`DISKS_REFRESH_SECONDS`. Switched off (or the
node leaving colocation) the executor's journal puts every file back (no line: no limit).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from tidal.agent.collector.cgroups import CgroupLayout, CgroupVersion, PodQOSClass
from tidal.agent.executor.cgroupfs import DEVICE_SEPARATOR
from tidal.api.policy import BlockIO

from .feature import DEFAULT_OPTIONS, Context, Options, Plan, Report
from .strategy import CgroupWrite, NodeState

__all__ = ["BEBlockIO", "DISKS_REFRESH_SECONDS", "Disk", "disk_holding", "node_disks", "plan_block_io", "share"]

MiB = 1 << 20
#: how often the disks are listed again (a disk added to a running node is capped within it)
DISKS_REFRESH_SECONDS = 60.0
CAPABILITY = "blkio.throttle"


@dataclass(frozen=True, order=True)
class Disk:
    name: str
    #: ``major:minor``, as the throttling files name it
    device: str


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
            disks.append(Disk(entry.name, device))
    return tuple(disks)


def disk_holding(path: Path, sys_root: Path = Path("/sys")) -> Disk | None:
    """The disk of :func:`node_disks` that holds ``path``'s file system; None when the file system
    is not on one (a partition, tmpfs, overlay, device-mapper volume)."""
    dev = os.stat(path).st_dev
    return next((d for d in node_disks(sys_root) if d.device == f"{os.major(dev)}:{os.minor(dev)}"), None)


def share(cap: int, containers: int) -> int:
    """An equal share of a node cap (0: not capped); at least 1, since a limit of 0 means none."""
    if cap <= 0 or containers <= 0:
        return 0
    return max(1, cap // containers)


def _values(version: CgroupVersion, config: BlockIO, containers: int,
            disks: tuple[Disk, ...]) -> dict[str, str]:
    """The files of one BE container and their values (only files that limit something)."""
    rbps = share(config.read_mib_per_second * MiB, containers)
    wbps = share(config.write_mib_per_second * MiB, containers)
    riops = share(config.read_iops, containers)
    wiops = share(config.write_iops, containers)
    devices = sorted(d.device for d in disks)
    if version is CgroupVersion.V2:
        if not (rbps or wbps or riops or wiops) or not devices:
            return {}
        limits = " ".join(f"{key}={value or 'max'}" for key, value in
                          (("rbps", rbps), ("wbps", wbps), ("riops", riops), ("wiops", wiops)))
        return {"io.max": DEVICE_SEPARATOR.join(f"{d} {limits}" for d in devices)}
    files = {"blkio.throttle.read_bps_device": rbps, "blkio.throttle.write_bps_device": wbps,
             "blkio.throttle.read_iops_device": riops, "blkio.throttle.write_iops_device": wiops}
    return {file: DEVICE_SEPARATOR.join(f"{d} {value}" for d in devices)
            for file, value in files.items() if value and devices}


def plan_block_io(state: NodeState, config: BlockIO, disks: tuple[Disk, ...]) -> list[CgroupWrite]:
    """Every BE container's throttling files (the blkio hierarchy of ``state.layout``)."""
    layout = state.layout
    if layout.blkio_root is None:
        return []
    containers = [(pod, c) for pod in state.be_pods() for c in pod.containers]
    values = _values(layout.version, config, len(containers), disks)
    writes = []
    for pod, container in containers:
        path = layout.blkio_dir(layout.container_relpath(pod.uid, pod.qos_class, container.id))
        writes += [CgroupWrite(path, file, value) for file, value in values.items()]
    return writes


def describe(config: BlockIO, containers: int, disks: tuple[Disk, ...]) -> str:
    caps = [f"{label} {value}{unit}" for label, value, unit in (
        ("read", config.read_mib_per_second, " MiB/s"), ("write", config.write_mib_per_second, " MiB/s"),
        ("read", config.read_iops, " IOPS"), ("write", config.write_iops, " IOPS")) if value]
    names = ", ".join(f"{d.name} ({d.device})" for d in disks)
    return (f"block I/O of BE pods capped on {names}: {', '.join(caps) or 'no cap set'} per disk, "
            f"shared by {containers} BE container(s)")


class BEBlockIO:
    """``features.blockIO`` where blkio throttling is offered (capability ``blkio.throttle``)."""

    name = "be-block-io"

    def __init__(self, options: Options = DEFAULT_OPTIONS) -> None:
        self.sys_root = options.sys_root
        self._disks: tuple[float, tuple[Disk, ...]] | None = None
        #: the description reported last (reported again when it changes)
        self._reported = ""

    def roots(self, layout: CgroupLayout) -> tuple[Path, ...]:
        """The blkio ``kubepods`` tree and the BE idle group's: where this feature's writes may go."""
        root = layout.blkio_root
        if root is None:
            return ()
        return (root / layout.kubepods_relpath(), root / layout.qos_relpath(PodQOSClass.BE_IDLE_GROUP))

    def enabled(self, ctx: Context) -> bool:
        return ctx.policy.features.block_io.enabled and ctx.capabilities.get(CAPABILITY, False)

    def sense(self, ctx: Context) -> tuple[Disk, ...]:
        if self._disks is None or ctx.now - self._disks[0] >= DISKS_REFRESH_SECONDS or ctx.now < self._disks[0]:
            self._disks = (ctx.now, node_disks(self.sys_root))
        return self._disks[1]

    def plan(self, ctx: Context) -> Plan:
        disks: tuple[Disk, ...] = ctx.observed.get(self.name, ())
        config = ctx.policy.features.block_io
        writes = plan_block_io(ctx.state, config, disks)
        containers = sum(len(p.containers) for p in ctx.state.be_pods())
        message = describe(config, containers, disks)
        decisions: tuple = ()
        if message != self._reported and containers:
            self._reported = message
            if disks:
                decisions = (Report(message, logging.INFO, __name__),)
            else:
                decisions = (Report(f"block I/O of BE pods not capped: no disk with a driver in "
                                    f"{self.sys_root}/block", logging.WARNING, __name__),)
        return Plan(writes=tuple(writes), decisions=decisions)

    def undo(self, ctx: Context) -> Plan:
        self._reported = ""
        return Plan()
