# SPDX-License-Identifier: Apache-2.0
"""From a Node and its NodeProfile to the batch resources the node should offer (pure).

The NodeProfile contract the agent writes (``status``, typed in ``tidal.api.node_profile``):

    observedAt: RFC 3339 time of the agent's last report
    predictions:
      predictor: name of the predictor the agent ran
      onlinePeak:  {cpuMillicores, memoryBytes}   # pods without usage yet count at their request
      systemUsage: {cpuMillicores, memoryBytes}   # optional: usage outside the pods (node − every
                                                  # pod); counted only with overselling.includeSystemUsage

A report older than the degrade time, or none at all, drives the node's batch resources to
0 (not to the last value). Per-node overrides come from node annotations
``colocation.tidal.io/oversell-ratio-percent`` and
``colocation.tidal.io/oversell-safety-margin-percent``; an invalid one is ignored and named.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Mapping

from tidal.api import qos
from tidal.api.node_profile import NodeProfileStatus
from tidal.api.quantities import QuantityError, cpu_millicores, memory_bytes
from tidal.manager.oversell.arithmetic import Breakdown, ResourceInputs, batch_amount

RATIO_OVERRIDE_ANNOTATION = qos.OVERSELL_RATIO_ANNOTATION
MARGIN_OVERRIDE_ANNOTATION = qos.OVERSELL_SAFETY_MARGIN_ANNOTATION
RESOURCES = (("cpu", "cpuMillicores", qos.BATCH_CPU_RESOURCE, cpu_millicores),
             ("memory", "memoryBytes", qos.BATCH_MEMORY_RESOURCE, memory_bytes))


@dataclass(frozen=True)
class OversellSettings:
    """The policy's overselling part, as the master uses it."""

    ratio_percent: float = 60
    safety_margin_percent: float = 10
    degrade_seconds: float = 180
    change_threshold_percent: float = 10
    reporting_mode: str = "extendedResources"
    include_system_usage: bool = True

    @classmethod
    def from_policy(cls, policy) -> "OversellSettings":
        o = policy.overselling
        return cls(o.ratio_percent, o.safety_margin_percent, o.degrade_seconds,
                   o.change_threshold_percent, str(getattr(o.reporting_mode, "value", o.reporting_mode)),
                   o.include_system_usage)


@dataclass(frozen=True)
class NodeDecision:
    node: str
    cpu: Breakdown
    memory: Breakdown
    predictor: str | None
    profile_observed_at: str | None
    notes: tuple[str, ...] = field(default=())

    @property
    def amounts(self) -> dict[str, int]:
        return {qos.BATCH_CPU_RESOURCE: self.cpu.result, qos.BATCH_MEMORY_RESOURCE: self.memory.result}

    def to_status(self, now: datetime.datetime) -> dict[str, Any]:
        return {"computedAt": _rfc3339(now), "predictor": self.predictor,
                "profileObservedAt": self.profile_observed_at, "notes": list(self.notes),
                "cpuMillicores": self.cpu.to_status(), "memoryBytes": self.memory.to_status()}


def _rfc3339(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: Any) -> datetime.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)


def _override(annotations: Mapping[str, str], key: str, default: float, notes: list[str]) -> float:
    raw = annotations.get(key)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 100:
        notes.append(f"annotation {key}={raw!r} ignored: must be a number 0-100; using {default}")
        return default
    notes.append(f"annotation {key}={raw} overrides the policy ({default})")
    return value


def _number(mapping: Any, *keys: str) -> float | None:
    for key in keys:
        if not isinstance(mapping, Mapping):
            return None
        mapping = mapping.get(key)
    return float(mapping) if isinstance(mapping, (int, float)) and not isinstance(mapping, bool) else None


def _quantity(resources: Mapping[str, Any] | None, name: str, parse) -> float | None:
    if not resources or name not in resources:
        return None
    try:
        return float(parse(resources[name]))
    except (QuantityError, TypeError, ValueError):
        return None


