# SPDX-License-Identifier: Apache-2.0
"""max(RC-like, N-sigma): the safer of a per-pod percentile sum and a node-level N-sigma.

    P(t) = max(RC(q = 95 %, 24 h), N-sigma(n = 3, 2 h))

The combination studied by Bashir et al. (EuroSys 2021) and the README's reference row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from tidal.predict.predictors.base import Predictor
from tidal.predict.predictors.nsigma import NSigma
from tidal.predict.predictors.rc import RC
from tidal.predict.series import NodeHistory


@dataclass(frozen=True)
class RCNSigmaMax(Predictor):
    name: ClassVar[str] = "rc-nsigma-max"
    rc: RC = field(default_factory=RC)
    nsigma: NSigma = field(default_factory=lambda: NSigma(n=3.0))

    def predict(self, history: NodeHistory) -> float:
        return max(self.rc.predict(history), self.nsigma.predict(history))

    def describe(self) -> str:
        return f"max(rc: {self.rc.describe()}; nsigma: {self.nsigma.describe()})"
