# SPDX-License-Identifier: Apache-2.0
"""What the console shows and decides, as pure functions over API objects (plain JSON dicts).

- `node_view`: one node's colocation state for the node list (labels, readiness, the
  offline-evicting taint, capabilities with reasons, per policy section whether the node
  supports it and why not (``featureSupport``), batch resources allocatable vs requested
  by BE pods, the oversell master's breakdown, pods by QoS level, the policy generation its
  agent runs).
- `node_view`'s ``mode``: the node's mode from its two labels and their Volcano aliases
  (`tidal.api.node_mode`), with what it means, and the agent's word on eviction.
- `switch_request`: the body of the node switch (``{"mode": ...}``, or the older
  ``{"enabled": bool}``) read into a `Mode`, or a `SwitchRequestError` naming the field.
- `mode_switch`: what setting a node's mode does — the label patch (Tidal's labels only), the
  resulting mode with its meaning, warnings when an alias label keeps the node in another mode —
  or why it is refused.
- `rollout`: which nodes Tidal acts on (any mode but off) run which policy generation (and
  whether ``tidal-agent replay`` reports for them).

No I/O here: `server` reads the objects and writes the patches.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tidal.api import qos
from tidal.api.feature_support import feature_support
from tidal.api.node_mode import Mode, NodeMode, node_mode
from tidal.api.pod_resources import BatchRequest, batch_requested_total
from tidal.api.node_profile import REPLAYED_CONDITION, NodeModeReport, NodeProfileStatus, PolicyReport
from tidal.api.quantities import cpu_millicores, memory_bytes

__all__ = ["MODES", "SwitchDecision", "SwitchRequestError", "be_pods_left_message", "mode_switch", "mode_view",
           "modes", "node_view", "pod_level", "pods_by_node", "replayed", "rollout", "switch_answer",
           "switch_request"]

QOS_BUCKETS = ("HLS", "LS", "BE", "none")


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def _annotations(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


def _mode_of(node: Mapping[str, Any] | None) -> NodeMode:
    return node_mode(_labels(node), _annotations(node))


def _ready(node: Mapping[str, Any]) -> tuple[bool, str]:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True", condition.get("message") or condition.get("reason") or ""
    return False, "the node reports no Ready condition"


def _quantity(value: Any, parse) -> int:
    try:
        return parse(value) if value is not None else 0
    except (ValueError, ArithmeticError):
        return 0


def pod_level(pod: Mapping[str, Any]) -> str:
    try:
        level = qos.qos_level_of((pod.get("metadata") or {}).get("annotations"))
    except qos.AnnotationError:
        return "none"
    return level.value if level is not None else "none"


def _running(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def pods_by_node(pods: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Pods that hold resources (not finished), grouped by the node they are bound to."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and _running(pod):
            out.setdefault(node, []).append(pod)
    return out


def replayed(status: NodeProfileStatus) -> bool:
    """Whether ``tidal-agent replay`` wrote the NodeProfile (condition ``Replayed=True``): its
    capabilities are those of the machine running the replay, which the node stands for."""
    return any(c.type == REPLAYED_CONDITION and c.status == "True" for c in status.conditions or ())


def _batch_view(amount: BatchRequest) -> dict[str, int]:
    return {"cpuMillicores": amount.cpu_millicores, "memoryBytes": amount.memory_bytes}


def node_view(node: Mapping[str, Any], profile: Mapping[str, Any] | None,
              pods: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The node list entry of one node (`profile` is its NodeProfile, None when absent)."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    ready, ready_message = _ready(node)
    pods = list(pods)
    counts = dict.fromkeys(QOS_BUCKETS, 0)
    for pod in pods:
        counts[pod_level(pod)] += 1
    profile_status = NodeProfileStatus.from_status((profile or {}).get("status"))
    taints = (node.get("spec") or {}).get("taints") or []
    mode = _mode_of(node)
    return {
        "name": meta.get("name", ""),
        "ready": ready,
        "readyMessage": "" if ready else ready_message,
        "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
        # The two switches after aliases (the same as mode.colocation / mode.oversubscription).
        "colocation": mode.colocation,
        "oversubscription": mode.oversubscription,
        "mode": mode_view(mode, profile_status.mode),
        "evicting": any(t.get("key") == qos.OFFLINE_EVICTING_TAINT_KEY for t in taints),
        "allocatable": {"cpuMillicores": _quantity(allocatable.get("cpu"), cpu_millicores),
                        "memoryBytes": _quantity(allocatable.get("memory"), memory_bytes)},
        "batch": {
            "allocatable": {
                "cpuMillicores": _quantity(allocatable.get(qos.BATCH_CPU_RESOURCE), memory_bytes),
                "memoryBytes": _quantity(allocatable.get(qos.BATCH_MEMORY_RESOURCE), memory_bytes)},
            "requested": _batch_view(batch_requested_total(p for p in pods if pod_level(p) == "BE")),
            "breakdown": profile_status.oversell,
        },
        "podsByQoS": counts,
        "capabilities": [{"name": c.name, "supported": c.supported, "reason": c.reason or ""}
                         for c in profile_status.capabilities or ()],
        # Per policy section, supported or not and why, from the capabilities above: the one
        # mapping (tidal.api.feature_support) the agent uses too; the web console only shows it.
        "featureSupport": feature_support(profile_status.capabilities),
        "profile": {
            "present": profile is not None,
            "observedAt": profile_status.observed_at,
            "appliedGeneration": (profile_status.policy or PolicyReport()).applied_generation,
            "replayed": replayed(profile_status),
        },
    }


def _mode_switches(mode: Mode) -> tuple[bool, bool]:
    """(colocation, oversubscription) of a mode."""
    return (mode in (Mode.COLOCATION, Mode.COLOCATION_OVERSUBSCRIPTION),
            mode in (Mode.OVERSUBSCRIPTION, Mode.COLOCATION_OVERSUBSCRIPTION))


#: The four modes, in the order the console offers them (`modes` adds what each means).
MODES: tuple[Mode, ...] = tuple(Mode)
_MODE_NAMES = frozenset(str(m) for m in MODES)


def modes() -> list[dict[str, str]]:
    """The modes the switch offers: name, meaning and eviction rule of each (from
    `tidal.api.node_mode`, so the web page never words a mode itself)."""
    out = []
    for mode in MODES:
        example = NodeMode(*_mode_switches(mode))
        out.append({"name": str(mode), "meaning": example.meaning, "evictionRule": example.eviction_rule})
    return out


def mode_view(mode: NodeMode, report: NodeModeReport | None = None) -> dict[str, Any]:
    """A node's mode as the console shows it: the labels' reading (``tidal.api.node_mode``) and,
    when the node's agent has reported one, its ``status.mode``: the mode it acts on and whether
    watermark eviction may act now (None: not reported)."""
    return {
        "name": str(mode.mode),
        "colocation": mode.colocation,
        "oversubscription": mode.oversubscription,
        "oversellTypes": sorted(mode.oversell_types),
        "meaning": mode.meaning,
        "evictionRule": mode.eviction_rule,
        "sources": dict(mode.sources),
        "conflicts": list(mode.conflicts),
        "problems": list(mode.problems),
        # A name outside the four (an agent of another version) reads as not reported.
        "agentMode": report.name if report is not None and report.name in _MODE_NAMES else None,
        "evictionAllowed": report.eviction_allowed if report is not None else None,
        "evictionReason": report.eviction_reason if report is not None else None,
    }


class SwitchRequestError(ValueError):
    """A node switch body the console refuses (HTTP 400): the field and the rule it breaks."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


