# SPDX-License-Identifier: Apache-2.0
"""PSI interference: evict the BE pod that contributes most while online work stalls.

Pressure stall information (PSI) measures the share of wall time in which some task waited for a
resource (``some avg10``: percent over the last 10 s). Where the pods' cgroups are on v2 each
online (HLS/LS) pod's own ``<resource>.pressure`` is watched — stalls of online work exactly; on
v1 (and v1 hybrid) only the node's ``/proc/pressure/<resource>`` exists, so the node's pressure
stands for the online pods' (the reason the capability probe reports ``psi.cgroup`` unsupported).

Decision (pure, :class:`PSIInterferenceEviction`): when some watched scope's ``some avg10`` for a
configured resource (``features.psiInterference.resources``, default cpu and memory; io optional)
is above ``avg10ThresholdPercent`` (5.0), one BE pod is evicted: the one using most of that
resource (io has no per-pod usage here: CPU usage stands in), then lowest priority, then UID. The
next PSI eviction waits ``cooldownSeconds`` (60), so avg10 (a 10 s average) can show the effect.
A pod asked to go is not chosen again for ``max(2 × cooldown, 120 s)`` (a terminating pod stays
listed for its grace period); if it is still there after that (the eviction failed), it can be
chosen again. Decisions are :class:`PSIDecision`\\ s, carried out by
the node's API worker like watermark evictions (Event ``TidalEvicted`` with the figures, metric
``tidal_evictions_total{reason="psi"}``).

Memory pressure at node scope is the online pods' only while the node itself reclaims. A BE
pod at its own memory limit (``kubernetes.io/batch-memory``) stalls in its own cgroup's reclaim:
that stall is in the node's PSI too, and without per-pod PSI it looks exactly like interference
— yet it is the limit doing its work (BE slowed, online untouched), and evicting the BE pod for it
would kill BE work that harms nobody. So node-scope memory pressure counts only when the node's
reclaim counter rose within the last :data:`NODE_RECLAIM_WINDOW_SECONDS` (avg10's window):
``/proc/vmstat`` ``pgscan_kswapd`` + ``pgscan_direct`` (reclaim for the whole machine; the kernel
leaves reclaim inside a cgroup's limit out of them), or — for a node that is a memory cgroup
(``tidal-agent run --node-memory-cgroup``) — that cgroup's limit hits (v1 ``memory.failcnt``,
v2 ``memory.events`` ``max``). :class:`NodeReclaim` is that rule (pure); without a counter
reading (unreadable, tests) the pressure counts, as before. Per-pod PSI (v2) needs no such rule.

The feature (:class:`PSIInterference`, ``psi-interference``) reads pressure and the node's
reclaim counter in ``sense`` (:class:`PressureReader`, :func:`read_node_reclaim_count`;
:func:`parse_some_avg10` and :func:`parse_node_reclaim_count` are pure), steps the decision state
in ``plan`` and returns the evictions as effects (pods the watermark machine chose this round are
left out) and the node's pressure as gauges.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from tidal.agent.collector.cgroups import CgroupLayout, CgroupVersion
from tidal.agent.collector.sampler import ONLINE_LEVELS
from tidal.api.policy import PSIInterference as PSIInterferenceConfig

from .eviction import Action, Candidate, Decision
from .feature import DEFAULT_OPTIONS, EMPTY, Context, Gauge, Options, Plan
from .strategy import PodState

__all__ = ["NODE_RECLAIM_WINDOW_SECONDS", "NODE_SCOPE", "NodeReclaim", "PSIDecision", "PSIInterference",
           "PSIInterferenceEviction", "PressureReader", "Sensed", "attributable_pressure", "parse_node_reclaim_count",
           "parse_some_avg10", "read_node_reclaim_count"]

NODE_SCOPE = "node"
ONLINE = ONLINE_LEVELS  # the online QoS levels, as the sampler counts them


#: node-scope memory pressure counts while the node reclaimed this recently (avg10's window)
NODE_RECLAIM_WINDOW_SECONDS = 10.0

#: a pod asked to go stays listed while it terminates (grace period, 30 s by default)
MIN_FORGET_SECONDS = 120.0


def forget_after(config: PSIInterferenceConfig) -> float:
    return max(2.0 * config.cooldown_seconds, MIN_FORGET_SECONDS)


@dataclass(frozen=True)
class PSIDecision(Decision):
    """An eviction decided by PSI interference (metrics reason ``psi``)."""

    kind: ClassVar[str] = "psi"
    scope: str = NODE_SCOPE
    avg10_percent: float | None = None
    threshold_percent: float | None = None


def parse_some_avg10(text: str) -> float:
    """``some avg10=1.23 avg60=... total=...`` -> 1.23 (the ``some`` line of a pressure file)."""
    for line in text.splitlines():
        kind, *fields = line.split()
        if kind == "some":
            for item in fields:
                key, _, value = item.partition("=")
                if key == "avg10":
                    return float(value)
    raise ValueError(f"no 'some avg10=' in pressure text {text[:80]!r}")


@dataclass
class NodeReclaim:
    """Whether the node reclaimed memory lately, from a cumulative reclaim counter."""

    last_count: int | None = None
    last_rise: float | None = None

    def step(self, now: float, count: int | None) -> bool | None:
        """True when ``count`` rose within the last :data:`NODE_RECLAIM_WINDOW_SECONDS`; None
        without a reading. The first reading is the baseline (a node that reclaims shows a rise
        one round later)."""
        if count is None:
            return None
        if self.last_count is not None and count > self.last_count:
            self.last_rise = now
        self.last_count = count
        return self.last_rise is not None and now - self.last_rise < NODE_RECLAIM_WINDOW_SECONDS


def attributable_pressure(pressure: Mapping[str, Mapping[str, float]],
                          node_reclaiming: bool | None) -> dict[str, dict[str, float]]:
    """The pressure that may be the online pods': node-scope memory pressure is left out while
    the node does not reclaim (``node_reclaiming`` False; None: unknown, kept)."""
    out = {scope: dict(values) for scope, values in pressure.items()}
    if node_reclaiming is False and NODE_SCOPE in out:
        out[NODE_SCOPE].pop("memory", None)
    return out


def parse_node_reclaim_count(text: str, source: str) -> int:
    """The reclaim counter of one of the node's files: ``/proc/vmstat`` (``pgscan_kswapd`` +
    ``pgscan_direct``), v1 ``memory.failcnt`` (one integer) or v2 ``memory.events`` (``max``)."""
    if source.endswith("memory.failcnt"):
        return int(text.strip())
    wanted = ("max",) if source.endswith("memory.events") else ("pgscan_kswapd", "pgscan_direct")
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key in wanted:
            values[key] = int(value)
    if len(values) != len(wanted):
        raise ValueError(f"{source}: no {' or '.join(k for k in wanted if k not in values)} line")
    return sum(values.values())


def read_node_reclaim_count(proc_root: Path, node_memory_cgroup: Path | None, version: CgroupVersion) -> int | None:
    """The node's reclaim counter (None when it cannot be read)."""
    if node_memory_cgroup is None:
        path = proc_root / "vmstat"
    else:
        path = node_memory_cgroup / ("memory.failcnt" if version is CgroupVersion.V1 else "memory.events")
    try:
        return parse_node_reclaim_count(path.read_text(), str(path))
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class Sensed:
    """What ``sense`` read: pressure per scope and resource, the node's reclaim counter."""

    pressure: Mapping[str, Mapping[str, float]]
    node_reclaim_count: int | None = None


