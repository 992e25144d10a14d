# SPDX-License-Identifier: Apache-2.0
"""Threads' scheduling attributes: the EEVDF slice of online pods' threads.

Since Linux 6.12 a SCHED_OTHER or SCHED_BATCH thread may ask for its own slice
(``sched_attr.sched_runtime``, 0.1–100 ms; 0 means the kernel's base slice). A shorter slice
gives the thread an earlier virtual deadline: on wake-up it may preempt a task of the default
slice that has not used up its own (the kernel's PREEMPT_SHORT, only while the waking entity has
not run ahead of its share), and its cgroup's entity takes the shortest slice of what it holds.
CPU shares are untouched: a slice moves latency, not bandwidth. What it measured to be worth:
docs/node-engine.md, "Online wake-up slice".

:class:`ThreadSlices`: every thread listed in ``thread_files`` (a cgroup's ``tasks`` or
``cgroup.threads``) runs with ``slice_us``. Threads of another policy (real-time, deadline,
SCHED_IDLE) are left alone; nice and reset-on-fork are kept. A thread's original slice is
journalled the first time it is changed (``sched-journal.json``, with the thread's start time, so
a reused TID is not taken for it), and :class:`ThreadSlicesReset` puts every one back that is
still at the slice given (a slice the application chose since is its own) — also in a new agent
and in ``tidal-agent restore`` — and, once per executor, resets threads of its ``thread_files``
still at its ``slice_us`` (what an agent whose journal was lost had set). New threads inherit the slice of the
thread that created them; each thread is looked at once while it lives (its TID remembered), so a
steady pod costs one read of its thread lists per round.

The system calls go through libc's ``syscall()`` (Python's ``os`` has neither
``sched_setattr`` nor ``sched_getattr``); :func:`probe` tells whether the kernel keeps a custom
slice (the capability ``sched.slice``).
"""
from __future__ import annotations

import ctypes
import errno
import functools
import json
import logging
import os
import platform
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tidal.agent.durable import write_durably

__all__ = ["JOURNAL_NAME", "SLICE_MAX_US", "SLICE_MIN_US", "Given", "SchedAttr", "SchedExecutor", "ThreadSlices",
           "ThreadSlicesReset", "get_attr", "probe", "set_slice", "start_time"]

log = logging.getLogger(__name__)

#: the kernel's bounds for a custom slice (kernel/sched/syscalls.c clamps to them)
SLICE_MIN_US = 100
SLICE_MAX_US = 100_000
#: (sched_setattr, sched_getattr) by machine
_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275), "ppc64le": (355, 356), "s390x": (345, 346)}
SCHED_OTHER, SCHED_BATCH = 0, 3
#: beside the cgroup journal (``qos-journal.json``) in the agent's state directory
JOURNAL_NAME = "sched-journal.json"
FAIR = (SCHED_OTHER, SCHED_BATCH)
SCHED_FLAG_RESET_ON_FORK = 0x01
#: struct sched_attr up to sched_period (SCHED_ATTR_SIZE_VER0): size, policy, flags, nice,
#: priority, runtime, deadline, period
_ATTR = struct.Struct("=IIQiIQQQ")


@dataclass(frozen=True)
class SchedAttr:
    policy: int
    flags: int
    nice: int
    #: for SCHED_OTHER/SCHED_BATCH threads on Linux >= 6.12: the thread's slice, custom or the base one
    runtime_ns: int


class SchedError(OSError):
    pass


@functools.cache
def _syscall(index: int) -> tuple[ctypes.CDLL, int]:
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        raise SchedError(errno.ENOSYS, f"sched_setattr: unknown system call number on {platform.machine()}")
    return ctypes.CDLL(None, use_errno=True), numbers[index]


def get_attr(tid: int) -> SchedAttr:
    """The thread's scheduling attributes (``tid`` 0: the calling thread)."""
    libc, number = _syscall(1)
    buf = ctypes.create_string_buffer(_ATTR.size)
    if libc.syscall(number, ctypes.c_int(tid), buf, ctypes.c_uint(_ATTR.size), ctypes.c_uint(0)) != 0:
        code = ctypes.get_errno()
        raise SchedError(code, f"sched_getattr({tid}): {os.strerror(code)}")
    _, policy, flags, nice, _, runtime, _, _ = _ATTR.unpack(buf.raw)
    return SchedAttr(policy, flags, nice, runtime)


