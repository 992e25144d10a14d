"""PSI interference: the pure decision (table-driven), the pressure reader on recorded trees, and
the node round's wiring (metrics reason ``psi``)."""
from __future__ import annotations

from pathlib import Path

import pytest
from tidal.agent.collector.cgroups import CgroupDriver, CgroupHierarchy, CgroupLayout, CgroupVersion, PodQOSClass
from tidal.agent.qos.eviction import Action, Candidate
from tidal.agent.qos.psi_interference import (
    NODE_SCOPE,
    NodeReclaim,
    PressureReader,
    PSIDecision,
    PSIInterferenceEviction,
    attributable_pressure,
    parse_node_reclaim_count,
    parse_some_avg10,
)
from tidal.agent.qos.strategy import PodState
from tidal.api.policy import ColocationPolicy
from tidal.api.qos import QoSLevel

PRESSURE = "some avg10={} avg60=1.00 avg300=0.50 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"


def config(**kw):
    spec = {"enabled": True, **kw}
    return ColocationPolicy.from_spec({"features": {"psiInterference": spec}}).features.psi_interference


BE_BIG = Candidate("be-big", True, 0, {"cpu": 1500.0, "memory": 100 << 20}, "batch", "big")
BE_FAT = Candidate("be-fat", True, 0, {"cpu": 100.0, "memory": 900 << 20}, "batch", "fat")
BE_LOW = Candidate("be-low", True, -10, {"cpu": 1500.0, "memory": 0.0}, "batch", "low")
LS = Candidate("ls", False, 0, {"cpu": 3000.0, "memory": 2 << 30}, "web", "api")
PODS = [BE_BIG, BE_FAT, LS]


@pytest.mark.parametrize("pressure, cfg, pods, victim, resource", [
    ({NODE_SCOPE: {"cpu": 4.9, "memory": 0.0}}, {}, PODS, None, None),          # below 5.0
    ({NODE_SCOPE: {"cpu": 5.0}}, {}, PODS, None, None),                         # not above
    ({NODE_SCOPE: {"cpu": 12.0}}, {}, PODS, "be-big", "cpu"),                    # most CPU
    ({NODE_SCOPE: {"memory": 7.5}}, {}, PODS, "be-fat", "memory"),              # most memory
    ({NODE_SCOPE: {"cpu": 6.0, "memory": 30.0}}, {}, PODS, "be-fat", "memory"),  # worst resource
    ({NODE_SCOPE: {"io": 50.0}}, {}, PODS, None, None),                         # io not watched by default
    ({NODE_SCOPE: {"io": 50.0}}, {"resources": ["io"]}, PODS, "be-big", "io"),  # io: CPU stands in
    ({NODE_SCOPE: {"cpu": 9.0}}, {"avg10ThresholdPercent": 10}, PODS, None, None),
    ({"web/api": {"cpu": 40.0}}, {}, PODS, "be-big", "cpu"),                    # a pod's own PSI (v2)
    ({NODE_SCOPE: {"cpu": 90.0}}, {}, [LS], None, None),                         # no BE pod: nothing
    ({NODE_SCOPE: {"cpu": 90.0}}, {}, [BE_BIG, BE_LOW], "be-low", "cpu"),       # tie: lower priority
    ({NODE_SCOPE: {"cpu": 90.0}}, {"enabled": False}, PODS, None, None),
])
def test_victim(pressure, cfg, pods, victim, resource):
    decisions = PSIInterferenceEviction().step(100.0, config(**cfg), pressure, pods)
    if victim is None:
        assert decisions == []
        return
    (d,) = decisions
    assert isinstance(d, PSIDecision) and d.kind == "psi" and d.action is Action.EVICT
    assert (d.pod_uid, d.resource) == (victim, resource)
    assert f"{resource} some avg10" in d.reason


def test_reason_carries_the_figures():
    (d,) = PSIInterferenceEviction().step(0, config(), {NODE_SCOPE: {"cpu": 12.345}}, PODS)
    assert d.reason == ("PSI interference: cpu some avg10 12.35% above 5% (node): evicting BE pod batch/big, "
                        "the largest BE cpu user (1500m CPU)")
    assert (d.avg10_percent, d.threshold_percent, d.scope) == (12.345, 5.0, "node")


def test_cooldown_between_evictions_and_no_second_choice_of_the_same_pod():
    machine, cfg, hot = PSIInterferenceEviction(), config(cooldownSeconds=60), {NODE_SCOPE: {"cpu": 50.0}}
    assert [d.pod_uid for d in machine.step(0, cfg, hot, PODS)] == ["be-big"]
    assert machine.step(30, cfg, hot, PODS) == []                   # cooling down
    assert [d.pod_uid for d in machine.step(60, cfg, hot, PODS)] == ["be-fat"]  # big still listed: not again
    assert machine.step(61, cfg, {NODE_SCOPE: {"cpu": 1.0}}, PODS) == []
    # a pod whose eviction failed (still listed a cooldown later) can be chosen again
    assert [d.pod_uid for d in machine.step(200, cfg, hot, PODS)] == ["be-big"]


