"""The agent's tick loop: a sample every second, the QoS round every
beIsolation.qosCheckIntervalSeconds, driven by a fake clock (no real sleeps)."""
from __future__ import annotations

import asyncio

import pytest
from tidal.agent.rounds import RoundTimer, TickFailures, tick_loop, verify_rounds


@pytest.mark.parametrize("last, now, interval, due", [
    (None, 0.0, 1, True),      # the first tick runs a round
    (10.0, 11.0, 1, True),
    (10.0, 10.99, 1, True),    # a tick a few ms early still counts (timer granularity)
    (10.0, 10.9, 1, False),
    (10.0, 14.0, 5, False),
    (10.0, 15.0, 5, True),
    (10.0, 14.96, 5, True),
    (10.0, 69.0, 60, False),
    (10.0, 70.0, 60, True),
])
def test_round_due(last, now, interval, due):
    timer = RoundTimer()
    timer.last_round = last
    assert timer.due(now, interval) is due


@pytest.mark.parametrize("started, now, wait", [
    (0.0, 0.0, 1.0), (0.0, 0.3, 0.7), (0.0, 0.99, 0.05), (0.0, 2.5, 0.05),
])
def test_wait_until_the_next_tick(started, now, wait):
    assert RoundTimer().wait_seconds(started, now) == pytest.approx(wait)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf")])
def test_bad_interval_is_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match="qosCheckIntervalSeconds must be positive seconds"):
        RoundTimer().due(0.0, bad)


@pytest.mark.parametrize("interval, rounds", [(1, 5), (2, 3), (3, 2), (5, 1), (10, 1), (60, 1)])
def test_executor_reverifies_about_every_five_seconds(interval, rounds):
    assert verify_rounds(interval) == rounds


class FakeAgent:
    """A fake clock, a scripted policy interval and the ticks' record. Each tick's work takes
    ``work`` seconds of the fake clock; ``wait`` advances it (no real sleep)."""

    def __init__(self, intervals: dict[float, int], until: float, work: float = 0.02,
                 inputs: dict[float, object] | None = None) -> None:
        self.now = 100.0
        self.start = self.now
        self.intervals = intervals  # from this many seconds after start on: this interval
        self.inputs_at = inputs or {}
        self.until = until
        self.work = work
        self.ticks: list[float] = []
        self.rounds: list[float] = []
        self.waits: list[float] = []

    def t(self) -> float:
        return round(self.now - self.start, 6)

    def _at(self, script: dict[float, object], default):
        value = default
        for since, v in sorted(script.items()):
            if self.t() >= since:
                value = v
        return value

    def observe(self, now: float) -> None:
        self.ticks.append(round(now - self.start, 3))
        self.now += self.work / 2

    def act(self, now: float, qos_round: bool) -> None:
        if qos_round:
            self.rounds.append(round(now - self.start, 3))
        self.now += self.work / 2

    def interval(self) -> int:
        return self._at(self.intervals, 1)

    def inputs(self) -> object:
        return self._at(self.inputs_at, "generation 1")

    async def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds

    def run(self) -> "FakeAgent":
        asyncio.run(tick_loop(self.observe, self.act, self.interval, lambda: self.t() >= self.until,
                              clock=lambda: self.now, wait=self.wait, inputs=self.inputs))
        return self


def test_default_interval_a_round_every_tick():
    agent = FakeAgent({0: 1}, until=5).run()
    assert agent.ticks == [0, 1, 2, 3, 4]
    assert agent.rounds == agent.ticks
    assert all(w == pytest.approx(1 - agent.work) for w in agent.waits)  # the tick's work counts


def test_longer_interval_samples_every_second_and_rounds_every_interval():
    agent = FakeAgent({0: 5}, until=21).run()
    assert agent.ticks == list(range(21))  # the sampler keeps its 1 s period
    assert agent.rounds == [0, 5, 10, 15, 20]


def test_interval_change_applies_at_the_next_tick_without_restart():
    # 10 s rounds, then the policy says 2 s at t=13 and 60 s at t=20: 60 s after the last round
    agent = FakeAgent({0: 10, 13: 2, 20: 60}, until=90).run()
    assert agent.rounds == [0, 10, 13, 15, 17, 19, 79]


def test_a_new_policy_generation_or_mode_runs_a_round_at_once():
    agent = FakeAgent({0: 30}, until=70, inputs={0: "generation 1", 7: "generation 2", 40: "mode off"}).run()
    assert agent.rounds == [0, 7, 37, 40]  # then 70 is past the end


def test_late_ticks_do_not_drift_the_rounds_by_more_than_a_tick():
    # a slow tick (0.4 s of work) still runs a 5 s round on the first tick after 5 s
    agent = FakeAgent({0: 5}, until=16, work=0.4).run()
    assert agent.rounds == [0, 5, 10, 15]
    assert all(w == pytest.approx(0.6) for w in agent.waits)


class FailingAgent(FakeAgent):
    """A tick raising on chosen seconds (observe or act), as one odd kernel file would."""

    def __init__(self, *args, fail_observe=(), fail_act=(), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fail_observe, self.fail_act, self.failures = set(fail_observe), set(fail_act), []

    def observe(self, now: float) -> None:
        if round(now - self.start, 3) in self.fail_observe:
            raise OSError(5, "Input/output error")
        super().observe(now)

    def act(self, now: float, qos_round: bool) -> None:
        if round(now - self.start, 3) in self.fail_act:
            raise ValueError("odd reading")
        super().act(now, qos_round)

    def run(self, failed=True) -> "FailingAgent":
        asyncio.run(tick_loop(self.observe, self.act, self.interval, lambda: self.t() >= self.until,
                              clock=lambda: self.now, wait=self.wait, inputs=self.inputs,
                              failed=self.failures.append if failed else None))
        return self


def test_a_failed_tick_is_told_and_the_next_tick_runs():
    agent = FailingAgent({0: 1}, until=6, fail_observe={1}, fail_act={3}).run()
    assert [type(e) for e in agent.failures] == [OSError, ValueError]
    assert agent.ticks == [0, 2, 3, 4, 5]  # observe failed at 1: that tick was skipped
    assert agent.rounds == [0, 2, 4, 5]  # act failed at 3
    assert len(agent.waits) == 6  # every tick, failed or not, waits for the next one


def test_without_a_failure_handler_a_failed_tick_ends_the_loop():
    with pytest.raises(OSError):
        FailingAgent({0: 1}, until=6, fail_observe={2}).run(failed=False)


@pytest.mark.parametrize(("errors", "said"), [
    ([OSError("a")], ["first"]),
    ([OSError("a"), OSError("a"), OSError("a")], ["first", None, None]),
    ([OSError("a"), OSError("b"), OSError("a")], ["first", "first", "first"]),  # a new kind is logged in full
    ([ValueError("a"), OSError("a")], ["first", "first"]),  # the type counts, not only the message
    ([OSError("a")] * 7, ["first", None, None, "repeat", None, None, "repeat"]),  # every 3rd repeat
])
def test_tick_failures_log_the_first_of_a_kind_then_every_nth_repeat(errors, said):
    failures = TickFailures(every=3)
    assert [failures.seen(e) for e in errors] == said