def set_slice(tid: int, attr: SchedAttr, slice_ns: int) -> None:
    """The thread's slice to ``slice_ns`` (0: the kernel's base slice), its policy, nice and
    reset-on-fork as ``attr`` says (what :func:`get_attr` read)."""
    libc, number = _syscall(0)
    raw = _ATTR.pack(_ATTR.size, attr.policy, attr.flags & SCHED_FLAG_RESET_ON_FORK, attr.nice, 0, slice_ns, 0, 0)
    buf = ctypes.create_string_buffer(raw, _ATTR.size)
    if libc.syscall(number, ctypes.c_int(tid), buf, ctypes.c_uint(0)) != 0:
        code = ctypes.get_errno()
        raise SchedError(code, f"sched_setattr({tid}): {os.strerror(code)}")


def probe() -> tuple[bool, str]:
    """Does this kernel keep a custom slice for a SCHED_OTHER thread? Tried on a thread of its
    own (a short-lived one, so the agent's threads keep theirs); the reason when it does not."""
    out: list[tuple[bool, str]] = []

    def attempt() -> None:
        try:
            attr = get_attr(0)
            if attr.policy not in FAIR:
                out.append((False, "the agent's own threads are not SCHED_OTHER: cannot tell"))
                return
            want = 300_000 if attr.runtime_ns != 300_000 else 400_000
            set_slice(0, attr, want)
            got = get_attr(0).runtime_ns
            out.append((True, "") if got == want else
                       (False, "the kernel ignores sched_attr.sched_runtime for SCHED_OTHER threads "
                               "(custom EEVDF slices need Linux 6.12 or later)"))
        except OSError as err:
            out.append((False, str(err)))

    thread = threading.Thread(target=attempt, name="tidal-sched-probe")
    thread.start()
    thread.join()
    return out[0]


@dataclass(frozen=True)
class ThreadSlices:
    """Every SCHED_OTHER/SCHED_BATCH thread listed in ``thread_files`` runs with ``slice_us``."""

    thread_files: tuple[Path, ...]
    slice_us: int

    @property
    def key(self) -> str:
        return f"sched-slice:{self.thread_files[0].parent if self.thread_files else ''}"


@dataclass(frozen=True)
class ThreadSlicesReset:
    """Every thread whose slice the executor changed has its original back; so has every thread
    of ``thread_files`` found at ``slice_us`` (set by an earlier agent)."""

    thread_files: tuple[Path, ...] = ()
    slice_us: int = 0

    @property
    def key(self) -> str:
        return "sched-slice:reset"


def _tids(files: Sequence[Path]) -> list[int]:
    out = []
    for file in files:
        try:
            out += [int(t) for t in file.read_text().split()]
        except (OSError, ValueError):
            continue  # the container went meanwhile
    return out


@dataclass(frozen=True)
class Given:
    """A thread whose slice the executor changed: which thread (its start time, so a reused TID
    is not taken for it), the slice it had, the slice it was given (ns)."""

    start: int | None
    original_ns: int
    given_ns: int


