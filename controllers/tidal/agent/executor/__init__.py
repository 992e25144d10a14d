# SPDX-License-Identifier: Apache-2.0
"""The executor: the only code that changes the node for the QoS features.

Features plan intents (:class:`~tidal.agent.qos.feature.Plan`); the executor carries them out:

* :mod:`.cgroupfs`: cgroup files, each write checked to be inside the kubepods trees, its
  original journalled first in the one :class:`~.cgroupfs.RestoreJournal`
  (``qos-journal.json``), only differing values written; and write-only requests
  (``memory.reclaim``);
* :mod:`.resctrl`: the agent's resctrl groups (``tidal-*`` only), their schemata and members;
* :mod:`.tc`: BE pods' egress shaping (``tfb*`` IFB devices and their veths' ingress qdisc);
* :mod:`.sched`: online pods' threads' scheduling slice (``sched_setattr``), originals in
  ``sched-journal.json`` beside the cgroup journal.

It reads only what it needs to write correctly (current values, existing groups and devices).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .cgroupfs import ApplyResult, CgroupTrigger, CgroupWrite, RestoreJournal, apply, restore, trigger
from .resctrl import ResctrlExecutor, ResctrlGroup, ResctrlMembers, ResctrlRemoveGroups
from .sched import JOURNAL_NAME as SCHED_JOURNAL_NAME
from .sched import SchedExecutor, ThreadSlices, ThreadSlicesReset
from .tc import TcExecutor, TcShaper, TcShapeOnly, TcUnshapeAll

RESCTRL = (ResctrlGroup, ResctrlMembers, ResctrlRemoveGroups)
TC = (TcShapeOnly, TcUnshapeAll)
SCHED = (ThreadSlices, ThreadSlicesReset)

__all__ = ["Executor", "Outcome"]


@dataclass
class Outcome:
    """What the executor did with one round's intents."""

    #: cgroup files (``restore_problems``: journalled files no plan wants that could not go back)
    result: ApplyResult = field(default_factory=ApplyResult)
    #: keys of the other intents (requests, resctrl, tc) carried out
    done: set[str] = field(default_factory=set)
    #: (module of the intents' executor, file or object, problem) of the other intents
    problems: list[tuple[str, str, str]] = field(default_factory=list)

    def applied(self, keys: Iterable[str]) -> bool:
        """Every one of ``keys`` is at its planned value (written now, or found there)."""
        if self._applied is None:
            result = self.result
            self._applied = {w.key for w in (*result.written, *result.unchanged)} | self.done
        return all(k in self._applied for k in keys)

    def written(self, keys: Iterable[str]) -> bool:
        """At least one of ``keys`` was changed (or carried out) now."""
        if self._written is None:
            self._written = {w.key for w in self.result.written} | self.done
        return any(k in self._written for k in keys)

    # computed on first use (most rounds ask neither)
    _applied: set[str] | None = field(default=None, repr=False)
    _written: set[str] | None = field(default=None, repr=False)


class Executor:
    """The one writer, with the one journal at ``journal_path`` (``legacy``: older agents'
    journals merged into it on start; ``cgroup_root``: where this process sees the cgroup
    filesystem, saved in the journal; see :class:`~.cgroupfs.RestoreJournal`).

    ``verify_every``: every this many rounds every planned file is read back from the kernel
    (drift made by others, e.g. a kubelet resetting a value, is repaired within this many
    rounds); in between, a file whose planned value was already seen or written is not read
    again (the ``known`` cache).
    """

    def __init__(self, journal_path: Path | str, *, legacy: Iterable[Path | str] = (),
                 verify_every: int = 5, resctrl_remove: Callable[[Path], None] = Path.rmdir,
                 shaper: TcShaper | None = None, sched: SchedExecutor | None = None,
                 cgroup_root: Path | str | None = None) -> None:
        self.journal = RestoreJournal(journal_path, legacy, cgroup_root)
        self.resctrl = ResctrlExecutor(resctrl_remove)
        self.tc = TcExecutor(shaper)
        self.sched = sched or SchedExecutor(journal=Path(journal_path).with_name(SCHED_JOURNAL_NAME))
        self.verify_every = verify_every
        self.known: dict[str, str] = {}
        self._rounds = 0

    def execute(self, writes: Sequence[CgroupWrite], others: Sequence[object], roots: Sequence[Path],
                reread: Iterable[str] = ()) -> Outcome:
        """One round: make the cgroup files match ``writes`` (journalling originals), put back
        every journalled file that no write mentions any more, then carry out ``others``.
        ``reread``: keys to read back from the kernel this round whatever the cache says."""
        self._rounds += 1
        if self._rounds % self.verify_every == 0:
            self.known.clear()
        for key in reread:
            self.known.pop(key, None)
        out = Outcome()
        wanted = {w.key for w in writes}
        stale = [k for k in self.journal.originals if k not in wanted]
        # Stale files first: on v1 a parent's quota lifted here (-1) lets the round raise its
        # children's quotas, which the kernel refuses while the parent still holds less. What a
        # restore could not do before the writes (a child's original above a parent's quota the
        # writes lift) is tried once more after them.
        problems = restore(self.journal, stale)
        out.result = apply(writes, self.journal, roots, self.known)
        retry = [key for key, _ in problems if key in self.journal.originals]
        if retry:
            problems = [p for p in problems if p[0] not in retry] + restore(self.journal, retry)
        out.result.restore_problems = problems
        for key in stale:
            self.known.pop(key, None)
        if others:
            self._other(others, roots, out)
        return out

    def _other(self, intents: Sequence[object], roots: Sequence[Path], out: Outcome) -> None:
        unknown = [i for i in intents if not isinstance(i, (CgroupTrigger, *RESCTRL, *TC, *SCHED))]
        if unknown:  # before anything is done
            raise TypeError(f"no executor for {unknown[0]!r}")
        requests = [i for i in intents if isinstance(i, CgroupTrigger)]
        if requests:
            done, problems = trigger(requests, roots)
            out.done.update(r.key for r in done)
            out.problems += [(CgroupTrigger.__module__, *p) for p in problems]
        for kinds, executor in ((RESCTRL, self.resctrl), (TC, self.tc), (SCHED, self.sched)):
            mine = [i for i in intents if isinstance(i, kinds)]
            if mine:
                problems: list[tuple[str, str]] = []
                executor.execute(mine, out.done, problems)
                out.problems += [(kinds[0].__module__, *p) for p in problems]

    def undo(self, others: Sequence[object], roots: Sequence[Path]) -> Outcome:
        """Everything off: restore every journalled file, carry out the features' undo intents."""
        out = Outcome()
        self.known.clear()
        out.result.restore_problems = restore(self.journal)
        if others:
            self._other(others, roots, out)
        return out

    def restore(self) -> list[tuple[str, str]]:
        self.known.clear()
        return restore(self.journal)
