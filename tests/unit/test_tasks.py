# SPDX-License-Identifier: Apache-2.0
"""`cancel_and_wait` ends a task that loses its first cancellation, and says nothing of the
tasks' own outcomes."""
from __future__ import annotations

import asyncio

from tidal.tasks import cancel_and_wait

DEADLINE = 10.0


async def _stubborn(cancellations_ignored: int, seen: list):
    """Ignores its first `cancellations_ignored` cancellations (as a task whose
    ``asyncio.wait_for`` returned a finished call's result instead of raising would)."""
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            if len(seen) > cancellations_ignored:
                raise


def test_a_task_that_loses_cancellations_is_cancelled_until_it_ends():
    seen = []

    async def scenario():
        task = asyncio.create_task(_stubborn(2, seen))
        await asyncio.sleep(0)
        await asyncio.wait_for(cancel_and_wait(task, retry_seconds=0.01), DEADLINE)
        return task

    task = asyncio.run(scenario())
    assert task.cancelled() and seen == ["cancelled"] * 3


def test_ended_and_failing_tasks_are_waited_for_and_not_raised():
    async def fails():
        raise ValueError("its own problem")

    async def scenario():
        done = asyncio.create_task(asyncio.sleep(0))
        failing = asyncio.create_task(fails())
        await asyncio.sleep(0.01)
        sleeping = asyncio.create_task(asyncio.sleep(3600))
        await asyncio.wait_for(cancel_and_wait(done, failing, sleeping), DEADLINE)
        return done, failing, sleeping

    done, failing, sleeping = asyncio.run(scenario())
    assert done.result() is None and isinstance(failing.exception(), ValueError) and sleeping.cancelled()
    asyncio.run(cancel_and_wait())  # nothing to end: returns at once
