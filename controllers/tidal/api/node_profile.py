# SPDX-License-Identifier: Apache-2.0
"""The NodeProfile: what one node's tidal-agent observed, as typed data and as its CRD.

One object per node, with the node's name; only that node's agent writes it (status only, by
merge patch, so each writer sends only the parts it owns), tidal-manager and tidal-console read
it. Units are in the field names: ``cpuMillicores`` are millicores, ``memoryBytes`` are bytes.
The parts whose shape belongs to their writer (per-QoS details, predictions, the oversell
breakdown, the effective policy) are kept as JSON objects here and preserve unknown fields in the
CRD.

`NodeProfileStatus.to_status` gives the JSON an agent writes (absent parts left out, so a merge
patch keeps them); `NodeProfileStatus.from_status` reads what is stored, leniently (see
`tidal.api.schema.from_json`). `crd` is the CustomResourceDefinition that
``hack/generate_crds.py`` writes to ``tidal/crds/colocation.tidal.io_nodeprofiles.yaml``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidal.api import qos
from tidal.api.schema import Condition, custom_resource_definition, from_json, object_schema, prop, to_json

__all__ = [
    "KIND",
    "PLURAL",
    "Statistics",
    "UsageWindow",
    "SystemUsageWindow",
    "PolicyReport",
    "QoSUsage",
    "Capability",
    "NodeModeReport",
    "NodeProfileStatus",
    "REPLAYED_CONDITION",
    "crd",
]

KIND = "NodeProfile"
PLURAL = "nodeprofiles"
SHORT_NAME = "nprof"
#: ``status.conditions`` type set (``True``) by ``tidal-agent replay`` on the nodes it stands for:
#: what the profile reports (capabilities included) comes from the replay, not from the node.
REPLAYED_CONDITION = "Replayed"

_STATISTIC = {"format": "int64", "minimum": 0}


@dataclass(frozen=True, kw_only=True)
class Statistics:
    """Summary statistics of one quantity over a window (whole millicores or bytes)."""

    avg: int | None = prop("avg", **_STATISTIC)
    p50: int | None = prop("p50", **_STATISTIC)
    p90: int | None = prop("p90", **_STATISTIC)
    p95: int | None = prop("p95", **_STATISTIC)
    p99: int | None = prop("p99", **_STATISTIC)
    max: int | None = prop("max", **_STATISTIC)


@dataclass(frozen=True, kw_only=True)
class UsageWindow:
    """The node's usage over one window length; a window without samples has only
    ``windowSeconds`` and ``samples`` 0."""

    window_seconds: int = prop(
        "windowSeconds", "Length of the window summarised, in seconds.",
        required=True, format="int64", minimum=1,
    )
    samples: int | None = prop(
        "samples", "Number of samples in the window.", format="int64", minimum=0
    )
    cpu_millicores: Statistics | None = prop(
        "cpuMillicores", "Node CPU usage over the window, millicores."
    )
    memory_bytes: Statistics | None = prop(
        "memoryBytes", "Node memory usage over the window, bytes."
    )


@dataclass(frozen=True, kw_only=True)
class SystemUsageWindow(UsageWindow):
    """Usage outside Tidal's pods over one window length."""

    cpu_millicores: Statistics | None = prop(
        "cpuMillicores", "System CPU usage over the window, millicores."
    )
    memory_bytes: Statistics | None = prop(
        "memoryBytes", "System memory usage over the window, bytes."
    )


@dataclass(frozen=True, kw_only=True)
class PolicyReport:
    """The ColocationPolicy the agent runs (``tidal.agent.qos.policy_status``)."""

    applied_generation: int | None = prop(
        "appliedGeneration", "metadata.generation of the ColocationPolicy the agent applied.",
        format="int64", minimum=0,
    )
    effective: dict[str, Any] | None = prop(
        "effective", "The effective policy spec on this node, after per-node overrides."
    )
    problems: tuple[str, ...] | None = prop(
        "problems",
        "What this node cannot apply as asked, one line each (invalid per-node overrides, "
        "features its kernel or hardware lacks, with the reason).",
    )


