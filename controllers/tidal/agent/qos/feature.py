# SPDX-License-Identifier: Apache-2.0
"""The one shape of a node QoS feature, the context it plans from, and what it returns.

Every node feature (the BE cgroup strategies, CPU burst, memory reclaim, NUMA affinity, cache
limits, egress bandwidth, PSI interference) is a :class:`Feature`:

* ``name``: stable; names the metric label ``tidal_agent_cgroup_writes_total{strategy}`` and logs;
* ``enabled(ctx) -> bool``: does the policy (and this node) switch it on. Only asked while the
  node is labelled for colocation: off the label, every feature is off;
* ``plan(ctx) -> Plan``: while on, what the node should look like. **No I/O**: a plan reads only
  the :class:`Context` (and the feature's own decision state, e.g. a reclaim level);
* ``undo(ctx) -> Plan``: asked every round while off, and by ``tidal-agent restore`` (with
  ``ctx.state`` None: no pods, no layout). No I/O either. cgroup files need nothing here: the
  executor's journal puts back every file no plan wants any more. Features whose state is not in
  cgroup files (resctrl groups, tc devices) return removals — only when there may be something
  to remove, so an idle feature costs no I/O.

Optional members, for features that need more than that:

* ``sense(ctx) -> object``: the reads the plan needs (files, ``ip`` output); called right before
  ``plan`` while the feature is on, its result is ``ctx.observed[name]``. Reads, never writes;
* ``settle(ctx, outcome)``: what the executor did with the plan, after every round (e.g. log a
  placement once it is applied, count requests that went through); it may return ``Gauge`` and
  ``Counter`` reports of what was done, exported with the plan's;
* ``uses_usage`` (default True): False when the plan depends only on pods, policy,
  capabilities and layout, so the engine recomputes it only when those change;
* ``reread`` (default False): True to have the executor read the feature's cgroup files back
  every round instead of every few rounds;
* ``roots(layout) -> paths``: cgroup trees the feature writes below besides the cpu and memory
  ``kubepods`` trees (NUMA: the cpuset one); every cgroup write is checked against them.

The :class:`Plan` a feature returns holds intents, nothing is done by the feature itself:

* ``writes``: for the executor (:mod:`tidal.agent.executor`), the only writer: cgroup files
  (journalled), cgroup requests (``memory.reclaim``), resctrl groups and members, tc shaping;
* ``decisions``: what to report: :class:`Report`\\ s (log lines, optionally only when the
  executor applied or wrote given files), :class:`Gauge` values and :class:`Counter` increases
  for metrics, :class:`StatusPart`\\ s of the NodeProfile's status;
* ``effects``: actions beyond files, carried out by the node's API worker: evictions
  (:class:`~.eviction.Decision`) and Node Events (:class:`NodeEvent`).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from tidal.api.policy import ColocationPolicy

from .strategy import NodeState, Strategy

__all__ = ["Context", "Counter", "EMPTY", "Feature", "Gauge", "NodeEvent", "Options", "Plan", "Report", "StatusPart",
           "StrategyFeature", "run_alone"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Options:
    """Where a feature finds the node (injected; tests point them at recorded trees)."""

    sys_root: Path = Path("/sys")
    proc_root: Path = Path("/proc")
    cpu_manager_state: Path = Path("/var/lib/kubelet/cpu_manager_state")
    resctrl_root: Path = Path("/sys/fs/resctrl")


DEFAULT_OPTIONS = Options()
_DEFAULT_POLICY = ColocationPolicy()


@dataclass(frozen=True)
class Report:
    """A log line. With ``applied`` (or ``written``) keys, it is emitted only when the executor
    found every one of those files at the planned value (or changed at least one of them)."""

    message: str
    level: int = logging.INFO
    logger: str = __name__
    applied: tuple[str, ...] = ()
    written: tuple[str, ...] = ()


@dataclass(frozen=True)
class Gauge:
    """A metric value: ``metrics.<metric>.labels(node, *labels).set(value)``."""

    metric: str
    labels: tuple[str, ...]
    value: float


@dataclass(frozen=True)
class Counter:
    """A metric increase: ``metrics.<metric>.labels(node, *labels).inc(amount)``."""

    metric: str
    labels: tuple[str, ...]
    amount: float = 1.0


@dataclass(frozen=True)
class StatusPart:
    """A part of the NodeProfile's status the feature owns: ``status[key] = value``."""

    key: str
    value: Any


