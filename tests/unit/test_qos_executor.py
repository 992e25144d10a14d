"""The executor: one journal (older agents' journals merged into it), the safety check on every
write, and the registry's features in one round."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tidal.agent.executor import Executor
from tidal.agent.executor.cgroupfs import CgroupTrigger, CgroupWrite, RestoreJournal, UnsafeWriteError
from tidal.agent.qos import registry
from tidal.agent.qos.engine import QoSEngine
from tidal_dev.testing.full_disk import fill


def test_older_journals_are_merged_once_and_the_one_journal_wins(tmp_path):
    (tmp_path / "qos-journal.json").write_text(json.dumps({"originals": {"/a": "1"}}))
    (tmp_path / "memory-reclaim-journal.json").write_text(json.dumps({"originals": {"/a": "9", "/b": "2"}}))
    legacy = [tmp_path / "memory-reclaim-journal.json", tmp_path / "numa-journal.json"]  # the second absent
    journal = RestoreJournal(tmp_path / "qos-journal.json", legacy)
    assert journal.originals == {"/a": "1", "/b": "2"}
    assert json.loads((tmp_path / "qos-journal.json").read_text()) == {"originals": {"/a": "1", "/b": "2"}}
    assert json.loads(legacy[0].read_text()) == {"originals": {}} and not legacy[1].exists()
    assert RestoreJournal(tmp_path / "qos-journal.json", legacy).originals == {"/a": "1", "/b": "2"}


def test_the_engine_reads_the_older_journals_beside_its_own(tmp_path):
    names = registry.LEGACY_JOURNALS
    assert "memory-reclaim-journal.json" in names
    (tmp_path / names[0]).write_text(json.dumps({"originals": {"/x/memory.high": "max"}}))
    assert QoSEngine(tmp_path / "qos-journal.json").journal.originals == {"/x/memory.high": "max"}


def test_every_write_and_request_is_checked(tmp_path):
    root = tmp_path / "kubepods"
    (root / "pod").mkdir(parents=True)
    (root / "pod" / "memory.reclaim").write_text("")
    executor = Executor(tmp_path / "j.json")
    for write in ([CgroupWrite(tmp_path / "other", "cpu.shares", "2")],):
        with pytest.raises(UnsafeWriteError):
            executor.execute(write, [], [root])
    with pytest.raises(UnsafeWriteError):
        executor.execute([], [CgroupTrigger(root / "pod" / "..", "memory.reclaim", "1")], [root])
    out = executor.execute([], [CgroupTrigger(root / "pod", "memory.reclaim", "4096"),
                                CgroupTrigger(root / "gone", "memory.reclaim", "4096")], [root])
    assert out.done == {f"{root}/pod/memory.reclaim"} and out.problems == []
    assert (root / "pod" / "memory.reclaim").read_text() == "4096"
    assert executor.journal.originals == {}  # requests are never journalled


def test_one_module_per_feature_with_unique_names():
    features = registry.features()
    names = [f.name for f in features]
    assert len(set(names)) == len(names)
    # the interference control right after suppression: its quota of the same file wins
    assert names[:5] == ["be-cpu-suppression", "be-cpu-interference", "be-cpu-priority", "be-batch-resources",
                         "cpu-burst"]
    for feature in features:
        assert callable(feature.enabled) and callable(feature.plan) and callable(feature.undo)


def test_resctrl_intents_touch_only_the_agents_groups(tmp_path):
    from tidal.agent.executor.resctrl import ResctrlExecutor, ResctrlGroup, ResctrlRemoveGroups, UnsafeGroupError
    (tmp_path / "other").mkdir()
    (tmp_path / "tidal-be").mkdir()
    executor, problems = ResctrlExecutor(remove=Path.rmdir), []
    for name in ("other", "tidal-../x", "../tidal-x"):
        with pytest.raises(UnsafeGroupError):
            executor.execute([ResctrlGroup(tmp_path, name, {})], set(), problems)
    done: set[str] = set()
    executor.execute([ResctrlRemoveGroups(tmp_path)], done, problems)
    assert problems == [] and sorted(p.name for p in tmp_path.iterdir()) == ["other"]
    assert done == {f"{tmp_path}/tidal-*"}


def test_tc_intents_name_only_host_veths_and_their_ifb_devices():
    from tidal.agent.executor.tc import TcExecutor, TcShape, TcShapeOnly, UnsafeShapeError

    class Recorder:
        def __init__(self):
            self.calls = []

        def shape(self, veth, ifindex, bps):
            self.calls.append((veth, ifindex, bps))

        def shaped(self):
            return {}

    shaper = Recorder()
    executor = TcExecutor(shaper)
    for bad in (TcShape("tfb12", 12, 1000), TcShape("eth0; rm", 3, 1000), TcShape("veth1", 0, 1000)):
        with pytest.raises(UnsafeShapeError):
            executor.execute([TcShapeOnly((bad,))], set(), [])
    done: set[str] = set()
    executor.execute([TcShapeOnly((TcShape("veth1", 7, 1000),))], done, [])
    executor.execute([TcShapeOnly((TcShape("veth1", 7, 1000),))], done, [])  # same rate: not again
    assert shaper.calls == [("veth1", 7, 8000)] and done == {"tc:tfb7"}


def test_restore_is_every_features_undo_and_the_journal(tmp_path):
    from tidal.agent.qos.feature import Options
    from tidal.agent.qos.resctrl import CacheLimitsFeature
    resctrl = tmp_path / "resctrl"
    (resctrl / "tidal-be").mkdir(parents=True)
    (resctrl / "mine").mkdir()
    value = tmp_path / "kubepods" / "cpu.idle"
    value.parent.mkdir()
    value.write_text("1")
    (tmp_path / "qos-journal.json").write_text(json.dumps({"originals": {str(value): "0"}}))
    options = Options(resctrl_root=resctrl)
    engine = QoSEngine(tmp_path / "qos-journal.json", options=options, features=[CacheLimitsFeature(options)])
    assert engine.restore() == []
    assert value.read_text() == "0" and sorted(p.name for p in resctrl.iterdir()) == ["mine"]
    assert engine.journal.originals == {}


@pytest.fixture
def full_disk(tmp_path):
    """A real, full filesystem for the journal: a 64 KiB tmpfs filled up (root only)."""
    import subprocess
    mount = tmp_path / "state"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a tmpfs (a real full disk for the journal)")
    try:
        fill(mount / "filler")
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_journal_on_a_full_disk_leaves_the_cgroup_alone_and_reports_it(tmp_path, full_disk):
    """Issue 15, disk full for the agent's journal: a file whose original cannot be journalled
    is not changed (nothing could put it back), the write is an error naming the journal and
    the reason, not an exception that would crash the agent; once there is room, it goes on."""
    root = tmp_path / "kubepods"
    (root / "pod").mkdir(parents=True)
    (root / "pod" / "cpu.shares").write_text("1024")
    executor = Executor(full_disk / "qos-journal.json")
    out = executor.execute([CgroupWrite(root / "pod", "cpu.shares", "2")], [], [root])
    ((write, problem),) = out.result.errors
    assert (root / "pod" / "cpu.shares").read_text() == "1024"
    assert "not changed" in problem and "qos-journal.json" in problem and "No space left" in problem, problem
    assert executor.journal.originals == {}
    (full_disk / "filler").unlink()
    out = executor.execute([CgroupWrite(root / "pod", "cpu.shares", "2")], [], [root])
    assert out.result.errors == [] and (root / "pod" / "cpu.shares").read_text() == "2"
    assert json.loads((full_disk / "qos-journal.json").read_text())["originals"] == {
        str(root / "pod" / "cpu.shares"): "1024"}


#: the executor in a process of its own (run without CAP_DAC_OVERRIDE): one write, its errors as JSON
_EXECUTE_ONE = """
import json, sys
from pathlib import Path
from tidal.agent.executor import Executor
from tidal.agent.executor.cgroupfs import CgroupWrite
cgroup, file, value, journal = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
out = Executor(journal).execute([CgroupWrite(cgroup, file, value)], [], [cgroup.parent])
print(json.dumps({"errors": [problem for _, problem in out.result.errors], "written": len(out.result.written)}))
"""


def test_a_write_the_kernel_refuses_with_eacces_is_an_error_not_a_crash(hierarchy, real, tmp_path):
    """Issue 15, cgroup writes refused with EACCES, for real: a BE pod's memory file made read-only
    (0444) on this machine's cgroupfs, and the executor run as root without CAP_DAC_OVERRIDE (as a
    container without it would): the write is an error naming the file and the kernel's
    "Permission denied", the value stays, and the Event names it."""
    import shutil
    import subprocess
    import sys

    from tidal.agent.collector.cgroups import CgroupVersion
    from tidal.agent.qos.node_qos import write_failure_event
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux) to drop CAP_DAC_OVERRIDE")
    cgroup = real.make(hierarchy.memory_root / real.name / "pod")
    file = "memory.soft_limit_in_bytes" if hierarchy.version is CgroupVersion.V1 else "memory.high"
    if not (cgroup / file).exists():
        pytest.skip(f"{cgroup / file} not here (the memory controller not enabled for this cgroup)")
    before = (cgroup / file).read_text()
    (cgroup / file).chmod(0o444)
    child = subprocess.run(["setpriv", "--bounding-set=-dac_override,-fowner", "--inh-caps=-dac_override,-fowner",
                            sys.executable, "-c", _EXECUTE_ONE, str(cgroup), file, str(256 << 20),
                            str(tmp_path / "qos-journal.json")], capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr
    out = json.loads(child.stdout)
    assert out == {"errors": [f"{cgroup / file}: Permission denied"], "written": 0}
    assert (cgroup / file).read_text() == before
    event = write_failure_event({}, {str(cgroup / file): "Permission denied"})
    assert event.reason == "TidalCgroupWriteFailed" and f"{cgroup / file}: Permission denied" in event.message


@pytest.mark.parametrize("content", [b"", b'{"originals": {"/a": "1"', b"[1, 2]", b'{"originals": 3}', b"\x00\xff\xfe"])
def test_a_journal_that_is_not_one_is_moved_aside_and_the_agent_starts(tmp_path, caplog, content):
    """A journal cut short by a crash (a filesystem that lost the data behind a rename) or garbage:
    moved aside with an error naming it and what is lost; the engine starts with an empty journal
    and keeps journalling, instead of failing at every start (and `tidal-agent restore` with it)."""
    import logging
    path = tmp_path / "qos-journal.json"
    path.write_bytes(content)
    with caplog.at_level(logging.ERROR, logger="tidal.agent.executor.cgroupfs"):
        engine = QoSEngine(path)
    assert engine.journal.originals == {}
    aside = list(tmp_path.glob("qos-journal.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == content
    assert f"restore journal {path} is not a journal" in caplog.text and f"moved to {aside[0]}" in caplog.text
    assert "original values of the cgroup files it named are lost" in caplog.text
    assert engine.restore() == []
    engine.journal.record(tmp_path / "x", "1")
    assert json.loads(path.read_text()) == {"originals": {str(tmp_path / "x"): "1"}}


def test_an_empty_original_is_written_back(hierarchy, real, tmp_path):
    """Real cgroupfs: a v1 cpuset child starts with empty ``cpuset.cpus`` (v2 children too). A
    write of "" (an open with O_TRUNC and no write(2)) changes nothing there, so restoring the
    original took the journal entry off and left the pinning in place."""
    from tidal.agent.collector.cgroups import CgroupVersion
    base = Path("/sys/fs/cgroup") if hierarchy.version is CgroupVersion.V2 else Path("/sys/fs/cgroup/cpuset")
    if not (base / "cpuset.cpus").exists():
        pytest.skip(f"no cpuset controller at {base}")
    from tidal_dev.testing.real_cgroups import below_own
    parent = real.make(below_own(base, None if hierarchy.version is CgroupVersion.V2 else "cpuset") / real.name)
    if hierarchy.version is CgroupVersion.V1:  # a v1 cpuset child needs its parent's cpus and mems
        for file in ("cpuset.cpus", "cpuset.mems"):
            (parent / file).write_text((parent.parent / file).read_text())
    child = real.make(parent / "c1")
    if (child / "cpuset.cpus").read_text().strip() != "":
        pytest.skip("this kernel gives a new cpuset child CPUs (cgroup.clone_children)")
    first = sorted(os.sched_getaffinity(0))[0]
    executor = Executor(tmp_path / "qos-journal.json")
    out = executor.execute([CgroupWrite(child, "cpuset.cpus", str(first))], [], [parent])
    assert out.result.written and (child / "cpuset.cpus").read_text().strip() == str(first)
    assert executor.restore() == []
    assert (child / "cpuset.cpus").read_text().strip() == ""
    assert executor.journal.originals == {}


def test_a_lifted_v1_parent_quota_lets_the_same_round_raise_its_children(hierarchy, real, tmp_path):
    """Real v1 cpu cgroups: a BE parent held to 50 ms a period, its pod and container clamped to
    it; the next round no longer plans the parent (the quota lifted) and raises the children to
    their batch quota. The parent's original (-1) goes back first, so the children's writes are
    not refused (EINVAL) for a round, with a Warning Event each time."""
    from tidal.agent.collector.cgroups import CgroupVersion
    from tidal_dev.testing.real_cgroups import below_own
    if hierarchy.version is not CgroupVersion.V1 or not Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists():
        pytest.skip("the nested quota rule is cgroup v1's")
    be = real.make(below_own(Path("/sys/fs/cgroup/cpu"), "cpu") / real.name / "besteffort")
    pod = real.make(be / "pod1")
    container = real.make(pod / "c1")

    def quota(path, value):
        return CgroupWrite(path, "cpu.cfs_quota_us", str(value))

    executor = Executor(tmp_path / "qos-journal.json")
    out = executor.execute([quota(be, 50_000), quota(pod, 50_000), quota(container, 50_000)], [], [be.parent])
    assert not out.result.errors and len(out.result.written) == 3
    out = executor.execute([quota(pod, 200_000), quota(container, 200_000)], [], [be.parent])
    assert out.result.errors == [] and out.result.restore_problems == []
    assert [(d / "cpu.cfs_quota_us").read_text().strip() for d in (be, pod, container)] == ["-1", "200000", "200000"]
    assert executor.restore() == []
    assert [(d / "cpu.cfs_quota_us").read_text().strip() for d in (be, pod, container)] == ["-1", "-1", "-1"]
