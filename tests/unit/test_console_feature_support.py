"""Which policy sections a node supports, as the console shows it (issue 20).

The web console compared policy section names (``cpuBurst`` ...) with the probe's capability
names (``cpu.cfs_burst`` ...), so nothing was ever dimmed on real data. The answer is now
computed once, in Python (`tidal.api.feature_support`, shared with the agent), from a NodeProfile
status as a real agent writes it: the probe's own output, here from a recorded node tree.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tidal.agent.nri.probe import NRI_CAPABILITY, nri_capability
from tidal.agent.qos.capabilities import CAPABILITY_NAMES, Capability, probe, to_status
from tidal.agent.qos.policy_status import unsupported_features
from tidal.api.feature_support import FEATURE_NEEDS, feature_support
from tidal.api.policy import ColocationPolicy
from tidal.console.views import node_view

NODE = {"metadata": {"name": "n1", "labels": {"colocation.tidal.io/colocation": "true"}},
        "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}],
                               "allocatable": {"cpu": "16", "memory": "64Gi"}}}


def _touch(path: Path, text: str = "0\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _recorded_node(root: Path) -> None:
    """cgroup v2 with CPU burst, no PSI, one NUMA node, no resctrl."""
    cg = root / "cgroup"
    _touch(cg / "cgroup.controllers", "cpu memory\n")
    _touch(cg / "cpu.max.burst")
    _touch(cg / "kubepods.slice/cpu.max.burst")
    _touch(cg / "kubepods.slice/cpu.idle")
    _touch(root / "proc/sys/kernel/osrelease", "6.6.0\n")
    _touch(root / "proc/cpuinfo", "processor : 0\nflags : fpu\n")
    _touch(root / "sys/devices/system/node/online", "0\n")


def _by_section(view: dict) -> dict[str, dict]:
    return {item["section"]: item for item in view["featureSupport"]}


def test_node_view_says_per_section_what_the_probe_written_status_supports(tmp_path):
    _recorded_node(tmp_path)
    capabilities = probe(tmp_path / "cgroup", tmp_path / "proc", tmp_path / "sys")
    assert [c.name for c in capabilities] == list(CAPABILITY_NAMES)
    capabilities.append(nri_capability(tmp_path / "no-nri.sock"))  # the agent adds the runtime's NRI socket
    profile = {"metadata": {"name": "n1"}, "status": {"capabilities": to_status(capabilities)}}
    probed = {c.name: c for c in capabilities}

    support = _by_section(node_view(NODE, profile))

    assert set(support) == {f"spec.{section}" for section in FEATURE_NEEDS}
    # Every section is answered from the probe's names: none is left unknown.
    assert all(item["supported"] is not None for item in support.values())
    assert support["spec.features.psiInterference"]["supported"] is False
    assert support["spec.features.psiInterference"]["reason"] == f"psi: {probed['psi'].reason}"
    assert support["spec.features.numaAffinity"]["supported"] is False
    assert "single NUMA node" in support["spec.features.numaAffinity"]["reason"]
    assert support["spec.features.cacheLimits"]["supported"] is False
    assert support["spec.features.cacheLimits"]["reason"].startswith("resctrl.l3: ")
    assert "; resctrl.mba: " in support["spec.features.cacheLimits"]["reason"]
    assert support["spec.features.cpuBurst"] == {"section": "spec.features.cpuBurst", "supported": True,
                                                 "reason": "", "needs": ["cpu.cfs_burst"]}
    # a switch with needs of its own: here the runtime has no NRI socket
    idle_group = support["spec.beIsolation.cpuPriority.idleGroup"]
    assert idle_group["supported"] is False and idle_group["reason"].startswith("nri: ")


def test_every_capability_a_section_needs_is_one_the_probe_writes():
    needed = {name for needs in FEATURE_NEEDS.values() for group in needs for name in group}
    assert needed <= {*CAPABILITY_NAMES, NRI_CAPABILITY}  # the agent adds NRI's to the probe's
    spec = ColocationPolicy().to_spec()
    for section in FEATURE_NEEDS:  # every path named is a real section or switch of the policy
        node = spec
        for key in section.split("."):
            node = node[key]
        assert isinstance(node, bool) or "enabled" in node, section


@pytest.mark.parametrize("capabilities, supported, reason", [
    ([], None, "not reported by the node's agent: resctrl.l3, resctrl.mba"),
    ([Capability("resctrl.l3", False, "no resctrl mounted")], False, "resctrl.l3: no resctrl mounted"),
    ([Capability("resctrl.l3", False, "no L3"), Capability("resctrl.mba", True, "/sys/fs/resctrl/info/MB")],
     True, ""),
])
def test_cache_limits_need_either_resctrl_capability(capabilities, supported, reason):
    item = _by_section({"featureSupport": feature_support(to_status(capabilities))})["spec.features.cacheLimits"]
    assert (item["supported"], item["reason"]) == (supported, reason)


@pytest.mark.parametrize("capabilities, supported, reason", [
    ([], None, "not reported by the node's agent: openeuler.cpu.qos_level, openeuler.memory.qos_level"),
    ([Capability("openeuler.cpu.qos_level", False, "no cpu.qos_level: not an openEuler kernel"),
      Capability("openeuler.memory.qos_level", False, "no memory.qos_level: not an openEuler kernel")], False,
     "openeuler.cpu.qos_level: no cpu.qos_level: not an openEuler kernel; "
     "openeuler.memory.qos_level: no memory.qos_level: not an openEuler kernel"),
    ([Capability("openeuler.cpu.qos_level", True, ""),
      Capability("openeuler.memory.qos_level", False, "no memory.qos_level")], True, ""),
])
def test_kernel_qos_level_needs_an_openeuler_qos_level_file(capabilities, supported, reason):
    item = _by_section({"featureSupport": feature_support(to_status(capabilities))})["spec.features.kernelQoSLevel"]
    assert (item["supported"], item["reason"]) == (supported, reason)


def test_no_profile_means_unknown_never_unsupported():
    support = _by_section(node_view(NODE, None))
    assert {item["supported"] for item in support.values()} == {None}


def test_the_agent_reports_problems_from_the_same_mapping():
    capabilities = [Capability(name, name != "psi", "probe says no" if name == "psi" else "ok")
                    for name in CAPABILITY_NAMES]
    spec = ColocationPolicy().to_spec()
    spec["features"]["psiInterference"]["enabled"] = True
    assert unsupported_features(spec, capabilities) == [
        "spec.features.psiInterference: enabled but not supported on this node (psi: probe says no)"]
    unsupported = [i["section"] for i in feature_support(capabilities) if i["supported"] is False]
    assert unsupported == ["spec.features.psiInterference"]


def test_the_web_console_only_displays_the_api_answer():
    source = (Path(__file__).resolve().parents[2] / "controllers/tidal/console/web/src/policy.js").read_text()
    assert "featureSupport" in source
    # No capability or section name is matched in the page any more.
    for name in CAPABILITY_NAMES:
        assert f'"{name}"' not in source


@pytest.mark.parametrize("suppression, interference, problems", [
    (False, True, ["spec.beIsolation.cpuInterference: enabled but inactive while spec.beIsolation.cpuSuppression"
                   ".enabled is false (it lowers BE CPU suppression's quota, which is not computed)"]),
    (True, True, []),     # the default
    (False, False, []),
])
def test_a_switch_another_one_keeps_inactive_is_a_problem(suppression, interference, problems):
    from tidal.agent.qos.policy_status import policy_status
    policy = ColocationPolicy.from_spec({"beIsolation": {"cpuSuppression": {"enabled": suppression},
                                                         "cpuInterference": {"enabled": interference}}})
    capabilities = [Capability(name, True, "ok") for name in CAPABILITY_NAMES]
    assert policy_status(policy, 1, policy.eviction_watermarks, [], capabilities)["problems"] == problems


def test_the_idle_group_is_in_force_only_with_be_cpu_priority():
    """Without BE CPU priority nothing makes the group idle: BE containers would compete at the
    cgroup root at the default weight. The agent and the NRI plugin read idle_group_in_force, and
    the node reports the switch as inactive."""
    from tidal.agent.nri.main import be_idle_group_enabled
    from tidal.agent.qos.policy_status import policy_status
    off = ColocationPolicy.from_spec({"beIsolation": {"cpuPriority": {"enabled": False, "idleGroup": True}}})
    on = ColocationPolicy.from_spec({"beIsolation": {"cpuPriority": {"enabled": True, "idleGroup": True}}})
    assert (off.be_isolation.cpu_priority.idle_group_in_force, on.be_isolation.cpu_priority.idle_group_in_force) \
        == (False, True)
    assert be_idle_group_enabled(lambda: {"metadata": {"resourceVersion": "1"}, "spec": off.to_spec()})() is False
    assert be_idle_group_enabled(lambda: {"metadata": {"resourceVersion": "2"}, "spec": on.to_spec()})() is True
    capabilities = [Capability(name, True, "ok") for name in CAPABILITY_NAMES]
    assert policy_status(off, 1, off.eviction_watermarks, [], capabilities)["problems"] == [
        "spec.beIsolation.cpuPriority.idleGroup: enabled but inactive while spec.beIsolation.cpuPriority.enabled is "
        "false (the group is idle only through BE CPU priority: BE containers stay below their pods' cgroups)"]
    assert policy_status(on, 1, on.eviction_watermarks, [], capabilities)["problems"] == []
