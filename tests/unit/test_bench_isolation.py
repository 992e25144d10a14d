# SPDX-License-Identifier: Apache-2.0
"""bench/isolation.py's pure parts: the online server's CPU time per request, the summary."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import isolation  # noqa: E402


@pytest.mark.parametrize("before, after, requests, expected", [
    # two threads ran 3 ms and 1 ms over 100 requests: 40 µs each
    ({1: 0, 2: 5_000_000}, {1: 3_000_000, 2: 6_000_000}, 100, 40.0),
    # a thread that came or went has no difference; a reused id (counter went back) neither
    ({1: 0, 2: 9_000_000}, {1: 2_000_000, 3: 7_000_000, 2: 10}, 100, 20.0),
    # nothing served: nothing to say
    ({1: 0}, {1: 1000}, 0, None),
])
def test_cpu_us_per_request(before, after, requests, expected):
    assert isolation.cpu_us_per_request(before, after, requests) == expected


def test_median_of_rounds_carries_the_cpu_per_request():
    runs = [{"p50_ms": 1, "p99_ms": p99, "achieved_rps": 500, "node_busy_pct": 90, "be_ops_per_s": 10,
             "loadavg1": 1, "ls_runqueue_delay_us": 50, "ls_cpu_us_per_request": cpu}
            for p99, cpu in ((2, 40.0), (3, 60.0), (9, 45.0))]
    out = isolation.median_of(runs)
    assert out["p99_ms"] == 3 and out["ls_cpu_us_per_request"] == 45.0
