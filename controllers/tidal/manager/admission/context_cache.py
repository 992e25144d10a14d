# SPDX-License-Identifier: Apache-2.0
"""Where the webhook's `AdmissionContext` comes from: watch caches (every replica, not only
the leader) of the namespaces and of the ColocationPolicy ``default``.

Only what a review reads is kept: of a namespace, the annotations in
``NAMESPACE_ANNOTATIONS_READ`` (namespaces without any are not kept at all); of the policy, the
parsed ``ColocationPolicy``. A review never waits for the API server: until a cache has listed
once, it answers with the defaults (no namespace annotation; the policy's defaults, so BE pods
use batch resources), and while the API server is unreachable it keeps the last known state.
A policy that does not parse (the CRD's schema makes that rare) counts as the defaults, logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from tidal.api import qos
from tidal.api.policy import DEFAULT_POLICY_NAME, ColocationPolicy, PolicyValidationError
from tidal.kube import KubeAPI, ObjectWatch, Watcher
from tidal.manager.admission.context import (
    DEFAULT_CONTEXT,
    NAMESPACE_ANNOTATIONS_READ,
    AdmissionContext,
)

log = logging.getLogger(__name__)

__all__ = ["AdmissionContexts", "namespace_entry", "policy_of"]

NAMESPACES = "/api/v1/namespaces"
POLICIES = f"/apis/{qos.API_GROUP}/{qos.API_VERSION}/colocationpolicies"


def namespace_entry(obj: Mapping[str, Any]) -> tuple[str, Mapping[str, str]] | None:
    """(name, the annotations a review reads) of a Namespace; None when it has none of them."""
    metadata = obj.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    kept = {key: annotations[key] for key in NAMESPACE_ANNOTATIONS_READ
            if isinstance(annotations.get(key), str)}
    return (metadata["name"], MappingProxyType(kept)) if kept else None


def policy_of(obj: Mapping[str, Any] | None) -> ColocationPolicy:
    """The ColocationPolicy of the ``default`` object; its defaults when there is none or it
    does not parse."""
    if obj is None:
        return DEFAULT_CONTEXT.policy
    try:
        return ColocationPolicy.from_spec(obj.get("spec") or {})
    except PolicyValidationError as err:
        log.warning("ColocationPolicy %s is not valid, admission uses the policy defaults: %s",
                    DEFAULT_POLICY_NAME, err)
        return DEFAULT_CONTEXT.policy


class AdmissionContexts:
    """``context(namespace)`` for the webhook; ``run()`` keeps the caches current."""

    def __init__(self, api: KubeAPI) -> None:
        self.namespaces = Watcher(api, NAMESPACES, "namespaces (admission)",
                                  transform=namespace_entry, page_size=500)
        self.policy = ObjectWatch(api, POLICIES, DEFAULT_POLICY_NAME,
                                  what=f"ColocationPolicy {DEFAULT_POLICY_NAME} (admission)")
        self._by_name: dict[str, Mapping[str, str]] = {}
        self._namespaces_generation = -1
        self._parsed_policy = DEFAULT_CONTEXT.policy
        self._policy_generation = -1

    @property
    def synced(self) -> bool:
        return self.namespaces.synced.is_set() and self.policy.synced.is_set()

    async def run(self) -> None:
        """Run until cancelled."""
        await asyncio.gather(self.namespaces.run(), self.policy.run())

    def context(self, namespace: str) -> AdmissionContext:
        """The context of a request in ``namespace``: cheap (a dict lookup), never waits."""
        if self.namespaces.generation != self._namespaces_generation:
            self._namespaces_generation = self.namespaces.generation
            self._by_name = dict(self.namespaces.objects.values())
        if self.policy.generation != self._policy_generation:
            self._policy_generation = self.policy.generation
            self._parsed_policy = policy_of(self.policy.object)
        annotations = self._by_name.get(namespace)
        if annotations is None and self._parsed_policy is DEFAULT_CONTEXT.policy:
            return AdmissionContext(namespace=namespace)
        return AdmissionContext(annotations or MappingProxyType({}), self._parsed_policy, namespace)
