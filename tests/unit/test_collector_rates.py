"""tidal.agent.collector.rates: counters to cores, never NaN or infinity."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tidal.agent.collector.rates import CounterRates, CounterReading, counter_rate, node_cpu_cores
from tidal.agent.collector.readers import CpuTimes

NS = 1_000_000_000


@pytest.mark.parametrize(
    ("previous", "current", "expected"),
    [
        # one core for one second
        (CounterReading(0, 10.0), CounterReading(NS, 11.0), 1.0),
        (CounterReading(5 * NS, 100.0), CounterReading(8 * NS, 102.0), 1.5),
        # idle
        (CounterReading(7, 1.0), CounterReading(7, 2.0), 0.0),
        # first sample: nothing to compare with
        (None, CounterReading(NS, 1.0), None),
        # zero elapsed time
        (CounterReading(0, 5.0), CounterReading(NS, 5.0), None),
        # clock went backwards
        (CounterReading(0, 5.0), CounterReading(NS, 4.0), None),
        # shorter than the minimum interval
        (CounterReading(0, 5.0), CounterReading(1000, 5.0 + 1e-6), None),
        # counter reset (cgroup recreated)
        (CounterReading(10 * NS, 1.0), CounterReading(NS, 2.0), None),
        # non-finite times
        (CounterReading(0, math.nan), CounterReading(NS, 1.0), None),
        (CounterReading(0, 0.0), CounterReading(NS, math.inf), None),
        (CounterReading(0, -math.inf), CounterReading(NS, 1.0), None),
        # huge counters near 2**64: the difference is still exact
        (CounterReading(2**64 - 3 * NS, 50.0), CounterReading(2**64 - NS, 51.0), 2.0),
        (CounterReading(2**63 + 1, 0.0), CounterReading(2**63 + 1 + NS // 2, 1.0), 0.5),
        # a delta too large for a float gives no rate, not infinity
        (CounterReading(0, 0.0), CounterReading(10**400, 1.0), None),
    ],
)
def test_counter_rate_edge_cases(previous, current, expected):
    rate = counter_rate(previous, current)
    if expected is None:
        assert rate is None
    else:
        assert rate == pytest.approx(expected, rel=1e-12)


@given(
    st.integers(min_value=0, max_value=2**80),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(allow_nan=True, allow_infinity=True),
)
def test_counter_rate_is_never_nan_infinite_or_negative(value, delta, t0, t1):
    rate = counter_rate(CounterReading(value, t0), CounterReading(value + delta, t1))
    assert rate is None or (math.isfinite(rate) and rate >= 0)


def test_tracker_first_sample_then_rate_then_reset_restarts_from_the_new_baseline():
    rates = CounterRates()
    assert rates.update("pod", 100 * NS, 0.0) is None  # first sample
    assert rates.update("pod", 101 * NS, 1.0) == pytest.approx(1.0)
    assert rates.update("pod", 2 * NS, 2.0) is None  # reset: pod cgroup recreated
    assert rates.update("pod", 2 * NS + NS // 4, 3.0) == pytest.approx(0.25)


def test_tracker_keeps_the_older_baseline_when_readings_come_too_fast():
    rates = CounterRates()
    rates.update("pod", 0, 10.0)
    assert rates.update("pod", NS // 1000, 10.0) is None  # zero elapsed
    assert rates.update("pod", NS, 11.0) == pytest.approx(1.0)  # measured over 10.0 -> 11.0


def test_tracker_clock_going_backwards_rebases():
    rates = CounterRates()
    rates.update("pod", 0, 10.0)
    assert rates.update("pod", NS, 5.0) is None
    assert rates.update("pod", 3 * NS, 7.0) == pytest.approx(1.0)


def test_tracker_memory_is_one_reading_per_key_and_retain_forgets_the_rest():
    rates = CounterRates()
    for t in range(100):
        for key in ("a", "b", "c"):
            rates.update(key, t * NS, float(t))
    assert len(rates) == 3
    rates.retain(["a", "z"])
    assert len(rates) == 1 and "a" in rates and "b" not in rates
    assert rates.update("b", 0, 200.0) is None  # forgotten: first sample again


def _times(busy, idle, iowait, cpus=2, steal=0):
    return CpuTimes(total=busy + idle + iowait + steal, idle=idle, iowait=iowait, cpus=cpus, steal=steal)


@pytest.mark.parametrize(
    ("previous", "current", "expected"),
    [
        # 2 CPUs, 100 ticks each per second: 100 busy ticks of 200 = 1 core
        (_times(1000, 5000, 0), _times(1100, 5100, 0), 1.0),
        (_times(0, 0, 0, cpus=4), _times(400, 0, 0, cpus=4), 4.0),
        # iowait is not busy
        (_times(0, 0, 0), _times(50, 50, 100), 0.5),
        # nor is steal (another guest had the CPU), though it is part of the elapsed time
        (_times(0, 0, 0), _times(100, 50, 0, steal=50), 1.0),
        (None, _times(1, 1, 1), None),  # first sample
        (_times(10, 10, 0), _times(10, 10, 0), None),  # no ticks elapsed
        (_times(100, 100, 0), _times(50, 50, 0), None),  # counters went back
        # iowait going backwards (the kernel allows it) cannot push past the CPU count
        (_times(0, 0, 100), CpuTimes(total=300, idle=0, iowait=0, cpus=2), 2.0),
    ],
)
def test_node_cpu_cores_from_proc_stat_deltas(previous, current, expected):
    cores = node_cpu_cores(previous, current)
    if expected is None:
        assert cores is None
    else:
        assert cores == pytest.approx(expected)
