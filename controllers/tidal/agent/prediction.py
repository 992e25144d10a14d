# SPDX-License-Identifier: Apache-2.0
"""The agent's prediction of the online peak, as the policy asks (pure).

`overselling.predictor` picks the statistic (p90, p95, p99 or max) and
`overselling.windowSeconds` the trailing window of the node's *online* usage (HLS + LS);
pods that have no usage yet are added at their request. The result goes to
`NodeProfile.status.predictions`, where the oversell master reads it, beside
`systemUsage` (:func:`system_usage`): the node's usage outside Tidal's pods (daemons, kernel,
pods without a QoS level) over the same window.
"""
from __future__ import annotations

from dataclasses import dataclass

from tidal.agent.collector.histogram import WindowStats

STATISTICS = ("p90", "p95", "p99", "max")

#: The statistic of the node's usage outside Tidal's pods (system daemons, kubelet, runtime,
#: kernel, pods without a QoS level) reported as ``predictions.systemUsage``, over the same window as the online peak.
#: Not ``max``: the system usage is node usage minus the pods' sum, read milliseconds apart,
#: so its extreme samples are mostly that skew (a pod's CPU rate over a shifted interval, a pod
#: starting between the reads); p95 drops them and still follows what the daemons use for
#: more than a few seconds. Not the online predictor's statistic either: that may be a history
#: predictor without one (``tidal``), and the system term should mean the same whichever runs.
SYSTEM_USAGE_STATISTIC = "p95"


@dataclass(frozen=True)
class OnlinePeak:
    cpu_millicores: int
    memory_bytes: int
    predictor: str
    window_seconds: int
    samples: int

    def to_status(self) -> dict:
        return {"predictor": f"{self.predictor}/{self.window_seconds}s", "samples": self.samples,
                "onlinePeak": {"cpuMillicores": self.cpu_millicores, "memoryBytes": self.memory_bytes}}


def online_peak(cpu: WindowStats | None, memory: WindowStats | None, predictor: str, window_seconds: int,
                unmeasured_cpu_millicores: int = 0, unmeasured_memory_bytes: int = 0) -> OnlinePeak | None:
    """None when there is no usage in the window yet: the master then offers nothing."""
    if predictor not in STATISTICS:
        raise ValueError(f"predictor {predictor!r}: allowed {', '.join(STATISTICS)}")
    if cpu is None or memory is None:
        return None
    return OnlinePeak(
        cpu_millicores=max(0, round(getattr(cpu, predictor))) + max(0, unmeasured_cpu_millicores),
        memory_bytes=max(0, round(getattr(memory, predictor))) + max(0, unmeasured_memory_bytes),
        predictor=predictor, window_seconds=window_seconds, samples=min(cpu.samples, memory.samples))


def system_usage(cpu: WindowStats | None, memory: WindowStats | None, window_seconds: int,
                 statistic: str = SYSTEM_USAGE_STATISTIC) -> dict | None:
    """``predictions.systemUsage``: the statistic of the node's usage outside Tidal's pods over the
    window, with where it came from; None when the window has no sample yet."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic {statistic!r}: allowed {', '.join(STATISTICS)}")
    if cpu is None or memory is None:
        return None
    return {"cpuMillicores": max(0, round(getattr(cpu, statistic))),
            "memoryBytes": max(0, round(getattr(memory, statistic))),
            "statistic": statistic, "windowSeconds": window_seconds,
            "samples": min(cpu.samples, memory.samples)}