def start_time(tid: int, proc_root: Path = Path("/proc")) -> int | None:
    """The thread's start time (clock ticks after boot: ``stat`` field 22), None when it is gone."""
    try:
        text = (proc_root / str(tid) / "stat").read_text()
        return int(text[text.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


class SchedExecutor:
    """Carries out :class:`ThreadSlices` and :class:`ThreadSlicesReset`; ``get``, ``put`` and
    ``start`` are the system calls and the ``/proc`` read (tests pass fakes beside the
    real-thread tests). With ``journal`` (``sched-journal.json`` beside the cgroup journal),
    what it changed outlives the agent: a new agent, or ``tidal-agent restore``, puts it back."""

    def __init__(self, get=get_attr, put=set_slice, start=start_time, journal: Path | None = None) -> None:
        self.get = get
        self.put = put
        self.start = start
        self.journal = journal
        #: threads changed by this executor (or an earlier one, from the journal)
        self.originals: dict[int, Given] = self._load()
        #: TID -> the slice (ns) this executor last saw it at
        self.seen: dict[int, int] = {}
        #: a reset looked at the threads of its thread lists already (once per executor: what an
        #: earlier agent left is there when this one starts; later threads inherit from reset ones)
        self.swept = False
        self.base_ns: int | None = None
        self.changed = 0

    def _load(self) -> dict[int, Given]:
        if self.journal is None or not self.journal.exists():
            return {}
        try:
            data = json.loads(self.journal.read_text())
            return {int(tid): Given(start, int(original), int(given))
                    for tid, (start, original, given) in data["threads"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            log.warning("%s unreadable (%s): threads an earlier agent gave a slice are reset only while they "
                        "are still at the policy's slice", self.journal, err)
            return {}

    def _save(self, before: dict[int, Given]) -> None:
        if self.journal is None or self.originals == before:
            return
        data = {"version": 1, "threads": {str(t): [g.start, g.original_ns, g.given_ns]
                                          for t, g in sorted(self.originals.items())}}
        try:
            write_durably(self.journal, json.dumps(data).encode())
        except OSError as err:
            log.warning("%s not written (%s): an agent restart forgets which threads it changed", self.journal, err)

    def _base(self) -> int:
        """The kernel's base slice: what this agent's own main thread runs with."""
        if self.base_ns is None:
            try:
                self.base_ns = self.get(os.getpid()).runtime_ns
            except OSError:
                self.base_ns = 0
        return self.base_ns

    def execute(self, intents: Sequence[object], done: set[str], problems: list[tuple[str, str]]) -> None:
        before = dict(self.originals)
        live: set[int] = set()
        for intent in intents:
            if isinstance(intent, ThreadSlices):
                tids = _tids(intent.thread_files)
                live.update(tids)
                changed = self.changed
                if self._apply(tids, intent.slice_us * 1000, problems):
                    done.add(intent.key)
                if self.changed > changed:
                    log.info("%d thread(s) listed in %s now run with a %d µs slice", self.changed - changed,
                             intent.thread_files[0].parent, intent.slice_us)
            elif isinstance(intent, ThreadSlicesReset):
                if self._reset(intent, problems):
                    done.add(intent.key)
        if any(isinstance(i, ThreadSlices) for i in intents):
            # gone (or moved out of the online pods): a reused TID is looked at again, and the
            # journal keeps only threads that are still there (also those an earlier agent changed)
            for tid in [t for t in self.seen if t not in live]:
                del self.seen[tid]
            for tid in [t for t in self.originals if t not in live]:
                del self.originals[tid]
        self._save(before)

    def _apply(self, tids: Sequence[int], slice_ns: int, problems: list[tuple[str, str]]) -> bool:
        ok = True
        for tid in tids:
            if self.seen.get(tid) == slice_ns:
                continue
            try:
                attr = self.get(tid)
                if attr.policy in FAIR and attr.runtime_ns != slice_ns:
                    known = self.originals.get(tid)
                    start = self.start(tid)
                    original = known.original_ns if known and known.start == start else attr.runtime_ns
                    self.put(tid, attr, slice_ns)
                    self.originals[tid] = Given(start, original, slice_ns)
                    self.changed += 1
                elif attr.policy in FAIR and tid not in self.originals:
                    # at the slice already: created by a thread that had it (a new thread inherits
                    # its creator's), so it is ours to put back too, at the kernel's base slice
                    self.originals[tid] = Given(self.start(tid), self._base(), slice_ns)
                self.seen[tid] = slice_ns  # a thread of another policy: looked at once
            except OSError as err:
                # exited meanwhile: nothing to do; a refusal (EPERM: no CAP_SYS_NICE) is not
                # remembered, so it is tried again, and reported, every round while it lasts
                if err.errno != errno.ESRCH:
                    problems.append((f"/proc/{tid}", str(err)))
                    ok = False
        return ok

    def _reset(self, intent: ThreadSlicesReset, problems: list[tuple[str, str]]) -> bool:
        base = self._base()
        targets = dict(self.originals)
        if intent.thread_files and intent.slice_us and not self.swept:
            # once: afterwards a switched-off feature costs no read and no system call
            for tid in _tids(intent.thread_files):
                targets.setdefault(tid, Given(None, base, intent.slice_us * 1000))
            self.swept = True
        if not targets:
            return True
        changed = self.changed
        ok = True
        for tid, given in targets.items():
            try:
                # only the same thread (a reused TID is another), still at the slice it was given:
                # a slice the application chose since is its own
                if given.start is None or self.start(tid) == given.start:
                    attr = self.get(tid)
                    if attr.policy in FAIR and attr.runtime_ns == given.given_ns != given.original_ns:
                        self.put(tid, attr, 0 if given.original_ns == base else given.original_ns)
                        self.changed += 1
            except OSError as err:
                if err.errno != errno.ESRCH:
                    problems.append((f"/proc/{tid}", str(err)))
                    ok = False
                    continue
            self.originals.pop(tid, None)
            self.seen.pop(tid, None)
        if self.changed > changed:
            log.info("%d online thread(s) have their scheduling slice back", self.changed - changed)
        return ok
