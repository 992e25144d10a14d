# SPDX-License-Identifier: Apache-2.0
"""One sampling step: node and pod usage read, turned into rates, added to the aggregates.

The caller (the agent's loop, which also talks to the Kubernetes API) calls :meth:`Sampler.sample`
about once per ``sample_interval`` with the pods running on the node, described by
:class:`PodInfo`, and gets back a plain dict shaped like the NodeProfile status
(``controllers/tidal/crds/colocation.tidal.io_nodeprofiles.yaml``)::

    {
      "observedAt": "2025-01-02T03:04:05Z",
      "usage": [                                   # node, from /proc; one entry per window
        {"windowSeconds": 60, "samples": 60,
         "cpuMillicores": {"avg": .., "p50": .., "p90": .., "p95": .., "p99": .., "max": ..},
         "memoryBytes":   {"avg": .., "p50": .., "p90": .., "p95": .., "p99": .., "max": ..}},
        ...                                # a window without samples: only windowSeconds, samples 0
      ],
      "systemUsage": [...same shape as usage...],  # node minus Tidal's pods: daemons, kernel, no-level pods
      "perQoS": {
        "HLS": {                                   # likewise "LS" and "BE"
          "pods": 2,
          "requests": {"cpuMillicores": .., "memoryBytes": ..},
          "current":  {"cpuMillicores": .., "memoryBytes": ..},
          "usage": [...same shape as the node's...],
          "podsAtRequest": [
            {"namespace": .., "name": .., "uid": .., "resources": ["cpu"], "reason": ..},
          ],
        },
      },
    }

Definitions:

* Node usage is the kernel's view (``/proc/stat`` busy cores, ``MemTotal - MemAvailable``): it
  includes system daemons and pods of every level. With ``node_memory_cgroup`` (a node that is
  itself a memory cgroup) the node's memory is that cgroup's: its limit as capacity, its working
  set as used (:func:`~.readers.node_memory_in_cgroup`).
* A level's usage is the sum over its pods (``PodInfo.tidal_level``) of each pod's cgroup usage
  (CPU cores from ``cpuacct.usage``/``cpu.stat``, memory working set without inactive page cache).
  A pod with no usage for a resource yet (first sample of its CPU counter, cgroup not created
  yet or unreadable) counts at its request for that resource and is listed in ``podsAtRequest``
  with the reason. Pods without a Tidal level are in no level: in the node usage and the system usage.
* Window samples start with the second step (the first one only sets the CPU baselines), so CPU
  and memory of a window always have the same sample count.
* System usage is node usage minus the usage of Tidal's pods (those with a QoS level: HLS, LS,
  BE), per resource and step, clamped at 0 (:func:`system_usage`): what system daemons, the
  kubelet, the container runtime, the kernel *and pods without a QoS level* use. Those pods are
  not Tidal's to predict or reclaim, but their usage is real: counted here, it is subtracted from
  batch resources and left to them by BE suppression as the daemons' is (subtracted with the pods,
  it would be counted nowhere, and BE could be offered what they use). Pods without usage count
  at their request here too, so system + levels adds up to the node's usage. CPU of
  node and pods is read a few milliseconds apart, so the difference is noisy; a step where the
  pods' sum exceeds the node's usage gives 0, never a negative amount.
* Online usage (HLS + LS, pods without usage at their request as above) has window aggregates of
  its own, for the predictor: :meth:`Sampler.online_stats`. (A percentile of a sum is not the sum
  of percentiles, so it cannot be derived from the per-level windows.)

Per pod the sampler also keeps decaying histograms of measured usage (never of requests), for
predictions: :meth:`Sampler.pod_histograms`. State for pods that are no longer passed in is
dropped at the next step.

Memory bound, with the defaults (windows 60/300/1800 s at 1 s, VPA buckets): 12 window
aggregates (CPU and memory of the node, of each of the 3 levels, of online and of the system) of
36,000 bytes = 432,000 bytes, plus per pod two histograms of 4,224 bytes and one counter reading.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tidal.api.node_profile import Statistics, UsageWindow
from tidal.api.qos import QoSLevel
from tidal.api.schema import to_json

from .cgroups import CgroupLayout, PodQOSClass
from .histogram import (
    CPU_MILLICORES_BUCKETS,
    DEFAULT_WINDOWS,
    MEMORY_BYTES_BUCKETS,
    DecayingHistogram,
    WindowAggregate,
    WindowStats,
)
from .rates import CounterRates, node_cpu_cores
from .readers import (
    CpuTimes,
    ParseError,
    read_cpu_usage_ns,
    read_meminfo,
    read_node_memory_in_cgroup,
    OpenFiles,
    read_inactive_file,
    read_memory_usage,
    working_set_bytes,
    read_proc_stat,
)

__all__ = [
    "DEFAULT_POD_HALF_LIFE",
    "ONLINE_LEVELS",
    "PodInfo",
    "PodUsage",
    "PodHistograms",
    "Sampler",
    "system_usage",
]

#: Half-life of the per-pod histograms: VPA's default for its CPU histograms (24 h).
DEFAULT_POD_HALF_LIFE = 24 * 3600.0

#: The levels whose sum is the node's online usage (DESIGN.md, "The QoS model").
ONLINE_LEVELS = (QoSLevel.HLS, QoSLevel.LS)
#: a pod's memory usage grown by more than this share of it (and :data:`STAT_REREAD_MIN_BYTES`)
#: since its ``memory.stat`` was read has that re-read at once (:meth:`Sampler._working_set`)
STAT_REREAD_GROWTH = 1 / 16
STAT_REREAD_MIN_BYTES = 4 << 20

REASON_FIRST_SAMPLE = "no usage yet: first CPU sample"
REASON_NO_RATE = "no CPU rate this step: counter went back or the interval was too short"


@dataclass(frozen=True)
class PodInfo:
    """What the sampler needs to know about one pod on the node.

    Requests are the pod's total over its containers. For a BE pod they are its
    ``kubernetes.io/batch-cpu`` (millicores) and ``kubernetes.io/batch-memory`` (bytes) requests,
    since admission moves its native requests there.
    """

    uid: str
    namespace: str
    name: str
    qos_class: PodQOSClass
    tidal_level: QoSLevel | None = None
    container_ids: tuple[str, ...] = ()
    cpu_request_millicores: int = 0
    memory_request_bytes: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "qos_class", PodQOSClass(self.qos_class))
        if self.tidal_level is not None:
            object.__setattr__(self, "tidal_level", QoSLevel(self.tidal_level))
        object.__setattr__(self, "container_ids", tuple(self.container_ids))
        for name in ("cpu_request_millicores", "memory_request_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"PodInfo {self.namespace}/{self.name}: {name} must be a non-negative int, "
                    f"got {value!r}"
                )


@dataclass(frozen=True)
class PodUsage:
    """One pod's usage at one step; None where not measured (``reasons`` says why)."""

    pod: PodInfo
    cpu_millicores: float | None
    memory_bytes: int | None
    reasons: tuple[str, ...] = ()

    @property
    def cpu_or_request(self) -> float:
        """CPU millicores as measured, or the pod's request while not measured: how every part of
        the agent counts a pod it has no usage for yet."""
        return self.pod.cpu_request_millicores if self.cpu_millicores is None else self.cpu_millicores

    @property
    def memory_or_request(self) -> float:
        """Memory bytes as measured, or the pod's request while not measured."""
        return self.pod.memory_request_bytes if self.memory_bytes is None else self.memory_bytes

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(
            name
            for name, value in (("cpu", self.cpu_millicores), ("memory", self.memory_bytes))
            if value is None
        )


