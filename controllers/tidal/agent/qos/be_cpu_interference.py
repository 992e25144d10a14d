# SPDX-License-Identifier: Apache-2.0
"""BE CPU interference control: BE pods get only the CPU slack the online pods tolerate.

BE CPU suppression (:mod:`.be_cpu_suppression`) caps the BE parent at what online *usage* leaves
under a threshold; that holds on a quiet node, but usage says nothing about whether online tasks
are actually being delayed. Here the delay itself is the signal (the Heracles idea: BE gets what
the online service's slack allows), measured on the online service's own tasks:

Signal — the run-queue delay of online tasks. ``/proc/<tid>/schedstat`` holds, per thread, the
nanoseconds it ran, the nanoseconds it *waited on a run queue* (runnable, not running) and the
number of times it was scheduled in (slices). Every round the agent reads the threads of every
HLS/LS pod (the ``tasks`` files of the pod's cgroups on v1, ``cgroup.threads`` on v2) and takes
the differences since the last round, summed over the threads present both times (at most
``MAX_THREADS`` (128) per round, an equal share of each pod: :func:`sampled`):

* **mean delay per slice** (``runQueueDelayMicroseconds``) = Σ Δwaited / Σ Δslices. This is
  what each wake-up of an online thread waited before it got a CPU, i.e. what interference adds
  to each step of a request. It is the controlled signal: it does not grow with the request
  rate (a busier but undisturbed service has more slices, not longer ones), so one target fits
  any service; and it is an average over hundreds of slices per second, steady enough to act on
  every round.
* wait ratio (``waitRatio``) = Σ Δwaited / Δwall: threads' worth of time spent waiting (as
  PSI's, additive over threads). Reported, not controlled: it scales with load.

Attribution — only the delay BE causes is BE's to remove. Online threads also wait behind the
node's daemons, the kubelet, other online pods; throttling BE takes none of that away (measured:
bench-isolation's online server waited 125 µs per slice with no BE pod at all, beside the bench's
own control plane, and about 100 µs beside a BE hog under ``cpu.idle``). So the delay measured in
the rounds during which BE was held at its floor stands for what BE cannot remove
(``floorDelayMicroseconds``: the median of the last ``FLOOR_ROUNDS`` such rounds, so one round
an online burst or a busy daemon made slow, or quiet, does not decide it; a trip to the floor
lasts until it has that many fresh ones), each round for ``FLOOR_DELAY_SECONDS``; the
controlled value is the delay *above* it (``attributedDelayMicroseconds``; the whole delay while
none is known or it is stale: the online service is protected first, and a delay above the
target then takes BE to its floor and so measures it anew). Beside daemons that alone keep the
delay above the target every such trip finds it is not BE's: each throttling episode in a row
that ends so doubles how long the floor's delay stands (``floorStandsSeconds``), up to
``FLOOR_DELAY_MAX_SECONDS``; one that found it BE's (in at least half of its rounds with BE above
its floor, the delay at least a quarter of the target above the floor's), or ``ENGAGE_ROUNDS`` rounds well
below the floor's delay (the daemons quieted down), put it back to ``FLOOR_DELAY_SECONDS``.

Controller (pure, :class:`InterferenceController`, multiplicative decrease / additive
increase): the BE allowance starts at the suppression bound
``max(floor, node CPUs × threshold − online usage − system usage)`` and every round

* attributed delay above ``targetDelayMicroseconds``: allowance × (1 − ``decreasePercent`` /
  100), never below the suppression floor — the online service is protected first;
* attributed delay below half the target: allowance + ``increasePercent`` % of the node's CPUs;
* in between: held (a band, so the quota does not chatter around the target);

and always at most the suppression bound. BE work is only ever slowed by this (its quota on
``kubepods/besteffort``), never killed: evictions stay with the watermarks and PSI.

The quota is written where suppression writes it (this feature runs after it, so its value
wins); switched off, suppression's own value applies again.

When the quota is in force — ``cpuSuppression.quota``: with ``always`` from the first round on,
as above; with ``onInterference`` (the default) no quota at all (no write: the cgroup keeps its
own, none) until the attributed delay has been above the target ``ENGAGE_ROUNDS`` (5) rounds in a
row; then the allowance starts at the bound and is lowered at once, and once it is back at the
bound with the delay below half the target the quota is lifted again. BE's idle CPU priority
(``cpuPriority``) is the first line; the quota only the second: a quota on the BE parent costs the
online tail by itself on the 2-vCPU development guest, even one that never cuts BE (measured:
docs/benchmarks.md, Isolation, 2026-11-29).

Visibility: gauges ``tidal_online_runqueue_delay_microseconds``,
``tidal_online_runqueue_wait_ratio`` and ``tidal_be_cpu_quota_millicores`` (the allowance in
force; the node's CPUs while no quota is), a counter ``tidal_be_cpu_interference_throttles_total``
(every decrease), a Node Event ``TidalBECPUThrottled`` when a throttling episode starts (then at
most every ``EVENT_INTERVAL_SECONDS``), ``TidalBECPUReleased`` when the allowance is back at the
bound (with onInterference: the quota lifted; with how long the floor's delay stands from then
when that changes), ``TidalBECPUFloorRecheck`` when rounds well below the floor's delay make it
stand the shortest time again, and ``status.cpuInterference`` of the NodeProfile.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

from tidal.agent.collector.readers import read_small
from tidal.agent.collector.sampler import ONLINE_LEVELS
from tidal.api.policy import CPUInterference as CPUInterferenceConfig
from tidal.api.policy import SuppressionQuota

from .be_cpu_suppression import bound_millicores, quota_on_interference, quota_writes
from .feature import DEFAULT_OPTIONS, EMPTY, Context, Counter, Gauge, NodeEvent, Options, Plan, StatusPart
from .strategy import NodeState, cpu_dir

__all__ = ["ENGAGE_ROUNDS", "EVENT_INTERVAL_SECONDS", "FLOOR_DELAY_MAX_SECONDS", "FLOOR_DELAY_SECONDS",
           "FLOOR_ROUNDS", "MAX_THREADS",
           "BECPUInterference", "InterferenceController", "RunQueueReader", "RunQueueSample", "Signal",
           "parse_schedstat", "quota_mode", "sampled", "signal"]

ONLINE = ONLINE_LEVELS  # the online QoS levels, as the sampler counts them
#: a throttling episode's Event is repeated at most this often while it lasts
EVENT_INTERVAL_SECONDS = 60.0
#: how long the delay measured with BE at its floor stands for what BE cannot remove. Longer
#: saves BE the trips to its floor that measure it (each costs BE about 20 rounds below its
#: allowance); shorter bounds how long a stale, higher one could hide delay BE causes.
FLOOR_DELAY_SECONDS = 120.0
#: beside daemons that alone keep the delay above the target, every trip finds the delay is not
#: BE's; each such trip in a row doubles how long the floor's delay stands, up to this, and one
#: that finds BE's delay (or the delay well below the floor for ENGAGE_ROUNDS rounds: the floor
#: has gone down) puts it back to FLOOR_DELAY_SECONDS
FLOOR_DELAY_MAX_SECONDS = 480.0
#: the floor's delay is the median of at most this many of the last rounds at the floor (fresh
#: ones), and a trip to the floor with fewer fresh ones lasts until it has measured them: one
#: outlier among three does not move it, and a lasting change is followed within one trip
FLOOR_ROUNDS = 3
#: with ``cpuSuppression.quota: onInterference``, rounds in a row with the attributed delay above
#: the target before a quota comes into force: one slow round (a daemon's burst, an online spike)
#: is no evidence that BE delays the online tasks, and a quota costs their tail by itself
ENGAGE_ROUNDS = 5
STATUS_KEY = "cpuInterference"


def parse_schedstat(text: str | bytes) -> tuple[int, int, int]:
    """``/proc/<tid>/schedstat``: ``<ns on CPU> <ns waiting on a run queue> <slices>``."""
    fields = text.split()
    if len(fields) < 3:
        raise ValueError(f"schedstat {text[:60]!r}: expected three numbers")
    return int(fields[0]), int(fields[1]), int(fields[2])


@dataclass(frozen=True)
class RunQueueSample:
    """One reading: per thread id, (ns waited on a run queue, slices); ``at`` in ns (monotonic)."""

    at: int
    threads: Mapping[int, tuple[int, int]]


@dataclass(frozen=True)
class Signal:
    """The online threads' run-queue delay between two readings."""

    delay_us: float | None   # mean delay per slice, µs (None: no slice ran, nothing to say)
    wait_ratio: float        # Σ waited / wall time
    threads: int             # threads seen in both readings
    slices: int


