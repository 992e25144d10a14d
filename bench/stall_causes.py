# SPDX-License-Identifier: Apache-2.0
"""What the online server's long run-queue waits were spent behind, for bench-isolation.

``--longest-waits`` (bench/wait_sampler.py) counts the waits over 5 ms a p99 feels; this says
what each one waited behind, from the kernel's own scheduler trace (tracefs: ``sched_switch``,
``sched_wakeup`` and the scheduler tick's timer, recorded in the kernel's buffer during the
measured seconds and read after them). For every wait of a server thread over 5 ms (from its
wakeup, or from being preempted while runnable, to running again), on the CPU it queued on:

* ``host``: the CPU was busy yet its scheduler tick did not come for more than 1.75 tick periods
  in the wait: the hypervisor did not run the vCPU (steal), and no guest scheduler decision can
  shorten that;
* ``be``: the BE job's tasks ran there longest;
* ``online``: other threads of the server ran there longest;
* ``other``: anything else ran there longest (the node's daemons, the load client, kernel
  threads); the commands that did are summed in ``other_ran_ms`` (every command in a
  treatment's line, the six longest in the rounds pooled).

``other_cpu_be_ms`` sums how long the BE job ran on the *other* CPUs during the waits: time in
which a CPU was running only BE work while a server thread queued elsewhere. A CPU that runs an
idle-class BE task never goes idle, so it never pulls a waiting task the moment it could; only the
periodic load balance, at a tick, moves one.

Pure parsing and attribution below, tested table-driven; :class:`SchedTrace` is the small tracefs
adapter.
"""
from __future__ import annotations

import bisect
import contextlib
import re
import statistics
import subprocess
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

LONG_WAIT_S = 0.005
#: a busy CPU's scheduler tick missing for longer than this many tick periods: the vCPU did not run
HOST_GAP_TICKS = 1.75
EVENTS = ("sched:sched_switch", "sched:sched_wakeup", "timer:hrtimer_expire_entry")
#: the hrtimer functions of the scheduler tick (their names across kernel versions)
TICK_FUNCTIONS = ("tick_nohz_handler", "tick_sched_timer")
TRACEFS_PLACES = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))

_LINE = re.compile(r"^\s*(?P<task>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<ts>\d+\.\d+):\s+"
                   r"(?P<event>sched_switch|sched_wakeup|hrtimer_expire_entry):\s*(?P<rest>.*)$")
_FIELD = re.compile(r"(\w+)=(\S+)")


@dataclass(frozen=True)
class Switch:
    ts: float
    cpu: int
    prev_pid: int
    prev_runnable: bool
    next_comm: str
    next_pid: int


@dataclass(frozen=True)
class Wakeup:
    ts: float
    pid: int
    target_cpu: int


@dataclass(frozen=True)
class Tick:
    ts: float
    cpu: int


def parse(text: str) -> list[Switch | Wakeup | Tick]:
    """The events of a tracefs ``trace`` text, in time order (lines of other events ignored)."""
    events: list[Switch | Wakeup | Tick] = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        ts, cpu, event, rest = float(m["ts"]), int(m["cpu"]), m["event"], m["rest"]
        if event == "hrtimer_expire_entry":
            if dict(_FIELD.findall(rest)).get("function") in TICK_FUNCTIONS:
                events.append(Tick(ts, cpu))
        elif event == "sched_wakeup":
            f = dict(_FIELD.findall(rest))
            events.append(Wakeup(ts, int(f["pid"]), int(f.get("target_cpu", cpu))))
        else:
            prev, _, nxt = rest.partition(" ==> ")
            p, n = dict(_FIELD.findall(prev)), dict(_FIELD.findall(nxt))
            # next_comm may hold spaces: take it up to " next_pid="
            comm = nxt.split("next_comm=", 1)[1].split(" next_pid=", 1)[0] if "next_comm=" in nxt else ""
            events.append(Switch(ts, cpu, int(p["prev_pid"]), p.get("prev_state", "").startswith("R"),
                                 comm, int(n["next_pid"])))
    events.sort(key=lambda e: e.ts)
    return events


@dataclass(frozen=True)
class Stall:
    start: float
    end: float
    tid: int
    cpu: int                 # the CPU it queued on
    cause: str               # host | be | online | other
    ran_ms: dict             # what ran on that CPU during the wait: command -> ms
    other_cpu_be_ms: float   # BE ran this long on the other CPUs meanwhile

    @property
    def ms(self) -> float:
        return (self.end - self.start) * 1000