def test_zero_cooldown_evicts_one_pod_per_round():
    machine, cfg, hot = PSIInterferenceEviction(), config(cooldownSeconds=0), {NODE_SCOPE: {"cpu": 50.0}}
    assert [d.pod_uid for d in machine.step(0, cfg, hot, PODS)] == ["be-big"]
    assert [d.pod_uid for d in machine.step(0.5, cfg, hot, PODS)] == ["be-fat"]


@pytest.mark.parametrize("text, value", [
    (PRESSURE.format("3.14"), 3.14),
    ("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", 0.0),
])
def test_parse(text, value):
    assert parse_some_avg10(text) == value


def test_parse_refuses_garbage():
    with pytest.raises(ValueError, match="no 'some avg10='"):
        parse_some_avg10("full avg10=1.0\n")


def test_reader_node_scope_from_proc(tmp_path):
    (tmp_path / "pressure").mkdir()
    (tmp_path / "pressure" / "cpu").write_text(PRESSURE.format("8.50"))
    (tmp_path / "pressure" / "memory").write_text(PRESSURE.format("0.10"))
    layout = CgroupLayout(CgroupHierarchy(CgroupVersion.V1, tmp_path / "cpuacct", tmp_path / "memory"),
                          CgroupDriver.CGROUPFS)
    reader = PressureReader(layout, proc_root=tmp_path, cgroup_psi=False, node_psi=True)
    assert reader.read(["cpu", "memory", "io"], []) == {"node": {"cpu": 8.5, "memory": 0.1}}
    assert PressureReader(layout, proc_root=tmp_path, node_psi=False).read(["cpu"], []) == {}


def test_reader_online_pods_on_v2(tmp_path):
    layout = CgroupLayout(CgroupHierarchy(CgroupVersion.V2, tmp_path, tmp_path), CgroupDriver.SYSTEMD)
    ls = PodState("1111-2222", PodQOSClass.BURSTABLE, QoSLevel.LS, namespace="web", name="api")
    be = PodState("3333-4444", PodQOSClass.BEST_EFFORT, QoSLevel.BE, namespace="batch", name="job")
    gone = PodState("5555-6666", PodQOSClass.GUARANTEED, QoSLevel.HLS, namespace="web", name="gone")
    for pod in (ls, be):
        d = layout.cpu_dir(layout.pod_relpath(pod.uid, pod.qos_class))
        d.mkdir(parents=True)
        (d / "cpu.pressure").write_text(PRESSURE.format("22.00"))
        (d / "memory.pressure").write_text(PRESSURE.format("1.00"))
    reader = PressureReader(layout, cgroup_psi=True)
    # BE pods' own stalls are not interference; a pod without a cgroup is skipped
    assert reader.read(["cpu", "memory"], [ls, be, gone]) == {"web/api": {"cpu": 22.0, "memory": 1.0}}
    assert "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1111_2222.slice" in str(
        layout.cpu_dir(layout.pod_relpath(ls.uid, ls.qos_class)))


def test_the_feature_leaves_out_pods_the_watermarks_chose_and_reports_node_pressure(tmp_path):
    from tidal.agent.qos.feature import Context, Gauge
    from tidal.agent.qos.psi_interference import PSIInterference
    from tidal.agent.qos.strategy import NodeState

    layout = CgroupLayout(CgroupHierarchy(CgroupVersion.V1, tmp_path / "cpu", tmp_path / "memory"), CgroupDriver.CGROUPFS)
    policy = ColocationPolicy.from_spec({"features": {"psiInterference": {"enabled": True}}})
    feature = PSIInterference()
    ctx = Context(NodeState((), 4, 0, policy, {"psi": True}, layout), now=100.0, candidates=[BE_BIG, BE_FAT, LS],
                  evicting={"be-big"}, observed={"psi-interference": {"node": {"cpu": 30.0, "memory": 1.0}}})
    assert feature.enabled(ctx)
    plan = feature.plan(ctx)
    assert plan.writes == () and set(plan.decisions) == {Gauge("psi", ("cpu",), 30.0), Gauge("psi", ("memory",), 1.0)}
    (decision,) = plan.effects
    assert decision.pod_uid == "be-fat" and decision.kind == "psi"  # be-big is the watermarks' already


@pytest.mark.parametrize("counts, reclaiming", [
    # (seconds, counter) readings -> whether node-scope memory pressure counts after the last one
    ([(0.0, None)], None),                         # no reading: unknown
    ([(0.0, 5)], False),                           # first reading: the baseline
    ([(0.0, 5), (1.0, 5)], False),                 # no rise
    ([(0.0, 5), (1.0, 6), (10.0, 6)], True),       # rose 9 s ago
    ([(0.0, 5), (1.0, 6), (11.0, 6)], False),      # no rise for avg10's 10 s
    ([(0.0, 5), (10.0, 5), (11.0, 6)], True),      # it rose again
    ([(0.0, 5), (5.0, 6), (14.9, 6)], True),       # rose 9.9 s ago
    ([(0.0, 5), (5.0, 6), (15.0, 6)], False),
    ([(0.0, 5), (10.0, None), (11.0, 5)], False),  # an unreadable moment changes nothing
])
def test_node_reclaim_is_a_counter_rise_within_avg10s_window(counts, reclaiming):
    state = NodeReclaim()
    for now, count in counts:
        result = state.step(now, count)
    assert result is reclaiming


