"""Online wake-up slice (``features.onlineSchedSlice``, issue 14): online pods' threads ask for a
short EEVDF slice.

The plan is checked table-driven; the executor with fake system calls (what it changes, keeps,
reports and puts back) and then on real threads of this process with the real ``sched_setattr``
and ``sched_getattr`` (skipped, with the probe's reason, on a kernel that keeps no custom slice).
"""
from __future__ import annotations

import errno
import threading
import time
from pathlib import Path

import pytest

from tidal.agent.collector.cgroups import CgroupDriver, CgroupHierarchy, CgroupLayout, CgroupVersion, PodQOSClass
from tidal.agent.executor import Executor
from tidal.agent.executor.sched import (Given, SchedAttr, SchedExecutor, ThreadSlices, ThreadSlicesReset, get_attr,
                                        probe, start_time)
from tidal.agent.qos.feature import Context, Gauge, StatusPart, run_alone
from tidal.agent.qos.online_sched_slice import OnlineSchedSlice, online_thread_files
from tidal.agent.qos.policy_status import unsupported_features
from tidal.agent.qos.capabilities import Capability
from tidal.agent.qos.strategy import ContainerState, NodeState, PodState
from tidal.api.feature_support import feature_support
from tidal.api.policy import ColocationPolicy, PolicyValidationError
from tidal.api.qos import QoSLevel

V1 = CgroupLayout(CgroupHierarchy(CgroupVersion.V1, Path("/cg/cpu,cpuacct"), Path("/cg/memory")),
                  CgroupDriver.CGROUPFS)
V2 = CgroupLayout(CgroupHierarchy(CgroupVersion.V2, Path("/cg"), Path("/cg")), CgroupDriver.SYSTEMD)
SUPPORTED = {"sched.slice": True}


def _policy(on: bool = True, slice_us: int = 100) -> ColocationPolicy:
    spec = ColocationPolicy().to_spec()
    spec["features"]["onlineSchedSlice"] = {"enabled": on, "sliceMicroseconds": slice_us}
    return ColocationPolicy.from_spec(spec)


def _pod(name: str, level: QoSLevel | None, qos_class=PodQOSClass.BURSTABLE, containers=("containerd://c1",),
         terminating: bool = False) -> PodState:
    return PodState(f"uid-{name}", qos_class, level, tuple(ContainerState(c) for c in containers),
                    namespace="ns", name=name, terminating=terminating)


def _ctx(pods, policy=None, capabilities=SUPPORTED, layout=V1, enabled=True) -> Context:
    return Context(NodeState(tuple(pods), 2, 0, policy or _policy(), capabilities, layout), enabled)


# -- the plan -----------------------------------------------------------------------------------

def test_it_is_off_by_default_at_the_kernels_shortest_slice() -> None:
    # off: on this machine it did not lower the online p99 beside a BE job (docs/benchmarks.md)
    config = ColocationPolicy().features.online_sched_slice
    assert (config.enabled, config.slice_microseconds) == (False, 100)


@pytest.mark.parametrize("pods, planned", [
    ([_pod("web", QoSLevel.LS)], ["ns/web"]),
    ([_pod("db", QoSLevel.HLS, PodQOSClass.GUARANTEED)], ["ns/db"]),
    ([_pod("batch", QoSLevel.BE, PodQOSClass.BEST_EFFORT)], []),
    ([_pod("plain", None)], []),  # no Tidal level: left alone
    ([_pod("leaving", QoSLevel.LS, terminating=True)], []),
    ([_pod("starting", QoSLevel.LS, containers=())], []),  # no container started yet
    ([_pod("web", QoSLevel.LS), _pod("batch", QoSLevel.BE, PodQOSClass.BEST_EFFORT)], ["ns/web"]),
])
def test_only_online_pods_threads_are_planned(pods, planned) -> None:
    assert list(online_thread_files(_ctx(pods).state)) == planned