def tick_period(events) -> float | None:
    """The scheduler tick's period on a busy CPU (1/HZ): the median gap between consecutive ticks
    of a CPU, over the gaps shorter than 50 ms (an idle CPU stops its tick)."""
    last: dict[int, float] = {}
    gaps = []
    for e in events:
        if isinstance(e, Tick):
            if e.cpu in last and e.ts - last[e.cpu] < 0.05:
                gaps.append(e.ts - last[e.cpu])
            last[e.cpu] = e.ts
    return statistics.median(gaps) if gaps else None


def _occupancy(runs: list[tuple[float, str, int]], start: float, end: float) -> list[tuple[str, int, float]]:
    """(command, pid, seconds) of what ran on one CPU between start and end, from its switches
    (time before the CPU's first switch is not known, so not counted)."""
    times = [r[0] for r in runs]
    out = []
    for j in range(max(bisect.bisect_right(times, start) - 1, 0), len(runs)):
        begin = max(runs[j][0], start)
        if begin >= end:
            break
        stop = min(runs[j + 1][0], end) if j + 1 < len(runs) else end
        if stop > begin:
            out.append((runs[j][1], runs[j][2], stop - begin))
    return out


def _command(comm: str) -> str:
    """A command without its per-process suffix (``loadgen-1a2b3c`` -> ``loadgen``, ``swapper/1``
    -> ``swapper``)."""
    return re.sub(r"(-[0-9a-f]{6,}|/\d+)$", "", comm)


def stalls(events, online: set[int], be: set[int], over_s: float = LONG_WAIT_S) -> list[Stall]:
    """Every wait of an ``online`` thread longer than ``over_s`` seconds, with its cause (pure)."""
    period = tick_period(events) or 0.004
    runs: dict[int, list[tuple[float, str, int]]] = defaultdict(list)
    ticks: dict[int, list[float]] = defaultdict(list)
    queued: dict[int, tuple[float, int]] = {}
    current: dict[int, int] = {}  # cpu -> the pid running there
    waits = []
    for e in events:
        if isinstance(e, Tick):
            ticks[e.cpu].append(e.ts)
        elif isinstance(e, Wakeup):
            # a wake-up of a thread still running (it had not yet gone to sleep) queues nothing
            if e.pid in online and e.pid not in queued and e.pid not in current.values():
                queued[e.pid] = (e.ts, e.target_cpu)
        else:
            runs[e.cpu].append((e.ts, e.next_comm, e.next_pid))
            current[e.cpu] = e.next_pid
            if e.prev_pid in online:
                if e.prev_runnable:
                    queued[e.prev_pid] = (e.ts, e.cpu)
                else:  # it goes to sleep: a wake-up seen while it ran is void
                    queued.pop(e.prev_pid, None)
            if e.next_pid in queued:
                start, cpu = queued.pop(e.next_pid)
                if e.ts - start > over_s:
                    waits.append((start, e.ts, e.next_pid, cpu))
    out = []
    for start, end, tid, cpu in waits:
        ran: Counter = Counter()
        by_kind: Counter = Counter()
        idle = False
        for comm, pid, seconds in _occupancy(runs[cpu], start, end):
            if pid == 0:
                idle = True
                continue
            kind = "be" if pid in be else "online" if pid in online else "other"
            by_kind[kind] += seconds
            ran[_command(comm)] += seconds
        # the CPU's ticks from the last one before the wait to its end, then the wait's end
        cpu_ticks = ticks[cpu]
        near = cpu_ticks[max(bisect.bisect_left(cpu_ticks, start) - 1, 0):bisect.bisect_right(cpu_ticks, end)] + [end]
        gaps = [b - a for a, b in zip(near, near[1:])]
        if not idle and max(gaps, default=0) > HOST_GAP_TICKS * period:
            cause = "host"
        else:
            cause = by_kind.most_common(1)[0][0] if by_kind else "other"
        other_be = sum(seconds for other in runs if other != cpu
                       for _, pid, seconds in _occupancy(runs[other], start, end) if pid in be)
        out.append(Stall(start, end, tid, cpu, cause, {c: round(s * 1000, 2) for c, s in ran.items()},
                         round(other_be * 1000, 2)))
    return out


