# SPDX-License-Identifier: Apache-2.0
"""Bounded-memory usage statistics: a decaying histogram and exact sliding-window aggregates.

:class:`DecayingHistogram` is the Vertical Pod Autoscaler's decaying exponential histogram (also
what Koordinator's predictor builds on): fixed buckets whose sizes grow geometrically, each
sample weighted by ``2 ** ((t - reference) / half_life)`` so that old samples fade without
touching every bucket on every add; the reference time moves forward (and the weights are
rescaled) when the exponent grows large. Unlike VPA, each bucket also keeps the smallest and the
largest value it has seen, so percentiles interpolate between real values and a bucket filled
with one repeated value answers exactly. Memory: three arrays of ``num_buckets`` doubles,
whatever the number of samples (4,224 bytes with the default CPU or memory buckets: 176 buckets).

:class:`WindowAggregate` answers avg/p50/p90/p95/p99/max over several trailing windows exactly,
from a ring buffer of (time, value) pairs sized for the longest window at the expected sample
interval plus headroom for jitter: ``capacity = ceil(longest_window / sample_interval * 1.25)``,
16 bytes per slot (36,000 bytes for windows up to 1800 s at 1 s). When samples come faster than
that for long, the oldest are overwritten: the longest window then covers fewer seconds (its
``samples`` count shows it); memory never grows.

Everything is deterministic given the timestamps passed in; nothing reads a clock.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "ExponentialBuckets",
    "CPU_MILLICORES_BUCKETS",
    "MEMORY_BYTES_BUCKETS",
    "DecayingHistogram",
    "WindowStats",
    "WindowAggregate",
    "DEFAULT_WINDOWS",
    "percentile_of_sorted",
]

#: Rescale the weights when they exceed 2**MAX_DECAY_EXPONENT (as VPA does).
MAX_DECAY_EXPONENT = 100.0


def _check_finite(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class ExponentialBuckets:
    """Geometrically growing buckets, as in VPA.

    Bucket ``i`` covers ``[start(i), start(i+1))`` with
    ``start(i) = first_bucket_size * (ratio**i - 1) / (ratio - 1)``: the first bucket is
    ``first_bucket_size`` wide and each next one ``ratio`` times wider, up to ``max_value``;
    larger values go into the last bucket.
    """

    first_bucket_size: float
    ratio: float
    max_value: float
    num_buckets: int = field(init=False)

    def __post_init__(self) -> None:
        first, ratio = self.first_bucket_size, self.ratio
        if not (first > 0 and ratio > 1 and self.max_value > first):
            raise ValueError(
                "ExponentialBuckets needs first_bucket_size > 0, ratio > 1 and max_value > "
                f"first_bucket_size, got first_bucket_size={self.first_bucket_size!r}, "
                f"ratio={self.ratio!r}, max_value={self.max_value!r}"
            )
        n = math.ceil(math.log(self.max_value * (ratio - 1) / first + 1, ratio))
        object.__setattr__(self, "num_buckets", n + 1)

    def start(self, index: int) -> float:
        return self.first_bucket_size * (self.ratio**index - 1) / (self.ratio - 1)

    def find(self, value: float) -> int:
        if value < self.first_bucket_size:
            return 0
        index = int(math.log(value * (self.ratio - 1) / self.first_bucket_size + 1, self.ratio))
        # log() may land one off at a bucket boundary.
        if self.start(index) > value:
            index -= 1
        elif self.start(index + 1) <= value:
            index += 1
        return max(0, min(index, self.num_buckets - 1))


#: VPA's CPU buckets: 10 millicores first, 5 % growth, up to 1000 cores.
CPU_MILLICORES_BUCKETS = ExponentialBuckets(10.0, 1.05, 1_000_000.0)
#: VPA's memory buckets: 10 MB first, 5 % growth, up to 1 TB.
MEMORY_BYTES_BUCKETS = ExponentialBuckets(1e7, 1.05, 1e12)


class DecayingHistogram:
    """A histogram whose sample weights halve every ``half_life`` seconds.

    ``percentile``, ``max``, ``min`` and ``avg`` describe the samples as of the latest ``add``
    time. A bucket whose decayed weight has fallen below ``min_weight`` no longer counts
    (with weight-1 samples that is ~13 half-lives after the last sample in it at the default).
    An empty histogram answers 0.0.
    """

    def __init__(
        self, buckets: ExponentialBuckets, half_life: float, min_weight: float = 1e-4
    ) -> None:
        if not (math.isfinite(half_life) and half_life > 0):
            raise ValueError(f"half_life must be positive seconds, got {half_life!r}")
        if not (math.isfinite(min_weight) and min_weight > 0):
            raise ValueError(f"min_weight must be positive, got {min_weight!r}")
        self.buckets = buckets
        self.half_life = float(half_life)
        self.min_weight = float(min_weight)
        n = buckets.num_buckets
        self._weights = array("d", bytes(8 * n))
        self._lo = array("d", bytes(8 * n))
        self._hi = array("d", bytes(8 * n))
        self._reference: float | None = None  # stored weights are relative to this time
        self._last: float | None = None  # latest add time: "now" for the queries
        self._weighted_sum = 0.0
        self._total = 0.0

    # -- sizes --

    @property
    def memory_bytes(self) -> int:
        """Bytes of sample storage: fixed at construction."""
        return sum(a.itemsize * len(a) for a in (self._weights, self._lo, self._hi))

    # -- updates --

    def add(self, value: float, weight: float, now: float) -> None:
        value = _check_finite("value", value)
        weight = _check_finite("weight", weight)
        now = _check_finite("now", now)
        if value < 0:
            raise ValueError(f"value must not be negative, got {value}")
        if weight < 0:
            raise ValueError(f"weight must not be negative, got {weight}")
        if weight == 0:
            return
        if self._reference is None:
            self._reference = now
        exponent = (now - self._reference) / self.half_life
        if exponent > MAX_DECAY_EXPONENT:
            self._shift_reference(now)
            exponent = 0.0
        scaled = weight * 2.0**exponent
        if scaled == 0.0:  # far older than the reference: it would weigh nothing
            return
        i = self.buckets.find(value)
        if self._weights[i] == 0.0:
            self._lo[i] = self._hi[i] = value
        else:
            self._lo[i] = min(self._lo[i], value)
            self._hi[i] = max(self._hi[i], value)
        self._weights[i] += scaled
        self._total += scaled
        self._weighted_sum += scaled * value
        self._last = now if self._last is None else max(self._last, now)

    def _shift_reference(self, new_reference: float) -> None:
        assert self._reference is not None
        factor = 2.0 ** ((self._reference - new_reference) / self.half_life)
        self._reference = new_reference
        total = 0.0
        for i, w in enumerate(self._weights):
            if w == 0.0:
                continue
            w *= factor
            if w < self.min_weight:  # garbage-collect what no query counts any more
                self._weighted_sum -= self._weights[i] * (self._lo[i] + self._hi[i]) / 2
                w = 0.0
            self._weights[i] = w
            total += w
        self._total = total
        self._weighted_sum = max(0.0, self._weighted_sum * factor)

    # -- queries --

    def _live_threshold(self) -> float:
        """min_weight expressed in stored (reference-relative) weight units."""
        if self._reference is None or self._last is None:
            return math.inf
        return self.min_weight * 2.0 ** ((self._last - self._reference) / self.half_life)

    def _live(self) -> list[int]:
        threshold = self._live_threshold()
        return [i for i, w in enumerate(self._weights) if w > 0.0 and w >= threshold]

    def is_empty(self) -> bool:
        return not self._live()

    def total_weight(self) -> float:
        """The decayed weight of all samples, as of the latest add."""
        if self._reference is None or self._last is None:
            return 0.0
        return self._total * 2.0 ** ((self._reference - self._last) / self.half_life)

    def percentile(self, q: float) -> float:
        """The ``q``-quantile (0 <= q <= 1), interpolated inside the bucket that holds it."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"percentile takes a fraction in [0, 1], got {q!r}")
        live = self._live()
        if not live:
            return 0.0
        total = sum(self._weights[i] for i in live)
        target = q * total
        cumulative = 0.0
        for i in live:
            w = self._weights[i]
            if cumulative + w >= target:
                fraction = min(1.0, max(0.0, (target - cumulative) / w))
                return self._lo[i] + fraction * (self._hi[i] - self._lo[i])
            cumulative += w
        return self._hi[live[-1]]  # rounding: target slightly above the sum

    def max(self) -> float:
        live = self._live()
        return self._hi[live[-1]] if live else 0.0

    def min(self) -> float:
        live = self._live()
        return self._lo[live[0]] if live else 0.0

    def avg(self) -> float:
        """The weighted mean of the samples (decayed weights)."""
        return self._weighted_sum / self._total if self._total > 0 else 0.0


