# SPDX-License-Identifier: Apache-2.0
"""Typed descriptions of API objects' status, their OpenAPI schema, and CustomResourceDefinitions.

A status is a tree of frozen, keyword-only dataclasses whose fields are declared with `prop`: the JSON name and
the schema keywords the Python type does not say (format, bounds, description, list-map keys).
From one description come the CRD schema (`object_schema`), the JSON an agent writes
(`to_json`) and the typed value a reader gets back (`from_json`).

Python types map to OpenAPI types: ``bool`` boolean, ``int`` integer, ``float`` number, ``str``
string, a dataclass an object with its properties, ``tuple[X, ...]`` an array of X,
``dict[str, Any]`` an object whose fields are preserved as they are, ``X | None`` the same as X
(the field may be absent). Absent (None) fields are left out of the JSON: a merge patch would
delete them otherwise.

`custom_resource_definition` renders a whole apiextensions.k8s.io/v1 CRD of Tidal's API group;
``hack/generate_crds.py`` writes them to ``tidal/crds/`` (`tidal.crds`).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidal.api import qos

__all__ = [
    "Prop",
    "prop",
    "Condition",
    "object_schema",
    "field_schema",
    "to_json",
    "from_json",
    "custom_resource_definition",
]

_PROP = "tidal.api.schema/prop"


@dataclass(frozen=True)
class Prop:
    """How one dataclass field appears in JSON and in the OpenAPI schema.

    Attributes:
        name: JSON name (camelCase).
        description: what the field means, with units.
        required: listed in the enclosing object's ``required``.
        keywords: further schema keywords (``format``, ``minimum``, ``maxLength``, ``enum``,
            ``x-kubernetes-list-type``, ...), as they appear in the schema.
    """

    name: str
    description: str | None = None
    required: bool = False
    keywords: Mapping[str, Any] = field(default_factory=dict)


def prop(
    name: str,
    description: str | None = None,
    *,
    required: bool = False,
    default: Any = None,
    list_map_keys: Sequence[str] | None = None,
    **keywords: Any,
) -> Any:
    """A dataclass field described by a `Prop`; optional (default None) unless ``required``.

    ``list_map_keys`` makes an array a list-map keyed by those item fields. Other keywords are
    schema keywords with ``_`` for the camelCase boundary (``max_length`` is ``maxLength``,
    ``x_kubernetes_list_type`` is ``x-kubernetes-list-type``).
    """
    schema = {_keyword(key): value for key, value in keywords.items()}
    if list_map_keys is not None:
        schema["x-kubernetes-list-type"] = "map"
        schema["x-kubernetes-list-map-keys"] = list(list_map_keys)
    spec = Prop(name, description, required, schema)
    if required:
        return field(metadata={_PROP: spec})
    return field(default=default, metadata={_PROP: spec})


def _keyword(key: str) -> str:
    if key.startswith("x_"):
        return key.replace("_", "-")
    head, *rest = key.split("_")
    return head + "".join(part.capitalize() for part in rest)


@dataclass(frozen=True, kw_only=True)
class Condition:
    """A standard condition (``metav1.Condition``)."""

    type: str = prop("type", required=True, max_length=316)
    status: str = prop("status", required=True, enum=["True", "False", "Unknown"])
    observed_generation: int | None = prop("observedGeneration", format="int64", minimum=0)
    last_transition_time: str = prop("lastTransitionTime", required=True, format="date-time")
    reason: str = prop("reason", required=True, min_length=1, max_length=1024)
    message: str = prop("message", required=True, max_length=32768)


# --- Schema -----------------------------------------------------------------------------------


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _props(cls: type) -> list[tuple[dataclasses.Field, Prop, Any]]:
    hints = _hints(cls)
    return [(f, f.metadata[_PROP], hints[f.name]) for f in dataclasses.fields(cls)]


def _optional(annotation: Any) -> Any:
    """X for ``X | None``."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        (inner,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        return inner
    return annotation


def _type_schema(annotation: Any) -> dict[str, Any]:
    annotation = _optional(annotation)
    origin = typing.get_origin(annotation)
    if dataclasses.is_dataclass(annotation):
        return object_schema(annotation)
    if origin is tuple:
        item, ellipsis = typing.get_args(annotation)
        assert ellipsis is Ellipsis, annotation
        return {"type": "array", "items": _type_schema(item)}
    if origin in (dict, Mapping):
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    return {"type": simple[annotation]}


