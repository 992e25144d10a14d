# SPDX-License-Identifier: Apache-2.0
"""RC-like (Resource Central): the sum over pods of each pod's own usage percentile.

    P(t) = Σ_j quantile_q(u_j over the last window)

Defaults from the traces README reference row (after Bashir et al., EuroSys 2021): q = 95 %
over 24 h. The percentile is linearly interpolated between order statistics (numpy's default),
which is what reproduces the README's 67.9 %. Only series on the node now (request or usage
> 0) count: a pod that left takes its history with it. A pod's percentile is over the samples
of the window in which it was on the node: before 2026-12-06 the samples before it arrived
counted as usage 0, so a pod that arrived within the last day was predicted at about nothing
for its first 5 % of a day (72 minutes) — a violation per arrival, found by fuzzing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tidal.predict.predictors.base import Predictor
from tidal.predict.series import NodeHistory
from tidal.predict.windows import linear_quantile


@dataclass(frozen=True)
class RC(Predictor):
    name: ClassVar[str] = "rc"
    q: float = 0.95
    window_seconds: float = 24 * 3600

    def predict(self, history: NodeHistory) -> float:
        if len(history) == 0:
            return 0.0
        n = history.steps(self.window_seconds)
        total = 0.0
        for j in range(len(history.series_ids)):
            if history.request(j)[-1] <= 0.0 and history.usage(j)[-1] <= 0.0:
                continue
            window = history.sorted_window(j, n)
            # the samples the pod was not on the node are zeros at the window's front: left out
            mean, _, count = history.mean_std(_absent(history, j), n)
            total += linear_quantile(window, self.q, start=round(mean * count))
        return history.bound(total)


def _absent(history: NodeHistory, j: int) -> str:
    """The name of series ``j``'s derived 0/1 series: 1 where it was not on the node."""
    name = f"rc:absent:{j}"
    history.derived(name, lambda h, s: 1.0 if h.usage(j)[s] <= 0.0 and h.request(j)[s] <= 0.0 else 0.0)
    return name