@dataclass(frozen=True, kw_only=True)
class QoSUsage:
    """Usage of the pods of each QoS level, as ``tidal.agent.collector.sampler`` summarises it."""

    hls: dict[str, Any] | None = prop(qos.QoSLevel.HLS.value)
    ls: dict[str, Any] | None = prop(qos.QoSLevel.LS.value)
    be: dict[str, Any] | None = prop(qos.QoSLevel.BE.value)


@dataclass(frozen=True, kw_only=True)
class Capability:
    """Whether this node's kernel and hardware support one feature."""

    name: str = prop(
        "name", "Capability, as the agent's probe names it, e.g. cpu.cfs_burst, psi, resctrl.l3, "
        "numa, tc (tidal.agent.qos.capabilities).", required=True
    )
    supported: bool = prop("supported", required=True)
    reason: str | None = prop(
        "reason", 'Why it is unsupported (e.g. "resctrl not mounted"); empty when supported.'
    )


@dataclass(frozen=True, kw_only=True)
class NodeModeReport:
    """The node's colocation mode as the agent reads it (``tidal.api.node_mode``)."""

    name: str = prop(
        "name", "off, colocation, oversubscription or colocation+oversubscription.", required=True,
        enum=["off", "colocation", "oversubscription", "colocation+oversubscription"],
    )
    colocation: bool | None = prop("colocation", "The colocation switch, aliases applied.")
    oversubscription: bool | None = prop("oversubscription", "The oversubscription switch, aliases applied.")
    oversell_types: tuple[str, ...] | None = prop(
        "oversellTypes", "Resources the node oversells (cpu, memory); a type not listed gets batch 0."
    )
    meaning: str | None = prop("meaning", "What the mode means for BE pods, one line.")
    eviction_rule: str | None = prop("evictionRule", "When BE pods are evicted in this mode.")
    eviction_allowed: bool | None = prop(
        "evictionAllowed", "Whether watermark eviction may act now (the oversubscription-only "
        "row also needs the node's requests above 100% of allocatable)."
    )
    eviction_reason: str | None = prop("evictionReason", "Why eviction may or may not act now.")
    sources: dict[str, str] | None = prop(
        "sources", "Per switch, the label or annotation it was read from (a Tidal name, a Volcano "
        "alias, or default)."
    )
    conflicts: tuple[str, ...] | None = prop(
        "conflicts", "A Tidal name and its alias disagree (the Tidal name wins), one line each."
    )
    problems: tuple[str, ...] | None = prop(
        "problems", "Values not understood (counted as absent), one line each."
    )


