# SPDX-License-Identifier: Apache-2.0
"""One reconcile round of the node's features, and switching them off (restoring).

The engine runs only on nodes whose mode is active (:func:`node_active`: labelled
``colocation.tidal.io/colocation=true`` or ``colocation.tidal.io/oversubscription=true``, or their
``volcano.sh/`` aliases — :mod:`tidal.api.node_mode`). Which features
run, and with which parameters, comes from the ColocationPolicy (each feature's ``enabled``);
the features are the registry's (:mod:`.registry`), in its order. Every round is
level-triggered:

* each feature switched on plans (``plan(ctx)``, pure), each switched off says what must go
  (``undo(ctx)``);
* the executor (:mod:`tidal.agent.executor`, the only writer) applies the composed cgroup
  writes (only differing values written, originals journalled first in the one journal), puts
  back every journalled file that no plan mentions any more (feature switched off, pod no
  longer BE, pod gone), and carries out the other intents (requests, resctrl, tc);
* reports are logged when their condition holds, gauges and effects (evictions) are handed to
  the caller (:class:`~.node_qos.NodeQoS`);
* when the mode becomes off (the last label goes), every feature's undo runs and every
  journalled value is restored.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from tidal.agent.executor import Executor, Outcome
from tidal.agent.executor.cgroupfs import CgroupWrite
from tidal.api.node_mode import node_mode
from tidal.api.policy import ColocationPolicy

from . import registry
from .feature import DEFAULT_OPTIONS, Context, Counter, Feature, Gauge, Options, Plan, Report, StatusPart
from .strategy import ApplyResult, NodeState, Strategy, allowed_roots, compose

__all__ = ["QoSEngine", "RoundOutcome", "node_active", "strategies_for"]

log = logging.getLogger(__name__)


def node_active(node_labels: Mapping[str, str] | None,
                node_annotations: Mapping[str, str] | None = None) -> bool:
    """Whether the agent acts on the node: its mode (either label, aliases included) is not off."""
    return node_mode(node_labels, node_annotations).active



def strategies_for(policy: ColocationPolicy) -> list[Strategy]:
    """The cgroup strategies the policy switches on, configured from it (pure)."""
    ctx = Context(NodeState((), 0, 0, policy, {}, None))  # type: ignore[arg-type]
    return [f.strategy(policy) for f in registry.features() if hasattr(f, "strategy") and f.enabled(ctx)]


@dataclass
class RoundOutcome:
    result: ApplyResult = field(default_factory=ApplyResult)
    #: per feature name, how many cgroup files it changed
    changed: dict[str, int] = field(default_factory=dict)
    gauges: list[Gauge] = field(default_factory=list)
    counters: list[Counter] = field(default_factory=list)
    #: NodeProfile status parts the features own, by key
    status: dict = field(default_factory=dict)
    #: evictions and other API work, for the node's worker
    effects: list = field(default_factory=list)
    #: (feature name, file or object, problem) of intents other than cgroup files
    problems: list[tuple[str, str, str]] = field(default_factory=list)
    #: keys of the intents other than cgroup files carried out this round
    done: set[str] = field(default_factory=set)


class QoSEngine:
    def __init__(self, journal_path: Path, verify_every: int = 5, *, options: Options = DEFAULT_OPTIONS,
                 features: list[Feature] | None = None, legacy_journals: tuple[Path, ...] | None = None,
                 cgroup_root: Path | str | None = None) -> None:
        self.journal_path = Path(journal_path)
        self.options = options
        self.features = registry.features(options) if features is None else features
        if legacy_journals is None:
            legacy_journals = tuple(self.journal_path.with_name(n) for n in registry.LEGACY_JOURNALS)
        self.executor = Executor(self.journal_path, legacy=legacy_journals, verify_every=verify_every,
                                 cgroup_root=cgroup_root)
        self._static: tuple[object, dict[str, Plan]] | None = None
        self._roots: tuple[object, tuple[Path, ...]] | None = None

    @property
    def journal(self):
        return self.executor.journal

    @property
    def known(self) -> dict[str, str]:
        return self.executor.known

    def roots(self, state: NodeState) -> tuple[Path, ...]:
        """Where cgroup writes may go: the kubepods trees of the node's hierarchies."""
        key = (state.layout, state.cpu_controller_root)
        if self._roots is None or self._roots[0] != key:
            roots = set(allowed_roots(state.layout, state.cpu_controller_root))
            for feature in self.features:
                roots.update(getattr(feature, "roots", lambda layout: ())(state.layout))
            self._roots = (key, tuple(sorted(roots)))
        return self._roots[1]

    def _plans(self, ctx: Context) -> tuple[Context, dict[str, Plan]]:
        """Plans of the features switched on, undo plans of the others. Features that read no
        usage are recomputed only when their inputs (pods, policy, capabilities, layout) change."""
        state = ctx.state
        key = (state.pods, state.policy, tuple(sorted(state.capabilities.items())), state.layout,
               state.cpu_controller_root)
        if self._static is None or self._static[0] != key:
            self._static = (key, {})
        cached = self._static[1]
        on = [f for f in self.features if f.enabled(ctx)]
        sensing = [f for f in on if hasattr(f, "sense")]
        if sensing:
            ctx = replace(ctx, journaled=self.executor.journal.originals.keys())
            ctx = replace(ctx, observed={**ctx.observed, **{f.name: f.sense(ctx) for f in sensing}})
        plans: dict[str, Plan] = {}
        for feature in self.features:
            if feature not in on:
                plans[feature.name] = feature.undo(ctx)
            elif getattr(feature, "uses_usage", True):
                plans[feature.name] = feature.plan(ctx)
            else:
                plan = cached.get(feature.name)
                if plan is None:
                    plan = cached[feature.name] = feature.plan(ctx)
                plans[feature.name] = plan
        return ctx, plans

    def run(self, ctx: Context) -> RoundOutcome:
        """One round (``ctx.enabled``: the node's mode is active, :func:`node_active`)."""
        if not ctx.enabled:
            return self._undo(ctx, self.roots(ctx.state) if ctx.state is not None else ())
        ctx, plans = self._plans(ctx)
        cgroup_plans = []
        others: list = []
        reread: list[str] = []
        for name, plan in plans.items():
            writes = [w for w in plan.writes if type(w) is CgroupWrite]
            if len(writes) != len(plan.writes):
                others += [w for w in plan.writes if type(w) is not CgroupWrite]
            cgroup_plans.append(writes)
        for feature in self.features:
            if getattr(feature, "reread", False):
                reread += [w.key for w in plans[feature.name].writes if type(w) is CgroupWrite]
        composed = compose(cgroup_plans, ctx.state.layout.version)
        outcome = self.executor.execute(composed, others, self.roots(ctx.state), reread)
        out = RoundOutcome(outcome.result)
        if outcome.result.written:
            owner = {w.key: name for (name, _), writes in zip(plans.items(), cgroup_plans) for w in writes}
            for write in outcome.result.written:
                name = owner.get(write.key, "compose")
                out.changed[name] = out.changed.get(name, 0) + 1
        self._finish(ctx, plans, outcome, out)
        return out

    def _undo(self, ctx: Context, roots) -> RoundOutcome:
        self._static = None
        plans = {f.name: f.undo(ctx) for f in self.features}
        others = [w for plan in plans.values() for w in plan.writes]
        outcome = self.executor.undo(others, roots)
        out = RoundOutcome(outcome.result)
        self._finish(ctx, plans, outcome, out)
        return out

    def _finish(self, ctx: Context, plans: Mapping[str, Plan], outcome: Outcome, out: RoundOutcome) -> None:
        out.done = set(outcome.done)
        if outcome.problems:  # attributed by the executor that met them (one feature per kind)
            owner = {type(w).__module__: name for name, plan in plans.items() for w in plan.writes}
            out.problems = [(owner.get(source, source), file, problem) for source, file, problem in outcome.problems]
        for feature in self.features:
            plan = plans[feature.name]
            settle = getattr(feature, "settle", None)
            settled = (settle(ctx, outcome) or ()) if settle is not None else ()
            for decision in (*plan.decisions, *settled):
                if isinstance(decision, Report):
                    if (not decision.applied or outcome.applied(decision.applied)) and \
                            (not decision.written or outcome.written(decision.written)):
                        logging.getLogger(decision.logger).log(decision.level, "%s", decision.message)
                elif isinstance(decision, Gauge):
                    out.gauges.append(decision)
                elif isinstance(decision, Counter):
                    out.counters.append(decision)
                elif isinstance(decision, StatusPart):
                    out.status[decision.key] = decision.value
            out.effects += plan.effects

    # -- the former API, kept for its callers ------------------------------------------------

    def reconcile(self, state: NodeState, enabled: bool) -> tuple[ApplyResult, dict[str, int]]:
        """Apply the policy's features, or restore everything when the node's mode is off.

        Returns the apply result and, per feature name, how many files it changed.
        """
        out = self.run(Context(state, enabled))
        return out.result, out.changed

    def disable(self) -> list[tuple[str, str]]:
        """Put back every journalled cgroup value (the features' other state is left alone)."""
        self._static = None
        return self.executor.restore()

    def restore(self) -> list[tuple[str, str]]:
        """Everything off for good (``tidal-agent restore``, which knows no pods or layout):
        every feature's undo, in registry order, and every journalled value put back."""
        out = self._undo(Context(None, False), ())  # type: ignore[arg-type]
        return [*out.result.restore_problems, *((key, problem) for _, key, problem in out.problems)]
