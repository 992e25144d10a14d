"""Events wait, in order, until the API server has them (`tidal.kube.event_queue`): the agent's
node Events here.

They are sent on a change only: a TidalCgroupWriteRecovered dropped on one failed POST used to
leave the node showing a failure with no recovery after it (a candidate for the EBUSY fault
test's one unexplained timeout)."""
from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tidal.agent.qos.feature import NodeEvent
from tidal.kube.event_queue import EventQueue, rejected_for_good
from tidal.kube.errors import api_error

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_qos_node_mode_round import CO, Sample, node_qos, pods  # noqa: E402
from test_qos_restore_pending import RecordingActions, _off, _run, until  # noqa: E402

from tidal.api import qos  # noqa: E402
from tidal_dev.lab.pytest_plugin import wait_for_async  # noqa: E402

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize("err, for_good", [
    pytest.param(api_error(403, "Forbidden"), True, id="403-rbac-lacks-events"),
    pytest.param(api_error(400, "BadRequest"), True, id="400-invalid"),
    pytest.param(api_error(404, "NotFound"), True, id="404-namespace-gone"),
    pytest.param(api_error(422, "Invalid"), True, id="422-invalid"),
    pytest.param(api_error(408, "Timeout"), False, id="408-request-timeout-retried"),
    pytest.param(api_error(409, "AlreadyExists"), False, id="409-exists-is-sent-not-rejected"),
    pytest.param(api_error(429, "TooManyRequests"), False, id="429-throttled-retried"),
    pytest.param(api_error(500, "InternalError"), False, id="500-retried"),
    pytest.param(api_error(503, "ServiceUnavailable"), False, id="503-retried"),
    pytest.param(TimeoutError(), False, id="timeout-retried"),
    pytest.param(OSError("connection refused"), False, id="connection-retried"),
])
def test_rejected_for_good(err, for_good):
    assert rejected_for_good(err) is for_good


class Poster:
    """The API server's side: ``failures`` tries refused first (with ``error``), then accepted."""

    def __init__(self, failures=0, error=None):
        self.failures, self.error = failures, error or OSError("connection refused")
        self.sent, self.tries = [], []

    async def __call__(self, pending):
        self.tries.append(pending.reason)
        if self.failures:
            self.failures -= 1
            raise self.error
        self.sent.append((pending.reason, pending.at, pending.name))


def clock_from(start):
    times = iter(start + timedelta(seconds=i) for i in range(1000))
    return lambda: next(times)


def test_a_failed_event_waits_first_and_those_after_it_keep_their_order():
    queue = EventQueue("node n1", "n1", clock=clock_from(T0))
    queue.put("TidalCgroupWriteFailed", NodeEvent("TidalCgroupWriteFailed", "refused", warning=True))
    queue.put("TidalCgroupWriteRecovered", NodeEvent("TidalCgroupWriteRecovered", "written"))
    post = Poster(failures=2)
    assert asyncio.run(queue.send(post)) is False
    assert asyncio.run(queue.send(post)) is False
    assert post.sent == [] and len(queue) == 2 and queue.pending[0].tries == 2
    assert asyncio.run(queue.send(post)) is True
    assert post.tries == ["TidalCgroupWriteFailed"] * 3 + ["TidalCgroupWriteRecovered"]
    # each keeps the time it happened, and one name whatever the tries (a retry of an Event the
    # API server created without answering finds it, and is not a second Event)
    (first, at1, name1), (second, at2, name2) = post.sent
    assert (first, second, at1, at2) == ("TidalCgroupWriteFailed", "TidalCgroupWriteRecovered",
                                         T0, T0 + timedelta(seconds=1))
    assert name1 != name2 and all(n.startswith("n1.tidal-") for n in (name1, name2))
    assert queue.dropped == 0 and len(queue) == 0


def test_an_event_found_existing_counts_as_sent():
    """A try the API server created without answering: the next try's 409 is not a failure."""
    queue = EventQueue("node n1", "n1")
    queue.put("A", NodeEvent("A", "a"))
    post = Poster(failures=1, error=api_error(409, "AlreadyExists"))
    assert asyncio.run(queue.send(post)) is True and len(queue) == 0 and queue.dropped == 0


def test_an_event_rejected_for_good_is_dropped_and_the_next_is_sent():
    queue = EventQueue("node n1", "n1")
    queue.put("A", NodeEvent("A", "a"))
    queue.put("B", NodeEvent("B", "b"))
    post = Poster(failures=1, error=api_error(403, "Forbidden"))
    assert asyncio.run(queue.send(post)) is True
    assert [s[0] for s in post.sent] == ["B"] and queue.dropped == 1


