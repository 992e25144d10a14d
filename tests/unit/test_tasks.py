# SPDX-License-Identifier: Apache-2.0
"""`cancel_and_wait` ends a task that loses its first cancellation, and says nothing of the
tasks' own outcomes; `within` and `sleep_or_stop` wait without losing one."""
from __future__ import annotations

import asyncio
import sys

import pytest

from tidal.tasks import cancel_and_wait, sleep_or_stop, within

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


def _cancelled_as_it_finishes(wait):
    """A task waiting with `wait(seconds, future)` on a future whose result is set in the same
    loop iteration as the task is cancelled: whether the task ended cancelled (True) or ran on
    past the wait (False)."""
    async def waiter(future):
        await wait(10, future)
        return "ran on"

    async def scenario():
        future = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(waiter(future))
        await asyncio.sleep(0)  # the task waits on the future now
        future.set_result(1)
        task.cancel()
        await asyncio.wait([task], timeout=DEADLINE)
        return task.cancelled()

    return asyncio.run(scenario())


def test_within_never_loses_a_cancellation_that_arrives_as_the_call_finishes():
    assert _cancelled_as_it_finishes(within) is True


def test_the_loss_within_avoids_is_real_on_this_python():
    """`asyncio.wait_for`, the same scenario: on Python 3.11 the cancellation is lost (3.12
    fixed it). Documents why `within` exists; not a requirement of Tidal's code."""
    lost = not _cancelled_as_it_finishes(lambda seconds, aw: asyncio.wait_for(aw, seconds))
    assert lost is (sys.version_info < (3, 12))


def test_within_returns_the_result_or_raises_timeout():
    async def scenario():
        assert await within(1, asyncio.sleep(0, "done")) == "done"
        with pytest.raises(TimeoutError):
            await within(0.01, asyncio.sleep(3600))
    asyncio.run(scenario())


@pytest.mark.parametrize("set_first, expected", [
    pytest.param(False, False, id="the-time-passes"),
    pytest.param(True, True, id="stop-set"),
])
def test_sleep_or_stop(set_first, expected):
    async def scenario():
        stop = asyncio.Event()
        if set_first:
            stop.set()
        return await asyncio.wait_for(sleep_or_stop(stop, 0.01 if not set_first else 3600), DEADLINE)
    assert asyncio.run(scenario()) is expected
