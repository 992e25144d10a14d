# SPDX-License-Identifier: Apache-2.0
"""A v1 memory limit put back above the cgroup's memory+swap limit.

The runtime sets memory+swap to the memory limit it is given; Tidal's NRI plugin gives a BE
container its batch memory at creation, so both read 64 MiB. The runtime's original (unlimited)
limit could not be put back: cgroup v1 refuses a memory limit above memory+swap (EINVAL), and the
restore-pending label stayed on the node for good. Real v1 memory cgroups of this machine."""
from __future__ import annotations

from pathlib import Path

import pytest

from tidal.agent.executor.cgroupfs import CgroupWrite, RestoreJournal, apply, restore
from tidal_dev.testing.real_cgroups import below_own

MEMORY = Path("/sys/fs/cgroup/memory")
LIMIT, MEMSW = "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"
MIB64 = str(64 << 20)


@pytest.fixture
def be_container(hierarchy, real):
    """A real v1 memory cgroup, limited as the runtime limits a container created with 64 MiB."""
    if not (MEMORY / MEMSW).exists():
        pytest.skip("no cgroup v1 memory hierarchy with swap accounting at /sys/fs/cgroup/memory")
    cgroup = real.make(below_own(MEMORY, "memory") / real.name / "container")
    unlimited = (cgroup / LIMIT).read_text().strip()
    for file in (LIMIT, MEMSW):  # the memory limit first when lowering (it may not exceed memory+swap)
        (cgroup / file).write_text(MIB64)
    return cgroup, unlimited


def test_the_runtime_s_unlimited_memory_is_put_back_over_memsw(tmp_path, be_container):
    cgroup, unlimited = be_container
    journal = RestoreJournal(tmp_path / "journal.json")
    journal.record(cgroup / LIMIT, unlimited)  # as the agent journals the runtime's BestEffort value
    journal.save()
    assert restore(journal) == []
    assert (cgroup / LIMIT).read_text().strip() == unlimited
    assert (cgroup / MEMSW).read_text().strip() == unlimited
    assert journal.originals == {}


def test_a_limit_raised_by_a_plan_raises_memsw_with_it(tmp_path, be_container):
    cgroup, _ = be_container
    journal = RestoreJournal(tmp_path / "journal.json")
    result = apply([CgroupWrite(cgroup, LIMIT, str(128 << 20))], journal, [cgroup.parent])
    assert result.errors == [] and len(result.written) == 1
    assert (cgroup / LIMIT).read_text().strip() == (cgroup / MEMSW).read_text().strip() == str(128 << 20)
    assert journal.originals == {str(cgroup / LIMIT): MIB64}


def test_a_refusal_memsw_does_not_explain_is_still_an_error(tmp_path, be_container):
    cgroup, _ = be_container
    journal = RestoreJournal(tmp_path / "journal.json")
    journal.record(cgroup / LIMIT, "not a number")
    assert restore(journal) == [(str(cgroup / LIMIT), "Invalid argument")]
    assert (cgroup / MEMSW).read_text().strip() == MIB64
    assert str(cgroup / LIMIT) in journal.originals