def test_the_backlog_drops_the_oldest():
    counted = []
    queue = EventQueue("node n1", "n1", backlog=3, on_drop=lambda: counted.append(1))
    for i in range(5):
        queue.put(f"E{i}", NodeEvent(f"E{i}", ""))
    assert [p.reason for p in queue.pending] == ["E2", "E3", "E4"] and queue.dropped == 2
    assert len(counted) == 2


def test_an_agent_counts_the_events_it_drops_in_its_metric(tmp_path):
    from prometheus_client import CollectorRegistry

    from tidal.metrics import node_metrics
    registry = CollectorRegistry()
    agent = node_qos(tmp_path, {CO: "true"})
    agent.metrics = node_metrics(registry)
    agent.node_events.backlog = 1
    agent.node_events.put("A", NodeEvent("A", "a"))
    agent.node_events.put("B", NodeEvent("B", "b"))
    assert registry.get_sample_value("tidal_agent_node_events_dropped_total", {"node": "n1"}) == 1


def test_an_event_whose_send_is_cancelled_stays():
    queue = EventQueue("node n1", "n1")
    queue.put("A", NodeEvent("A", "a"))

    async def hang(pending):
        await asyncio.sleep(3600)

    async def scenario():
        task = asyncio.create_task(queue.send(hang))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    asyncio.run(scenario())
    assert len(queue) == 1 and queue.pending[0].tries == 0


class FlakyEvents(RecordingActions):
    """The restore-pending label's actions, with the first ``event_failures`` Event POSTs failing."""

    def __init__(self, event_failures):
        super().__init__()
        self.event_failures = event_failures

    async def event(self, **event):
        if self.event_failures:
            self.event_failures -= 1
            self.calls.append(f"{event['reason']} failed")
            raise OSError("connection reset by peer")
        await super().event(**event)


def test_the_worker_sends_an_event_that_failed_again_before_the_label_goes(tmp_path):
    """Through the agent's API worker: TidalRestorePending fails twice and is sent at later
    wake-ups; once the mode is off, TidalNodeRestored fails once, and the label's removal waits
    for it (the DaemonSet deletes the agent's pod once the label is gone)."""
    agent = node_qos(tmp_path, {CO: "true"})
    agent.actions = actions = FlakyEvents(event_failures=2)
    agent.worker_wake_seconds = 0.05

    async def rounds():
        agent.round(Sample(), pods(10))
        await until(lambda: "TidalRestorePending" in actions.calls)
        actions.event_failures = 1
        _off(agent)  # the API server's view: the label is there, the mode is off
        agent.round(Sample(), pods(10))
        await until(lambda: len(actions.labels) == 2)
    _run(agent, rounds)
    assert actions.calls == ["label true", "TidalRestorePending failed", "TidalRestorePending failed",
                             "TidalRestorePending", "TidalNodeRestored failed", "TidalNodeRestored", "label None"]
    assert [e["reason"] for e in actions.events] == ["TidalRestorePending", "TidalNodeRestored"]
    assert len({e["event_name"] for e in actions.events}) == 2
    assert len(agent.node_events) == 0


def test_the_label_goes_after_a_minute_of_events_refused(tmp_path):
    """An API server that refuses Events for good (a failing webhook answering 500) must not keep
    a restored node's agent forever: the label's removal waits for them a bounded time (scaled
    down here), then goes, the Events lost with the agent."""
    agent = node_qos(tmp_path, {CO: "true"})
    agent.actions = actions = FlakyEvents(event_failures=10**6)
    agent.worker_wake_seconds = 0.05
    agent.restore_events_wait_seconds = 0.5

    async def rounds():
        agent.round(Sample(), pods(10))
        await until(lambda: actions.labels)
        _off(agent)
        agent.round(Sample(), pods(10))
        await wait_for_async(lambda: len(actions.labels) == 2, 10, "the label's removal after the wait")
    _run(agent, rounds)
    assert actions.labels[-1] == (qos.RESTORE_PENDING_NODE_LABEL, None) and actions.events == []
    # tried meanwhile (TidalRestorePending first: the order holds), not given up at once
    before = actions.calls[:actions.calls.index("label None")]
    assert sum(c.endswith(" failed") for c in before) >= 2
    assert len(agent.node_events) == 2  # both still waiting when the agent leaves
