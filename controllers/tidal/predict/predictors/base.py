# SPDX-License-Identifier: Apache-2.0
"""The one interface every predictor implements.

A predictor is a small frozen dataclass of parameters with a pure method::

    predict(history: NodeHistory) -> float

that returns P(t), the CPU cores the node's online pods may need from the current decision point
up to the horizon, seeing only ``history`` (samples up to and including now). The node then
offers ``requests − P(t)`` to offline jobs. The result is deterministic in (parameters, history):
predictors keep no state between calls; the history caches the incremental windows they ask
for, which is what makes stepping through a 30-day trace cheap. Every predictor returns a finite
number in ``[0, max(sum of requests, current usage)]`` (see `NodeHistory.bound`), ``0.0`` for an
empty history.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar

from tidal.predict.series import NodeHistory

__all__ = ["Predictor"]


class Predictor(abc.ABC):
    """Base class: ``name`` (the CLI/JSON name) and ``predict``."""

    name: ClassVar[str]

    @abc.abstractmethod
    def predict(self, history: NodeHistory) -> float:
        """Cores the online pods may need over the horizon, from the past only."""

    def describe(self) -> str:
        """Parameters in one line, for the human-readable table."""
        if not dataclasses.is_dataclass(self):
            return ""
        return ", ".join(
            f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr
        )
