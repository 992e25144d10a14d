"""The agent's own threads at SCHED_BATCH (tidal.agent.own_scheduling): the choice, table-driven,
and on this machine's kernel in a child process (so the test process keeps its own policy)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tidal.agent.own_scheduling import to_batch, yield_to_online

OTHER, BATCH, IDLE, FIFO = os.SCHED_OTHER, os.SCHED_BATCH, os.SCHED_IDLE, os.SCHED_FIFO


@pytest.mark.parametrize("policies, moved", [
    ({}, []),
    ({10: OTHER}, [10]),
    ({12: OTHER, 11: OTHER}, [11, 12]),
    ({10: BATCH, 11: OTHER}, [11]),          # already there: nothing to do
    ({10: IDLE, 11: FIFO, 12: OTHER}, [12]),  # an operator's real-time or idle choice is kept
])
def test_only_sched_other_threads_move(policies, moved):
    assert to_batch(policies) == moved


def test_an_unknown_choice_names_the_allowed_ones():
    with pytest.raises(ValueError, match="'fifo' is not one of batch, batch-short-slice, inherit"):
        yield_to_online("fifo")


def _child(choice: str) -> dict:
    """A child process with a thread started before the call (made SCHED_IDLE in one case, nice
    10 in both), calls yield_to_online(choice), starts a thread after it; the policy and nice of each."""
    code = textwrap.dedent(f"""
        import json, os, threading
        from tidal.agent.own_scheduling import yield_to_online
        from tidal.agent.executor.sched import get_attr
        def slice_of(tid):  # None where sched_getattr is not there
            try:
                return get_attr(tid).runtime_ns
            except OSError:
                return None
        ready, done, seen = threading.Event(), threading.Event(), {{}}
        def before():
            tid = threading.get_native_id()
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            seen["idle_before"] = tid
            ready.set(); done.wait()
        def nice_before():
            seen["nice_before"] = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, seen["nice_before"], 10)
            ready2.set(); done.wait()
        ready2 = threading.Event()
        threading.Thread(target=before).start(); ready.wait()
        threading.Thread(target=nice_before).start(); ready2.wait()
        moved = yield_to_online({choice!r})
        after = {{}}
        t = threading.Thread(target=lambda: after.update(tid=threading.get_native_id(),
                                                         policy=os.sched_getscheduler(0),
                                                         slice=slice_of(0)))
        t.start(); t.join()
        out = {{name: [os.sched_getscheduler(tid), os.getpriority(os.PRIO_PROCESS, tid)]
               for name, tid in seen.items()}}
        out["main"] = [os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())]
        out["started_after"] = [after["policy"], None]
        out["slices"] = {{name: slice_of(tid) for name, tid in seen.items()}}
        out["slices"]["main"] = slice_of(0)
        out["slices"]["started_after"] = after["slice"]
        out["moved"] = sorted(moved) == sorted([threading.get_native_id(), seen["nice_before"]])
        done.set()
        print(json.dumps(out))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_batch_moves_every_sched_other_thread_keeps_nice_and_idle_and_new_threads_inherit():
    out = _child("batch")
    assert out["main"] == [BATCH, 0]
    assert out["nice_before"] == [BATCH, 10]         # nice kept
    assert out["idle_before"][0] == IDLE              # an operator's SCHED_IDLE left alone
    assert out["started_after"][0] == BATCH           # a thread started later inherits it
    assert out["moved"] is True                       # the threads moved are the ones returned


def test_inherit_changes_nothing():
    out = _child("inherit")
    assert out["main"] == [OTHER, 0]
    assert out["nice_before"] == [OTHER, 10]
    assert out["started_after"][0] == OTHER


def test_batch_short_slice_also_gives_the_moved_threads_and_new_ones_the_shortest_slice():
    from tidal.agent.executor.sched import probe
    supported, why = probe()
    if not supported:
        pytest.skip(f"this kernel keeps no custom slice: {why}")
    out = _child("batch-short-slice")
    assert out["main"] == [BATCH, 0] and out["nice_before"] == [BATCH, 10] and out["started_after"][0] == BATCH
    assert out["idle_before"][0] == IDLE and out["moved"] is True
    assert out["slices"]["main"] == out["slices"]["nice_before"] == out["slices"]["started_after"] == 100_000
    assert out["slices"]["idle_before"] != 100_000    # the SCHED_IDLE thread is not touched


def test_plain_batch_keeps_the_kernel_s_base_slice():
    out = _child("batch")
    assert out["slices"]["main"] == out["slices"]["started_after"] != 100_000
