# SPDX-License-Identifier: Apache-2.0
"""Where a process group's time went while it could not run: PSI totals over a window.

A cgroup v2 directory's ``cpu.pressure``, ``memory.pressure`` and ``io.pressure`` hold cumulative
``total=`` microseconds during which some (or, ``full``, all) of its non-idle tasks were delayed:
waiting for a CPU, in memory reclaim or refaulting, waiting for block I/O. The kernel keeps them
for every cgroup of the unified hierarchy, also on a hybrid (v1) system whose cgroup2 mount has
no controller attached: moving a group's processes into a cgroup there changes nothing of their
resources and gives their stalls. A bench reads the totals before and after its measured seconds
(:func:`stall_ms`), so a tail can be put down to CPU, memory or I/O waits — or to none of them.
"""
from __future__ import annotations

import errno
from collections.abc import Iterable, Mapping
from pathlib import Path

UNIFIED = Path("/sys/fs/cgroup/unified")
#: (file, line) of each figure reported, keyed by its name
KINDS = {"cpu": ("cpu.pressure", "some"), "memory": ("memory.pressure", "some"),
         "memory_full": ("memory.pressure", "full"), "io": ("io.pressure", "some")}


def parse_totals(text: str) -> dict[str, int]:
    """``some avg10=.. total=N`` / ``full ... total=M`` -> {"some": N, "full": M} (µs)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        kind, *fields = line.split()
        for item in fields:
            key, _, value = item.partition("=")
            if key == "total":
                out[kind] = int(value)
    if "some" not in out:
        raise ValueError(f"no 'some ... total=' in pressure text {text[:80]!r}")
    return out


def read_totals(directory: Path) -> dict[str, int]:
    """The cumulative stall of each of :data:`KINDS` in ``directory`` (a cgroup v2 dir or
    ``/proc/pressure``, whose files are named without the ``.pressure`` suffix), µs."""
    out: dict[str, int] = {}
    for name, (file, line) in KINDS.items():
        path = directory / file
        if not path.exists():
            path = directory / file.removesuffix(".pressure")
        out[name] = parse_totals(path.read_text()).get(line, 0)
    return out


def stall_ms(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, float]:
    """Milliseconds of each kind of stall between two readings of :func:`read_totals`."""
    return {k: round((after[k] - before[k]) / 1000, 1) for k in KINDS}


def group_for(pids: Iterable[int], cgroup: Path) -> Path | None:
    """Move ``pids`` into ``cgroup`` (created) of the unified hierarchy; None when the machine
    has no writable unified hierarchy (the bench then reports no stalls, and says so)."""
    try:
        cgroup.mkdir(exist_ok=True)
        for pid in pids:
            try:
                (cgroup / "cgroup.procs").write_text(str(pid))
            except ProcessLookupError:
                pass  # gone meanwhile
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.EACCES, errno.EPERM, errno.EROFS, errno.EBUSY, errno.EOPNOTSUPP):
            return None
        raise
    return cgroup if (cgroup / "cpu.pressure").exists() else None