_ALLOWED_MODES = ", ".join(str(m) for m in MODES)  # in the order of MODES, for messages


def switch_request(body: Mapping[str, Any]) -> Mode:
    """The mode a switch body asks for.

    ``{"mode": "off" | "colocation" | "oversubscription" | "colocation+oversubscription"}``;
    the older ``{"enabled": true}`` means colocation+oversubscription (the mode in which BE
    pods get oversold resources, what "colocation on" has to mean for BE pods to run) and
    ``{"enabled": false}`` means off.

    Raises:
        SwitchRequestError: an unknown field, both or neither of ``mode`` and ``enabled``, a
            mode outside the four, an ``enabled`` that is not a boolean.
    """
    unknown = sorted(set(body) - {"mode", "enabled"})
    if unknown:
        raise SwitchRequestError(unknown[0], "unknown field (allowed: mode, or enabled)")
    if "mode" in body and "enabled" in body:
        raise SwitchRequestError("enabled", "send either mode or enabled, not both")
    if "enabled" in body:
        enabled = body["enabled"]
        if not isinstance(enabled, bool):
            raise SwitchRequestError("enabled", "must be true or false")
        return Mode.COLOCATION_OVERSUBSCRIPTION if enabled else Mode.OFF
    if "mode" not in body:
        raise SwitchRequestError("mode", f"required: one of {_ALLOWED_MODES}")
    value = body["mode"]
    if not isinstance(value, str) or value not in _MODE_NAMES:
        raise SwitchRequestError("mode", f"must be one of {_ALLOWED_MODES} (got {value!r})")
    return Mode(value)


