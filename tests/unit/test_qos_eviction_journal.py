"""Evictions in flight (issue 15: the agent killed in the middle of an eviction). The intent is
journalled before the Eviction API is asked; a restarted agent finishes an eviction that took
effect (the TidalEvicted Event, once, never a second eviction) and drops one that did not (the
watermarks decide afresh)."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tidal.agent.qos.eviction_journal import FINISHED_NOTE, RETRIED_NOTE, EvictionIntent, EvictionJournal, resume
from tidal.agent.qos.node_actions import EvictOutcome
from tidal.metrics import node_metrics

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_qos_node_mode_round import CO, Sample, node_qos, pods  # noqa: E402
from test_qos_executor import full_disk  # noqa: E402,F401  (fixture)
from test_qos_restore_pending import _run, until  # noqa: E402


#: the round's pods once the BE pod's eviction took effect
TERMINATING = [dataclasses.replace(p, terminating=True) if p.uid == "be" else p for p in pods(10)]


def _intent(uid):
    return EvictionIntent(uid, "ns", f"pod-{uid}", "cpu 90% above 80%", "cpu")


@pytest.mark.parametrize("terminating, finish, drop", [
    pytest.param({"a": True}, ["a"], [], id="terminating-took-effect-finish"),
    pytest.param({}, ["a"], [], id="gone-took-effect-finish"),
    pytest.param({"a": False}, [], ["a"], id="running-never-took-effect-drop"),
    pytest.param({"a": False, "b": True}, ["b"], ["a"], id="each-on-its-own"),
])
def test_resume(terminating, finish, drop):
    intents = [_intent(u) for u in sorted({"a", *terminating})]
    done, dropped = resume(intents, terminating)
    assert [i.uid for i in done] == finish and [i.uid for i in dropped] == drop


def test_the_journal_survives_a_restart_and_empties(tmp_path):
    path = tmp_path / "evictions-journal.json"
    journal = EvictionJournal(path)
    journal.record(EvictionIntent("a", "ns", "pod-a", "why", "memory", "psi", 5.0))
    again = EvictionJournal(path)
    assert again.intents == {"a": EvictionIntent("a", "ns", "pod-a", "why", "memory", "psi", 5.0)}
    again.done("a")
    assert EvictionJournal(path).intents == {}


@pytest.mark.parametrize("content", ["", "not json", "[1, 2]", '{"evictions": [{"name": "no uid"}, 3]}'])
def test_a_garbage_journal_is_empty_not_a_crash(tmp_path, content):
    path = tmp_path / "evictions-journal.json"
    path.write_text(content)
    assert EvictionJournal(path).intents == {}


def test_a_full_disk_does_not_stop_the_eviction(full_disk, caplog):
    journal = EvictionJournal(full_disk / "evictions-journal.json")
    journal.record(EvictionIntent("a", "ns", "pod-a", "why"))
    assert "a" in journal.intents  # in memory only
    assert "not written" in caplog.text and "No space left on device" in caplog.text


class Actions:
    """The API as the worker sees it; `hang` makes the eviction request never return (the agent
    is killed while it waits)."""

    def __init__(self, journal_path=None, hang=False, hang_after_event=False, server=None, fail=()):
        self.evictions, self.events, self.hang, self.journal_path = [], [], hang, journal_path
        self.fail = list(fail)  # API errors to raise, in order: "evict" or "event"
        self.hang_after_event = hang_after_event
        self.server = {} if server is None else server  # the API server's Events by name
        self.journalled_at_request = None

    async def set_offline_taint(self, want):
        return False

    async def set_label(self, key, value):
        pass

    async def evict(self, namespace, name):
        self.evictions.append((namespace, name))
        self.journalled_at_request = json.loads(self.journal_path.read_text())["evictions"]
        if self.fail[:1] == ["evict"]:
            self.fail.pop(0)
            raise TimeoutError("the API server did not answer")
        if self.hang:
            await asyncio.Event().wait()
        return EvictOutcome.EVICTED

    async def event(self, event_name=None, **event):
        if event["kind"] != "Pod":  # the node's own Events (restore-pending) are not this test's
            return True
        if self.fail[:1] == ["event"]:
            self.fail.pop(0)
            raise ConnectionError("the API server went away")
        if event_name in self.server:
            return False  # 409 AlreadyExists
        self.server[event_name or f"generated-{len(self.server)}"] = event
        self.events.append(event)
        if self.hang_after_event:
            await asyncio.Event().wait()
        return True


def _agent(tmp_path, actions):
    agent = node_qos(tmp_path, {CO: "true"})
    agent.actions = actions
    agent.evictions = EvictionJournal(tmp_path / "evictions-journal.json")
    return agent


def test_killed_after_the_request_the_restarted_agent_finishes_it_once(tmp_path):
    """Round 1 chooses the BE pod (90 % CPU, high watermark 80 %); the agent is killed while the
    Eviction API call is in flight. Restarted, it sees the pod terminating: one TidalEvicted Event
    saying it was finished after the restart, no second request, the journal empty."""
    path = tmp_path / "evictions-journal.json"
    first = Actions(path, hang=True)
    agent = _agent(tmp_path, first)

    async def until_requested():
        agent.round(Sample(), pods(10))
        await until(lambda: first.evictions)
    _run(agent, until_requested)
    assert first.evictions == [("ns", "batch")] and first.events == []
    assert [i["uid"] for i in first.journalled_at_request] == ["be"]  # journalled before the request

    second = Actions(path)
    restarted = _agent(tmp_path, second)

    async def finish():
        restarted.round(Sample(), TERMINATING)
        await until(lambda: second.events)
    _run(restarted, finish)
    assert second.evictions == []
    (event,) = second.events
    assert event["reason"] == "TidalEvicted" and event["uid"] == "be" and FINISHED_NOTE in event["message"]
    assert EvictionJournal(path).intents == {}


def test_killed_before_the_request_took_effect_the_intent_is_dropped(tmp_path):
    """The journal names the BE pod but the pod runs (the request never reached the API server):
    no Event for it; the watermarks choose again (here it is still needed: one new eviction,
    finished normally)."""
    path = tmp_path / "evictions-journal.json"
    EvictionJournal(path).record(EvictionIntent("be", "ns", "batch", "an older reason", "cpu"))
    actions = Actions(path)
    agent = _agent(tmp_path, actions)

    async def again():
        agent.round(Sample(), pods(10))
        await until(lambda: actions.events)
    _run(agent, again)
    assert actions.journalled_at_request[0]["reason"] != "an older reason"  # dropped, chosen afresh
    (event,) = actions.events
    assert event["reason"] == "TidalEvicted" and FINISHED_NOTE not in event["message"]
    assert EvictionJournal(path).intents == {}


def _evictions_counted(agent):
    return agent.metrics.evictions.labels("n1", "cpu", "watermark")._value.get()


def test_killed_after_the_event_went_out_the_restarted_agent_sends_no_second_one(tmp_path):
    """The kill falls after the Event reached the API server and before the journal said so (and
    before the counter counted it): the restarted agent's Event has the same name (the pod's uid),
    the API server refuses it as existing, and the journal empties: one Event in all, and the
    restarted agent's ``tidal_evictions_total`` counts the eviction (the killed one never did)."""
    path = tmp_path / "evictions-journal.json"
    server = {}
    first = Actions(path, hang_after_event=True, server=server)
    agent = _agent(tmp_path, first)
    agent.metrics = node_metrics(CollectorRegistry())

    async def until_event_sent():
        agent.round(Sample(), pods(10))
        await until(lambda: first.events)
    _run(agent, until_event_sent)
    assert list(EvictionJournal(path).intents) == ["be"]  # the kill came before the journal's update
    assert _evictions_counted(agent) == 0

    second = Actions(path, server=server)
    restarted = _agent(tmp_path, second)
    restarted.metrics = node_metrics(CollectorRegistry())

    async def finish():
        restarted.round(Sample(), TERMINATING)
        await until(lambda: not EvictionJournal(path).intents)
    _run(restarted, finish)
    assert second.events == [] and second.evictions == []
    assert len(server) == 1 and all(".tidal-evicted.be" in name for name in server)
    assert _evictions_counted(restarted) == 1



