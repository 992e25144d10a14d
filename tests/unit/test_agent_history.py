import pytest

from tidal.agent.history import OnlineHistory, steady_wall_clock
from tidal.agent.history_store import decode, encode
from tidal.predict.predictors import Tidal


def test_steps_keep_each_pods_peak_and_close_when_time_moves_on():
    h = OnlineHistory(step_seconds=300)
    assert not h.observe(0, [("a", 1.0, 2.0)])
    assert not h.observe(100, [("a", 1.5, 2.0), ("b", 0.2, 1.0)])
    assert h.observe(300, [("a", 0.5, 2.0)])  # step 0 closed
    history = h.node_history()
    assert history.series_ids == ("a", "b") and len(history) == 1
    assert list(history.usage(0)) == [1.5] and list(history.usage(1)) == [0.2]
    assert history.total_request[-1] == 3.0


def test_absent_pods_contribute_nothing_and_old_steps_are_trimmed():
    h = OnlineHistory(step_seconds=300, keep_steps=3)
    for step in range(6):
        pods = [("a", 1.0, 2.0)] + ([("b", 4.0, 4.0)] if step == 0 else [])
        h.observe(step * 300, pods)
    h.observe(6 * 300, [])
    history = h.node_history()
    assert history.series_ids == ("a",)  # b left more than keep_steps ago
    assert len(history) == 3 and list(history.usage(0)) == [1.0, 1.0, 1.0]


def test_gaps_inside_a_pods_life_are_zero():
    h = OnlineHistory(step_seconds=300)
    h.observe(0, [("a", 1.0, 2.0)])
    h.observe(300, [("b", 1.0, 1.0)])
    h.observe(600, [("a", 3.0, 2.0), ("b", 1.0, 1.0)])
    h.observe(900, [])
    history = h.node_history()
    assert list(history.usage(0)) == [1.0, 0.0, 3.0]
    assert list(history.request(1)) == [0.0, 1.0, 1.0]


def test_unobserved_steps_carry_the_last_reading_for_up_to_an_hour():
    h = OnlineHistory(step_seconds=300)
    h.observe(0, [("a", 1.0, 2.0)])
    h.observe(300, [("a", 2.0, 2.0)])
    h.observe(1500, [("a", 3.0, 2.0)])  # steps 2-4 not observed: the agent was down
    h.observe(1800, [("a", 3.0, 2.0)])
    h.observe(1800 + 14 * 300, [("a", 4.0, 2.0)])  # 13 steps missed: longer than an hour
    h.observe(1800 + 15 * 300, [])
    history = h.node_history()
    assert list(history.usage(0)) == [1.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0] + [0.0] * 13 + [4.0]
    assert list(history.request(0)) == [2.0] * 7 + [0.0] * 13 + [2.0]


def test_the_default_predictor_runs_on_the_agents_history_and_is_conservative_when_young():
    h = OnlineHistory(step_seconds=300)
    for step in range(13):
        h.observe(step * 300, [("web", 1.0, 4.0), ("search", 0.5, 2.0)])
    history = h.node_history()
    peak = Tidal().predict(history)
    # One hour of history: warming up on the better of the peers' rules (Volcano's here:
    # 6 − 0.6 × 4.5 idle = 3.3 cores; Koordinator's 0.35 × 6 + 1.5 = 3.6)
    assert peak == pytest.approx(3.3)
    assert Tidal().explain(history)["regime"] == "warming-up"


class _StubSampler:
    """The two things Predictions reads from a Sampler."""

    node_cpu_millicores = 1000.0  # not the first tick: a CPU rate exists

    def __init__(self, usages, stats):
        self._usages, self._stats = usages, stats

    def pod_usages(self):
        return self._usages

    def online_stats(self, window):
        return self._stats


def test_predictions_follow_the_policys_predictor():
    from tidal.api import qos
    from tidal.agent.collector.histogram import WindowStats
    from tidal.agent.collector.sampler import PodInfo, PodUsage
    from tidal.agent.run import Predictions
    from tidal.api.policy import ColocationPolicy

    web = PodInfo("u1", "ns", "web", "Burstable", qos.QoSLevel.LS, cpu_request_millicores=2000,
                  memory_request_bytes=1024)
    batch = PodInfo("u2", "ns", "job", "BestEffort", qos.QoSLevel.BE, cpu_request_millicores=8000)
    cpu = WindowStats.of(300, [500, 900, 1200])
    memory = WindowStats.of(300, [100, 300, 200])
    sampler = _StubSampler([PodUsage(web, 1200.0, 300), PodUsage(batch, 7000.0, 10)], (cpu, memory))
    predictions = Predictions(step_seconds=300)

    p95 = predictions.status(sampler, ColocationPolicy.from_spec({"overselling": {"predictor": "p95"}}))
    assert p95["onlinePeak"]["cpuMillicores"] == round(cpu.p95)

    tidal = ColocationPolicy.from_spec({})
    assert predictions.status(sampler, tidal) is None  # no closed step yet: nothing to offer
    for t in (0, 300):
        predictions.observe(sampler, t)
    status = predictions.status(sampler, tidal)
    # Only the online pod counts (the BE pod is not online); warming up on Volcano's rule:
    # 2000 − 0.6 × (2000 − 1200) idle
    assert status["predictor"] == "tidal" and status["onlinePeak"] == {"cpuMillicores": 1520, "memoryBytes": 300}