def test_the_plan_names_each_containers_thread_list_on_v1_and_v2() -> None:
    pod = _pod("web", QoSLevel.LS, containers=("containerd://a", "containerd://b"))
    for layout, threads in ((V1, "tasks"), (V2, "cgroup.threads")):
        plan = run_alone(OnlineSchedSlice(), _ctx([pod], layout=layout, policy=_policy(slice_us=300)))
        (intent,) = plan.writes
        assert isinstance(intent, ThreadSlices) and intent.slice_us == 300
        assert [f.name for f in intent.thread_files] == [threads, threads]
        assert [f.parent.name.removesuffix(".scope")[-1] for f in intent.thread_files] == ["a", "b"]
        assert all("uid" in str(f) and str(f).startswith("/cg") for f in intent.thread_files)
        assert StatusPart("onlineSchedSlice", {"sliceMicroseconds": 300, "pods": 1}) in plan.decisions
        assert Gauge("online_sched_slice_pods", (), 1) in plan.decisions


@pytest.mark.parametrize("on, capabilities, node_enabled, expected", [
    (True, SUPPORTED, True, ThreadSlices),
    (False, SUPPORTED, True, ThreadSlicesReset),  # switched off: every changed thread back
    (True, SUPPORTED, False, ThreadSlicesReset),  # the node left colocation
    (True, {"sched.slice": False}, True, None),  # the kernel keeps no slice: nothing at all
    (True, {}, True, None),
])
def test_off_unsupported_or_off_the_label(on, capabilities, node_enabled, expected) -> None:
    plan = run_alone(OnlineSchedSlice(), _ctx([_pod("web", QoSLevel.LS)], _policy(on), capabilities,
                                              enabled=node_enabled))
    assert [type(w) for w in plan.writes] == ([expected] if expected else [])
    if expected is ThreadSlicesReset:
        (reset,) = plan.writes
        assert reset.slice_us == 100 and [f.name for f in reset.thread_files] == ["tasks"]


def test_switched_off_the_undo_lists_the_online_threads_once_then_only_resets_its_own() -> None:
    feature, off = OnlineSchedSlice(), _policy(on=False)
    # no online pod yet: nothing listed, so the first pods to come are still listed
    (empty,) = feature.undo(_ctx([_pod("batch", QoSLevel.BE, PodQOSClass.BEST_EFFORT)], off)).writes
    assert empty.thread_files == ()
    (first,) = feature.undo(_ctx([_pod("web", QoSLevel.LS)], off)).writes
    assert [f.name for f in first.thread_files] == ["tasks"]
    # the executor sweeps once; later rounds put back only what this agent changed
    (later,) = feature.undo(_ctx([_pod("web", QoSLevel.LS), _pod("api", QoSLevel.LS)], off)).writes
    assert later.thread_files == () and later.key == first.key


def test_restore_without_a_node_state_puts_back_what_this_agent_changed() -> None:
    plan = OnlineSchedSlice().undo(Context(None, False))  # type: ignore[arg-type]
    assert plan.writes == (ThreadSlicesReset(),)


@pytest.mark.parametrize("value", [0, 99, 100001, "short"])
def test_a_slice_outside_the_kernels_range_is_refused_naming_the_field(value) -> None:
    spec = ColocationPolicy().to_spec()
    spec["features"]["onlineSchedSlice"]["sliceMicroseconds"] = value
    with pytest.raises(PolicyValidationError) as raised:
        ColocationPolicy.from_spec(spec)
    assert "spec.features.onlineSchedSlice.sliceMicroseconds" in str(raised.value)


def test_a_node_without_custom_slices_says_so_in_its_policy_problems_and_the_console() -> None:
    caps = [Capability("sched.slice", False, "the kernel ignores sched_attr.sched_runtime")]
    assert unsupported_features(ColocationPolicy().to_spec(), caps) == []  # off: nothing to say
    problems = unsupported_features(_policy().to_spec(), caps)
    assert any(p.startswith("spec.features.onlineSchedSlice: enabled but not supported") and "sched_runtime" in p
               for p in problems)
    (answer,) = [a for a in feature_support(caps) if a["section"] == "spec.features.onlineSchedSlice"]
    assert answer["supported"] is False and "sched_runtime" in answer["reason"]


# -- the executor, with fake system calls -------------------------------------------------------

BASE = 1_400_000


