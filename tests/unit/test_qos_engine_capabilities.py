"""Capability probe against fake /sys/fs/cgroup, /proc and /sys trees, and this machine."""

from __future__ import annotations

from pathlib import Path

import pytest
from tidal.agent.qos.capabilities import (
    CAPABILITY_NAMES,
    parse_cpu_list,
    parse_cpuinfo_flags,
    parse_kernel_version,
    probe,
    supported_map,
    to_status,
)


def touch(path: Path, text: str = "0\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize(
    "release, version",
    [("6.18.44-fc-v657", (6, 18, 44)), ("5.15", (5, 15, 0)), ("4.19.90-2102.2.0.0062.oe1.x86_64", (4, 19, 90))],
)
def test_parse_kernel_version(release, version):
    assert parse_kernel_version(release) == version


def test_parsers():
    with pytest.raises(ValueError):
        parse_kernel_version("linux")
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpu_list("0") == [0]
    assert parse_cpuinfo_flags("flags\t: fpu cat_l3 mba\nflags : rdt_a\n") == {"fpu", "cat_l3", "mba", "rdt_a"}


def v1_tree(root: Path, *, idle: bool, openeuler: bool) -> None:
    cg = root / "cgroup"
    touch(cg / "cpuacct/cpuacct.usage")
    touch(cg / "cpu/cpu.shares", "1024\n")
    if idle:
        touch(cg / "cpu/cpu.idle")
        touch(cg / "cpu/cpu.cfs_burst_us")
    if openeuler:
        touch(cg / "cpu/cpu.qos_level")
        touch(cg / "memory/memory.qos_level")
    touch(cg / "memory/memory.usage_in_bytes")
    (cg / "memory/kubepods").mkdir(parents=True)


def proc_sys(root: Path, release: str, *, psi: bool, nodes: str, resctrl: bool, flags: str = "fpu") -> None:
    touch(root / "proc/sys/kernel/osrelease", release + "\n")
    touch(root / "proc/cpuinfo", f"processor : 0\nflags : {flags}\n")
    if psi:
        touch(root / "proc/pressure/cpu", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    touch(root / "sys/devices/system/node/online", nodes + "\n")
    if resctrl:
        (root / "sys/fs/resctrl/info/L3").mkdir(parents=True)


def run(root: Path) -> dict[str, tuple[bool, str]]:
    caps = probe(root / "cgroup", root / "proc", root / "sys")
    assert [c.name for c in caps] == list(CAPABILITY_NAMES)
    for c in caps:
        assert c.reason and "\n" not in c.reason, c
    return {c.name: (c.supported, c.reason) for c in caps}


def test_old_openeuler_v1_kernel(tmp_path):
    v1_tree(tmp_path, idle=False, openeuler=True)
    proc_sys(tmp_path, "4.19.90-2102.2.0.0062.oe1.x86_64", psi=False, nodes="0-1", resctrl=True, flags="cat_l3 mba")
    got = run(tmp_path)
    assert got["kernel"] == (True, "4.19.90-2102.2.0.0062.oe1.x86_64")
    assert got["cgroup"] == (True, "v1")
    assert got["cgroup.driver"] == (True, "cgroupfs")
    assert got["cpu.idle"][0] is False and "needs >= 5.15" in got["cpu.idle"][1]
    assert got["cpu.cfs_burst"][0] is False
    assert got["psi"][0] is False and "CONFIG_PSI" in got["psi"][1]
    assert got["psi.cgroup"][0] is False
    assert got["resctrl.l3"][0] is True
    assert got["resctrl.mba"] == (False, "resctrl mounted but no info/MB: not offered by this CPU")
    assert got["numa"] == (True, "2 NUMA nodes (0-1)")
    assert got["openeuler.cpu.qos_level"][0] is True
    assert got["openeuler.memory.qos_level"][0] is True


def test_new_v2_kernel(tmp_path):
    cg = tmp_path / "cgroup"
    touch(cg / "cgroup.controllers", "cpuset cpu io memory pids\n")
    touch(cg / "kubepods.slice/cpu.idle")
    touch(cg / "kubepods.slice/cpu.max.burst")
    touch(cg / "kubepods.slice/cpu.pressure")
    proc_sys(tmp_path, "6.1.0", psi=True, nodes="0", resctrl=False)
    got = run(tmp_path)
    assert got["cgroup"] == (True, "v2")
    assert got["cgroup.driver"] == (True, "systemd")
    assert got["cpu.idle"] == (True, str(cg / "kubepods.slice/cpu.idle"))
    assert got["cpu.cfs_burst"][0] is True
    assert got["psi"][0] is True and got["psi.cgroup"][0] is True
    assert got["resctrl.l3"][0] is False and "not mounted" in got["resctrl.l3"][1]
    assert got["numa"][0] is False and "single NUMA node" in got["numa"][1]
    assert got["openeuler.cpu.qos_level"] == (False, "no cpu.qos_level: not an openEuler kernel")


def test_no_cgroups_at_all(tmp_path):
    proc_sys(tmp_path, "6.1.0", psi=True, nodes="0", resctrl=False)
    (tmp_path / "cgroup").mkdir()
    got = run(tmp_path)
    assert got["cgroup"][0] is False
    assert got["cpu.idle"] == (False, "no usable cgroup hierarchy")


def test_this_machine_and_status_shape():
    caps = probe()
    status = to_status(caps)
    assert all(set(s) == {"name", "supported", "reason"} for s in status)
    flags = supported_map(caps)
    assert set(flags) == set(CAPABILITY_NAMES)
    print("\n" + "\n".join(f"{c.name}: {c.supported} ({c.reason})" for c in caps))