def test_a_node_without_online_pods_holds_nothing_back_from_its_first_sample():
    from tidal.api import qos
    from tidal.agent.collector.histogram import WindowStats
    from tidal.agent.collector.sampler import PodInfo, PodUsage
    from tidal.agent.run import Predictions
    from tidal.api.policy import ColocationPolicy

    batch = PodInfo("u2", "ns", "job", "BestEffort", qos.QoSLevel.BE, cpu_request_millicores=8000)
    sampler = _StubSampler([PodUsage(batch, 7000.0, 10)], (WindowStats.of(300, [0]), WindowStats.of(300, [0])))
    predictions = Predictions(step_seconds=300)
    policy = ColocationPolicy.from_spec({})
    assert predictions.status(sampler, policy) is None  # not sampled yet
    predictions.observe(sampler, 10)
    status = predictions.status(sampler, policy)
    assert status["onlinePeak"]["cpuMillicores"] == 0
    assert status["basis"]["regime"] == "no-online-pods"


def test_a_clock_set_back_never_reopens_a_closed_step():
    """A wall clock stepped back an hour while the agent runs: the samples go on into the open
    step (no step is reopened, the pods' arrays stay aligned on the steps), and what is saved
    still decodes."""
    base = 1_700_000_100
    h = OnlineHistory(step_seconds=300)
    for i in range(5):
        h.observe(base + i * 300, [("a", 1.0, 2.0)])
    for i in range(6):  # set back an hour, usage rising
        h.observe(base + 4 * 300 - 3600 + i * 300, [("a", 5.0, 2.0)])
    assert h.newest_closed == (base + 3 * 300) // 300 and h.open_step == (base + 4 * 300) // 300
    _, first, usage, _ = h.closed_pods()[0]
    assert first + len(usage) - 1 == h.newest_closed
    h.observe(base + 5 * 300, [("a", 1.0, 2.0)])  # the clock past the open step again: it closes
    assert list(h.node_history().usage(0)) == [1.0, 1.0, 1.0, 1.0, 5.0]
    decoded = decode(encode(h, node="n", saved_at=base + 5 * 300).data, node="n", step_seconds=300,
                     keep_steps=h.keep_steps, now=base + 5 * 300)
    assert decoded.history.newest_closed == h.newest_closed


def test_the_steady_wall_clock_follows_the_monotonic_clock_not_the_wall():
    wall, mono = [1_700_000_000.0], [50.0]
    clock = steady_wall_clock(lambda: wall[0], lambda: mono[0])
    assert clock() == 1_700_000_000.0
    wall[0], mono[0] = 1_699_990_000.0, 60.0  # the wall set back ~3 h, 10 s later
    assert clock() == 1_700_000_010.0


def test_the_history_carries_the_unix_time_of_its_first_step():
    """NodeHistory.start is the first step's time, so the shift times a predictor explains are
    Unix times, the same at every report (not seconds since the window's moving start)."""
    h = OnlineHistory(step_seconds=300)
    h.observe(1_700_000_100, [("a", 1.0, 2.0)])
    assert h.open_history().start == 1_700_000_100 // 300 * 300
    h.observe(1_700_000_400, [("a", 1.0, 2.0)])
    assert h.node_history().start == 1_700_000_100 // 300 * 300


def test_the_first_tick_after_a_start_stays_out_of_the_history(tmp_path):
    """A started (or restarted) agent has no CPU rate at its first tick, so every pod would count
    at its request there; the step keeps its maximum, so it held every online pod at its request
    and, restored into a calibrated history, pinned the default predictor at the requests for
    hours after each restart. The windows skip that tick; so does the history."""
    import sys
    from pathlib import Path

    from tidal.agent.run import Predictions
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_collector_sampler import Node  # a recorded cgroup tree under the real Sampler
    node = Node("v2-cgroupfs", tmp_path)
    predictions = Predictions()
    t = 1_000_000 * 300 + 10.0  # 10 s into a 5-minute step
    for i in range(60):
        if i:
            node.advance()
        node.sampler.sample(node.pods)
        predictions.observe(node.sampler, t + i)
    node.advance()
    node.sampler.sample(node.pods)
    predictions.observe(node.sampler, t + 300)  # closes the step
    steps = {uid: (list(usage), list(request)) for uid, _, usage, request in predictions.history.closed_pods()}
    assert len(steps) == 3
    for usage, request in steps.values():
        assert usage[0] < request[0], steps  # measured (half the request here), not the request
