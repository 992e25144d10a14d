"""Usage outside the pods in the agent's report: predictions.systemUsage (issue 18)."""

from __future__ import annotations

import pytest
from tidal.agent.collector.histogram import WindowStats
from tidal.agent.prediction import SYSTEM_USAGE_STATISTIC, system_usage
from tidal.api.policy import ColocationPolicy

CPU = WindowStats.of(300, [100, 200, 300, 400, 5000])  # one skewed sample: 5000
MEMORY = WindowStats.of(300, [10, 20, 30, 40, 50])


@pytest.mark.parametrize(
    ("cpu", "memory", "statistic", "expected"),
    [
        (CPU, MEMORY, "p95", {"cpuMillicores": round(CPU.p95), "memoryBytes": round(MEMORY.p95),
                              "statistic": "p95", "windowSeconds": 300, "samples": 5}),
        (CPU, MEMORY, "max", {"cpuMillicores": 5000, "memoryBytes": 50,
                              "statistic": "max", "windowSeconds": 300, "samples": 5}),
        (None, MEMORY, "p95", None),  # no sample in the window yet
        (CPU, None, "p95", None),
    ],
)
def test_system_usage_status_names_its_statistic_and_window(cpu, memory, statistic, expected):
    assert system_usage(cpu, memory, 300, statistic) == expected


def test_the_default_statistic_is_p95_not_the_skewed_max():
    assert SYSTEM_USAGE_STATISTIC == "p95"
    assert system_usage(CPU, MEMORY, 300)["cpuMillicores"] < CPU.max
    with pytest.raises(ValueError, match="avg"):
        system_usage(CPU, MEMORY, 300, "avg")


class _Sampler:
    """What report() reads of the sampler."""

    def __init__(self, system):
        self.system = system
        self.windows_asked: list[int] = []

    def summary(self):
        return {"observedAt": "2025-01-02T03:04:05Z"}

    def online_stats(self, window):
        return CPU, MEMORY

    def system_stats(self, window):
        self.windows_asked.append(window)
        return self.system


class _Predictions:
    def status(self, sampler, policy):
        return {"predictor": "p95/600s", "onlinePeak": {"cpuMillicores": 1, "memoryBytes": 2}}


@pytest.mark.parametrize(("system", "reported"), [((CPU, MEMORY), True), ((None, None), False)])
def test_report_puts_system_usage_beside_the_online_peak_over_the_policy_window(system, reported):
    from tidal.agent.run import report

    sampler = _Sampler(system)
    policy = ColocationPolicy.from_spec({"overselling": {"windowSeconds": 600}})
    predictions = report(sampler, policy, _Predictions())["predictions"]
    assert predictions["onlinePeak"] == {"cpuMillicores": 1, "memoryBytes": 2}
    assert sampler.windows_asked == [600]
    if reported:
        assert predictions["systemUsage"] == system_usage(CPU, MEMORY, 600)
    else:
        assert "systemUsage" not in predictions


@pytest.mark.parametrize(("include", "expected"), [(True, {"cpu": 75.0, "memory": 50.0}),
                                                   (False, {"cpu": 25.0, "memory": 20.0})])
def test_the_round_gives_eviction_node_or_pods_usage_as_the_policy_says(include, expected):
    from types import SimpleNamespace

    from tidal.agent.qos.node_qos import eviction_usage_percent

    sampler = SimpleNamespace(node_cpu_millicores=3000.0, node_memory_bytes=500, node_memory_total_bytes=1000,
                              pods_cpu_millicores=1000.0, pods_memory_bytes=200.0)
    assert eviction_usage_percent(sampler, 4, include) == expected
    assert ColocationPolicy().overselling.include_system_usage is True  # the default counts it
