# SPDX-License-Identifier: Apache-2.0
"""bench/damon.py: the machine's DAMON page-out schemes, on a tree shaped as the kernel's sysfs
interface, and read-only on this machine's own."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import damon  # noqa: E402


def kdamond(admin: Path, index: int, state: str, schemes: list[tuple[str, int]]) -> Path:
    d = admin / str(index)
    (d / "contexts" / "0" / "schemes").mkdir(parents=True)
    (d / "state").write_text(f"{state}\n")
    (d / "contexts" / "0" / "schemes" / "nr_schemes").write_text(f"{len(schemes)}\n")
    for i, (action, applied) in enumerate(schemes):
        s = d / "contexts" / "0" / "schemes" / str(i)
        (s / "stats").mkdir(parents=True)
        (s / "action").write_text(f"{action}\n")
        (s / "stats" / "sz_applied").write_text(f"{applied}\n")
    return d


@pytest.fixture
def admin(tmp_path):
    a = tmp_path / "kdamonds"
    a.mkdir()
    (a / "nr_kdamonds").write_text("3\n")
    kdamond(a, 0, "on", [("pageout", 1000), ("stat", 5)])
    kdamond(a, 1, "off", [("pageout", 70)])           # not running: its stats are stale
    kdamond(a, 2, "on", [("lru_prio", 9)])             # running, but pages nothing out
    return a


def test_only_running_pageout_schemes_count_and_their_stats_are_made_current_first(admin):
    assert damon.pageout_bytes(admin) == 1000
    assert (admin / "0" / "state").read_text() == "update_schemes_stats"
    assert (admin / "1" / "state").read_text().strip() == "off"


def test_pause_switches_off_only_the_running_kdamonds_that_page_out_and_resume_puts_them_back(admin):
    paused = damon.pause(admin)
    assert paused == [admin / "0"]
    assert [(admin / str(i) / "state").read_text().strip() for i in range(3)] == ["off", "off", "on"]
    assert damon.pageout_bytes(admin) == 0  # nothing runs that pages out
    damon.resume(paused)
    assert (admin / "0" / "state").read_text().strip() == "on"


def test_a_kernel_without_damon_has_nothing_to_count_or_pause(tmp_path):
    assert damon.pageout_bytes(tmp_path / "absent") == 0
    assert damon.pause(tmp_path / "absent") == []


def test_this_machine_s_damon_is_read_without_being_switched():
    if not damon.ADMIN.is_dir():
        pytest.skip("this kernel has no DAMON sysfs interface")
    before = [(k, (k / "state").read_text().strip()) for k in damon.ADMIN.iterdir() if k.name.isdigit()]
    try:
        first = damon.pageout_bytes()
    except PermissionError:
        pytest.skip("DAMON's sysfs files need root")
    assert damon.pageout_bytes() >= first >= 0
    assert [(k, (k / "state").read_text().strip()) for k, _ in before] == before
