"""`tidal-agent restore` also undoes the advanced features' work (their own journals)."""
import asyncio
import json

import pytest

from tidal.agent.run import restore_node


def test_restore_node_puts_back_what_memory_reclaim_and_numa_affinity_changed(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    high, cpus = tmp_path / "memory.high", tmp_path / "cpuset.cpus"
    high.write_text(str(400 << 20))
    cpus.write_text("10-15")
    (state / "memory-reclaim-journal.json").write_text(json.dumps({"originals": {str(high): "max"}}))
    (state / "numa-journal.json").write_text(json.dumps({"originals": {str(cpus): "0-31"}}))
    assert asyncio.run(restore_node(None, "n1", state, tmp_path)) == []
    assert high.read_text() == "max" and cpus.read_text() == "0-31"
    for name in ("memory-reclaim-journal.json", "numa-journal.json"):
        assert json.loads((state / name).read_text())["originals"] == {}


@pytest.mark.parametrize("labels, annotations, restores", [
    pytest.param({"colocation.tidal.io/colocation": "true"}, {}, False, id="colocation-stays"),
    pytest.param({"colocation.tidal.io/oversubscription": "true"}, {}, False,
                 id="colocation-label-gone-oversubscription-stays-no-restore"),
    pytest.param({"volcano.sh/colocation": "true"}, {}, False, id="volcano-alias-keeps-the-agent"),
    pytest.param({}, {}, True, id="no-label-left-restores"),
    pytest.param({"colocation.tidal.io/colocation": "false"}, {}, True, id="switched-to-false-restores"),
    pytest.param({"volcano.sh/oversubscription": "true"},
                 {"colocation.tidal.io/volcano-oversubscription-written": "true"}, True,
                 id="only-the-oversell-masters-own-volcano-label-left-restores"),
    pytest.param(None, None, True, id="node-gone-restores"),
])
def test_a_stopping_agent_restores_only_when_the_node_mode_is_off(labels, annotations, restores):
    from tidal.agent.run import restore_on_exit
    node = None if labels is None else {"metadata": {"labels": labels, "annotations": annotations}}
    assert restore_on_exit(node) is restores


class _NodeAPI:
    """Answers GET of the node: an object, an ApiError status, or an exception."""

    def __init__(self, answer):
        self.answer = answer

    async def request(self, method, path, **_):
        assert (method, path) == ("GET", "/api/v1/nodes/n1")
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


@pytest.mark.parametrize("answer, expected", [
    pytest.param({"metadata": {"labels": {}}}, {"metadata": {"labels": {}}},
                 id="the-api-servers-node-wins-over-a-stale-watch"),
    pytest.param("404", None, id="deleted"),
    pytest.param("500", "cached", id="an-api-error-keeps-the-watched-one"),
    pytest.param(ConnectionRefusedError(), "cached", id="the-api-away-keeps-the-watched-one"),
])
def test_the_node_decided_on_on_the_way_out(answer, expected):
    import asyncio

    from tidal.agent.run import node_now
    from tidal.kube.client import ApiError
    cached = {"metadata": {"labels": {"colocation.tidal.io/colocation": "true"}}}
    if answer in ("404", "500"):
        answer = ApiError(int(answer), "x")
    got = asyncio.run(node_now(_NodeAPI(answer), "n1", cached))
    assert got == (cached if expected == "cached" else expected)
