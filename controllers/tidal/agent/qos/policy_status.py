# SPDX-License-Identifier: Apache-2.0
"""What a node reports about the policy it runs (pure): the ``status.policy`` of its NodeProfile.

* ``appliedGeneration`` — ``metadata.generation`` of the ColocationPolicy the agent runs;
* ``effective`` — that policy's spec with the node's annotation overrides applied;
* ``problems`` — what the node cannot do as asked, one line each: invalid overrides, every
  switched-on feature this node's kernel or hardware lacks (with the capability probe's reason),
  and every switched-on feature another switch keeps inactive (:data:`DEPENDS_ON`). Nothing is
  silently ignored.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from tidal.api.feature_support import FEATURE_NEEDS  # shared with the console's node view
from tidal.api.policy import ColocationPolicy, EvictionWatermarks

from .capabilities import Capability

__all__ = ["DEPENDS_ON", "FEATURE_NEEDS", "inactive_features", "policy_status", "unsupported_features"]

#: A switched-on section that does nothing unless another one is on, and why.
DEPENDS_ON = {
    "beIsolation.cpuInterference": ("beIsolation.cpuSuppression",
                                    "it lowers BE CPU suppression's quota, which is not computed"),
    "beIsolation.cpuPriority.idleGroup": ("beIsolation.cpuPriority",
                                          "the group is idle only through BE CPU priority: BE containers "
                                          "stay below their pods' cgroups"),
}

def _enabled(spec: Mapping[str, Any], path: str) -> bool:
    """A section's ``enabled``, or a boolean switch's value (``beIsolation.cpuPriority.idleGroup``)."""
    node: Any = spec
    for key in path.split("."):
        node = (node or {}).get(key)
    return node if isinstance(node, bool) else bool((node or {}).get("enabled"))


def unsupported_features(spec: Mapping[str, Any], capabilities: Iterable[Capability]) -> list[str]:
    caps = {c.name: c for c in capabilities}
    problems = []
    for path, needs in FEATURE_NEEDS.items():
        if not _enabled(spec, path):
            continue
        missing = []
        for group in needs:
            probed = [caps[n] for n in group if n in caps]
            if probed and not any(c.supported for c in probed):
                missing += probed
        if missing:
            reasons = "; ".join(f"{c.name}: {c.reason}" for c in missing)
            problems.append(f"spec.{path}: enabled but not supported on this node ({reasons})")
    return problems


def inactive_features(spec: Mapping[str, Any]) -> list[str]:
    return [f"spec.{path}: enabled but inactive while spec.{needed}.enabled is false ({why})"
            for path, (needed, why) in DEPENDS_ON.items() if _enabled(spec, path) and not _enabled(spec, needed)]


def policy_status(policy: ColocationPolicy, generation: int, watermarks: EvictionWatermarks,
                  override_problems: Iterable[str], capabilities: Iterable[Capability]) -> dict[str, Any]:
    effective = replace(policy, eviction_watermarks=watermarks).to_spec()
    return {"appliedGeneration": int(generation), "effective": effective,
            "problems": [*override_problems, *unsupported_features(effective, capabilities),
                         *inactive_features(effective)]}
