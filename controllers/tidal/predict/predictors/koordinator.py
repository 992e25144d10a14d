# SPDX-License-Identifier: Apache-2.0
"""Koordinator-style: current usage plus a fixed unreclaimable share of the requests.

Koordinator's slo-controller (``batchresource`` plugin, CPU policy ``usage``) sets
``batch = capacity − capacity × (100 − cpuReclaimThresholdPercent)/100 − system − HP used``.
With the online pods' requests R as the capacity and no system share:

    P(t) = R(t) × (1 − threshold) + u(t)

``threshold`` = 0.65 is Koordinator's default ``cpuReclaimThresholdPercent``; u(t) is the latest
sample (Koordinator reads the pods' usage averaged over its metric window, about one of our
steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tidal.predict.predictors.base import Predictor
from tidal.predict.series import NodeHistory


@dataclass(frozen=True)
class Koordinator(Predictor):
    name: ClassVar[str] = "koordinator"
    threshold: float = 0.65

    def predict(self, history: NodeHistory) -> float:
        if len(history) == 0:
            return 0.0
        r = history.current_request
        return history.bound(r * (1.0 - self.threshold) + history.current_usage)
