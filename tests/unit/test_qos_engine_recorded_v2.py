"""The QoS engine on recorded cgroup v2 trees (systemd and cgroupfs drivers), the layouts this
machine (cgroup v1 hybrid) lacks: a copy of each tree gets the kernel's default control files,
the engine runs a round for its BE pods, and a restore puts every default back."""
import json
import shutil
from pathlib import Path

import pytest
from tidal.agent.collector.cgroups import PodQOSClass, detect_layout
from tidal.agent.qos.engine import QoSEngine
from tidal.agent.qos.strategy import ContainerState, NodeState, PodState
from tidal.api.policy import ColocationPolicy
from tidal.api.qos import QoSLevel

DATA = Path(__file__).parent.parent / "data" / "cgroups"
#: what a fresh v2 cgroup reads
DEFAULTS = {"cpu.max": "max 100000", "cpu.weight": "100", "cpu.idle": "0", "memory.max": "max"}


def _tree(tmp_path, name):
    root = tmp_path / name
    shutil.copytree(DATA / name, root)
    for d in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        if d != root:
            for file, value in DEFAULTS.items():
                (d / file).write_text(value + "\n")
    return root, json.loads((DATA / f"{name}.expected.json").read_text())


def _snapshot(root):
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", ["v2-cgroupfs", "v2-systemd"])
@pytest.mark.parametrize("idle", [True, False])
def test_round_and_restore_on_a_recorded_v2_tree(tmp_path, name, idle):
    root, expected = _tree(tmp_path, name)
    before = _snapshot(root)
    layout = detect_layout(root)
    pods = []
    for uid, pod in expected["pods"].items():
        be = pod["qosClass"] == "BestEffort"
        containers = tuple(ContainerState(c["containerID"], 1500 if be else 0, (512 << 20) if be else 0)
                           for c in pod["containers"].values())
        pods.append(PodState(uid, PodQOSClass(pod["qosClass"]), QoSLevel.BE if be else QoSLevel.LS, containers))
    # the kubelet's pods as recorded: the BE idle group (on by default; the agent makes it before
    # the engine's round, tidal.agent.be_idle_group) is not in these trees
    policy = ColocationPolicy.from_spec({"beIsolation": {"cpuPriority": {"idleGroup": False}}})
    state = NodeState(pods=tuple(pods), node_cpus=8, online_usage_millicores=1200, policy=policy,
                      capabilities={"cpu.idle": idle}, layout=layout)
    engine = QoSEngine(tmp_path / f"{name}.journal.json")
    result, changed = engine.reconcile(state, True)
    assert result.errors == [] and result.missing == []
    # the BE parent's quota is written by the interference control (schedstat not probed here:
    # its allowance is suppression's quota)
    assert set(changed) == {"be-cpu-interference", "be-cpu-priority", "be-batch-resources"}

    besteffort = root / layout.qos_relpath(PodQOSClass.BEST_EFFORT)
    # 8 CPUs x 65 % - 1.2 online = 4 CPUs for every BE pod together
    assert (besteffort / "cpu.max").read_text() == "400000 100000"
    for uid, pod in expected["pods"].items():
        pod_dir = root / pod["relpath"]
        if pod["qosClass"] != "BestEffort":
            assert (pod_dir / "cpu.idle").read_text() == "0\n" and (pod_dir / "cpu.weight").read_text() == "100\n"
            continue
        if idle:
            assert (pod_dir / "cpu.idle").read_text() == "1" and (pod_dir / "cpu.weight").read_text() == "100\n"
        else:
            assert (pod_dir / "cpu.weight").read_text() == "1" and (pod_dir / "cpu.idle").read_text() == "0\n"
        assert (pod_dir / "cpu.max").read_text() == "150000 100000"
        assert (pod_dir / "memory.max").read_text() == str(512 << 20)
        for container in pod["containers"].values():
            c = root / container["relpath"]
            # 1500 m: quota 150000/100000, shares 1536 -> weight 59 (the kubelet's conversion)
            assert (c / "cpu.max").read_text() == "150000 100000"
            assert (c / "cpu.weight").read_text() == "59"
            assert (c / "memory.max").read_text() == str(512 << 20)

    assert engine.reconcile(state, True)[0].written == []  # idempotent
    assert engine.disable() == []
    after = {k: v.strip() + "\n" if k.rsplit("/", 1)[-1] in DEFAULTS else v for k, v in _snapshot(root).items()}
    assert after == before
