# SPDX-License-Identifier: Apache-2.0
"""Watermark eviction: a pure state machine (no clock, no API calls).

Per resource (``cpu``, ``memory``), with node usage in percent of capacity:

* usage above *high* starts a dwell timer; usage must stay above high for ``dwell_seconds``
  before the resource becomes *evicting* (short spikes are ignored). Dropping to or below high
  before the dwell ends resets the timer.
* an evicting resource keeps evicting until usage is at or below *low* (hysteresis: no flapping
  between high and low).

While any resource is evicting: the node is tainted (one ``taint`` decision), and one BE pod is
evicted per round, at most once every ``cooldown_seconds`` (so usage can settle). Victims: BE
pods only, lowest priority first, then largest usage of the resource that triggered, then UID
(deterministic). The taint is removed once every resource is at or below its low watermark.

Callers pass ``now`` (monotonic seconds) to :meth:`WatermarkEviction.step`; it returns
:class:`Decision`\\ s to carry out.

``allowed`` (the node mode's eviction rule, :func:`tidal.api.node_mode.eviction_allowed`: the
oversubscription-only mode also needs the node's requests above 100 % of allocatable) gates the
actions, not the tracking: while it is false the dwell timers and the evicting state still follow
usage, but no taint is added and no pod is evicted. A taint already on the node keeps its own rule
(removed once every resource is at or below its low watermark): dropping it as soon as requests
fall to 100 % would let the scheduler put a BE pod back, push requests over again and have it
evicted, round after round, on a node whose usage never came down. Once eviction is allowed again
on a node whose usage stayed above high past the dwell, the taint and the first eviction come at
once (the cooldown still counts from the last eviction).

Which usage the watermarks compare (:func:`watermark_usage_percent`) follows the policy's
``overselling.includeSystemUsage``: true (default) — the node's usage as the kernel sees it,
system daemons and every pod; false — only the pods' usage (every pod, every level), as
Volcano's agent with ``--include-system-usage=false``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tidal.api.policy import EvictionWatermarks

__all__ = ["Action", "Decision", "Candidate", "ResourceState", "WatermarkEviction", "RESOURCES",
           "watermark_usage_percent"]

RESOURCES = ("cpu", "memory")


def watermark_usage_percent(
    node: Mapping[str, float | None],
    pods: Mapping[str, float | None],
    capacity: Mapping[str, float | None],
    include_system_usage: bool,
) -> dict[str, float]:
    """The usage the watermarks compare, per resource, in percent of ``capacity``.

    ``node`` is the node's usage (kernel view), ``pods`` the sum over every pod on the node, both
    in the unit of ``capacity`` (millicores, bytes). With ``include_system_usage`` the node's
    usage counts; without it the pods' usage, at most the node's (node and pods are read
    milliseconds apart: the pods' sum may overshoot, what is outside them is never negative).
    A resource without a node sample or without a positive capacity is absent, so the state
    machine keeps its state for it.
    """
    out: dict[str, float] = {}
    for resource in RESOURCES:
        total, used_by_pods, cap = node.get(resource), pods.get(resource), capacity.get(resource)
        if total is None or cap is None or cap <= 0:
            continue
        if include_system_usage:
            used = total
        else:
            if used_by_pods is None:
                continue
            used = min(total, max(0.0, used_by_pods))
        out[resource] = used / cap * 100
    return out


class Action(enum.StrEnum):
    TAINT = "taint"
    UNTAINT = "untaint"
    EVICT = "evict"


@dataclass(frozen=True)
class Candidate:
    """A pod on the node with its current usage (``usage`` maps resource -> amount)."""

    uid: str
    is_be: bool
    priority: int
    usage: Mapping[str, float]
    namespace: str = ""
    name: str = ""

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}" if self.name else self.uid


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    resource: str | None = None
    pod_uid: str | None = None
    usage_percent: float | None = None
    high_percent: int | None = None
    low_percent: int | None = None


@dataclass
class ResourceState:
    above_since: float | None = None
    evicting: bool = False


@dataclass
class WatermarkEviction:
    config: EvictionWatermarks = field(default_factory=EvictionWatermarks)
    tainted: bool = False
    last_eviction: float | None = None
    resources: dict[str, ResourceState] = field(
        default_factory=lambda: {r: ResourceState() for r in RESOURCES}
    )
    #: pods already asked to go; not chosen again while they are still listed.
    evicted: set[str] = field(default_factory=set)

    def _marks(self, resource: str) -> tuple[int, int]:
        mark = self.config.cpu if resource == "cpu" else self.config.memory
        return mark.high_percent, mark.low_percent

    def step(
        self, now: float, usage_percent: Mapping[str, float], pods: Sequence[Candidate],
        allowed: bool = True,
    ) -> list[Decision]:
        decisions: list[Decision] = []
        self.evicted &= {p.uid for p in pods}
        if not self.config.enabled:
            for state in self.resources.values():
                state.above_since, state.evicting = None, False
            if self.tainted:
                self.tainted = False
                decisions.append(Decision(Action.UNTAINT, "eviction watermarks disabled"))
            return decisions

        for resource in RESOURCES:
            state = self.resources[resource]
            usage = usage_percent.get(resource)
            if usage is None:  # no sample: keep the state as it is
                continue
            high, low = self._marks(resource)
            if usage > high:
                if state.above_since is None:
                    state.above_since = now
                if not state.evicting and now - state.above_since >= self.config.dwell_seconds:
                    state.evicting = True
            else:
                state.above_since = None
                if state.evicting and usage <= low:
                    state.evicting = False

        triggering = [r for r in RESOURCES if self.resources[r].evicting]
        if triggering and not self.tainted and allowed:
            self.tainted = True
            r = triggering[0]
            high, low = self._marks(r)
            u = usage_percent.get(r)
            decisions.append(
                Decision(
                    Action.TAINT,
                    f"{r} usage {u:.1f}% above high watermark {high}% for "
                    f"{self.config.dwell_seconds}s",
                    resource=r, usage_percent=u, high_percent=high, low_percent=low,
                )
            )
        if triggering and allowed and (
            self.last_eviction is None or now - self.last_eviction >= self.config.cooldown_seconds
        ):
            r = triggering[0]
            victim = self._victim(r, pods)
            if victim is not None:
                high, low = self._marks(r)
                u = usage_percent.get(r)
                self.evicted.add(victim.uid)
                self.last_eviction = now
                decisions.append(
                    Decision(
                        Action.EVICT,
                        f"{r} usage {u:.1f}% above low watermark {low}% after crossing high "
                        f"{high}%: evicting BE pod {victim.label} (priority "
                        f"{victim.priority}, {r} usage {victim.usage.get(r, 0):g})",
                        resource=r, pod_uid=victim.uid, usage_percent=u,
                        high_percent=high, low_percent=low,
                    )
                )
        if self.tainted and not triggering and self._all_at_or_below_low(usage_percent):
            self.tainted = False
            decisions.append(Decision(Action.UNTAINT, "every resource at or below its low watermark"))
        return decisions

    def _all_at_or_below_low(self, usage_percent: Mapping[str, float]) -> bool:
        for resource in RESOURCES:
            usage = usage_percent.get(resource)
            if usage is None or usage > self._marks(resource)[1]:
                return False
        return True

    def _victim(self, resource: str, pods: Sequence[Candidate]) -> Candidate | None:
        candidates = [p for p in pods if p.is_be and p.uid not in self.evicted]
        if not candidates:
            return None
        return min(candidates, key=lambda p: (p.priority, -p.usage.get(resource, 0.0), p.uid))
