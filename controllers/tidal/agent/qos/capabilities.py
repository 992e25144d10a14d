# SPDX-License-Identifier: Apache-2.0
"""Capability probe: what this node's kernel and hardware support, each "no" with a reason.

The result is shaped for ``NodeProfile.status.capabilities``: a list of ``{name, supported,
reason}``. Names are stable (the contract with the manager and the console):

``kernel``, ``cgroup``, ``cgroup.driver``, ``cpu.idle``, ``cpu.cfs_burst``, ``schedstat``, ``psi``, ``psi.cgroup``, ``resctrl.l3``,
``resctrl.mba``, ``numa``, ``memory.reclaim``, ``tc``, ``blkio.throttle``, ``openeuler.cpu.qos_level``, ``openeuler.memory.qos_level``,
``sched.slice``.

Parsing is pure (``parse_*``); :func:`probe` only checks that files exist and reads small ones,
under three roots that tests point at recorded trees; ``sched.slice`` is asked of the running
kernel (a system call on a thread of its own, :func:`tidal.agent.executor.sched.probe`), which
tests may replace.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from tidal.agent.collector.cgroups import (
    CgroupDriver,
    CgroupHierarchy,
    CgroupLayout,
    CgroupLayoutError,
    CgroupVersion,
    detect_driver,
    detect_hierarchy,
)
from tidal.agent.executor import sched

from .strategy import cpu_controller_root

__all__ = [
    "Capability",
    "CAPABILITY_NAMES",
    "CPU_IDLE_MIN_KERNEL",
    "parse_kernel_version",
    "parse_cpu_list",
    "parse_cpuinfo_flags",
    "parse_schedstat_present",
    "probe",
    "supported_map",
    "to_status",
]

CAPABILITY_NAMES = (
    "kernel",
    "cgroup",
    "cgroup.driver",
    "cpu.idle",
    "cpu.cfs_burst",
    "schedstat",
    "psi",
    "psi.cgroup",
    "resctrl.l3",
    "resctrl.mba",
    "numa",
    "memory.reclaim",
    "tc",
    "blkio.throttle",
    "openeuler.cpu.qos_level",
    "openeuler.memory.qos_level",
    "sched.slice",
)
CPU_IDLE_MIN_KERNEL = (5, 15)


@dataclass(frozen=True)
class Capability:
    name: str
    supported: bool
    reason: str

    def to_status(self) -> dict[str, object]:
        return asdict(self)


def parse_kernel_version(release: str) -> tuple[int, int, int]:
    """``6.18.44-fc-v657`` -> (6, 18, 44); ``5.15`` -> (5, 15, 0)."""
    match = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", release)
    if match is None:
        raise ValueError(f"kernel release {release.strip()!r}: expected <major>.<minor>[.<patch>]")
    return int(match[1]), int(match[2]), int(match[3] or 0)


def parse_schedstat_present(text: str) -> bool:
    """``/proc/self/schedstat`` of the probing process counts: it ran, so its run time is not 0
    (kernels with sched_info off print ``0 0 0``)."""
    fields = text.split()
    return len(fields) >= 3 and all(f.isdigit() for f in fields[:3]) and int(fields[0]) > 0


def parse_cpu_list(text: str) -> list[int]:
    """Kernel list format: ``0-3,8,10-11`` -> [0, 1, 2, 3, 8, 10, 11]."""
    result: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            result.extend(range(int(lo), int(hi) + 1))
        else:
            result.append(int(part))
    return result


def parse_cpuinfo_flags(text: str) -> set[str]:
    """The union of the ``flags`` (x86) / ``Features`` (arm64) lines of /proc/cpuinfo."""
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return flags


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None


def _first_child_with(root: Path, file: str) -> Path | None:
    """``root/file`` or ``root/<child>/file`` (v2 root cgroups lack most cpu.* files)."""
    if (root / file).exists():
        return root / file
    try:
        for child in sorted(root.iterdir()):
            if child.is_dir() and (child / file).exists():
                return child / file
    except OSError:
        pass
    return None


def probe(
    cgroup_root: Path | str = "/sys/fs/cgroup",
    proc_root: Path | str = "/proc",
    sys_root: Path | str = "/sys",
    kubelet_root: str = "/",
    sched_slice: Callable[[], tuple[bool, str]] = sched.probe,
) -> list[Capability]:
    cgroup_root, proc_root, sys_root = Path(cgroup_root), Path(proc_root), Path(sys_root)
    caps: list[Capability] = []

    release = _read(proc_root / "sys/kernel/osrelease")
    kernel: tuple[int, int, int] | None = None
    if release is None:
        caps.append(Capability("kernel", False, f"{proc_root}/sys/kernel/osrelease unreadable"))
    else:
        try:
            kernel = parse_kernel_version(release)
            caps.append(Capability("kernel", True, release.strip()))
        except ValueError as error:
            caps.append(Capability("kernel", False, str(error)))

    hierarchy: CgroupHierarchy | None
    try:
        hierarchy = detect_hierarchy(cgroup_root)
        hybrid = (cgroup_root / "unified" / "cgroup.controllers").exists()
        detail = f"{hierarchy.version}" + (" (hybrid)" if hierarchy.version is CgroupVersion.V1 and hybrid else "")
        caps.append(Capability("cgroup", True, detail))
    except CgroupLayoutError as error:
        hierarchy = None
        caps.append(Capability("cgroup", False, str(error)))

    if hierarchy is None:
        caps.append(Capability("cgroup.driver", False, "no usable cgroup hierarchy"))
    else:
        try:
            caps.append(Capability("cgroup.driver", True, str(detect_driver(hierarchy, kubelet_root))))
        except CgroupLayoutError as error:
            caps.append(Capability("cgroup.driver", False, str(error)))

    cpu_root = memory_root = None
    if hierarchy is not None:
        cpu_root = cpu_controller_root(CgroupLayout(hierarchy, CgroupDriver.CGROUPFS))
        memory_root = hierarchy.memory_root

    def cgroup_file_cap(name: str, root: Path | None, files: Iterable[str], missing: str) -> None:
        if root is None:
            caps.append(Capability(name, False, "no usable cgroup hierarchy"))
            return
        for file in files:
            found = _first_child_with(root, file)
            if found is not None:
                caps.append(Capability(name, True, str(found)))
                return
        caps.append(Capability(name, False, missing))

    kernel_text = "%d.%d.%d" % kernel if kernel else "unknown"
    cgroup_file_cap(
        "cpu.idle", cpu_root, ["cpu.idle"],
        f"no cpu.idle in {cpu_root} (kernel {kernel_text}; needs >= 5.15): minimum "
        "cpu.shares/cpu.weight used instead",
    )
    burst_file = "cpu.cfs_burst_us" if hierarchy and hierarchy.version is CgroupVersion.V1 else "cpu.max.burst"
    cgroup_file_cap(
        "cpu.cfs_burst", cpu_root, [burst_file],
        f"no {burst_file} in {cpu_root} (kernel {kernel_text}; CFS burst needs >= 5.14)",
    )

    schedstat = _read(proc_root / "self" / "schedstat")
    if schedstat is None:
        caps.append(Capability("schedstat", False, f"no {proc_root}/self/schedstat: kernel without "
                               "CONFIG_SCHED_INFO (run-queue delay of online tasks unmeasurable)"))
    elif parse_schedstat_present(schedstat):
        caps.append(Capability("schedstat", True, f"{proc_root}/<tid>/schedstat (run-queue delay per thread)"))
    else:
        caps.append(Capability("schedstat", False, f"{proc_root}/self/schedstat reads {schedstat.strip()!r}: "
                               "scheduler statistics off (sched_info / delayacct disabled)"))

    pressure = proc_root / "pressure" / "cpu"
    if _read(pressure) is not None:
        caps.append(Capability("psi", True, str(pressure.parent)))
    elif (proc_root / "pressure").exists():
        caps.append(Capability("psi", False, f"{pressure} unreadable: boot with psi=1"))
    else:
        caps.append(
            Capability("psi", False, f"no {proc_root}/pressure: kernel without CONFIG_PSI or psi=0")
        )

    v2_root = None
    if hierarchy is not None and hierarchy.version is CgroupVersion.V2:
        v2_root = hierarchy.cpu_root
    if v2_root is None:
        caps.append(
            Capability(
                "psi.cgroup", False,
                "per-cgroup PSI needs the pods' controllers on cgroup v2; they are on v1 here",
            )
        )
    else:
        cgroup_file_cap("psi.cgroup", v2_root, ["cpu.pressure"], f"no cpu.pressure under {v2_root}")

    resctrl = sys_root / "fs" / "resctrl"
    flags = parse_cpuinfo_flags(_read(proc_root / "cpuinfo") or "")
    for name, info_dir, flag in (("resctrl.l3", "L3", "cat_l3"), ("resctrl.mba", "MB", "mba")):
        if (resctrl / "info" / info_dir).is_dir():
            caps.append(Capability(name, True, str(resctrl / "info" / info_dir)))
        elif (resctrl / "info").is_dir():
            caps.append(Capability(name, False, f"resctrl mounted but no info/{info_dir}: not offered by this CPU"))
        elif flag in flags:
            caps.append(Capability(name, False, f"unsupported: no resctrl mounted at {resctrl}, though the CPU "
                                                f"has {flag} (mount -t resctrl resctrl {resctrl})"))
        else:
            caps.append(
                Capability(name, False, f"unsupported: no resctrl mounted at {resctrl} (not mounted, and the "
                                        f"CPU flags lack {flag})")
            )

    online = _read(sys_root / "devices/system/node/online")
    if online is None:
        caps.append(Capability("numa", False, f"no {sys_root}/devices/system/node/online"))
    else:
        nodes = parse_cpu_list(online)
        if len(nodes) > 1:
            caps.append(Capability("numa", True, f"{len(nodes)} NUMA nodes ({online.strip()})"))
        else:
            caps.append(Capability("numa", False, f"single NUMA node ({online.strip()}): nothing to align"))

    if hierarchy is not None and hierarchy.version is CgroupVersion.V1:
        caps.append(Capability("memory.reclaim", False, "cgroup v1 has no memory.reclaim: BE memory is "
                                                        "reclaimed through memory.soft_limit_in_bytes only"))
    else:
        cgroup_file_cap("memory.reclaim", memory_root, ["memory.reclaim"],
                        f"no memory.reclaim in {memory_root} (kernel {kernel_text}; needs >= 5.19): "
                        "BE memory is reclaimed through memory.high only")

    missing_tools = [t for t in ("tc", "ip", "nsenter") if shutil.which(t) is None]
    if missing_tools:
        caps.append(Capability("tc", False, f"no {', '.join(missing_tools)} on PATH (iproute2, util-linux): "
                                            "BE egress cannot be shaped"))
    elif not (sys_root / "class/net").is_dir():
        caps.append(Capability("tc", False, f"no {sys_root}/class/net"))
    else:
        caps.append(Capability("tc", True, f"{shutil.which('tc')} (ingress + IFB + TBF on host veths)"))

    if hierarchy is None:
        caps.append(Capability("blkio.throttle", False, "no usable cgroup hierarchy"))
    elif hierarchy.version is CgroupVersion.V1:
        if hierarchy.blkio_root is None:
            caps.append(Capability("blkio.throttle", False, f"no blkio controller with throttling files at "
                                                            f"{cgroup_root}/blkio (kernel without "
                                                            "CONFIG_BLK_DEV_THROTTLING, or not mounted)"))
        else:
            caps.append(Capability("blkio.throttle", True, f"{hierarchy.blkio_root} (blkio.throttle.*_device)"))
    else:
        cgroup_file_cap("blkio.throttle", hierarchy.memory_root, ["io.max"],
                        f"no io.max under {hierarchy.memory_root}: the io controller is not enabled for the "
                        "pods' cgroups, or the kernel lacks CONFIG_BLK_DEV_THROTTLING")

    cgroup_file_cap("openeuler.cpu.qos_level", cpu_root, ["cpu.qos_level"], "no cpu.qos_level: not an openEuler kernel")
    cgroup_file_cap(
        "openeuler.memory.qos_level", memory_root, ["memory.qos_level"],
        "no memory.qos_level: not an openEuler kernel",
    )
    supported, reason = sched_slice()
    caps.append(Capability("sched.slice", supported, reason or "sched_setattr sched_runtime: a custom EEVDF "
                                                                  "slice per SCHED_OTHER thread"))
    return caps


def supported_map(caps: Iterable[Capability]) -> dict[str, bool]:
    return {c.name: c.supported for c in caps}


def to_status(caps: Iterable[Capability]) -> list[dict[str, object]]:
    return [c.to_status() for c in caps]
