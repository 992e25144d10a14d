# SPDX-License-Identifier: Apache-2.0
"""The ColocationPolicy CRD: its ``spec`` schema rendered from `tidal.api.policy`'s field specs, its
``status`` (the rollout that tidal-manager writes) and how kubectl lists it.

``hack/generate_crds.py`` writes `crd` to ``tidal/crds/colocation.tidal.io_colocationpolicies.yaml``
(and the ``tidal_controllers`` role's copy), so the API server validates and defaults exactly what
`tidal.api.policy.ColocationPolicy.from_spec` does:

* each field's type, bounds, enum and description are its `FieldSpec`'s; its default is the
  model's default;
* an array is a set (``x-kubernetes-list-type: set``): the API server rejects duplicates, as the
  model does (``uniqueItems`` is not allowed in CRDs);
* each `CrossFieldRule` is a CEL rule on its object, with the message ``"<path> <message>"``;
* nested objects default to ``{}`` so that an empty or partial spec is filled in field by field.
  Objects that carry a CEL rule default to their complete value instead: the API server checks
  each default against the CEL rules of its own node before nested defaults are applied, so a
  rule reading ``self.lowPercent`` would fail on ``{}`` and the CRD itself would be rejected.

This module is separate from `tidal.api.policy` because the collection carries a generated copy
of that one (``plugins/module_utils/policy_model.py``), which must not import anything of `tidal`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidal.api.policy import (
    DEFAULT_POLICY_NAME,
    POLICY_KIND,
    ColocationPolicy,
    CrossFieldRule,
    FieldSpec,
)
from tidal.api.schema import (
    Condition,
    custom_resource_definition,
    from_json,
    object_schema,
    prop,
    to_json,
)

__all__ = ["PLURAL", "NodeRollout", "PolicyStatus", "spec_schema", "crd"]

PLURAL = "colocationpolicies"
SHORT_NAME = "cpol"

DESCRIPTION = (
    f'Cluster-wide colocation policy. There is exactly one, named "{DEFAULT_POLICY_NAME}"; a '
    "change takes effect on every colocation node within 30 seconds, without restarts."
)
SPEC_DESCRIPTION = "Every tunable; omitted fields take the defaults shown here."

#: metadata.name is visible to CEL only in rules at the root of a CRD's schema (apiVersion, kind,
#: metadata.name and metadata.generateName are accessible there and nowhere else), so the
#: singleton rule lives at the root. No fieldPath: metadata is not part of the schema, so a
#: fieldPath into it would not validate.
SINGLETON_RULE = {
    "rule": f"self.metadata.name == '{DEFAULT_POLICY_NAME}'",
    "message": f"metadata.name must be '{DEFAULT_POLICY_NAME}': {POLICY_KIND} is a cluster "
    "singleton",
    "reason": "FieldValueInvalid",
}

PRINTER_COLUMNS = (
    {"name": "Overselling", "type": "boolean", "jsonPath": ".spec.overselling.enabled"},
    {"name": "Applied", "type": "integer", "description": "Nodes that run the current generation.",
     "jsonPath": ".status.appliedNodes"},
    {"name": "Nodes", "type": "integer", "description": "Colocation nodes the policy applies to.",
     "jsonPath": ".status.totalNodes"},
)


# --- status -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class NodeRollout:
    """One node's place in the rollout."""

    name: str = prop("name", "Node name.", required=True)
    applied_generation: int | None = prop(
        "appliedGeneration",
        "The policy generation the node's agent runs (from its NodeProfile).",
        format="int64", minimum=0,
    )
    reason: str | None = prop(
        "reason", "Why the node is not at observedGeneration yet (empty when it is)."
    )