@pytest.mark.parametrize("fail, pod_after, requests, note", [
    pytest.param(["evict"], TERMINATING, 1, RETRIED_NOTE, id="request-failed-but-took-effect-event-next-round"),
    pytest.param(["event"], TERMINATING, 1, RETRIED_NOTE, id="event-failed-sent-next-round"),
    pytest.param(["evict"], pods(10), 2, None, id="request-failed-no-effect-dropped-and-chosen-again"),
])
def test_an_api_error_mid_eviction_is_sorted_out_the_next_round_not_at_the_next_restart(
        tmp_path, fail, pod_after, requests, note):
    """A request or Event that failed leaves the intent in the journal; the next round (not the
    next restart) sorts it as a restart would: the pod terminating, its Event (once, saying it
    came after an API error) and no second request; the pod running, the intent dropped and the
    watermarks choose again (here the pod is still wanted: a second request, finished normally)."""
    path = tmp_path / "evictions-journal.json"
    actions = Actions(path, fail=fail)
    agent = _agent(tmp_path, actions)

    async def rounds():
        agent.round(Sample(), pods(10))
        await until(lambda: not actions.fail)  # the error happened
        await until(lambda: not agent._work.qsize() and agent._unsettled)
        assert list(EvictionJournal(path).intents) == ["be"]  # kept through the error
        agent.round(Sample(), pod_after)
        await until(lambda: actions.events)
        await until(lambda: not EvictionJournal(path).intents)
    _run(agent, rounds)
    assert len(actions.evictions) == requests
    (event,) = actions.events
    assert event["reason"] == "TidalEvicted" and event["uid"] == "be"
    assert (note in event["message"]) if note else (RETRIED_NOTE not in event["message"])
    assert FINISHED_NOTE not in event["message"]


