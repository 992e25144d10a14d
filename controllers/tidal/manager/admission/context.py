# SPDX-License-Identifier: Apache-2.0
"""What a review needs besides the request: the namespace's annotations and the policy (pure).

The decision stays a pure function of (request, context). The server builds the context from
its watch caches (`tidal.manager.admission.context_cache`); until those are synced, and in
``tidal admission review``, the context is `DEFAULT_CONTEXT`: no namespace annotation, the
policy's defaults (BE pods use batch resources; no fallback to nodes without colocation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from tidal.api.node_mode import OVERSELL_ANNOTATION
from tidal.api.policy import ColocationPolicy, Overselling

__all__ = ["AdmissionContext", "DEFAULT_CONTEXT", "NAMESPACE_ANNOTATIONS_READ"]

#: The namespace annotations a review reads (the server's cache keeps only these).
NAMESPACE_ANNOTATIONS_READ = (OVERSELL_ANNOTATION,)

_DEFAULT_POLICY = ColocationPolicy()


@dataclass(frozen=True)
class AdmissionContext:
    """The request's namespace, its annotations (only `NAMESPACE_ANNOTATIONS_READ` matter)
    and the ColocationPolicy ``default`` (its defaults when there is none)."""

    namespace_annotations: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({})
    )
    policy: ColocationPolicy = _DEFAULT_POLICY
    namespace: str = ""

    @property
    def overselling(self) -> Overselling:
        return self.policy.overselling


DEFAULT_CONTEXT = AdmissionContext()
