# SPDX-License-Identifier: Apache-2.0
"""The agent's own threads yield to online work: ``tidal-agent run`` moves every thread of its
process from SCHED_OTHER to SCHED_BATCH at start (``--own-scheduling batch``, the default), and
the threads it starts later inherit the policy.

A SCHED_BATCH thread weighs on a CPU as a SCHED_OTHER one of the same nice does (its share of
the CPU is unchanged), but its wake-ups never preempt the thread running: the agent's rounds,
which wake every second, wait for the running online request's slice to end (at most a
scheduler tick) instead of cutting into it. Threads at another policy (real-time, SCHED_IDLE:
an operator's choice) are left as they are; so is the nice value. ``--own-scheduling inherit``
leaves the process as it was started.

``--own-scheduling batch-short-slice`` (an option, measured in docs/benchmarks.md) also asks for
the shortest EEVDF slice the kernel keeps (100 µs, Linux >= 6.12; ignored by older kernels): a
running round of the agent keeps the CPU from a waking online thread for at most that long,
instead of the base slice."""
from __future__ import annotations

import logging
import os
from pathlib import Path

from tidal.agent.executor.sched import SCHED_BATCH, SLICE_MIN_US, SchedAttr, get_attr, set_slice

log = logging.getLogger(__name__)

#: the choices of ``--own-scheduling``
CHOICES = ("batch", "batch-short-slice", "inherit")
#: ``batch-short-slice``'s slice: the shortest the kernel keeps
SHORT_SLICE_NS = SLICE_MIN_US * 1000


def to_batch(policies: dict[int, int]) -> list[int]:
    """The threads (tid → current policy) that move to SCHED_BATCH: the SCHED_OTHER ones."""
    return sorted(tid for tid, policy in policies.items() if policy == os.SCHED_OTHER)


def own_policies(task_dir: Path = Path("/proc/self/task")) -> dict[int, int]:
    """Every live thread of this process and its scheduling policy (a thread ended meanwhile is
    left out)."""
    out = {}
    for entry in task_dir.iterdir():
        try:
            out[int(entry.name)] = os.sched_getscheduler(int(entry.name))
        except ProcessLookupError:
            continue
    return out


def yield_to_online(choice: str = "batch", task_dir: Path = Path("/proc/self/task")) -> list[int]:
    """Apply ``--own-scheduling``: with ``batch`` every SCHED_OTHER thread of this process at
    SCHED_BATCH (nice kept). Returns the threads moved; a thread the kernel refuses is logged and
    left as it was (the agent runs either way)."""
    if choice not in CHOICES:
        raise ValueError(f"--own-scheduling: {choice!r} is not one of {', '.join(CHOICES)}")
    if choice == "inherit":
        return []
    moved = []
    for tid in to_batch(own_policies(task_dir)):
        try:
            if choice == "batch-short-slice":
                attr = get_attr(tid)
                set_slice(tid, SchedAttr(SCHED_BATCH, attr.flags, attr.nice, attr.runtime_ns), SHORT_SLICE_NS)
            else:
                os.sched_setscheduler(tid, os.SCHED_BATCH, os.sched_param(0))
            moved.append(tid)
        except ProcessLookupError:
            continue
        except OSError as err:
            log.warning("own scheduling: thread %d stays at its policy: %s", tid, err)
    log.info("own scheduling: %d thread(s) at SCHED_BATCH (wake-ups never preempt online work)%s", len(moved),
             f", slice {SHORT_SLICE_NS // 1000} µs" if choice == "batch-short-slice" else "")
    return moved
