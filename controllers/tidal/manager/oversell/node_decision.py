# SPDX-License-Identifier: Apache-2.0
"""From a Node and its NodeProfile to the batch resources the node should offer (pure).

The NodeProfile contract the agent writes (``status``, typed in ``tidal.api.node_profile``):

    observedAt: RFC 3339 time of the agent's last report
    predictions:
      predictor: name of the predictor the agent ran
      onlinePeak:  {cpuMillicores, memoryBytes}   # pods without usage yet count at their request
      systemUsage: {cpuMillicores, memoryBytes}   # optional: usage outside Tidal's pods (node − the
                                                  # pods with a QoS level); counted only with
                                                  # overselling.includeSystemUsage

Which nodes are oversold is `tidal.api.node_mode`'s rule: Tidal's oversubscription label, or
Volcano's ``volcano.sh/oversubscription`` alias when the master did not write it itself. Any
other node offers no batch resources (a colocation-only node keeps BE pods on native requests),
and a resource the node's oversell types leave out is 0 with the reason.

A report older than the degrade time, or none at all, drives the node's batch resources to
0 (not to the last value). Per-node overrides come from node annotations
``colocation.tidal.io/oversell-ratio-percent`` and
``colocation.tidal.io/oversell-safety-margin-percent``; an invalid one is ignored and named.
"""
from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from tidal.api import qos
from tidal.api.node_mode import VOLCANO_LABEL_WRITTEN_ANNOTATION, Mode, NodeMode, node_mode
from tidal.api.node_profile import NodeProfileStatus
from tidal.api.quantities import QuantityError, cpu_millicores, memory_bytes
from tidal.manager.oversell.arithmetic import Breakdown, ResourceInputs, batch_amount, zero_breakdown

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
    #: ``overselling.enabled``: off, every node offers 0, whatever its annotations
    enabled: bool = True

    @classmethod
    def from_policy(cls, policy) -> "OversellSettings":
        o = policy.overselling
        return cls(o.ratio_percent, o.safety_margin_percent, o.degrade_seconds,
                   o.change_threshold_percent, str(getattr(o.reporting_mode, "value", o.reporting_mode)),
                   o.include_system_usage, o.enabled)


@dataclass(frozen=True)
class NodeDecision:
    node: str
    cpu: Breakdown
    memory: Breakdown
    predictor: str | None
    profile_observed_at: str | None
    notes: tuple[str, ...] = field(default=())
    #: the node's mode (`tidal.api.node_mode.Mode`) the decision was made in
    mode: str | None = None
    #: where each predicted online peak came from (:func:`peak_basis`), as it was when decided
    peak_basis: dict[str, Any] | None = None

    @property
    def amounts(self) -> dict[str, int]:
        return {qos.BATCH_CPU_RESOURCE: self.cpu.result, qos.BATCH_MEMORY_RESOURCE: self.memory.result}

    def to_status(self, now: datetime.datetime) -> dict[str, Any]:
        out = {"computedAt": _rfc3339(now), "predictor": self.predictor,
               "profileObservedAt": self.profile_observed_at, "notes": list(self.notes),
               "cpuMillicores": self.cpu.to_status(), "memoryBytes": self.memory.to_status()}
        if self.mode is not None:
            out["mode"] = self.mode
        # always written (null: none): the status is merge-patched, and a key left out would keep
        # an earlier decision's basis beside this decision's amounts
        out["peakBasis"] = self.peak_basis
        return out


#: The parts of a history predictor's CPU basis that say where its peak came from.
CPU_BASIS_KEYS = ("regime", "rule", "form", "bound", "cpuCores", "provisional")
#: Every key a resource's peak basis may have: each one is written, null when it does not apply
#: (the status is merge-patched: a key left out would keep an earlier decision's value).
BASIS_KEYS = ("statistic", "windowSeconds", "samples", *CPU_BASIS_KEYS)


def peak_basis(predictions: Mapping[str, Any]) -> dict[str, Any] | None:
    """Where the profile's ``onlinePeak`` came from, per resource: a window statistic (the
    statistic predictors: ``<statistic>/<window>s``; memory under the history predictors,
    ``memoryBasis``) or the history predictor's regime, rule, form and any floor or cap
    (``basis``). Kept with the amounts decided from it: ``predictions.basis`` beside it moves
    on with every report, the decision only when its amounts do."""
    out: dict[str, Any] = {}
    predictor, basis, memory = (predictions.get(k) for k in ("predictor", "basis", "memoryBasis"))
    if isinstance(basis, Mapping):
        out["cpu"] = {k: basis[k] for k in CPU_BASIS_KEYS if k in basis}
    statistic = re.fullmatch(r"([a-z0-9]+)/(\d+)s", predictor) if isinstance(predictor, str) else None
    if statistic is not None:  # the statistic predictors report "<statistic>/<window>s"
        for resource in ("cpu", "memory"):
            out.setdefault(resource, {"statistic": statistic[1], "windowSeconds": int(statistic[2])})
    if isinstance(memory, Mapping):
        out["memory"] = dict(memory)
    if not out:
        return None
    return {resource: {k: (out.get(resource) or {}).get(k) for k in BASIS_KEYS} for resource in ("cpu", "memory")}