@dataclass(frozen=True, kw_only=True)
class PolicyStatus:
    """Rollout of the policy to the nodes, written by tidal-manager (`tidal.manager.policy`)."""

    observed_generation: int | None = prop(
        "observedGeneration", "The metadata.generation of the spec this status describes.",
        format="int64", minimum=0,
    )
    total_nodes: int | None = prop(
        "totalNodes", "Colocation nodes the policy applies to.", format="int32", minimum=0
    )
    applied_nodes: int | None = prop(
        "appliedNodes", "Nodes whose agent runs observedGeneration.", format="int32", minimum=0
    )
    nodes: tuple[NodeRollout, ...] | None = prop(
        "nodes", "Per node, the generation its agent has applied.", list_map_keys=["name"]
    )
    conditions: tuple[Condition, ...] | None = prop(
        "conditions",
        "Standard conditions. Applied is True when every colocation node runs observedGeneration.",
        list_map_keys=["type"],
    )

    def to_status(self) -> dict[str, Any]:
        """The JSON of this status; parts that are None are left out."""
        return to_json(self)

    @classmethod
    def from_status(cls, status: Mapping[str, Any] | None) -> PolicyStatus:
        """A stored status, read leniently: a missing or malformed part reads as None."""
        return from_json(cls, status) or cls()


STATUS_DESCRIPTION = "Rollout of the policy to the nodes, written by tidal-manager."


# --- spec -------------------------------------------------------------------------------------


def _bound(value: int | float) -> int | float:
    # 0 rather than 0.0 for a number field's bounds: the same value, as the CRD always wrote it.
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _validation(path: str, rule: CrossFieldRule) -> dict[str, Any]:
    field_path = f"{path}.{rule.field}" if rule.field else path
    validation = {"rule": rule.cel, "message": f"{field_path} {rule.message}"}
    if rule.field:
        validation["fieldPath"] = f".{rule.field}"
    validation["reason"] = "FieldValueInvalid"
    return validation


def _field_schema(path: str, spec: FieldSpec, default: Any) -> dict[str, Any]:
    node: dict[str, Any] = {"type": spec.kind}
    if spec.kind == "object":
        node["default"] = default if spec.object_type.RULES else {}
    else:
        node["default"] = default
    if spec.kind == "string":
        node["enum"] = list(spec.enum)
    if spec.minimum is not None:
        node["minimum"] = _bound(spec.minimum)
    if spec.maximum is not None:
        node["maximum"] = _bound(spec.maximum)
    if spec.kind == "array":
        node["minItems"] = spec.min_items
        node["x-kubernetes-list-type"] = "set"
        node["items"] = {"type": "string", "enum": list(spec.enum)}
    node["description"] = spec.description
    if spec.kind == "object":
        if spec.object_type.RULES:
            node["x-kubernetes-validations"] = [
                _validation(path, rule) for rule in spec.object_type.RULES
            ]
        node["properties"] = _properties(spec.object_type, default, path)
    return node


def _properties(cls: type, value: dict[str, Any], path: str) -> dict[str, Any]:
    properties = {}
    for f in dataclasses.fields(cls):
        spec = FieldSpec.of(f)
        field_path = f"{path}.{spec.name}"
        properties[spec.name] = _field_schema(field_path, spec, value[spec.name])
    return properties


def spec_schema() -> dict[str, Any]:
    """The OpenAPI schema of a ColocationPolicy's ``spec``, defaults included."""
    assert not ColocationPolicy.RULES, "a rule on the spec itself would need rendering here"
    return {
        "type": "object",
        "default": {},
        "description": SPEC_DESCRIPTION,
        "properties": _properties(ColocationPolicy, ColocationPolicy().to_spec(), "spec"),
    }


def crd() -> dict[str, Any]:
    """The ColocationPolicy CustomResourceDefinition."""
    return custom_resource_definition(
        kind=POLICY_KIND,
        plural=PLURAL,
        short_name=SHORT_NAME,
        description=DESCRIPTION,
        printer_columns=PRINTER_COLUMNS,
        validations=[SINGLETON_RULE],
        spec=spec_schema(),
        status=object_schema(PolicyStatus, STATUS_DESCRIPTION),
    )