class Kernel:
    """Threads' attributes; ``gone``: exited threads (ESRCH), ``refused``: EPERM on set;
    ``starts``: start times (default 7)."""

    def __init__(self, threads: dict[int, SchedAttr], gone=(), refused=(), starts=None) -> None:
        self.threads = threads
        self.gone, self.refused = set(gone), set(refused)
        self.starts = starts or {}
        self.gets: list[int] = []
        self.sets: list[tuple[int, int]] = []

    def executor(self, journal: Path | None = None) -> SchedExecutor:
        executor = SchedExecutor(self.get, self.put, self.start, journal)
        executor.base_ns = BASE
        return executor

    def start(self, tid: int) -> int | None:
        return None if tid in self.gone else self.starts.get(tid, 7)

    def get(self, tid: int) -> SchedAttr:
        self.gets.append(tid)
        if tid in self.gone:
            raise OSError(errno.ESRCH, "No such process")
        return self.threads[tid]

    def put(self, tid: int, attr: SchedAttr, slice_ns: int) -> None:
        if tid in self.refused:
            raise OSError(errno.EPERM, "Operation not permitted")
        self.sets.append((tid, slice_ns))
        self.threads[tid] = SchedAttr(attr.policy, attr.flags, attr.nice, slice_ns or BASE)


def _fair(runtime=BASE, nice=0, policy=0) -> SchedAttr:
    return SchedAttr(policy, 0, nice, runtime)


def _tasks(tmp_path: Path, *tids: int, name="c1") -> Path:
    path = tmp_path / name / "tasks"
    path.parent.mkdir(exist_ok=True)
    path.write_text("".join(f"{t}\n" for t in tids))
    return path


def test_fair_threads_get_the_slice_others_are_left_alone(tmp_path) -> None:
    kernel = Kernel({11: _fair(nice=5), 12: _fair(policy=3), 13: _fair(policy=1), 14: _fair(policy=5),
                     15: _fair(100_000), 16: _fair(2_000_000)})
    executor = kernel.executor()
    done, problems = set(), []
    intent = ThreadSlices((_tasks(tmp_path, 11, 12, 13, 14, 15, 16),), 100)
    executor.execute([intent], done, problems)
    # SCHED_OTHER and SCHED_BATCH are changed (nice kept); FIFO (1) and IDLE (5) are not; a thread
    # already at the slice needs no write, but is journalled at the base slice (it inherited the
    # slice from a thread that had it, as a new thread does: switched off, it goes back too)
    assert kernel.sets == [(11, 100_000), (12, 100_000), (16, 100_000)]
    assert kernel.threads[11].nice == 5
    assert (done, problems, executor.changed) == ({intent.key}, [], 3)
    assert executor.originals == {11: Given(7, BASE, 100_000), 12: Given(7, BASE, 100_000),
                                  15: Given(7, BASE, 100_000), 16: Given(7, 2_000_000, 100_000)}


def test_each_thread_is_looked_at_once_and_forgotten_when_it_goes(tmp_path) -> None:
    kernel = Kernel({11: _fair(), 12: _fair(), 13: _fair()})
    executor = kernel.executor()
    tasks = _tasks(tmp_path, 11, 12)
    executor.execute([ThreadSlices((tasks,), 100)], set(), [])
    kernel.gets.clear()
    executor.execute([ThreadSlices((tasks,), 100)], set(), [])
    assert kernel.gets == []  # a steady pod: no system call
    tasks.write_text("12\n13\n")  # 11 exited, 13 started
    executor.execute([ThreadSlices((tasks,), 100)], set(), [])
    assert kernel.gets == [13] and 11 not in executor.seen and 11 not in executor.originals


def test_an_exited_thread_is_no_problem_a_refused_one_is(tmp_path) -> None:
    kernel = Kernel({11: _fair(), 12: _fair(), 13: _fair()}, gone={11}, refused={12})
    executor = kernel.executor()
    done, problems = set(), []
    intent = ThreadSlices((_tasks(tmp_path, 11, 12, 13), tmp_path / "gone" / "tasks"), 100)
    executor.execute([intent], done, problems)
    assert kernel.sets == [(13, 100_000)]
    assert done == set() and problems == [("/proc/12", "[Errno 1] Operation not permitted")]


