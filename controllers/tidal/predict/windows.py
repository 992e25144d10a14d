# SPDX-License-Identifier: Apache-2.0
"""Incremental windows over growing sequences: running mean/std, sorted window, max.

Each window follows one append-only sequence (a Python list that only grows). ``sync(seq,
end)`` brings it up to ``seq[:end]`` by feeding only the values it has not seen yet, so
keeping a window current costs O(1) (mean/std, max) or O(log n + n·memmove) (sorted) per
new value instead of a recomputation of the whole window. A window that falls more than
its own length behind (or is used for the first time on a long sequence) restarts from the
last ``n`` values, so its answer never depends on how it was driven: it is always the
answer for the last ``n`` values of ``seq[:end]``.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence

__all__ = ["RollingMax", "RollingSorted", "RollingStats", "linear_quantile"]


def linear_quantile(sorted_values: Sequence[float], q: float, start: int = 0) -> float:
    """The ``q`` quantile (0..1) of already-sorted values (of ``sorted_values[start:]``, without
    copying them), linearly interpolated.

    The same definition as numpy's default (``method="linear"``, Hyndman & Fan type 7):
    position ``q·(n−1)`` between order statistics. Raises ValueError on an empty input.
    """
    n = len(sorted_values) - start
    if n <= 0:
        raise ValueError("quantile of an empty window")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile level {q} outside [0, 1]")
    h = q * (n - 1)
    lo = int(h)
    hi = min(lo + 1, n - 1)
    frac = h - lo
    a = sorted_values[start + lo]
    return a if frac == 0.0 else a + frac * (sorted_values[start + hi] - a)


class _Window:
    """Shared catch-up logic: ``pos`` is how many values of the sequence were consumed."""

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"window length must be ≥ 1, not {n}")
        self.n = n
        self.pos = 0
        self.buf: deque[float] = deque()

    def sync(self, seq: Sequence[float], end: int) -> None:
        if end < self.pos:
            # The caller went back in time (a shorter history): rebuild from scratch.
            self._reset()
            self.pos = 0
        if end - self.pos > self.n:
            self._reset()
            self.pos = end - self.n
        for i in range(self.pos, end):
            x = seq[i]
            self.buf.append(x)
            self._add(x)
            if len(self.buf) > self.n:
                self._remove(self.buf.popleft())
            self._settle()
        self.pos = end

    def __len__(self) -> int:
        return len(self.buf)

    def _reset(self) -> None:
        self.buf.clear()

    def _add(self, x: float) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _remove(self, x: float) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _settle(self) -> None:
        """Called once the window holds its new contents."""


class RollingStats(_Window):
    """Mean and population standard deviation of the last ``n`` values.

    Running sums of deviations from a reference value (re-centred and recomputed exactly with
    ``math.fsum`` every ``n`` updates), so neither drift nor cancellation builds up.
    """

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self._ref = 0.0
        self._s1 = 0.0
        self._s2 = 0.0
        self._updates = 0

    def _reset(self) -> None:
        super()._reset()
        self._s1 = self._s2 = 0.0
        self._updates = 0

    def _add(self, x: float) -> None:
        if len(self.buf) == 1:  # the window was empty: centre on its first value
            self._ref = x
            self._s1 = self._s2 = 0.0
        d = x - self._ref
        self._s1 += d
        self._s2 += d * d
        self._updates += 1

    def _settle(self) -> None:
        if self._updates >= self.n:
            self._recompute()

    def _remove(self, x: float) -> None:
        d = x - self._ref
        self._s1 -= d
        self._s2 -= d * d

    def _recompute(self) -> None:
        buf = self.buf
        if buf:
            self._ref = math.fsum(buf) / len(buf)
        self._s1 = math.fsum(x - self._ref for x in buf)
        self._s2 = math.fsum((x - self._ref) ** 2 for x in buf)
        self._updates = 0

    def mean_std(self) -> tuple[float, float]:
        """(mean, population std) of the window; (0, 0) when it is empty."""
        k = len(self.buf)
        if k == 0:
            return 0.0, 0.0
        m1 = self._s1 / k
        var = self._s2 / k - m1 * m1
        return self._ref + m1, math.sqrt(var) if var > 0.0 else 0.0


class RollingSorted(_Window):
    """The last ``n`` values kept sorted (bisect), for quantiles and order statistics."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.sorted: list[float] = []

    def _reset(self) -> None:
        super()._reset()
        self.sorted.clear()

    def _add(self, x: float) -> None:
        bisect.insort(self.sorted, x)

    def _remove(self, x: float) -> None:
        del self.sorted[bisect.bisect_left(self.sorted, x)]


class RollingMax(_Window):
    """Maximum of the last ``n`` values (monotonic deque of (index, value))."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self._mono: deque[tuple[int, float]] = deque()
        self._count = 0

    def _reset(self) -> None:
        super()._reset()
        self._mono.clear()

    def _add(self, x: float) -> None:
        mono = self._mono
        while mono and mono[-1][1] <= x:
            mono.pop()
        mono.append((self._count, x))
        self._count += 1

    def _remove(self, x: float) -> None:
        # The removed value is the oldest one; drop it if it heads the deque.
        oldest = self._count - len(self.buf) - 1
        if self._mono and self._mono[0][0] <= oldest:
            self._mono.popleft()

    def maximum(self) -> float | None:
        return self._mono[0][1] if self._mono else None
