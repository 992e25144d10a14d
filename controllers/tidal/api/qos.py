# SPDX-License-Identifier: Apache-2.0
"""The QoS model and every name that Tidal's components must agree on.

This module is the single source of truth for the contract in DESIGN.md ("Names" and "The QoS
model"): the API group, annotations, node labels, taint, extended resources, PriorityClasses and
the parsing of the annotations a pod carries. It is pure: no I/O, no Kubernetes client.

Parsing rules shared by every annotation parser here:

* A canonical ``colocation.tidal.io/...`` annotation is authoritative when present; alias
  annotations (``openfuyao.com/...``, ``volcano.sh/...``) are read only when it is absent and are
  never written by Tidal.
* Surrounding whitespace is stripped (it is invisible in most UIs and YAML editors add it), but
  values are case-sensitive: ``hls`` is rejected, with a hint, instead of guessed, so that what a
  user reads in the manifest is exactly what every component (Volcano included) sees.
* A present but unparsable value is an error, never "no annotation": a pod whose owner asked for
  a QoS level must not silently run without one.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "API_GROUP_VERSION",
    "NAMESPACE",
    "QOS_ANNOTATION",
    "OPENFUYAO_QOS_ANNOTATION",
    "OPENFUYAO_QOS_ANNOTATION_CAPITALISED",
    "VOLCANO_QOS_ANNOTATION",
    "QOS_ALIAS_ANNOTATIONS",
    "COLOCATION_NODE_LABEL",
    "OVERSUBSCRIPTION_NODE_LABEL",
    "RESTORE_PENDING_NODE_LABEL",
    "annotation_integer",
    "annotation_number",
    "shown",
    "NODE_LABEL_ENABLED_VALUE",
    "OFFLINE_EVICTING_TAINT_KEY",
    "OFFLINE_EVICTING_TAINT_EFFECT",
    "BATCH_CPU_RESOURCE",
    "BATCH_MEMORY_RESOURCE",
    "SCHEDULER_NAME",
    "CACHE_LIMIT_ANNOTATION",
    "VOLCANO_CACHE_LIMIT_ANNOTATION",
    "CPU_BURST_ANNOTATION",
    "CPU_BURST_QUOTA_US_ANNOTATION",
    "BATCH_RESOURCES_ANNOTATION",
    "VOLCANO_ENABLE_QUOTA_BURST_ANNOTATION",
    "VOLCANO_QUOTA_BURST_TIME_ANNOTATION",
    "METRICS_PREFIX",
    "QoSLevel",
    "CacheLimit",
    "CPUBurstRequest",
    "PriorityClassSpec",
    "PRIORITY_CLASS_BY_LEVEL",
    "AnnotationError",
    "AnnotationValueError",
    "QoSAnnotationError",
    "QoSAnnotationConflictError",
    "CacheLimitAnnotationError",
    "CPUBurstAnnotationError",
    "EgressBandwidthAnnotationError",
    "EGRESS_BANDWIDTH_ANNOTATION",
    "NODE_EGRESS_BANDWIDTH_ANNOTATION",
    "DEPRECATED_NODE_EGRESS_BANDWIDTH_ANNOTATION",
    "VOLCANO_NETWORK_BANDWIDTH_RATE_ANNOTATION",
    "NODE_EGRESS_BANDWIDTH_ANNOTATIONS",
    "MAX_EGRESS_BANDWIDTH_MBPS",
    "qos_level_of",
    "cache_limit_of",
    "cpu_burst_of",
    "egress_bandwidth_limit_of",
    "node_egress_bandwidth_of",
    "priority_class_manifests",
]

# --- API and cluster names ------------------------------------------------------------------

API_GROUP = "colocation.tidal.io"
API_VERSION = "v1alpha1"
API_GROUP_VERSION = f"{API_GROUP}/{API_VERSION}"
NAMESPACE = "tidal-system"

# --- QoS annotations --------------------------------------------------------------------------

QOS_ANNOTATION = "colocation.tidal.io/qos-level"
OPENFUYAO_QOS_ANNOTATION = "openfuyao.com/qos-level"
#: The spelling openFuyao's NUMA-affinity steps use; annotation keys are case-sensitive, so it is
#: a separate alias with the same vocabulary as OPENFUYAO_QOS_ANNOTATION.
OPENFUYAO_QOS_ANNOTATION_CAPITALISED = "openfuyao.com/QoS-level"
VOLCANO_QOS_ANNOTATION = "volcano.sh/qos-level"
#: Read, never written, and only when QOS_ANNOTATION is absent; in this order. When several are
#: present they must mean the same level.
QOS_ALIAS_ANNOTATIONS = (
    OPENFUYAO_QOS_ANNOTATION,
    OPENFUYAO_QOS_ANNOTATION_CAPITALISED,
    VOLCANO_QOS_ANNOTATION,
)

# --- Node labels and taint --------------------------------------------------------------------

COLOCATION_NODE_LABEL = "colocation.tidal.io/colocation"
OVERSUBSCRIPTION_NODE_LABEL = "colocation.tidal.io/oversubscription"
#: Both node labels switch their feature on only with exactly this value.
NODE_LABEL_ENABLED_VALUE = "true"

#: Set on a node while the agent evicts offline pods; online pods get a toleration.
OFFLINE_EVICTING_TAINT_KEY = "colocation.tidal.io/offline-evicting"
OFFLINE_EVICTING_TAINT_EFFECT = "NoSchedule"

#: Set by the agent on its node while something it changed there may still have to be put
#: back; removed by the agent once its node is off and restored with no problem. The agent's
#: DaemonSet also runs on nodes with it, so a node switched off keeps its agent until the agent
#: has restored it, even when the agent was killed halfway (issue 15).
RESTORE_PENDING_NODE_LABEL = "colocation.tidal.io/restore-pending"

# --- Oversold resources and scheduling --------------------------------------------------------

#: Extended resource in millicores (an integer count, as extended resources must be).
BATCH_CPU_RESOURCE = "kubernetes.io/batch-cpu"
#: Extended resource in bytes.
BATCH_MEMORY_RESOURCE = "kubernetes.io/batch-memory"

SCHEDULER_NAME = "volcano"

# --- Per-pod feature annotations --------------------------------------------------------------

#: Cache (LLC) and memory-bandwidth level of a BE pod: low, mid or high.
CACHE_LIMIT_ANNOTATION = "colocation.tidal.io/cache-limit"
#: Accepted when CACHE_LIMIT_ANNOTATION is absent, with Tidal's values (low, mid, high) and
#: openEuler rubik's spelling of the middle level, ``middle``.
VOLCANO_CACHE_LIMIT_ANNOTATION = "volcano.sh/cache-limit"

#: "true" or "false": whether the pod's containers may use CPU burst
#: (cgroup v1 cpu.cfs_burst_us, v2 cpu.max.burst).
CPU_BURST_ANNOTATION = "colocation.tidal.io/cpu-burst"
#: Burst quota in microseconds per CFS period; absent or 0 means "as much as the CPU quota".
CPU_BURST_QUOTA_US_ANNOTATION = "colocation.tidal.io/cpu-burst-quota-us"
#: Written by admission on BE pods: each container's batch limits as JSON,
#: ``{"<container>": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"}}``.
#: NRI does not carry extended resources: the NRI plugin reads them from here at creation.
BATCH_RESOURCES_ANNOTATION = "colocation.tidal.io/batch-resources"
VOLCANO_ENABLE_QUOTA_BURST_ANNOTATION = "volcano.sh/enable-quota-burst"
VOLCANO_QUOTA_BURST_TIME_ANNOTATION = "volcano.sh/quota-burst-time"

#: Node annotations overriding the policy's overselling for one node (percent, as the policy's fields).
OVERSELL_RATIO_ANNOTATION = "colocation.tidal.io/oversell-ratio-percent"
OVERSELL_SAFETY_MARGIN_ANNOTATION = "colocation.tidal.io/oversell-safety-margin-percent"
#: Pod annotation: the pod's own egress limit in Mbit/s (DESIGN.md Names, "egress bandwidth of a
#: pod"). A BE pod sends at most min(this, its share of the BE cap); an online pod at most this.
EGRESS_BANDWIDTH_ANNOTATION = "colocation.tidal.io/egress-bandwidth-mbps"
#: Node annotation: the node's total egress bandwidth in Mbit/s, the base of the egress watermarks
#: (over the policy's ``egressBandwidth.nodeBandwidthMbps`` and the link speed).
NODE_EGRESS_BANDWIDTH_ANNOTATION = "colocation.tidal.io/node-egress-bandwidth-mbps"
#: The node's bandwidth under its pre-issue-20 name: the pod annotation's key, set on the Node.
#: Still read there (deprecated, with a warning); never on a pod, where the key is the pod's limit.
DEPRECATED_NODE_EGRESS_BANDWIDTH_ANNOTATION = EGRESS_BANDWIDTH_ANNOTATION
#: Volcano's node annotation for the node's bandwidth (integer Mbit/s; its agent's
#: ``NetworkBandwidthRateAnnotationKey``), read as an alias. Volcano has no per-pod limit.
VOLCANO_NETWORK_BANDWIDTH_RATE_ANNOTATION = "volcano.sh/network-bandwidth-rate"
#: The node's bandwidth annotations, the first one present decides.
NODE_EGRESS_BANDWIDTH_ANNOTATIONS = (
    NODE_EGRESS_BANDWIDTH_ANNOTATION,
    DEPRECATED_NODE_EGRESS_BANDWIDTH_ANNOTATION,
    VOLCANO_NETWORK_BANDWIDTH_RATE_ANNOTATION,
)
#: The largest bandwidth an annotation may state (1 Tbit/s): beyond any NIC, and far inside tc's
#: 64-bit rates.
MAX_EGRESS_BANDWIDTH_MBPS = 1_000_000
#: Node annotation -> path in the policy's spec.evictionWatermarks it overrides for that node.
EVICTION_OVERRIDE_ANNOTATIONS: dict[str, tuple[str, ...]] = {
    "colocation.tidal.io/eviction-enabled": ("enabled",),
    "colocation.tidal.io/eviction-cpu-high-percent": ("cpu", "highPercent"),
    "colocation.tidal.io/eviction-cpu-low-percent": ("cpu", "lowPercent"),
    "colocation.tidal.io/eviction-memory-high-percent": ("memory", "highPercent"),
    "colocation.tidal.io/eviction-memory-low-percent": ("memory", "lowPercent"),
    "colocation.tidal.io/eviction-dwell-seconds": ("dwellSeconds",),
    "colocation.tidal.io/eviction-cooldown-seconds": ("cooldownSeconds",),
}
#: What Volcano's oversubscription reads on a node (label, and the amounts as annotations).
VOLCANO_OVERSUBSCRIPTION_LABEL = "volcano.sh/oversubscription"
VOLCANO_OVERSUBSCRIPTION_CPU_ANNOTATION = "volcano.sh/oversubscription-cpu"
VOLCANO_OVERSUBSCRIPTION_MEMORY_ANNOTATION = "volcano.sh/oversubscription-memory"

#: Every Prometheus metric Tidal exports starts with this.
METRICS_PREFIX = "tidal_"


class QoSLevel(enum.StrEnum):
    """A pod's QoS level (DESIGN.md "The QoS model"), highest first.

    HLS: strict latency, Guaranteed with whole cores, exclusive CPUs, never oversold.
    LS:  online and elastic; may burst.
    BE:  offline batch; runs only on oversold ``kubernetes.io/batch-*`` resources.
    """

    HLS = "HLS"
    LS = "LS"
    BE = "BE"


class CacheLimit(enum.StrEnum):
    """LLC / memory-bandwidth level of a BE pod; shares are set in the policy (``cacheLimits``)."""

    LOW = "low"
    MID = "mid"
    HIGH = "high"


# --- Errors -----------------------------------------------------------------------------------


def _quote(text: str) -> str:
    # JSON quoting: double quotes like the message format in DESIGN.md, and control characters
    # or non-printable input stay visible instead of breaking the admission message.
    return json.dumps(text, ensure_ascii=False)


class AnnotationError(ValueError):
    """An annotation on a pod cannot be interpreted; ``str(error)`` is the user-facing message."""


class AnnotationValueError(AnnotationError):
    """One annotation has a value outside its allowed set.

    Attributes:
        key: the annotation key, e.g. ``colocation.tidal.io/qos-level``.
        value: the raw value as found on the object (not stripped).
        allowed: the allowed values, in the order they are listed in the message.
    """

    def __init__(self, key: str, value: str, allowed: Sequence[str], hint: str = "") -> None:
        self.key = key
        self.value = value
        self.allowed = tuple(allowed)
        message = (
            f"annotation {_quote(key)}: invalid value {_quote(value)}; "
            f"allowed: {', '.join(self.allowed)}"
        )
        if hint:
            message += f" ({hint})"
        super().__init__(message)


class QoSAnnotationError(AnnotationValueError):
    """A QoS annotation (canonical or alias) has an invalid value."""


class QoSAnnotationConflictError(AnnotationError):
    """Two alias QoS annotations are present and mean different levels.

    Attributes:
        values: alias key -> raw value, for every alias present.
        levels: alias key -> the QoSLevel that alias means.
    """

    def __init__(self, values: Mapping[str, str], levels: Mapping[str, QoSLevel]) -> None:
        self.values = dict(values)
        self.levels = dict(levels)
        described = " and ".join(
            f"{_quote(key)}: {_quote(self.values[key])} (means {level.value})"
            for key, level in self.levels.items()
        )
        super().__init__(
            f"annotations disagree on the QoS level: {described}; "
            f"set {_quote(QOS_ANNOTATION)} to one of {', '.join(level.value for level in QoSLevel)}"
        )


class CacheLimitAnnotationError(AnnotationValueError):
    """A cache-limit annotation has an invalid value."""


class CPUBurstAnnotationError(AnnotationValueError):
    """A CPU burst annotation has an invalid value."""


class EgressBandwidthAnnotationError(AnnotationValueError):
    """An egress bandwidth annotation (a pod's limit or a node's bandwidth) has an invalid value."""


# --- Parsing ----------------------------------------------------------------------------------

_QOS_VALUES = tuple(level.value for level in QoSLevel)

#: openfuyao.com/qos-level uses Tidal's own vocabulary.
_OPENFUYAO_QOS = {level.value: level for level in QoSLevel}

#: Volcano's vocabulary. Volcano's LC (latency critical) is Tidal's HLS; Volcano's HLS and LS are
#: both mapped to Tidal's LS because Tidal's HLS also demands Guaranteed whole-core pods, which
#: Volcano's HLS pods were never required to be: mapping them up would reject running workloads.
_VOLCANO_QOS = {"LC": QoSLevel.HLS, "HLS": QoSLevel.LS, "LS": QoSLevel.LS, "BE": QoSLevel.BE}
_VOLCANO_QOS_ALLOWED = (*_VOLCANO_QOS, "an integer (<0 means BE, >=0 means LS)")

# ASCII digits only: str.isdigit() and \d also accept other scripts' digits.
_INTEGER = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?[0-9]+(\.[0-9]+)?")


def annotation_integer(text: str) -> int:
    """An integer a user typed into an annotation: ASCII digits with an optional sign (blanks
    around allowed). ``int()`` alone also takes other scripts' digits and underscores ("١٠",
    "1_0"). ValueError names the rule."""
    value = text.strip()
    if not _INTEGER.fullmatch(value):
        raise ValueError("must be an integer in ASCII digits, e.g. 80")
    return int(value)


def annotation_number(text: str) -> float:
    """A decimal number a user typed into an annotation: ASCII digits, an optional sign and
    fraction (no exponent, nan, inf, underscores or other scripts' digits). ValueError names the rule."""
    value = text.strip()
    if not _NUMBER.fullmatch(value):
        raise ValueError("must be a number in ASCII digits, e.g. 80 or 12.5")
    return float(value)


def shown(text: str, limit: int = 64) -> str:
    """A value a user typed, for a message: its repr, cut after ``limit`` characters (an
    annotation may hold 256 KiB)."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def _case_hint(value: str, allowed: Sequence[str]) -> str:
    if any(value.casefold() == candidate.casefold() for candidate in allowed):
        return "values are case-sensitive"
    return ""


def _parse_qos_value(key: str, raw: str) -> QoSLevel:
    value = raw.strip()
    if key == VOLCANO_QOS_ANNOTATION:
        if value in _VOLCANO_QOS:
            return _VOLCANO_QOS[value]
        if _INTEGER.fullmatch(value):
            return QoSLevel.BE if int(value) < 0 else QoSLevel.LS
        raise QoSAnnotationError(key, raw, _VOLCANO_QOS_ALLOWED, _case_hint(value, _VOLCANO_QOS))
    # The canonical annotation and both openfuyao.com spellings share one vocabulary.
    if value in _OPENFUYAO_QOS:
        return _OPENFUYAO_QOS[value]
    raise QoSAnnotationError(key, raw, _QOS_VALUES, _case_hint(value, _QOS_VALUES))


def qos_level_of(annotations: Mapping[str, str] | None) -> QoSLevel | None:
    """The QoS level a pod's annotations ask for, or None when it carries no QoS annotation.

    ``colocation.tidal.io/qos-level`` decides when present, whatever the aliases say. Otherwise
    ``openfuyao.com/qos-level``, ``openfuyao.com/QoS-level`` (the spelling of openFuyao's NUMA
    steps) and ``volcano.sh/qos-level`` are read; all of those present must mean the same level.

    Raises:
        QoSAnnotationError: a present annotation that is read has an invalid value.
        QoSAnnotationConflictError: aliases are present and mean different levels.
    """
    if not annotations:
        return None
    if QOS_ANNOTATION in annotations:
        return _parse_qos_value(QOS_ANNOTATION, annotations[QOS_ANNOTATION])

    levels: dict[str, QoSLevel] = {}
    for key in QOS_ALIAS_ANNOTATIONS:
        if key in annotations:
            levels[key] = _parse_qos_value(key, annotations[key])
    if not levels:
        return None
    if len(set(levels.values())) > 1:
        raise QoSAnnotationConflictError({key: annotations[key] for key in levels}, levels)
    return next(iter(levels.values()))


_CACHE_LIMIT_VALUES = tuple(limit.value for limit in CacheLimit)
#: rubik (openEuler), which reads volcano.sh/cache-limit, spells the middle level "middle"
#: (its resctrl group is rubik_middle); DESIGN.md documents the alias with Tidal's values
#: (low, mid, high), so both spellings are accepted. rubik's "max" and "dynamic" levels have no
#: Tidal equivalent and are rejected rather than guessed.
_VOLCANO_CACHE_LIMITS = {
    "low": CacheLimit.LOW,
    "mid": CacheLimit.MID,
    "middle": CacheLimit.MID,
    "high": CacheLimit.HIGH,
}


def cache_limit_of(annotations: Mapping[str, str] | None) -> CacheLimit | None:
    """The cache level a pod's annotations ask for, or None when it carries none.

    ``colocation.tidal.io/cache-limit`` (low, mid, high) decides when present; otherwise
    ``volcano.sh/cache-limit`` (low, mid or middle, high) is read. The level is meaningful for BE pods
    only; enforcing that is the admission webhook's job, not the parser's.

    Raises:
        CacheLimitAnnotationError: the annotation that is read has an invalid value.
    """
    if not annotations:
        return None
    if CACHE_LIMIT_ANNOTATION in annotations:
        raw = annotations[CACHE_LIMIT_ANNOTATION]
        value = raw.strip()
        if value in _CACHE_LIMIT_VALUES:
            return CacheLimit(value)
        raise CacheLimitAnnotationError(
            CACHE_LIMIT_ANNOTATION, raw, _CACHE_LIMIT_VALUES, _case_hint(value, _CACHE_LIMIT_VALUES)
        )
    if VOLCANO_CACHE_LIMIT_ANNOTATION in annotations:
        raw = annotations[VOLCANO_CACHE_LIMIT_ANNOTATION]
        value = raw.strip()
        if value in _VOLCANO_CACHE_LIMITS:
            return _VOLCANO_CACHE_LIMITS[value]
        raise CacheLimitAnnotationError(
            VOLCANO_CACHE_LIMIT_ANNOTATION,
            raw,
            tuple(_VOLCANO_CACHE_LIMITS),
            _case_hint(value, tuple(_VOLCANO_CACHE_LIMITS)),
        )
    return None


@dataclass(frozen=True)
class CPUBurstRequest:
    """What a pod's CPU burst annotations ask for.

    Attributes:
        enabled: whether burst is requested at all.
        quota_us: burst quota in microseconds per CFS period, or None for the default: each
            container's CFS quota (its CPU limit), as Volcano's agent; the agent also caps any
            value at the quota (the kernel refuses a burst above it). Never 0: a burst time of 0
            means the default.
    """

    enabled: bool
    quota_us: int | None = None


_BOOLEAN_VALUES = ("true", "false")
#: what Volcano's agent accepts for ``volcano.sh/enable-quota-burst`` (Go's ``strconv.ParseBool``)
_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def _parse_boolean(key: str, raw: str) -> bool:
    value = raw.strip()
    if key == VOLCANO_ENABLE_QUOTA_BURST_ANNOTATION and value in (*_GO_TRUE, *_GO_FALSE):
        return value in _GO_TRUE
    if value in _BOOLEAN_VALUES:
        return value == "true"
    raise CPUBurstAnnotationError(key, raw, _BOOLEAN_VALUES, _case_hint(value, _BOOLEAN_VALUES))


def _parse_microseconds(key: str, raw: str) -> int:
    value = raw.strip()
    if re.fullmatch(r"[0-9]+", value):
        return int(value)
    raise CPUBurstAnnotationError(key, raw, ("a non-negative integer number of microseconds",))


def cpu_burst_of(annotations: Mapping[str, str] | None) -> CPUBurstRequest | None:
    """The CPU burst a pod's annotations ask for, or None when it carries no burst annotation.

    Each canonical key decides over its Volcano counterpart independently:
    ``colocation.tidal.io/cpu-burst`` over ``volcano.sh/enable-quota-burst`` ("true"/"false";
    the Volcano key also takes the other spellings Volcano's agent accepts, Go's
    ``strconv.ParseBool``: 1/0, t/f, TRUE/FALSE, True/False),
    ``colocation.tidal.io/cpu-burst-quota-us`` over ``volcano.sh/quota-burst-time``
    (microseconds, a non-negative integer).

    The rules of the reference agents, which read these keys:

    * a burst time of 0 means "the default", the container's quota (Volcano's agent:
      ``cpu.cfs_burst_us = cpu.cfs_quota_us`` when no burst time is given or it is 0):
      ``quota_us`` is None;
    * a burst time without an on/off key enables burst (openEuler rubik's quotaBurst reads only
      ``volcano.sh/quota-burst-time``) — except a time of 0, which rubik writes as no burst and
      Volcano's agent ignores without its on/off key: disabled;
    * an explicit "false" wins over a burst time.

    Raises:
        CPUBurstAnnotationError: an annotation that is read has an invalid value.
    """
    if not annotations:
        return None

    def pick(canonical: str, alias: str) -> str | None:
        if canonical in annotations:
            return canonical
        if alias in annotations:
            return alias
        return None

    enabled_key = pick(CPU_BURST_ANNOTATION, VOLCANO_ENABLE_QUOTA_BURST_ANNOTATION)
    quota_key = pick(CPU_BURST_QUOTA_US_ANNOTATION, VOLCANO_QUOTA_BURST_TIME_ANNOTATION)
    if enabled_key is None and quota_key is None:
        return None
    quota_us = _parse_microseconds(quota_key, annotations[quota_key]) if quota_key else None
    if enabled_key is not None:
        enabled = _parse_boolean(enabled_key, annotations[enabled_key])
    else:
        enabled = bool(quota_us)
    return CPUBurstRequest(enabled=enabled, quota_us=quota_us or None)


_MBPS = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_MBPS_ALLOWED = (f"a positive number of Mbit/s up to {MAX_EGRESS_BANDWIDTH_MBPS}, e.g. 100 or 2.5",)
_WITH_UNIT = re.compile(r"[0-9.]+\s*[A-Za-z/]+")


def _parse_mbps(key: str, raw: str) -> float:
    value = raw.strip()
    if _MBPS.fullmatch(value) and 0 < float(value) <= MAX_EGRESS_BANDWIDTH_MBPS:
        return float(value)
    hint = "the unit is Mbit/s, write the number alone" if _WITH_UNIT.fullmatch(value) else ""
    raise EgressBandwidthAnnotationError(key, raw, _MBPS_ALLOWED, hint)


def egress_bandwidth_limit_of(annotations: Mapping[str, str] | None) -> float | None:
    """A pod's own egress limit in Mbit/s (``colocation.tidal.io/egress-bandwidth-mbps``), or None.

    There is no alias: Volcano's ``volcano.sh/network-bandwidth-rate`` is a node's bandwidth,
    not a pod's limit (:func:`node_egress_bandwidth_of`).

    Raises:
        EgressBandwidthAnnotationError: the annotation is not a positive number of Mbit/s up to
            ``MAX_EGRESS_BANDWIDTH_MBPS`` (``"100"``, ``"2.5"``; no unit, no exponent).
    """
    if not annotations or EGRESS_BANDWIDTH_ANNOTATION not in annotations:
        return None
    return _parse_mbps(EGRESS_BANDWIDTH_ANNOTATION, annotations[EGRESS_BANDWIDTH_ANNOTATION])


def node_egress_bandwidth_of(annotations: Mapping[str, str] | None) -> tuple[float, str] | None:
    """A node's egress bandwidth from its annotations: (Mbit/s, the key it was read from), or None.

    The first of ``NODE_EGRESS_BANDWIDTH_ANNOTATIONS`` present decides:
    ``colocation.tidal.io/node-egress-bandwidth-mbps``, then the deprecated
    ``colocation.tidal.io/egress-bandwidth-mbps`` (its name before it became the pod's limit),
    then Volcano's ``volcano.sh/network-bandwidth-rate``. All take the same form (Volcano's own
    agent accepts integers only; every integer it accepts > 0 means the same here).

    Raises:
        EgressBandwidthAnnotationError: the deciding annotation has an invalid value.
    """
    for key in NODE_EGRESS_BANDWIDTH_ANNOTATIONS:
        if annotations and key in annotations:
            return _parse_mbps(key, annotations[key]), key
    return None


# --- PriorityClasses --------------------------------------------------------------------------


@dataclass(frozen=True)
class PriorityClassSpec:
    """One Tidal PriorityClass (scheduling.k8s.io/v1).

    Attributes:
        name: object name, e.g. ``tidal-hls``.
        value: priority; higher schedules first and may preempt lower.
        preemption_policy: ``PreemptLowerPriority`` or ``Never``.
        description: shown by ``kubectl describe priorityclass``.
    """

    name: str
    value: int
    preemption_policy: str
    description: str

    def manifest(self) -> dict[str, Any]:
        """The PriorityClass object as a plain dict, ready to apply."""
        return {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {
                "name": self.name,
                "labels": {"app.kubernetes.io/part-of": "tidal"},
            },
            "value": self.value,
            "globalDefault": False,
            "preemptionPolicy": self.preemption_policy,
            "description": self.description,
        }


# Values stay far below 1e9 (the ceiling for user classes; system classes sit above it), so
# cluster-critical pods always outrank Tidal's. BE is negative so that it is below every pod that
# has no PriorityClass at all (priority 0): the scheduler and Volcano's preempt/reclaim actions
# then pick BE pods first, which is what "BE is evicted first" means at the scheduling level.
# BE never preempts: it runs only on capacity online pods leave idle, so it must not displace
# anything to get scheduled; it waits instead.
PRIORITY_CLASS_BY_LEVEL: Mapping[QoSLevel, PriorityClassSpec] = {
    QoSLevel.HLS: PriorityClassSpec(
        name="tidal-hls",
        value=100000,
        preemption_policy="PreemptLowerPriority",
        description="Tidal HLS: latency-critical online pods with exclusive CPUs.",
    ),
    QoSLevel.LS: PriorityClassSpec(
        name="tidal-ls",
        value=50000,
        preemption_policy="PreemptLowerPriority",
        description="Tidal LS: elastic online pods.",
    ),
    QoSLevel.BE: PriorityClassSpec(
        name="tidal-be",
        value=-100,
        preemption_policy="Never",
        description="Tidal BE: offline batch pods on oversold resources; lowest, never preempts.",
    ),
}


def priority_class_manifests() -> list[dict[str, Any]]:
    """The three Tidal PriorityClass objects, HLS first, as fresh dicts (callers may mutate)."""
    return [PRIORITY_CLASS_BY_LEVEL[level].manifest() for level in QoSLevel]
