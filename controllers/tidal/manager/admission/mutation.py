# SPDX-License-Identifier: Apache-2.0
"""What Tidal changes on a pod of each QoS level when it is created, as a minimal JSON Patch.

Every level:

* ``spec.schedulerName: volcano``.
* ``spec.priorityClassName`` = the level's PriorityClass, and ``spec.priority`` and
  ``spec.preemptionPolicy`` = that class's values. The Priority admission plugin runs before
  mutating webhooks and has already copied the *original* class's value and policy into the
  pod; without rewriting them the stored pod would keep them (a BE pod could then preempt).
  A different class the user set is overwritten, with a warning: the level decides priority.

HLS and LS: a toleration of the ``colocation.tidal.io/offline-evicting:NoSchedule`` taint the
agent sets while it evicts offline pods, so online pods still schedule there. An existing
toleration that already covers it (operator Exists, key empty or equal, effect empty or
NoSchedule) is kept and none is added. A *preferred* node affinity (weight 10) to nodes that do
not oversell (``colocation.tidal.io/oversubscription NotIn [true]``): on an oversold node they
still use native resources only (the HLS/LS rule refuses ``kubernetes.io/batch-*``).

BE, using oversold batch resources (the default):

* a *required* node affinity to nodes labelled ``colocation.tidal.io/oversubscription=true``
  (with or without ``colocation.tidal.io/colocation=true``). Kubernetes ORs
  ``nodeSelectorTerms``, so the expression is ANDed into every existing term; no user term is
  dropped. An empty term (no expressions, no fields) matches no node, and is left so. A pod
  admitted under the earlier rule (both labels required) keeps both expressions: nothing is
  ever removed, only what is missing is added.
* native cpu/memory requests and limits of every container, init containers included, become
  ``kubernetes.io/batch-cpu`` (millicores) / ``kubernetes.io/batch-memory`` (bytes), see
  ``tidal.manager.admission.batch``; the native keys are removed;
* ``colocation.tidal.io/batch-resources``: every container's batch amounts as JSON, for the NRI
  plugin (NRI does not carry extended resources to plugins).

BE, keeping native requests (``colocation.tidal.io/oversell: "false"`` on the pod or its
namespace, or the policy's ``overselling.beUsesBatchResources: false``): requests untouched and
no annotation; a required node affinity to ``colocation.tidal.io/colocation=true`` and a
preferred one (weight 50) to oversold nodes. With ``overselling.beFallbackToNative`` nothing is
required: colocation and oversold nodes are preferred (weight 50 each).

Preferences are ``preferredDuringSchedulingIgnoredDuringExecution`` terms of one expression,
appended unless a term saying the same (any weight) is there; user terms are kept.

The patch is minimal (only what differs, ``add`` for what is missing, including a missing
parent map, ``replace``/``remove`` on exact paths) and idempotent: reviewing the patched pod
again yields no operation, which is what webhook reinvocation needs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tidal.manager.admission.batch import BATCH_RESOURCE_OF, NATIVE_RESOURCES, native_amount
from tidal.api.json_patch import Operation, add, member, remove, replace, set_member
from tidal.manager.admission.podspec import Container, containers_of
from tidal.api.quantities import QuantityError, parse_quantity
from tidal.api.shape import MalformedObjectError, optional_array, optional_object
from tidal.api.qos import (
    BATCH_RESOURCES_ANNOTATION,
    COLOCATION_NODE_LABEL,
    NODE_LABEL_ENABLED_VALUE,
    OFFLINE_EVICTING_TAINT_EFFECT,
    OFFLINE_EVICTING_TAINT_KEY,
    OVERSUBSCRIPTION_NODE_LABEL,
    PRIORITY_CLASS_BY_LEVEL,
    SCHEDULER_NAME,
    QoSLevel,
)

__all__ = ["Mutation", "NodePreference", "node_placement", "pod_mutation"]

REQUIRED_NODE_AFFINITY = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED_NODE_AFFINITY = "preferredDuringSchedulingIgnoredDuringExecution"
#: What the API server defaults schedulerName to; replacing it is not worth a warning.
DEFAULT_SCHEDULER_NAME = "default-scheduler"
#: What an absent preemptionPolicy means.
DEFAULT_PREEMPTION_POLICY = "PreemptLowerPriority"


@dataclass(frozen=True, slots=True)
class Mutation:
    """The patch for one pod.

    Attributes:
        ops: RFC 6902 operations against the Pod object, in the order they apply.
        warnings: for the user (AdmissionResponse.warnings), e.g. an overwritten
            priorityClassName.
    """

    ops: tuple[Operation, ...] = ()
    warnings: tuple[str, ...] = ()


def _quote(text: str) -> str:
    return json.dumps(text if len(text) <= 64 else text[:64] + "…", ensure_ascii=False)


def _scheduling(
    spec: dict[str, Any], level: QoSLevel, ops: list[Operation], warnings: list[str]
) -> None:
    scheduler = spec.get("schedulerName")
    if scheduler != SCHEDULER_NAME:
        if isinstance(scheduler, str) and scheduler not in ("", DEFAULT_SCHEDULER_NAME):
            warnings.append(
                f"schedulerName {_quote(scheduler)} replaced by {_quote(SCHEDULER_NAME)} "
                f"for QoS level {level}"
            )
        ops.append(set_member(spec, "schedulerName", SCHEDULER_NAME, "/spec"))

    priority_class = PRIORITY_CLASS_BY_LEVEL[level]
    class_name = spec.get("priorityClassName")
    if class_name != priority_class.name:
        if isinstance(class_name, str) and class_name:
            warnings.append(
                f"priorityClassName {_quote(class_name)} replaced by {_quote(priority_class.name)} "
                f"for QoS level {level}"
            )
        ops.append(set_member(spec, "priorityClassName", priority_class.name, "/spec"))
    priority = spec.get("priority")
    if isinstance(priority, bool) or priority != priority_class.value:
        ops.append(set_member(spec, "priority", priority_class.value, "/spec"))
    if (
        spec.get("preemptionPolicy") or DEFAULT_PREEMPTION_POLICY
    ) != priority_class.preemption_policy:
        ops.append(set_member(spec, "preemptionPolicy", priority_class.preemption_policy, "/spec"))


# --- Where a pod may run, and where it would rather run ---------------------------------------


@dataclass(frozen=True, slots=True)
class NodePreference:
    """One ``preferredDuringSchedulingIgnoredDuringExecution`` term Tidal adds: a node label
    ``In`` / ``NotIn`` ``["true"]``, with its weight (1-100, summed by the scheduler over the
    terms a node matches; Volcano's ``nodeorder`` plugin multiplies the sum by its
    ``nodeaffinity.weight``)."""

    weight: int
    label: str
    operator: str = "In"

    def requirement(self) -> dict[str, Any]:
        return _requirement(self.label, self.operator)

    def term(self) -> dict[str, Any]:
        return {"weight": self.weight, "preference": {"matchExpressions": [self.requirement()]}}


#: BE pods: nodes that oversell (Tidal acts there; native BE pods get BE isolation too).
BE_PREFERS_OVERSOLD = NodePreference(50, OVERSUBSCRIPTION_NODE_LABEL)
#: BE pods that may run anywhere (``beFallbackToNative``): colocation nodes, for BE isolation.
BE_PREFERS_COLOCATION = NodePreference(50, COLOCATION_NODE_LABEL)
#: HLS and LS pods: nodes that do not oversell, where reclaimed capacity is not sold to BE pods.
ONLINE_PREFERS_NOT_OVERSOLD = NodePreference(10, OVERSUBSCRIPTION_NODE_LABEL, "NotIn")


def _requirement(label: str, operator: str = "In") -> dict[str, Any]:
    # Fresh objects for every operation: a serialised patch must not alias anything.
    return {"key": label, "operator": operator, "values": [NODE_LABEL_ENABLED_VALUE]}


def _is_same_requirement(wanted: dict[str, Any], existing: Any) -> bool:
    return (
        isinstance(existing, dict)
        and existing.get("key") == wanted["key"]
        and existing.get("operator") == wanted["operator"]
        and existing.get("values") == wanted["values"]
    )


def _is_same_preference(wanted: NodePreference, existing: Any) -> bool:
    """A user's (or an earlier review's) term that says the same, whatever its weight."""
    if not isinstance(existing, dict):
        return False
    preference = existing.get("preference")
    if not isinstance(preference, dict) or preference.get("matchFields"):
        return False
    expressions = preference.get("matchExpressions")
    return (
        isinstance(expressions, list)
        and len(expressions) == 1
        and _is_same_requirement(wanted.requirement(), expressions[0])
    )


def _new_node_affinity(
    required_labels: tuple[str, ...], preferences: tuple[NodePreference, ...]
) -> dict[str, Any]:
    value: dict[str, Any] = {}
    if required_labels:
        terms = [{"matchExpressions": [_requirement(label) for label in required_labels]}]
        value[REQUIRED_NODE_AFFINITY] = {"nodeSelectorTerms": terms}
    if preferences:
        value[PREFERRED_NODE_AFFINITY] = [preference.term() for preference in preferences]
    return value


def _node_affinity(
    spec: dict[str, Any],
    required_labels: tuple[str, ...],
    preferences: tuple[NodePreference, ...],
    ops: list[Operation],
) -> None:
    """Require every label of ``required_labels`` (``In ["true"]``) and add ``preferences``.

    Nothing the pod has is removed or rewritten: an expression or a preference already there
    (from the user or an earlier review, e.g. under the earlier rule that required both node
    labels) is kept, and only what is missing is added.
    """
    if not required_labels and not preferences:
        return
    affinity = optional_object(spec, "affinity", "spec.affinity")
    if affinity is None:
        value = {"nodeAffinity": _new_node_affinity(required_labels, preferences)}
        ops.append(set_member(spec, "affinity", value, "/spec"))
        return
    node_affinity = optional_object(affinity, "nodeAffinity", "spec.affinity.nodeAffinity")
    if node_affinity is None:
        value = _new_node_affinity(required_labels, preferences)
        ops.append(set_member(affinity, "nodeAffinity", value, "/spec/affinity"))
        return
    if required_labels:
        _required_node_affinity(node_affinity, required_labels, ops)
    if preferences:
        _preferred_node_affinity(node_affinity, preferences, ops)


def _required_node_affinity(
    node_affinity: dict[str, Any], required_labels: tuple[str, ...], ops: list[Operation]
) -> None:
    """The labels ANDed into every required term (Kubernetes ORs ``nodeSelectorTerms``)."""

    def requirements() -> list[dict[str, Any]]:
        return [_requirement(label) for label in required_labels]

    node_affinity_path = "/spec/affinity/nodeAffinity"
    required_path_text = f"spec.affinity.nodeAffinity.{REQUIRED_NODE_AFFINITY}"
    required = optional_object(node_affinity, REQUIRED_NODE_AFFINITY, required_path_text)
    if required is None:
        terms = [{"matchExpressions": requirements()}]
        ops.append(
            set_member(
                node_affinity,
                REQUIRED_NODE_AFFINITY,
                {"nodeSelectorTerms": terms},
                node_affinity_path,
            )
        )
        return
    required_path = member(node_affinity_path, REQUIRED_NODE_AFFINITY)
    terms = optional_array(required, "nodeSelectorTerms", f"{required_path_text}.nodeSelectorTerms")
    if not terms:
        # No term selects no node (and fails validation); the Tidal term is the whole selector.
        ops.append(
            set_member(
                required,
                "nodeSelectorTerms",
                [{"matchExpressions": requirements()}],
                required_path,
            )
        )
        return
    for index, term in enumerate(terms):
        term_path_text = f"{required_path_text}.nodeSelectorTerms[{index}]"
        if not isinstance(term, dict):
            raise MalformedObjectError(term_path_text, "an object", term)
        expressions = optional_array(term, "matchExpressions", f"{term_path_text}.matchExpressions")
        fields = optional_array(term, "matchFields", f"{term_path_text}.matchFields")
        if not expressions and not fields:
            continue
        missing = [
            wanted
            for wanted in requirements()
            if not any(_is_same_requirement(wanted, existing) for existing in expressions or ())
        ]
        if not missing:
            continue
        term_path = member(member(required_path, "nodeSelectorTerms"), index)
        if expressions is None:
            ops.append(set_member(term, "matchExpressions", missing, term_path))
        else:
            ops.extend(
                add(member(term_path, "matchExpressions") + "/-", wanted) for wanted in missing
            )


def _preferred_node_affinity(
    node_affinity: dict[str, Any], preferences: tuple[NodePreference, ...], ops: list[Operation]
) -> None:
    """Each preference appended unless a term saying the same is there (the user's weight stays)."""
    node_affinity_path = "/spec/affinity/nodeAffinity"
    preferred = optional_array(
        node_affinity, PREFERRED_NODE_AFFINITY,
        f"spec.affinity.nodeAffinity.{PREFERRED_NODE_AFFINITY}",
    )
    missing = [
        wanted for wanted in preferences
        if not any(_is_same_preference(wanted, existing) for existing in preferred or ())
    ]
    if not missing:
        return
    if preferred is None:
        value = [wanted.term() for wanted in missing]
        ops.append(set_member(node_affinity, PREFERRED_NODE_AFFINITY, value, node_affinity_path))
        return
    path = member(node_affinity_path, PREFERRED_NODE_AFFINITY) + "/-"
    ops.extend(add(path, wanted.term()) for wanted in missing)


def node_placement(
    level: QoSLevel, be_native: bool = False, be_anywhere: bool = False
) -> tuple[tuple[str, ...], tuple[NodePreference, ...]]:
    """The node labels a pod of ``level`` requires (``In ["true"]``) and its preferences.

    * BE on batch resources: ``oversubscription`` required (only oversold nodes publish
      ``kubernetes.io/batch-*``); no preference, every node it may use oversells already.
    * BE on native requests (``be_native``): ``colocation`` required, oversold nodes preferred;
      with ``be_anywhere`` (``beFallbackToNative``) nothing required, colocation and oversold
      nodes preferred.
    * HLS and LS: nothing required, nodes that do not oversell preferred.
    """
    if level is not QoSLevel.BE:
        return (), (ONLINE_PREFERS_NOT_OVERSOLD,)
    if not be_native:
        return (OVERSUBSCRIPTION_NODE_LABEL,), ()
    if be_anywhere:
        return (), (BE_PREFERS_COLOCATION, BE_PREFERS_OVERSOLD)
    return (COLOCATION_NODE_LABEL,), (BE_PREFERS_OVERSOLD,)


# --- HLS/LS: where they may still schedule -----------------------------------------------------


def _tolerates_offline_evicting(toleration: Any) -> bool:
    if not isinstance(toleration, dict):
        return False
    return (
        toleration.get("operator") == "Exists"
        and toleration.get("key") in (None, "", OFFLINE_EVICTING_TAINT_KEY)
        and toleration.get("effect") in (None, "", OFFLINE_EVICTING_TAINT_EFFECT)
    )


def _offline_evicting_toleration(spec: dict[str, Any], ops: list[Operation]) -> None:
    tolerations = optional_array(spec, "tolerations", "spec.tolerations")
    if tolerations and any(_tolerates_offline_evicting(toleration) for toleration in tolerations):
        return
    toleration = {
        "key": OFFLINE_EVICTING_TAINT_KEY,
        "operator": "Exists",
        "effect": OFFLINE_EVICTING_TAINT_EFFECT,
    }
    if tolerations is None:
        ops.append(set_member(spec, "tolerations", [toleration], "/spec"))
    else:
        ops.append(add("/spec/tolerations/-", toleration))


# --- BE: native resources become batch resources ----------------------------------------------


def _same_quantity(existing: Any, wanted: str) -> bool:
    try:
        return parse_quantity(existing) == parse_quantity(wanted)
    except QuantityError:
        return False


def _batch_amounts(container: Container) -> dict[str, str]:
    """Batch resource -> the amount its request and limit must both hold, as written."""
    amounts: dict[str, str] = {}
    for resource in NATIVE_RESOURCES:
        batch = BATCH_RESOURCE_OF[resource]
        native = native_amount(container, resource)
        if native is not None:
            amounts[batch] = str(native.amount)
            continue
        # Only a batch value: complete the missing side with it (Kubernetes requires both).
        existing = container.limits.get(batch)
        if existing is None:
            existing = container.requests.get(batch)
        if existing is not None:
            amounts[batch] = existing if isinstance(existing, str) else str(existing)
    return amounts


def _rewrite_resource_map(
    resources: dict[str, Any],
    map_name: str,
    amounts: dict[str, str],
    resources_path: str,
    ops: list[Operation],
) -> None:
    current = resources.get(map_name)
    if not isinstance(current, dict):  # absent or null: add the whole map at once
        if amounts:
            ops.append(set_member(resources, map_name, dict(amounts), resources_path))
        return
    map_path = f"{resources_path}/{map_name}"
    ops.extend(
        remove(f"{map_path}/{resource}") for resource in NATIVE_RESOURCES if resource in current
    )
    for batch, amount in amounts.items():
        existing = current.get(batch)
        if existing is None:
            ops.append(set_member(current, batch, amount, map_path))
        elif not _same_quantity(existing, amount):
            ops.append(replace(member(map_path, batch), amount))


def _batch_resources(containers: list[Container], ops: list[Operation]) -> None:
    for container in containers:
        if container.resources is None:
            continue
        amounts = _batch_amounts(container)
        resources_path = f"/spec/{container.list_name}/{container.index}/resources"
        for map_name in ("requests", "limits"):
            _rewrite_resource_map(container.resources, map_name, amounts, resources_path, ops)


def batch_resources_annotation(containers: list[Container]) -> str | None:
    """The BE pod's ``colocation.tidal.io/batch-resources`` value: every container's batch
    amounts (init containers included; names are unique in a pod), as compact sorted JSON."""
    # Only string names key the map (a list would not even be hashable); the API server
    # rejects a pod with any other name anyway.
    amounts = {c.name: {k: _canonical(v) for k, v in _batch_amounts(c).items()}
               for c in containers if c.resources is not None and isinstance(c.name, str)}
    amounts = {name: a for name, a in amounts.items() if a}
    return json.dumps(amounts, sort_keys=True, separators=(",", ":")) if amounts else None


def _canonical(amount: str) -> str:
    """A batch amount as a plain integer (``2k`` and ``2000`` are one value), so the annotation
    does not change when reinvocation reads the amounts as written instead of as converted."""
    try:
        return str(int(parse_quantity(amount)))
    except (QuantityError, ValueError, TypeError):
        return amount


def _batch_annotation(annotations: dict[str, Any] | None, containers: list[Container],
                      ops: list[Operation]) -> None:
    value = batch_resources_annotation(containers)
    if value is None or annotations is None or annotations.get(BATCH_RESOURCES_ANNOTATION) == value:
        return
    ops.append(set_member(annotations, BATCH_RESOURCES_ANNOTATION, value, "/metadata/annotations"))


def pod_mutation(
    spec: dict[str, Any], level: QoSLevel, containers: list[Container] | None = None,
    annotations: dict[str, Any] | None = None, *, be_native: bool = False,
    be_anywhere: bool = False,
) -> Mutation:
    """The patch that makes a pod of ``level`` follow Tidal's scheduling contract.

    ``spec`` is ``pod.spec`` and must already satisfy the rule of ``level``
    (``rules.violations`` is empty): BE quantities are read as valid. ``containers`` is
    ``containers_of(spec, "spec")`` when the caller already has it; ``annotations`` the pod's
    ``metadata.annotations`` (where a BE pod gets ``colocation.tidal.io/batch-resources``).
    ``be_native``: a BE pod that keeps its native requests (``oversell_opted_out``): no batch
    resources, colocation nodes; ``be_anywhere`` (``overselling.beFallbackToNative``): such a
    pod requires no node label, it only prefers (see `node_placement`).

    Raises:
        MalformedObjectError: a part of the spec the mutation reads has the wrong JSON type.
    """
    ops: list[Operation] = []
    warnings: list[str] = []
    _scheduling(spec, level, ops, warnings)
    required_labels, preferences = node_placement(level, be_native, be_anywhere)
    _node_affinity(spec, required_labels, preferences, ops)
    if level is QoSLevel.BE:
        if not be_native:
            containers = containers_of(spec, "spec") if containers is None else containers
            _batch_resources(containers, ops)
            _batch_annotation(annotations, containers, ops)
    else:
        _offline_evicting_toleration(spec, ops)
    return Mutation(tuple(ops), tuple(warnings))
