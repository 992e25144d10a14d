# SPDX-License-Identifier: Apache-2.0
"""RC-like (Resource Central): the sum over pods of each pod's own usage percentile.

    P(t) = Σ_j quantile_q(u_j over the last window)

Defaults from the traces README reference row (after Bashir et al., EuroSys 2021): q = 95 %
over 24 h. The percentile is linearly interpolated between order statistics (numpy's default),
which is what reproduces the README's 67.9 %. Only series on the node now (request or usage
> 0) count: a pod that left takes its history with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tidal.predict.predictors.base import Predictor
from tidal.predict.series import NodeHistory


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
            v = history.quantile(j, n, self.q)
            if v is not None:
                total += v
        return history.bound(total)
