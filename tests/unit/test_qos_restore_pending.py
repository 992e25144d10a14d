"""The restore-pending label (issue 15: the agent killed in the middle of a restore), and the
Events of cgroup writes refused. The agent keeps ``colocation.tidal.io/restore-pending`` on its
node while its mode is active and, once the mode is off, until a round has put everything back
with no problem. The DaemonSet also runs on nodes with the label, so an agent killed halfway is
started again and finishes the restore."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from tidal.agent.executor.cgroupfs import RestoreJournal
from tidal.agent.qos.node_qos import restore_event, restore_pending
from tidal.api import qos
from tidal_dev.lab.pytest_plugin import wait_for_async

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_qos_node_mode_round import ALLOCATABLE, CO, OV, Sample, node_qos, pods  # noqa: E402

LABEL = qos.RESTORE_PENDING_NODE_LABEL


@pytest.mark.parametrize("active, undo_clean, pending", [
    pytest.param(True, None, True, id="active-no-round-off-yet"),
    pytest.param(True, True, True, id="active-after-an-earlier-clean-restore"),
    pytest.param(False, None, True, id="off-no-round-yet-keeps-it"),
    pytest.param(False, False, True, id="off-restore-with-problems-keeps-it"),
    pytest.param(False, True, False, id="off-restored-cleanly-removes-it"),
])
def test_restore_pending(active, undo_clean, pending):
    assert restore_pending(active, undo_clean) is pending


def test_the_events_name_the_label():
    for pending in (True, False):
        reason, message = restore_event(pending)
        assert LABEL in message
        assert reason == ("TidalRestorePending" if pending else "TidalNodeRestored")


def _off(agent):
    agent.observe_node({"metadata": {"labels": {LABEL: "true"}}, "status": {"allocatable": ALLOCATABLE}})


def test_active_then_off_and_restored_removes_it(tmp_path):
    agent = node_qos(tmp_path, {CO: "true"})
    agent.round(Sample(), pods(10))
    assert agent.want_restore_label
    _off(agent)
    assert agent.want_restore_label  # no round with the mode off yet
    agent.round(Sample(), pods(10))
    assert agent.undo_clean is True and not agent.want_restore_label


def test_a_value_that_cannot_go_back_keeps_it_round_after_round(tmp_path):
    agent = node_qos(tmp_path, {OV: "true"})
    agent.round(Sample(), pods(10))
    # A journalled original the restore cannot write back (its path is a directory now).
    stuck = tmp_path / "stuck" / "cpu.idle"
    stuck.mkdir(parents=True)
    journal: RestoreJournal = agent.engine.executor.journal
    journal.originals[str(stuck)] = "0"
    journal.save()
    _off(agent)
    for _ in range(2):
        agent.round(Sample(), pods(10))
        assert agent.undo_clean is False and agent.want_restore_label
        assert set(agent.write_failures) == {str(stuck)}  # named in a TidalCgroupWriteFailed Event
    stuck.rmdir()  # gone: nothing left to put back
    agent.round(Sample(), pods(10))
    assert agent.undo_clean is True and not agent.want_restore_label and agent.write_failures == {}
    assert not RestoreJournal(journal.path).originals


class RecordingActions:
    def __init__(self):
        self.labels, self.events, self.calls = [], [], []
        self.label_failures = 0  # this many label patches refused first

    async def set_offline_taint(self, want):
        return False

    async def set_label(self, key, value):
        if self.label_failures:
            self.label_failures -= 1
            self.calls.append("label refused")
            raise RuntimeError("the API server refused the patch")
        self.labels.append((key, value))
        self.calls.append(f"label {value}")

    async def event(self, **event):
        self.events.append(event)
        self.calls.append(event["reason"])


async def until(condition):
    """Poll `condition` until the API worker has acted (5 s at most)."""
    await wait_for_async(condition, 5, "the API worker to act")


def _run(agent, body):
    """`body` (a coroutine function) run with the agent's API worker started, and the worker
    stopped whatever becomes of it."""
    async def scenario():
        agent.start()
        try:
            await body()
        finally:
            await agent.stop()
    asyncio.run(scenario())


@pytest.mark.parametrize("refusals", [0, 2])
def test_the_worker_sets_and_removes_the_label_once_each_with_an_event(tmp_path, refusals):
    """The label is set, then removed once the mode is off; a removal the API server refuses
    (`refusals` times) is tried again at the next wake-up, with no second Event."""
    agent = node_qos(tmp_path, {CO: "true"})
    agent.actions = actions = RecordingActions()

    async def rounds():
        agent.round(Sample(), pods(10))
        await until(lambda: actions.labels)
        agent.round(Sample(), pods(10))  # already set: nothing more
        actions.label_failures = refusals
        _off(agent)  # the API server's view: the label is there, the mode is off
        for refused in range(1, refusals + 1):  # each round wakes the worker, which tries again
            agent.round(Sample(), pods(10))
            await until(lambda: actions.calls.count("label refused") == refused)
        agent.round(Sample(), pods(10))
        await until(lambda: len(actions.labels) == 2)
    _run(agent, rounds)
    assert actions.labels == [(LABEL, "true"), (LABEL, None)]
    assert [e["reason"] for e in actions.events] == ["TidalRestorePending", "TidalNodeRestored"]
    assert all(e["kind"] == "Node" and e["name"] == "n1" for e in actions.events)
    # The restored Event goes before the label: once it is gone the DaemonSet deletes the agent's
    # pod, and an Event still to send would be lost with it.
    assert actions.calls == ["label true", "TidalRestorePending", "TidalNodeRestored",
                             *["label refused"] * refusals, "label None"]


@pytest.mark.parametrize("before, now, expected", [
    pytest.param({}, {}, None, id="all-well"),
    pytest.param({}, {"/a/cpu.cfs_quota_us": "Invalid argument"},
                 ("TidalCgroupWriteFailed", True, ["/a/cpu.cfs_quota_us: Invalid argument", "1 file(s)"]),
                 id="a-new-failure-is-named"),
    pytest.param({"/a": "Invalid argument"}, {"/a": "Device or resource busy"}, None,
                 id="the-same-file-failing-again-is-no-new-event"),
    pytest.param({"/a": "x"}, {"/a": "x", "/b": "Permission denied"},
                 ("TidalCgroupWriteFailed", True, ["/b: Permission denied", "2 file(s)"]),
                 id="another-file-failing-names-the-new-one"),
    pytest.param({"/a": "x", "/b": "y"}, {}, ("TidalCgroupWriteRecovered", False, ["2 file(s) had failed"]),
                 id="recovered"),
    pytest.param({"/a": "x", "/b": "y"}, {"/a": "x"}, None, id="partly-recovered-says-nothing-yet"),
    pytest.param({}, {f"/f{i}": "busy" for i in range(7)},
                 ("TidalCgroupWriteFailed", True, ["/f4: busy", "(and 2 more)"]), id="bounded"),
])
def test_write_failure_event(before, now, expected):
    from tidal.agent.qos.node_qos import write_failure_event
    event = write_failure_event(before, now)
    if expected is None:
        assert event is None
        return
    reason, warning, parts = expected
    assert (event.reason, event.warning) == (reason, warning)
    for part in parts:
        assert part in event.message
    assert "/f5" not in event.message


def test_a_removal_refused_then_the_mode_on_again_then_off_sends_a_second_restored_event(tmp_path):
    agent = node_qos(tmp_path, {CO: "true"})
    agent.actions = actions = RecordingActions()

    async def rounds():
        agent.round(Sample(), pods(10))
        await until(lambda: actions.labels)
        actions.label_failures = 1
        _off(agent)
        agent.round(Sample(), pods(10))
        await until(lambda: "label refused" in actions.calls)
        # switched on again before the removal got through: the label stays, no Event
        agent.observe_node({"metadata": {"labels": {CO: "true", LABEL: "true"}},
                            "status": {"allocatable": ALLOCATABLE}})
        agent.round(Sample(), pods(10))
        await until(lambda: not agent._restored_event_sent)
        _off(agent)  # and off again: this removal is a restore of its own
        agent.round(Sample(), pods(10))
        await until(lambda: len(actions.labels) == 2)
    _run(agent, rounds)
    assert actions.calls == ["label true", "TidalRestorePending", "TidalNodeRestored", "label refused",
                             "TidalNodeRestored", "label None"]