def test_the_reset_puts_back_each_original_the_base_one_as_0(tmp_path) -> None:
    kernel = Kernel({11: _fair(), 12: _fair(3_000_000), 13: _fair()})
    executor = kernel.executor()
    tasks = _tasks(tmp_path, 11, 12, 13)
    executor.execute([ThreadSlices((tasks,), 100)], set(), [])
    kernel.threads[13] = _fair(500_000)  # the application changed its own slice since
    kernel.sets.clear()
    done: set[str] = set()
    executor.execute([ThreadSlicesReset((tasks,), 100)], done, [])
    # 0 asks for the kernel's base slice again; a slice the application set later is its own
    assert kernel.sets == [(11, 0), (12, 3_000_000)] and "sched-slice:reset" in done
    assert executor.originals == {} and executor.changed == 5
    kernel.sets.clear()
    executor.execute([ThreadSlicesReset((tasks,), 100)], set(), [])
    assert kernel.sets == []  # idempotent: nothing left to put back


def test_a_restarted_agents_reset_finds_the_threads_an_earlier_one_changed(tmp_path) -> None:
    kernel = Kernel({11: _fair(100_000), 12: _fair(), 13: _fair(300_000), 14: _fair(100_000, policy=1)})
    executor = kernel.executor()
    tasks = _tasks(tmp_path, 11, 12, 13, 14)
    executor.execute([ThreadSlicesReset((tasks,), 100)], set(), [])
    assert kernel.sets == [(11, 0)]  # at the policy's slice: the earlier agent's doing
    kernel.gets.clear()
    kernel.threads[15] = _fair(100_000)
    tasks.write_text("11\n12\n13\n14\n15\n")
    executor.execute([ThreadSlicesReset((tasks,), 100)], set(), [])
    # swept once, when the agent starts: a switched-off feature then costs no read, no system call
    assert kernel.gets == [] and kernel.sets == [(11, 0)]


def test_the_node_executor_routes_slices_to_the_sched_executor(tmp_path) -> None:
    kernel = Kernel({11: _fair()})
    executor = Executor(tmp_path / "journal.json", sched=kernel.executor())
    intent = ThreadSlices((_tasks(tmp_path, 11),), 200)
    out = executor.execute([], [intent], [tmp_path])
    assert out.done == {intent.key} and kernel.sets == [(11, 200_000)]
    out = executor.undo([ThreadSlicesReset()], [tmp_path])
    assert out.done == {"sched-slice:reset"} and kernel.sets[-1] == (11, 0)


def test_the_journal_lets_a_new_agent_put_back_what_an_earlier_one_changed(tmp_path) -> None:
    kernel = Kernel({11: _fair(), 12: _fair(3_000_000), 13: _fair()}, starts={13: 9})
    journal = tmp_path / "sched-journal.json"
    kernel.executor(journal).execute([ThreadSlices((_tasks(tmp_path, 11, 12, 13),), 100)], set(), [])
    assert journal.exists()
    kernel.starts[13] = 10  # 13 exited and its TID went to a new thread, which happens to be at 100 µs
    kernel.threads[13] = _fair(100_000)
    kernel.sets.clear()
    restore = kernel.executor(journal)  # tidal-agent restore: no pods, only the journal
    restore.execute([ThreadSlicesReset()], set(), [])
    assert kernel.sets == [(11, 0), (12, 3_000_000)]
    assert restore.originals == {} and '"threads": {}' in journal.read_text()


def test_the_journal_keeps_only_threads_that_are_still_listed(tmp_path) -> None:
    kernel = Kernel({11: _fair(), 12: _fair()})
    journal = tmp_path / "sched-journal.json"
    kernel.executor(journal).execute([ThreadSlices((_tasks(tmp_path, 11, 12),), 100)], set(), [])
    again = kernel.executor(journal)  # restarted after thread 12 exited
    assert set(again.originals) == {11, 12}
    again.execute([ThreadSlices((_tasks(tmp_path, 11),), 100)], set(), [])
    assert set(again.originals) == {11} and '"12"' not in journal.read_text()


def test_an_unreadable_journal_is_reported_and_nothing_is_taken_from_it(tmp_path, caplog) -> None:
    journal = tmp_path / "sched-journal.json"
    journal.write_text('{"threads": {"11": [7, "x"]}}')
    kernel = Kernel({11: _fair(100_000)})
    executor = kernel.executor(journal)
    assert executor.originals == {} and "unreadable" in caplog.text
    executor.execute([ThreadSlicesReset()], set(), [])
    assert kernel.sets == []


