# SPDX-License-Identifier: Apache-2.0
"""What the console shows and decides, as pure functions over API objects (plain JSON dicts).

- `node_view`: one node's colocation state for the node list (labels, readiness, the
  offline-evicting taint, capabilities with reasons, per policy section whether the node
  supports it and why not (``featureSupport``), batch resources allocatable vs requested
  by BE pods, the oversell master's breakdown, pods by QoS level, the policy generation its
  agent runs).
- `colocation_toggle`: what enabling or disabling colocation on a node does — the label patch
  and the result text — or why it is refused.
- `rollout`: which colocation nodes run which policy generation.

No I/O here: `server` reads the objects and writes the patches.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tidal.api import qos
from tidal.api.feature_support import feature_support
from tidal.api.pod_resources import BatchRequest, batch_requested_total
from tidal.api.node_profile import NodeProfileStatus, PolicyReport
from tidal.api.quantities import cpu_millicores, memory_bytes

__all__ = ["ToggleDecision", "colocation_toggle", "disabled_message", "node_view", "pod_level", "pods_by_node", "rollout"]

QOS_BUCKETS = ("HLS", "LS", "BE", "none")


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def _enabled(labels: Mapping[str, str], key: str) -> bool:
    return labels.get(key) == qos.NODE_LABEL_ENABLED_VALUE


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


def _batch_view(amount: BatchRequest) -> dict[str, int]:
    return {"cpuMillicores": amount.cpu_millicores, "memoryBytes": amount.memory_bytes}


def node_view(node: Mapping[str, Any], profile: Mapping[str, Any] | None,
              pods: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The node list entry of one node (`profile` is its NodeProfile, None when absent)."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    labels = _labels(node)
    allocatable = status.get("allocatable") or {}
    ready, ready_message = _ready(node)
    pods = list(pods)
    counts = dict.fromkeys(QOS_BUCKETS, 0)
    for pod in pods:
        counts[pod_level(pod)] += 1
    profile_status = NodeProfileStatus.from_status((profile or {}).get("status"))
    taints = (node.get("spec") or {}).get("taints") or []
    return {
        "name": meta.get("name", ""),
        "ready": ready,
        "readyMessage": "" if ready else ready_message,
        "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
        "colocation": _enabled(labels, qos.COLOCATION_NODE_LABEL),
        "oversubscription": _enabled(labels, qos.OVERSUBSCRIPTION_NODE_LABEL),
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
        },
    }


@dataclass(frozen=True)
class ToggleDecision:
    """The answer to "enable/disable colocation on node X".

    ``patch`` is the merge patch of the node's labels (None: nothing to write); ``status`` the
    HTTP status of the answer; ``message`` the result text shown to the user.
    """

    status: int
    message: str
    patch: dict[str, Any] | None = None
    changed: bool = False


def colocation_toggle(name: str, node: Mapping[str, Any] | None, enabled: bool) -> ToggleDecision:
    """Enabling labels the node ``colocation.tidal.io/colocation=true``; it is refused on a
    node that is missing, not Ready or cordoned (BE pods could not start there, and the
    switch would claim what is not true). Disabling removes the label and the
    oversubscription label with it (BE pods need both); BE pods already running are not
    evicted by the switch and the message says how many remain."""
    if node is None:
        return ToggleDecision(404, f"colocation not changed: node {name} does not exist")
    labels = _labels(node)
    on = _enabled(labels, qos.COLOCATION_NODE_LABEL)
    if enabled:
        if on:
            return ToggleDecision(200, f"colocation already enabled on node {name}")
        ready, why = _ready(node)
        if not ready:
            return ToggleDecision(409, f"colocation not enabled on node {name}: the node is not Ready"
                                       + (f" ({why})" if why else ""))
        if (node.get("spec") or {}).get("unschedulable"):
            return ToggleDecision(409, f"colocation not enabled on node {name}: the node is cordoned "
                                       "(unschedulable); uncordon it first")
        return ToggleDecision(200, f"colocation enabled on node {name}",
                              {"metadata": {"labels": {qos.COLOCATION_NODE_LABEL: qos.NODE_LABEL_ENABLED_VALUE}}},
                              changed=True)
    if not on and qos.OVERSUBSCRIPTION_NODE_LABEL not in labels:
        return ToggleDecision(200, f"colocation already disabled on node {name}")
    return ToggleDecision(200, f"colocation disabled on node {name}",
                          {"metadata": {"labels": {qos.COLOCATION_NODE_LABEL: None,
                                                   qos.OVERSUBSCRIPTION_NODE_LABEL: None}}},
                          changed=True)


def disabled_message(decision: ToggleDecision, be_pods: int) -> str:
    """The result text of a disabling toggle, telling about BE pods left running."""
    if be_pods and decision.changed:
        return (f"{decision.message}; {be_pods} BE pod(s) still run there until they finish "
                "(the switch does not evict them)")
    return decision.message


def rollout(policy: Mapping[str, Any] | None, nodes: Iterable[Mapping[str, Any]],
            profiles: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Per colocation node, the policy generation its agent reports having applied (from the
    NodeProfiles, so it is right even before the policy reconciler has written the status), and
    the reconciler's conditions from the policy's status."""
    generation = ((policy or {}).get("metadata") or {}).get("generation")
    rows = []
    for node in nodes:
        if not _enabled(_labels(node), qos.COLOCATION_NODE_LABEL):
            continue
        name = (node.get("metadata") or {}).get("name", "")
        profile = profiles.get(name)
        report = NodeProfileStatus.from_status((profile or {}).get("status")).policy or PolicyReport()
        applied = report.applied_generation
        if profile is None:
            reason = "no NodeProfile: the node's tidal-agent has not reported"
        elif applied is None:
            reason = "the node's agent reports no applied policy generation"
        elif generation is not None and applied < generation:
            reason = f"the node's agent runs generation {applied}, the policy is at {generation}"
        else:
            reason = ""
        rows.append({"name": name, "appliedGeneration": applied, "upToDate": reason == "", "reason": reason})
    rows.sort(key=lambda r: r["name"])
    # The policy reconciler's own conditions (Applied, NodeProblems, ...), as it wrote them.
    conditions = [{k: str(c.get(k) or "") for k in ("type", "status", "reason", "message")}
                  for c in ((policy or {}).get("status") or {}).get("conditions") or [] if isinstance(c, Mapping)]
    return {"generation": generation, "totalNodes": len(rows),
            "appliedNodes": sum(r["upToDate"] for r in rows), "nodes": rows, "conditions": conditions}
