# SPDX-License-Identifier: Apache-2.0
"""Typed reads of untrusted JSON, failing with the path of whatever is malformed.

The API server decodes an object before it reaches a webhook, so a real review is well-typed;
but ``review`` promises an answer for any input, so every read of the object checks the type it
expects. A wrong type raises `MalformedObjectError`, which becomes a "malformed-request" denial
naming the path, instead of an exception deep in the rules.

Absent and JSON ``null`` are the same here ("not set"), as they are for Kubernetes' own
``omitempty`` fields.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "MalformedObjectError",
    "json_type",
    "describe",
    "optional_object",
    "optional_array",
    "optional_string",
]


def json_type(value: object) -> str:
    """The JSON name of a value's type, for messages ("an object", "a string", "null")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def describe(value: object) -> str:
    """A value for "got ..." in a message: a short scalar itself, anything else its JSON type."""
    if isinstance(value, str):
        return json.dumps(value if len(value) <= 64 else value[:64] + "…", ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) or (isinstance(value, int) and value.bit_length() <= 64):
        return repr(value)
    return json_type(value)


class MalformedObjectError(ValueError):
    """A value in the review does not have the type Kubernetes gives it.

    Attributes:
        path: where, e.g. ``spec.containers[0].resources`` or ``request.operation``.
        expected: what the path must hold, e.g. "an object".
    """

    def __init__(self, path: str, expected: str, value: object) -> None:
        self.path = path
        self.expected = expected
        super().__init__(f"{path}: expected {expected}, got {describe(value)}")


def optional_object(parent: dict[str, Any], key: str, path: str) -> dict[str, Any] | None:
    """``parent[key]`` when it is an object, None when absent or null."""
    value = parent.get(key)
    if value is None or isinstance(value, dict):
        return value
    raise MalformedObjectError(path, "an object", value)


def optional_array(parent: dict[str, Any], key: str, path: str) -> list[Any] | None:
    """``parent[key]`` when it is an array, None when absent or null."""
    value = parent.get(key)
    if value is None or isinstance(value, list):
        return value
    raise MalformedObjectError(path, "an array", value)


def optional_string(parent: dict[str, Any], key: str, path: str) -> str | None:
    """``parent[key]`` when it is a string, None when absent or null."""
    value = parent.get(key)
    if value is None or isinstance(value, str):
        return value
    raise MalformedObjectError(path, "a string", value)
