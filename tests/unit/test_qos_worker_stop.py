# SPDX-License-Identifier: Apache-2.0
"""The node's API worker ends when it is cancelled, wherever it is: waiting to be woken, or in an
API call that has just finished. On Python 3.11 ``asyncio.wait_for`` returned the result of an
awaitable that finished as its task was cancelled and lost the cancellation, so the worker ran on
after ``stop`` and the agent's way out (its restore of a node switched off) waited for ever: the
CI run of 1e8a9bf hung in ``test_a_request_that_failed_and_did_not_take_effect_frees_the_machine``."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_qos_node_mode_round import CO, node_qos  # noqa: E402
from test_qos_restore_pending import RecordingActions  # noqa: E402

#: a deadline, not a wait: the worker ends at once or never
DEADLINE = 5.0


@pytest.mark.parametrize("steps_before_wake", range(3))
@pytest.mark.parametrize("steps_after_wake", range(6))
def test_one_cancellation_ends_the_worker_wherever_it_is(tmp_path, steps_before_wake, steps_after_wake):
    agent = node_qos(tmp_path, {CO: "true"})
    agent.actions = RecordingActions()  # instant API calls: a cancel often lands just as one finished

    async def scenario():
        agent.start()
        worker = agent._worker
        for _ in range(steps_before_wake):
            await asyncio.sleep(0)
        agent._wake.set()
        for _ in range(steps_after_wake):
            await asyncio.sleep(0)
        worker.cancel()
        done, _ = await asyncio.wait({worker}, timeout=DEADLINE)
        ended = bool(done)
        await agent.stop()  # ends it in any case, so that no task outlives the test
        return ended

    assert asyncio.run(scenario()), "the worker ran on after it was cancelled"


def test_stop_returns_and_leaves_no_worker(tmp_path):
    agent = node_qos(tmp_path, {CO: "true"})
    agent.actions = RecordingActions()

    async def scenario():
        agent.start()
        worker = agent._worker
        agent._wake.set()
        await asyncio.sleep(0)
        await asyncio.wait_for(agent.stop(), DEADLINE)
        return worker

    worker = asyncio.run(scenario())
    assert worker.done() and agent._worker is None