def field_schema(annotation: Any, spec: Prop) -> dict[str, Any]:
    """The schema of one field: its type's schema, its keywords and its description."""
    schema = _type_schema(annotation)
    body = {key: schema.pop(key) for key in ("items", "properties", "required") if key in schema}
    schema.update(spec.keywords)
    if spec.description is not None:
        schema["description"] = spec.description
    schema.update(body)
    return schema


def object_schema(cls: type, description: str | None = None) -> dict[str, Any]:
    """The OpenAPI schema of a status dataclass: an object with a property per field."""
    properties = {spec.name: field_schema(annotation, spec) for _, spec, annotation in _props(cls)}
    required = [spec.name for _, spec, _ in _props(cls) if spec.required]
    schema: dict[str, Any] = {"type": "object"}
    if description is not None:
        schema["description"] = description
    if required:
        schema["required"] = required
    schema["properties"] = properties
    return schema


# --- JSON -------------------------------------------------------------------------------------


def to_json(value: Any) -> Any:
    """A status dataclass (or a value inside one) as JSON data; None fields are left out."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f, spec, _ in _props(type(value)):
            item = getattr(value, f.name)
            if item is not None:
                out[spec.name] = to_json(item)
        return out
    if isinstance(value, (tuple, list)):
        return [to_json(item) for item in value]
    if isinstance(value, Mapping):
        return {key: to_json(item) for key, item in value.items()}
    return value


def from_json(cls: type, data: Any) -> Any:
    """The status dataclass ``cls`` read from JSON data, leniently, as a reader needs it.

    What another writer or an older agent put there must not break a reader: a missing key, a
    null, or a value of the wrong type reads as None (an absent field); unknown keys are
    ignored. Numbers are not coerced, except an integral float read as an ``int`` field.
    """
    return _read(cls, data)


def _read(annotation: Any, data: Any) -> Any:
    annotation = _optional(annotation)
    origin = typing.get_origin(annotation)
    if data is None:
        return None
    if dataclasses.is_dataclass(annotation):
        if not isinstance(data, Mapping):
            return None
        values = {}
        for f, spec, hint in _props(annotation):
            item = _read(hint, data.get(spec.name))
            if item is None and spec.required:
                return None  # an entry without its key (e.g. a list-map item) is unusable
            values[f.name] = item
        return annotation(**values)
    if origin is tuple:
        if not isinstance(data, (list, tuple)):
            return None
        (item_type, _) = typing.get_args(annotation)
        items = (_read(item_type, item) for item in data)
        return tuple(item for item in items if item is not None)
    if origin in (dict, Mapping):
        return dict(data) if isinstance(data, Mapping) else None
    if annotation is int:
        if isinstance(data, float) and data.is_integer():
            return int(data)
        return data if isinstance(data, int) and not isinstance(data, bool) else None
    if annotation is float:
        return data if isinstance(data, (int, float)) and not isinstance(data, bool) else None
    return data if isinstance(data, annotation) else None


# --- CustomResourceDefinition -----------------------------------------------------------------


def custom_resource_definition(
    *,
    kind: str,
    plural: str,
    short_name: str,
    description: str,
    printer_columns: Sequence[Mapping[str, Any]],
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    validations: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A cluster-scoped CRD of Tidal's API group with one served, stored version, a status
    subresource, and ``spec`` and ``status`` schemas as given."""
    root: dict[str, Any] = {"type": "object", "description": description}
    if validations:
        root["x-kubernetes-validations"] = [dict(v) for v in validations]
    root["properties"] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": dict(spec),
        "status": dict(status),
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{qos.API_GROUP}",
            "labels": {"app.kubernetes.io/part-of": "tidal"},
        },
        "spec": {
            "group": qos.API_GROUP,
            "scope": "Cluster",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "singular": kind.lower(),
                "plural": plural,
                "shortNames": [short_name],
                "categories": ["tidal"],
            },
            "versions": [
                {
                    "name": qos.API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        *[dict(c) for c in printer_columns],
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }
