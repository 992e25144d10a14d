"""Kernel QoS levels (``features.kernelQoSLevel``, issue 20): openEuler's ``cpu.qos_level`` for
every pod by its level and ``memory.qos_level`` for BE pods, where the probe found the files.

The plan is checked table-driven; the engine on the recorded openEuler-like tree
(``tests/data/cgroups/v1-cgroupfs-openeuler``: cgroup v1, every cgroup with both files at the
kernel's default 0) writes the levels and puts every original back when the switch goes off; on a
tree without the files it writes nothing and the node reports the feature as not supported.
"""
from __future__ import annotations

import errno
import json
import logging
import shutil
from pathlib import Path

import pytest

from tidal.agent.collector.cgroups import CgroupDriver, CgroupHierarchy, CgroupLayout, CgroupVersion, PodQOSClass, \
    detect_layout
from tidal.agent.executor import Outcome
from tidal.agent.executor.cgroupfs import ApplyResult, CgroupWrite
from tidal.agent.qos import be_cpu_priority
from tidal.agent.qos.capabilities import probe, supported_map
from tidal.agent.qos.engine import QoSEngine
from tidal.agent.qos.feature import Context, Options
from tidal.agent.qos.kernel_qos_level import CPU_QOS_LEVEL, KernelQoSLevel, kernel_level_name, plan_writes
from tidal.agent.qos.pod_features import FeaturePodState, feature_pod_state
from tidal.agent.qos.policy_status import unsupported_features
from tidal.agent.qos.strategy import ContainerState, NodeState, PodState
from tidal.api.feature_support import feature_support
from tidal.api.policy import ColocationPolicy
from tidal.api.qos import QoSLevel

DATA = Path(__file__).parent.parent / "data" / "cgroups"
BOTH = {"openeuler.cpu.qos_level": True, "openeuler.memory.qos_level": True}
LAYOUT = CgroupLayout(CgroupHierarchy(CgroupVersion.V1, Path("/cg/cpu,cpuacct"), Path("/cg/memory")),
                      CgroupDriver.CGROUPFS)


def _policy(on: bool = True, cpu_priority: bool = True) -> ColocationPolicy:
    spec = ColocationPolicy().to_spec()
    spec["features"]["kernelQoSLevel"]["enabled"] = on
    spec["beIsolation"]["cpuPriority"]["enabled"] = cpu_priority
    return ColocationPolicy.from_spec(spec)


def _pod(uid: str, level: QoSLevel | None, qos_class: PodQOSClass = PodQOSClass.BURSTABLE,
         volcano: str | None = None, containers: tuple[str, ...] = ("containerd://c1",)) -> FeaturePodState:
    return FeaturePodState(uid, qos_class, level, tuple(ContainerState(c) for c in containers),
                           namespace="ns", name=uid, volcano_qos_level=volcano)


def _state(pods, capabilities=BOTH, policy=None) -> NodeState:
    return NodeState(tuple(pods), 8, 0, policy or _policy(), capabilities, LAYOUT)


def _files(writes) -> dict[str, str]:
    return {str(w.path / w.file).removeprefix("/cg/"): w.value for w in writes}


# -- which level a pod gets -----------------------------------------------------------------------

@pytest.mark.parametrize("pod, name, level", [
    (_pod("hls", QoSLevel.HLS, PodQOSClass.GUARANTEED), "LC", 2),
    (_pod("ls", QoSLevel.LS), "LS", 0),
    (_pod("ls-volcano-hls", QoSLevel.LS, volcano="HLS"), "HLS", 1),
    (_pod("ls-volcano-ls", QoSLevel.LS, volcano="LS"), "LS", 0),
    (_pod("be", QoSLevel.BE, PodQOSClass.BEST_EFFORT), "BE", -1),
    (_pod("none", None), None, None),
    # a plain PodState (no annotations known): LS is LS
    (PodState("plain", PodQOSClass.BURSTABLE, QoSLevel.LS), "LS", 0),
])
def test_level_by_tidal_level_and_volcano_alias(pod, name, level):
    assert kernel_level_name(pod) == name
    assert (CPU_QOS_LEVEL[name] if name else None) == level