def signal(before: RunQueueSample | None, after: RunQueueSample) -> Signal | None:
    """The delay between two readings (pure); None without an earlier reading."""
    if before is None or after.at <= before.at:
        return None
    waited = slices = threads = 0
    for tid, (wait_ns, count) in after.threads.items():
        prev = before.threads.get(tid)
        if prev is None or wait_ns < prev[0] or count < prev[1]:
            continue  # new thread (or a reused id): no baseline yet
        waited += wait_ns - prev[0]
        slices += count - prev[1]
        threads += 1
    delay = waited / slices / 1000 if slices else None
    return Signal(delay, waited / (after.at - before.at), threads, slices)


@dataclass
class InterferenceController:
    """The BE allowance (millicores), stepped once per round (pure: no I/O, no clock)."""

    allowance: float | None = None
    #: monotonic time of the last Event of the running throttling episode (None: no episode)
    event_at: float | None = None
    #: decreases so far (rounds above the target while at the floor are not counted)
    throttles: int = 0
    #: the last rounds during which BE was held at its floor: (when, delay µs), oldest first
    floor_rounds: list[tuple[float, float]] = field(default_factory=list)
    #: what BE cannot remove: the median delay of the fresh ``floor_rounds`` (None: none fresh)
    floor_delay_us: float | None = None
    #: the delay above it, of the last round with a delay: the controlled value
    attributed_us: float | None = None
    #: rounds in a row with the attributed delay above the target while no quota is in force
    rounds_above: int = 0
    #: how long the floor's delay stands now: FLOOR_DELAY_SECONDS, doubled by every throttling
    #: episode in a row that found the delay not BE's (up to FLOOR_DELAY_MAX_SECONDS)
    floor_fresh_seconds: float = FLOOR_DELAY_SECONDS
    #: the running throttling episode's rounds with a known floor's delay and BE above its floor,
    #: and how many of them had the delay at least a quarter of the target above the floor's (a
    #: slow round outside an episode is not counted)
    episode_rounds: int = 0
    episode_high: int = 0
    #: rounds in a row with the delay more than half the target below the floor's
    rounds_below: int = 0

    @property
    def engaged(self) -> bool:
        """Whether a quota is in force: from the first step on, unless stepped ``on_interference``."""
        return self.allowance is not None

    def attributed(self, now: float, delay_us: float | None, floor: float) -> float | None:
        """The part of this round's delay taken to be BE's doing (bookkeeping of the floor's
        delay, no I/O): a round that ran with BE at its floor measures what BE cannot remove;
        later rounds count only the delay above the median of the last such rounds, while they
        are fresh."""
        if delay_us is not None and self.allowance is not None and self.allowance <= floor:
            self.floor_rounds = [*self.floor_rounds, (now, delay_us)][-FLOOR_ROUNDS:]  # the whole round at the floor
        self.floor_rounds = [(at, d) for at, d in self.floor_rounds if now - at <= self.floor_fresh_seconds]
        self.floor_delay_us = median([d for _, d in self.floor_rounds]) if self.floor_rounds else None
        self.attributed_us = None if delay_us is None else delay_us - (self.floor_delay_us or 0.0)
        return self.attributed_us

    def step(self, now: float, delay_us: float | None, bound: float, floor: float, node_cpus: float,
             config: CPUInterferenceConfig, on_interference: bool = False) -> tuple[int | None, list[NodeEvent]]:
        """The allowance for this round, and the Events to send. ``bound`` is suppression's
        quota (the most BE may ever get), ``floor`` its floor (the least); ``delay_us`` was
        measured over the round since the last step, under the allowance that step returned.
        With ``on_interference`` (``cpuSuppression.quota: onInterference``) the allowance is None
        — no quota — until the attributed delay has been above the target ``ENGAGE_ROUNDS``
        rounds in a row, and None again once it is back at the bound with the delay below half
        the target."""
        excess = self.attributed(now, delay_us, floor)
        target = config.target_delay_microseconds
        events: list[NodeEvent] = []
        known = self._follow_the_floor(excess, floor, target, delay_us, events)
        if on_interference and not self.engaged:
            self.rounds_above = self.rounds_above + 1 if excess is not None and excess > target else 0
            if self.rounds_above < ENGAGE_ROUNDS:
                return None, events
            self.rounds_above = 0  # BE delays the online tasks: the quota comes into force, lowered at once
        current = bound if self.allowance is None else min(self.allowance, bound)
        # a trip to the floor lasts until it has measured FLOOR_ROUNDS rounds there: one round
        # would make the floor's delay that round's, however slow or quiet it happened to be
        measuring = (delay_us is not None and self.allowance is not None and self.allowance <= floor
                     and len(self.floor_rounds) < FLOOR_ROUNDS)
        if excess is not None and excess > target:
            lowered = max(floor, current * (1 - config.decrease_percent / 100))
            if lowered < current:  # at the floor already: held there, not lowered again
                self.throttles += 1
            current = lowered
            if self.event_at is None or now - self.event_at >= EVENT_INTERVAL_SECONDS:
                self.event_at = now
                beyond = "" if self.floor_delay_us is None else (
                    f", {excess:.0f} µs above the {self.floor_delay_us:.0f} µs they waited with BE at its floor")
                events.append(NodeEvent(
                    "TidalBECPUThrottled",
                    f"online tasks waited {delay_us:.0f} µs per scheduling slice on a run queue{beyond} "
                    f"(target {target} µs): BE CPU quota lowered to {current:.0f}m "
                    f"(suppression bound {bound:.0f}m, floor {floor:.0f}m)", warning=True))
        elif measuring:
            current = floor
        elif excess is None or excess < target / 2:
            current = min(bound, current + node_cpus * 1000 * config.increase_percent / 100)
        current = max(floor, min(bound, current))
        if known and self.event_at is not None:  # a round of the throttling episode (started or running)
            self.episode_rounds += 1
            self.episode_high += excess >= target / 4
        lifted = on_interference and current >= bound and not measuring and (excess is None or excess < target / 2)
        if self.event_at is not None and current >= bound:  # the throttling episode is over
            self.event_at = None
            standing = self._episode_over()
            measured = ("online run-queue delay unmeasured" if delay_us is None else
                        f"online tasks waited {delay_us:.0f} µs per scheduling slice")
            if delay_us is not None and self.floor_delay_us is not None:
                measured += f" ({self.floor_delay_us:.0f} µs with BE at its floor)"
            back = "BE CPU quota lifted (cpuSuppression.quota onInterference)" if lifted else (
                f"BE CPU quota back at the suppression bound {bound:.0f}m")
            events.append(NodeEvent(
                "TidalBECPUReleased",
                f"{measured}: what BE adds is below the target ({target} µs), {back}{standing}"))
        if lifted:
            self.allowance = None
            return None, events
        self.allowance = current
        return int(current), events

    def _follow_the_floor(self, excess: float | None, floor: float, target: float, delay_us: float | None,
                          events: list[NodeEvent]) -> bool:
        """Bookkeeping of how long the floor's delay stands (no I/O); whether this round can
        tell whose the delay is: one with a known floor's delay and BE above its floor.
        ``ENGAGE_ROUNDS`` rounds in a row well below the floor's delay say the floor has gone down
        since it was measured: it stands the shortest time again, so a lower one is measured soon
        (``TidalBECPUFloorRecheck`` says so when that shortens it)."""
        if excess is None or self.floor_delay_us is None or (self.allowance is not None and self.allowance <= floor):
            self.rounds_below = 0
            return False
        self.rounds_below = self.rounds_below + 1 if excess < -target / 2 else 0
        if self.rounds_below >= ENGAGE_ROUNDS:
            self.rounds_below = 0
            if self.floor_fresh_seconds > FLOOR_DELAY_SECONDS:
                events.append(NodeEvent(
                    "TidalBECPUFloorRecheck",
                    f"online tasks waited {delay_us:.0f} µs per scheduling slice, more than half the target "
                    f"({target} µs) below the {self.floor_delay_us:.0f} µs they waited with BE at its floor, "
                    f"{ENGAGE_ROUNDS} rounds in a row: the delay with BE at its floor now stands for "
                    f"{FLOOR_DELAY_SECONDS:.0f} s, so it is measured again soon"))
            self.floor_fresh_seconds = FLOOR_DELAY_SECONDS
        return True

    def _episode_over(self) -> str:
        """At the end of a throttling episode: how long the floor's delay stands from now on
        (doubled when the episode found the delay not BE's); the Event's words for it when it
        changed, else "".

        The delay was BE's when in at least half of the episode's rounds above its floor it was
        at least a quarter of the target above the floor's (the median of those rounds' excess).
        Where BE causes it, the controller holds the excess in its band (half the target to the
        target), lowers it from above or climbs back towards it, so the median sits near the
        band; where the daemons cause it, the excess scatters around 0 (the floor's delay is
        their median), and one noisy round above the target (likelier the lower the target is
        against the delay's spread) decides nothing. A BE episode judged not BE's costs little:
        the floor's delay only stands longer, and the rounds BE spends at its floor measure it
        anew anyway."""
        before = self.floor_fresh_seconds
        bes = self.episode_rounds > 0 and 2 * self.episode_high >= self.episode_rounds
        self.floor_fresh_seconds = FLOOR_DELAY_SECONDS if bes else min(FLOOR_DELAY_MAX_SECONDS, 2 * before)
        self.episode_rounds = self.episode_high = 0
        if self.floor_fresh_seconds == before:
            return ""
        why = "BE delayed the online tasks" if self.floor_fresh_seconds < before else "the delay was not BE's"
        return f"; {why}: the delay with BE at its floor now stands for {self.floor_fresh_seconds:.0f} s"


