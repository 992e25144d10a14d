# SPDX-License-Identifier: Apache-2.0
"""bench/block_io.py: the disk request size its Tidal treatments run with (the disk_queue role's
default), set and put back on the machine's own sysfs."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import block_io  # noqa: E402
from tidal.agent.qos.be_block_io import MAX_REQUEST_KIB  # noqa: E402
from tidal_dev.testing.loop_device import free_loop_device  # noqa: E402


def test_the_tidal_treatments_and_the_agents_warning_use_the_roles_default():
    defaults = yaml.safe_load((ROOT / "roles" / "disk_queue" / "defaults" / "main.yml").read_text())
    assert block_io.role_max_request_kib() == defaults["disk_queue_max_request_kib"]
    assert MAX_REQUEST_KIB == defaults["disk_queue_max_request_kib"]  # what the agent warns above


def test_disk_requests_are_set_checked_and_put_back():
    name = free_loop_device()
    if name is None:
        pytest.skip("no free loop device with a writable queue/max_sectors_kb in /sys/block")
    requests = block_io.DiskRequests(name)
    hardware = int((requests.path.parent / "max_hw_sectors_kb").read_text())
    try:
        requests.set(64)
        assert int(requests.path.read_text()) == 64
        # more than the hardware takes: the kernel keeps its limit, and the bench stops saying so
        with pytest.raises(SystemExit, match=f"the kernel kept {hardware}, not {hardware + 4}"):
            requests.set(hardware + 4)
        requests.restore()
        assert int(requests.path.read_text()) == requests.original
    finally:
        requests.path.write_text(str(requests.original))