@dataclass(frozen=True)
class SwitchDecision:
    """The answer to "set node X to mode M".

    ``patch`` is the merge patch of the node's labels (None: nothing to write); ``status`` the
    HTTP status of the answer; ``message`` the result text shown to the user; ``result`` the
    node's mode after the patch (its current mode when refused, None when the node does not
    exist); ``warnings`` why the result is not the requested mode (an alias label), and the
    label conflicts `tidal.api.node_mode` finds; ``switched_off`` whether a switch goes off
    (BE pods already there keep running: the switch does not evict).
    """

    status: int
    message: str
    result: NodeMode | None = None
    patch: dict[str, Any] | None = None
    changed: bool = False
    warnings: tuple[str, ...] = ()
    switched_off: bool = False


def _label_patch(labels: Mapping[str, str], mode: Mode) -> dict[str, str | None]:
    """Tidal's two labels for `mode`: ``true`` for a switch that is on; a switch that is off
    loses its label, except an explicit ``false``, which is kept (it overrides an alias)."""
    patch: dict[str, str | None] = {}
    for label, on in zip((qos.COLOCATION_NODE_LABEL, qos.OVERSUBSCRIPTION_NODE_LABEL), _mode_switches(mode)):
        current = labels.get(label)
        if on and current != qos.NODE_LABEL_ENABLED_VALUE:
            patch[label] = qos.NODE_LABEL_ENABLED_VALUE
        elif not on and current is not None and current != "false":
            patch[label] = None
    return patch


def _alias_warnings(name: str, requested: Mode, result: NodeMode) -> list[str]:
    """Why `result` is not `requested`: a switch read from a Volcano alias the console does not
    write."""
    warnings = []
    for switch, wanted in zip(("colocation", "oversubscription"), _mode_switches(requested)):
        source = result.sources.get(switch, "default")
        if getattr(result, switch) != wanted and source.startswith("volcano.sh/"):
            warnings.append(f"{source}={str(not wanted).lower()} still present on node {name} (the console "
                            f"writes only Tidal's labels: remove it to reach mode {requested})")
    return warnings


