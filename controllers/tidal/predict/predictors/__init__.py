# SPDX-License-Identifier: Apache-2.0
"""The predictors, one strategy per module, all with `Predictor.predict(history) -> float`.

`REALISABLE` lists the ones that see only the past, in report order; `DEFAULT` is Tidal's own.
`oracle` is built from a whole trace (`Oracle.for_trace`) and is only a benchmark.
"""

from __future__ import annotations

from tidal.predict.predictors.base import Predictor
from tidal.predict.predictors.koordinator import Koordinator
from tidal.predict.predictors.nsigma import NSigma
from tidal.predict.predictors.oracle import Oracle
from tidal.predict.predictors.rc import RC
from tidal.predict.predictors.rc_nsigma_max import RCNSigmaMax
from tidal.predict.predictors.tidal import Tidal
from tidal.predict.predictors.volcano import Volcano

__all__ = [
    "DEFAULT",
    "NAMES",
    "REALISABLE",
    "Koordinator",
    "NSigma",
    "Oracle",
    "Predictor",
    "RC",
    "RCNSigmaMax",
    "Tidal",
    "Volcano",
    "realisable",
]

DEFAULT = Tidal.name
REALISABLE = (Volcano, Koordinator, NSigma, RC, RCNSigmaMax, Tidal)
NAMES = (Oracle.name,) + tuple(p.name for p in REALISABLE)


def realisable(horizon_seconds: float = 3600) -> list[Predictor]:
    """One instance of every realisable predictor with its default parameters."""
    out: list[Predictor] = []
    for cls in REALISABLE:
        out.append(cls(horizon_seconds=horizon_seconds) if cls is Tidal else cls())
    return out
