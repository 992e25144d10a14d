"""`tidal-agent restore` also undoes the advanced features' work (their own journals)."""
import asyncio
import json

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
