# SPDX-License-Identifier: Apache-2.0
"""N-sigma over the node total: mean + n × standard deviation of a recent window.

    P(t) = mean(u_total over the last window) + n × std(…)   (population std)

Defaults from the traces README reference row: a 2 h window and n = 5. With fewer than two
samples the std is 0 and P is the mean (the current usage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tidal.predict.predictors.base import Predictor
from tidal.predict.series import TOTAL, NodeHistory


@dataclass(frozen=True)
class NSigma(Predictor):
    name: ClassVar[str] = "nsigma"
    n: float = 5.0
    window_seconds: float = 2 * 3600

    def predict(self, history: NodeHistory) -> float:
        if len(history) == 0:
            return 0.0
        mean, std, _ = history.mean_std(TOTAL, history.steps(self.window_seconds))
        return history.bound(mean + self.n * std)
