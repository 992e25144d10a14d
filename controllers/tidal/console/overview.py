# SPDX-License-Identifier: Apache-2.0
"""The overview's answer to "is colocation working, and if not why", as pure functions over API
objects (plain JSON dicts); `tidal.console.server` reads the objects.

- `why_pending`: why a BE pod is Pending, from the cluster's state (the nodes' modes, readiness,
  the offline-evicting taint, free batch resources) checked the way a scheduler filters nodes,
  and from the scheduler's own word (Volcano writes ``PodScheduled=False`` with a message).
- `tidal_events`: the recent Events Tidal writes (evictions, blocked evictions, the
  offline-evicting taint, dropped batch resources), newest first, bounded.
- `overview`: per node its mode, batch allocatable vs requested and why the oversell master
  decided what it did (`batch_why`), BE pods running and pending,
  the problems its agent reports (features its kernel lacks); BE pods pending with the reason;
  the Events. Lists are capped (`MAX_PENDING_PODS`, `MAX_EVENTS`) and say when they were cut.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidal.api import qos
from tidal.api.events import EVENT_REASONS
from tidal.api.node_mode import node_mode
from tidal.api.node_profile import NodeProfileStatus, PolicyReport
from tidal.api.pod_resources import batch_requested_total, pod_batch
from tidal.console.views import replayed

__all__ = ["MAX_EVENTS", "MAX_PENDING_PODS", "PENDING_REASONS", "TIDAL_EVENT_REASONS",
           "NodeFacts", "Pending", "node_facts", "overview", "tidal_events", "why_pending"]

MAX_PENDING_PODS = 50
MAX_EVENTS = 50

#: The Event reasons Tidal's components write, and who writes them (the contract's list).
TIDAL_EVENT_REASONS: dict[str, str] = EVENT_REASONS

#: Why a BE pod is Pending (``reason``), most fundamental first.
PENDING_REASONS: dict[str, str] = {
    "NoNodes": "the cluster has no node",
    "NoNodeInMode": "no node matches the pod's node selector / required affinity (for a BE pod on batch "
                    "resources: no node in mode oversubscription or colocation+oversubscription)",
    "NodesUnavailable": "the nodes it may use are NotReady or cordoned",
    "OfflineEvicting": "the nodes it may use carry the offline-evicting taint",
    "Tainted": "the nodes it may use carry other taints it does not tolerate",
    "NoBatchCapacity": "not enough free batch-cpu / batch-memory on the nodes it may use",
    "Unschedulable": "a node fits as far as Tidal can tell; the scheduler's message says why not",
    "Scheduling": "a node fits; the scheduler has not placed it yet",
    "Starting": "bound to a node, its containers are not running yet",
}

_SCHEDULABLE_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class NodeFacts:
    """What a scheduler looks at on one node, as far as BE pods go. Batch amounts: allocatable
    minus what bound BE pods request (cpu in millicores, memory in bytes)."""

    name: str
    labels: Mapping[str, str]
    ready: bool
    unschedulable: bool
    taints: tuple[Mapping[str, Any], ...]
    batch_free_cpu_millicores: int
    batch_free_memory_bytes: int


@dataclass(frozen=True)
class Pending:
    """Why a pod is Pending: `reason` (a key of `PENDING_REASONS`), a message naming nodes and
    amounts, and the scheduler's own message (empty when it wrote none)."""

    reason: str
    message: str
    scheduler_message: str = ""

    def to_json(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "schedulerMessage": self.scheduler_message}


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _ready(node: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def node_facts(node: Mapping[str, Any], pods_on_node: Iterable[Mapping[str, Any]] = ()) -> NodeFacts:
    """`NodeFacts` of a Node object and the pods bound to it (finished ones are ignored)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    requested = batch_requested_total(p for p in pods_on_node
                                      if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
    spec = node.get("spec") or {}
    return NodeFacts(
        name=_meta(node).get("name", ""), labels=dict(_meta(node).get("labels") or {}), ready=_ready(node),
        unschedulable=bool(spec.get("unschedulable")), taints=tuple(spec.get("taints") or ()),
        # Extended resources are integers: batch-cpu in millicores, batch-memory in bytes.
        batch_free_cpu_millicores=_int(allocatable.get(qos.BATCH_CPU_RESOURCE)) - requested.cpu_millicores,
        batch_free_memory_bytes=_int(allocatable.get(qos.BATCH_MEMORY_RESOURCE)) - requested.memory_bytes)


# -- scheduling predicates ----------------------------------------------------------------------

def _expression_matches(expression: Mapping[str, Any], value: str | None) -> bool:
    operator, values = expression.get("operator"), list(expression.get("values") or ())
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def _term_matches(term: Mapping[str, Any], node: NodeFacts) -> bool:
    expressions = list(term.get("matchExpressions") or ())
    fields = list(term.get("matchFields") or ())
    if not expressions and not fields:
        return False  # an empty term matches no node
    return (all(_expression_matches(e, node.labels.get(e.get("key", ""))) for e in expressions)
            and all(_expression_matches(f, node.name if f.get("key") == "metadata.name" else None) for f in fields))


def _required_terms(pod: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    return None if required is None else list(required.get("nodeSelectorTerms") or ())


def _affinity_matches(pod: Mapping[str, Any], node: NodeFacts) -> bool:
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if any(node.labels.get(k) != v for k, v in selector.items()):
        return False
    terms = _required_terms(pod)
    return terms is None or any(_term_matches(t, node) for t in terms)


def _tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for toleration in tolerations:
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        key, operator = toleration.get("key"), toleration.get("operator") or "Equal"
        if operator == "Exists" and not key:
            return True
        if key != taint.get("key"):
            continue
        if operator == "Exists" or toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def _untolerated(pod: Mapping[str, Any], node: NodeFacts) -> list[Mapping[str, Any]]:
    tolerations = list((pod.get("spec") or {}).get("tolerations") or ())
    return [t for t in node.taints if t.get("effect") in _SCHEDULABLE_EFFECTS and not _tolerates(tolerations, t)]


def _memory(amount: int) -> str:
    """Bytes for a message: Gi or Mi with one decimal, bytes below 1 Mi."""
    if abs(amount) >= 1 << 30:
        return f"{amount / (1 << 30):.1f}Gi"
    if abs(amount) >= 1 << 20:
        return f"{amount / (1 << 20):.1f}Mi"
    return f"{amount} bytes"


def _names(nodes: Sequence[NodeFacts], limit: int = 5) -> str:
    names = [n.name for n in nodes]
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _required_tidal_labels(pod: Mapping[str, Any]) -> list[str]:
    labels = set()
    for term in _required_terms(pod) or ():
        for expression in term.get("matchExpressions") or ():
            if expression.get("key") in (qos.COLOCATION_NODE_LABEL, qos.OVERSUBSCRIPTION_NODE_LABEL):
                labels.add(f"{expression['key']}={','.join(expression.get('values') or ())}")
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    labels.update(f"{k}={v}" for k, v in selector.items()
                  if k in (qos.COLOCATION_NODE_LABEL, qos.OVERSUBSCRIPTION_NODE_LABEL))
    return sorted(labels)


def _scheduled_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return condition
    return None


def _reason_in_message(message: str) -> str | None:
    """The scheduler's message read for the reasons Tidal knows (Volcano and kube-scheduler word
    them alike: ``0/3 nodes are unavailable: 3 Insufficient kubernetes.io/batch-cpu.``)."""
    text = message.lower()
    if qos.OFFLINE_EVICTING_TAINT_KEY in text:
        return "OfflineEvicting"
    if "insufficient kubernetes.io/batch-" in text:
        return "NoBatchCapacity"
    if "affinity" in text or "selector" in text:
        return "NoNodeInMode"
    return None


def _container_waiting(pod: Mapping[str, Any]) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting:
            return f"{status.get('name', '')}: {waiting.get('reason', '')}" + (
                f" ({waiting['message']})" if waiting.get("message") else "")
    return ""


def why_pending(pod: Mapping[str, Any], nodes: Iterable[NodeFacts]) -> Pending | None:
    """Why `pod` is Pending (None: it is not).

    A pod bound to a node is ``Starting``. Otherwise the nodes are filtered as a scheduler does —
    node selector and required node affinity (for a BE pod the admission webhook requires the
    oversubscription label: the node's mode), Ready and not cordoned, taints (the agent's
    ``colocation.tidal.io/offline-evicting`` apart from others), free batch resources — and the
    first filter that leaves no node is the reason, naming the nodes it removed. When a node
    passes every filter, the scheduler's ``PodScheduled=False`` message decides (``Unschedulable``
    with its text, or the reason it names), and without one the pod is ``Scheduling``.
    """
    if (pod.get("status") or {}).get("phase") != "Pending":
        return None
    condition = _scheduled_condition(pod)
    scheduler_message = ""
    if condition is not None and condition.get("status") == "False":
        scheduler_message = str(condition.get("message") or condition.get("reason") or "")
    bound = (pod.get("spec") or {}).get("nodeName")
    if bound:
        waiting = _container_waiting(pod)
        return Pending("Starting", f"bound to node {bound}; containers not running yet"
                       + (f" ({waiting})" if waiting else ""), scheduler_message)

    nodes = list(nodes)
    if not nodes:
        return Pending("NoNodes", PENDING_REASONS["NoNodes"], scheduler_message)
    matching = [n for n in nodes if _affinity_matches(pod, n)]
    if not matching:
        wanted = _required_tidal_labels(pod)
        return Pending("NoNodeInMode", (
            f"no node has the labels the pod requires ({'; '.join(wanted)}): set a node's mode in the console "
            "(oversubscription or colocation+oversubscription for BE pods on batch resources)" if wanted else
            f"none of the {len(nodes)} node(s) matches the pod's node selector / required node affinity"),
            scheduler_message)
    usable = [n for n in matching if n.ready and not n.unschedulable]
    if not usable:
        return Pending("NodesUnavailable", f"the node(s) the pod may use are NotReady or cordoned: "
                                           f"{_names(matching)}", scheduler_message)
    evicting = [n for n in usable
                if any(t.get("key") == qos.OFFLINE_EVICTING_TAINT_KEY for t in _untolerated(pod, n))]
    untainted = [n for n in usable if n not in evicting]
    if not untainted:
        return Pending("OfflineEvicting", (
            f"every node the pod may use carries the taint {qos.OFFLINE_EVICTING_TAINT_KEY}:NoSchedule "
            f"({_names(evicting)}): its agent is evicting BE pods there, and new ones wait until usage is "
            "back at or below the low watermarks"), scheduler_message)
    tolerated = [n for n in untainted if not _untolerated(pod, n)]
    if not tolerated:
        keys = sorted({t.get("key", "") for n in untainted for t in _untolerated(pod, n)})
        return Pending("Tainted", f"the node(s) the pod may use carry taints it does not tolerate "
                                  f"({', '.join(keys)}): {_names(untainted)}", scheduler_message)
    wants = pod_batch(pod)
    fits = [n for n in tolerated if n.batch_free_cpu_millicores >= wants.cpu_millicores
            and n.batch_free_memory_bytes >= wants.memory_bytes]
    if not fits:
        roomiest = max(tolerated, key=lambda n: (n.batch_free_cpu_millicores, n.batch_free_memory_bytes))
        return Pending("NoBatchCapacity", (
            f"the pod requests batch-cpu {wants.cpu_millicores}m and batch-memory {_memory(wants.memory_bytes)}; "
            f"the most free on a node it may use is {max(0, roomiest.batch_free_cpu_millicores)}m and "
            f"{_memory(max(0, roomiest.batch_free_memory_bytes))} (node {roomiest.name}). The oversell master "
            "publishes what the online pods leave unused: see the node's batch breakdown"), scheduler_message)
    if scheduler_message:
        named = _reason_in_message(scheduler_message)
        return Pending(named or "Unschedulable", f"the scheduler: {scheduler_message} (now {len(fits)} node(s) "
                                                 f"fit as far as Tidal can tell: {_names(fits)})", scheduler_message)
    return Pending("Scheduling", f"{len(fits)} node(s) fit ({_names(fits)}); the scheduler has not placed the pod "
                                 f"yet (spec.schedulerName {(pod.get('spec') or {}).get('schedulerName') or 'default'}"
                                 ": is that scheduler running?)", scheduler_message)


# -- events -----------------------------------------------------------------------------------

def _event_time(event: Mapping[str, Any]) -> str:
    # Events written with the events.k8s.io API carry eventTime / series, core ones lastTimestamp.
    series = event.get("series") or {}
    return str(event.get("lastTimestamp") or series.get("lastObservedTime") or event.get("eventTime")
               or _meta(event).get("creationTimestamp") or "")


def tidal_events(events: Iterable[Mapping[str, Any]], limit: int = MAX_EVENTS) -> tuple[list[dict], bool]:
    """Tidal's Events (reasons of `TIDAL_EVENT_REASONS`), newest first, at most `limit`;
    and whether some were left out."""
    items = []
    for event in events:
        reason = event.get("reason")
        if reason not in TIDAL_EVENT_REASONS:
            continue
        involved = event.get("involvedObject") or {}
        source = event.get("source") or {}
        items.append({
            "reason": reason, "type": str(event.get("type") or "Normal"), "message": str(event.get("message") or ""),
            "time": _event_time(event), "count": _int(event.get("count") or (event.get("series") or {}).get("count")
                                                      or 1),
            "object": {"kind": str(involved.get("kind") or ""), "namespace": str(involved.get("namespace") or ""),
                       "name": str(involved.get("name") or "")},
            "source": str(event.get("reportingComponent") or source.get("component") or ""),
            "node": str(event.get("reportingInstance") or source.get("host") or
                        (involved.get("name") if involved.get("kind") == "Node" else "") or ""),
        })
    items.sort(key=lambda e: (e["time"], e["reason"], e["object"]["name"]), reverse=True)
    return items[:limit], len(items) > limit


# -- the page -----------------------------------------------------------------------------------

def _level(pod: Mapping[str, Any]) -> str | None:
    try:
        level = qos.qos_level_of(_meta(pod).get("annotations"))
    except qos.AnnotationError:
        return None
    return level.value if level is not None else None


def batch_why(oversell: Any) -> dict[str, Any]:
    """The oversell master's word on a node (NodeProfile ``status.oversell``): its reason per
    resource (None before it decided the node, or in a breakdown of another shape) and its notes."""
    oversell = oversell if isinstance(oversell, Mapping) else {}

    def reason(key: str) -> str | None:
        part = oversell.get(key)
        value = part.get("reason") if isinstance(part, Mapping) else None
        return value if isinstance(value, str) else None

    notes = oversell.get("notes")
    return {"cpuMillicores": reason("cpuMillicores"), "memoryBytes": reason("memoryBytes"),
            "notes": [n for n in notes if isinstance(n, str)] if isinstance(notes, list) else []}


def overview(nodes: Iterable[Mapping[str, Any]], profiles: Mapping[str, Mapping[str, Any]],
             pods: Iterable[Mapping[str, Any]], events: Iterable[Mapping[str, Any]],
             max_pending: int = MAX_PENDING_PODS, max_events: int = MAX_EVENTS) -> dict[str, Any]:
    """The overview (``Overview`` in the OpenAPI document) of the cluster's nodes, NodeProfiles
    (by name), not-finished pods and Events."""
    nodes = sorted(nodes, key=lambda n: _meta(n).get("name", ""))
    be_pods = [p for p in pods if _level(p) == "BE"
               and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    on_node: dict[str, list[Mapping[str, Any]]] = {}
    for pod in be_pods:
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            on_node.setdefault(bound, []).append(pod)
    facts = [node_facts(n, on_node.get(_meta(n).get("name", ""), ())) for n in nodes]

    node_rows = []
    for node, fact in zip(nodes, facts):
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        profile = profiles.get(fact.name)
        status = NodeProfileStatus.from_status((profile or {}).get("status"))
        mine = on_node.get(fact.name, [])
        requested = batch_requested_total(mine)
        node_rows.append({
            "name": fact.name, "mode": str(node_mode(fact.labels, _meta(node).get("annotations")).mode),
            "ready": fact.ready, "unschedulable": fact.unschedulable,
            "evicting": any(t.get("key") == qos.OFFLINE_EVICTING_TAINT_KEY for t in fact.taints),
            "batch": {"allocatable": {"cpuMillicores": _int(allocatable.get(qos.BATCH_CPU_RESOURCE)),
                                      "memoryBytes": _int(allocatable.get(qos.BATCH_MEMORY_RESOURCE))},
                      "requested": {"cpuMillicores": requested.cpu_millicores,
                                    "memoryBytes": requested.memory_bytes},
                      "why": batch_why(status.oversell)},
            "bePods": {"running": sum((p.get("status") or {}).get("phase") == "Running" for p in mine),
                       "starting": sum((p.get("status") or {}).get("phase") == "Pending" for p in mine)},
            "agentReported": profile is not None,
            "replayed": replayed(status),
            "problems": list((status.policy or PolicyReport()).problems or ()),
        })

    pending = []
    for pod in be_pods:
        answer = why_pending(pod, facts)
        if answer is None:
            continue
        meta = _meta(pod)
        pending.append({"namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
                        "created": meta.get("creationTimestamp") or "",
                        "node": (pod.get("spec") or {}).get("nodeName") or None, **answer.to_json()})
    pending.sort(key=lambda p: (p["created"], p["namespace"], p["name"]))
    by_reason: dict[str, int] = {}
    for item in pending:
        by_reason[item["reason"]] = by_reason.get(item["reason"], 0) + 1
    recent, events_truncated = tidal_events(events, max_events)
    return {
        "nodes": node_rows,
        "bePods": {"running": sum((p.get("status") or {}).get("phase") == "Running" for p in be_pods),
                   "pending": len(pending), "pendingByReason": by_reason,
                   "pendingPods": pending[:max_pending], "truncated": len(pending) > max_pending},
        "events": {"items": recent, "truncated": events_truncated},
        "limits": {"pendingPods": max_pending, "events": max_events},
        "pendingReasons": dict(PENDING_REASONS),
    }
