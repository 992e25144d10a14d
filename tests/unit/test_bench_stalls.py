# SPDX-License-Identifier: Apache-2.0
"""bench/stalls.py: PSI totals of a group of processes, parsed and read from the real kernel."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import stalls  # noqa: E402

CPU = "some avg10=1.48 avg60=0.35 avg300=3.99 total=3096499122\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
OLD_CPU = "some avg10=0.00 avg60=0.00 avg300=0.00 total=42\n"  # kernels before 5.13: no full line for cpu


@pytest.mark.parametrize("text, totals", [
    (CPU, {"some": 3096499122, "full": 0}),
    (OLD_CPU, {"some": 42}),
])
def test_parse_totals(text, totals):
    assert stalls.parse_totals(text) == totals


@pytest.mark.parametrize("text", ["", "full total=3\n", "some avg10=1.0\n"])
def test_a_pressure_text_without_some_total_is_an_error_naming_it(text):
    with pytest.raises(ValueError, match="no 'some ... total='"):
        stalls.parse_totals(text)


def test_stall_ms_is_the_difference_per_kind_in_ms():
    before = {"cpu": 1_000, "memory": 0, "memory_full": 0, "io": 500}
    after = {"cpu": 251_000, "memory": 1_500, "memory_full": 1_000, "io": 500}
    assert stalls.stall_ms(before, after) == {"cpu": 250.0, "memory": 1.5, "memory_full": 1.0, "io": 0.0}


def test_read_totals_of_a_directory_of_either_naming(tmp_path):
    (tmp_path / "cpu").write_text(CPU)  # /proc/pressure's names
    (tmp_path / "memory.pressure").write_text("some total=7\nfull total=5\n")  # a cgroup's
    (tmp_path / "io").write_text(OLD_CPU)
    assert stalls.read_totals(tmp_path) == {"cpu": 3096499122, "memory": 7, "memory_full": 5, "io": 42}


SPIN = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass\n"


def test_two_spinners_on_one_cpu_show_as_cpu_stall_of_their_group(tmp_path):
    """The real kernel: two processes pinned to one CPU in a cgroup of the unified hierarchy wait
    for it half the time each, so the group's cpu stall ('some') is a large share of the
    wall time, and there is no memory stall."""
    if not stalls.UNIFIED.is_dir() or os.geteuid() != 0 or not Path("/proc/pressure/cpu").exists():
        pytest.skip("needs root, PSI and a cgroup v2 hierarchy at /sys/fs/cgroup/unified")
    cpu = sorted(os.sched_getaffinity(0))[0]
    procs = [subprocess.Popen([sys.executable, "-c", SPIN.format(s=30)],
                              preexec_fn=lambda: os.sched_setaffinity(0, {cpu})) for _ in range(2)]
    group = stalls.UNIFIED / f"tidal-test-stalls-{os.getpid()}"
    try:
        assert stalls.group_for([p.pid for p in procs], group) == group
        before, start = stalls.read_totals(group), time.monotonic()
        deadline = start + 20
        while True:  # poll: the share shows within a second or two, however loaded the machine
            waited = stalls.stall_ms(before, stalls.read_totals(group))
            elapsed_ms = (time.monotonic() - start) * 1000
            if elapsed_ms > 1000 and waited["cpu"] > 0.3 * elapsed_ms:
                break
            assert time.monotonic() < deadline, f"cpu stall {waited} over {elapsed_ms:.0f} ms"
            time.sleep(0.2)
        assert waited["memory"] < 0.05 * elapsed_ms
    finally:
        for p in procs:
            p.kill()
            p.wait()
        deadline = time.monotonic() + 5
        while group.exists():
            try:
                group.rmdir()
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