@dataclass(frozen=True)
class PodHistograms:
    cpu_millicores: DecayingHistogram
    memory_bytes: DecayingHistogram


_StatsPair = tuple[WindowStats | None, WindowStats | None]


def _utcnow() -> datetime:
    return datetime.now(UTC)


def system_usage(node: float | None, pods: float | None) -> float | None:
    """Usage outside Tidal's pods, for one resource: ``node - pods``, clamped at 0.

    ``node`` is the kernel's view of the whole node, ``pods`` the sum over the pods with a QoS
    level on it (pods without one stay in the difference, with the daemons: module docstring). None
    when either is unknown or not a finite number (no node sample yet: nothing to subtract
    from). Node and pods are read a few milliseconds apart, so the pods' sum can exceed the
    node's usage: that gives 0, not a negative amount.
    """
    if node is None or pods is None or isinstance(node, bool) or isinstance(pods, bool):
        return None
    if not (math.isfinite(node) and math.isfinite(pods)):
        return None
    return max(0.0, float(node) - max(0.0, float(pods)))


def _statistics(stats: WindowStats) -> Statistics:
    return Statistics(**{
        key: max(0, int(round(getattr(stats, key))))
        for key in ("avg", "p50", "p90", "p95", "p99", "max")
    })


def usage_list(cpu: WindowAggregate, memory: WindowAggregate, now: float) -> list[dict[str, Any]]:
    """The NodeProfile ``usage[]`` entries of a CPU/memory pair of window aggregates."""
    entries = []
    for window in cpu.windows:
        cpu_stats, memory_stats = cpu.stats(window, now), memory.stats(window, now)
        if cpu_stats is not None and memory_stats is not None:
            entry = UsageWindow(window_seconds=window, samples=cpu_stats.samples,
                                cpu_millicores=_statistics(cpu_stats),
                                memory_bytes=_statistics(memory_stats))
        else:
            entry = UsageWindow(window_seconds=window, samples=0)
        entries.append(to_json(entry))
    return entries


