# SPDX-License-Identifier: Apache-2.0
"""When the agent samples and when it runs its QoS round.

The agent *ticks* every second: the usage sample (the NodeProfile's windows and percentiles, the
oversell prediction and its 5-minute history, the scheduler's usage metrics are all defined on
one-second samples), the watches' latest Node and policy, the NodeProfile report when due. The
*QoS round* — every strategy and feature, the eviction watermarks, the executor's cgroup work —
runs on the first tick at least ``beIsolation.qosCheckIntervalSeconds`` (1..60, default 1; the
reference agent's ``qosCheckInterval``) after the previous round. The interval is read from the
policy in force at every tick, so a new value applies from the next tick, with no restart.

What a round measures stays correct with any interval: dwell, cooldown and reclaim intervals are
compared with the monotonic clock (``now`` of the round), never counted in rounds, and rates
(egress) are divided by the time between their readings; they only act at round times, so at most
one interval late. The executor's "re-read every planned file" is the one thing counted in
rounds: :func:`verify_rounds` keeps it at about every :data:`VERIFY_SECONDS`.

:class:`RoundTimer` is the pure decision; :func:`tick_loop` the loop, with the clock and the
interruptible wait injected (tests drive it with a fake clock, no real sleeps).
"""
from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

__all__ = ["TICK_SECONDS", "SLACK_SECONDS", "VERIFY_SECONDS", "RoundTimer", "TickFailures", "tick_loop",
           "verify_rounds"]

#: the sampler's period: one tick
TICK_SECONDS = 1.0
#: a round falls due this much before its interval is complete, so ticks that arrive a few
#: milliseconds early (timer granularity) do not push a 5 s round to 6 s
SLACK_SECONDS = 0.05
#: the executor re-reads every planned cgroup file about this often (drift made by others)
VERIFY_SECONDS = 5.0


class RoundTimer:
    """Which ticks run the QoS round, and how long to wait for the next tick."""

    def __init__(self, tick_seconds: float = TICK_SECONDS) -> None:
        if not (math.isfinite(tick_seconds) and tick_seconds > 0):
            raise ValueError(f"tick_seconds must be positive seconds, got {tick_seconds!r}")
        self.tick_seconds = tick_seconds
        #: monotonic time of the last round (None: no round yet)
        self.last_round: float | None = None

    def due(self, now: float, interval_seconds: float) -> bool:
        """Whether the tick at ``now`` runs the QoS round: the first tick does, then every tick at
        least ``interval_seconds`` (less :data:`SLACK_SECONDS`) after the last round."""
        if not (math.isfinite(interval_seconds) and interval_seconds > 0):
            raise ValueError(f"qosCheckIntervalSeconds must be positive seconds, got {interval_seconds!r}")
        return self.last_round is None or now - self.last_round >= interval_seconds - SLACK_SECONDS

    def ran(self, now: float) -> None:
        self.last_round = now

    def wait_seconds(self, started: float, now: float) -> float:
        """Until the next tick: one tick after this one started (at least 50 ms, so a slow tick
        never makes the loop spin)."""
        return max(0.05, self.tick_seconds - (now - started))


class TickFailures:
    """Which failed ticks to log, so that a fault that repeats every second neither floods the log
    nor goes quiet: the first failure of a kind (its type and message) in full, with its
    traceback; then one line every ``every`` repeats of that kind, with the count."""

    def __init__(self, every: int = 60) -> None:
        self.every = every
        self.kind: tuple[str, str] | None = None
        self.repeats = 0

    def seen(self, error: Exception) -> str | None:
        """``"first"`` (log it with its traceback), ``"repeat"`` (log a line), or None (quiet)."""
        kind = (type(error).__name__, str(error))
        if kind != self.kind:
            self.kind, self.repeats = kind, 0
            return "first"
        self.repeats += 1
        return "repeat" if self.repeats % self.every == 0 else None


def verify_rounds(interval_seconds: float) -> int:
    """Every how many rounds the executor re-reads every planned file: about every
    :data:`VERIFY_SECONDS` (5 rounds of 1 s; every round from 5 s on)."""
    return max(1, math.ceil(VERIFY_SECONDS / interval_seconds - 1e-9))


async def tick_loop(observe: Callable[[float], None], act: Callable[[float, bool], None],
                    interval_seconds: Callable[[], float], stopped: Callable[[], bool], *,
                    clock: Callable[[], float], wait: Callable[[float], Awaitable[None]],
                    inputs: Callable[[], object] = lambda: None,
                    timer: RoundTimer | None = None,
                    failed: Callable[[Exception], None] | None = None) -> None:
    """Tick until ``stopped()``: ``observe(now)`` (sample, take the latest policy and Node), then
    ``act(now, qos_round)`` with ``qos_round`` true on the ticks that run the QoS round, then
    ``wait`` (an interruptible sleep) until the next tick.

    A tick that raises ends the loop, unless ``failed`` is given: then ``failed(error)`` is told
    and the loop goes on with the next tick (the rest of the failed tick is skipped). One odd
    file or reading must not end the node's enforcement; a fault that persists shows as ticks
    that never complete (the agent's liveness).

    The interval is read after ``observe``, so a new value counts at once. A round also runs at
    once when ``inputs()`` (the policy generation and the node's mode) differs from what the last
    round ran with: a new policy generation is reported as applied at the next report, and a node
    switched on should not wait a long interval for its first round."""
    timer = timer or RoundTimer()
    ran_with: object = None
    while not stopped():
        started = clock()
        try:
            observe(started)
            key = inputs()
            qos_round = timer.due(started, interval_seconds()) or key != ran_with
            ran_with = key
            if qos_round:
                timer.ran(started)
            act(started, qos_round)
        except Exception as error:
            if failed is None:
                raise
            failed(error)
        await wait(timer.wait_seconds(started, clock()))