@pytest.mark.parametrize("annotations, level, volcano", [
    ({"volcano.sh/qos-level": "HLS"}, QoSLevel.LS, "HLS"),
    ({"volcano.sh/qos-level": " HLS "}, QoSLevel.LS, "HLS"),
    ({"volcano.sh/qos-level": "LC"}, QoSLevel.HLS, "LC"),
    # the canonical annotation decides: the alias is not read at all
    ({"colocation.tidal.io/qos-level": "LS", "volcano.sh/qos-level": "HLS"}, QoSLevel.LS, None),
    ({"openfuyao.com/qos-level": "LS"}, QoSLevel.LS, None),
])
def test_the_raw_volcano_alias_is_kept_only_when_it_is_read(annotations, level, volcano):
    pod = {"metadata": {"uid": "u", "namespace": "ns", "name": "p", "annotations": annotations}}
    state = feature_pod_state(pod, PodState("u", PodQOSClass.BURSTABLE, level))
    assert state.volcano_qos_level == volcano
    assert kernel_level_name(state) == ("HLS" if volcano == "HLS" else {QoSLevel.LS: "LS", QoSLevel.HLS: "LC"}[level])


# -- the plan -------------------------------------------------------------------------------------

PODS = (
    _pod("g", QoSLevel.HLS, PodQOSClass.GUARANTEED),
    _pod("b", QoSLevel.LS, volcano="HLS"),
    _pod("e", QoSLevel.BE, PodQOSClass.BEST_EFFORT),
    _pod("x", None),
)
CPU = "cpu,cpuacct/kubepods"
MEM = "memory/kubepods"
ALL_CPU = {
    f"{CPU}/besteffort/cpu.qos_level": "-1",
    f"{CPU}/podg/cpu.qos_level": "2", f"{CPU}/podg/c1/cpu.qos_level": "2",
    f"{CPU}/burstable/podb/cpu.qos_level": "1", f"{CPU}/burstable/podb/c1/cpu.qos_level": "1",
    f"{CPU}/besteffort/pode/cpu.qos_level": "-1", f"{CPU}/besteffort/pode/c1/cpu.qos_level": "-1",
}
ALL_MEMORY = {
    f"{MEM}/besteffort/memory.qos_level": "-1",
    f"{MEM}/besteffort/pode/memory.qos_level": "-1", f"{MEM}/besteffort/pode/c1/memory.qos_level": "-1",
}


@pytest.mark.parametrize("capabilities, multilevel, expected", [
    (BOTH, True, {**ALL_CPU, **ALL_MEMORY}),
    ({"openeuler.cpu.qos_level": True}, True, ALL_CPU),
    ({"openeuler.memory.qos_level": True}, True, ALL_MEMORY),
    ({"openeuler.cpu.qos_level": False, "openeuler.memory.qos_level": False}, True, {}),
    ({}, True, {}),
    # a kernel with only two levels refused a positive one: online pods get 0, what it accepts
    (BOTH, False, {**ALL_CPU, **{k: "0" for k, v in ALL_CPU.items() if v in ("1", "2")}, **ALL_MEMORY}),
])
def test_plan_by_capability(capabilities, multilevel, expected):
    assert _files(plan_writes(_state(PODS, capabilities), multilevel)) == expected


def test_no_be_pods_leave_the_besteffort_group_alone():
    files = _files(plan_writes(_state(PODS[:2])))
    assert not any("besteffort" in f for f in files) and not any(f.endswith("memory.qos_level") for f in files)


def test_be_cpu_priority_and_this_feature_agree_on_every_file_they_share():
    state = _state(PODS)
    ours = _files(plan_writes(state))
    theirs = _files(be_cpu_priority.BECPUPriority().plan(state))
    shared = set(ours) & set(theirs)
    assert shared == {f"{CPU}/besteffort/cpu.qos_level", f"{CPU}/besteffort/pode/cpu.qos_level"}
    assert {f: ours[f] for f in shared} == {f: theirs[f] for f in shared}


def test_switched_by_the_policy_and_undone_by_the_journal():
    feature = KernelQoSLevel()
    assert not feature.enabled(Context(_state(PODS, policy=ColocationPolicy())))  # default off
    assert feature.enabled(Context(_state(PODS)))
    assert feature.undo(Context(_state(PODS))).writes == ()


def test_a_refused_positive_level_makes_the_feature_write_what_the_kernel_accepts(caplog):
    feature = KernelQoSLevel()
    ctx = Context(_state(PODS))
    refused_offline = CgroupWrite(Path("/cg/x"), "cpu.qos_level", "-1")
    feature.settle(ctx, Outcome(ApplyResult(errors=[(refused_offline, "/cg/x/cpu.qos_level: Invalid argument")])))
    assert feature.multilevel  # only a level above 0 tells the kernel has two levels
    refused = CgroupWrite(Path("/cg/podg"), "cpu.qos_level", "2")
    with caplog.at_level(logging.WARNING):
        feature.settle(ctx, Outcome(ApplyResult(errors=[(refused, "/cg/podg/cpu.qos_level: Invalid argument")])))
    assert not feature.multilevel
    assert "refused cpu.qos_level 2 (/cg/podg/cpu.qos_level: Invalid argument)" in caplog.text
    assert set(_files(feature.plan(ctx).writes).values()) == {"0", "-1"}


