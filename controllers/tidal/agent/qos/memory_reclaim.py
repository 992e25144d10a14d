# SPDX-License-Identifier: Apache-2.0
"""Memory reclamation of BE pods, driven by node free memory (Rubik's dynamic memory as the model).

Pure level (:class:`ReclaimLevel`): every ``intervalSeconds`` (5) the node's memory usage is
compared with ``triggerPercent`` (50): above it the reclaim level rises by one, at or below it the
level falls by one (relaxing as free memory recovers), between 0 and ``100 / stepPercent``.

Pure plan (:func:`reclaim_plan`): at level ``n`` every BE pod with a memory limit (from its
``kubernetes.io/batch-memory`` request) gets a *soft* ceiling of
``limit × max(stepPercent, 100 − n × stepPercent) %``, page-aligned:

* cgroup v2: ``memory.high`` (above it the kernel reclaims the cgroup's memory and slows its
  allocations, without ever OOM-killing) — and proactive reclaim: ``memory.reclaim`` is written
  ``stepPercent`` of the pod's current usage once per interval while the level is above 0
  (kernel >= 5.19; page cache goes first);
* cgroup v1: ``memory.soft_limit_in_bytes`` (under node memory pressure, reclaim takes from
  cgroups above their soft limit first). v1 has no proactive reclaim file (``memory.force_empty``
  would empty the pod), so there is none on v1.

At level 0 nothing is planned and every value is restored. BE pods without a memory limit are left
alone: there is nothing to scale a ceiling from. Online pods are never touched.

The feature (:class:`MemoryReclaim`, ``memory-reclaim``) plans the ceilings (journalled and
restored by the executor, re-read every round) and the ``memory.reclaim`` requests (written by the
executor, never restored); switched off, or the node leaving colocation, the ceilings go back.
:class:`MemoryReclaimer` drives the feature alone with its own journal (tests and tools).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from tidal.agent.collector.cgroups import CgroupLayout, CgroupVersion
from tidal.agent.executor.cgroupfs import CgroupTrigger
from tidal.api.policy import ColocationPolicy
from tidal.api.policy import MemoryReclaim as MemoryReclaimConfig

from .be_batch_resources import PAGE_SIZE
from .feature import EMPTY, Context, Counter, Plan, Report
from .strategy import CgroupWrite, NodeState, PodState

log = logging.getLogger(__name__)

__all__ = ["JOURNAL_NAME", "MemoryReclaim", "MemoryReclaimer", "ReclaimLevel", "ceiling_bytes", "reclaim_plan", "reclaim_requests"]


@dataclass
class ReclaimLevel:
    level: int = 0
    last_step: float | None = None

    def step(self, now: float, memory_percent: float | None, config: MemoryReclaimConfig) -> int:
        """Move the level at most once per interval; no sample keeps it as it is."""
        if memory_percent is None:
            return self.level
        if self.last_step is not None and now - self.last_step < config.interval_seconds:
            return self.level
        self.last_step = now
        top = 100 // config.step_percent
        if memory_percent > config.trigger_percent:
            self.level = min(top, self.level + 1)
        else:
            self.level = max(0, self.level - 1)
        return self.level


def ceiling_bytes(limit: int, level: int, step_percent: int) -> int:
    percent = max(step_percent, 100 - level * step_percent)
    value = limit * percent // 100
    return max(PAGE_SIZE, value - value % PAGE_SIZE)


def _limited_be(pods: Iterable[PodState]) -> list[PodState]:
    return [p for p in pods if p.is_be and p.containers and p.batch_memory_bytes > 0]


def reclaim_plan(level: int, config: MemoryReclaimConfig, pods: Iterable[PodState], layout: CgroupLayout) -> list[CgroupWrite]:
    if level <= 0:
        return []
    file = "memory.soft_limit_in_bytes" if layout.version is CgroupVersion.V1 else "memory.high"
    writes = []
    for pod in _limited_be(pods):
        path = layout.memory_dir(layout.pod_relpath(pod.uid, pod.qos_class))
        writes.append(CgroupWrite(path, file, str(ceiling_bytes(pod.batch_memory_bytes, level, config.step_percent))))
    return writes


def reclaim_requests(level: int, config: MemoryReclaimConfig, pods: Iterable[PodState], layout: CgroupLayout,
                     usage: Mapping[str, int]) -> list[tuple[Path, int]]:
    """v2 proactive reclaim: (pod memory cgroup, bytes to write to ``memory.reclaim``)."""
    if level <= 0 or layout.version is not CgroupVersion.V2:
        return []
    out = []
    for pod in _limited_be(pods):
        amount = usage.get(pod.uid, 0) * config.step_percent // 100
        amount -= amount % PAGE_SIZE
        if amount > 0:
            out.append((layout.memory_dir(layout.pod_relpath(pod.uid, pod.qos_class)), amount))
    return out


class MemoryReclaim:
    """``features.memoryReclaim`` on the node's BE pods."""

    name = "memory-reclaim"
    #: the ceilings are read back every round (not only every few rounds)
    reread = True

    def __init__(self) -> None:
        self.level = ReclaimLevel()
        self._last_reclaim: float | None = None
        #: this round's memory.reclaim requests: file -> bytes asked
        self._requested: dict[str, int] = {}

    def enabled(self, ctx: Context) -> bool:
        return ctx.policy.features.memory_reclaim.enabled

    def plan(self, ctx: Context) -> Plan:
        config = ctx.policy.features.memory_reclaim
        state = ctx.state
        level = self.level.step(ctx.now, ctx.usage.get("memory"), config)
        writes: list = reclaim_plan(level, config, state.pods, state.layout)
        decisions = ()
        if writes:
            decisions = (Report(
                f"memory reclaim level {level}: BE soft ceilings at "
                f"{max(config.step_percent, 100 - level * config.step_percent)}% of their limits ({len(writes)} pods)",
                logger=__name__, written=tuple(w.key for w in writes)),)
        self._requested = {}
        if self._last_reclaim is None or ctx.now - self._last_reclaim >= config.interval_seconds:
            self._last_reclaim = ctx.now
            requests = [CgroupTrigger(path, "memory.reclaim", str(amount))
                        for path, amount in reclaim_requests(level, config, state.pods, state.layout,
                                                             _pod_memory(ctx, state.pods))]
            self._requested = {r.key: int(r.value) for r in requests}
            writes += requests
        return Plan(tuple(writes), decisions)

    def undo(self, ctx: Context) -> Plan:
        self.level = ReclaimLevel()
        self._requested = {}
        return EMPTY  # the ceilings are journalled: the executor puts them back

    def settle(self, ctx: Context, outcome) -> tuple[Counter, ...]:
        """The requests the kernel carried out in full (``tidal_be_memory_reclaim_requests_total``
        and the bytes they asked for; one it could not meet, EAGAIN, is not counted)."""
        done = [amount for key, amount in self._requested.items() if key in outcome.done]
        self._requested = {}
        if not done:
            return ()
        return (Counter("be_memory_reclaims", (), len(done)), Counter("be_memory_reclaim_bytes", (), sum(done)))


