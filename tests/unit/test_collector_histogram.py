"""tidal.agent.collector.histogram: decaying histogram and sliding-window aggregates."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tidal.agent.collector.histogram import (
    CPU_MILLICORES_BUCKETS,
    MEMORY_BYTES_BUCKETS,
    DecayingHistogram,
    ExponentialBuckets,
    WindowAggregate,
    WindowStats,
    percentile_of_sorted,
)

HOUR = 3600.0
QUANTILES = (0.0, 0.1, 0.5, 0.9, 0.95, 0.99, 1.0)


def exact(values, q):
    """Independent reference: statistics.quantiles' inclusive method is numpy's 'linear'."""
    ordered = sorted(values)
    if q == 0:
        return ordered[0]
    if q == 1:
        return ordered[-1]
    cuts = statistics.quantiles(ordered, n=1000, method="inclusive")
    return cuts[round(q * 1000) - 1]


# --- Buckets ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "buckets", [CPU_MILLICORES_BUCKETS, MEMORY_BYTES_BUCKETS, ExponentialBuckets(1.0, 2.0, 1000.0)]
)
def test_every_value_lands_in_the_bucket_that_covers_it(buckets):
    for i in range(buckets.num_buckets - 1):
        start, end = buckets.start(i), buckets.start(i + 1)
        assert buckets.find(start) == i
        assert buckets.find(math.nextafter(end, 0)) == i
        assert buckets.find((start + end) / 2) == i
    assert buckets.find(0.0) == 0
    assert buckets.find(buckets.max_value * 10) == buckets.num_buckets - 1


def test_default_buckets_are_vpas_and_their_count_is_the_memory_bound():
    # 10 m .. 1000 cores and 10 MB .. 1 TB, 5 % growth: 176 buckets each
    assert CPU_MILLICORES_BUCKETS.num_buckets == MEMORY_BYTES_BUCKETS.num_buckets == 176
    assert CPU_MILLICORES_BUCKETS.start(CPU_MILLICORES_BUCKETS.num_buckets - 1) >= 1_000_000
    assert DecayingHistogram(CPU_MILLICORES_BUCKETS, HOUR).memory_bytes == 3 * 176 * 8


@pytest.mark.parametrize(
    "kwargs", [dict(first_bucket_size=0, ratio=1.05, max_value=10), dict(first_bucket_size=1, ratio=1.0, max_value=10),
               dict(first_bucket_size=10, ratio=1.05, max_value=5)]
)
def test_bad_bucket_parameters_are_rejected(kwargs):
    with pytest.raises(ValueError):
        ExponentialBuckets(**kwargs)


# --- Decaying histogram: percentiles ---------------------------------------------------------


def filled(values, buckets=CPU_MILLICORES_BUCKETS, half_life=HOUR, now=0.0):
    histogram = DecayingHistogram(buckets, half_life)
    for value in values:
        histogram.add(value, 1.0, now)
    return histogram


def bucket_width(value):
    i = CPU_MILLICORES_BUCKETS.find(value)
    return CPU_MILLICORES_BUCKETS.start(i + 1) - CPU_MILLICORES_BUCKETS.start(i)


@pytest.mark.parametrize(
    ("name", "values", "smooth"),
    [
        ("uniform 1..2000 millicores", [float(v) for v in range(1, 2001)], True),
        ("lognormal CPU", [random.Random(7).lognormvariate(6, 1) for _ in range(5000)], True),
        ("bimodal idle/busy", [50.0] * 700 + [1800.0 + i for i in range(300)], False),
        ("heavy tail", [100.0] * 990 + [10_000.0 * (i + 1) for i in range(10)], False),
    ],
)
def test_percentiles_match_exact_percentiles_within_one_bucket(name, values, smooth):
    histogram = filled(values)
    ordered = sorted(values)
    for q in QUANTILES:
        got = histogram.percentile(q)
        # Between the two samples whose ranks bracket q, give or take one bucket. (Across a gap
        # in the data, e.g. p99 of the heavy tail, the exact value interpolates between ranks
        # 990 and 991; the histogram answers the one it falls on.)
        rank = q * (len(ordered) - 1)
        below, above = ordered[math.floor(rank)], ordered[math.ceil(rank)]
        assert below - bucket_width(below) <= got <= above + bucket_width(above), (name, q)
        if smooth:  # dense data: within one bucket of the exact value itself
            truth = exact(values, q)
            assert abs(got - truth) <= bucket_width(truth), (name, q)
    assert histogram.max() == max(values)
    assert histogram.min() == min(values)
    assert histogram.avg() == pytest.approx(statistics.fmean(values), rel=1e-9)


@pytest.mark.parametrize("value", [0.0, 3.0, 250.0, 1234.5, 5e6])
def test_a_constant_series_is_answered_exactly(value):
    histogram = filled([value] * 100)
    assert [histogram.percentile(q) for q in QUANTILES] == [value] * len(QUANTILES)
    assert histogram.max() == histogram.avg() == value


def test_memory_percentiles_of_a_steady_pod_are_exact_at_its_plateaus():
    mib = 1 << 20
    histogram = filled([512 * mib] * 900 + [700 * mib] * 100, buckets=MEMORY_BYTES_BUCKETS)
    assert histogram.percentile(0.5) == 512 * mib
    assert histogram.percentile(0.95) == 700 * mib
    assert histogram.max() == 700 * mib


def test_empty_histogram_answers_zero():
    histogram = DecayingHistogram(CPU_MILLICORES_BUCKETS, HOUR)
    assert histogram.is_empty()
    answers = (histogram.percentile(0.9), histogram.max(), histogram.min(), histogram.avg(), histogram.total_weight())
    assert answers == (0.0,) * 5


@given(st.lists(st.floats(min_value=0, max_value=2e6), min_size=1, max_size=200), st.floats(min_value=0, max_value=1))
def test_percentile_is_between_min_and_max_and_monotonic(values, q):
    histogram = filled(values)
    p = histogram.percentile(q)
    assert min(values) <= p <= max(values)
    assert histogram.percentile(min(1.0, q + 0.05)) >= p


def test_weights_count_as_repeated_samples():
    weighted = DecayingHistogram(CPU_MILLICORES_BUCKETS, HOUR)
    weighted.add(100.0, 3.0, 0.0)
    weighted.add(900.0, 1.0, 0.0)
    repeated = filled([100.0] * 3 + [900.0])
    for q in QUANTILES:
        assert weighted.percentile(q) == pytest.approx(repeated.percentile(q))
    assert weighted.avg() == pytest.approx(300.0)


# --- Decaying histogram: decay ----------------------------------------------------------------


def test_a_sample_one_half_life_older_weighs_half():
    histogram = DecayingHistogram(CPU_MILLICORES_BUCKETS, HOUR)
    histogram.add(100.0, 1.0, 0.0)
    histogram.add(1000.0, 1.0, HOUR)
    # weights now 0.5 and 1: the old sample is a third of the total
    assert histogram.total_weight() == pytest.approx(1.5)
    assert histogram.percentile(0.33) == 100.0
    assert histogram.percentile(0.34) == 1000.0
    assert histogram.avg() == pytest.approx((100 * 0.5 + 1000 * 1) / 1.5)


def test_an_old_spike_leaves_max_once_its_weight_has_decayed_away():
    histogram = DecayingHistogram(CPU_MILLICORES_BUCKETS, HOUR)  # min_weight 1e-4: ~13.3 half-lives
    histogram.add(5000.0, 1.0, 0.0)
    histogram.add(100.0, 1.0, 10 * HOUR)
    assert histogram.max() == 5000.0
    histogram.add(100.0, 1.0, 14 * HOUR)
    assert histogram.max() == 100.0
    assert histogram.percentile(1.0) == 100.0


def test_decay_survives_many_renormalisations_and_stays_finite():
    histogram = DecayingHistogram(CPU_MILLICORES_BUCKETS, half_life=60.0)
    for t in range(0, 60 * 1000, 30):  # 1000 half-lives: the reference moves ~10 times
        histogram.add(200.0 if t % 120 else 800.0, 1.0, float(t))
    values = [histogram.percentile(q) for q in QUANTILES] + [histogram.avg(), histogram.max(), histogram.total_weight()]
    assert all(math.isfinite(v) for v in values)
    assert histogram.percentile(0.5) == 200.0 and histogram.max() == 800.0
    # steady state: one sample per 30 s at half-life 60 s weighs 1 / (1 - 2**-0.5)
    assert histogram.total_weight() == pytest.approx(1 / (1 - 2**-0.5), rel=1e-6)
    # 800 is one sample in four (ages 90 s, 210 s, ...): its share of the decayed weight is
    # 2**-1.5 / (1 - 2**-2) of 1 / (1 - 2**-0.5), not a quarter
    share_800 = 2**-1.5 / (1 - 2**-2) * (1 - 2**-0.5)
    assert histogram.avg() == pytest.approx(200 + 600 * share_800, rel=1e-9)


def test_a_sample_far_in_the_past_weighs_nothing_instead_of_underflowing():
    histogram = DecayingHistogram(CPU_MILLICORES_BUCKETS, half_life=1.0)
    histogram.add(100.0, 1.0, 1e6)
    histogram.add(900.0, 1.0, 0.0)  # 10**6 half-lives before the reference
    assert histogram.max() == 100.0
    assert math.isfinite(histogram.avg())


def test_memory_does_not_grow_with_samples():
    histogram = DecayingHistogram(MEMORY_BYTES_BUCKETS, HOUR)
    before = histogram.memory_bytes
    rng = random.Random(1)
    for t in range(20_000):
        histogram.add(rng.uniform(0, 5e11), 1.0, float(t))
    assert histogram.memory_bytes == before == 3 * MEMORY_BYTES_BUCKETS.num_buckets * 8


@pytest.mark.parametrize(
    ("value", "weight", "now", "message"),
    [
        (math.nan, 1.0, 0.0, "value must be a finite number"),
        (math.inf, 1.0, 0.0, "value must be a finite number"),
        (-1.0, 1.0, 0.0, "value must not be negative"),
        (1.0, -1.0, 0.0, "weight must not be negative"),
        (1.0, 1.0, math.nan, "now must be a finite number"),
    ],
)
def test_invalid_samples_are_rejected(value, weight, now, message):
    with pytest.raises(ValueError, match=message):
        DecayingHistogram(CPU_MILLICORES_BUCKETS, HOUR).add(value, weight, now)


def test_bad_quantile_is_rejected():
    with pytest.raises(ValueError, match=r"fraction in \[0, 1\]"):
        filled([1.0]).percentile(95)


# --- Window aggregates ------------------------------------------------------------------------


def test_window_stats_are_exact_over_each_trailing_window():
    rng = random.Random(3)
    aggregate = WindowAggregate((60, 300, 1800), sample_interval=1.0)
    values = [rng.uniform(0, 4000) for _ in range(2000)]
    for t, value in enumerate(values):
        aggregate.add(value, float(t))
    now = float(len(values) - 1)
    for window, stats in aggregate.summary(now).items():
        in_window = values[-window:]
        assert stats.samples == window
        assert stats.avg == pytest.approx(statistics.fmean(in_window))
        assert stats.max == max(in_window)
        for q, got in ((0.5, stats.p50), (0.9, stats.p90), (0.95, stats.p95), (0.99, stats.p99)):
            assert got == pytest.approx(exact(in_window, q)), (window, q)


def test_window_includes_samples_after_its_start_and_up_to_now():
    aggregate = WindowAggregate((60,))
    aggregate.add(1.0, 100.0)  # exactly 60 s before now: outside
    aggregate.add(2.0, 100.5)
    aggregate.add(3.0, 160.0)
    stats = aggregate.stats(60, now=160.0)
    assert (stats.samples, stats.max) == (2, 3.0)
    early = aggregate.stats(60, now=159.0)  # "now" before the newest sample: it is left out
    assert (early.samples, early.max) == (2, 2.0)
    assert aggregate.stats(60, now=1000.0) is None


def test_window_memory_is_bounded_by_capacity_whatever_the_sample_count():
    aggregate = WindowAggregate((60, 300, 1800), sample_interval=1.0)
    assert aggregate.capacity == 2250 and aggregate.memory_bytes == 2250 * 16
    for t in range(10 * aggregate.capacity):
        aggregate.add(float(t), t * 0.1)  # ten times faster than planned
    assert len(aggregate) == aggregate.capacity and aggregate.memory_bytes == 2250 * 16
    stats = aggregate.stats(1800, now=(10 * aggregate.capacity - 1) * 0.1)
    assert stats.samples == aggregate.capacity  # the window covers fewer seconds, never more memory


def test_jittery_one_second_sampling_still_fills_the_longest_window():
    aggregate = WindowAggregate((60, 1800), sample_interval=1.0)
    rng = random.Random(5)
    t = 0.0
    for _ in range(4000):
        t += rng.uniform(0.85, 1.0)
        aggregate.add(1.0, t)
    assert aggregate.stats(1800, now=t).samples >= 1800


def test_time_going_backwards_is_rejected():
    aggregate = WindowAggregate((60,))
    aggregate.add(1.0, 10.0)
    with pytest.raises(ValueError, match="time went backwards"):
        aggregate.add(1.0, 9.0)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([5.0], 0.99, 5.0), ([1.0, 2.0], 0.5, 1.5), ([1.0, 2.0, 3.0, 4.0], 0.9, 3.7), ([0.0, 10.0], 1.0, 10.0)],
)
def test_percentile_of_sorted_interpolates_between_ranks(values, q, expected):
    assert percentile_of_sorted(values, q) == pytest.approx(expected)


def test_window_stats_of_known_values():
    stats = WindowStats.of(60, [4.0, 1.0, 3.0, 2.0])
    assert (stats.window_seconds, stats.samples, stats.max) == (60, 4, 4.0)
    got = (stats.avg, stats.p50, stats.p90, stats.p95, stats.p99)
    assert got == pytest.approx((2.5, 2.5, 3.7, 3.85, 3.97))
