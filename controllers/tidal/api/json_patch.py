# SPDX-License-Identifier: Apache-2.0
"""RFC 6902 JSON Patch operations and RFC 6901 JSON Pointer escaping.

Operations are plain dicts, ready for ``json.dumps``. ``value`` objects are built by the caller
and never shared with the reviewed object, so nothing here copies.
"""

from __future__ import annotations

from typing import Any

__all__ = ["escape", "member", "add", "replace", "remove", "set_member"]

Operation = dict[str, Any]


def escape(token: str) -> str:
    """One reference token of a JSON Pointer: ``~`` -> ``~0``, then ``/`` -> ``~1``.

    The order matters: ``~1`` in a key must become ``~01``, not ``/``.
    """
    return token.replace("~", "~0").replace("/", "~1")


def member(path: str, key: str | int) -> str:
    """The pointer to ``key`` (a map key or a list index) inside the value at ``path``."""
    return f"{path}/{escape(key) if isinstance(key, str) else key}"


def add(path: str, value: Any) -> Operation:
    return {"op": "add", "path": path, "value": value}


def replace(path: str, value: Any) -> Operation:
    return {"op": "replace", "path": path, "value": value}


def remove(path: str) -> Operation:
    return {"op": "remove", "path": path}


def set_member(parent: dict[str, Any], key: str, value: Any, parent_path: str) -> Operation:
    """Set ``parent[key]``: ``replace`` when the key is there (even as null), else ``add``.

    ``add`` would also overwrite an existing member; ``replace`` says what happens, and fails
    loudly if the object changed under the patch.
    """
    path = member(parent_path, key)
    return replace(path, value) if key in parent else add(path, value)
