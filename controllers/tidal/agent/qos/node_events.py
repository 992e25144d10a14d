# SPDX-License-Identifier: Apache-2.0
"""The node's Events waiting to be sent, in order, until the API server has them.

Tidal's node Events (TidalCgroupWriteFailed / Recovered, the offline-evicting taint set and
removed, TidalRestorePending, the CPU-interference throttle) are sent on a change only, so an
Event dropped on one failed POST was never sent again, and a node could show a failure with no
recovery after it. Here an Event that fails stays first in the queue and is tried again at the
API worker's next wake-up (5 s at most); those after it wait, so their order holds.

* Each Event keeps the time it happened (its timestamps) and a name of its own, chosen when it is
  queued: a try whose answer was lost but which the API server created is found existing on the
  next try (409) and counts as sent, not created twice.
* An Event the API server rejects for good (a 4xx other than 408 Request Timeout and 429 Too Many
  Requests: e.g. 403 when the agent's RBAC lacks events) is dropped with a warning, not retried.
* At most :data:`BACKLOG` Events wait; past that the oldest is dropped with a warning (an API
  server away for hours must not grow the agent's memory).

Every Event dropped counts in ``tidal_agent_node_events_dropped_total{node}``.
"""
from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from tidal.kube.errors import ApiError

from .feature import NodeEvent

log = logging.getLogger(__name__)

__all__ = ["BACKLOG", "NodeEventQueue", "PendingEvent", "rejected_for_good"]

#: Events waiting at most; past that the oldest is dropped
BACKLOG = 100


@dataclass
class PendingEvent:
    event: NodeEvent
    at: datetime
    #: its name, chosen once: a retry finds an Event that an earlier, unanswered try created
    name: str
    tries: int = 0
    #: when it was first tried (time.monotonic), None before
    first_try: float | None = None


def rejected_for_good(err: BaseException) -> bool:
    """An answer that a retry will not change: a 4xx other than 408 and 429 (pure)."""
    return isinstance(err, ApiError) and 400 <= err.status < 500 and err.status not in (408, 429)


def event_name(node: str) -> str:
    """A name of the Event's own, as the API server's generateName would choose it."""
    return f"{node[:200]}.tidal-{secrets.token_hex(5)}"


class NodeEventQueue:
    """Node Events in the order they happened, sent by :meth:`send`."""

    def __init__(self, node: str, backlog: int = BACKLOG,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 on_drop: Callable[[], None] | None = None) -> None:
        self.node = node
        self.backlog = backlog
        self.clock = clock
        self.on_drop = on_drop
        self.pending: deque[PendingEvent] = deque()
        #: Events dropped: the backlog full, or rejected for good
        self.dropped = 0

    def _dropped(self) -> None:
        self.dropped += 1
        if self.on_drop is not None:
            self.on_drop()

    def __len__(self) -> int:
        return len(self.pending)

    def failing_for(self, now: float | None = None) -> float:
        """Seconds since the first try of the Event that waits first (0: none waits, or not tried)."""
        if not self.pending or self.pending[0].first_try is None:
            return 0.0
        return (time.monotonic() if now is None else now) - self.pending[0].first_try

    def put(self, event: NodeEvent) -> None:
        self.pending.append(PendingEvent(event, self.clock(), event_name(self.node)))
        while len(self.pending) > self.backlog:
            lost = self.pending.popleft()
            self._dropped()
            log.warning("Event %s on node %s dropped: %d Events wait to be sent (at most %d)",
                        lost.event.reason, self.node, len(self.pending) + 1, self.backlog)

    async def send(self, post: Callable[[PendingEvent], Awaitable[object]]) -> bool:
        """Send the waiting Events in order with ``post``; True when none is left. At the first
        that fails (and is not rejected for good) it stops: that one and those after it wait for
        the next call."""
        while self.pending:
            first = self.pending[0]
            first.tries += 1
            if first.first_try is None:
                first.first_try = time.monotonic()
            try:
                await post(first)
            except asyncio.CancelledError:
                first.tries -= 1
                raise
            except Exception as err:
                if not rejected_for_good(err):
                    log.warning("Event %s on node %s not sent (try %d): %s; tried again at the next wake-up",
                                first.event.reason, self.node, first.tries, err)
                    return False
                self._dropped()
                log.warning("Event %s on node %s dropped: the API server rejects it (%s)",
                            first.event.reason, self.node, err)
            self.pending.popleft()
        return True
