# SPDX-License-Identifier: Apache-2.0
"""One reconcile round of the cgroup strategies, and switching them off (restoring).

The engine runs only on nodes labelled ``colocation.tidal.io/colocation=true``. Which strategies
run, and with which parameters, comes from the ColocationPolicy's ``beIsolation`` section
(:func:`strategies_for`). Every round is level-triggered:

* the plans of the active strategies are composed and applied (only differing values written,
  originals journalled first);
* every journalled file that no active plan mentions any more (strategy switched off, pod no
  longer BE, pod gone) gets its original value back;
* when the label goes, :meth:`QoSEngine.disable` restores every value the agent changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tidal.api.policy import ColocationPolicy
from tidal.api.qos import COLOCATION_NODE_LABEL, NODE_LABEL_ENABLED_VALUE

from .be_batch_resources import BEBatchResources
from .be_cpu_priority import BECPUPriority
from .be_cpu_suppression import BECPUSuppression
from .cpu_burst import CPUBurst
from .strategy import (
    ApplyResult,
    NodeState,
    RestoreJournal,
    Strategy,
    allowed_roots,
    apply,
    compose,
    restore,
)

__all__ = ["QoSEngine", "colocation_enabled", "strategies_for"]


def colocation_enabled(node_labels: Mapping[str, str] | None) -> bool:
    return (node_labels or {}).get(COLOCATION_NODE_LABEL) == NODE_LABEL_ENABLED_VALUE


def strategies_for(policy: ColocationPolicy) -> list[Strategy]:
    """The strategies the policy switches on, configured from it (pure)."""
    iso = policy.be_isolation
    strategies: list[Strategy] = []
    # Order matters only for readability: compose() resolves overlaps and v1 quota nesting.
    if iso.cpu_suppression.enabled:
        strategies.append(
            BECPUSuppression(
                threshold=iso.cpu_suppression.threshold_percent / 100,
                floor_millicores=iso.cpu_suppression.floor_millicores,
            )
        )
    if iso.cpu_priority.enabled:
        strategies.append(BECPUPriority())
    if iso.batch_resources.enabled:
        strategies.append(BEBatchResources())
    features = policy.features
    if features.cpu_burst.enabled:
        strategies.append(CPUBurst(features.cpu_burst.load_high_percent,
                                   features.cpu_burst.load_alert_percent))
    return strategies


@dataclass
class QoSEngine:
    journal_path: Path
    #: every this many rounds every planned file is read back from the kernel (drift made by
    #: others, e.g. a kubelet resetting a value, is repaired within this many rounds); in
    #: between, a file whose planned value was already seen or written is not read again.
    verify_every: int = 5

    def __post_init__(self) -> None:
        self.journal = RestoreJournal(self.journal_path)
        self.known: dict[str, str] = {}
        self._rounds = 0
        self._static: tuple[object, dict[str, list]] | None = None

    def _plans(self, state: NodeState) -> dict[str, list]:
        """Plans of the active strategies. Those that read no usage are recomputed only when
        their inputs (pods, policy, capabilities, layout) change."""
        key = (state.pods, state.policy, tuple(sorted(state.capabilities.items())), state.layout,
               state.cpu_controller_root)
        strategies = strategies_for(state.policy)
        if self._static is None or self._static[0] != key:
            self._static = (key, {s.name: s.plan(state) for s in strategies if not s.uses_usage})
        cached = self._static[1]
        return {s.name: s.plan(state) if s.uses_usage else cached[s.name] for s in strategies}

    def reconcile(self, state: NodeState, enabled: bool) -> tuple[ApplyResult, dict[str, int]]:
        """Apply the policy's strategies, or restore everything when colocation is off here.

        Returns the apply result and, per strategy name, how many files it changed.
        """
        if not enabled:
            return ApplyResult(restore_problems=self.disable()), {}
        self._rounds += 1
        if self._rounds % self.verify_every == 0:
            self.known.clear()
        plans = self._plans(state)
        plan = compose(plans.values(), state.layout.version)
        result = apply(plan, self.journal, allowed_roots(state.layout, state.cpu_controller_root),
                       self.known)
        wanted = {w.key for w in plan}
        stale = [k for k in self.journal.originals if k not in wanted]
        result.restore_problems = restore(self.journal, stale)
        for key in stale:
            self.known.pop(key, None)
        changed: dict[str, int] = {}
        if result.written:
            owner = {w.key: name for name, writes in plans.items() for w in writes}
            for write in result.written:
                name = owner.get(write.key, "compose")
                changed[name] = changed.get(name, 0) + 1
        return result, changed

    def disable(self) -> list[tuple[str, str]]:
        self.known.clear()
        self._static = None
        return restore(self.journal)