@dataclass
class PSIInterferenceEviction:
    """The decision state: when the last PSI eviction was, and which pods were asked to go."""

    last_eviction: float | None = None
    evicted: dict[str, float] = field(default_factory=dict)

    def step(self, now: float, config: PSIInterferenceConfig,
             pressure: Mapping[str, Mapping[str, float]], pods: Sequence[Candidate]) -> list[PSIDecision]:
        """``pressure`` maps scope (``node`` or an online pod's label) -> resource -> some avg10."""
        present = {p.uid for p in pods}
        self.evicted = {uid: t for uid, t in self.evicted.items()
                        if uid in present and now - t < forget_after(config)}
        if not config.enabled:
            return []
        resources = [r.value for r in config.resources]
        over = [(avg10, scope, resource)
                for scope, values in pressure.items()
                for resource, avg10 in values.items()
                if resource in resources and avg10 > config.avg10_threshold_percent]
        if not over:
            return []
        if self.last_eviction is not None and now - self.last_eviction < config.cooldown_seconds:
            return []
        avg10, scope, resource = max(over, key=lambda o: (o[0], o[1], o[2]))
        usage_key = resource if resource in ("cpu", "memory") else "cpu"
        candidates = [p for p in pods if p.is_be and p.uid not in self.evicted]
        if not candidates:
            return []
        victim = min(candidates, key=lambda p: (-p.usage.get(usage_key, 0.0), p.priority, p.uid))
        self.last_eviction = now
        self.evicted[victim.uid] = now
        amount = victim.usage.get(usage_key, 0.0)
        used = f"{amount:.0f}m CPU" if usage_key == "cpu" else f"{amount / (1 << 20):.0f} MiB memory"
        where = "node" if scope == NODE_SCOPE else f"online pod {scope}"
        return [PSIDecision(
            Action.EVICT,
            f"PSI interference: {resource} some avg10 {avg10:.2f}% above {config.avg10_threshold_percent:g}% "
            f"({where}): evicting BE pod {victim.label}, the largest BE {usage_key} user ({used})",
            resource=resource, pod_uid=victim.uid, scope=scope, avg10_percent=avg10,
            threshold_percent=config.avg10_threshold_percent,
        )]


