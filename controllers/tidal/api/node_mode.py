# SPDX-License-Identifier: Apache-2.0
"""A node's colocation mode: the two labels, their aliases, and what each mode means (pure).

The managed hybrid-deployment offering's matrix (DESIGN.md "Node modes"):

=============  ================  ==============================  =====================================
colocation     oversubscription  BE may use oversold resources   BE evicted when
=============  ================  ==============================  =====================================
no             no                no                              never (Tidal does nothing)
yes            no                no: native requests, BE          node usage above the high watermark
                                 isolation applies
no             yes               yes                             usage above the high watermark **and**
                                                                 the node's requests above 100 % of
                                                                 allocatable
yes            yes               yes                             node usage above the high watermark
=============  ================  ==============================  =====================================

Names read (never written) besides Tidal's, as a platform team moving from the reference
systems has them on its nodes:

* labels ``volcano.sh/colocation`` and ``volcano.sh/oversubscription``;
* annotations ``volcano.sh/evicting-{cpu,memory}-{high,low}-watermark`` (Tidal's
  ``colocation.tidal.io/eviction-*-percent``) and ``volcano.sh/oversubscription-types``
  (Tidal's ``colocation.tidal.io/oversell-types``).

Tidal's name wins over its alias; a disagreement is a *conflict* reported with both values. A
value that is neither ``true`` nor ``false`` on a label is a *problem* and counts as absent.

One subtlety: in the policy's ``volcanoAnnotations`` reporting mode the oversell master itself
writes ``volcano.sh/oversubscription=true`` (Volcano's oversubscription reads it), marking its
write with :data:`VOLCANO_LABEL_WRITTEN_ANNOTATION`. That label is then Tidal's output, not a
user's input, and is not read as the alias: otherwise a node whose Tidal label was removed would
keep itself oversold.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from tidal.api import qos

__all__ = [
    "OVERSELL_ANNOTATION",
    "OVERSELL_TYPES_ANNOTATION",
    "VOLCANO_COLOCATION_LABEL",
    "VOLCANO_OVERSUBSCRIPTION_TYPES_ANNOTATION",
    "VOLCANO_EVICTION_ANNOTATION_ALIASES",
    "VOLCANO_LABEL_WRITTEN_ANNOTATION",
    "Mode",
    "NodeMode",
    "node_mode",
    "oversell_opted_out",
    "requests_percent",
    "eviction_allowed",
    "eviction_annotations",
    "OVERSELL_TYPES",
]

#: Pod or namespace annotation: ``"false"`` keeps a BE pod on native requests (no oversold
#: resources); ``"true"`` asks for batch resources whatever the policy's default.
OVERSELL_ANNOTATION = "colocation.tidal.io/oversell"
#: Node annotation: which resources the node oversells (``cpu``, ``memory``, ``cpu,memory``).
OVERSELL_TYPES_ANNOTATION = "colocation.tidal.io/oversell-types"

VOLCANO_COLOCATION_LABEL = "volcano.sh/colocation"
VOLCANO_OVERSUBSCRIPTION_TYPES_ANNOTATION = "volcano.sh/oversubscription-types"
#: Volcano's per-node eviction watermarks -> Tidal's override annotation (same meaning, percent).
VOLCANO_EVICTION_ANNOTATION_ALIASES: dict[str, str] = {
    "volcano.sh/evicting-cpu-high-watermark": "colocation.tidal.io/eviction-cpu-high-percent",
    "volcano.sh/evicting-cpu-low-watermark": "colocation.tidal.io/eviction-cpu-low-percent",
    "volcano.sh/evicting-memory-high-watermark": "colocation.tidal.io/eviction-memory-high-percent",
    "volcano.sh/evicting-memory-low-watermark": "colocation.tidal.io/eviction-memory-low-percent",
}
#: Set by the oversell master beside the ``volcano.sh/oversubscription`` label it writes.
VOLCANO_LABEL_WRITTEN_ANNOTATION = "colocation.tidal.io/volcano-oversubscription-written"

_TRUE, _FALSE = "true", "false"
OVERSELL_TYPES = ("cpu", "memory")
_RESOURCE_OF_TYPE = {"cpu": qos.BATCH_CPU_RESOURCE, "memory": qos.BATCH_MEMORY_RESOURCE}


class Mode(enum.StrEnum):
    """The four rows of the matrix, by name (as the NodeProfile status and the console show them)."""

    OFF = "off"
    COLOCATION = "colocation"
    OVERSUBSCRIPTION = "oversubscription"
    COLOCATION_OVERSUBSCRIPTION = "colocation+oversubscription"


_MEANING = {
    Mode.OFF: "Tidal does nothing on this node; BE pods are not scheduled here",
    Mode.COLOCATION: "BE pods keep native requests and run with BE isolation; no oversold resources",
    Mode.OVERSUBSCRIPTION: "BE pods use oversold batch resources with BE isolation; they are evicted only "
                           "while the node's requests are above its allocatable",
    Mode.COLOCATION_OVERSUBSCRIPTION: "BE pods use oversold batch resources with BE isolation",
}
_EVICTION_RULE = {
    Mode.OFF: "never",
    Mode.COLOCATION: "node usage above the high watermark",
    Mode.OVERSUBSCRIPTION: "node usage above the high watermark and the node's requests "
                           "(native and batch) above 100% of allocatable",
    Mode.COLOCATION_OVERSUBSCRIPTION: "node usage above the high watermark",
}


@dataclass(frozen=True)
class NodeMode:
    """What a node's labels and annotations say about colocation on it.

    Attributes:
        colocation / oversubscription: the two switches, after aliases.
        oversell_types: the resources the node oversells (``cpu``, ``memory``); a type not in
            it gets batch 0 with :meth:`type_off_reason`.
        sources: per switch (and ``oversellTypes``), the name it was read from (a Tidal name,
            an alias, or ``default``).
        conflicts: a Tidal name and its alias disagree (Tidal's wins), one line each.
        problems: values that are not understood (counted as absent), one line each.
    """

    colocation: bool = False
    oversubscription: bool = False
    oversell_types: frozenset[str] = frozenset(OVERSELL_TYPES)
    sources: Mapping[str, str] = field(default_factory=dict)
    conflicts: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def mode(self) -> Mode:
        if self.colocation and self.oversubscription:
            return Mode.COLOCATION_OVERSUBSCRIPTION
        if self.colocation:
            return Mode.COLOCATION
        if self.oversubscription:
            return Mode.OVERSUBSCRIPTION
        return Mode.OFF

    @property
    def active(self) -> bool:
        """Whether Tidal acts on the node at all (agent QoS engine, eviction)."""
        return self.colocation or self.oversubscription

    @property
    def oversold(self) -> bool:
        """Whether the node publishes batch resources (BE pods may use oversold resources)."""
        return self.oversubscription

    @property
    def requests_check(self) -> bool:
        """Whether eviction also needs the node's requests above 100 % of allocatable."""
        return self.oversubscription and not self.colocation

    @property
    def meaning(self) -> str:
        return _MEANING[self.mode]

    @property
    def eviction_rule(self) -> str:
        return _EVICTION_RULE[self.mode]

    def oversells(self, batch_resource: str) -> bool:
        """Whether the node oversells ``kubernetes.io/batch-cpu`` / ``batch-memory``."""
        return any(_RESOURCE_OF_TYPE[t] == batch_resource for t in self.oversell_types)

    def type_off_reason(self, batch_resource: str) -> str | None:
        if not self.oversubscription:
            return None
        if self.oversells(batch_resource):
            return None
        source = self.sources.get("oversellTypes", OVERSELL_TYPES_ANNOTATION)
        kind = "cpu" if batch_resource == qos.BATCH_CPU_RESOURCE else "memory"
        return (f"{kind} is not oversold on this node: {source}="
                f"{','.join(sorted(self.oversell_types)) or '(none)'}")

    def to_status(self) -> dict:
        """``NodeProfile.status.mode``."""
        out = {
            "name": str(self.mode),
            "colocation": self.colocation,
            "oversubscription": self.oversubscription,
            "oversellTypes": sorted(self.oversell_types),
            "meaning": self.meaning,
            "evictionRule": self.eviction_rule,
            "sources": dict(self.sources),
        }
        if self.conflicts:
            out["conflicts"] = list(self.conflicts)
        if self.problems:
            out["problems"] = list(self.problems)
        return out


def _switch(labels: Mapping[str, str], name: str, alias: str | None, sources: dict[str, str],
            key: str, conflicts: list[str], problems: list[str]) -> bool:
    def read(label: str) -> bool | None:
        raw = labels.get(label)
        if raw is None:
            return None
        value = raw.strip()
        if value in (_TRUE, _FALSE):
            return value == _TRUE
        problems.append(f"node label {label}={raw!r} is not understood (allowed: true, false); "
                        "counted as absent")
        return None

    own = read(name)
    other = read(alias) if alias else None
    if own is not None and other is not None and own != other:
        conflicts.append(f"node label {name}={str(own).lower()} and its alias {alias}="
                         f"{str(other).lower()} disagree: {name} wins")
    if own is not None:
        sources[key] = name
        return own
    if other is not None:
        sources[key] = alias  # type: ignore[assignment]
        return other
    sources[key] = "default"
    return False


def _types(annotations: Mapping[str, str], sources: dict[str, str], conflicts: list[str],
           problems: list[str]) -> frozenset[str]:
    def read(key: str) -> frozenset[str] | None:
        raw = annotations.get(key)
        if raw is None:
            return None
        parts = [p.strip() for p in raw.split(",") if p.strip()]
        bad = [p for p in parts if p not in OVERSELL_TYPES]
        if bad or not parts:
            problems.append(f"node annotation {key}={qos.shown(raw)} is not understood (allowed: cpu, memory, "
                            "cpu,memory); both types stay oversold")
            return None
        return frozenset(parts)

    own = read(OVERSELL_TYPES_ANNOTATION)
    other = read(VOLCANO_OVERSUBSCRIPTION_TYPES_ANNOTATION)
    if own is not None and other is not None and own != other:
        conflicts.append(f"node annotation {OVERSELL_TYPES_ANNOTATION}={','.join(sorted(own))} and its "
                         f"alias {VOLCANO_OVERSUBSCRIPTION_TYPES_ANNOTATION}={','.join(sorted(other))} "
                         f"disagree: {OVERSELL_TYPES_ANNOTATION} wins")
    if own is not None:
        sources["oversellTypes"] = OVERSELL_TYPES_ANNOTATION
        return own
    if other is not None:
        sources["oversellTypes"] = VOLCANO_OVERSUBSCRIPTION_TYPES_ANNOTATION
        return other
    sources["oversellTypes"] = "default"
    return frozenset(OVERSELL_TYPES)


def node_mode(labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None = None) -> NodeMode:
    """The node's mode from its labels and annotations, aliases included (see the module doc)."""
    labels = dict(labels or {})
    annotations = annotations or {}
    if annotations.get(VOLCANO_LABEL_WRITTEN_ANNOTATION) == _TRUE:
        labels.pop(qos.VOLCANO_OVERSUBSCRIPTION_LABEL, None)  # Tidal's own output, not an input
    sources: dict[str, str] = {}
    conflicts: list[str] = []
    problems: list[str] = []
    colocation = _switch(labels, qos.COLOCATION_NODE_LABEL, VOLCANO_COLOCATION_LABEL, sources,
                         "colocation", conflicts, problems)
    oversubscription = _switch(labels, qos.OVERSUBSCRIPTION_NODE_LABEL, qos.VOLCANO_OVERSUBSCRIPTION_LABEL,
                               sources, "oversubscription", conflicts, problems)
    types = _types(annotations, sources, conflicts, problems)
    return NodeMode(colocation, oversubscription, types, sources, tuple(conflicts), tuple(problems))


def eviction_annotations(annotations: Mapping[str, str] | None) -> tuple[dict[str, str], list[str]]:
    """The node's eviction override annotations with Volcano's aliases mapped onto Tidal's names
    (Tidal's wins), and the conflicts found."""
    out = dict(annotations or {})
    conflicts = []
    for alias, own in VOLCANO_EVICTION_ANNOTATION_ALIASES.items():
        if alias not in out:
            continue
        value = out.pop(alias)
        if own in out:
            if out[own].strip() != value.strip():
                conflicts.append(f"node annotation {own}={out[own]} and its alias {alias}={value} "
                                 f"disagree: {own} wins")
            continue
        out[own] = value
    return out, conflicts


def oversell_opted_out(pod_annotations: Mapping[str, str] | None,
                       namespace_annotations: Mapping[str, str] | None,
                       policy_default: bool = True) -> tuple[bool, str]:
    """Whether a BE pod keeps its native requests, and why (the pod's annotation, else its
    namespace's, else the policy's ``overselling.beUsesBatchResources``).

    Raises:
        qos.AnnotationValueError: the annotation is neither ``true`` nor ``false``.
    """
    for where, annotations in (("pod", pod_annotations), ("namespace", namespace_annotations)):
        raw = (annotations or {}).get(OVERSELL_ANNOTATION)
        if raw is None:
            continue
        value = raw.strip()
        if value not in (_TRUE, _FALSE):
            raise qos.AnnotationValueError(OVERSELL_ANNOTATION, raw, (_TRUE, _FALSE))
        return value == _FALSE, f"{where} annotation {OVERSELL_ANNOTATION}={value}"
    return (not policy_default,
            f"policy overselling.beUsesBatchResources={str(policy_default).lower()}")


def requests_percent(pod_requests: Mapping[str, float], allocatable: Mapping[str, float]) -> dict[str, float]:
    """The node's requests (native and batch, summed by the caller per ``cpu`` in millicores and
    ``memory`` in bytes) in percent of its native allocatable; a resource without allocatable is
    absent."""
    return {r: pod_requests.get(r, 0.0) / allocatable[r] * 100
            for r in ("cpu", "memory") if allocatable.get(r)}


def eviction_allowed(mode: NodeMode, requests_pct: Mapping[str, float] | None) -> tuple[bool, str]:
    """Whether watermark eviction may act on this node now, and the reason.

    Only the oversubscription-only row adds a condition: the node's requests above 100 % of its
    allocatable in at least one resource. Unknown requests there mean no eviction (safe: the
    node is not known to be overcommitted)."""
    if not mode.active:
        return False, "node mode off: Tidal does nothing"
    if not mode.requests_check:
        return True, mode.eviction_rule
    over = {r: p for r, p in (requests_pct or {}).items() if p > 100.0}
    if over:
        figures = ", ".join(f"{r} {p:.0f}%" for r, p in sorted(over.items()))
        return True, f"node requests above allocatable ({figures})"
    figures = ", ".join(f"{r} {p:.0f}%" for r, p in sorted((requests_pct or {}).items())) or "unknown"
    return False, f"oversubscription-only node: requests {figures} of allocatable, not above 100%"