@pytest.mark.parametrize("reclaiming, kept", [
    (True, {NODE_SCOPE: {"cpu": 9.0, "memory": 8.0}, "web/api": {"memory": 7.0}}),
    (None, {NODE_SCOPE: {"cpu": 9.0, "memory": 8.0}, "web/api": {"memory": 7.0}}),
    # a node that does not reclaim: its memory pressure is BE pods stalling inside their own
    # limits; an online pod's own pressure (v2) is always its own
    (False, {NODE_SCOPE: {"cpu": 9.0}, "web/api": {"memory": 7.0}}),
])
def test_node_memory_pressure_counts_only_while_the_node_reclaims(reclaiming, kept):
    pressure = {NODE_SCOPE: {"cpu": 9.0, "memory": 8.0}, "web/api": {"memory": 7.0}}
    assert attributable_pressure(pressure, reclaiming) == kept
    assert pressure[NODE_SCOPE] == {"cpu": 9.0, "memory": 8.0}  # the reading itself is left alone


@pytest.mark.parametrize("source, text, count", [
    ("/proc/vmstat", "nr_free_pages 10\npgscan_kswapd 7\npgscan_direct 5\npgscan_khugepaged 1\n", 12),
    ("/sys/fs/cgroup/memory/node/memory.failcnt", "42\n", 42),
    ("/sys/fs/cgroup/node/memory.events", "low 0\nhigh 3\nmax 9\noom 0\noom_kill 0\n", 9),
])
def test_node_reclaim_counter_of_each_file(source, text, count):
    assert parse_node_reclaim_count(text, source) == count


def test_node_reclaim_counter_refuses_a_file_without_it():
    with pytest.raises(ValueError, match="^/proc/vmstat: no pgscan_direct line"):
        parse_node_reclaim_count("pgscan_kswapd 7\n", "/proc/vmstat")


def test_the_feature_ignores_node_memory_pressure_while_the_node_does_not_reclaim(tmp_path):
    from tidal.agent.qos.feature import Context
    from tidal.agent.qos.psi_interference import PSIInterference, Sensed
    from tidal.agent.qos.strategy import NodeState

    layout = CgroupLayout(CgroupHierarchy(CgroupVersion.V1, tmp_path / "cpu", tmp_path / "memory"), CgroupDriver.CGROUPFS)
    policy = ColocationPolicy.from_spec({"features": {"psiInterference": {"enabled": True, "cooldownSeconds": 0}}})
    feature = PSIInterference()

    def evictions(now, count):
        ctx = Context(NodeState((), 4, 0, policy, {"psi": True}, layout), now=now, candidates=[BE_BIG, BE_FAT, LS],
                      observed={"psi-interference": Sensed({NODE_SCOPE: {"memory": 30.0}}, count)})
        return [d.pod_uid for d in feature.plan(ctx).effects]

    assert evictions(0.0, 100) == []          # the baseline: the node's reclaim not seen yet
    assert evictions(1.0, 101) == ["be-fat"]  # the node reclaims: the pressure may be the online pods'
    assert evictions(20.0, 101) == []         # no reclaim for 19 s: BE pods stall in their own limits
    assert evictions(21.0, 102) == ["be-big"]  # the node reclaims again (be-fat was asked to go already)


def test_sense_reads_the_node_cgroups_limit_hits(tmp_path):
    from tidal.agent.qos.feature import DEFAULT_OPTIONS, Context, Options
    from tidal.agent.qos.psi_interference import PSIInterference, Sensed
    from tidal.agent.qos.strategy import NodeState

    (tmp_path / "proc" / "pressure").mkdir(parents=True)
    (tmp_path / "proc" / "pressure" / "memory").write_text(PRESSURE.format("12.50"))
    (tmp_path / "proc" / "vmstat").write_text("pgscan_kswapd 1\npgscan_direct 2\n")
    node = tmp_path / "memory" / "node"
    node.mkdir(parents=True)
    (node / "memory.failcnt").write_text("77\n")
    layout = CgroupLayout(CgroupHierarchy(CgroupVersion.V1, tmp_path / "cpu", tmp_path / "memory"), CgroupDriver.CGROUPFS)
    policy = ColocationPolicy.from_spec({"features": {"psiInterference": {"enabled": True}}})
    feature = PSIInterference(Options(proc_root=tmp_path / "proc", sys_root=DEFAULT_OPTIONS.sys_root))

    class Sampler:
        node_memory_cgroup = None

    ctx = Context(NodeState((), 4, 0, policy, {"psi": True}, layout), sampler=Sampler())
    assert feature.sense(ctx) == Sensed({NODE_SCOPE: {"memory": 12.5}}, 3)  # cpu.pressure absent; /proc/vmstat
    Sampler.node_memory_cgroup = node
    assert feature.sense(ctx).node_reclaim_count == 77  # the node cgroup's memory.failcnt
    assert feature.sense(ctx).pressure[NODE_SCOPE]["memory"] == 12.5