def _task_files(directory: Path, name: str) -> list[Path]:
    out = []
    for root, _dirs, files in os.walk(directory):
        if name in files:
            out.append(Path(root) / name)
    return out


#: most threads read per round, node-wide. A read costs about 5 µs (open, read, close of
#: /proc/<tid>/schedstat, measured on the development machine), about 12 µs with the parsing and
#: bookkeeping: 512 threads a round cost the agent 0.6 % of a core (make bench-agent), 128 keep
#: it near 0.15 %
MAX_THREADS = 128
#: reads of the online threads' schedstat between two reads of their thread lists (the lists
#: change with the pods, which re-read them at once, and with threads coming and going)
TIDS_REREAD_ROUNDS = 5
#: threads per pod always read (a pod with many threads does not crowd out the others)
MIN_THREADS_PER_POD = 2


def sampled(per_pod: list[list[int]], limit: int = MAX_THREADS) -> list[int]:
    """The threads to read (pure): every thread while the pods have ``limit`` or fewer together,
    else the same share of each pod (at least ``MIN_THREADS_PER_POD``), lowest ids first — a
    pod's oldest threads (its main process and workers), stable from round to round so the
    differences hold."""
    if sum(len(t) for t in per_pod) <= limit:
        return [tid for tids in per_pod for tid in tids]
    share = max(MIN_THREADS_PER_POD, limit // max(1, len(per_pod)))
    return [tid for tids in per_pod for tid in sorted(tids)[:share]]


@dataclass
class RunQueueReader:
    """Reads the schedstat of the online pods' threads (the thin adapter)."""

    proc_root: Path = Path("/proc")
    clock_ns: object = None
    _dirs: tuple[object, list[list[Path]]] | None = field(default=None, repr=False)
    #: the online pods' thread ids as last read, and the reads since: the thread lists are read
    #: again every TIDS_REREAD_ROUNDS reads, when the pods change, or when a thread has gone
    #: (opening the v1 ``tasks`` files every round was a seventh of the agent's CPU)
    _tids: list[list[int]] | None = field(default=None, repr=False)
    _tids_age: int = field(default=0, repr=False)

    def task_files(self, state: NodeState) -> list[list[Path]]:
        """Per online pod, the ``tasks`` / ``cgroup.threads`` files below its cpu cgroup; the
        walk is redone only when the pods change (containers come with pod changes)."""
        online = tuple(p for p in state.pods if p.tidal_level in ONLINE)
        key = (online, state.layout, state.cpu_controller_root)
        if self._dirs is None or self._dirs[0] != key:
            files = [_task_files(cpu_dir(state, state.layout.pod_relpath(pod.uid, pod.qos_class)),
                                 state.layout.threads_file) for pod in online]
            self._dirs = (key, files)
        return self._dirs[1]

    def thread_ids(self, state: NodeState) -> list[list[int]]:
        """Per online pod, its threads' ids: read again every ``TIDS_REREAD_ROUNDS`` calls, and
        whenever the pods changed or the last read found a thread or container gone."""
        dirs = self._dirs
        files = self.task_files(state)
        if self._tids is not None and self._dirs is dirs and self._tids_age < TIDS_REREAD_ROUNDS:
            self._tids_age += 1
            return self._tids
        per_pod: list[list[int]] = []
        stale = False
        for pod_files in files:
            tids: list[int] = []
            for tasks in pod_files:
                try:
                    tids += map(int, read_small(tasks).split())
                except OSError:
                    stale = True  # container gone: walk again next round
            per_pod.append(tids)
        self._tids, self._tids_age = per_pod, 1
        if stale:
            self._dirs = None
        return per_pod

    def read(self, state: NodeState) -> RunQueueSample:
        import time
        at = (self.clock_ns or time.monotonic_ns)()  # type: ignore[operator]
        threads: dict[int, tuple[int, int]] = {}
        proc = str(self.proc_root)
        for tid in sampled(self.thread_ids(state)):
            try:
                _, wait_ns, count = parse_schedstat(read_small(f"{proc}/{tid}/schedstat"))
            except (OSError, ValueError):
                self._tids = None  # thread exited: read the lists again next round
                continue
            threads[tid] = (wait_ns, count)
        return RunQueueSample(at, threads)


class BECPUInterference:
    """``beIsolation.cpuInterference``: the quota on ``kubepods/besteffort`` follows the online
    tasks' run-queue delay, below suppression's bound."""

    name = "be-cpu-interference"

    def __init__(self, options: Options = DEFAULT_OPTIONS) -> None:
        self.reader = RunQueueReader(options.proc_root)
        self.controller = InterferenceController()
        self._last: RunQueueSample | None = None

    def enabled(self, ctx: Context) -> bool:
        isolation = ctx.policy.be_isolation
        return isolation.cpu_interference.enabled and isolation.cpu_suppression.enabled

    def sense(self, ctx: Context) -> Signal | None:
        if not ctx.supports("schedstat"):
            return None
        sample = self.reader.read(ctx.state)
        out = signal(self._last, sample)
        self._last = sample
        return out

    def plan(self, ctx: Context) -> Plan:
        state = ctx.state
        suppression = state.policy.be_isolation.cpu_suppression
        config = state.policy.be_isolation.cpu_interference
        bound = bound_millicores(state, suppression.threshold_percent / 100, suppression.floor_millicores)
        sig: Signal | None = ctx.observed.get(self.name)
        delay = sig.delay_us if sig is not None else None
        before = self.controller.throttles
        on_interference = quota_on_interference(state.policy, ctx.supports)
        allowance, events = self.controller.step(ctx.now, delay, bound, suppression.floor_millicores,
                                                 state.node_cpus, config, on_interference)
        # no quota in force (onInterference, BE not shown to delay the online tasks): no write, the
        # executor's journal keeps the cgroup's own value (none); the gauge says BE may use every CPU
        writes = () if allowance is None else tuple(quota_writes(state, allowance))
        in_force = int(state.node_cpus * 1000) if allowance is None else allowance
        decisions: list = [Gauge("be_cpu_quota", (), in_force),
                           Gauge("online_runqueue_wait", (), sig.wait_ratio if sig else 0.0),
                           StatusPart(STATUS_KEY, status(sig, allowance, bound, config, ctx.supports("schedstat"),
                                                         self.controller, quota_mode(on_interference)))]
        if delay is not None:
            decisions.append(Gauge("online_runqueue_delay", (), delay))
        if self.controller.throttles > before:
            decisions.append(Counter("be_cpu_throttles", (), self.controller.throttles - before))
        return Plan(writes=writes, decisions=tuple(decisions), effects=tuple(events))

    def undo(self, ctx: Context) -> Plan:
        self.controller = InterferenceController()
        self._last = None
        return EMPTY


def quota_mode(on_interference: bool) -> str:
    """The ``cpuSuppression.quota`` in effect (onInterference without the delay signal is always)."""
    return (SuppressionQuota.ON_INTERFERENCE if on_interference else SuppressionQuota.ALWAYS).value


def status(sig: Signal | None, allowance: int | None, bound: float, config: CPUInterferenceConfig,
           sensing: bool, controller: InterferenceController | None = None, quota: str = "always") -> dict:
    """``status.cpuInterference`` of the NodeProfile (the floor's and the attributed delay as
    ``controller`` last stepped them); ``allowance`` None: no quota in force (``quota``
    onInterference, BE not shown to delay the online tasks)."""
    floor_delay_us = controller.floor_delay_us if controller is not None else None
    attributed_us = controller.attributed_us if controller is not None else None
    out: dict = {"targetDelayMicroseconds": config.target_delay_microseconds, "quota": quota,
                 "quotaInForce": allowance is not None, "boundMillicores": int(bound),
                 "throttled": allowance is not None and allowance < int(bound)}
    if allowance is not None:
        out["beCPUAllowanceMillicores"] = int(allowance)
    elif controller is not None:
        out["roundsAboveTarget"] = controller.rounds_above
    if not sensing:
        out["problem"] = "no per-task schedstat on this kernel: the allowance follows the bound"
    if sig is not None:
        out.update({"onlineThreads": sig.threads, "waitRatio": round(sig.wait_ratio, 4)})
        if sig.delay_us is not None:
            out["runQueueDelayMicroseconds"] = round(sig.delay_us, 1)
            if attributed_us is not None:
                out["attributedDelayMicroseconds"] = round(attributed_us, 1)
    if floor_delay_us is not None:
        out["floorDelayMicroseconds"] = round(floor_delay_us, 1)
    if controller is not None:
        out["floorStandsSeconds"] = int(controller.floor_fresh_seconds)
    return out
