# SPDX-License-Identifier: Apache-2.0
"""What ``PUT /api/v1/policy`` writes (pure): the request's spec merged into the stored one.

A client sends the part of the spec it knows about; every field it does not send keeps its
stored value. The request's ``spec`` is a JSON merge patch (RFC 7386) of the stored spec:
objects merge key by key, any other value (numbers, strings, lists such as
``features.psiInterference.resources``) replaces the stored one, and ``null`` removes a key so
that it takes its default again. Replacing the whole spec (every field not sent takes its
default) is asked for explicitly, with ``?replace=true``.

Before merging, a client that did not show a section (the console's dialog once left out
``beIsolation``) reset it to its defaults on every save; other clients lost fields the same way.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from tidal.api.policy import ColocationPolicy

__all__ = ["merge_patch", "desired_policy"]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: ``patch`` applied to ``target``; neither is modified."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = copy.deepcopy(dict(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def desired_policy(stored_spec: Mapping[str, Any] | None, update: Mapping[str, Any], *,
                   replace: bool = False) -> ColocationPolicy:
    """The policy a PUT asks for: ``update`` merged into ``stored_spec`` (None: no policy yet,
    so the defaults), or ``update`` alone with ``replace``.

    Raises:
        PolicyValidationError: the resulting spec is invalid; each error names its field.
    """
    spec = update if replace else merge_patch(stored_spec or {}, update)
    return ColocationPolicy.from_spec(spec)
