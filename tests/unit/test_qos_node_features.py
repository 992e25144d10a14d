"""NodeQoS runs every feature through the engine with one context and one journal: memory
reclaim and the BE strategies share qos-journal.json, and leaving colocation puts all back."""
from __future__ import annotations

import json
from types import SimpleNamespace

from tidal.agent.collector.cgroups import CgroupDriver, CgroupHierarchy, CgroupLayout, CgroupVersion, PodQOSClass
from tidal.agent.collector.sampler import system_usage
from tidal.agent.qos.engine import QoSEngine
from tidal.agent.qos.node_qos import NodeQoS
from tidal.agent.qos.strategy import ContainerState, PodState
from tidal.api import qos
from tidal.api.qos import QoSLevel

MiB = 1 << 20


class Sample:
    """The sampler's figures a round reads (no kernel)."""

    node_cpu_millicores, node_memory_bytes, node_memory_total_bytes = 1000.0, 700 * MiB, 1000 * MiB
    pods_cpu_millicores, pods_memory_bytes = 800.0, 600 * MiB

    @property
    def system_cpu_millicores(self):
        return system_usage(self.node_cpu_millicores, self.pods_cpu_millicores)

    def level_current(self, level):
        return 0.0, 0.0

    def pod_usage(self, uid):
        return SimpleNamespace(cpu_millicores=100.0, memory_bytes=200 * MiB)


def test_reclaim_and_strategies_share_the_one_journal_and_go_back_off_the_label(tmp_path):
    layout = CgroupLayout(CgroupHierarchy(CgroupVersion.V2, tmp_path / "cg", tmp_path / "cg"), CgroupDriver.SYSTEMD)
    pod = PodState("aaaa-1111", PodQOSClass.BEST_EFFORT, QoSLevel.BE, (ContainerState("containerd://a", 500, 400 * MiB),))
    pod_dir = layout.memory_dir(layout.pod_relpath(pod.uid, pod.qos_class))
    pod_dir.mkdir(parents=True)
    for file, value in (("memory.high", "max"), ("memory.reclaim", ""), ("cpu.weight", "100")):
        (pod_dir / file).write_text(value)
    be_parent = layout.cpu_dir(layout.qos_relpath(PodQOSClass.BEST_EFFORT))
    (be_parent / "cpu.weight").write_text("100")
    node_qos = NodeQoS("n1", layout, QoSEngine(tmp_path / "state" / "qos-journal.json"), {}, node_cpus=4,
                       clock=lambda: 100.0)
    node_qos.observe_node({"metadata": {"labels": {qos.COLOCATION_NODE_LABEL: "true"}}})
    node_qos.observe_policy({"metadata": {"resourceVersion": "1"}, "spec": {
        "beIsolation": {"cpuSuppression": {"enabled": False}, "batchResources": {"enabled": False}},
        "features": {"memoryReclaim": {"enabled": True}}}})  # trigger 50 %: node memory is at 70 %
    round_ = node_qos.round(Sample(), [pod])
    assert round_.changed == {"be-cpu-priority": 2, "memory-reclaim": 1}
    assert (pod_dir / "memory.high").read_text() == str(360 * MiB)          # 90 % of the limit
    assert (pod_dir / "memory.reclaim").read_text() == str(20 * MiB)        # 10 % of its usage
    journal = tmp_path / "state" / "qos-journal.json"
    assert json.loads(journal.read_text())["originals"] == {
        str(pod_dir / "memory.high"): "max", str(pod_dir / "cpu.weight"): "100", str(be_parent / "cpu.weight"): "100"}
    node_qos.observe_node({"metadata": {"labels": {}}})  # colocation off here
    node_qos.round(Sample(), [pod])
    assert (pod_dir / "memory.high").read_text() == "max" and (pod_dir / "cpu.weight").read_text() == "100"
    assert json.loads(journal.read_text())["originals"] == {}
