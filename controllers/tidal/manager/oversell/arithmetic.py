"""How many oversold (batch) resources a node offers: pure, explainable arithmetic.

    batch = allocatable × cap − predicted online peak − system overhead − safety margin

per resource (CPU in millicores, memory in bytes), clamped at 0, where

- ``cap`` is the policy's ``overselling.ratioPercent``: the share of allocatable that online
  and offline work together may fill;
- the predicted online peak comes from the node's NodeProfile (pods without usage yet count
  at their request there);
- the system overhead is what system daemons use *beyond* the kubelet's reservation, since
  allocatable already excludes the reservation (subtracting the reservation again would
  count it twice);
- the safety margin is ``overselling.safetyMarginPercent`` of allocatable.

Every input that is missing, negative, NaN or infinite makes the result 0 with the reason
recorded, never a guess: a node offers no batch resources it cannot justify.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

FORMULA = "max(0, allocatable × cap − predictedOnlinePeak − systemOverhead − safetyMargin)"


@dataclass(frozen=True)
class ResourceInputs:
    """Inputs for one resource, in its unit (millicores or bytes)."""

    allocatable: float
    predicted_online_peak: float | None
    system_usage: float = 0.0
    system_reserved: float = 0.0


@dataclass(frozen=True)
class Breakdown:
    """The result for one resource and everything that produced it (shown in NodeProfile)."""

    result: int
    allocatable: int
    cap_percent: float
    capped: int
    predicted_online_peak: int
    system_overhead: int
    safety_margin: int
    reason: str

    def to_status(self) -> dict:
        data = asdict(self)
        return {
            "result": data["result"], "allocatable": data["allocatable"], "capPercent": data["cap_percent"],
            "capped": data["capped"], "predictedOnlinePeak": data["predicted_online_peak"],
            "systemOverhead": data["system_overhead"], "safetyMargin": data["safety_margin"],
            "reason": data["reason"], "formula": FORMULA,
        }


def _usable(value: float | None) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value) and value >= 0


def _zero(reason: str, allocatable: float, cap_percent: float) -> Breakdown:
    alloc = int(allocatable) if _usable(allocatable) else 0
    return Breakdown(0, alloc, cap_percent, 0, 0, 0, 0, reason)


def batch_amount(inputs: ResourceInputs, cap_percent: float, safety_margin_percent: float) -> Breakdown:
    """The batch amount for one resource; never negative, NaN or infinite."""
    if not (_usable(cap_percent) and cap_percent <= 100):
        return _zero(f"invalid cap {cap_percent!r}: must be 0-100", inputs.allocatable, cap_percent)
    if not (_usable(safety_margin_percent) and safety_margin_percent <= 100):
        return _zero(f"invalid safety margin {safety_margin_percent!r}: must be 0-100",
                     inputs.allocatable, cap_percent)
    for name, value in (("allocatable", inputs.allocatable),
                        ("predicted online peak", inputs.predicted_online_peak),
                        ("system usage", inputs.system_usage),
                        ("system reservation", inputs.system_reserved)):
        if not _usable(value):
            return _zero(f"{name} unknown or invalid ({value!r})", inputs.allocatable, cap_percent)
    allocatable = inputs.allocatable
    capped = allocatable * cap_percent / 100
    overhead = max(0.0, inputs.system_usage - inputs.system_reserved)
    margin = allocatable * safety_margin_percent / 100
    raw = capped - inputs.predicted_online_peak - overhead - margin
    result = max(0, math.floor(raw))
    reason = "ok" if result > 0 else "online peak, overhead and margin fill the capped allocatable"
    return Breakdown(result, int(allocatable), cap_percent, int(capped), math.ceil(inputs.predicted_online_peak),
                     math.ceil(overhead), math.ceil(margin), reason)


def should_write(current: int | None, desired: int, threshold_percent: float) -> bool:
    """Hysteresis for node updates: write when there is no value yet, when the value crosses 0
    (either way), or when it moved by at least `threshold_percent` of the current value.
    Small drifts are not written, so the API server is not patched in a loop."""
    if current is None:
        return True
    if current == desired:
        return False
    if current == 0 or desired == 0:
        return True
    return abs(desired - current) * 100 >= threshold_percent * current
