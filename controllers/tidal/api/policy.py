# SPDX-License-Identifier: Apache-2.0
"""The ColocationPolicy model: every tunable of Tidal, its defaults, ranges and cross-field rules.

One frozen dataclass per object of the CRD's ``spec``. Each field carries a `FieldSpec` in its
dataclass metadata (JSON name, type, range, enum, description), and each class lists its
`CrossFieldRule`\\ s, so parsing, serialising and the CRD all read one description of the
schema: ``hack/generate_crds.py`` renders the CRD YAML (``tidal/crds/``) from it with
`tidal.api.policy_crd`, and ``hack/generate_vendored.py`` copies this module into the Ansible
collection (``plugins/module_utils/policy_model.py``), so it imports nothing of `tidal` but
`tidal.api.qos`'s API_GROUP_VERSION.

The module is pure: no I/O. Units are in the field names (``...Percent`` is 0-100 of the node's
capacity unless the description says otherwise, ``...Seconds`` are seconds).

Enabled-by-default choices (all settable):

* ``loadAwareScheduling``, ``evictionWatermarks``: on. They only ever protect online pods.
* ``overselling``: on. It acts only on nodes labelled
  ``colocation.tidal.io/oversubscription=true``, so the label stays the per-node switch.
* ``features.cpuBurst``: on. It acts only on pods that opt in by annotation.
* ``features.memoryReclaim``: on. It touches BE pods only, and only above its trigger.
* ``features.cacheLimits``, ``psiInterference``, ``numaAffinity``, ``egressBandwidth``,
  ``blockIO``: off. They need hardware or kernel support (resctrl, PSI, several NUMA nodes, tc,
  blkio throttling) that many nodes lack, or they change where online pods' CPUs come from; each node's capability probe reports
  whether they can work before an operator turns them on.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tidal.api.qos import API_GROUP_VERSION

__all__ = [
    "DEFAULT_POLICY_NAME",
    "POLICY_KIND",
    "Predictor",
    "ReportingMode",
    "PSIResource",
    "SuppressionQuota",
    "FieldSpec",
    "CrossFieldRule",
    "FieldError",
    "PolicyValidationError",
    "LoadAwareScheduling",
    "Watermark",
    "EvictionWatermarks",
    "Switch",
    "CPUSuppression",
    "CPUInterference",
    "BEIsolation",
    "Overselling",
    "CPUBurst",
    "MemoryReclaim",
    "CacheShares",
    "CacheLimits",
    "PSIInterference",
    "NUMAAffinity",
    "EgressBandwidth",
    "BlockIO",
    "OnlineSchedSlice",
    "Features",
    "ColocationPolicy",
    "field_specs",
    "cross_field_rules",
    "policy_manifest",
]

#: The only ColocationPolicy name the API server accepts (a CEL rule at the CRD root).
DEFAULT_POLICY_NAME = "default"
POLICY_KIND = "ColocationPolicy"


class Predictor(enum.StrEnum):
    """How the agent predicts the online CPU peak.

    ``p90``/``p95``/``p99``/``max``: that statistic of online usage over
    ``overselling.windowSeconds``. The others are the predictors of ``tidal.predict`` run on the
    node's 5-minute history (evaluated on real traces in the README); ``tidal`` is Tidal's own.
    Memory always uses the window's maximum with the history predictors.
    """

    TIDAL = "tidal"
    P90 = "p90"
    P95 = "p95"
    P99 = "p99"
    MAX = "max"
    NSIGMA = "nsigma"
    RC = "rc"
    RC_NSIGMA_MAX = "rc-nsigma-max"
    VOLCANO = "volcano"
    KOORDINATOR = "koordinator"


class ReportingMode(enum.StrEnum):
    """How the oversell master publishes a node's batch resources.

    extendedResources:  node status capacity/allocatable ``kubernetes.io/batch-cpu`` and
                        ``kubernetes.io/batch-memory``.
    volcanoAnnotations: the node annotations Volcano's own oversubscription reads.
    """

    EXTENDED_RESOURCES = "extendedResources"
    VOLCANO_ANNOTATIONS = "volcanoAnnotations"


class PSIResource(enum.StrEnum):
    """A resource whose pressure stall information (``/proc/pressure/<name>``) can be watched."""

    CPU = "cpu"
    MEMORY = "memory"
    IO = "io"


class SuppressionQuota(enum.StrEnum):
    """When BE CPU suppression's quota on the parent of all BE pods is in force.

    onInterference: only while the online pods' threads are shown to wait on a run queue because
                    of BE (``cpuInterference``'s attributed delay above its target for 5 rounds in
                    a row), until the allowance is back at the bound; otherwise no quota, and BE's
                    idle CPU priority alone keeps it out of the online pods' way. Needs the delay
                    signal (``cpuInterference`` on, the node's ``schedstat``); without it, always.
    always:         every round, following online usage (Tidal before 2026-11-29).

    Why not always: on the development machine's 2-vCPU guest, a quota on
    ``kubepods/besteffort`` cost the online server's p99 2.3-2.4 x solo, even a quota never cut
    below 1.9 of 2 CPUs, while BE with ``cpu.idle`` and no quota kept it at 0.96 x
    (docs/benchmarks.md, Isolation, 2026-11-29).
    """

    ON_INTERFERENCE = "onInterference"
    ALWAYS = "always"


# --- Schema description -----------------------------------------------------------------------


@dataclass(frozen=True)
class FieldSpec:
    """How one dataclass field appears in the CRD.

    Attributes:
        name: JSON name (camelCase), as in the CRD.
        kind: OpenAPI type: ``boolean``, ``integer``, ``number``, ``string``, ``array`` or
            ``object``.
        description: what the field means, with units.
        minimum, maximum: inclusive bounds for numbers.
        enum_type: the Enum of a ``string`` field, or of each item of an ``array`` field.
        min_items: smallest allowed array length; arrays never hold duplicates.
        object_type: the dataclass of an ``object`` field.
    """

    name: str
    kind: str
    description: str
    minimum: int | float | None = None
    maximum: int | float | None = None
    enum_type: type[enum.Enum] | None = None
    min_items: int | None = None
    object_type: type | None = None

    @property
    def enum(self) -> tuple[str, ...] | None:
        """The allowed string values, in declaration order, or None without an enum."""
        return None if self.enum_type is None else tuple(m.value for m in self.enum_type)

    @staticmethod
    def of(dataclass_field: dataclasses.Field) -> FieldSpec:
        """The FieldSpec of a field of one of this module's dataclasses."""
        return dataclass_field.metadata[_SPEC]


@dataclass(frozen=True)
class CrossFieldRule:
    """A rule over several fields of one object, mirrored by a CEL rule in the CRD.

    Attributes:
        field: JSON name of the field the error is reported on, or None for the object itself.
        message: the rule, phrased to follow the field path (e.g. "must be lower than
            highPercent"). The CRD's CEL message is ``"<path> <message>"`` verbatim.
        cel: the CEL expression in the CRD (``self`` is the object).
        holds: the same rule in Python.
        operands: JSON names of the fields the rule reads; their values are quoted in the
            Python error so a user sees what to change.
    """

    field: str | None
    message: str
    cel: str
    holds: Callable[[Any], bool]
    operands: tuple[str, ...]


_SPEC = "tidal.api.policy/field"


def _boolean(name: str, default: bool, description: str) -> Any:
    return field(default=default, metadata={_SPEC: FieldSpec(name, "boolean", description)})


def _integer(name: str, *, default: int, minimum: int, maximum: int, description: str) -> Any:
    spec = FieldSpec(name, "integer", description, minimum=minimum, maximum=maximum)
    return field(default=default, metadata={_SPEC: spec})


def _required_integer(name: str, *, minimum: int, maximum: int, description: str) -> Any:
    # No class default: the enclosing object supplies the instance (e.g. CPU and memory
    # watermarks share a class but not their defaults).
    spec = FieldSpec(name, "integer", description, minimum=minimum, maximum=maximum)
    return field(metadata={_SPEC: spec})


def _number(name: str, *, default: float, minimum: float, maximum: float, description: str) -> Any:
    spec = FieldSpec(name, "number", description, minimum=minimum, maximum=maximum)
    return field(default=default, metadata={_SPEC: spec})


def _choice(name: str, default: enum.Enum, description: str) -> Any:
    spec = FieldSpec(name, "string", description, enum_type=type(default))
    return field(default=default, metadata={_SPEC: spec})


def _choices(
    name: str, default: tuple[enum.Enum, ...], item_type: type[enum.Enum], description: str
) -> Any:
    spec = FieldSpec(name, "array", description, enum_type=item_type, min_items=1)
    return field(default=default, metadata={_SPEC: spec})


def _object(name: str, default_factory: Callable[[], Any], description: str) -> Any:
    object_type = type(default_factory())
    spec = FieldSpec(name, "object", description, object_type=object_type)
    return field(default_factory=default_factory, metadata={_SPEC: spec})


# --- The model --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadAwareScheduling:
    """Volcano's usage-based filtering: a node above a threshold takes no new pods."""

    enabled: bool = _boolean(
        "enabled", True, "Filter out nodes whose real usage is above the thresholds."
    )
    cpu_threshold_percent: int = _integer(
        "cpuThresholdPercent",
        default=60,
        minimum=0,
        maximum=100,
        description="Node CPU usage, percent of allocatable, above which no new pods are placed.",
    )
    memory_threshold_percent: int = _integer(
        "memoryThresholdPercent",
        default=60,
        minimum=0,
        maximum=100,
        description="Node memory usage, percent of allocatable, above which no new pods are "
        "placed.",
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()


@dataclass(frozen=True)
class Watermark:
    """A high/low pair: eviction starts above high and stops once usage is back below low."""

    high_percent: int = _required_integer(
        "highPercent",
        minimum=0,
        maximum=99,
        description="Node usage, percent of capacity, above which BE pods are evicted.",
    )
    low_percent: int = _required_integer(
        "lowPercent",
        minimum=0,
        maximum=99,
        description="Node usage, percent of capacity, below which eviction stops.",
    )

    # Hysteresis: with low >= high eviction would never stop, or never start.
    RULES: ClassVar[tuple[CrossFieldRule, ...]] = (
        CrossFieldRule(
            field="lowPercent",
            message="must be lower than highPercent",
            cel="self.lowPercent < self.highPercent",
            holds=lambda w: w.low_percent < w.high_percent,
            operands=("lowPercent", "highPercent"),
        ),
    )


@dataclass(frozen=True)
class EvictionWatermarks:
    """Offline (BE) eviction by node usage, with the node tainted while it evicts."""

    enabled: bool = _boolean(
        "enabled", True, "Evict BE pods when node usage crosses the high watermark."
    )
    cpu: Watermark = _object(
        "cpu", lambda: Watermark(high_percent=80, low_percent=30), "CPU watermarks."
    )
    memory: Watermark = _object(
        "memory", lambda: Watermark(high_percent=60, low_percent=30), "Memory watermarks."
    )
    dwell_seconds: int = _integer(
        "dwellSeconds",
        default=10,
        minimum=0,
        maximum=3600,
        description="How long usage must stay above a high watermark before eviction starts, in "
        "seconds; "
        "filters short spikes.",
    )
    cooldown_seconds: int = _integer(
        "cooldownSeconds",
        default=30,
        minimum=0,
        maximum=3600,
        description="Minimum time between two eviction rounds on a node, in seconds, so usage "
        "can settle.",
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()


@dataclass(frozen=True)
class Switch:
    """A strategy with an on/off switch and nothing else to tune."""

    enabled: bool = _boolean("enabled", True, "Run this strategy on colocation nodes.")

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()


@dataclass(frozen=True)
class CPUPriority:
    """BE CPU priority: BE pod cgroups at the lowest CPU priority the kernel offers; optionally
    BE containers created in the BE idle group outside ``kubepods``."""

    enabled: bool = _boolean("enabled", True, "Run this strategy on colocation nodes.")
    idle_group: bool = _boolean(
        "idleGroup", True, "Create BE containers (through the NRI plugin, at creation) in an idle cgroup "
        "beside kubepods instead of below their pod's cgroup: idle against the online pods and the node's "
        "daemons alike, where a BE pod below kubepods is only idle among BE pods. The kubelet's pod-level "
        "usage of such a pod then counts only its sandbox (its containers' usage stays right; the kubelet "
        "still evicts BE pods before online ones, by priority). Applies to containers created after the "
        "switch. Only with enabled: the group is idle through this strategy. Needs the runtime's NRI (else "
        "BE containers stay below kubepods) and cpu.idle (else the group is at the minimum weight); a node "
        "without them says so in its NodeProfile's policy problems."
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()

    @property
    def idle_group_in_force(self) -> bool:
        """BE containers go to the BE idle group: the switch on, and the strategy that makes the
        group idle on (without it the group would compete at the root at the default weight)."""
        return self.enabled and self.idle_group


@dataclass(frozen=True)
class CPUSuppression:
    """BE CPU suppression: a quota on the parent cgroup of all BE pods, recomputed every second
    as ``node CPUs x thresholdPercent / 100 - online usage - system usage``, never below
    ``floorMillicores`` (system usage: the node's outside Tidal's pods, while
    ``overselling.includeSystemUsage``); in force as ``quota`` says."""

    enabled: bool = _boolean(
        "enabled", True, "Cap BE pods together at what online pods leave under the threshold."
    )
    quota: SuppressionQuota = _choice(
        "quota",
        SuppressionQuota.ON_INTERFERENCE,
        "When the quota is in force: onInterference, only while cpuInterference finds BE delaying the "
        "online pods' threads (its attributed delay above the target 5 rounds in a row) until the allowance "
        "is back at the bound, else no quota (BE's idle CPU priority alone); always, every round. "
        "onInterference without the delay signal (cpuInterference off, no schedstat) is always.",
    )
    threshold_percent: int = _integer(
        "thresholdPercent",
        default=65,
        minimum=1,
        maximum=100,
        description="Share of the node's CPUs that online plus BE usage may reach, percent.",
    )
    floor_millicores: int = _integer(
        "floorMillicores",
        default=500,
        minimum=10,
        maximum=1000000,
        description="The BE quota never goes below this, in millicores, so BE pods are never "
        "frozen.",
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()


@dataclass(frozen=True)
class CPUInterference:
    """BE CPU interference control: the BE parent's quota follows the run-queue delay of the
    online (HLS/LS) pods' threads (``/proc/<tid>/schedstat``), below the suppression quota:
    lowered multiplicatively while the mean delay per scheduling slice, beyond the delay measured
    with BE at its floor, is above the target, raised additively while it is below half of it
    (the Heracles idea: BE gets the slack the online service tolerates). Needs cpuSuppression
    enabled (it bounds the quota)."""

    enabled: bool = _boolean(
        "enabled", True, "Lower the BE quota below cpuSuppression's while online threads wait on a run "
        "queue longer than the target."
    )
    target_delay_microseconds: int = _integer(
        "targetDelayMicroseconds",
        default=100,
        minimum=10,
        maximum=100000,
        description="Mean run-queue delay per scheduling slice of the online pods' threads, beyond the "
        "delay they had while BE was held at its floor (what throttling BE cannot remove), above which "
        "the BE quota is lowered, in microseconds; below half of it the quota grows back.",
    )
    decrease_percent: int = _integer(
        "decreasePercent",
        default=50,
        minimum=1,
        maximum=90,
        description="How much of the BE quota one round above the target takes away, percent "
        "(multiplicative decrease; never below cpuSuppression.floorMillicores).",
    )
    increase_percent: int = _integer(
        "increasePercent",
        default=5,
        minimum=1,
        maximum=100,
        description="How much the BE quota grows per round below half the target, percent of the node's "
        "CPUs (additive increase; never above the cpuSuppression quota).",
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()


@dataclass(frozen=True)
class BEIsolation:
    """The node agent's core isolation of BE pods (on nodes labelled for colocation)."""

    cpu_priority: CPUPriority = _object(
        "cpuPriority",
        CPUPriority,
        "BE pod cgroups at the lowest CPU priority: cpu.idle=1 where the kernel has it, else "
        "minimum shares/weight (openEuler cpu.qos_level=-1 when present); optionally BE containers "
        "in the BE idle group.",
    )
    batch_resources: Switch = _object(
        "batchResources",
        Switch,
        "CPU quota, shares and memory limit of BE containers from their "
        "kubernetes.io/batch-cpu and batch-memory requests.",
    )
    cpu_suppression: CPUSuppression = _object(
        "cpuSuppression", CPUSuppression, "Dynamic CPU quota on the parent cgroup of BE pods."
    )
    cpu_interference: CPUInterference = _object(
        "cpuInterference", CPUInterference, "The BE quota follows the online threads' run-queue delay "
        "(below the cpuSuppression quota)."
    )
    qos_check_interval_seconds: int = _integer(
        "qosCheckIntervalSeconds",
        default=1,
        minimum=1,
        maximum=60,
        description="How often the node agent runs its QoS round (every strategy, feature and the "
        "eviction watermarks), in seconds; the reference agent's qosCheckInterval. Usage is still "
        "sampled every second; a longer round costs less CPU but acts up to one interval later.",
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()


@dataclass(frozen=True)
class Overselling:
    """How the oversell master turns NodeProfile reports into a node's batch resources."""

    enabled: bool = _boolean(
        "enabled",
        True,
        "Publish batch resources on nodes labelled colocation.tidal.io/oversubscription=true.",
    )
    ratio_percent: int = _integer(
        "ratioPercent",
        default=60,
        minimum=0,
        maximum=100,
        description="Cap: the share of allocatable that online usage and BE pods together may fill; "
        "batch = allocatable × cap − predicted online peak − system overhead − safety margin.",
    )
    predictor: Predictor = _choice(
        "predictor", Predictor.TIDAL, "How the online CPU peak is predicted: a statistic over the window "
        "(p90, p95, p99, max) or a history predictor (tidal, nsigma, rc, rc-nsigma-max, volcano, koordinator)."
    )
    window_seconds: int = _integer(
        "windowSeconds",
        default=300,
        minimum=60,
        maximum=1800,
        description="Length of the usage window the statistic predictors (p90, p95, p99, max), the memory peak of "
                    "the history predictors and the system usage read, in seconds; at most 1800, the 1-second "
                    "samples the agent keeps (a longer window would silently read only those).",
    )
    safety_margin_percent: int = _integer(
        "safetyMarginPercent",
        default=10,
        minimum=0,
        maximum=100,
        description="Safety margin, in percent of the node's allocatable (not of the predicted "
        "peak), held back from batch resources: batch = allocatable × cap − predicted online peak "
        "− system overhead − allocatable × safetyMarginPercent. A share of the node (as Koordinator's "
        "reclaim threshold holds one back) also protects nodes whose predicted peak is small, where "
        "a prediction is least reliable; the predictors already add their own margin to the peak.",
    )
    include_system_usage: bool = _boolean(
        "includeSystemUsage",
        True,
        "Count the node's usage outside Tidal's pods (system daemons, kubelet, runtime, kernel, pods "
        "without a QoS level): the "
        "part beyond the kubelet's reservation is subtracted from batch resources, BE CPU suppression "
        "leaves all of it to the system, and eviction watermarks compare node usage. When false, only "
        "pods' usage counts for all three, as Volcano's agent with --include-system-usage=false.",
    )
    be_uses_batch_resources: bool = _boolean(
        "beUsesBatchResources",
        True,
        "Default for BE pods that carry no colocation.tidal.io/oversell annotation (on the pod or its "
        "namespace): true rewrites their native requests into oversold batch resources and requires "
        "nodes labelled colocation.tidal.io/oversubscription=true; false keeps their native requests "
        "and requires nodes labelled colocation.tidal.io/colocation=true.",
    )
    be_fallback_to_native: bool = _boolean(
        "beFallbackToNative",
        False,
        "BE pods that keep native requests may run on any node, preferring colocation and oversold "
        "ones, instead of colocation nodes only: an evicted job's replacement can then run on "
        "ordinary capacity. Off by default: on a node without colocation a BE pod gets no BE "
        "isolation (idle CPU priority, suppression, eviction) next to online services.",
    )
    degrade_seconds: int = _integer(
        "degradeSeconds",
        default=180,
        minimum=30,
        maximum=86400,
        description="A NodeProfile report older than this, in seconds, "
        "drives the node's batch resources to zero. At least 30: the agent reports every 10 s, and a "
        "shorter time would drop the batch resources between two healthy reports.",
    )
    change_threshold_percent: int = _integer(
        "changeThresholdPercent",
        default=10,
        minimum=0,
        maximum=100,
        description="Relative change, in percent, below which batch resources are not rewritten "
        "on the node (a decrease is written from 10 % whatever this is: the node must not offer much "
        "more than was decided).",
    )
    reporting_mode: ReportingMode = _choice(
        "reportingMode",
        ReportingMode.EXTENDED_RESOURCES,
        "Where batch resources are published: node extended resources kubernetes.io/batch-cpu "
        "(millicores) and kubernetes.io/batch-memory (bytes), or the node annotations Volcano's "
        "oversubscription reads (volcanoAnnotations: no node offers batch resources then, so BE pods "
        "must keep native requests, and the kubelet admits those only within the node's allocatable).",
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()


@dataclass(frozen=True)
class CPUBurst:
    """CPU burst for opted-in pods, throttled by node CPU load."""

    enabled: bool = _boolean(
        "enabled", True, "Honour the cpu-burst annotations of pods (only opted-in pods burst)."
    )
    load_high_percent: int = _integer(
        "loadHighPercent",
        default=60,
        minimum=0,
        maximum=100,
        description="Node CPU usage, percent, above which burst quotas are reduced.",
    )
    load_alert_percent: int = _integer(
        "loadAlertPercent",
        default=80,
        minimum=0,
        maximum=100,
        description="Node CPU usage, percent, above which burst is switched off.",
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = (
        CrossFieldRule(
            field="loadHighPercent",
            message="must be lower than loadAlertPercent",
            cel="self.loadHighPercent < self.loadAlertPercent",
            holds=lambda b: b.load_high_percent < b.load_alert_percent,
            operands=("loadHighPercent", "loadAlertPercent"),
        ),
    )


@dataclass(frozen=True)
class MemoryReclaim:
    """Reclaims BE pods' memory (page cache first) before online pods feel memory pressure."""

    enabled: bool = _boolean(
        "enabled", True, "Lower BE pods' memory.high under node memory pressure."
    )
    trigger_percent: int = _integer(
        "triggerPercent",
        default=50,
        minimum=0,
        maximum=100,
        description="Node memory usage, percent of capacity, above which BE memory is "
        "reclaimed. Keep it below "
        "evictionWatermarks.memory.highPercent so reclaim acts before eviction.",
    )
    step_percent: int = _integer(
        "stepPercent",
        default=10,
        minimum=1,
        maximum=100,
        description="How much a BE pod's memory.high is lowered per interval, in percent of its "
        "memory limit (the cgroup limit set from its kubernetes.io/batch-memory request).",
    )
    interval_seconds: int = _integer(
        "intervalSeconds",
        default=5,
        minimum=1,
        maximum=300,
        description="Period of the reclaim check, in seconds.",
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()


@dataclass(frozen=True)
class CacheShares:
    """Share of a resource given to each cache level; a level never gets more than a higher one."""

    # At least 1: a resctrl schemata cannot grant an empty L3 mask or 0 % bandwidth.
    low: int = _required_integer(
        "low", minimum=1, maximum=100, description="Share for cache-limit low, percent."
    )
    mid: int = _required_integer(
        "mid", minimum=1, maximum=100, description="Share for cache-limit mid, percent."
    )
    high: int = _required_integer(
        "high", minimum=1, maximum=100, description="Share for cache-limit high, percent."
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = (
        CrossFieldRule(
            field=None,
            message="must satisfy low <= mid <= high",
            cel="self.low <= self.mid && self.mid <= self.high",
            holds=lambda s: s.low <= s.mid <= s.high,
            operands=("low", "mid", "high"),
        ),
    )


@dataclass(frozen=True)
class CacheLimits:
    """LLC and memory-bandwidth limits of BE pods by their cache-limit level (resctrl)."""

    enabled: bool = _boolean(
        "enabled",
        False,
        "Place BE pods in resctrl groups by their cache-limit level (needs RDT/MPAM).",
    )
    l3_percent: CacheShares = _object(
        "l3Percent",
        lambda: CacheShares(low=20, mid=30, high=50),
        "Last-level cache share per level, percent.",
    )
    memory_bandwidth_percent: CacheShares = _object(
        "memoryBandwidthPercent",
        lambda: CacheShares(low=20, mid=30, high=50),
        "Memory bandwidth share per level, percent.",
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()


@dataclass(frozen=True)
class PSIInterference:
    """Evicts the BE pod contributing most while online pods stall on a resource (pressure
    stall information), one at a time with a cooldown."""

    enabled: bool = _boolean(
        "enabled", False, "Watch online pods' PSI and evict BE pods on interference (needs PSI)."
    )
    resources: tuple[PSIResource, ...] = _choices(
        "resources",
        (PSIResource.CPU, PSIResource.MEMORY),
        PSIResource,
        "Resources whose pressure is watched; no duplicates.",
    )
    avg10_threshold_percent: float = _number(
        "avg10ThresholdPercent",
        default=5.0,
        minimum=0.0,
        maximum=100.0,
        description="An online pod's 'some' avg10 stall, percent, above which the BE pod "
        "contributing most is evicted.",
    )
    cooldown_seconds: int = _integer(
        "cooldownSeconds",
        default=60,
        minimum=0,
        maximum=3600,
        description="Seconds after a PSI eviction before the next one, so the pressure "
        "average can show its effect.",
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()


@dataclass(frozen=True)
class KernelQoSLevel:
    """openEuler's kernel QoS knobs, where the kernel has them (probed per node)."""

    enabled: bool = _boolean(
        "enabled",
        False,
        "Write openEuler's cpu.qos_level for every pod by its level (Volcano's LC/HLS/LS/BE -> "
        "2/1/0/-1; Tidal's HLS is LC, LS is LS unless the pod says HLS in volcano.sh/qos-level) and "
        "memory.qos_level -1 for BE pods. Nodes whose kernel lacks the files report it and are left "
        "alone.",
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()


@dataclass(frozen=True)
class NUMAAffinity:
    """Keeps an LS pod's CPUs and memory on the NUMA node(s) that fit it best."""

    enabled: bool = _boolean(
        "enabled", False, "Bind LS pods' cpusets to the best-fitting NUMA nodes."
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()


@dataclass(frozen=True)
class EgressBandwidth:
    """Caps BE pods' egress bandwidth, tighter while online egress is high."""

    enabled: bool = _boolean(
        "enabled", False, "Limit BE pods' egress bandwidth, and each pod's to its own "
        "colocation.tidal.io/egress-bandwidth-mbps annotation (needs tc on the node)."
    )
    node_bandwidth_mbps: int = _integer(
        "nodeBandwidthMbps",
        default=0,
        minimum=0,
        maximum=1000000,
        description="Node egress bandwidth in megabits per second, used when the node has no "
        "colocation.tidal.io/node-egress-bandwidth-mbps (or Volcano's volcano.sh/network-bandwidth-rate) "
        "annotation; 0 means the link speed of the NIC.",
    )
    online_watermark_percent: int = _integer(
        "onlineWatermarkPercent",
        default=80,
        minimum=0,
        maximum=100,
        description="Online egress, percent of node bandwidth, "
        "above which BE egress is capped at offlineLowPercent.",
    )
    offline_low_percent: int = _integer(
        "offlineLowPercent",
        default=10,
        minimum=0,
        maximum=100,
        description="BE egress cap while online egress is above the watermark, percent of node "
        "bandwidth.",
    )
    offline_high_percent: int = _integer(
        "offlineHighPercent",
        default=40,
        minimum=0,
        maximum=100,
        description="BE egress cap otherwise, percent of node bandwidth.",
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = (
        CrossFieldRule(
            field="offlineLowPercent",
            message="must not exceed offlineHighPercent",
            cel="self.offlineLowPercent <= self.offlineHighPercent",
            holds=lambda e: e.offline_low_percent <= e.offline_high_percent,
            operands=("offlineLowPercent", "offlineHighPercent"),
        ),
    )


@dataclass(frozen=True)
class BlockIO:
    """Caps the block I/O of BE pods on the node's disks, so that an online pod's reads do not
    queue behind a BE job's stream (cgroup blkio throttling; v1's is flat: the cap is shared out
    among the BE containers, as they use it)."""

    enabled: bool = _boolean(
        "enabled", False, "Throttle BE containers' reads and writes on the node's disks to the node's "
        "BE caps below, shared by the BE containers as they use it (max-min fair; needs blkio "
        "throttling: the v1 blkio controller or v2's io controller)."
    )
    read_mib_per_second: int = _integer(
        "readMiBPerSecond",
        default=100,
        minimum=0,
        maximum=1000000,
        description="BE pods' read bandwidth per disk, together, in MiB/s; 0: not capped.",
    )
    write_mib_per_second: int = _integer(
        "writeMiBPerSecond",
        default=100,
        minimum=0,
        maximum=1000000,
        description="BE pods' write bandwidth per disk, together, in MiB/s; 0: not capped. On cgroup "
        "v1 only direct and synchronous writes are throttled (v1 charges page-cache writeback to the "
        "root cgroup).",
    )
    read_iops: int = _integer(
        "readIOPS",
        default=0,
        minimum=0,
        maximum=10000000,
        description="BE pods' read operations per second per disk, together; 0: not capped.",
    )
    write_iops: int = _integer(
        "writeIOPS",
        default=0,
        minimum=0,
        maximum=10000000,
        description="BE pods' write operations per second per disk, together; 0: not capped.",
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()


@dataclass(frozen=True)
class OnlineSchedSlice:
    """A short EEVDF slice for the threads of online (HLS and LS) pods (Linux >= 6.12): a thread
    that wakes for a request preempts a daemon or BE task running with the default slice instead
    of waiting for it. Shares and quotas are unchanged: online pods get their CPU sooner, not
    more of it."""

    enabled: bool = _boolean(
        "enabled", False, "Give online pods' threads a short scheduling slice (sched_setattr "
        "sched_runtime; SCHED_OTHER and SCHED_BATCH threads only). Nodes whose kernel keeps no custom "
        "slice (before Linux 6.12) report it and are left alone."
    )
    slice_microseconds: int = _integer(
        "sliceMicroseconds",
        default=100,
        minimum=100,
        maximum=100000,
        description="The slice online threads ask for, in microseconds (the kernel's range: 100 to "
        "100000; its default is 750 x (1 + log2 CPUs)). Shorter: earlier wake-ups, more preemption.",
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()


@dataclass(frozen=True)
class Features:
    """Advanced node-level QoS features, each with its own switch."""

    cpu_burst: CPUBurst = _object(
        "cpuBurst",
        CPUBurst,
        "CPU burst for pods that opt in by annotation, throttled by node CPU load.",
    )
    memory_reclaim: MemoryReclaim = _object(
        "memoryReclaim",
        MemoryReclaim,
        "Reclaims BE pods' memory (page cache first) before online pods feel memory pressure.",
    )
    cache_limits: CacheLimits = _object(
        "cacheLimits",
        CacheLimits,
        "LLC and memory-bandwidth limits of BE pods by their colocation.tidal.io/cache-limit level "
        "(needs resctrl: Intel RDT or Arm MPAM). Shares are at least 1 because resctrl cannot "
        "grant an empty share.",
    )
    psi_interference: PSIInterference = _object(
        "psiInterference",
        PSIInterference,
        "Evicts the BE pod contributing most while online pods stall on a resource (pressure "
        "stall information), one at a time with a cooldown.",
    )
    kernel_qos_level: KernelQoSLevel = _object(
        "kernelQoSLevel",
        KernelQoSLevel,
        "openEuler kernel QoS levels (cpu.qos_level, memory.qos_level) by pod QoS level.",
    )
    numa_affinity: NUMAAffinity = _object(
        "numaAffinity",
        NUMAAffinity,
        "Keeps an LS pod's CPUs and memory on the NUMA node(s) that fit it best.",
    )
    egress_bandwidth: EgressBandwidth = _object(
        "egressBandwidth",
        EgressBandwidth,
        "Caps BE pods' egress bandwidth, tighter while online egress is high.",
    )
    block_io: BlockIO = _object(
        "blockIO",
        BlockIO,
        "Caps BE pods' block I/O on the node's disks, so online pods' reads do not queue behind BE streams.",
    )
    online_sched_slice: OnlineSchedSlice = _object(
        "onlineSchedSlice",
        OnlineSchedSlice,
        "A short scheduling slice for online pods' threads, so they run soon after they wake.",
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()


@dataclass(frozen=True)
class ColocationPolicy:
    """The ``spec`` of the singleton ColocationPolicy ``default``; ``ColocationPolicy()`` holds
    the defaults.

    Build one from an API object's spec with `from_spec`, which applies defaults and collects
    every validation error; `to_spec` gives back a complete spec with every field set.
    """

    load_aware_scheduling: LoadAwareScheduling = _object(
        "loadAwareScheduling", LoadAwareScheduling, "Load-aware scheduling thresholds."
    )
    eviction_watermarks: EvictionWatermarks = _object(
        "evictionWatermarks",
        EvictionWatermarks,
        "Offline (BE) eviction by node usage. Eviction starts above highPercent and stops "
        "below lowPercent; the node is tainted "
        "colocation.tidal.io/offline-evicting:NoSchedule meanwhile.",
    )
    be_isolation: BEIsolation = _object(
        "beIsolation",
        BEIsolation,
        "Isolation of BE pods on colocation nodes by the node agent, each strategy with its "
        "own switch.",
    )
    overselling: Overselling = _object(
        "overselling",
        Overselling,
        "Overselling of reclaimable resources to BE pods. Acts only on nodes labelled "
        "colocation.tidal.io/oversubscription=true.",
    )
    features: Features = _object(
        "features", Features, "Advanced node-level QoS features, each with its own switch."
    )

    RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None, *, path: str = "spec") -> ColocationPolicy:
        """Parse a ColocationPolicy ``spec``.

        Missing keys take their defaults. ``None`` anywhere counts as missing, as it does at the
        API server, which prunes nulls of non-nullable fields before defaulting. Integers are
        accepted for ``number`` fields; booleans are never numbers.

        Raises:
            PolicyValidationError: listing every unknown key, wrong type, out-of-range value and
                broken cross-field rule, each with its full field path (``path`` is the prefix).
        """
        errors: list[FieldError] = []
        policy = _parse_object(cls, spec, cls(), path, errors)
        if errors:
            raise PolicyValidationError(errors)
        return policy

    def to_spec(self) -> dict[str, Any]:
        """The complete spec as plain JSON-compatible data; ``from_spec(p.to_spec()) == p``."""
        return _dump_object(self)

    def validate(self) -> None:
        """Check a policy built in code (ranges, cross-field rules); raise PolicyValidationError."""
        ColocationPolicy.from_spec(self.to_spec())


# --- Errors -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldError:
    """One validation error: the field's full path (e.g. ``spec.overselling.ratioPercent``)
    and the rule it breaks."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class PolicyValidationError(ValueError):
    """A ColocationPolicy spec is invalid; ``errors`` holds every problem found, in field order."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        self.errors = tuple(errors)
        count = len(self.errors)
        noun = "error" if count == 1 else "errors"
        super().__init__(
            f"invalid {POLICY_KIND} ({count} {noun}): " + "; ".join(str(e) for e in self.errors)
        )


# --- Parsing and serialising ------------------------------------------------------------------


_spec_of = FieldSpec.of


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


def _got(value: Any) -> str:
    return f"got {value!r} ({_json_type(value)})"


def _parse_object(cls: type, data: Any, default: Any, path: str, errors: list[FieldError]) -> Any:
    if data is None:
        return default
    if not isinstance(data, Mapping):
        errors.append(FieldError(path, f"must be an object, got {_json_type(data)}"))
        return default

    errors_before = len(errors)
    known = {_spec_of(f).name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in known:
            errors.append(
                FieldError(f"{path}.{key}", f"unknown field; known fields: {', '.join(known)}")
            )

    values: dict[str, Any] = {}
    for name, f in known.items():
        spec = _spec_of(f)
        field_path = f"{path}.{name}"
        fallback = getattr(default, f.name)
        raw = data.get(name)
        if raw is None:
            values[f.name] = fallback
        elif spec.kind == "object":
            values[f.name] = _parse_object(spec.object_type, raw, fallback, field_path, errors)
        else:
            values[f.name] = _parse_leaf(f, raw, fallback, field_path, errors)
    result = cls(**values)

    # A cross-field rule over values that are already wrong would only repeat the problem.
    if len(errors) == errors_before:
        for rule in cls.RULES:
            if not rule.holds(result):
                rule_path = f"{path}.{rule.field}" if rule.field else path
                dumped = _dump_object(result)
                got = ", ".join(f"{name} {dumped[name]!r}" for name in rule.operands)
                errors.append(FieldError(rule_path, f"{rule.message}, got {got}"))
    return result


def _parse_leaf(
    f: dataclasses.Field, raw: Any, fallback: Any, path: str, errors: list[FieldError]
) -> Any:
    spec = _spec_of(f)
    error = None
    value = fallback
    if spec.kind == "boolean":
        if isinstance(raw, bool):
            value = raw
        else:
            error = f"must be a boolean, {_got(raw)}"
    elif spec.kind in ("integer", "number"):
        numeric = (int,) if spec.kind == "integer" else (int, float)
        if isinstance(raw, bool) or not isinstance(raw, numeric):
            error = f"must be {'an integer' if spec.kind == 'integer' else 'a number'}, {_got(raw)}"
        elif isinstance(raw, float) and not math.isfinite(raw):
            error = f"must be a finite number, {_got(raw)}"
        elif not spec.minimum <= raw <= spec.maximum:
            error = f"must be between {spec.minimum} and {spec.maximum}, got {raw!r}"
        else:
            value = float(raw) if spec.kind == "number" else raw
    elif spec.kind == "string":
        if isinstance(raw, str) and raw in spec.enum:
            value = spec.enum_type(raw)
        else:
            error = f"must be one of {', '.join(spec.enum)}, {_got(raw)}"
    elif spec.kind == "array":
        value, error = _parse_array(f, raw, fallback)
    else:  # pragma: no cover - a FieldSpec kind added without parsing support
        raise AssertionError(f"unsupported field kind {spec.kind!r} at {path}")
    if error:
        errors.append(FieldError(path, error))
    return value


def _parse_array(f: dataclasses.Field, raw: Any, fallback: Any) -> tuple[Any, str | None]:
    spec = _spec_of(f)
    if not isinstance(raw, (list, tuple)):
        return fallback, f"must be an array, {_got(raw)}"
    bad = [item for item in raw if not (isinstance(item, str) and item in spec.enum)]
    if bad:
        return fallback, f"items must be among {', '.join(spec.enum)}, got {bad!r}"
    duplicates = sorted({item for item in raw if raw.count(item) > 1})
    if duplicates:
        return fallback, f"must not contain duplicates, got {duplicates!r} more than once"
    if spec.min_items is not None and len(raw) < spec.min_items:
        return fallback, f"must have at least {spec.min_items} item(s), got {len(raw)}"
    return tuple(spec.enum_type(item) for item in raw), None


def _dump_object(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        spec = _spec_of(f)
        value = getattr(obj, f.name)
        if spec.kind == "object":
            out[spec.name] = _dump_object(value)
        elif spec.kind == "array":
            out[spec.name] = [item.value for item in value]
        elif spec.kind == "string":
            out[spec.name] = value.value
        else:
            out[spec.name] = value
    return out


# --- Introspection (for the CRD, docs and the console) ----------------------------------------


def field_specs(
    policy: ColocationPolicy | None = None, *, path: str = "spec"
) -> Iterator[tuple[str, FieldSpec, Any]]:
    """Every field of the spec, depth first: ``(path, spec, value)``.

    ``value`` is the field's value in ``policy`` (the defaults when None), as ``to_spec`` would
    write it: enums as strings, arrays as lists, objects as dicts.
    """
    yield from _walk_fields(policy if policy is not None else ColocationPolicy(), path)


def _walk_fields(obj: Any, path: str) -> Iterator[tuple[str, FieldSpec, Any]]:
    dumped = _dump_object(obj)
    for f in dataclasses.fields(obj):
        spec = _spec_of(f)
        field_path = f"{path}.{spec.name}"
        yield field_path, spec, dumped[spec.name]
        if spec.kind == "object":
            yield from _walk_fields(getattr(obj, f.name), field_path)


def cross_field_rules(*, path: str = "spec") -> Iterator[tuple[str, CrossFieldRule]]:
    """Every cross-field rule with the path of the object it applies to, depth first."""
    yield from _walk_rules(ColocationPolicy, path)


def _walk_rules(cls: type, path: str) -> Iterator[tuple[str, CrossFieldRule]]:
    for rule in cls.RULES:
        yield path, rule
    for f in dataclasses.fields(cls):
        spec = _spec_of(f)
        if spec.kind == "object":
            yield from _walk_rules(spec.object_type, f"{path}.{spec.name}")


def policy_manifest(policy: ColocationPolicy | None = None) -> dict[str, Any]:
    """The ColocationPolicy API object ``default`` holding ``policy`` (the defaults when None)."""
    return {
        "apiVersion": API_GROUP_VERSION,
        "kind": POLICY_KIND,
        "metadata": {"name": DEFAULT_POLICY_NAME},
        "spec": (policy if policy is not None else ColocationPolicy()).to_spec(),
    }