@dataclass(frozen=True)
class NodeEvent:
    """An effect: an Event on this Node (sent by the node's API worker)."""

    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class Plan:
    writes: tuple = ()
    decisions: tuple = ()
    effects: tuple = ()


EMPTY = Plan()


@dataclass(frozen=True)
class Context:
    """What a feature plans from, built by the node's round (or by ``tidal-agent restore``)."""

    #: None only for ``tidal-agent restore`` (no pods, no layout: only ``undo`` is asked)
    state: NodeState
    #: the node is labelled for colocation
    enabled: bool = True
    #: monotonic seconds (the node's clock)
    now: float = 0.0
    options: Options = DEFAULT_OPTIONS
    #: node CPU and memory usage in percent of capacity (a resource without a sample is absent)
    usage: Mapping[str, float] = field(default_factory=dict)
    #: the round's sample (``pod_usage(uid)``; already read: looking into it is no I/O)
    sampler: Any = None
    #: this Node's annotations
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: what features' ``sense`` read this round, by feature name
    observed: Mapping[str, Any] = field(default_factory=dict)
    #: eviction candidates of this round (pods on the node with their usage, minus those whose
    #: eviction a PodDisruptionBudget refused lately)
    candidates: Sequence[Any] = ()
    #: pods the watermark eviction already chose (not to be chosen twice)
    evicting: Collection[str] = frozenset()
    #: files whose originals the executor's journal holds (set for ``sense``: a restarted agent
    #: recognises its own earlier changes)
    journaled: Collection[str] = frozenset()

    @property
    def policy(self) -> ColocationPolicy:
        return self.state.policy if self.state is not None else _DEFAULT_POLICY

    @property
    def capabilities(self) -> Mapping[str, bool]:
        return self.state.capabilities

    def supports(self, capability: str) -> bool:
        return self.state.supports(capability)


class Feature(Protocol):
    name: str

    def enabled(self, ctx: Context) -> bool: ...

    def plan(self, ctx: Context) -> Plan: ...

    def undo(self, ctx: Context) -> Plan: ...


class StrategyFeature:
    """A pure cgroup :class:`~.strategy.Strategy` as a feature: switched by the policy, built
    from it each round, undone by the journal (nothing to return from ``undo``)."""

    def __init__(self, name: str, switch: Callable[[ColocationPolicy], bool],
                 build: Callable[[ColocationPolicy], Strategy], uses_usage: bool) -> None:
        self.name = name
        self._switch = switch
        self._build = build
        self.uses_usage = uses_usage

    def strategy(self, policy: ColocationPolicy) -> Strategy:
        return self._build(policy)

    def enabled(self, ctx: Context) -> bool:
        return self._switch(ctx.policy)

    def plan(self, ctx: Context) -> Plan:
        return Plan(writes=tuple(self._build(ctx.policy).plan(ctx.state)))

    def undo(self, ctx: Context) -> Plan:
        return EMPTY


def run_alone(feature: Feature, ctx: Context) -> Plan:
    """One feature's plan for a round, as the engine would ask it (tests and tools driving one
    feature without the node's engine)."""
    if ctx.enabled and feature.enabled(ctx):
        sense = getattr(feature, "sense", None)
        if sense is not None:
            ctx = replace(ctx, observed={**ctx.observed, feature.name: sense(ctx)})
        return feature.plan(ctx)
    return feature.undo(ctx)
