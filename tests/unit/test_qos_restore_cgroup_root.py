# SPDX-License-Identifier: Apache-2.0
"""`tidal-agent restore` on the host puts back what the agent's pod journalled.

The agent's pod sees the host's cgroups under ``/host/sys/fs/cgroup`` and journals those paths;
the restore command, run on the host as the uninstall docs say, sees them under
``/sys/fs/cgroup``. It used to find none of the pod's paths, take every one for a pod gone, empty
the journal and report success: the values stayed changed and their originals were lost. Here the
pod's view is a second path to this machine's real cgroupfs (a symlink)."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tidal.agent.executor.cgroupfs import CgroupWrite, RestoreJournal, apply
from tidal.agent.run import restore_node
from tidal_dev.testing.real_cgroups import below_own

HOST = Path("/sys/fs/cgroup")
QUOTA = "cpu.cfs_quota_us"


@pytest.fixture
def be_cgroup(hierarchy, real):
    """A real v1 cpu cgroup of this test (as the host names it), its quota unlimited."""
    if not (HOST / "cpu" / QUOTA).exists():
        pytest.skip("no cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu")
    cgroup = real.make(below_own(HOST / "cpu", "cpu") / real.name / "besteffort")
    assert (cgroup / QUOTA).read_text().strip() == "-1"
    return cgroup


def _pod_view(tmp_path: Path) -> Path:
    """The host's cgroupfs as the agent's pod mounts it (``/host/sys/fs/cgroup``)."""
    view = tmp_path / "host/sys/fs/cgroup"
    view.parent.mkdir(parents=True)
    view.symlink_to(HOST)
    return view


def _journal_in_the_pod(state: Path, view: Path, cgroup: Path, value: str = "50000") -> str:
    """What the agent's pod does: journal the original and write ``value``; returns the key."""
    journal = RestoreJournal(state / "qos-journal.json", cgroup_root=view)
    seen = view / cgroup.relative_to(HOST)
    result = apply([CgroupWrite(seen, QUOTA, value)], journal, [view])
    assert [w.key for w in result.written] == [str(seen / QUOTA)], result
    return str(seen / QUOTA)


def test_restore_on_the_host_puts_back_what_the_pod_journalled(tmp_path, be_cgroup):
    state = tmp_path / "state"
    key = _journal_in_the_pod(state, _pod_view(tmp_path), be_cgroup)
    saved = json.loads((state / "qos-journal.json").read_text())
    assert saved == {"originals": {key: "-1"}, "cgroupRoot": str(tmp_path / "host/sys/fs/cgroup")}
    assert (be_cgroup / QUOTA).read_text().strip() == "50000"
    assert asyncio.run(restore_node(None, "n1", state, HOST)) == []
    assert (be_cgroup / QUOTA).read_text().strip() == "-1"
    assert json.loads((state / "qos-journal.json").read_text())["originals"] == {}


def test_a_journal_read_under_another_root_names_the_files_there(tmp_path, be_cgroup):
    state = tmp_path / "state"
    _journal_in_the_pod(state, _pod_view(tmp_path), be_cgroup)
    assert RestoreJournal(state / "qos-journal.json", cgroup_root=HOST).originals == {
        str(be_cgroup / QUOTA): "-1"}
    # read without a root of its own: the recorded one, as written
    assert RestoreJournal(state / "qos-journal.json").cgroup_root == str(tmp_path / "host/sys/fs/cgroup")


@pytest.mark.parametrize("recorded, reader, problem", [
    pytest.param(None, HOST, "not under the cgroup root /sys/fs/cgroup", id="older-journal-without-its-root"),
    pytest.param("/host/sys/fs/cgroup", "/nowhere/sys/fs/cgroup", "no cgroup hierarchy /nowhere/sys/fs/cgroup/cpu",
                 id="wrong-cgroup-root"),
])
def test_a_file_it_cannot_find_for_a_wrong_root_is_kept_and_reported(tmp_path, be_cgroup, recorded, reader,
                                                                    problem):
    """Not found because the journal names another view of the cgroups, not because the pod
    ended: left in the journal, a problem (the restore-pending label stays), the value as it is."""
    state = tmp_path / "state"
    state.mkdir()
    key = f"/host/sys/fs/cgroup/{be_cgroup.relative_to(HOST)}/{QUOTA}"
    data = {"originals": {key: "-1"}} | ({} if recorded is None else {"cgroupRoot": recorded})
    (state / "qos-journal.json").write_text(json.dumps(data))
    (be_cgroup / QUOTA).write_text("50000")
    problems = asyncio.run(restore_node(None, "n1", state, Path(reader)))
    assert len(problems) == 1 and problem in problems[0][1], problems
    kept = json.loads((state / "qos-journal.json").read_text())["originals"]
    assert list(kept.values()) == ["-1"], kept  # the original is not lost
    assert (be_cgroup / QUOTA).read_text().strip() == "50000"


def test_a_cgroup_gone_under_the_right_root_is_still_dropped(tmp_path, be_cgroup):
    state = tmp_path / "state"
    view = _pod_view(tmp_path)
    gone = be_cgroup / "pod-gone"
    gone.mkdir()
    _journal_in_the_pod(state, view, gone)
    gone.rmdir()  # the pod ended
    assert asyncio.run(restore_node(None, "n1", state, HOST)) == []
    assert json.loads((state / "qos-journal.json").read_text())["originals"] == {}
