# SPDX-License-Identifier: Apache-2.0
"""The BE idle group's upkeep on the node (I/O; :mod:`tidal.agent.be_placement` finds its pods).

* While ``beIsolation.cpuPriority.idleGroup`` is on, the group exists in the cpu and memory
  hierarchies, so that the BE CPU priority strategy makes it idle before the first BE container
  lands in it (runc would create it, not idle, at the container's creation).
* Its memory is bounded as the kubelet bounds ``kubepods`` (the node's allocatable): BE
  containers outside ``kubepods`` escape the kubelet's bound, each keeps its batch-memory limit.
* A pod directory ``tidal-be/pod<uid>`` whose pod is no longer on the node is removed in every
  hierarchy: runc removes its containers' cgroups and the kubelet the pod's own cgroup below
  ``kubepods``, but nothing removes this one (checked on the lab's real kubelet: left behind,
  empty, in all ten v1 hierarchies and the unified one). A directory that still holds a cgroup
  (a container not yet removed) is kept and tried again on the next tick. With the systemd
  driver the pod's directory is a slice systemd created for runc, and systemd's to remove: left
  alone.
* While the switch is off, or the node's mode is (an agent kept on to restore the node), the
  group itself is removed from every hierarchy once it holds no pod
  (cgroupfs): switching the switch off, or the node's mode, leaves nothing behind (``uninstall.yml``
  promises no residue). A pod created there while the switch was on stays there until it ends; the
  group goes with the last one. Swept once per switch-off (and at the agent's start), not at every tick.
  Until then, where nothing makes the group idle (BE CPU priority off, or the node restored), it is
  held at the weight the kubelet gives BestEffort pods (v1 ``cpu.shares`` 2, v2 ``cpu.weight`` 1):
  beside ``kubepods`` at the default weight its pods would take more CPU than any BestEffort pod
  gets from Kubernetes.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterable
from pathlib import Path

from tidal.agent.collector.cgroups import DEFAULT_CGROUP_ROOT, CgroupDriver, CgroupLayout, CgroupVersion, PodQOSClass
from tidal.agent.qos.be_cpu_priority import minimum_weight
from tidal.agent.qos.strategy import cpu_controller_root

__all__ = ["BEIdleGroup"]

log = logging.getLogger(__name__)


class BEIdleGroup:
    def __init__(self, layout: CgroupLayout, cgroup_root: Path | str = DEFAULT_CGROUP_ROOT,
                 cpu_root_override: Path | None = None) -> None:
        self.layout = layout
        self.cgroup_root = Path(cgroup_root)
        self.cpu_root = cpu_controller_root(layout, cpu_root_override)
        self.relpath = layout.qos_relpath(PodQOSClass.BE_IDLE_GROUP)
        #: why the group could not be created (None: it was, or the switch is off)
        self.problem: str | None = None
        #: whether the group is known gone from every hierarchy (the switch is off): not swept again
        self.swept = False

    def ensure(self) -> list[Path]:
        """The group in the cpu and memory hierarchies; returns the directories created. A
        directory the kernel refuses to create (EACCES: the root of a v1 hierarchy is mode 0555,
        so uid 0 needs CAP_DAC_OVERRIDE) is left to runc, which creates it with the first BE
        container, not idle for up to a tick; the refusal is kept in :attr:`problem` (the
        NodeProfile's policy problems) and logged once."""
        self.swept = False
        created, problems = [], []
        for d in sorted({self.cpu_root / self.relpath, self.layout.memory_dir(self.relpath)}):
            if d.is_dir():
                continue
            try:
                d.mkdir(exist_ok=True)
            except OSError as error:
                problems.append(f"{d}: {error.strerror}")
                continue
            created.append(d)
            log.info("BE idle group: created %s", d)
        problem = None
        if problems:
            problem = (f"beIsolation.cpuPriority.idleGroup: cannot create the BE idle group ({'; '.join(problems)}); "
                       "the agent needs CAP_DAC_OVERRIDE to create it at the root of a cgroup hierarchy, else the "
                       "first BE container's runtime creates it, not idle until the agent's next round")
            if problem != self.problem:
                log.warning("%s", problem)
        self.problem = problem
        return created

    def problems(self) -> list[str]:
        """:attr:`problem` as the NodeProfile's policy problems take it."""
        return [self.problem] if self.problem else []

    def upkeep(self, wanted: bool, holding: bool) -> list[Path]:
        """Every tick: while `wanted` (the switch in force on a node whose mode is active) the
        group made and bounded (returns the directories created); otherwise removed once it holds
        no pod of the node (`holding`: returns the directories removed)."""
        if not wanted:
            return self.switched_off(holding)
        created = self.ensure()  # idle (the priority strategy) before a BE container lands there
        self.bound_memory()
        return created

    def switched_off(self, holding: bool) -> list[Path]:
        """The switch is off: no problem to report any more, and, once the group is ``holding``
        no pod of the node, the group removed (:meth:`remove_when_empty`) until it is gone
        everywhere; returns the directories removed."""
        self.problem = None
        if holding:
            self.hold_besteffort_weight()
            return []
        return [] if self.swept else self.remove_when_empty()

    def hold_besteffort_weight(self) -> str | None:
        """The group, still holding BE pods with the switch off, at the weight the kubelet gives
        BestEffort pods (v1 ``cpu.shares`` 2, v2 ``cpu.weight`` 1) unless it is idle (BE CPU
        priority still on: lower yet, and the kernel refuses a weight on an idle group). Without
        it, once the priority strategy's values are put back (``cpu.idle`` 0), the group competes
        with ``kubepods`` at the default weight (1024, 100). Returns the value written; None when
        nothing was (already so, idle, no group, or refused: logged)."""
        d = self.cpu_root / self.relpath
        name, value = minimum_weight(self.layout.version)
        try:
            idle = d / "cpu.idle"
            if idle.exists() and idle.read_text().strip() != "0":
                return None
            if (d / name).read_text().strip() == value:
                return None
            (d / name).write_text(value)
        except FileNotFoundError:
            return None
        except OSError as error:
            log.warning("BE idle group: cannot hold its CPU weight at BestEffort's: %s", error)
            return None
        log.info("BE idle group: BE CPU priority off with BE pods still in it: %s %s, as the kubelet's BestEffort",
                 name, value)
        return value

    def remove_when_empty(self) -> list[Path]:
        """Remove the group from every hierarchy where it holds no pod (cgroupfs; with systemd
        the slice is systemd's); returns the directories removed. A group still holding a pod is
        kept (the kernel refuses: EBUSY, ENOTEMPTY) and tried again on the next call; once none is
        left anywhere :attr:`swept` is set."""
        if self.layout.driver is not CgroupDriver.CGROUPFS:
            self.swept = True
            return []
        removed, left = self._remove_everywhere(self.relpath)
        if removed:
            log.info("BE idle group: switched off and empty, removed %s", ", ".join(map(str, removed)))
        self.swept = not left
        return removed

    def bound_memory(self) -> str | None:
        """The group's memory limit set to ``kubepods``' (v1 ``memory.limit_in_bytes``, v2
        ``memory.max``) when they differ; returns the value written, None when nothing was (or
        the kernel refused it: a limit below what the group uses, logged)."""
        name = "memory.limit_in_bytes" if self.layout.version is CgroupVersion.V1 else "memory.max"
        if not self.layout.memory_dir(self.relpath).is_dir():
            return None  # not created yet (see ensure): bounded once it is
        try:
            bound = (self.layout.memory_dir(self.layout.kubepods_relpath()) / name).read_text().strip()
            target = self.layout.memory_dir(self.relpath) / name
            if target.read_text().strip() == bound:
                return None
            target.write_text(bound)
        except OSError as error:
            log.warning("BE idle group: cannot bound its memory as kubepods': %s", error)
            return None
        log.info("BE idle group: memory bounded at %s, as kubepods", bound)
        return bound

    def _hierarchies(self) -> list[Path]:
        if self.layout.version is CgroupVersion.V2:
            return [self.layout.memory_dir(self.relpath).parent]
        return sorted(p for p in self.cgroup_root.iterdir() if p.is_dir() and not p.is_symlink())

    def _remove_everywhere(self, relpath) -> tuple[list[Path], bool]:
        """``relpath`` removed in every hierarchy where it is an empty cgroup: the directories
        removed, and whether one is left (still holding a cgroup: EBUSY, ENOTEMPTY, kept quietly;
        any other refusal logged)."""
        removed, left = [], False
        for hierarchy in self._hierarchies():
            d = hierarchy / relpath
            try:
                d.rmdir()
            except FileNotFoundError:
                continue
            except OSError as error:
                left = True
                if error.errno not in (errno.ENOTEMPTY, errno.EBUSY):
                    log.warning("BE idle group: cannot remove %s: %s", d, error)
                continue
            removed.append(d)
        return removed, left

    def remove_gone(self, found: Iterable[str], on_node: Iterable[str]) -> list[Path]:
        """Remove the pod directories of ``found`` (UIDs in the group) no longer ``on_node``;
        returns those removed."""
        if self.layout.driver is not CgroupDriver.CGROUPFS:
            return []
        gone = set(found) - set(on_node)
        removed = []
        for uid in sorted(gone):
            pod_removed, _ = self._remove_everywhere(self.layout.pod_relpath(uid, PodQOSClass.BE_IDLE_GROUP))
            if pod_removed:
                log.info("BE idle group: removed the cgroups of pod %s, gone from the node", uid)
            removed += pod_removed
        return removed
