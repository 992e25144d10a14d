"""The disk_queue role's udev rule, run by udev's own rules engine on this machine's block devices.

The role writes the rule with ansible-playbook into a temporary node root (only the rule:
``disk_queue_sys_root`` empty); ``udevadm test`` (Debian's udev, extracted by ``make test``:
``tidal_dev.testing.udev``) then runs each device's ``add`` event through that rule alone, in a
mount namespace of its own, as ``systemd-udevd`` does at boot and when a disk is added. What the
rule writes reaches the real ``queue/max_sectors_kb``: a disk the rule is meant for is given its
own current value (nothing changes), a loop device the test names is given 64 KiB and put back.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from collection_tools import play_locally
from tidal_dev.testing import udev
from tidal_dev.testing.loop_device import free_loop_devices
from ansible_collections.tidal.colocation.plugins.modules import disk_queue

BLOCK = Path("/sys/block")
RULE = "etc/udev/rules.d/60-tidal-disk-queue.rules"
KIB = 64


@pytest.fixture(scope="module")
def udevadm() -> udev.Udevadm:
    if os.geteuid() != 0:
        pytest.skip("udevadm test writes sysfs and needs a mount namespace: root only")
    if shutil.which("unshare") is None:
        pytest.skip("no unshare (util-linux) to give udevadm a mount namespace of its own")
    found = udev.find()
    if found is None:
        pytest.skip("no udevadm: make test extracts Debian's (python -m tidal_dev.testing.udev)")
    return found


def role_rule(tmp_path: Path, **role_vars) -> str:
    """The rule the role writes with ``role_vars`` (ansible-playbook on localhost, rule only)."""
    proc = play_locally(tmp_path, {
        "name": "Disk queue rule",
        "roles": [{"role": "tidal.colocation.disk_queue",
                   "vars": {"disk_queue_root": str(tmp_path / "root"), "disk_queue_sys_root": "",
                            "disk_queue_max_request_kib": KIB, **role_vars}}],
    })
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
    return (tmp_path / "root" / RULE).read_text()


def max_sectors_kb(device: str) -> int:
    return int((BLOCK / device / "queue" / "max_sectors_kb").read_text())


def written(output: str, device: str) -> list[str]:
    """The values udev wrote to the device's max_sectors_kb (its debug lines)."""
    suffix = f"/{device}/queue/max_sectors_kb' writing '"
    return [line.split(suffix, 1)[1].rstrip("'") for line in output.splitlines() if suffix in line]


def event(tool: udev.Udevadm, tmp_path: Path, rule: str, device: str, action: str = "add") -> str:
    path = tmp_path / f"{device}-{action}.rules"
    path.write_text(rule)
    return udev.apply_rule(tool, path, device, action)


def test_the_default_rule_is_for_the_disks_the_module_sets_and_no_other(udevadm, tmp_path, dependency_collections):
    """Every block device of this machine: the rule writes a whole disk's request size (the disks
    the module itself sets: ``whole_disks``), never a loop, zram, ram, dm or md device."""
    rule = role_rule(tmp_path)
    assert f'ATTR{{queue/max_sectors_kb}}="{KIB}"' in rule
    meant = set(disk_queue.whole_disks("/sys"))
    devices = sorted(d.name for d in BLOCK.iterdir() if (d / "queue" / "max_sectors_kb").exists())
    if not meant:
        pytest.skip(f"no whole disk with a driver on this machine ({devices})")
    before = {device: max_sectors_kb(device) for device in devices}
    try:
        for device in devices:
            # a disk the rule is for is given its own value: the event changes nothing
            text = rule.replace(f'="{KIB}"', f'="{before[device]}"') if device in meant else rule
            for action in ("add", "change"):
                values = written(event(udevadm, tmp_path, text, device, action), device)
                assert values == ([str(before[device])] if device in meant else []), (device, action, values)
    finally:
        for device, value in before.items():
            if max_sectors_kb(device) != value:
                (BLOCK / device / "queue" / "max_sectors_kb").write_text(str(value))
    assert {device: max_sectors_kb(device) for device in devices} == before


def test_the_rule_for_named_disks_sets_them_and_only_them(udevadm, tmp_path, dependency_collections):
    free = free_loop_devices()
    if len(free) < 2:
        pytest.skip(f"needs two free loop devices with a writable queue/max_sectors_kb, found {free}")
    named, other = free[:2]
    before = {named: max_sectors_kb(named), other: max_sectors_kb(other)}
    if before[named] == KIB:
        pytest.skip(f"{named} is at {KIB} KiB already: the rule's write would not show")
    rule = role_rule(tmp_path, disk_queue_disks=[named])
    try:
        assert written(event(udevadm, tmp_path, rule, named), named) == [str(KIB)]
        assert max_sectors_kb(named) == KIB  # udev wrote it
        assert written(event(udevadm, tmp_path, rule, other), other) == []
        assert max_sectors_kb(other) == before[other]
    finally:
        for device, value in before.items():
            (BLOCK / device / "queue" / "max_sectors_kb").write_text(str(value))


def test_a_rule_udev_cannot_parse_fails_the_helper_loudly(udevadm, tmp_path):
    """The check above can fail: udev reports a rule it cannot read and the assignment is not made
    (the helper's output is what the tests read)."""
    free = free_loop_devices()
    if not free:
        pytest.skip("no free loop device")
    broken = f'ACTION=="add", KERNEL=="{free[0]}", ATTR{{queue/max_sectors_kb}}=="{KIB}" GARBAGE\n'
    before = max_sectors_kb(free[0])
    output = event(udevadm, tmp_path, broken, free[0])
    assert written(output, free[0]) == [] and max_sectors_kb(free[0]) == before
    assert "invalid" in output.lower() or "error" in output.lower(), output[-2000:]
