"""One reconcile round of the cgroup strategies, and switching them off (restoring).

The engine runs only on nodes labelled ``colocation.tidal.io/colocation=true``. The three core
strategies (BE CPU priority, BE batch resources, BE CPU suppression) have no switch of their own
in the ColocationPolicy today, so they are all on wherever the engine runs; when the label goes,
:meth:`QoSEngine.disable` restores every value the agent changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tidal.qos import COLOCATION_NODE_LABEL, NODE_LABEL_ENABLED_VALUE

from .be_batch_resources import BEBatchResources
from .be_cpu_priority import BECPUPriority
from .be_cpu_suppression import BECPUSuppression
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

__all__ = ["QoSEngine", "colocation_enabled", "default_strategies"]


def colocation_enabled(node_labels: Mapping[str, str] | None) -> bool:
    return (node_labels or {}).get(COLOCATION_NODE_LABEL) == NODE_LABEL_ENABLED_VALUE


def default_strategies() -> list[Strategy]:
    # Order matters only for readability: compose() resolves overlaps and v1 quota nesting.
    return [BECPUSuppression(), BECPUPriority(), BEBatchResources()]


@dataclass
class QoSEngine:
    journal_path: Path
    strategies: Sequence[Strategy] = field(default_factory=default_strategies)

    def __post_init__(self) -> None:
        self.journal = RestoreJournal(self.journal_path)

    def reconcile(self, state: NodeState, node_labels: Mapping[str, str] | None) -> ApplyResult:
        """Apply every strategy's plan, or restore everything when colocation is off here."""
        if not colocation_enabled(node_labels):
            return ApplyResult(restore_problems=self.disable())
        plan = compose([s.plan(state) for s in self.strategies], state.layout.version)
        return apply(plan, self.journal, allowed_roots(state.layout, state.cpu_controller_root))

    def disable(self) -> list[tuple[str, str]]:
        return restore(self.journal)
