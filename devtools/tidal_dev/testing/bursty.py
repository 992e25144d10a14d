# SPDX-License-Identifier: Apache-2.0
"""A bursty CPU-bound server in a cgroup, for the CPU burst tests and ``bench/burst.py``.

The server (a child Python process) reads requests from stdin, one per line, each the CPU time it
should burn in milliseconds; it answers every request with a line once it has burned that much
CPU (thread CPU time, so waiting for a CPU or a throttled period does not count as work).
Requests sent together queue up, as on a single-threaded server.
"""
from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["BurstyServer", "ThrottleMeter", "read_cpu_stat"]

SERVER = r"""
import sys, time
for line in sys.stdin:
    end = time.thread_time() + float(line) / 1000
    while time.thread_time() < end:
        pass
    sys.stdout.write("ok\n")
    sys.stdout.flush()
"""


def read_cpu_stat(cgroup: Path) -> dict[str, int]:
    """``cpu.stat`` as a dict (v1 ``nr_throttled``/``nr_bursts``; v2 the same names)."""
    out = {}
    for line in (cgroup / "cpu.stat").read_text().splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out


class ThrottleMeter:
    """Periods throttled and periods that used the burst, over the pod's and the container's cgroups.

    The kubelet writes the same quota at both levels, and the kernel throttles whichever level's
    runtime runs out first: the container's own ``cpu.stat`` alone can miss most of the throttled
    periods (seen: 3 at the container, 12 at the pod, for the same 12 bursts). Per key, the count
    is the larger of the two levels' changes since ``start``.
    """

    KEYS = ("nr_throttled", "nr_bursts")

    def __init__(self, cgroups: Sequence[Path]) -> None:
        self.cgroups = tuple(cgroups)
        self.before: list[dict[str, int]] = []

    def start(self) -> None:
        self.before = [read_cpu_stat(c) for c in self.cgroups]

    def counts(self) -> dict[str, int]:
        after = [read_cpu_stat(c) for c in self.cgroups]
        return {key: max(a.get(key, 0) - b.get(key, 0) for a, b in zip(after, self.before)) for key in self.KEYS}


class BurstyServer:
    def __init__(self, cgroups: Sequence[Path]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        for cgroup in cgroups:
            (cgroup / "cgroup.procs").write_text(str(self.proc.pid))
        self.request([1.0])  # warm: the interpreter's start-up is not measured

    def request(self, cpu_ms: Sequence[float]) -> list[float]:
        """Send the requests together; return each one's latency in milliseconds."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        start = time.perf_counter()
        self.proc.stdin.write("".join(f"{ms}\n" for ms in cpu_ms))
        self.proc.stdin.flush()
        latencies = []
        for _ in cpu_ms:
            if self.proc.stdout.readline() != "ok\n":
                raise RuntimeError(f"bursty server exited with {self.proc.poll()}")
            latencies.append((time.perf_counter() - start) * 1000)
        return latencies

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def __enter__(self) -> BurstyServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
