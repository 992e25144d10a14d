# SPDX-License-Identifier: Apache-2.0
"""Idle CPUs that halt, and how a benchmark keeps them from it.

When a CPU runs out of work the kernel's cpuidle driver puts it in an idle state. On this
machine (a KVM guest, driver ``haltpoll``) there are two: ``POLL`` (the CPU spins, exit latency
0) and ``haltpoll`` (the vCPU halts and the host deschedules it; waking it goes through the
host). A server thread woken on a halted vCPU starts late by that wake-up; a CPU a BE hog keeps
busy never halts. So on a guest the online server alone (bench-isolation's ``solo``) can have a
*worse* tail than beside a hog, and a treatment's ratio to solo mixes BE's interference with the
host's wake-up latency.

A node owner running latency-critical services takes the halt away the standard way: a PM QoS
request on ``/dev/cpu_dma_latency`` (tuned's ``latency-performance`` profile does it with
``force_latency``), which holds every CPU in the idle states whose exit latency is within the
request, ``POLL`` alone at 0 µs, for as long as the file stays open. :class:`IdleLatencyHold`
holds it for a run; :func:`halts` counts the entries into halting states, so a run shows whether
the hold took (0 halts per second) and how often each treatment's CPUs halted without it.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

CPU_SYSFS = Path("/sys/devices/system/cpu")
DMA_LATENCY = Path("/dev/cpu_dma_latency")


def halting_entries(states: list[tuple[str, int, int]]) -> int:
    """The entries into idle states that stop the CPU: every state but ``POLL`` (the one with an
    exit latency of 0 µs), summed. ``states``: (name, exit latency µs, usage) per CPU and state."""
    return sum(usage for name, latency, usage in states if name != "POLL" and latency > 0)


def read_states(root: Path = CPU_SYSFS) -> list[tuple[str, int, int]]:
    """(name, exit latency µs, usage) of every CPU's cpuidle states; empty without cpuidle."""
    out = []
    for state in sorted(root.glob("cpu[0-9]*/cpuidle/state[0-9]*")):
        try:
            out.append(((state / "name").read_text().strip(), int((state / "latency").read_text()),
                        int((state / "usage").read_text())))
        except (OSError, ValueError):
            continue  # a CPU going offline: its states go with it
    return out


def halts(root: Path = CPU_SYSFS) -> int:
    """How often this machine's CPUs have entered a halting idle state since boot."""
    return halting_entries(read_states(root))


class IdleLatencyHold:
    """Hold a PM QoS CPU latency request of ``microseconds`` (0: idle CPUs poll, never halt) while
    the ``with`` block runs; the kernel drops it when the file is closed, also if the process dies.
    Raises :class:`SystemExit` naming the file when it cannot be opened (root is needed)."""

    def __init__(self, microseconds: int = 0, path: Path = DMA_LATENCY) -> None:
        if microseconds < 0:
            raise ValueError(f"a CPU latency request is ≥ 0 µs, not {microseconds}")
        self.microseconds, self.path, self._fd = microseconds, path, None

    def __enter__(self) -> "IdleLatencyHold":
        try:
            self._fd = os.open(self.path, os.O_WRONLY)
            os.write(self._fd, struct.pack("i", self.microseconds))
        except OSError as err:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            raise SystemExit(f"cannot hold a CPU latency request on {self.path}: {err}") from err
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
