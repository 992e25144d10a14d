# SPDX-License-Identifier: Apache-2.0
"""The online pods' CPU history in the predictors' shape, in bounded memory.

Every sample adds each online (HLS/LS) pod's usage to the current 5-minute step, keeping the
step's maximum (the traces' strict variant: the in-step peak); a pod with no usage yet counts at
its request. When a step ends it is closed into per-pod arrays, aligned on global step numbers
and trimmed to `keep_steps` (14 days and the horizon by default: what Tidal's predictor
calibrates on). `node_history()` rebuilds a `NodeHistory` from them — pods absent at a step
contribute no usage and no request, as in a trace — so any predictor of `tidal.predict` runs on
the node as it was evaluated, on the window only: once the node is older than the window the
predictor's calibration starts at the window's start (`make bench-predict-agent-window` measures
what that changes: docs/overselling.md).

Memory: two 8-byte floats per pod and step; 110 pods × 4,044 steps ≈ 7 MB at most.
"""
from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field
from typing import Callable, Iterable

from tidal.predict.series import NodeHistory

STEP_SECONDS = 300
KEEP_STEPS = 14 * 86400 // STEP_SECONDS + 12
#: Unobserved steps up to this long repeat a pod's last reading; longer gaps count as absent.
MAX_GAP_SECONDS = 3600


def steady_wall_clock(wall: Callable[[], float] = time.time,
                      monotonic: Callable[[], float] = time.monotonic) -> Callable[[], float]:
    """Wall-clock seconds that never step: the wall clock read once, advanced by the monotonic
    clock since. The history's steps are numbered from it, so a wall clock set back (or forward)
    while the agent runs neither reopens a closed step nor skips steps; a restarted agent reads
    the wall clock again (the history store refuses a history saved "in the future")."""
    wall0, mono0 = wall(), monotonic()
    return lambda: wall0 + (monotonic() - mono0)


@dataclass
class _PodSteps:
    first: int
    usage: array = field(default_factory=lambda: array("d"))
    request: array = field(default_factory=lambda: array("d"))

    @property
    def last(self) -> int:
        return self.first + len(self.usage) - 1


class OnlineHistory:
    def __init__(self, step_seconds: int = STEP_SECONDS, keep_steps: int = KEEP_STEPS,
                 max_gap_seconds: int = MAX_GAP_SECONDS) -> None:
        self.step_seconds = step_seconds
        self.keep_steps = keep_steps
        self.max_gap_steps = max_gap_seconds // step_seconds
        self._pods: dict[str, _PodSteps] = {}
        self._open_step: int | None = None
        self._open: dict[str, tuple[float, float]] = {}
        self.newest_closed: int | None = None

    def observe(self, now: float, pods: Iterable[tuple[str, float, float]]) -> bool:
        """Add (uid, usage cores, request cores) of every online pod at time `now` (seconds).
        True when this closed a step (a new prediction is due)."""
        step = int(now // self.step_seconds)
        if self._open_step is not None and step < self._open_step:
            step = self._open_step  # a clock that went back: never reopen a closed step
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
        observed = self.newest_closed  # the last step closed before this one
        for uid, (usage, request) in self._open.items():
            pod = self._pods.get(uid)
            if pod is None or pod.last < step - 1 - self.keep_steps:
                pod = self._pods[uid] = _PodSteps(first=step)
            # Steps nobody observed (the agent was down, or its loop late) right after this
            # pod's last step: up to an hour, its last reading carried forward, as the traces
            # treat missing readings (a pod does not leave and come back under the same uid);
            # longer, or steps observed without the pod: absent, no usage and no request.
            missing = step - 1 - pod.last
            carry = (pod.last == observed and 0 < missing <= self.max_gap_steps)
            while pod.last < step - 1:
                pod.usage.append(pod.usage[-1] if carry else 0.0)
                pod.request.append(pod.request[-1] if carry else 0.0)
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

    @property
    def open_step(self) -> int | None:
        """The step samples are being added to (None before the first sample)."""
        return self._open_step

    def closed_pods(self) -> list[tuple[str, int, array, array]]:
        """Every pod's closed steps by uid: (uid, first step, usage, request). The arrays are the
        live ones (read them, do not modify them); step ``first + i`` is index ``i``."""
        return [(uid, p.first, p.usage, p.request) for uid, p in sorted(self._pods.items())]

    @classmethod
    def restored(cls, newest_closed: int, pods: Iterable[tuple[str, int, array, array]], *,
                 step_seconds: int = STEP_SECONDS, keep_steps: int = KEEP_STEPS) -> "OnlineHistory":
        """A history holding these closed steps (as `closed_pods` gives them) and no open step,
        trimmed to `keep_steps` back from `newest_closed`. The next sample opens its step; steps
        between `newest_closed` and it repeat each pod's last reading up to `MAX_GAP_SECONDS`,
        beyond that they are absent, as for any pod that was away (`_close`)."""
        history = cls(step_seconds=step_seconds, keep_steps=keep_steps)
        history.newest_closed = newest_closed
        oldest = newest_closed - keep_steps + 1
        for uid, first, usage, request in pods:
            if uid in history._pods:
                raise ValueError(f"pod {uid!r} twice")
            if len(usage) != len(request) or not usage:
                raise ValueError(f"pod {uid!r}: {len(usage)} usage and {len(request)} request steps")
            pod = _PodSteps(first=first, usage=array("d", usage), request=array("d", request))
            if pod.last > newest_closed:
                raise ValueError(f"pod {uid!r}: step {pod.last} after the newest closed step {newest_closed}")
            if pod.last < oldest:
                continue
            if pod.first < oldest:
                del pod.usage[: oldest - pod.first]
                del pod.request[: oldest - pod.first]
                pod.first = oldest
            history._pods[uid] = pod
        return history

    def __len__(self) -> int:
        if self.newest_closed is None or not self._pods:
            return 0
        return self.newest_closed - min(p.first for p in self._pods.values()) + 1

    def node_history(self) -> NodeHistory:
        """The closed steps as a NodeHistory (empty when no step has closed yet)."""
        uids = sorted(self._pods)
        if not uids:
            return NodeHistory(uids, self.step_seconds)
        first = min(self._pods[u].first for u in uids)
        # start: the first step's Unix time, so times a predictor derives from it are real ones
        history = NodeHistory(uids, self.step_seconds, start=first * self.step_seconds)
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

    def open_history(self) -> NodeHistory:
        """The step still open, alone, as a one-sample NodeHistory (empty before the first
        sample): what a predictor can say before the first step closes. Every pod counts as on
        the node since the history started, as in a trace's first step."""
        uids = sorted(self._open)
        start = 0 if self._open_step is None else self._open_step * self.step_seconds
        history = NodeHistory(uids, self.step_seconds, start=start)
        if uids:
            history.append([self._open[u][0] for u in uids], [self._open[u][1] for u in uids])
        return history
