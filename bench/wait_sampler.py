# SPDX-License-Identifier: Apache-2.0
"""The longest single run-queue waits of some threads, for bench-isolation.

``/proc/<tid>/schedstat``'s second field (ns waited on a run queue) grows when a wait *ends*
(the thread gets a CPU), by the whole wait. Read every millisecond, the largest increase
between two readings is the longest wait that ended in that millisecond: a thread that waited
120 ms for a CPU shows one increase of 120 ms. The mean delay per slice (the agent's signal)
cannot show it: one 120-ms wait among 20,000 slices adds 6 µs to the mean, yet it is what a
request's p99 feels.

Run as ``chrt -f 2 python wait_sampler.py SECONDS TID,TID,... OUT`` (at SCHED_FIFO so its own
readings are not delayed behind what it measures): writes ``{"tid": [longest_ms, waits_over_5ms]}``
to OUT.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tidal.agent.qos.be_cpu_interference import parse_schedstat

LONG_WAIT_NS = 5_000_000


def read_waited(tid: int) -> int | None:
    try:
        return parse_schedstat(Path(f"/proc/{tid}/schedstat").read_text())[1]
    except (OSError, ValueError):
        return None


def longest_waits(readings: list[dict[int, int | None]]) -> dict[int, tuple[int, int]]:
    """Per thread: the largest increase of waited ns between consecutive readings, and how many
    increases exceeded 5 ms (pure)."""
    out: dict[int, tuple[int, int]] = {}
    for before, after in zip(readings, readings[1:]):
        for tid, waited in after.items():
            prev = before.get(tid)
            if waited is None or prev is None or waited < prev:
                continue
            longest, long_waits = out.get(tid, (0, 0))
            out[tid] = (max(longest, waited - prev), long_waits + (waited - prev > LONG_WAIT_NS))
    return out


def main() -> int:
    seconds, tids, out = float(sys.argv[1]), [int(t) for t in sys.argv[2].split(",") if t], Path(sys.argv[3])
    readings = [{tid: read_waited(tid) for tid in tids}]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.001)
        readings.append({tid: read_waited(tid) for tid in tids})
    result = longest_waits(readings)
    out.write_text(json.dumps({str(tid): [round(ns / 1e6, 2), n] for tid, (ns, n) in result.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
