# SPDX-License-Identifier: Apache-2.0
"""Kubernetes Events waiting to be sent, in order, until the API server has them (the agent's
node Events, the oversell master's BatchResourcesDropped).

Tidal's Events of a change (a cgroup write failed and recovered, a taint set and removed, a
node's batch resources dropped) are sent once, when the change happens: an Event dropped on one
failed POST was never sent again, and a node could show a failure with no recovery after it.
Here an Event that fails stays first in the queue and is tried again at the next :meth:`send`;
those after it wait, so their order holds.

* Each Event keeps the time it happened (its timestamps) and a name of its own, chosen when it is
  queued: a try whose answer was lost but which the API server created is found existing on the
  next try (409) and counts as sent, not created twice.
* An Event the API server rejects for good (a 4xx other than 408 Request Timeout and 429 Too Many
  Requests: e.g. 403 when the RBAC lacks events) is dropped with a warning, not retried.
* At most :data:`BACKLOG` Events wait; past that the oldest is dropped with a warning (an API
  server away for hours must not grow the controller's memory).

``on_drop`` is called for every Event dropped (the agent counts them in
``tidal_agent_node_events_dropped_total{node}``).
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
from typing import Any

from tidal.kube.errors import ApiError, Conflict

log = logging.getLogger(__name__)

__all__ = ["BACKLOG", "EventQueue", "PendingEvent", "rejected_for_good"]

#: Events waiting at most; past that the oldest is dropped
BACKLOG = 100


@dataclass
class PendingEvent:
    reason: str
    #: what the caller's ``post`` needs to send it (the agent's NodeEvent, the master's body)
    payload: Any
    at: datetime
    #: its name, chosen once: a retry finds an Event that an earlier, unanswered try created
    name: str
    tries: int = 0
    #: when it was first tried (time.monotonic), None before
    first_try: float | None = None


def rejected_for_good(err: BaseException) -> bool:
    """An answer that a retry will not change: a 4xx other than 408 and 429 (409, an Event of that
    name existing, is the caller's: sent already). Pure."""
    return (isinstance(err, ApiError) and 400 <= err.status < 500 and err.status not in (408, 429)
            and not isinstance(err, Conflict))


def event_name(prefix: str) -> str:
    """A name of the Event's own, as the API server's generateName would choose it."""
    return f"{prefix[:200]}.tidal-{secrets.token_hex(5)}"


class EventQueue:
    """Events in the order they happened, sent by :meth:`send`. ``about`` names what they are on
    in the logs ("node n1"), ``name_prefix`` starts their names (the object's name)."""

    def __init__(self, about: str, name_prefix: str, backlog: int = BACKLOG,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 on_drop: Callable[[], None] | None = None) -> None:
        self.about = about
        self.name_prefix = name_prefix
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

    def put(self, reason: str, payload: Any, name_prefix: str | None = None) -> PendingEvent:
        """Queue an Event that happened now; its name starts with ``name_prefix`` (default: the
        queue's)."""
        pending = PendingEvent(reason, payload, self.clock(), event_name(name_prefix or self.name_prefix))
        self.pending.append(pending)
        while len(self.pending) > self.backlog:
            lost = self.pending.popleft()
            self._dropped()
            log.warning("Event %s on %s dropped: %d Events wait to be sent (at most %d)",
                        lost.reason, self.about, len(self.pending) + 1, self.backlog)
        return pending

    async def send(self, post: Callable[[PendingEvent], Awaitable[object]]) -> bool:
        """Send the waiting Events in order with ``post``; True when none is left. At the first
        that fails (and is not rejected for good) it stops: that one and those after it wait for
        the next call. ``post`` raising :class:`~tidal.kube.errors.Conflict` means the Event of
        that name exists: sent."""
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
            except Conflict:
                pass  # created by an earlier try whose answer was lost
            except Exception as err:
                if not rejected_for_good(err):
                    log.warning("Event %s on %s not sent (try %d): %s; tried again later",
                                first.reason, self.about, first.tries, err)
                    return False
                self._dropped()
                log.warning("Event %s on %s dropped: the API server rejects it (%s)", first.reason, self.about, err)
            self.pending.popleft()
        return True