@dataclass
class PressureReader:
    """Reads ``some avg10`` of the online pods' cgroups (v2, when per-cgroup PSI is supported) or
    of the node (``<proc_root>/pressure``)."""

    layout: CgroupLayout
    proc_root: Path = Path("/proc")
    cgroup_psi: bool = False
    node_psi: bool = True

    def read(self, resources: Iterable[str], pods: Iterable[PodState]) -> dict[str, dict[str, float]]:
        resources = list(resources)
        out: dict[str, dict[str, float]] = {}
        if self.cgroup_psi and self.layout.version is CgroupVersion.V2:
            for pod in pods:
                if pod.tidal_level not in ONLINE:
                    continue
                directory = self.layout.cpu_dir(self.layout.pod_relpath(pod.uid, pod.qos_class))
                values = self._read_all(directory, resources, suffix=".pressure")
                if values:
                    out[f"{pod.namespace}/{pod.name}" if pod.name else pod.uid] = values
            return out
        if self.node_psi:
            values = self._read_all(self.proc_root / "pressure", resources, suffix="")
            if values:
                out[NODE_SCOPE] = values
        return out

    @staticmethod
    def _read_all(directory: Path, resources: list[str], suffix: str) -> dict[str, float]:
        values = {}
        for resource in resources:
            try:
                values[resource] = parse_some_avg10((directory / f"{resource}{suffix}").read_text())
            except (OSError, ValueError):
                continue  # pod gone, resource not offered: nothing to watch there
        return values


class PSIInterference:
    """``features.psiInterference``: effects are :class:`PSIDecision` evictions, decisions the
    node's ``tidal_psi_some_avg10_percent`` gauges."""

    name = "psi-interference"

    def __init__(self, options: Options = DEFAULT_OPTIONS) -> None:
        self.proc_root = options.proc_root
        self.machine = PSIInterferenceEviction()
        self.node_reclaim = NodeReclaim()
        self._reader: tuple[object, PressureReader] | None = None

    def enabled(self, ctx: Context) -> bool:
        return ctx.policy.features.psi_interference.enabled

    def reader(self, ctx: Context) -> PressureReader:
        caps = ctx.capabilities
        key = (ctx.state.layout, caps.get("psi.cgroup", False), caps.get("psi", False))
        if self._reader is None or self._reader[0] != key:
            self._reader = (key, PressureReader(ctx.state.layout, self.proc_root, cgroup_psi=key[1], node_psi=key[2]))
        return self._reader[1]

    def sense(self, ctx: Context) -> Sensed:
        """some avg10 of the watched scopes and, when memory is watched at node scope, the
        node's reclaim counter (only while the feature is on)."""
        config = ctx.policy.features.psi_interference
        pressure = self.reader(ctx).read([r.value for r in config.resources], ctx.state.pods)
        count = None
        if "memory" in pressure.get(NODE_SCOPE, {}):
            count = read_node_reclaim_count(self.proc_root, getattr(ctx.sampler, "node_memory_cgroup", None),
                                            ctx.state.layout.version)
        return Sensed(pressure, count)

    def plan(self, ctx: Context) -> Plan:
        sensed = ctx.observed[self.name]
        if not isinstance(sensed, Sensed):  # pressure alone (tests, tools): no reclaim counter
            sensed = Sensed(sensed)
        pressure = sensed.pressure
        gauges = tuple(Gauge("psi", (resource,), avg10) for resource, avg10 in pressure.get(NODE_SCOPE, {}).items())
        reclaiming = self.node_reclaim.step(ctx.now, sensed.node_reclaim_count)
        chosen = ctx.evicting
        pods = [p for p in ctx.candidates if p.uid not in chosen]
        evict = self.machine.step(ctx.now, ctx.policy.features.psi_interference,
                                  attributable_pressure(pressure, reclaiming), pods)
        return Plan(decisions=gauges, effects=tuple(evict))

    def undo(self, ctx: Context) -> Plan:
        if ctx.enabled:  # switched off in the policy: forget pods asked to go that are gone
            self.machine.step(ctx.now, ctx.policy.features.psi_interference, {}, ctx.candidates)
        return EMPTY
