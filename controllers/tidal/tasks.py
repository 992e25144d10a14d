# SPDX-License-Identifier: Apache-2.0
"""Ending asyncio tasks for good, and waiting with a deadline without losing a cancellation:
shared by the manager and the agent.

Python 3.11's ``asyncio.wait_for`` returns the result of an awaitable that finished just as the
waiting task was cancelled, and the cancellation is lost (fixed in 3.12; the image runs 3.11):
a task stopped at that moment runs on. :func:`within` and :func:`sleep_or_stop` wait with
``asyncio.timeout`` instead, which cancels the task itself."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

__all__ = ["cancel_and_wait", "sleep_or_stop", "within"]


async def within(seconds: float | None, awaitable: Awaitable[T]) -> T:
    """`awaitable`'s result, or TimeoutError after `seconds` (None: no deadline). A cancellation
    of the waiting task is never lost (not ``asyncio.wait_for``: see above)."""
    async with asyncio.timeout(seconds):
        return await awaitable


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Wait `seconds`, or less if `stop` is set meanwhile; whether it is set."""
    try:
        await within(seconds, stop.wait())
    except TimeoutError:
        pass
    return stop.is_set()


async def cancel_and_wait(*tasks: asyncio.Task, retry_seconds: float = 1.0) -> None:
    """Cancel `tasks` and wait until every one has ended, cancelling again each `retry_seconds`
    while one runs on. A single ``cancel()`` can be lost: on Python 3.11 ``asyncio.wait_for``, and
    libraries built like it, return the result of a call that finished just as the task was
    cancelled, and the task goes on. Their outcomes (a result, an exception, the cancellation)
    are not raised here: ending them is the point."""
    running = {task for task in tasks if not task.done()}
    while running:
        for task in running:
            task.cancel()
        _, running = await asyncio.wait(running, timeout=retry_seconds)
    for task in tasks:  # retrieved, so that asyncio does not log "exception was never retrieved"
        if not task.cancelled():
            task.exception()
