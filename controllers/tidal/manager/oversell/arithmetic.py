# SPDX-License-Identifier: Apache-2.0
"""How many oversold (batch) resources a node offers: pure, explainable arithmetic.

    batch = allocatable × cap − predicted online peak − system overhead − safety margin

per resource (CPU in millicores, memory in bytes), clamped at 0, where

- ``cap`` is the policy's ``overselling.ratioPercent``: the share of allocatable that online
  and offline work together may fill;
- the predicted online peak comes from the node's NodeProfile (pods without usage yet count
  at their request there);
- the system overhead is what system daemons use *beyond* the kubelet's reservation, since
  allocatable already excludes the reservation (subtracting the reservation again would
  count it twice). System usage is what the agent measures outside Tidal's pods (node usage
  minus the usage of the pods with a QoS level: pods without one count here, with the daemons). It counts only with ``overselling.includeSystemUsage`` (default true); when
  false, or when the agent reports none (an older agent), the overhead is 0 and the breakdown's
  ``systemOverheadReason`` says which;
- the safety margin is ``overselling.safetyMarginPercent`` of allocatable — of the node, not
  of the predicted peak: a margin relative to the peak would vanish exactly where a prediction
  is least reliable (a node whose online pods have been quiet), and the predictors already put
  their own calibrated margin on the peak. Koordinator's reclaim threshold likewise holds back
  a share of the node.

Every input that is missing, negative, NaN or infinite makes the result 0 with the reason
recorded, never a guess: a node offers no batch resources it cannot justify. (A system usage
that is not reported at all is the exception above: it is optional in the NodeProfile.)
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
    #: measured usage outside the pods; None: not reported (counted as 0, and said so)
    system_usage: float | None = 0.0
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
    #: the measured system usage (None: not reported or invalid), the kubelet's reservation it
    #: is compared with, whether the policy counts it, and where system_overhead came from
    system_usage: int | None = None
    system_reserved: int = 0
    include_system_usage: bool = True
    system_overhead_reason: str = ""

    def to_status(self) -> dict:
        data = asdict(self)
        return {
            "result": data["result"], "allocatable": data["allocatable"], "capPercent": data["cap_percent"],
            "capped": data["capped"], "predictedOnlinePeak": data["predicted_online_peak"],
            "systemOverhead": data["system_overhead"], "safetyMargin": data["safety_margin"],
            "reason": data["reason"], "formula": FORMULA,
            "systemUsage": data["system_usage"], "systemReserved": data["system_reserved"],
            "includeSystemUsage": data["include_system_usage"],
            "systemOverheadReason": data["system_overhead_reason"],
        }


def _usable(value: float | None) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value) and value >= 0


def _system_terms(inputs: ResourceInputs, include: bool) -> tuple[float | None, str]:
    """The system usage to subtract the reservation from (None: invalid input) and the reason."""
    usage, reserved = inputs.system_usage, inputs.system_reserved
    if not include:
        return 0.0, "overselling.includeSystemUsage is false: system usage not subtracted"
    if usage is None:
        return 0.0, "no system usage reported by the agent: counted as 0"
    if not (_usable(usage) and _usable(reserved)):
        return None, ""
    if usage <= reserved:
        return usage, (f"measured system usage {math.ceil(usage)} within the kubelet's reservation "
                       f"{math.ceil(reserved)}: nothing beyond it")
    return usage, (f"measured system usage {math.ceil(usage)} − kubelet's reservation "
                   f"{math.ceil(reserved)}")


def zero_breakdown(reason: str, inputs: ResourceInputs, cap_percent: float, include: bool,
                   overhead_reason: str = "") -> Breakdown:
    """A result of 0 for ``reason``, showing the allocatable and the system terms it knows."""
    alloc = int(inputs.allocatable) if _usable(inputs.allocatable) else 0
    return Breakdown(0, alloc, cap_percent, 0, 0, 0, 0, reason, *_system_fields(inputs, include),
                     overhead_reason)


def _system_fields(inputs: ResourceInputs, include: bool) -> tuple[int | None, int, bool]:
    usage, reserved = inputs.system_usage, inputs.system_reserved
    return (math.ceil(usage) if _usable(usage) else None,
            math.ceil(reserved) if _usable(reserved) else 0, bool(include))


def _share(total: float, percent: float) -> float:
    """``total × percent / 100`` (rounded as that expression is), but without its product
    overflowing to infinity near the float maximum."""
    product = total * percent
    return product / 100 if math.isfinite(product) else total * (percent / 100)


def batch_amount(inputs: ResourceInputs, cap_percent: float, safety_margin_percent: float,
                 include_system_usage: bool = True) -> Breakdown:
    """The batch amount for one resource; never negative, NaN or infinite.

    With ``include_system_usage`` false the system overhead is 0 (the measured usage is still
    shown in the breakdown, and an invalid one is then ignored)."""
    include = include_system_usage
    if not (_usable(cap_percent) and cap_percent <= 100):
        return zero_breakdown(f"invalid cap {cap_percent!r}: must be 0-100", inputs, cap_percent, include)
    if not (_usable(safety_margin_percent) and safety_margin_percent <= 100):
        return zero_breakdown(f"invalid safety margin {safety_margin_percent!r}: must be 0-100",
                     inputs, cap_percent, include)
    system_usage, overhead_reason = _system_terms(inputs, include)
    checked = [("allocatable", inputs.allocatable), ("predicted online peak", inputs.predicted_online_peak)]
    if system_usage is None:
        checked += [("system usage", inputs.system_usage), ("system reservation", inputs.system_reserved)]
    for name, value in checked:
        if not _usable(value):
            return zero_breakdown(f"{name} unknown or invalid ({value!r})", inputs, cap_percent, include, overhead_reason)
    assert system_usage is not None
    allocatable = inputs.allocatable
    capped = _share(allocatable, cap_percent)
    reserved = inputs.system_reserved if _usable(inputs.system_reserved) else 0.0
    overhead = max(0.0, system_usage - reserved) if include else 0.0
    margin = _share(allocatable, safety_margin_percent)
    # the terms as the breakdown shows them (the cap rounded down, what it gives up rounded up),
    # and the result from them: a reader's capped − peak − overhead − margin is the result
    terms = math.floor(capped), math.ceil(inputs.predicted_online_peak), math.ceil(overhead), math.ceil(margin)
    result = max(0, terms[0] - terms[1] - terms[2] - terms[3])
    reason = "ok" if result > 0 else "online peak, overhead and margin fill the capped allocatable"
    return Breakdown(result, int(allocatable), cap_percent, *terms, reason, *_system_fields(inputs, include),
                     overhead_reason)


#: a decrease is written once it reaches this share of the current value, whatever the policy's
#: (larger) threshold: the node must not offer BE much more than was decided
MAX_DECREASE_THRESHOLD_PERCENT = 10


def should_write(current: int | None, desired: int, threshold_percent: float) -> bool:
    """Hysteresis for node updates: write when there is no value yet, when the value crosses 0
    (either way), or when it moved by at least `threshold_percent` of the current value — a
    decrease by at least :data:`MAX_DECREASE_THRESHOLD_PERCENT` whatever the threshold (at 100 %
    no decrease short of 0 was ever written). Small drifts are not written, so the API server is
    not patched in a loop."""
    if current is None:
        return True
    if current == desired:
        return False
    if current == 0 or desired == 0:
        return True
    if desired < current:
        threshold_percent = min(threshold_percent, MAX_DECREASE_THRESHOLD_PERCENT)
    return abs(desired - current) * 100 >= threshold_percent * current