@pytest.mark.parametrize("failed", ["event", "evict"])
def test_an_eviction_that_took_effect_keeps_its_cooldown_whatever_call_failed(tmp_path, failed):
    """The eviction took effect and its Event failed, or its request failed (a timeout) though
    the pod was evicted: the eviction happened, so the cooldown counts from it and no second BE
    pod is evicted the round after (it was, when any API error reset the cooldown); the round
    after finds the pod terminating and the Event goes out, once."""
    path = tmp_path / "evictions-journal.json"
    actions = Actions(path, fail=[failed])
    agent = _agent(tmp_path, actions)
    agent.observe_policy({"metadata": {"resourceVersion": "2"}, "spec": {
        "evictionWatermarks": {"dwellSeconds": 0, "cooldownSeconds": 600}}})
    other = dataclasses.replace(pods(10)[1], uid="be-2", name="batch-2")

    async def rounds():
        agent.round(Sample(), [*pods(10), other])
        await until(lambda: not actions.fail)  # the Event failed
        await until(lambda: not agent._work.qsize() and agent._unsettled)
        agent.round(Sample(), [*TERMINATING, other])  # still above the watermark, another BE pod there
        await until(lambda: actions.events)
        await until(lambda: not EvictionJournal(path).intents)
        agent.round(Sample(), [*TERMINATING, other])
        await until(lambda: not agent._work.qsize())
    _run(agent, rounds)
    assert actions.evictions == [("ns", "batch")]
    (event,) = actions.events
    assert event["uid"] == "be" and RETRIED_NOTE in event["message"]
