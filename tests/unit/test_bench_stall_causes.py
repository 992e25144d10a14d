# SPDX-License-Identifier: Apache-2.0
"""bench/stall_causes.py: what the online server's long run-queue waits waited behind, from a
scheduler trace; table-driven on trace text in tracefs' format, and once on this kernel's own trace."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import stall_causes  # noqa: E402

NGINX, NGINX2, DAEMON, BE, CLIENT = 100, 101, 300, 400, 500
COMMS = {0: "swapper/{cpu}", NGINX: "nginx", NGINX2: "nginx", DAEMON: "kube-apiserver", BE: "stress-ng-cpu",
         CLIENT: "loadgen-1a2b3c4d"}


def switch(ms: float, cpu: int, prev: int, nxt: int, prev_state: str = "S") -> str:
    return (f"  {COMMS[prev].format(cpu=cpu)}-{prev} [{cpu:03d}] d..2. {1000 + ms / 1000:.6f}: sched_switch: "
            f"prev_comm={COMMS[prev].format(cpu=cpu)} prev_pid={prev} prev_prio=120 prev_state={prev_state} ==> "
            f"next_comm={COMMS[nxt].format(cpu=cpu)} next_pid={nxt} next_prio=120")


def wakeup(ms: float, pid: int, cpu: int, on: int = 0) -> str:
    return (f"  loadgen-1a2b3c4d-{CLIENT} [{on:03d}] d..2. {1000 + ms / 1000:.6f}: sched_wakeup: "
            f"comm={COMMS[pid]} pid={pid} prio=120 target_cpu={cpu:03d}")


def ticks(cpu: int, start_ms: float, end_ms: float, every_ms: float = 4, skip=()) -> list[str]:
    out, t = [], start_ms
    while t <= end_ms:
        if not any(a <= t <= b for a, b in skip):
            out.append(f"  <idle>-0 [{cpu:03d}] d.h1. {1000 + t / 1000:.6f}: hrtimer_expire_entry: "
                       f"hrtimer=00000000deadbeef function=tick_nohz_handler now=1")
        t += every_ms
    return out


def trace(*lines) -> str:
    """A tracefs ``trace`` text of these lines (lists of them flattened)."""
    def flat(items):
        for item in items:
            yield from flat(item) if isinstance(item, list) else [item]
    return "# tracer: nop\n#\n" + "\n".join(flat(lines)) + "\n"


def causes(text: str) -> list[tuple[float, str, dict, float]]:
    found = stall_causes.stalls(stall_causes.parse(text), {NGINX, NGINX2}, {BE})
    return [(round(s.ms, 1), s.cause, s.ran_ms, s.other_cpu_be_ms) for s in found]


BACKGROUND = [ticks(0, 0, 40), switch(0, 0, 0, BE)]  # cpu0 runs the BE job throughout

CASES = {
    "queued behind a daemon while the other CPU runs BE": (trace(
        BACKGROUND, ticks(1, 0, 40), switch(1, 1, 0, DAEMON), wakeup(10, NGINX, 1), switch(20, 1, DAEMON, NGINX)),
        [(10.0, "other", {"kube-apiserver": 10.0}, 10.0)]),
    "queued behind the BE job on its CPU": (trace(
        ticks(0, 0, 40), ticks(1, 0, 40), switch(1, 1, 0, BE), wakeup(10, NGINX, 1), switch(17, 1, BE, NGINX)),
        [(7.0, "be", {"stress-ng-cpu": 7.0}, 0.0)]),
    "the busy CPU's tick missing for 9 ms: the host did not run the vCPU": (trace(
        BACKGROUND, ticks(1, 0, 40, skip=[(9, 18)]), switch(1, 1, 0, BE), wakeup(10, NGINX, 1),
        switch(17, 1, BE, NGINX)),
        [(7.0, "host", {"stress-ng-cpu": 7.0}, 7.0)]),
    "preempted while runnable, then behind the server's other thread": (trace(
        ticks(0, 0, 40), ticks(1, 0, 40), switch(1, 1, 0, NGINX), switch(10, 1, NGINX, NGINX2, prev_state="R+"),
        switch(16.5, 1, NGINX2, NGINX)),
        [(6.5, "online", {"nginx": 6.5}, 0.0)]),
    "a 4 ms wait is not a stall": (trace(
        BACKGROUND, ticks(1, 0, 40), switch(1, 1, 0, DAEMON), wakeup(10, NGINX, 1), switch(14, 1, DAEMON, NGINX)),
        []),
    "two stalls, the client's SCHED_FIFO burst among them; a command's suffix dropped": (trace(
        BACKGROUND, ticks(1, 0, 80), switch(1, 1, 0, CLIENT), wakeup(2, NGINX, 1), switch(8, 1, CLIENT, NGINX),
        switch(9, 1, NGINX, DAEMON), wakeup(20, NGINX, 1), switch(32, 1, DAEMON, NGINX)),
        [(6.0, "other", {"loadgen": 6.0}, 6.0), (12.0, "other", {"kube-apiserver": 12.0}, 12.0)]),
    "a wake-up while it still ran queues nothing; the next real wait counts from its own wake-up": (trace(
        BACKGROUND, ticks(1, 0, 80), switch(1, 1, 0, NGINX), wakeup(2, NGINX, 1), switch(3, 1, NGINX, DAEMON),
        wakeup(50, NGINX, 1), switch(56, 1, DAEMON, NGINX)),
        [(6.0, "other", {"kube-apiserver": 6.0}, 6.0)]),
}


@pytest.mark.parametrize("text, expected", CASES.values(), ids=CASES.keys())
def test_each_long_wait_gets_what_it_waited_behind(text, expected):
    assert causes(text) == expected


def test_an_idle_cpu_stops_its_tick_and_that_is_no_host_stall():
    # the server thread queued on cpu1 which went idle (its tick stopped) before running it:
    # whatever kept it queued, the missing ticks are the idle CPU's, not the hypervisor's
    text = trace(BACKGROUND, ticks(1, 0, 8), ticks(1, 30, 40), switch(1, 1, 0, DAEMON), wakeup(10, NGINX, 1),
                 switch(12, 1, DAEMON, 0), switch(25, 1, 0, NGINX))
    assert [c[1] for c in causes(text)] == ["other"]


def test_the_tick_period_is_the_busy_cpus_and_ignores_other_timers():
    other_timer = "  x-1 [000] d.h1. 1000.001000: hrtimer_expire_entry: hrtimer=0 function=hrtimer_wakeup now=1"
    events = stall_causes.parse(trace(ticks(0, 0, 40), ticks(1, 0, 40), other_timer))
    assert stall_causes.tick_period(events) == pytest.approx(0.004)


def test_summary_and_rounds_pooled():
    found = stall_causes.stalls(stall_causes.parse(CASES[
        "two stalls, the client's SCHED_FIFO burst among them; a command's suffix dropped"][0]), {NGINX}, {BE})
    one = stall_causes.summary(found)
    assert one == {"stalls": 2, "longest_ms": 12.0, "by_cause": {"other": 2},
                   "other_ran_ms": {"kube-apiserver": 12.0, "loadgen": 6.0}, "other_cpu_be_ms": 18.0}
    assert stall_causes.pooled([one, {**one, "longest_ms": 30.0, "trace_overran": True}]) == {
        "stalls": 4, "longest_ms": 30.0, "by_cause": {"other": 4},
        "other_ran_ms": {"kube-apiserver": 24.0, "loadgen": 12.0}, "other_cpu_be_ms": 36.0, "trace_overran": True}
    # a command seventh in every round but first over all of them is counted, not dropped per round
    rounds = [stall_causes.summary([dataclasses.replace(
        found[0], ran_ms={**{f"d{i}-{r}": 5.0 + i for i in range(6)}, "kworker": 4.0})]) for r in range(3)]
    assert list(stall_causes.pooled(rounds)["other_ran_ms"].items())[0] == ("kworker", 12.0)
    assert stall_causes.summary([]) == {"stalls": 0, "longest_ms": 0.0, "by_cause": {}, "other_ran_ms": {},
                                        "other_cpu_be_ms": 0.0}


def settings(tracer) -> dict[str, str]:
    """The tracing settings a recording changes and must put back."""
    return {n: (tracer.root / n).read_text() for n in ("set_event", "tracing_on")}


@pytest.fixture
def tracer():
    """This kernel's tracefs, skipped with the reason where the trace cannot run."""
    if os.geteuid() != 0:
        pytest.skip("tracefs needs root")
    tracer = stall_causes.SchedTrace(buffer_kb=8192)
    if why := tracer.available():
        pytest.skip(why)
    return tracer