def decide_node(node: Mapping[str, Any], profile: Mapping[str, Any] | None, settings: OversellSettings,
                now: datetime.datetime) -> NodeDecision:
    """The batch resources `node` should offer now, with the breakdown of how."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    annotations = meta.get("annotations") or {}
    notes: list[str] = []
    ratio = _override(annotations, RATIO_OVERRIDE_ANNOTATION, settings.ratio_percent, notes)
    margin = _override(annotations, MARGIN_OVERRIDE_ANNOTATION, settings.safety_margin_percent, notes)
    report = NodeProfileStatus.from_status((profile or {}).get("status"))
    observed = _parse_time(report.observed_at)
    predictions = report.predictions or {}
    fresh = observed is not None and (now - observed).total_seconds() <= settings.degrade_seconds
    if profile is None:
        notes.append("no NodeProfile: batch resources are 0 until the agent reports")
    elif observed is None:
        notes.append("NodeProfile has no observedAt: batch resources are 0")
    elif not fresh:
        age = (now - observed).total_seconds()
        notes.append(f"NodeProfile is stale ({age:.0f}s old > degrade time {settings.degrade_seconds:.0f}s): "
                     f"batch resources are 0")
    breakdowns = {}
    for resource, key, _, parse in RESOURCES:
        allocatable = _quantity(status.get("allocatable"), resource, parse)
        capacity = _quantity(status.get("capacity"), resource, parse)
        reserved = max(0.0, capacity - allocatable) if capacity is not None and allocatable is not None else 0.0
        peak = _number(predictions, "onlinePeak", key) if fresh else None
        system = predictions.get("systemUsage") if isinstance(predictions, Mapping) else None
        # absent: an agent that does not measure it (counted as 0, said so); present but not a
        # number: invalid (batch 0 with the reason, when the policy counts it)
        system_usage = None
        if isinstance(system, Mapping) and key in system:
            system_usage = _number(system, key)
            system_usage = float("nan") if system_usage is None else system_usage
        inputs = ResourceInputs(allocatable=allocatable if allocatable is not None else float("nan"),
                                predicted_online_peak=peak,
                                system_usage=system_usage,
                                system_reserved=reserved)
        breakdowns[resource] = batch_amount(inputs, ratio, margin, settings.include_system_usage)
    predictor = predictions.get("predictor") if isinstance(predictions.get("predictor"), str) else None
    return NodeDecision(meta.get("name", ""), breakdowns["cpu"], breakdowns["memory"], predictor,
                        report.observed_at,
                        tuple(notes))


def current_amounts(node: Mapping[str, Any], reporting_mode: str) -> dict[str, int | None]:
    """The batch amounts the node carries now, in the given reporting mode."""
    out: dict[str, int | None] = {}
    if reporting_mode == "volcanoAnnotations":
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        for name, annotation in ((qos.BATCH_CPU_RESOURCE, VOLCANO_CPU_ANNOTATION),
                                 (qos.BATCH_MEMORY_RESOURCE, VOLCANO_MEMORY_ANNOTATION)):
            try:
                out[name] = int(float(annotations[annotation]))
            except (KeyError, ValueError):
                out[name] = None
        return out
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    for _, _, name, _ in RESOURCES:
        try:
            out[name] = int(memory_bytes(allocatable[name])) if name in allocatable else None
        except QuantityError:
            out[name] = None
    return out


VOLCANO_OVERSUBSCRIPTION_LABEL = qos.VOLCANO_OVERSUBSCRIPTION_LABEL
VOLCANO_CPU_ANNOTATION = qos.VOLCANO_OVERSUBSCRIPTION_CPU_ANNOTATION
VOLCANO_MEMORY_ANNOTATION = qos.VOLCANO_OVERSUBSCRIPTION_MEMORY_ANNOTATION
