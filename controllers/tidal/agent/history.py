"""The online pods' CPU history in the predictors' shape, in bounded memory.

Every sample adds each online (HLS/LS) pod's usage to the current 5-minute step, keeping the
step's maximum (the traces' strict variant: the in-step peak); a pod with no usage yet counts at
its request. When a step ends it is closed into per-pod arrays, aligned on global step numbers
and trimmed to `keep_steps` (14 days and the horizon by default: what Tidal's predictor
calibrates on). `node_history()` rebuilds a `NodeHistory` from them — pods absent at a step
contribute no usage and no request, as in a trace — so any predictor of `tidal.predict` runs on
the node exactly as it was evaluated.

Memory: two 8-byte floats per pod and step; 110 pods × 4,044 steps ≈ 7 MB at most.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Iterable

from tidal.predict.series import NodeHistory

STEP_SECONDS = 300
KEEP_STEPS = 14 * 86400 // STEP_SECONDS + 12


@dataclass
class _PodSteps:
    first: int
    usage: array = field(default_factory=lambda: array("d"))
    request: array = field(default_factory=lambda: array("d"))

    @property
    def last(self) -> int:
        return self.first + len(self.usage) - 1


class OnlineHistory:
    def __init__(self, step_seconds: int = STEP_SECONDS, keep_steps: int = KEEP_STEPS) -> None:
        self.step_seconds = step_seconds
        self.keep_steps = keep_steps
        self._pods: dict[str, _PodSteps] = {}
        self._open_step: int | None = None
        self._open: dict[str, tuple[float, float]] = {}
        self.newest_closed: int | None = None

    def observe(self, now: float, pods: Iterable[tuple[str, float, float]]) -> bool:
        """Add (uid, usage cores, request cores) of every online pod at time `now` (seconds).
        True when this closed a step (a new prediction is due)."""
        step = int(now // self.step_seconds)
        closed = False
        if self._open_step is not None and step > self._open_step:
            self._close()
            closed = True
        self._open_step = step
        for uid, usage, request in pods:
            previous = self._open.get(uid, (0.0, 0.0))
            self._open[uid] = (max(previous[0], max(0.0, usage)), max(previous[1], max(0.0, request)))
        return closed

    def _close(self) -> None:
        step = self._open_step
        for uid, (usage, request) in self._open.items():
            pod = self._pods.get(uid)
            if pod is None or pod.last < step - 1 - self.keep_steps:
                pod = self._pods[uid] = _PodSteps(first=step)
            while pod.last < step - 1:  # absent for a while: no usage, no request
                pod.usage.append(0.0)
                pod.request.append(0.0)
            pod.usage.append(usage)
            pod.request.append(request)
        self._open = {}
        self.newest_closed = step
        oldest = step - self.keep_steps + 1
        for uid in list(self._pods):
            pod = self._pods[uid]
            if pod.last < oldest:
                del self._pods[uid]
            elif pod.first < oldest:
                del pod.usage[: oldest - pod.first]
                del pod.request[: oldest - pod.first]
                pod.first = oldest

    def __len__(self) -> int:
        if self.newest_closed is None or not self._pods:
            return 0
        return self.newest_closed - min(p.first for p in self._pods.values()) + 1

    def node_history(self) -> NodeHistory:
        """The closed steps as a NodeHistory (empty when no step has closed yet)."""
        uids = sorted(self._pods)
        history = NodeHistory(uids, self.step_seconds)
        if not uids:
            return history
        first = min(self._pods[u].first for u in uids)
        pods = [self._pods[u] for u in uids]
        for step in range(first, self.newest_closed + 1):
            usage, request = [], []
            for pod in pods:
                i = step - pod.first
                inside = 0 <= i < len(pod.usage)
                usage.append(pod.usage[i] if inside else 0.0)
                request.append(pod.request[i] if inside else 0.0)
            history.append(usage, request)
        return history
