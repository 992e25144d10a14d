# SPDX-License-Identifier: Apache-2.0
"""Successive counter readings to rates (CPU nanoseconds to cores, /proc/stat ticks to cores).

Every function here returns a finite, non-negative float or ``None`` ("no rate for this
interval"), never NaN or infinity. ``None`` is returned for:

* the first reading (no previous one);
* elapsed time that is not a finite number above ``min_elapsed`` (zero, negative: the clock went
  backwards, or too short to mean anything);
* a counter that went down (the cgroup was recreated, or the counter wrapped): the new reading
  becomes the baseline and the next interval measures from it.

Counters are Python integers, so the difference of two huge readings (near 2**64) is exact;
only the final division is floating point.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from .readers import CpuTimes

__all__ = [
    "NANOSECONDS_PER_SECOND",
    "DEFAULT_MIN_ELAPSED",
    "CounterReading",
    "counter_rate",
    "CounterRates",
    "node_cpu_cores",
]

NANOSECONDS_PER_SECOND = 1_000_000_000
#: Intervals shorter than this (seconds) give no rate: timer jitter would dominate.
DEFAULT_MIN_ELAPSED = 1e-3


@dataclass(frozen=True)
class CounterReading:
    """A cumulative counter's value and when it was read (monotonic seconds)."""

    value: int
    at: float


def _finite_rate(delta: int, elapsed: float, units_per_second: float) -> float | None:
    try:
        rate = delta / units_per_second / elapsed
    except (OverflowError, ZeroDivisionError):
        return None
    return rate if math.isfinite(rate) else None


def counter_rate(
    previous: CounterReading | None,
    current: CounterReading,
    units_per_second: float = NANOSECONDS_PER_SECOND,
    min_elapsed: float = DEFAULT_MIN_ELAPSED,
) -> float | None:
    """Counter units per second between two readings, divided by ``units_per_second``.

    With a nanosecond CPU counter and the default ``units_per_second`` this is cores.
    """
    if previous is None:
        return None
    elapsed = current.at - previous.at
    if not math.isfinite(elapsed) or elapsed < min_elapsed:
        return None
    delta = current.value - previous.value
    if delta < 0:
        return None
    return _finite_rate(delta, elapsed, units_per_second)


class CounterRates:
    """The last reading of many counters (e.g. one per pod) and their rates.

    Memory: one reading per key; :meth:`retain` drops the keys that are gone.
    """

    def __init__(
        self,
        units_per_second: float = NANOSECONDS_PER_SECOND,
        min_elapsed: float = DEFAULT_MIN_ELAPSED,
    ) -> None:
        if not (math.isfinite(units_per_second) and units_per_second > 0):
            raise ValueError(f"units_per_second must be a positive number, got {units_per_second}")
        self.units_per_second = units_per_second
        self.min_elapsed = min_elapsed
        self._last: dict[Hashable, CounterReading] = {}

    def update(self, key: Hashable, value: int, at: float) -> float | None:
        """Record a reading; the rate since the previous reading of ``key``, or None."""
        current = CounterReading(value, at)
        previous = self._last.get(key)
        if previous is not None:
            elapsed = at - previous.at
            too_soon = math.isfinite(elapsed) and 0 <= elapsed < self.min_elapsed
            if too_soon and value >= previous.value:
                # Too soon: keep the older baseline so that the next interval is long enough.
                return None
        self._last[key] = current
        return counter_rate(previous, current, self.units_per_second, self.min_elapsed)

    def forget(self, key: Hashable) -> None:
        self._last.pop(key, None)

    def retain(self, keys: Iterable[Hashable]) -> None:
        """Forget every key not in ``keys``."""
        keep = set(keys)
        for key in [k for k in self._last if k not in keep]:
            del self._last[key]

    def __len__(self) -> int:
        return len(self._last)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._last


def node_cpu_cores(previous: CpuTimes | None, current: CpuTimes) -> float | None:
    """Busy cores of the node between two ``/proc/stat`` readings.

    busy ticks / total ticks of the interval, times the online CPUs: independent of the tick
    rate and of wall-clock time (steal, in the total, is not busy: another guest had the CPU).
    Clamped to [0, cpus]: the kernel's iowait counter may go backwards, which would otherwise
    overstate busy time by a few ticks.
    """
    if previous is None:
        return None
    total = current.total - previous.total
    idle = current.idle - previous.idle
    if total <= 0 or idle < 0:
        return None
    busy = current.busy - previous.busy
    cores = busy / total * current.cpus
    return min(max(cores, 0.0), float(current.cpus))
