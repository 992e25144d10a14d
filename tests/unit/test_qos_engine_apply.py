"""apply/restore and the JSON restore journal, on plain files standing in for cgroup files."""

from __future__ import annotations

import json

import pytest
from tidal.agent.collector.cgroups import CgroupDriver, CgroupHierarchy, CgroupLayout, CgroupVersion
from tidal.agent.qos.strategy import (
    CgroupWrite,
    RestoreJournal,
    UnsafeWriteError,
    allowed_roots,
    apply,
    restore,
)


@pytest.fixture
def tree(tmp_path):
    layout = CgroupLayout(
        CgroupHierarchy(CgroupVersion.V1, tmp_path / "cpuacct", tmp_path / "memory"), CgroupDriver.CGROUPFS
    )
    pod = tmp_path / "cpu/kubepods/besteffort/podx"
    pod.mkdir(parents=True)
    (pod / "cpu.shares").write_text("1024\n")
    (pod / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "memory/kubepods").mkdir(parents=True)
    return layout, pod, allowed_roots(layout)


def test_allowed_roots(tree, tmp_path):
    layout, _, roots = tree
    assert roots == (tmp_path / "cpu/kubepods", tmp_path / "cpu/tidal-be", tmp_path / "memory/kubepods",
                     tmp_path / "memory/tidal-be")  # the BE idle group beside kubepods


def test_apply_writes_only_differences_and_restore_puts_originals_back(tree, tmp_path):
    _, pod, roots = tree
    journal = RestoreJournal(tmp_path / "state/journal.json")
    plan = [CgroupWrite(pod, "cpu.shares", "2"), CgroupWrite(pod, "cpu.cfs_quota_us", "-1"),
            CgroupWrite(pod / "gone", "cpu.shares", "2")]
    result = apply(plan, journal, roots)
    assert [w.file for w in result.written] == ["cpu.shares"]
    assert [w.file for w in result.unchanged] == ["cpu.cfs_quota_us"]
    assert [str(w.path) for w in result.missing] == [str(pod / "gone")]
    assert (pod / "cpu.shares").read_text() == "2"
    on_disk = json.loads((tmp_path / "state/journal.json").read_text())
    assert on_disk == {"originals": {str(pod / "cpu.shares"): "1024"}}

    # idempotent; a second change keeps the first original
    assert apply(plan, journal, roots).written == []
    apply([CgroupWrite(pod, "cpu.shares", "3")], journal, roots)
    assert journal.originals[str(pod / "cpu.shares")] == "1024"

    # a restarted agent reads the journal back and restores
    reloaded = RestoreJournal(tmp_path / "state/journal.json")
    assert restore(reloaded) == []
    assert (pod / "cpu.shares").read_text() == "1024"
    assert reloaded.originals == {}
    assert json.loads((tmp_path / "state/journal.json").read_text()) == {"originals": {}}


def test_restore_skips_cgroups_that_are_gone(tree, tmp_path):
    _, pod, roots = tree
    journal = RestoreJournal(tmp_path / "j.json")
    journal.record(pod / "deleted" / "cpu.shares", "1024")
    assert restore(journal) == [] and journal.originals == {}


@pytest.mark.parametrize(
    "path, file",
    [
        ("cpu/other", "cpu.shares"),
        ("cpu/kubepods/../escape", "cpu.shares"),
        ("cpu/kubepods/besteffort/podx", "../cpu.shares"),
        ("cpu", "cpu.shares"),
    ],
)
def test_never_writes_outside_kubepods(tree, tmp_path, path, file):
    _, _, roots = tree
    journal = RestoreJournal(tmp_path / "j.json")
    with pytest.raises(UnsafeWriteError):
        apply([CgroupWrite(tmp_path / path, file, "2")], journal, roots)
    assert journal.originals == {}


def _policy(**iso):
    from tidal.api.policy import ColocationPolicy

    spec = {"cpuPriority": {"enabled": True}, "batchResources": {"enabled": False},
            "cpuSuppression": {"enabled": False}}
    spec.update(iso)
    return ColocationPolicy.from_spec({"beIsolation": spec})


