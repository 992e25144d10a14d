# SPDX-License-Identifier: Apache-2.0
"""Online wake-up slice (``features.onlineSchedSlice``): the threads of online (HLS and LS)
pods ask the kernel for a short EEVDF slice, so a thread that wakes for a request runs before a
daemon or a BE task that holds the CPU with the default slice (Linux >= 6.12; capability
``sched.slice``).

Why: BE CPU priority and suppression decide *how much* CPU BE gets, not *when* an online thread
runs. On a node whose daemons (kubelet, runtime, agents) keep the CPUs busy, a waking online
thread waits for the running task's slice (0.75 ms × (1 + log2 CPUs) by default) — the long single
waits a p99 is made of. A short slice gives the online thread's entity, and each cgroup above it,
an earlier deadline, so the kernel lets it preempt at wake-up. Shares, quotas and fairness are
unchanged: the online pod gets no more CPU than before, it gets it sooner.

The plan (pure): one :class:`~tidal.agent.executor.sched.ThreadSlices` per online pod, naming
its containers' thread lists (``tasks`` on cgroup v1, ``cgroup.threads`` on v2) and the slice.
The executor changes only SCHED_OTHER/SCHED_BATCH threads (real-time, deadline and SCHED_IDLE
ones are left alone), keeps their nice, and remembers what each thread had. Switched off (or the
node leaves colocation), the undo puts every changed thread back, and resets threads of online
pods still at the policy's slice (an earlier agent's, before a restart).
"""
from __future__ import annotations

from tidal.agent.collector.sampler import ONLINE_LEVELS
from tidal.agent.executor.sched import ThreadSlices, ThreadSlicesReset

from .feature import EMPTY, Context, Gauge, Plan, StatusPart
from .strategy import NodeState

__all__ = ["CAPABILITY", "OnlineSchedSlice", "online_thread_files"]

CAPABILITY = "sched.slice"


def online_thread_files(state: NodeState) -> dict[str, tuple]:
    """Per online pod (``namespace/name``): its containers' thread lists."""
    out = {}
    for pod in state.pods:
        if pod.tidal_level in ONLINE_LEVELS and pod.containers and not pod.terminating:
            out[f"{pod.namespace}/{pod.name}"] = state.layout.container_thread_files(
                pod.uid, pod.qos_class, (c.id for c in pod.containers))
    return out


class OnlineSchedSlice:
    name = "online-sched-slice"
    uses_usage = False

    def __init__(self) -> None:
        #: the undo named the online pods' thread lists once: the executor resets threads left at
        #: the slice by an earlier agent once, so later undos need not list them (a switched-off
        #: feature listing 50 pods' files every round was 4 % of the agent's CPU)
        self.swept = False

    def enabled(self, ctx: Context) -> bool:
        return ctx.policy.features.online_sched_slice.enabled and ctx.supports(CAPABILITY)

    def plan(self, ctx: Context) -> Plan:
        slice_us = ctx.policy.features.online_sched_slice.slice_microseconds
        pods = online_thread_files(ctx.state)
        writes = tuple(ThreadSlices(files, slice_us) for files in pods.values())
        status = StatusPart("onlineSchedSlice", {"sliceMicroseconds": slice_us, "pods": len(pods)})
        return Plan(writes, (status, Gauge("online_sched_slice_pods", (), len(pods))))

    def undo(self, ctx: Context) -> Plan:
        if ctx.state is None:
            return Plan((ThreadSlicesReset(),))
        if not ctx.supports(CAPABILITY):
            return EMPTY
        files = () if self.swept else tuple(f for group in online_thread_files(ctx.state).values() for f in group)
        self.swept = self.swept or bool(files)
        return Plan((ThreadSlicesReset(files, ctx.policy.features.online_sched_slice.slice_microseconds),),
                    (Gauge("online_sched_slice_pods", (), 0),))
