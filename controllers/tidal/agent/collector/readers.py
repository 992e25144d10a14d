# SPDX-License-Identifier: Apache-2.0
"""Parsing the kernel's usage files: cgroup CPU and memory, ``/proc/stat``, ``/proc/meminfo``.

Parsers take the file's text and the name to blame (pure); ``read_*`` wrappers read the file and
pass its path. A malformed file raises :class:`ParseError`, whose message names the file and,
when one line is at fault, the line number and its text. A missing file raises the usual
``FileNotFoundError`` (a pod's cgroup disappears when the pod goes away; callers tell the two
apart).

Definitions, chosen to match what the kubelet (cAdvisor) reports:

* cgroup CPU usage: cumulative nanoseconds: v1 ``cpuacct.usage``; v2 ``cpu.stat`` ``usage_usec``
  times 1000.
* cgroup memory working set, **without page cache that can be dropped**: v1
  ``memory.usage_in_bytes`` minus ``total_inactive_file`` of ``memory.stat`` (hierarchical); v2
  ``memory.current`` minus ``inactive_file`` (v2 statistics are always hierarchical); clamped at 0.
* node CPU (``/proc/stat`` first line): busy = total - idle - iowait - steal, in clock ticks;
  total is the sum of user, nice, system, idle, iowait, irq, softirq and steal (guest and
  guest_nice are already included in user and nice). Steal is time the hypervisor gave another
  guest: no process of the node used it (the kubelet's root-cgroup usage leaves it out too), so
  counting it busy would show a VM's contention as usage outside the pods (``systemOverhead``)
  and could evict BE pods for it.
* node memory used: ``MemTotal - MemAvailable`` from ``/proc/meminfo``; when the node is itself a
  memory cgroup (``tidal-agent run --node-memory-cgroup``: a node in a container, or a memory
  budget standing for a node), :func:`node_memory_in_cgroup`: capacity the cgroup's limit (at
  most ``MemTotal``), used its working set — the kubelet's eviction manager's view of a node
  (``memory.available`` = capacity − working set of the node's cgroup).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .cgroups import CgroupVersion

__all__ = [
    "ParseError",
    "CpuTimes",
    "MemInfo",
    "parse_int_file",
    "parse_flat_keyed",
    "parse_cpuacct_usage",
    "parse_cpu_stat_usage_ns",
    "working_set_bytes",
    "parse_memory_working_set",
    "parse_proc_stat",
    "parse_meminfo",
    "parse_memory_limit",
    "node_memory_in_cgroup",
    "read_cpu_usage_ns",
    "read_memory_working_set",
    "read_memory_usage",
    "read_inactive_file",
    "OpenFiles",
    "read_proc_stat",
    "read_meminfo",
    "read_node_memory_in_cgroup",
    "read_small",
]


class ParseError(ValueError):
    """A kernel file does not have the expected format.

    Attributes: ``source`` (the file), ``line`` (1-based line number, or None when the problem
    is not one line, e.g. a missing key).
    """

    def __init__(self, source: str, message: str, line: int | None = None) -> None:
        self.source = source
        self.line = line
        where = f"{source}, line {line}" if line is not None else source
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class CpuTimes:
    """The aggregate ``cpu`` line of ``/proc/stat``, in clock ticks, and the online CPU count."""

    total: int
    idle: int
    iowait: int
    cpus: int
    steal: int = 0

    @property
    def busy(self) -> int:
        return self.total - self.idle - self.iowait - self.steal


@dataclass(frozen=True)
class MemInfo:
    total_bytes: int
    available_bytes: int
    #: the node's working set on the pods' basis (what a pod's is: usage − inactive file, so
    #: active page cache counts): ``MemTotal − MemFree − Inactive(file)``, or the node cgroup's
    #: working set; None when the kernel does not give those lines. System usage is this minus
    #: the pods' working sets: ``used_bytes`` (MemAvailable counts all page cache as free) minus
    #: them lost the pods' active page cache from the daemons' memory.
    working_set_bytes: int | None = None

    @property
    def used_bytes(self) -> int:
        return max(0, self.total_bytes - self.available_bytes)


# --- Pure parsers -----------------------------------------------------------------------------


def _int(text: str, source: str, line: int | None, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ParseError(source, f"expected {what}, got {text!r}", line) from None
    if value < 0:
        raise ParseError(source, f"expected {what}, got negative {value}", line)
    return value


def parse_int_file(text: str, source: str) -> int:
    """A file holding one non-negative integer, e.g. ``cpuacct.usage`` or ``memory.current``."""
    lines = text.splitlines()
    content = [(n, s.strip()) for n, s in enumerate(lines, 1) if s.strip()]
    if len(content) != 1:
        raise ParseError(source, f"expected one integer, got {len(content)} non-empty lines")
    number, value = content[0]
    return _int(value, source, number, "a non-negative integer")


def parse_flat_keyed(text: str, source: str) -> dict[str, int]:
    """``<key> <integer>`` lines (``memory.stat``, ``cpu.stat``) into a dict."""
    result: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2:
            raise ParseError(source, f"expected '<key> <integer>', got {line!r}", number)
        result[fields[0]] = _int(fields[1], source, number, f"an integer for {fields[0]!r}")
    return result


def _require(stats: dict[str, int], key: str, source: str) -> int:
    if key not in stats:
        raise ParseError(source, f"no {key!r} line")
    return stats[key]


def parse_cpuacct_usage(text: str, source: str = "cpuacct.usage") -> int:
    """cgroup v1 ``cpuacct.usage``: cumulative CPU time in nanoseconds."""
    return parse_int_file(text, source)


def parse_cpu_stat_usage_ns(text: str, source: str = "cpu.stat") -> int:
    """cgroup v2 ``cpu.stat``: ``usage_usec`` as nanoseconds."""
    return _require(parse_flat_keyed(text, source), "usage_usec", source) * 1000


def working_set_bytes(usage_bytes: int, inactive_file_bytes: int) -> int:
    """Usage minus inactive page cache, clamped at 0 (cAdvisor's working set)."""
    return max(0, usage_bytes - inactive_file_bytes)


def parse_memory_working_set(
    version: CgroupVersion,
    usage_text: str,
    stat_text: str,
    usage_source: str | None = None,
    stat_source: str = "memory.stat",
) -> int:
    """Working set bytes of a cgroup from its usage file and ``memory.stat``.

    v1: ``memory.usage_in_bytes`` and ``total_inactive_file``; v2: ``memory.current`` and
    ``inactive_file``. A ``memory.stat`` without that key is an error: reporting usage with the
    page cache in it would silently overstate memory by up to the whole cache.
    """
    if version is CgroupVersion.V1:
        usage_source = usage_source or "memory.usage_in_bytes"
        inactive_key = "total_inactive_file"
    else:
        usage_source = usage_source or "memory.current"
        inactive_key = "inactive_file"
    usage = parse_int_file(usage_text, usage_source)
    return working_set_bytes(usage, _keyed_value(stat_text, inactive_key, stat_source))


_KEY_LINE: dict[str, re.Pattern[str]] = {}


def _keyed_value(text: str, key: str, source: str) -> int:
    """The integer on the ``<key> <integer>`` line of a flat-keyed file, without parsing the
    other lines (``memory.stat`` has dozens; the agent reads one per pod every second)."""
    pattern = _KEY_LINE.get(key)
    if pattern is None:
        pattern = _KEY_LINE[key] = re.compile(rf"^{re.escape(key)}(?:[ \t]+(\S*))?[ \t]*$", re.MULTILINE)
    match = pattern.search(text)
    if match is None:
        raise ParseError(source, f"no {key!r} line")
    number = text.count("\n", 0, match.start()) + 1
    if match.group(1) is None:
        raise ParseError(source, f"expected '<key> <integer>', got {key!r}", number)
    return _int(match.group(1), source, number, f"an integer for {key!r}")


_PROC_STAT_FIELDS = 8  # user nice system idle iowait irq softirq steal


def parse_proc_stat(text: str, source: str = "/proc/stat") -> CpuTimes:
    """The aggregate ``cpu`` line of ``/proc/stat`` and the number of ``cpuN`` lines."""
    aggregate: list[int] | None = None
    cpus = 0
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or not fields[0].startswith("cpu"):
            continue
        if fields[0] != "cpu":
            if fields[0][3:].isdigit():
                cpus += 1
            continue
        if len(fields) < 5:  # user nice system idle iowait: every kernel since 2.6
            raise ParseError(
                source, f"expected at least 5 counters on the cpu line, got {line!r}", number
            )
        counters = fields[1 : 1 + _PROC_STAT_FIELDS]
        aggregate = [_int(f, source, number, "a tick count") for f in counters]
    if aggregate is None:
        raise ParseError(source, "no aggregate 'cpu' line")
    if cpus == 0:
        raise ParseError(source, "no per-CPU 'cpuN' lines")
    steal = aggregate[7] if len(aggregate) > 7 else 0  # since Linux 2.6.11
    return CpuTimes(total=sum(aggregate), idle=aggregate[3], iowait=aggregate[4], cpus=cpus, steal=steal)


_MEMINFO_UNITS = {"kB": 1024, "": 1}


def parse_meminfo(text: str, source: str = "/proc/meminfo") -> MemInfo:
    """``MemTotal`` and ``MemAvailable`` of ``/proc/meminfo``, in bytes (and the working set
    from ``MemFree`` and ``Inactive(file)`` when both are there)."""
    wanted = {"MemTotal": None, "MemAvailable": None, "MemFree": None, "Inactive(file)": None}
    for number, line in enumerate(text.splitlines(), 1):
        key, sep, rest = line.partition(":")
        if key not in wanted:
            continue
        fields = rest.split()
        unit_ok = len(fields) == 1 or (len(fields) == 2 and fields[1] in _MEMINFO_UNITS)
        if not sep or not unit_ok:
            raise ParseError(source, f"expected '{key}: <integer> kB', got {line!r}", number)
        unit = _MEMINFO_UNITS[fields[1] if len(fields) == 2 else ""]
        wanted[key] = _int(fields[0], source, number, f"an integer for {key}") * unit
    missing = [k for k in ("MemTotal", "MemAvailable") if wanted[k] is None]
    if missing:
        raise ParseError(source, f"no {' or '.join(missing)} line")
    free, inactive = wanted["MemFree"], wanted["Inactive(file)"]
    working_set = None if free is None or inactive is None else max(0, wanted["MemTotal"] - free - inactive)
    return MemInfo(total_bytes=wanted["MemTotal"], available_bytes=wanted["MemAvailable"],
                   working_set_bytes=working_set)


#: v1 reports "no limit" as the largest page-aligned signed 64-bit value; anything this large is none
_V1_UNLIMITED = 1 << 62


def parse_memory_limit(text: str, version: CgroupVersion, source: str) -> int | None:
    """A cgroup's memory limit in bytes: v1 ``memory.limit_in_bytes``, v2 ``memory.max``
    (``max``); None when it has none."""
    value = text.strip()
    if version is CgroupVersion.V2 and value == "max":
        return None
    limit = _int(value, source, None, "an integer or 'max'" if version is CgroupVersion.V2 else "an integer")
    return None if limit >= _V1_UNLIMITED else limit


def node_memory_in_cgroup(meminfo: MemInfo, limit_bytes: int | None, working_set_bytes: int) -> MemInfo:
    """The node's memory when the node is a memory cgroup: capacity its limit (``MemTotal`` when
    it has none or a larger one), available the capacity minus the cgroup's working set (at
    least 0)."""
    total = meminfo.total_bytes if limit_bytes is None else min(meminfo.total_bytes, limit_bytes)
    return MemInfo(total_bytes=total, available_bytes=max(0, total - working_set_bytes),
                   working_set_bytes=working_set_bytes)


# --- Thin file wrappers -----------------------------------------------------------------------


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def read_small(path: Path | str) -> bytes:
    """A small kernel file (cgroup, proc), with no buffered file object: the agent reads hundreds
    of them a round, and ``Path.read_text``'s text layer costs several times the read itself.
    One read for a file under half a page (most cgroup files); a longer one is read until its
    end: a ``seq_file`` (cgroup ``tasks``, ``cgroup.threads``) gives at most a page a read, less
    the record that did not fit, so a first read near a page is not known to be the whole file."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, 65536)
        if len(data) < _PAGE // 2:
            return data
        chunks = [data]
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _read(path: Path | str) -> str:
    return read_small(path).decode("ascii", errors="replace")


def read_cpu_usage_ns(cgroup_dir: Path, version: CgroupVersion, read=None) -> int:
    """Cumulative CPU nanoseconds of the cgroup directory (in the CPU hierarchy)."""
    # string paths: this runs for every pod every second, pathlib's joins are measurable
    read = read or _read
    if version is CgroupVersion.V1:
        path = f"{cgroup_dir}/cpuacct.usage"
        return parse_cpuacct_usage(read(path), path)
    path = f"{cgroup_dir}/cpu.stat"
    return parse_cpu_stat_usage_ns(read(path), path)


def read_memory_working_set(cgroup_dir: Path, version: CgroupVersion) -> int:
    """Working set bytes (no inactive page cache) of the cgroup directory (memory hierarchy)."""
    v1 = version is CgroupVersion.V1
    usage = f"{cgroup_dir}/{'memory.usage_in_bytes' if v1 else 'memory.current'}"
    stat = f"{cgroup_dir}/memory.stat"
    usage_text = _read(usage)
    return parse_memory_working_set(version, usage_text, _read(stat), usage, stat)


def read_memory_usage(cgroup_dir: Path, version: CgroupVersion, read=None) -> int:
    """``memory.usage_in_bytes`` (v1) / ``memory.current`` (v2): usage including page cache."""
    usage = f"{cgroup_dir}/{'memory.usage_in_bytes' if version is CgroupVersion.V1 else 'memory.current'}"
    return parse_int_file((read or _read)(usage), usage)


def read_inactive_file(cgroup_dir: Path, version: CgroupVersion, read=None) -> int:
    """The inactive page cache of ``memory.stat`` (``total_inactive_file`` on v1)."""
    stat = f"{cgroup_dir}/memory.stat"
    key = "total_inactive_file" if version is CgroupVersion.V1 else "inactive_file"
    return _keyed_value((read or _read)(stat), key, stat)


class OpenFiles:
    """Descriptors of files read every step, kept open and re-read from offset 0 with ``pread``
    (cgroup and proc files regenerate their content on every read from the start): no
    open/close per read. A file whose cgroup went away fails its ``pread`` (ENODEV) and is
    reopened — which raises FileNotFoundError as a fresh read would. :meth:`sweep` closes the
    descriptors not read since the previous sweep, so the set follows the pods."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}
        self._used: set[str] = set()

    def read(self, path: str) -> str:
        fd = self._fds.get(path)
        if fd is not None:
            try:
                data = _pread_all(fd)
                self._used.add(path)
                return data
            except OSError:
                self._close(path)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._fds[path] = fd
        self._used.add(path)
        return _pread_all(fd)

    def _close(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def sweep(self) -> None:
        for path in [p for p in self._fds if p not in self._used]:
            self._close(path)
        self._used = set()

    def close(self) -> None:
        for path in list(self._fds):
            self._close(path)

    def __len__(self) -> int:
        return len(self._fds)


def _pread_all(fd: int) -> str:
    chunks, offset = [], 0
    while chunk := os.pread(fd, 65536, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks).decode("ascii", errors="replace")


def read_proc_stat(path: Path | str = "/proc/stat") -> CpuTimes:
    path = Path(path)
    return parse_proc_stat(_read(path), str(path))


def read_meminfo(path: Path | str = "/proc/meminfo") -> MemInfo:
    path = Path(path)
    return parse_meminfo(_read(path), str(path))


def read_node_memory_in_cgroup(cgroup_dir: Path, version: CgroupVersion, meminfo: MemInfo) -> MemInfo:
    """:func:`node_memory_in_cgroup` of the cgroup directory (memory hierarchy)."""
    limit = f"{cgroup_dir}/{'memory.limit_in_bytes' if version is CgroupVersion.V1 else 'memory.max'}"
    return node_memory_in_cgroup(meminfo, parse_memory_limit(_read(limit), version, limit),
                                 read_memory_working_set(cgroup_dir, version))