def mode_switch(name: str, node: Mapping[str, Any] | None, requested: Mode) -> SwitchDecision:
    """Setting a node's mode writes Tidal's two labels (never the ``volcano.sh/`` aliases).

    Turning a switch on is refused on a node that is missing, not Ready or cordoned (BE pods
    could not start there, and the switch would claim what is not true); turning switches off
    is never refused. BE pods already running are not evicted by the switch. When an alias
    label keeps the node in another mode than requested, the answer says so (``warnings``).
    """
    if node is None:
        return SwitchDecision(404, f"mode not changed: node {name} does not exist")
    labels = _labels(node)
    current = _mode_of(node)
    patch = _label_patch(labels, requested)
    if any(value is not None for value in patch.values()):  # a switch goes on
        ready, why = _ready(node)
        if not ready:
            return SwitchDecision(409, f"mode not changed on node {name}: the node is not Ready"
                                       + (f" ({why})" if why else "") + f"; it stays in mode {current.mode}",
                                  current)
        if (node.get("spec") or {}).get("unschedulable"):
            return SwitchDecision(409, f"mode not changed on node {name}: the node is cordoned (unschedulable), "
                                       f"uncordon it first; it stays in mode {current.mode}", current)
    after = {k: v for k, v in labels.items() if k not in patch} | {k: v for k, v in patch.items() if v is not None}
    result = node_mode(after, _annotations(node))
    aliases = _alias_warnings(name, requested, result)
    if result.mode != requested:
        message = (f"node {name} is in mode {result.mode}, not {requested}: "
                   + ("; ".join(aliases) or "its labels say otherwise") + f". {result.mode}: {result.meaning}")
    elif patch:
        message = f"node {name} set to mode {result.mode}: {result.meaning}"
    else:
        message = f"node {name} already in mode {result.mode}: {result.meaning}"
    return SwitchDecision(200, message, result, {"metadata": {"labels": patch}} if patch else None,
                          changed=bool(patch), warnings=tuple(aliases) + result.conflicts,
                          switched_off=any(value is None for value in patch.values()))


def switch_answer(name: str, decision: SwitchDecision, message: str) -> dict[str, Any]:
    """The switch's JSON answer (``ColocationResult`` in the OpenAPI document): the node's mode
    now, what it means, the result text and the warnings."""
    result = decision.result
    return {"node": name, "mode": str(result.mode) if result else None,
            "meaning": result.meaning if result else "",
            "colocation": bool(result and result.colocation),
            "oversubscription": bool(result and result.oversubscription),
            "changed": decision.changed, "message": message, "warnings": list(decision.warnings)}


def be_pods_left_message(decision: SwitchDecision, be_pods: int) -> str:
    """The result text of a switch that turned a switch off, telling about BE pods left running."""
    if be_pods and decision.changed and decision.switched_off:
        return (f"{decision.message}; {be_pods} BE pod(s) still run there until they finish "
                "(the switch does not evict them)")
    return decision.message


def rollout(policy: Mapping[str, Any] | None, nodes: Iterable[Mapping[str, Any]],
            profiles: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Per node Tidal acts on (any mode but off), the policy generation its agent reports having
    applied (from the NodeProfiles, so it is right even before the policy reconciler has
    written the status), and the reconciler's conditions from the policy's status."""
    generation = ((policy or {}).get("metadata") or {}).get("generation")
    rows = []
    for node in nodes:
        mode = _mode_of(node)
        if not mode.active:
            continue
        name = (node.get("metadata") or {}).get("name", "")
        profile = profiles.get(name)
        status = NodeProfileStatus.from_status((profile or {}).get("status"))
        report = status.policy or PolicyReport()
        applied = report.applied_generation
        if profile is None:
            reason = "no NodeProfile: the node's tidal-agent has not reported"
        elif applied is None:
            reason = "the node's agent reports no applied policy generation"
        elif generation is not None and applied < generation:
            reason = f"the node's agent runs generation {applied}, the policy is at {generation}"
        else:
            reason = ""
        rows.append({"name": name, "mode": str(mode.mode), "appliedGeneration": applied, "upToDate": reason == "",
                     "reason": reason, "replayed": replayed(status)})
    rows.sort(key=lambda r: r["name"])
    # The policy reconciler's own conditions (Applied, NodeProblems, ...), as it wrote them.
    conditions = [{k: str(c.get(k) or "") for k in ("type", "status", "reason", "message")}
                  for c in ((policy or {}).get("status") or {}).get("conditions") or [] if isinstance(c, Mapping)]
    return {"generation": generation, "totalNodes": len(rows),
            "appliedNodes": sum(r["upToDate"] for r in rows), "nodes": rows, "conditions": conditions}