@pytest.mark.parametrize("labels, annotations, active", [
    pytest.param({"colocation.tidal.io/colocation": "true"}, None, True, id="colocation"),
    pytest.param({"colocation.tidal.io/oversubscription": "true"}, None, True, id="oversubscription"),
    pytest.param({"colocation.tidal.io/colocation": "true", "colocation.tidal.io/oversubscription": "true"}, None,
                 True, id="both"),
    pytest.param({"volcano.sh/colocation": "true"}, None, True, id="volcano-colocation-alias"),
    pytest.param({"volcano.sh/oversubscription": "true"}, None, True, id="volcano-oversubscription-alias"),
    pytest.param({"volcano.sh/oversubscription": "true"},
                 {"colocation.tidal.io/volcano-oversubscription-written": "true"}, False,
                 id="the-oversell-masters-own-volcano-label-is-not-an-input"),
    pytest.param({"colocation.tidal.io/colocation": "false"}, None, False, id="false"),
    pytest.param({"colocation.tidal.io/colocation": "false", "volcano.sh/colocation": "true"}, None, False,
                 id="tidal-name-wins-over-the-alias"),
    pytest.param(None, None, False, id="no-labels"),
])
def test_the_engine_acts_on_a_node_whose_mode_is_active(labels, annotations, active):
    from tidal.agent.qos.engine import node_active
    assert node_active(labels, annotations) is active


def test_engine_runs_only_with_the_colocation_label_and_restores_when_it_goes(tree, tmp_path):
    from tidal.agent.collector.cgroups import PodQOSClass
    from tidal.agent.qos.engine import QoSEngine
    from tidal.agent.qos.strategy import NodeState, PodState
    from tidal.api.qos import QoSLevel

    layout, pod, _ = tree
    state = NodeState(
        pods=(PodState("x", PodQOSClass.BEST_EFFORT, QoSLevel.BE),), node_cpus=4, online_usage_millicores=0,
        policy=_policy(), capabilities={}, layout=layout,
    )
    engine = QoSEngine(tmp_path / "j.json")
    result, changed = engine.reconcile(state, True)
    assert [w.file for w in result.written] == ["cpu.shares"] and changed == {"be-cpu-priority": 1}
    assert (pod / "cpu.shares").read_text() == "2"
    assert engine.reconcile(state, True)[0].written == []
    assert engine.reconcile(state, False)[0].written == []
    assert (pod / "cpu.shares").read_text() == "1024"
    assert engine.journal.originals == {}


def test_a_strategy_switched_off_or_a_pod_no_longer_be_gets_its_originals_back(tree, tmp_path):
    from dataclasses import replace

    from tidal.agent.collector.cgroups import PodQOSClass
    from tidal.agent.qos.engine import QoSEngine
    from tidal.agent.qos.strategy import NodeState, PodState
    from tidal.api.qos import QoSLevel

    layout, pod, _ = tree
    be = PodState("x", PodQOSClass.BEST_EFFORT, QoSLevel.BE)
    state = NodeState(pods=(be,), node_cpus=4, online_usage_millicores=0, policy=_policy(),
                      capabilities={}, layout=layout)
    engine = QoSEngine(tmp_path / "j.json")
    engine.reconcile(state, True)
    assert (pod / "cpu.shares").read_text() == "2"
    off = replace(state, policy=_policy(cpuPriority={"enabled": False}))
    result, _ = engine.reconcile(off, True)
    assert result.restore_problems == [] and (pod / "cpu.shares").read_text() == "1024"
    assert engine.journal.originals == {}

    engine.reconcile(state, True)
    assert (pod / "cpu.shares").read_text() == "2"
    not_be = replace(state, pods=(replace(be, tidal_level=QoSLevel.LS),))
    engine.reconcile(not_be, True)
    assert (pod / "cpu.shares").read_text() == "1024" and engine.journal.originals == {}
