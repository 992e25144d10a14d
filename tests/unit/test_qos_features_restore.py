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
    assert asyncio.run(restore_node(None, "n1", state)) == []
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
