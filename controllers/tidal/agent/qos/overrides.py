# SPDX-License-Identifier: Apache-2.0
"""Per-node overrides of the eviction watermarks, from node annotations (pure).

========================================================  ====================================
annotation                                                policy field
========================================================  ====================================
``colocation.tidal.io/eviction-enabled``                  ``evictionWatermarks.enabled``
``colocation.tidal.io/eviction-cpu-high-percent``         ``evictionWatermarks.cpu.highPercent``
``colocation.tidal.io/eviction-cpu-low-percent``          ``evictionWatermarks.cpu.lowPercent``
``colocation.tidal.io/eviction-memory-high-percent``      ``evictionWatermarks.memory.highPercent``
``colocation.tidal.io/eviction-memory-low-percent``       ``evictionWatermarks.memory.lowPercent``
``colocation.tidal.io/eviction-dwell-seconds``            ``evictionWatermarks.dwellSeconds``
``colocation.tidal.io/eviction-cooldown-seconds``         ``evictionWatermarks.cooldownSeconds``
========================================================  ====================================

The overridden section is validated by the policy model itself (same ranges, ``low < high``).
Any invalid override rejects *all* of the node's overrides (the policy's values stay in force:
bad input changes nothing), with one message per problem naming the annotation and the rule.

Volcano's per-node watermarks ``volcano.sh/evicting-{cpu,memory}-{high,low}-watermark`` (percent,
same meaning) are read as aliases of the four percent annotations
(:func:`tidal.api.node_mode.eviction_annotations`): Tidal's name wins, a disagreement is a
*conflict* (reported, the overrides still apply), and a problem with an alias's value names the
alias.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidal.api import qos
from tidal.api.node_mode import VOLCANO_EVICTION_ANNOTATION_ALIASES, eviction_annotations
from tidal.api.policy import ColocationPolicy, EvictionWatermarks, PolicyValidationError

__all__ = ["ANNOTATIONS", "effective_watermarks", "node_watermarks"]

#: annotation -> path in the evictionWatermarks spec
ANNOTATIONS = qos.EVICTION_OVERRIDE_ANNOTATIONS
_BY_FIELD = {".".join(path): annotation for annotation, path in ANNOTATIONS.items()}
_SECTION = "spec.evictionWatermarks"


def _value(annotation: str, text: str) -> Any:
    if ANNOTATIONS[annotation] == ("enabled",):
        if text in ("true", "false"):
            return text == "true"
        raise ValueError("must be \"true\" or \"false\"")
    return qos.annotation_integer(text)


def effective_watermarks(
    policy: ColocationPolicy, annotations: Mapping[str, str] | None
) -> tuple[EvictionWatermarks, list[str]]:
    """The node's watermarks and the problems found (empty when every override is valid and no
    alias disagrees with its Tidal name): :func:`node_watermarks`' conflicts, then its problems."""
    marks, problems, conflicts = node_watermarks(policy, annotations)
    return marks, [*conflicts, *problems]


def node_watermarks(
    policy: ColocationPolicy, annotations: Mapping[str, str] | None
) -> tuple[EvictionWatermarks, list[str], list[str]]:
    """(the node's watermarks, problems — an invalid override: none applied, conflicts — a
    Volcano alias disagreeing with Tidal's name: Tidal's applied)."""
    raw = annotations or {}
    mapped, conflicts = eviction_annotations(raw)
    # which Tidal annotation's value came from an alias: its problems name the alias
    alias_of = {own: alias for alias, own in VOLCANO_EVICTION_ANNOTATION_ALIASES.items()
                if alias in raw and own not in raw}
    marks, problems = _overridden(policy, mapped, alias_of)
    return marks, problems, conflicts


def _named(annotation: str, alias_of: Mapping[str, str]) -> str:
    alias = alias_of.get(annotation)
    return f"{alias} (alias of {annotation})" if alias else annotation


def _overridden(
    policy: ColocationPolicy, annotations: Mapping[str, str], alias_of: Mapping[str, str]
) -> tuple[EvictionWatermarks, list[str]]:
    present = {k: v for k, v in annotations.items() if k in ANNOTATIONS}
    if not present:
        return policy.eviction_watermarks, []
    spec = policy.to_spec()
    section = spec["evictionWatermarks"]
    problems = []
    for annotation, text in sorted(present.items()):
        try:
            value = _value(annotation, text)
        except ValueError as err:
            problems.append(f"node annotation {_named(annotation, alias_of)}={qos.shown(text)}: {err}")
            continue
        target = section
        *parents, last = ANNOTATIONS[annotation]
        for key in parents:
            target = target[key]
        target[last] = value
    if not problems:
        try:
            return ColocationPolicy.from_spec(spec).eviction_watermarks, []
        except PolicyValidationError as err:
            for error in err.errors:
                field = error.path.removeprefix(_SECTION + ".")
                source = _BY_FIELD.get(field)
                name = f"node annotation {_named(source, alias_of)}" if source else error.path
                problems.append(f"{name}: {error.message} (with the node's overrides applied)")
    return policy.eviction_watermarks, problems