@dataclass(frozen=True, kw_only=True)
class NodeProfileStatus:
    """A NodeProfile's status; every part is optional (each writer merges the parts it owns)."""

    observed_at: str | None = prop(
        "observedAt", "When the agent took the samples summarised here.", format="date-time"
    )
    policy: PolicyReport | None = prop("policy", "The ColocationPolicy the agent runs.")
    mode: NodeModeReport | None = prop(
        "mode", "The node's colocation mode (labels and aliases) and the eviction rule in force."
    )
    usage: tuple[UsageWindow, ...] | None = prop(
        "usage", "Node usage summaries, one per window length.", list_map_keys=["windowSeconds"]
    )
    system_usage: tuple[SystemUsageWindow, ...] | None = prop(
        "systemUsage",
        "Usage outside Tidal's pods (node usage minus the usage of the pods with a QoS level, "
        "clamped at 0: system daemons, kubelet, container runtime, kernel, pods without a QoS "
        "level), one summary per window length.",
        list_map_keys=["windowSeconds"],
    )
    per_qos: QoSUsage | None = prop(
        "perQoS", "Usage of the pods of each QoS level; details defined by the collector."
    )
    predictions: dict[str, Any] | None = prop(
        "predictions",
        "The agent's predictions: predictor (name), onlinePeak {cpuMillicores, memoryBytes} "
        "(pods without usage counted at their request), systemUsage {cpuMillicores, "
        "memoryBytes, statistic, windowSeconds, samples}: usage outside Tidal's pods over the "
        "prediction window; with a history predictor, steps (5-minute steps of history), basis "
        "{regime (warming-up, calibrated, fallback, shift-detected, no-online-pods), rule, "
        "margin, evidence, reason, shift or lastShift {detectedAt, changePointAt, guardUntil, "
        "guardMargin, shiftsDetected}, calibratedChoice {rule, form, cpuCores, choiceRecordPoints, "
        "choiceRecordNeeded, lastArrivalAt} while a calibrated rule waits for its choice's own "
        "record, ruleCores, usageNowCores, bound (floor or requests, when one decided "
        "instead of the rule), provisional while no step has closed}, memoryBasis {statistic, windowSeconds, "
        "samples: the memory peak, the window's largest working set} and history {restored, steps, savedAt, "
        "or the reason a saved history was discarded}.",
    )
    cpu_interference: dict[str, Any] | None = prop(
        "cpuInterference",
        "BE CPU interference control (beIsolation.cpuInterference): the online pods' threads' "
        "run-queue delay (runQueueDelayMicroseconds: mean per scheduling slice over the last round; "
        "waitRatio: time waited per second of wall time, summed over threads; onlineThreads), "
        "floorDelayMicroseconds (the median delay of the last three rounds run with BE at its "
        "floor within floorStandsSeconds: what throttling BE cannot remove; 120 s, doubled by every "
        "throttling episode in a row that found the delay not BE's, up to 480 s), "
        "attributedDelayMicroseconds (the "
        "delay above it: the "
        "controlled value), "
        "targetDelayMicroseconds, quota (the cpuSuppression.quota in effect: onInterference or always), "
        "quotaInForce (false: no quota, BE not shown to delay the online pods; then roundsAboveTarget, "
        "the rounds in a row above the target so far, 5 put a quota in force), the BE CPU allowance in "
        "force (beCPUAllowanceMillicores, while a quota is), "
        "cpuSuppression's quota that bounds it (boundMillicores), throttled (allowance below the "
        "bound) and problem (why the delay cannot be measured).",
    )
    online_sched_slice: dict[str, Any] | None = prop(
        "onlineSchedSlice",
        "Online wake-up slice (features.onlineSchedSlice) while it runs: sliceMicroseconds and the "
        "number of online pods whose threads ask for it (pods).",
    )
    oversell: dict[str, Any] | None = prop(
        "oversell",
        "Written by the oversell master only: the batch resources it computed for this node, "
        "each input, the formula, the predictor and the time, so a user can see why; peakBasis "
        "{cpu, memory}: where each predicted online peak came from when it was decided (a window "
        "statistic, or the history predictor's regime, rule, form and bound; null where not known).",
    )
    capabilities: tuple[Capability, ...] | None = prop(
        "capabilities",
        "What this node's kernel and hardware support, with reasons for what they do not.",
        list_map_keys=["name"],
    )
    conditions: tuple[Condition, ...] | None = prop(
        "conditions", "Standard conditions.", list_map_keys=["type"]
    )

    def to_status(self) -> dict[str, Any]:
        """The JSON of this status; parts that are None are left out."""
        return to_json(self)

    @classmethod
    def from_status(cls, status: Mapping[str, Any] | None) -> NodeProfileStatus:
        """A stored status, read leniently: a missing or malformed part reads as None."""
        return from_json(cls, status) or cls()


def crd() -> dict[str, Any]:
    """The NodeProfile CustomResourceDefinition."""
    return custom_resource_definition(
        kind=KIND,
        plural=PLURAL,
        short_name=SHORT_NAME,
        description="What the tidal-agent of the node with the same name observed: usage "
        "summaries, per-QoS usage, predictions, kernel and hardware capabilities, and the policy "
        "generation it runs.",
        printer_columns=[
            {"name": "Observed", "type": "date", "description": "When the agent last reported.",
             "jsonPath": ".status.observedAt"},
            {"name": "Policy", "type": "integer",
             "description": "ColocationPolicy generation the agent runs.",
             "jsonPath": ".status.policy.appliedGeneration"},
            {"name": "Mode", "type": "string", "description": "The node's colocation mode.",
             "jsonPath": ".status.mode.name"},
        ],
        spec={"type": "object", "description": "Empty; a NodeProfile is all status."},
        status=object_schema(NodeProfileStatus),
    )
