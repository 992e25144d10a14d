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


@pytest.mark.parametrize("labels, name, reason", [
    pytest.param({"colocation.tidal.io/oversubscription": "true"}, "oversubscription",
                 "replayed node: tidal-agent replay does not evict (this mode evicts when node usage above the "
                 "high watermark and the node's requests (native and batch) above 100% of allocatable)",
                 id="oversubscription-only"),
    pytest.param({"volcano.sh/colocation": "true"}, "colocation",
                 "replayed node: tidal-agent replay does not evict (this mode evicts when node usage above the "
                 "high watermark)", id="volcano-colocation-alias"),
    pytest.param({}, "off", "node mode off: Tidal does nothing", id="off"),
    pytest.param(None, "off", "node mode off: Tidal does nothing", id="node-unknown"),
])
def test_a_replayed_node_reports_its_mode_from_its_labels_and_never_evicts(labels, name, reason):
    from tidal.agent.replay import replayed_mode_status
    node = None if labels is None else {"metadata": {"name": "kwok-1", "labels": labels}}
    status = replayed_mode_status(node)
    assert (status["name"], status["evictionAllowed"], status["evictionReason"]) == (name, False, reason)


def test_the_replaying_agent_keeps_only_its_nodes_metadata():
    from tidal.agent.replay import nodes_watch
    watch = nodes_watch(None, ["kwok-1"])
    mine = {"metadata": {"name": "kwok-1", "uid": "u1", "labels": {"a": "b"}, "resourceVersion": "1"},
            "status": {"allocatable": {"cpu": "16"}}}
    watch.apply("ADDED", mine)
    watch.apply("ADDED", {"metadata": {"name": "other", "uid": "u2", "labels": {}}})
    assert watch.objects == {"u1": {"metadata": {"name": "kwok-1", "labels": {"a": "b"}, "annotations": None},
                                    "spec": {"taints": None}, "status": {"allocatable": {"cpu": "16"}}}}