# -- the engine on recorded trees -----------------------------------------------------------------

def _tree(tmp_path: Path, name: str):
    root = tmp_path / name
    shutil.copytree(DATA / name, root)
    proc = tmp_path / "proc"
    (proc / "sys/kernel").mkdir(parents=True)
    (proc / "sys/kernel/osrelease").write_text("5.10.0-182.0.0.95.oe2203sp3.x86_64\n")
    (proc / "sys/vm").mkdir(parents=True)
    (proc / "sys/vm/memcg_qos_enable").write_text("1\n")
    return root, proc, json.loads((DATA / f"{name}.expected.json").read_text())


def _pods(expected) -> list[FeaturePodState]:
    """Guaranteed pods HLS, Burstable LS (the first says volcano.sh/qos-level: HLS), BestEffort BE."""
    pods, burstable = [], 0
    for uid, pod in expected["pods"].items():
        qos_class = PodQOSClass(pod["qosClass"])
        level = {"Guaranteed": QoSLevel.HLS, "Burstable": QoSLevel.LS, "BestEffort": QoSLevel.BE}[pod["qosClass"]]
        volcano = None
        if qos_class is PodQOSClass.BURSTABLE:
            volcano, burstable = ("HLS" if burstable == 0 else None), burstable + 1
        containers = tuple(ContainerState(c["containerID"]) for c in pod["containers"].values())
        pods.append(FeaturePodState(uid, qos_class, level, containers, namespace="ns", name=pod["name"],
                                    volcano_qos_level=volcano))
    return pods


def _qos_files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text().strip() for p in root.rglob("*.qos_level")}


@pytest.mark.parametrize("cpu_priority", [True, False])
def test_engine_writes_the_levels_on_an_openeuler_tree_and_restores_them(tmp_path, cpu_priority):
    root, proc, expected = _tree(tmp_path, "v1-cgroupfs-openeuler")
    capabilities = supported_map(probe(root, proc, tmp_path / "sys"))
    assert capabilities["openeuler.cpu.qos_level"] and capabilities["openeuler.memory.qos_level"]
    layout = detect_layout(root)
    pods = _pods(expected)
    before = _qos_files(root)
    assert set(before.values()) == {"0"}

    def state(on: bool) -> NodeState:
        return NodeState(tuple(pods), 4, 0, _policy(on, cpu_priority), capabilities, layout)

    engine = QoSEngine(tmp_path / "journal.json", options=Options(proc_root=proc))
    out = engine.run(Context(state(True), True, options=engine.options))
    assert out.result.errors == []
    assert out.changed.get("kernel-qos-level", 0) > 0

    want = dict(before)
    cpu, memory = "cpu,cpuacct", "memory"
    want[f"{cpu}/kubepods/besteffort/cpu.qos_level"] = "-1"
    want[f"{memory}/kubepods/besteffort/memory.qos_level"] = "-1"
    for pod in pods:
        level = {"LC": "2", "HLS": "1", "LS": "0", "BE": "-1"}[kernel_level_name(pod)]
        info = expected["pods"][pod.uid]
        for rel in [info["relpath"], *(c["relpath"] for c in info["containers"].values())]:
            want[f"{cpu}/{rel}/cpu.qos_level"] = level
            if pod.is_be:
                want[f"{memory}/{rel}/memory.qos_level"] = "-1"
    assert _qos_files(root) == want
    assert {v for k, v in want.items() if "/burstable/" in k and k.endswith("cpu.qos_level")} == {"0", "1"}
    assert engine.run(Context(state(True), True, options=engine.options)).result.written == []  # idempotent

    # the switch goes off: every file back, except those BE CPU priority still wants (-1, agreed)
    out = engine.run(Context(state(False), True, options=engine.options))
    assert out.result.restore_problems == []
    be_dirs = ["kubepods/besteffort", *(expected["pods"][p.uid]["relpath"] for p in pods if p.is_be)]
    still = {f"{cpu}/{d}/cpu.qos_level": "-1" for d in be_dirs} if cpu_priority else {}
    assert _qos_files(root) == {**before, **still}
    # the node leaves colocation: everything back
    engine.run(Context(state(False), False, options=engine.options))
    assert _qos_files(root) == before