class _Series:
    """CPU and memory window aggregates of one thing (the node, or one level)."""

    def __init__(self, windows: tuple[int, ...], sample_interval: float) -> None:
        self.cpu = WindowAggregate(windows, sample_interval)
        self.memory = WindowAggregate(windows, sample_interval)

    def add(self, cpu_millicores: float, memory_bytes: float, now: float) -> None:
        self.cpu.add(cpu_millicores, now)
        self.memory.add(memory_bytes, now)

    def usage(self, now: float) -> list[dict[str, Any]]:
        return usage_list(self.cpu, self.memory, now)

    @property
    def memory_bytes(self) -> int:
        return self.cpu.memory_bytes + self.memory.memory_bytes


class Sampler:
    """Node and pod usage, one :meth:`sample` step at a time (see the module doc)."""

    def __init__(
        self,
        layout: CgroupLayout,
        *,
        proc_root: Path | str = "/proc",
        windows: Iterable[int] = DEFAULT_WINDOWS,
        sample_interval: float = 1.0,
        pod_half_life: float = DEFAULT_POD_HALF_LIFE,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = _utcnow,
        node_memory_cgroup: Path | None = None,
    ) -> None:
        self.layout = layout
        #: the memory cgroup (directory in the memory hierarchy) standing for the node, if any
        self.node_memory_cgroup = node_memory_cgroup
        self.proc_root = Path(proc_root)
        self.windows = tuple(sorted({int(w) for w in windows}))
        self.sample_interval = sample_interval
        self.pod_half_life = pod_half_life
        self._clock = clock
        self._wall_clock = wall_clock
        self._node = _Series(self.windows, sample_interval)
        self._levels = {level: _Series(self.windows, sample_interval) for level in QoSLevel}
        self._online = _Series(self.windows, sample_interval)
        self._system = _Series(self.windows, sample_interval)
        self._cpu_rates = CounterRates()
        self._previous_cpu_times: CpuTimes | None = None
        self._histograms: dict[str, PodHistograms] = {}
        self._pod_usage: dict[str, PodUsage] = {}
        self._dirs: dict[tuple[str, PodQOSClass], tuple[Path, Path]] = {}
        #: per pod: (its memory cgroup, inactive file cache, steps left before a re-read, usage then)
        self._inactive: dict[str, tuple[Path, int, int, int]] = {}
        self._files = OpenFiles()
        #: memory.stat (inactive page cache) is re-read every this many steps per pod
        self.stat_every = 5
        self._now: float | None = None
        self._observed_at: datetime | None = None
        self.node_cpu_millicores: float | None = None
        self.node_memory_bytes: int | None = None
        self.node_memory_total_bytes: int | None = None
        #: every pod's usage at the last step (unmeasured pods at request), and the node's
        #: usage outside Tidal's pods (:func:`system_usage`; None without a node sample)
        self.pods_cpu_millicores: float | None = None
        self.pods_memory_bytes: float | None = None
        self.system_cpu_millicores: float | None = None
        self.system_memory_bytes: float | None = None

    # -- one step --

    def sample(self, pods: Iterable[PodInfo]) -> None:
        """Read everything once and update the aggregates. The NodeProfile fields are computed
        only when asked for (:meth:`summary`, at report time): every window's percentiles of every
        level cost more than the step itself, and the agent steps every second.

        Node files that cannot be read or parsed raise (the node is not observable); a pod
        whose cgroup cannot be read counts at its request (see the module doc).
        """
        pods = {pod.uid: pod for pod in pods}
        now = self._clock()
        cpu_times = read_proc_stat(self.proc_root / "stat")
        meminfo = read_meminfo(self.proc_root / "meminfo")
        if self.node_memory_cgroup is not None:
            meminfo = read_node_memory_in_cgroup(self.node_memory_cgroup, self.layout.version, meminfo)
        cores = node_cpu_cores(self._previous_cpu_times, cpu_times)
        self._previous_cpu_times = cpu_times
        self.node_cpu_millicores = None if cores is None else cores * 1000
        self.node_memory_bytes = meminfo.used_bytes
        self.node_memory_total_bytes = meminfo.total_bytes

        self._forget_all_but(pods)
        self._pod_usage = {uid: self._sample_pod(pod) for uid, pod in pods.items()}
        self._files.sweep()
        self.pods_cpu_millicores, self.pods_memory_bytes = self.pods_current()
        tidal_cpu, tidal_memory = self._current(lambda pod: pod.tidal_level is not None)
        self.system_cpu_millicores = system_usage(self.node_cpu_millicores, tidal_cpu)
        # on the pods' basis (active page cache counted): MemAvailable's "used" lost the pods' from it
        node_working_set = meminfo.working_set_bytes if meminfo.working_set_bytes is not None else meminfo.used_bytes
        self.system_memory_bytes = system_usage(node_working_set, tidal_memory)

        if self.node_cpu_millicores is not None:
            self._node.add(self.node_cpu_millicores, self.node_memory_bytes, now)
            if self.system_cpu_millicores is not None and self.system_memory_bytes is not None:
                self._system.add(self.system_cpu_millicores, self.system_memory_bytes, now)
            online_cpu = online_memory = 0.0
            for level, series in self._levels.items():
                cpu, memory = self.level_current(level)
                series.add(cpu, memory, now)
                if level in ONLINE_LEVELS:
                    online_cpu, online_memory = online_cpu + cpu, online_memory + memory
            self._online.add(online_cpu, online_memory, now)
        self._now = now
        self._observed_at = self._wall_clock()

    def _forget_all_but(self, pods: dict[str, PodInfo]) -> None:
        self._cpu_rates.retain(pods)
        self._dirs = {k: v for k, v in self._dirs.items() if k[0] in pods}
        self._inactive = {k: v for k, v in self._inactive.items() if k in pods}
        for uid in [uid for uid in self._histograms if uid not in pods]:
            del self._histograms[uid]

    def _sample_pod(self, pod: PodInfo) -> PodUsage:
        dirs = self._dirs.get((pod.uid, pod.qos_class))
        if dirs is None:
            relpath = self.layout.pod_relpath(pod.uid, pod.qos_class)
            dirs = self._dirs[pod.uid, pod.qos_class] = (self.layout.cpu_dir(relpath), self.layout.memory_dir(relpath))
        version = self.layout.version
        reasons = []
        histograms = self._histograms.get(pod.uid)
        if histograms is None:
            histograms = self._histograms[pod.uid] = PodHistograms(
                DecayingHistogram(CPU_MILLICORES_BUCKETS, self.pod_half_life),
                DecayingHistogram(MEMORY_BYTES_BUCKETS, self.pod_half_life),
            )

        cpu_millicores = None
        cpu_dir = dirs[0]
        try:
            usage_ns = read_cpu_usage_ns(cpu_dir, version, self._files.read)
        except FileNotFoundError:
            self._cpu_rates.forget(pod.uid)
            reasons.append(f"no cgroup {cpu_dir}")
        except (OSError, ParseError) as error:
            self._cpu_rates.forget(pod.uid)
            reasons.append(f"cannot read CPU usage: {error}")
        else:
            at = self._clock()
            first = pod.uid not in self._cpu_rates
            cores = self._cpu_rates.update(pod.uid, usage_ns, at)
            if cores is None:
                reasons.append(REASON_FIRST_SAMPLE if first else REASON_NO_RATE)
            else:
                cpu_millicores = cores * 1000
                histograms.cpu_millicores.add(cpu_millicores, 1.0, at)

        memory_bytes = None
        memory_dir = dirs[1]
        try:
            memory_bytes = self._working_set(pod.uid, memory_dir, version)
        except FileNotFoundError:
            reason = f"no cgroup {memory_dir}"
            if reason not in reasons:  # on v2 the CPU and memory directories are the same
                reasons.append(reason)
        except (OSError, ParseError) as error:
            reasons.append(f"cannot read memory usage: {error}")
        else:
            histograms.memory_bytes.add(float(memory_bytes), 1.0, self._clock())
        return PodUsage(pod, cpu_millicores, memory_bytes, tuple(reasons))

    def _working_set(self, uid: str, memory_dir: Path, version) -> int:
        """Usage every step; the inactive page cache subtracted from it (``memory.stat``, the
        larger file) re-read every ``stat_every`` steps: it moves slowly, and reading it for
        every pod every second was a third of the agent's CPU. Re-read at once when the usage
        grew by more than :data:`STAT_REREAD_GROWTH` of what it was at the last read (at least
        :data:`STAT_REREAD_MIN_BYTES`): new file cache — a file written or read — starts
        inactive, and counted as working set until the next read it made a peak of the window
        out of nothing. And when the pod's memory cgroup is another (the BE idle group)."""
        usage = read_memory_usage(memory_dir, version, self._files.read)
        cached = self._inactive.get(uid)
        grew = cached is not None and usage - cached[3] > max(STAT_REREAD_MIN_BYTES, cached[3] * STAT_REREAD_GROWTH)
        if cached is None or cached[0] != memory_dir or cached[2] <= 0 or grew:
            # after growth, read once more next step too: the kernel flushes memory.stat lazily
            # (up to 2 s), so this read may not have the new cache yet
            steps = min(2, self.stat_every) if grew else self.stat_every
            cached = (memory_dir, read_inactive_file(memory_dir, version, self._files.read), steps, usage)
        self._inactive[uid] = (*cached[:2], cached[2] - 1, cached[3])
        return working_set_bytes(usage, cached[1])

    def level_current(self, level: QoSLevel) -> tuple[float, float]:
        """(CPU millicores, memory bytes) of a level at the last step, unmeasured pods at request."""
        return self._current(lambda pod: pod.tidal_level is level)

    def pods_current(self) -> tuple[float, float]:
        """(CPU millicores, memory bytes) of every pod on the node at the last step — every level
        and pods without a Tidal level — unmeasured pods at request."""
        return self._current(lambda pod: True)

    def _current(self, selected: Callable[[PodInfo], bool]) -> tuple[float, float]:
        cpu = memory = 0.0
        for usage in self._pod_usage.values():
            if not selected(usage.pod):
                continue
            cpu += usage.cpu_or_request
            memory += usage.memory_or_request
        return cpu, memory

    # -- results --

    def pod_usages(self) -> list[PodUsage]:
        """Every pod's usage at the last step (``cpu_millicores`` None where not measured)."""
        return list(self._pod_usage.values())

    def pod_usage(self, uid: str) -> PodUsage | None:
        """The pod's usage at the latest step."""
        return self._pod_usage.get(uid)

    def pod_histograms(self, uid: str) -> PodHistograms | None:
        return self._histograms.get(uid)

    def _stats(self, series: _Series, window_seconds: int) -> _StatsPair:
        if self._now is None:
            return None, None
        now = self._now
        return series.cpu.stats(window_seconds, now), series.memory.stats(window_seconds, now)

    def online_stats(self, window_seconds: int) -> _StatsPair:
        """(CPU millicores, memory bytes) statistics of HLS + LS usage over the trailing window.

        Pods without usage are already in at their request. None when the window has no sample.
        """
        return self._stats(self._online, window_seconds)

    def level_stats(self, level: QoSLevel, window_seconds: int) -> _StatsPair:
        """Like :meth:`online_stats`, for one level."""
        return self._stats(self._levels[QoSLevel(level)], window_seconds)

    def system_stats(self, window_seconds: int) -> _StatsPair:
        """Like :meth:`online_stats`, for the node's usage outside the pods (:func:`system_usage`)."""
        return self._stats(self._system, window_seconds)

    @property
    def memory_bytes(self) -> int:
        """Bytes held by the aggregates and per-pod histograms now (sample storage only)."""
        total = self._node.memory_bytes + self._online.memory_bytes + self._system.memory_bytes
        total += sum(s.memory_bytes for s in self._levels.values())
        for h in self._histograms.values():
            total += h.cpu_millicores.memory_bytes + h.memory_bytes.memory_bytes
        return total

    def summary(self) -> dict[str, Any]:
        """The NodeProfile status fields this sampler owns, as of the latest step."""
        if self._now is None or self._observed_at is None:
            raise RuntimeError("summary() before the first sample()")
        now = self._now
        per_qos = {}
        for level, series in self._levels.items():
            pods = [u for u in self._pod_usage.values() if u.pod.tidal_level is level]
            cpu, memory = self.level_current(level)
            per_qos[level.value] = {
                "pods": len(pods),
                "requests": {
                    "cpuMillicores": sum(u.pod.cpu_request_millicores for u in pods),
                    "memoryBytes": sum(u.pod.memory_request_bytes for u in pods),
                },
                "current": {"cpuMillicores": _whole(cpu), "memoryBytes": _whole(memory)},
                "usage": series.usage(now),
                "podsAtRequest": [
                    {
                        "namespace": u.pod.namespace,
                        "name": u.pod.name,
                        "uid": u.pod.uid,
                        "resources": list(u.missing),
                        "reason": "; ".join(u.reasons),
                    }
                    for u in pods
                    if u.missing
                ],
            }
        return {
            "observedAt": self._observed_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "usage": self._node.usage(now),
            "systemUsage": self._system.usage(now),
            "perQoS": per_qos,
        }


def _whole(value: float) -> int:
    return max(0, int(round(value))) if math.isfinite(value) else 0
