"""The replay's trace: reading, wrapping, and fitting a trace to the node it is replayed on."""

from __future__ import annotations

import pytest
from tidal.agent.replay import NodeTrace, TraceError, read_long_csv


def write(tmp_path, rows: list[str]):
    path = tmp_path / "t.csv"
    path.write_text("timestamp,series_id,usage,request\n" + "\n".join(rows) + "\n")
    return path


def test_fitted_scales_the_largest_total_request_to_the_share_of_the_node(tmp_path) -> None:
    trace = read_long_csv(write(tmp_path, ["0,a,1,4", "0,b,2,4", "300,a,3,4", "300,b,1,12"]))
    assert trace.peak_request == 16
    fitted = trace.fitted(node_cpus=16, fill=0.5)
    assert fitted.peak_request == pytest.approx(8)
    assert fitted.at(0) == [("a", 0.5, 2.0), ("b", 1.0, 2.0)]
    assert fitted.at(300) == [("a", 1.5, 2.0), ("b", 0.5, 6.0)]
    assert trace.at(0) == [("a", 1.0, 4.0), ("b", 2.0, 4.0)]  # the original is unchanged


@pytest.mark.parametrize("fill", [0.0, -0.5, 1.5])
def test_fitted_refuses_a_share_outside_0_1(fill: float) -> None:
    trace = NodeTrace([0.0], [[("a", 1.0, 2.0)]])
    with pytest.raises(TraceError, match="fill"):
        trace.fitted(16, fill)


def test_a_trace_without_requests_is_left_as_it_is() -> None:
    trace = NodeTrace([0.0, 300.0], [[("a", 0.5, 0.0)], [("a", 0.7, 0.0)]])
    assert trace.fitted(16, 0.5) is trace


def test_the_replaying_agent_announces_its_metrics_as_a_file_sd_target(tmp_path):
    import json

    from tidal.agent.replay import write_target_file
    path = tmp_path / "targets" / "tidal-agent-replay.json"
    write_target_file(path, "127.0.0.1", 40123)
    assert json.loads(path.read_text()) == [{"targets": ["127.0.0.1:40123"],
                                             "labels": {"component": "tidal-agent-replay"}}]
    write_target_file(path, "::1", 40124)  # rewritten in place, IPv6 in brackets
    assert json.loads(path.read_text())[0]["targets"] == ["[::1]:40124"]
    assert [p.name for p in path.parent.iterdir()] == ["tidal-agent-replay.json"]  # no temporary left