COLOCATION_ONLY_NOTE = "colocation-only node: BE pods keep native requests, no batch resources"


def mode_of(node: Mapping[str, Any]) -> NodeMode:
    """The node's mode from its labels and annotations (aliases included)."""
    meta = node.get("metadata") or {}
    return node_mode(meta.get("labels"), meta.get("annotations"))


def master_wrote_volcano_label(node: Mapping[str, Any]) -> bool:
    """Whether the node carries the marker the master sets beside the Volcano label it writes."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return annotations.get(VOLCANO_LABEL_WRITTEN_ANNOTATION) == "true"


def not_oversold_note(mode: NodeMode, node: Mapping[str, Any]) -> str:
    """Why a node that is not oversold offers no batch resources, one line."""
    if mode.mode is Mode.COLOCATION:
        return COLOCATION_ONLY_NOTE
    note = (f"node not oversold: neither {qos.OVERSUBSCRIPTION_NODE_LABEL}=true nor its alias "
            f"{VOLCANO_OVERSUBSCRIPTION_LABEL}=true; batch resources 0")
    if master_wrote_volcano_label(node):
        note += (f" ({VOLCANO_OVERSUBSCRIPTION_LABEL} was written by the oversell master itself, "
                 f"{VOLCANO_LABEL_WRITTEN_ANNOTATION}=true: not read as the alias)")
    return note


def volcano_label_changes(node: Mapping[str, Any], mode: NodeMode) -> dict[str, dict[str, str | None]]:
    """In the ``volcanoAnnotations`` reporting mode: the label and annotation changes (None:
    remove) that make ``volcano.sh/oversubscription`` follow the master's decision; empty when
    none is needed.

    - oversold by Tidal's own label: the master writes the Volcano label with its marker (and
      marks a Volcano label already there, which it wrote before the marker existed or which
      only repeats Tidal's label);
    - oversold by the Volcano label alone (a user's input): it is left alone, never marked;
    - not oversold: the label and the marker go, only when the marker says the master wrote them.
    """
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    written = master_wrote_volcano_label(node)
    if mode.oversold and mode.sources.get("oversubscription") == qos.OVERSUBSCRIPTION_NODE_LABEL:
        if labels.get(VOLCANO_OVERSUBSCRIPTION_LABEL) == "true" and written:
            return {}
        return {"labels": {VOLCANO_OVERSUBSCRIPTION_LABEL: "true"},
                "annotations": {VOLCANO_LABEL_WRITTEN_ANNOTATION: "true"}}
    if not mode.oversold and written:
        changes: dict[str, dict[str, str | None]] = {"annotations": {VOLCANO_LABEL_WRITTEN_ANNOTATION: None}}
        if VOLCANO_OVERSUBSCRIPTION_LABEL in labels:
            changes["labels"] = {VOLCANO_OVERSUBSCRIPTION_LABEL: None}
        return changes
    return {}


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
        value = qos.annotation_number(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 100:
        notes.append(f"annotation {key}={qos.shown(raw)} ignored: must be a number 0-100 in ASCII digits; "
                     f"using {default}")
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


#: How far a NodeProfile's observedAt may be ahead of the manager's clock (clock skew between
#: nodes) and still count as fresh.
MAX_CLOCK_SKEW_SECONDS = 60.0


def decide_node(node: Mapping[str, Any], profile: Mapping[str, Any] | None, settings: OversellSettings,
                now: datetime.datetime) -> NodeDecision:
    """The batch resources `node` should offer now, with the breakdown of how.

    A node that is not oversold (its mode, `mode_of`) gets 0 for both, its profile unread; an
    oversold node gets 0 for a resource its oversell types leave out, with the reason."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    annotations = meta.get("annotations") or {}
    mode = mode_of(node)
    if not mode.oversold:
        return _zero(node, mode, settings, not_oversold_note(mode, node))
    if not settings.enabled:  # before the node's own ratio, which would otherwise override the policy's 0
        return _zero(node, mode, settings, DISABLED_NOTE)
    notes: list[str] = [*mode.conflicts, *mode.problems]
    ratio = _override(annotations, RATIO_OVERRIDE_ANNOTATION, settings.ratio_percent, notes)
    margin = _override(annotations, MARGIN_OVERRIDE_ANNOTATION, settings.safety_margin_percent, notes)
    report = NodeProfileStatus.from_status((profile or {}).get("status"))
    observed = _parse_time(report.observed_at)
    predictions = report.predictions or {}
    age = None if observed is None else (now - observed).total_seconds()
    fresh = age is not None and -MAX_CLOCK_SKEW_SECONDS <= age <= settings.degrade_seconds
    if profile is None:
        notes.append("no NodeProfile: batch resources are 0 until the agent reports")
    elif observed is None:
        notes.append("NodeProfile has no observedAt: batch resources are 0")
    elif age < -MAX_CLOCK_SKEW_SECONDS:
        # a report from the future would stay "fresh" long after its agent died
        notes.append(f"NodeProfile observedAt is {-age:.0f}s in the future (more than the "
                     f"{MAX_CLOCK_SKEW_SECONDS:.0f}s of clock skew allowed): the node's clock and the manager's "
                     f"disagree; batch resources are 0")
    elif not fresh:
        age = (now - observed).total_seconds()
        notes.append(f"NodeProfile is stale ({age:.0f}s old > degrade time {settings.degrade_seconds:.0f}s): "
                     f"batch resources are 0")
    elif not report.predictions:
        # the agent's first report comes before its first usage sample (tidal.agent.run.report)
        notes.append("NodeProfile has no prediction yet (the agent predicts from its first usage sample, "
                     "seconds after it starts): batch resources are 0 until it does")
    breakdowns = {}
    for resource, key, batch, parse in RESOURCES:
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
        type_off = mode.type_off_reason(batch)
        if type_off is not None:
            breakdowns[resource] = zero_breakdown(type_off, inputs, ratio, settings.include_system_usage)
        else:
            breakdowns[resource] = batch_amount(inputs, ratio, margin, settings.include_system_usage)
    predictor = predictions.get("predictor") if isinstance(predictions.get("predictor"), str) else None
    return NodeDecision(meta.get("name", ""), breakdowns["cpu"], breakdowns["memory"], predictor,
                        report.observed_at,
                        tuple(notes), str(mode.mode), peak_basis(predictions) if fresh else None)


DISABLED_NOTE = "overselling.enabled is false in the ColocationPolicy: batch resources 0 on every node"


def _zero(node: Mapping[str, Any], mode: NodeMode, settings: OversellSettings, note: str) -> NodeDecision:
    """0 for both resources, for ``note`` (a node not oversold, overselling off); the profile unread."""
    status = node.get("status") or {}
    breakdowns = {}
    for resource, _, _, parse in RESOURCES:
        allocatable = _quantity(status.get("allocatable"), resource, parse)
        inputs = ResourceInputs(allocatable=allocatable if allocatable is not None else float("nan"),
                                predicted_online_peak=None, system_usage=None)
        breakdowns[resource] = zero_breakdown(note, inputs, settings.ratio_percent, settings.include_system_usage)
    return NodeDecision((node.get("metadata") or {}).get("name", ""), breakdowns["cpu"], breakdowns["memory"],
                        None, None, (note, *mode.conflicts, *mode.problems), str(mode.mode))


def current_amounts(node: Mapping[str, Any], reporting_mode: str) -> dict[str, int | None]:
    """The batch amounts the node carries now, in the given reporting mode."""
    out: dict[str, int | None] = {}
    if reporting_mode == "volcanoAnnotations":
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        for name, annotation in ((qos.BATCH_CPU_RESOURCE, VOLCANO_CPU_ANNOTATION),
                                 (qos.BATCH_MEMORY_RESOURCE, VOLCANO_MEMORY_ANNOTATION)):
            try:
                out[name] = int(float(annotations[annotation]))
            except (KeyError, ValueError, OverflowError):  # absent, not a number, inf ("1e999")
                out[name] = None
        return out
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    for _, _, name, _ in RESOURCES:
        try:
            out[name] = int(memory_bytes(allocatable[name])) if name in allocatable else None
        except QuantityError:
            out[name] = None
    return out


def _gist(notes) -> list[str]:
    """Notes without their durations (a stale profile's age changes every cycle, its meaning
    not); other figures — an override's value — stay: a changed one is published."""
    return [re.sub(r"[0-9][0-9.]*s\b", "#s", note) for note in notes or ()]


def breakdown_disagrees(profile: Mapping[str, Any] | None, current: Mapping[str, int | None],
                        notes: Iterable[str] | None = None) -> bool:
    """Whether the NodeProfile's published breakdown (``status.oversell``) disagrees with the
    node: other batch amounts than the node carries (the node was patched and the breakdown was
    not — a leader killed between its two writes — or the breakdown was lost), or, given the
    cycle's `notes`, other notes than those, figures aside (a user's annotation ignored or
    applied since, with the amounts unchanged: its note must reach the user). Such a node is
    written again even when its amounts need no change, so no node keeps a half-written or
    stale breakdown. A node without a NodeProfile (nothing to publish into) or without amounts
    never disagrees."""
    if profile is None or all(current.get(name) is None for _, _, name, _ in RESOURCES):
        return False
    oversell = ((profile.get("status") or {}).get("oversell")) or {}
    for _, key, name, _ in RESOURCES:
        published = (oversell.get(key) or {}).get("result")
        if published != (current.get(name) or 0):
            return True
    return notes is not None and _gist(oversell.get("notes")) != _gist(notes)


VOLCANO_OVERSUBSCRIPTION_LABEL = qos.VOLCANO_OVERSUBSCRIPTION_LABEL
VOLCANO_CPU_ANNOTATION = qos.VOLCANO_OVERSUBSCRIPTION_CPU_ANNOTATION
VOLCANO_MEMORY_ANNOTATION = qos.VOLCANO_OVERSUBSCRIPTION_MEMORY_ANNOTATION
