"""LLC / memory-bandwidth limits through resctrl, on recorded Intel RDT and Arm MPAM trees."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tidal.agent.collector.cgroups import CgroupDriver, CgroupHierarchy, CgroupLayout, CgroupVersion, PodQOSClass
from tidal.agent.qos.capabilities import probe
from tidal.agent.qos.pod_features import FeaturePodState
from tidal.agent.qos.resctrl import (
    DYNAMIC_GROUP,
    ResctrlActuator,
    desired_groups,
    dynamic_level,
    group_for,
    read_info,
)
from tidal.agent.qos.resctrl_schemata import (
    ResctrlInfo,
    l3_mask,
    mb_percent,
    parse_schemata,
    render,
    satisfied,
    share_lines,
)
from tidal.agent.qos.strategy import ContainerState, PodState
from tidal.api.policy import ColocationPolicy
from tidal.api.qos import CacheLimit, QoSLevel

DATA = Path(__file__).resolve().parent.parent / "data" / "resctrl"
INTEL = ResctrlInfo(cbm_mask=0x7FF, min_cbm_bits=1, bandwidth_gran=10, min_bandwidth=10)
MPAM = ResctrlInfo(cbm_mask=0xFFFF, min_cbm_bits=1, bandwidth_gran=1, min_bandwidth=5)


def test_parse_both_vendors():
    assert parse_schemata((DATA / "intel-rdt/schemata").read_text()) == {
        "L3": {"0": "7ff", "1": "7ff"}, "MB": {"0": "100", "1": "100"}}
    assert parse_schemata((DATA / "arm-mpam/schemata").read_text()) == {
        "L3": {"1": "ffff", "65": "ffff"}, "MB": {"1": "100", "65": "100"}, "MBHDL": {"1": "1", "65": "1"}}
    assert read_info(DATA / "intel-rdt") == INTEL
    assert read_info(DATA / "arm-mpam") == MPAM


@pytest.mark.parametrize("text", ["L3 0=7ff", "L3:0", "L3:=7ff"])
def test_parse_refuses_garbage(text):
    with pytest.raises(ValueError, match="schemata line"):
        parse_schemata(text)


@pytest.mark.parametrize("percent, info, mask", [
    (20, INTEL, 0x3), (30, INTEL, 0x7), (50, INTEL, 0x3F), (100, INTEL, 0x7FF), (1, INTEL, 0x1),
    (20, MPAM, 0x7), (30, MPAM, 0x1F), (50, MPAM, 0xFF),
    (1, ResctrlInfo(cbm_mask=0xFFFFF, min_cbm_bits=2), 0x3),  # at least min_cbm_bits
])
def test_l3_mask(percent, info, mask):
    assert l3_mask(percent, info) == mask


@pytest.mark.parametrize("percent, info, value", [
    (20, INTEL, 20), (35, INTEL, 30), (5, INTEL, 10), (100, INTEL, 100), (3, MPAM, 5), (33, MPAM, 33),
])
def test_mb_percent(percent, info, value):
    assert mb_percent(percent, info) == value


def test_no_l3_or_mb_offered():
    with pytest.raises(ValueError, match="no L3 cbm_mask"):
        l3_mask(20, ResctrlInfo())
    with pytest.raises(ValueError, match="no MB bandwidth_gran"):
        mb_percent(20, ResctrlInfo())
    # an L3-only machine: the MB line is skipped
    assert share_lines(20, 20, ResctrlInfo(cbm_mask=0x7FF), {"L3": {"0": "7ff"}, "MB": {"0": "100"}}) == {
        "L3": {"0": "3"}}


def test_satisfied_compares_masks_as_numbers():
    assert satisfied({"L3": {"0": "003"}, "MB": {"0": "20"}}, {"L3": {"0": "3"}, "MB": {"0": "20"}})
    assert not satisfied({"L3": {"0": "7"}}, {"L3": {"0": "3"}})
    assert not satisfied({}, {"MB": {"0": "20"}})


@pytest.mark.parametrize("online, level", [(0, CacheLimit.HIGH), (30, CacheLimit.HIGH), (31, CacheLimit.MID),
                                           (60, CacheLimit.MID), (61, CacheLimit.LOW)])
def test_dynamic_level(online, level):
    assert dynamic_level(online) is level


def be(uid, level=None, tier=QoSLevel.BE, cid="containerd://c"):
    return FeaturePodState(uid=uid, qos_class=PodQOSClass.BEST_EFFORT, tidal_level=tier,
                           containers=(ContainerState(cid),), cache_limit=level)


@pytest.mark.parametrize("pod, group", [
    (be("a", CacheLimit.LOW), "tidal-low"), (be("a", CacheLimit.MID), "tidal-mid"),
    (be("a", CacheLimit.HIGH), "tidal-high"), (be("a"), DYNAMIC_GROUP),
    (be("a", CacheLimit.LOW, tier=QoSLevel.LS), None),
    (PodState("a", PodQOSClass.BEST_EFFORT, QoSLevel.BE), DYNAMIC_GROUP),
])
def test_group_for(pod, group):
    assert group_for(pod) == group


def test_desired_groups_default_shares_intel():
    root = parse_schemata((DATA / "intel-rdt/schemata").read_text())
    groups = desired_groups(ColocationPolicy().features.cache_limits, INTEL, root, online_percent=45)
    assert {name: render(lines) for name, lines in groups.items()} == {
        "tidal-low": "L3:0=3;1=3\nMB:0=20;1=20\n",
        "tidal-mid": "L3:0=7;1=7\nMB:0=30;1=30\n",
        "tidal-high": "L3:0=3f;1=3f\nMB:0=50;1=50\n",
        "tidal-be": "L3:0=7;1=7\nMB:0=30;1=30\n",   # 45 % online: the mid shares
    }


def layout(tmp_path):
    return CgroupLayout(CgroupHierarchy(CgroupVersion.V1, tmp_path / "cg/cpuacct", tmp_path / "cg/memory"),
                        CgroupDriver.CGROUPFS)


@pytest.mark.parametrize("tree", ["intel-rdt", "arm-mpam"])
def test_actuator_creates_groups_moves_threads_and_removes_groups(tmp_path, tree):
    root = tmp_path / "resctrl"
    shutil.copytree(DATA / tree, root)
    lay = layout(tmp_path)
    pods = [be("1111-aaaa", CacheLimit.LOW, cid="containerd://a"), be("2222-bbbb", cid="containerd://b"),
            be("3333-cccc", CacheLimit.HIGH, tier=QoSLevel.LS, cid="containerd://c")]
    for pod, tids in zip(pods, (["101", "102"], ["201"], ["301"])):
        d = lay.cpu_dir(lay.container_relpath(pod.uid, pod.qos_class, pod.containers[0].id))
        d.mkdir(parents=True)
        (d / "tasks").write_text("\n".join(tids) + "\n")
    caps = {"resctrl.l3": True, "resctrl.mba": True}
    config = ColocationPolicy.from_spec({"features": {"cacheLimits": {"enabled": True}}}).features.cache_limits
    actuator = ResctrlActuator(lay, root, remove=shutil.rmtree)
    assert actuator.round(True, config, pods, 10.0, caps) == []
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("tidal-")) == [
        "tidal-be", "tidal-high", "tidal-low", "tidal-mid"]
    low = parse_schemata((root / "tidal-low/schemata").read_text())
    domains = list(parse_schemata((DATA / tree / "schemata").read_text())["L3"])
    assert list(low) == ["L3", "MB"] and list(low["L3"]) == domains  # vendor lines never written
    assert (root / "tidal-low/tasks").read_text() == "101102"        # one TID per write
    assert (root / "tidal-be/tasks").read_text() == "201"
    high_tasks = root / "tidal-high/tasks"  # (a real mount creates it empty)
    assert not high_tasks.exists() or high_tasks.read_text() == ""  # the LS pod is not moved
    # the dynamic group follows online load
    be_high = parse_schemata((root / "tidal-be/schemata").read_text())
    assert be_high == parse_schemata((root / "tidal-high/schemata").read_text())
    actuator.round(True, config, pods, 90.0, caps)
    assert parse_schemata((root / "tidal-be/schemata").read_text()) == low
    # off in the policy: the groups go (the kernel moves their threads back to the default group)
    assert actuator.round(True, ColocationPolicy().features.cache_limits, pods, 10.0, caps) == []
    assert not [p for p in root.iterdir() if p.name.startswith("tidal-")]
    assert (root / "schemata").read_text() == (DATA / tree / "schemata").read_text()  # root untouched


def test_this_machine_reports_resctrl_unsupported_with_a_reason():
    caps = {c.name: c for c in probe()}
    if Path("/sys/fs/resctrl/info").is_dir():
        pytest.skip("resctrl is mounted here")
    for name in ("resctrl.l3", "resctrl.mba"):
        assert not caps[name].supported
        assert caps[name].reason.startswith("unsupported: no resctrl mounted at /sys/fs/resctrl")
