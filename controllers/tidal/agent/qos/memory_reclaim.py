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

I/O: :class:`MemoryReclaimer` applies the plan with the engine's :func:`apply` into its own
:class:`RestoreJournal` (``memory-reclaim-journal.json`` next to the engine's), writes the
``memory.reclaim`` requests, and restores everything when the feature is switched off or the node
leaves colocation.
"""
from __future__ import annotations

import errno
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tidal.agent.collector.cgroups import CgroupLayout, CgroupVersion
from tidal.api.policy import MemoryReclaim

from .be_batch_resources import PAGE_SIZE
from .strategy import CgroupWrite, PodState, RestoreJournal, allowed_roots, apply, restore

log = logging.getLogger(__name__)

__all__ = ["MemoryReclaimer", "ReclaimLevel", "ceiling_bytes", "reclaim_plan", "reclaim_requests"]


@dataclass
class ReclaimLevel:
    level: int = 0
    last_step: float | None = None

    def step(self, now: float, memory_percent: float | None, config: MemoryReclaim) -> int:
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
    return [p for p in pods if p.is_be and p.containers and all(c.batch_memory_bytes > 0 for c in p.containers)]


def reclaim_plan(level: int, config: MemoryReclaim, pods: Iterable[PodState], layout: CgroupLayout) -> list[CgroupWrite]:
    if level <= 0:
        return []
    file = "memory.soft_limit_in_bytes" if layout.version is CgroupVersion.V1 else "memory.high"
    writes = []
    for pod in _limited_be(pods):
        path = layout.memory_dir(layout.pod_relpath(pod.uid, pod.qos_class))
        writes.append(CgroupWrite(path, file, str(ceiling_bytes(pod.batch_memory_bytes, level, config.step_percent))))
    return writes


def reclaim_requests(level: int, config: MemoryReclaim, pods: Iterable[PodState], layout: CgroupLayout,
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


@dataclass
class MemoryReclaimer:
    """The adapter: ``round`` once per agent round."""

    layout: CgroupLayout
    journal_path: Path
    level: ReclaimLevel = field(default_factory=ReclaimLevel)

    def __post_init__(self) -> None:
        self.journal = RestoreJournal(self.journal_path)
        self._last_reclaim: float | None = None
        self.reclaimed_requests = 0

    def round(self, now: float, enabled: bool, config: MemoryReclaim, memory_percent: float | None,
              pods: Iterable[PodState], usage: Mapping[str, int]) -> list[tuple[str, str]]:
        """Returns (file, problem) for writes that failed."""
        if not (enabled and config.enabled):
            self.level = ReclaimLevel()
            return restore(self.journal)
        pods = list(pods)
        level = self.level.step(now, memory_percent, config)
        plan = reclaim_plan(level, config, pods, self.layout)
        result = apply(plan, self.journal, allowed_roots(self.layout))
        wanted = {w.key for w in plan}
        problems = [(str(w.target), p) for w, p in result.errors]
        problems += restore(self.journal, [k for k in self.journal.originals if k not in wanted])
        if result.written:
            log.info("memory reclaim level %d: BE soft ceilings at %d%% of their limits (%d pods)", level,
                     max(config.step_percent, 100 - level * config.step_percent), len(plan))
        if self._last_reclaim is None or now - self._last_reclaim >= config.interval_seconds:
            self._last_reclaim = now
            for path, amount in reclaim_requests(level, config, pods, self.layout, usage):
                problem = write_reclaim(path, amount)
                if problem:
                    problems.append((str(path / "memory.reclaim"), problem))
                else:
                    self.reclaimed_requests += 1
        return problems


def write_reclaim(path: Path, amount: int) -> str | None:
    """Ask the kernel to reclaim ``amount`` bytes from the cgroup. EAGAIN (could not reclaim that
    much) is normal under pressure; a missing file (old kernel, pod gone) is skipped."""
    try:
        (path / "memory.reclaim").write_text(str(amount))
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == errno.EAGAIN:
            return None
        return err.strerror or str(err)
    return None


JOURNAL_NAME = "memory-reclaim-journal.json"


def reclaim_round(node_qos, sampler, usage_percent: Mapping[str, float], enabled: bool) -> None:
    """One round for :class:`~.node_qos.NodeQoS` (its reclaimer, policy, pods and clock)."""
    usage = {}
    for uid in node_qos._states:
        measured = sampler.pod_usage(uid)
        if measured is not None and measured.memory_bytes:
            usage[uid] = measured.memory_bytes
    for file, problem in node_qos.reclaimer.round(node_qos.clock(), enabled, node_qos.policy.features.memory_reclaim,
                                                  usage_percent.get("memory"), node_qos._states.values(), usage):
        log.warning("memory reclaim: %s: %s", file, problem)
