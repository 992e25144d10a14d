"""OpenFiles: cgroup files kept open and re-read from offset 0."""
import os

import pytest
from tidal.agent.collector.readers import OpenFiles


def test_rereads_fresh_content_and_sweeps_what_was_not_read(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("1\n")
    b.write_text("2\n")
    files = OpenFiles()
    assert files.read(str(a)) == "1\n" and files.read(str(b)) == "2\n" and len(files) == 2
    with open(a, "r+") as f:  # same inode, new content (as the kernel regenerates cgroup files)
        f.write("3\n")
    assert files.read(str(a)) == "3\n"
    files.sweep()
    files.read(str(a))
    files.sweep()  # b was not read since the last sweep: closed
    assert len(files) == 1
    files.close()
    assert len(files) == 0


def test_a_removed_cgroup_reads_as_missing(hierarchy, real):
    """On this machine's cgroupfs: after rmdir the open descriptor fails (ENODEV); the reopen
    raises FileNotFoundError, as a fresh read does."""
    from tidal_dev.testing.real_cgroups import below_own
    cgroup = real.make(below_own(hierarchy.cpu_root, "cpuacct") / real.name)
    files = OpenFiles()
    path = str(cgroup / "cpuacct.usage")
    assert files.read(path).strip().isdigit()
    os.rmdir(cgroup)
    with pytest.raises(FileNotFoundError):
        files.read(path)
    assert len(files) == 0