def summary(found: list[Stall]) -> dict:
    """The per-treatment report: how many waits over 5 ms, the longest, how many per cause, every
    command that ran during the ones caused by ``other`` work (longest first: :func:`pooled` sums
    them exactly), and BE's time on the other CPUs."""
    other: Counter = Counter()
    for s in found:
        if s.cause == "other":
            other.update(s.ran_ms)
    return {"stalls": len(found),
            "longest_ms": round(max((s.ms for s in found), default=0.0), 1),
            "by_cause": dict(Counter(s.cause for s in found)),
            "other_ran_ms": {c: round(ms, 1) for c, ms in other.most_common()},
            "other_cpu_be_ms": round(sum(s.other_cpu_be_ms for s in found), 1)}


def pooled(summaries: list[dict]) -> dict:
    """Several rounds' :func:`summary` as one (counts and times summed, the longest of all; of the
    commands, the six that ran longest over all the rounds)."""
    by_cause: Counter = Counter()
    other: Counter = Counter()
    for s in summaries:
        by_cause.update(s["by_cause"])
        other.update(s["other_ran_ms"])
    return {"stalls": sum(s["stalls"] for s in summaries),
            "longest_ms": max((s["longest_ms"] for s in summaries), default=0.0),
            "by_cause": dict(by_cause),
            "other_ran_ms": {c: round(ms, 1) for c, ms in other.most_common(6)},
            "other_cpu_be_ms": round(sum(s["other_cpu_be_ms"] for s in summaries), 1),
            "trace_overran": any(s.get("trace_overran") for s in summaries)}


class SchedTrace:
    """Records the scheduler events in the kernel's trace buffer between :meth:`start` and
    :meth:`stop` (the buffer, not a pipe: no reader wakes up during the measured seconds).
    :meth:`available` says why not where tracefs is missing or lacks the events."""

    def __init__(self, buffer_kb: int = 400_000) -> None:
        self.root = next((p for p in TRACEFS_PLACES if (p / "set_event").exists()), None)
        self.buffer_kb = buffer_kb
        self._saved: dict[str, str] = {}

    def available(self) -> str | None:
        """None when the trace can run (tracefs mounted at its place first if it is not), else the
        reason it cannot."""
        if self.root is None and TRACEFS_PLACES[0].is_dir():
            subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS_PLACES[0])], capture_output=True)
            self.root = TRACEFS_PLACES[0] if (TRACEFS_PLACES[0] / "set_event").exists() else None
        if self.root is None:
            return "tracefs is not mounted and could not be (mount -t tracefs nodev /sys/kernel/tracing, as root)"
        missing = [e for e in EVENTS if e not in (self.root / "available_events").read_text().split()]
        return f"the kernel lacks the trace events {', '.join(missing)}" if missing else None

    def _write(self, name: str, value: str) -> None:
        (self.root / name).write_text(value)

    def start(self) -> None:
        for name in ("set_event", "buffer_size_kb", "tracing_on"):
            self._saved[name] = (self.root / name).read_text()
        self._write("tracing_on", "0")
        self._write("trace", "")
        self._write("buffer_size_kb", str(self.buffer_kb))
        self._write("set_event", "\n".join(EVENTS) + "\n")
        self._write("tracing_on", "1")

    def stop(self) -> None:
        """Stops recording (at once; :meth:`collect` reads what was recorded)."""
        self._write("tracing_on", "0")

    @contextlib.contextmanager
    def recording(self):
        """Records while the block runs (:meth:`start`, then :meth:`stop` at its end; :meth:`collect`
        reads it later). If the block raises, the tracing settings are put back and the buffer
        freed before the error goes on: nothing is left to collect."""
        self.start()
        try:
            yield self
        except BaseException:
            self.stop()
            self.collect()
            raise
        self.stop()

    def collect(self) -> tuple[str, bool]:
        """After :meth:`stop`: the recorded text, and whether the buffer overran (events lost: the
        attribution is partial); the tracing settings put back as they were before :meth:`start`."""
        overran = any(int(line.split(":")[1]) > 0 for stats in (self.root / "per_cpu").glob("cpu*/stats")
                      for line in stats.read_text().splitlines() if line.startswith("overrun:"))
        text = (self.root / "trace").read_text(errors="replace")
        self._write("trace", "")
        self._write("set_event", self._saved["set_event"] or "\n")
        # buffer_size_kb reads "7 (expanded: 1408)" before first use: the number in parentheses
        self._write("buffer_size_kb", re.findall(r"\d+", self._saved["buffer_size_kb"])[-1])
        self._write("tracing_on", self._saved["tracing_on"].strip() or "1")
        return text, overran