def test_this_kernels_trace_is_recorded_parsed_and_its_settings_put_back(tracer):
    before = settings(tracer)
    tracer.start()
    try:
        # a process that sleeps and wakes: its switches and wakeups are in the trace
        child = subprocess.run([sys.executable, "-c", "import os, time\nfor _ in range(20): time.sleep(0.002)\n"
                                "print(os.getpid())"], capture_output=True, text=True, check=True)
    finally:
        tracer.stop()
        text, _ = tracer.collect()
    pid = int(child.stdout)
    events = stall_causes.parse(text)
    assert any(isinstance(e, stall_causes.Switch) and e.next_pid == pid for e in events)
    assert any(isinstance(e, stall_causes.Wakeup) and e.pid == pid for e in events)
    assert settings(tracer) == before


def test_a_recording_that_fails_puts_this_kernels_tracing_back(tracer):
    before = settings(tracer)
    with pytest.raises(RuntimeError, match="the load failed"):
        with tracer.recording():
            assert (tracer.root / "tracing_on").read_text().strip() == "1"
            raise RuntimeError("the load failed")
    assert settings(tracer) == before
    with tracer.recording():  # without an error it only stops: what it recorded is there to collect
        time.sleep(0.01)
    assert (tracer.root / "tracing_on").read_text().strip() == "0"
    text, _ = tracer.collect()
    assert stall_causes.parse(text)
    assert settings(tracer) == before
