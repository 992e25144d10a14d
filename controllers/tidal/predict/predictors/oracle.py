# SPDX-License-Identifier: Apache-2.0
"""The peak oracle: the true maximum of the node total over (t, t + horizon].

Not a realisable predictor: it is built from the whole trace and looks into the future. It is
the benchmark's upper bound (no violations, the most any safe predictor can reclaim). Near the
end of the trace it takes the maximum of what is left, and at the last sample the current usage.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from tidal.predict.predictors.base import Predictor
from tidal.predict.series import NodeHistory, Trace


def future_max(values: Sequence[float], k: int) -> list[float]:
    """out[i] = max(values[i+1 : i+1+k]) (truncated at the end; values[i] for the last i)."""
    n = len(values)
    out = [0.0] * n
    mono: deque[int] = deque()  # indices, values decreasing
    # Walk backwards: the window for i is (i, i+k].
    for i in range(n - 1, -1, -1):
        j = i + 1
        if j < n:
            while mono and values[mono[-1]] <= values[j]:
                mono.pop()
            mono.append(j)
        while mono and mono[0] > i + k:
            mono.popleft()
        out[i] = values[mono[0]] if mono else values[i]
    return out


@dataclass(frozen=True)
class Oracle(Predictor):
    name: ClassVar[str] = "oracle"
    horizon_steps: int = 12
    future: tuple[float, ...] = field(default=(), repr=False)

    @classmethod
    def for_trace(cls, trace: Trace, horizon_seconds: float) -> Oracle:
        k = max(1, round(horizon_seconds / trace.step))
        return cls(horizon_steps=k, future=tuple(future_max(trace.total_usage, k)))

    def predict(self, history: NodeHistory) -> float:
        i = len(history) - 1
        if i < 0:
            return 0.0
        if i >= len(self.future):
            raise ValueError("the oracle was built for a shorter trace than this history")
        return max(0.0, self.future[i])

    def describe(self) -> str:
        return f"horizon_steps={self.horizon_steps} (sees the future)"
