"""A node's eviction series exist at 0 from its agent's start (tidal.metrics.zero_evictions).
Prometheus' increase() sees no increase in a series that first appears at 1: without the zero,
a node's first eviction was missing from the console's evictions chart (the CI's lab run of
2026-11-27 waited 180 s for it, with the TidalEvicted Event already there)."""
from prometheus_client import CollectorRegistry, generate_latest

from tidal.metrics import EVICTION_FAILURE_REASONS, EVICTION_SERIES, node_metrics, zero_evictions


def _lines(registry, name="tidal_evictions_total"):
    return [ln for ln in generate_latest(registry).decode().splitlines() if ln.startswith(name + "{")]


def test_every_series_a_node_can_count_is_there_at_zero_before_any_eviction():
    registry = CollectorRegistry()
    metrics = node_metrics(registry)
    assert _lines(registry) == []
    zero_evictions(metrics, "n1")
    lines = _lines(registry)
    assert len(lines) == len(EVICTION_SERIES) and all(ln.endswith(" 0.0") for ln in lines)
    for resource, reason in EVICTION_SERIES:
        assert f'tidal_evictions_total{{node="n1",reason="{reason}",resource="{resource}"}} 0.0' in lines
    metrics.evictions.labels("n1", "cpu", "watermark").inc()
    assert 'tidal_evictions_total{node="n1",reason="watermark",resource="cpu"} 1.0' in _lines(registry)
    # and the evictions that did not happen, by why
    assert sorted(_lines(registry, "tidal_eviction_failures_total")) == [
        f'tidal_eviction_failures_total{{node="n1",reason="{reason}"}} 0.0' for reason in sorted(EVICTION_FAILURE_REASONS)]


def test_the_series_match_what_the_agent_counts():
    """Every resource the policy lets PSI interference watch, and both watermark resources."""
    from tidal.api.policy import PSIResource
    assert {r for r, k in EVICTION_SERIES if k == "psi"} == {r.value for r in PSIResource}
    assert {r for r, k in EVICTION_SERIES if k == "watermark"} == {"cpu", "memory"}