def _pod_memory(ctx: Context, pods: Iterable[PodState]) -> Mapping[str, int]:
    """uid -> memory bytes of the pods, from the round's sample (or ``ctx.observed``)."""
    given = ctx.observed.get(MemoryReclaim.name)
    if given is not None:
        return given
    usage = {}
    if ctx.sampler is not None:
        for pod in pods:
            measured = ctx.sampler.pod_usage(pod.uid)
            if measured is not None and measured.memory_bytes:
                usage[pod.uid] = measured.memory_bytes
    return usage


class MemoryReclaimer:
    """The feature alone, on its own journal: ``round`` is one agent round of memory reclaim."""

    def __init__(self, layout: CgroupLayout, journal_path: Path) -> None:
        from .engine import QoSEngine
        self.layout = layout
        self.feature = MemoryReclaim()
        self.engine = QoSEngine(journal_path, features=[self.feature], legacy_journals=())
        #: the last round's whole outcome (the requests carried out: ``outcome.done``)
        self.outcome = None

    @property
    def journal(self):
        return self.engine.journal

    @property
    def level(self) -> ReclaimLevel:
        return self.feature.level

    def round(self, now: float, enabled: bool, config: MemoryReclaimConfig, memory_percent: float | None,
              pods: Iterable[PodState], usage: Mapping[str, int]) -> list[tuple[str, str]]:
        """Returns (file, problem) for writes that failed."""
        policy = ColocationPolicy()
        policy = replace(policy, features=replace(policy.features, memory_reclaim=config))
        state = NodeState(tuple(pods), 0, 0, policy, {}, self.layout)
        out = self.engine.run(Context(state, enabled, now, usage={} if memory_percent is None else
                                      {"memory": memory_percent}, observed={MemoryReclaim.name: usage}))
        self.outcome = out
        return [*((str(w.target), p) for w, p in out.result.errors), *out.result.restore_problems,
                *((file, p) for _, file, p in out.problems)]


JOURNAL_NAME = "memory-reclaim-journal.json"