# --- Sliding windows --------------------------------------------------------------------------

DEFAULT_WINDOWS = (60, 300, 1800)
_WINDOW_HEADROOM = 1.25


def percentile_of_sorted(values: Sequence[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default), ``0 <= q <= 1``."""
    if not values:
        raise ValueError("percentile of no values")
    position = q * (len(values) - 1)
    below = math.floor(position)
    above = min(below + 1, len(values) - 1)
    return values[below] + (values[above] - values[below]) * (position - below)


@dataclass(frozen=True)
class WindowStats:
    window_seconds: int
    samples: int
    avg: float
    p50: float
    p90: float
    p95: float
    p99: float
    max: float

    @classmethod
    def of(cls, window_seconds: int, values: Iterable[float]) -> WindowStats:
        ordered = sorted(values)
        if not ordered:
            raise ValueError("WindowStats of no values")
        return cls(
            window_seconds=window_seconds,
            samples=len(ordered),
            avg=math.fsum(ordered) / len(ordered),
            p50=percentile_of_sorted(ordered, 0.50),
            p90=percentile_of_sorted(ordered, 0.90),
            p95=percentile_of_sorted(ordered, 0.95),
            p99=percentile_of_sorted(ordered, 0.99),
            max=ordered[-1],
        )


class WindowAggregate:
    """avg/p50/p90/p95/p99/max of one series over several trailing windows (see module doc).

    A sample at time ``t`` is in the window of ``w`` seconds ending at ``now`` when
    ``now - w < t <= now``. Times passed to :meth:`add` must not decrease.
    """

    def __init__(
        self, windows: Iterable[int] = DEFAULT_WINDOWS, sample_interval: float = 1.0
    ) -> None:
        self.windows = tuple(sorted({int(w) for w in windows}))
        if not self.windows or self.windows[0] < 1:
            raise ValueError(f"windows must be positive whole seconds, got {windows!r}")
        if not (math.isfinite(sample_interval) and sample_interval > 0):
            raise ValueError(f"sample_interval must be positive seconds, got {sample_interval!r}")
        self.capacity = math.ceil(self.windows[-1] / sample_interval * _WINDOW_HEADROOM)
        self._times = array("d", bytes(8 * self.capacity))
        self._values = array("d", bytes(8 * self.capacity))
        self._next = 0  # slot the next sample goes to
        self._count = 0

    @property
    def memory_bytes(self) -> int:
        return self._times.itemsize * self.capacity + self._values.itemsize * self.capacity

    def __len__(self) -> int:
        return self._count

    def add(self, value: float, now: float) -> None:
        value = _check_finite("value", value)
        now = _check_finite("now", now)
        if self._count and now < self._times[(self._next - 1) % self.capacity]:
            raise ValueError(f"time went backwards: {now} is before the previous sample")
        self._times[self._next] = now
        self._values[self._next] = value
        self._next = (self._next + 1) % self.capacity
        self._count = min(self._count + 1, self.capacity)

    def _newest_first(self) -> Iterable[tuple[float, float]]:
        for k in range(1, self._count + 1):
            slot = (self._next - k) % self.capacity
            yield self._times[slot], self._values[slot]

    def stats(self, window_seconds: int, now: float) -> WindowStats | None:
        """Statistics of the window ending at ``now``; None when it holds no sample."""
        start = now - window_seconds
        values = []
        for t, v in self._newest_first():
            if t <= start:
                break
            if t <= now:
                values.append(v)
        return WindowStats.of(window_seconds, values) if values else None

    def summary(self, now: float) -> dict[int, WindowStats | None]:
        """:meth:`stats` of every configured window."""
        return {w: self.stats(w, now) for w in self.windows}