def test_memory_qos_level_without_memcg_qos_enable_is_reported(tmp_path, caplog):
    root, proc, expected = _tree(tmp_path, "v1-cgroupfs-openeuler")
    (proc / "sys/vm/memcg_qos_enable").write_text("0\n")
    capabilities = supported_map(probe(root, proc, tmp_path / "sys"))
    state = NodeState(tuple(_pods(expected)), 4, 0, _policy(), capabilities, detect_layout(root))
    engine = QoSEngine(tmp_path / "journal.json", options=Options(proc_root=proc))
    with caplog.at_level(logging.INFO, logger="tidal.agent.qos.kernel_qos_level"):
        engine.run(Context(state, True, options=engine.options))
    assert "vm.memcg_qos_enable is 0" in caplog.text
    assert "kernel QoS level LC for pod ns/web-0: cpu.qos_level 2" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tidal.agent.qos.kernel_qos_level"):
        engine.run(Context(state, True, options=engine.options))
    assert caplog.text == ""  # reported when written, not every round


def test_a_two_level_kernel_refuses_positive_levels_and_gets_zero(tmp_path, monkeypatch, caplog):
    """The kernel's EINVAL for 1 and 2 (openEuler kernels before multi-level scheduling)."""
    root, proc, expected = _tree(tmp_path, "v1-cgroupfs-openeuler")
    write_text = Path.write_text

    def kernel(self, data, *args, **kwargs):
        if self.name == "cpu.qos_level" and data.strip() not in ("0", "-1"):
            raise OSError(errno.EINVAL, "Invalid argument")
        return write_text(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", kernel)
    capabilities = supported_map(probe(root, proc, tmp_path / "sys"))
    state = NodeState(tuple(_pods(expected)), 4, 0, _policy(), capabilities, detect_layout(root))
    engine = QoSEngine(tmp_path / "journal.json", options=Options(proc_root=proc))
    with caplog.at_level(logging.WARNING):
        out = engine.run(Context(state, True, options=engine.options))
    assert out.result.errors and all(w.file == "cpu.qos_level" and w.value in ("1", "2") and "Invalid argument" in p
                                     for w, p in out.result.errors)
    assert caplog.text.count("offers only the levels 0 (online) and -1 (offline)") == 1
    out = engine.run(Context(state, True, options=engine.options))
    assert out.result.errors == []
    assert set(_qos_files(root).values()) == {"0", "-1"}


def test_a_tree_without_the_files_gets_nothing_and_the_node_says_why(tmp_path):
    root, proc, expected = _tree(tmp_path, "v1-cgroupfs")
    probed = probe(root, proc, tmp_path / "sys")
    capabilities = supported_map(probed)
    assert not capabilities["openeuler.cpu.qos_level"] and not capabilities["openeuler.memory.qos_level"]
    state = NodeState(tuple(_pods(expected)), 4, 0, _policy(cpu_priority=False), capabilities, detect_layout(root))
    engine = QoSEngine(tmp_path / "journal.json", options=Options(proc_root=proc))
    out = engine.run(Context(state, True, options=engine.options))
    assert "kernel-qos-level" not in out.changed
    assert not any(w.file.endswith("qos_level") for w in [*out.result.written, *out.result.missing])
    assert list(root.rglob("*.qos_level")) == []

    spec = _policy().to_spec()
    reason = ("openeuler.cpu.qos_level: no cpu.qos_level: not an openEuler kernel; "
              "openeuler.memory.qos_level: no memory.qos_level: not an openEuler kernel")
    problems = [p for p in unsupported_features(spec, probed) if "kernelQoSLevel" in p]
    assert problems == [f"spec.features.kernelQoSLevel: enabled but not supported on this node ({reason})"]
    support = {i["section"]: i for i in feature_support(probed)}["spec.features.kernelQoSLevel"]
    assert (support["supported"], support["reason"]) == (False, reason)
    # switched off, nothing is reported
    assert not any("kernelQoSLevel" in p for p in unsupported_features(_policy(on=False).to_spec(), probed))


@pytest.mark.parametrize("cpu, memory, problem", [
    (True, True, False),
    (True, False, False),   # cpu.qos_level alone is worth writing
    (False, True, False),   # so is memory.qos_level alone (BE pods)
    (False, False, True),
])
def test_either_file_is_enough_for_the_node_to_support_the_section(cpu, memory, problem):
    from tidal.agent.qos.capabilities import Capability
    caps = [Capability("openeuler.cpu.qos_level", cpu, "cpu reason"),
            Capability("openeuler.memory.qos_level", memory, "memory reason")]
    problems = unsupported_features({"features": {"kernelQoSLevel": {"enabled": True}}}, caps)
    assert problems == ([
        "spec.features.kernelQoSLevel: enabled but not supported on this node "
        "(openeuler.cpu.qos_level: cpu reason; openeuler.memory.qos_level: memory reason)"] if problem else [])
    support = {i["section"]: i for i in feature_support(caps)}["spec.features.kernelQoSLevel"]
    assert support["supported"] is (not problem)
