"""Which cgroup writes count as failing from round to round (`node_qos.failing_writes`), and the
Events that follow: a ``memory.reclaim`` request the kernel refuses every time it is tried (every
``intervalSeconds``, not every round) is one TidalCgroupWriteFailed, not one failure and one
recovery per try."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tidal.agent.collector.cgroups import CgroupVersion
from tidal.agent.qos.memory_reclaim import MemoryReclaimer
from tidal.agent.qos.node_qos import INTERMITTENT_FAILURE_SECONDS, failing_writes, track_write_failures

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_qos_memory_reclaim import BE, MiB, config, layout  # noqa: E402

LATER = INTERMITTENT_FAILURE_SECONDS


@pytest.mark.parametrize("before, now, every_round, intermittent, carried_out, expected", [
    pytest.param({}, 0, {}, {}, set(), {}, id="all-well"),
    pytest.param({}, 0, {"/q": "Invalid argument"}, {"/r": "Is a directory"}, set(),
                 {"/q": ("Invalid argument", None), "/r": ("Is a directory", 0)}, id="both-kinds-fail"),
    pytest.param({"/q": ("Invalid argument", None)}, 1, {}, {}, set(), {},
                 id="a-plan-write-not-failing-now-is-well-written-or-no-longer-wanted"),
    pytest.param({"/r": ("Is a directory", 0)}, 1, {}, {}, set(), {"/r": ("Is a directory", 0)},
                 id="an-intermittent-one-not-tried-this-round-still-fails"),
    pytest.param({"/r": ("Is a directory", 0)}, 5, {}, {"/r": "Is a directory"}, set(),
                 {"/r": ("Is a directory", 5)}, id="failing-again-renews-it"),
    pytest.param({"/r": ("Is a directory", 0)}, 5, {}, {}, {"/r"}, {}, id="carried-out-it-recovers"),
    pytest.param({"/r": ("Is a directory", 0)}, LATER - 1, {}, {}, set(), {"/r": ("Is a directory", 0)},
                 id="kept-until-the-bound"),
    pytest.param({"/r": ("Is a directory", 0)}, LATER, {}, {}, set(), {},
                 id="forgotten-at-the-bound-the-pod-gone-or-the-feature-off"),
    pytest.param({"/r": ("Is a directory", 0)}, 1, {"/r": "Invalid argument"}, {}, set(),
                 {"/r": ("Invalid argument", None)}, id="a-key-failing-as-a-plan-write-now"),
])
def test_failing_writes(before, now, every_round, intermittent, carried_out, expected):
    assert failing_writes(before, now, every_round, intermittent, carried_out) == expected


def test_a_memory_reclaim_request_refused_at_every_try_is_one_event_and_one_recovery(tmp_path):
    """The real executor and the agent's own bookkeeping (`track_write_failures`) on a v2 tree
    whose BE pod's ``memory.reclaim`` is a directory (every write refused, EISDIR), one round a
    second, requests every 5 s: one TidalCgroupWriteFailed at the first try, nothing at the second
    try or in between, one TidalCgroupWriteRecovered at the first request carried out once the
    file is a file again."""
    lay = layout(CgroupVersion.V2, tmp_path)
    pod_dir = lay.memory_dir(lay.pod_relpath(BE.uid, BE.qos_class))
    pod_dir.mkdir(parents=True)
    (pod_dir / "memory.high").write_text("max\n")
    (pod_dir / "memory.reclaim").mkdir()
    reclaimer = MemoryReclaimer(lay, tmp_path / "journal.json")
    failing: dict = {}
    events = []
    for now in range(0, 13):
        if now == 7:  # fixed by hand between two tries
            (pod_dir / "memory.reclaim").rmdir()
            (pod_dir / "memory.reclaim").write_text("")
        problems = reclaimer.round(now, True, config(), 70.0, [BE], {BE.uid: 200 * MiB})
        failing, event = track_write_failures(failing, now, reclaimer.outcome)
        if event is not None:
            events.append((now, event.reason))
        assert bool(problems) == (now in (0, 5))  # tried and refused at 0 and 5 only
    assert events == [(0, "TidalCgroupWriteFailed"), (10, "TidalCgroupWriteRecovered")]
    assert (pod_dir / "memory.reclaim").read_text() == str(20 * MiB)
