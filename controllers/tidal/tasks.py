# SPDX-License-Identifier: Apache-2.0
"""Ending asyncio tasks for good: shared by the manager and the agent."""
from __future__ import annotations

import asyncio

__all__ = ["cancel_and_wait"]


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