def test_a_new_agent_keeps_the_journalled_original_when_it_changes_the_slice_again(tmp_path) -> None:
    kernel = Kernel({11: _fair(2_000_000)})
    journal = tmp_path / "sched-journal.json"
    kernel.executor(journal).execute([ThreadSlices((_tasks(tmp_path, 11),), 100)], set(), [])
    again = kernel.executor(journal)  # restarted, with the policy's slice now 300 µs
    again.execute([ThreadSlices((_tasks(tmp_path, 11),), 300)], set(), [])
    assert again.originals == {11: Given(7, 2_000_000, 300_000)}


# -- the real system calls, on threads of this process ------------------------------------------

SUPPORTED_HERE, WHY_NOT = probe()


@pytest.mark.skipif(not SUPPORTED_HERE, reason=f"this kernel keeps no custom slice: {WHY_NOT}")
def test_real_threads_get_the_slice_and_have_theirs_back(tmp_path) -> None:
    started, stop = threading.Event(), threading.Event()
    tids: list[int] = []

    def worker() -> None:
        tids.append(threading.get_native_id())
        started.set()
        stop.wait()

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert started.wait(10)
        (tid,) = tids
        base = get_attr(tid).runtime_ns
        assert base > 0
        assert start_time(tid) is not None
        journal = tmp_path / "sched-journal.json"
        executor = SchedExecutor(journal=journal)
        done: set[str] = set()
        executor.execute([ThreadSlices((_tasks(tmp_path, tid),), 250)], done, [])
        assert get_attr(tid).runtime_ns == 250_000 and executor.changed == 1
        # tidal-agent restore (a new process: only the journal) puts the thread's own slice back
        SchedExecutor(journal=journal).execute([ThreadSlicesReset()], done, [])
        assert get_attr(tid).runtime_ns == base
        # a new agent without a journal, switched off: a thread at the policy's slice goes back too
        SchedExecutor().execute([ThreadSlices((_tasks(tmp_path, tid),), 250)], done, [])
        SchedExecutor().execute([ThreadSlicesReset((_tasks(tmp_path, tid),), 250)], done, [])
        assert get_attr(tid).runtime_ns == base
    finally:
        stop.set()
        thread.join()


def test_the_probe_leaves_the_agents_threads_as_they_were() -> None:
    before = get_attr(0)
    supported, reason = probe()
    assert get_attr(0) == before
    assert supported or "slice" in reason or reason


def test_a_thread_that_inherited_the_slice_has_the_base_one_back_at_switch_off(tmp_path) -> None:
    """Real threads, in the agent's order: the start's sweep (feature off), switched on (A gets the
    slice), A creates B (B inherits A's slice: nothing for the executor to change), switched off.
    B is put back too, not left at the slice for good."""
    tids: dict[str, int] = {}
    go, stop, made = threading.Event(), threading.Event(), threading.Event()

    def child() -> None:
        tids["B"] = threading.get_native_id()
        made.set()
        stop.wait()

    def parent() -> None:
        tids["A"] = threading.get_native_id()
        go.wait()
        thread = threading.Thread(target=child)
        thread.start()
        stop.wait()
        thread.join()

    a = threading.Thread(target=parent)
    a.start()
    try:
        deadline = time.monotonic() + 10
        while "A" not in tids:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        base = get_attr(tids["A"]).runtime_ns
        executor, done = SchedExecutor(journal=tmp_path / "sched-journal.json"), set()
        executor.execute([ThreadSlicesReset((_tasks(tmp_path, tids["A"]),), 250)], done, [])  # the start's sweep
        executor.execute([ThreadSlices((_tasks(tmp_path, tids["A"]),), 250)], done, [])
        assert get_attr(tids["A"]).runtime_ns == 250_000
        go.set()
        assert made.wait(10)
        assert get_attr(tids["B"]).runtime_ns == 250_000  # inherited
        executor.execute([ThreadSlices((_tasks(tmp_path, tids["A"], tids["B"]),), 250)], done, [])
        executor.execute([ThreadSlicesReset((), 250)], done, [])  # switched off (the sweep was at start)
        assert (get_attr(tids["A"]).runtime_ns, get_attr(tids["B"]).runtime_ns) == (base, base)
    finally:
        go.set()
        stop.set()
        a.join()
