# SPDX-License-Identifier: Apache-2.0
"""Volcano-style: a fixed share of the idle requested CPU, smoothed over recent samples.

Volcano's agent (``pkg/agent/oversubscription``, policy ``extend``) computes at each sample
``oversubscription = (allocatable − usage) × OverSubscriptionRatio / 100`` and reports the
weighted average of its last 10 values with weights 1, 2, 4, …, 512 (newest heaviest). Here the
"allocatable" of the online pods is the sum of their requests R, so

    P(t) = R(t) − ratio × Σ_k w_k · max(0, R_k − u_k) / Σ_k w_k

over the last ``samples`` decision points. ``ratio`` = 0.6 is Volcano's default and Tidal's
policy default (``overselling.ratioPercent`` = 60).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tidal.predict.predictors.base import Predictor
from tidal.predict.series import NodeHistory


@dataclass(frozen=True)
class Volcano(Predictor):
    name: ClassVar[str] = "volcano"
    ratio: float = 0.6
    samples: int = 10

    def predict(self, history: NodeHistory) -> float:
        n = len(history)
        if n == 0:
            return 0.0
        k = min(self.samples, n)
        used = history.total_usage
        req = history.total_request
        weight = 1.0
        num = den = 0.0
        for i in range(n - k, n):  # oldest first, weight doubling
            num += weight * max(0.0, req[i] - used[i])
            den += weight
            weight *= 2.0
        return history.bound(history.current_request - self.ratio * num / den)
