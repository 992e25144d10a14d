# SPDX-License-Identifier: Apache-2.0
"""Real memory pressure for the PSI tests and ``bench/psi.py``: page-cache thrashing in a cgroup.

Processes in a memory cgroup limited below the size of a file re-read it over and over; every
pass refaults pages evicted moments ago (workingset refaults), and the kernel counts the time
tasks wait for them as memory stall. ``/proc/pressure/memory`` (the node) and the cgroup's
``memory.pressure`` (v2) show ``some`` pressure rising within seconds, without swap and without
touching the rest of the machine's memory.
"""
from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

__all__ = ["Thrasher"]

SCRIPT = 'f=$1; shift; for p in "$@"; do echo $$ > "$p"; done; while :; do cat "$f" > /dev/null; done'


class Thrasher:
    """``processes`` shells re-reading a ``size_mib`` file inside ``cgroups``; set the memory
    limit of the memory cgroup (``limit_file``) to ``limit_mib`` first."""

    def __init__(self, workdir: Path, cgroups: Sequence[Path], memory_cgroup: Path, *,
                 size_mib: int = 32, limit_mib: int = 24, processes: int = 2) -> None:
        self.file = workdir / "thrash.bin"
        with open(self.file, "wb") as f:
            for _ in range(size_mib):
                f.write(bytes(range(256)) * 4096)
            f.flush()
            os.fsync(f.fileno())
            # drop the cache written here (charged to the caller's cgroup): the thrashers' reads
            # must fault the pages in, charged to their own limited cgroup
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        limit_file = "memory.limit_in_bytes" if (memory_cgroup / "memory.limit_in_bytes").exists() else "memory.max"
        (memory_cgroup / limit_file).write_text(str(limit_mib << 20))
        self.procs = [subprocess.Popen(["sh", "-c", SCRIPT, "sh", str(self.file),
                                        *(str(c / "cgroup.procs") for c in cgroups)],
                                       start_new_session=True)
                      for _ in range(processes)]

    def stop(self) -> None:
        for proc in self.procs:  # each shell leads its own group: its cat goes with it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in self.procs:
            proc.wait(timeout=10)
        self.file.unlink(missing_ok=True)

    def __enter__(self) -> Thrasher:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
