# SPDX-License-Identifier: Apache-2.0
"""A block device of this machine whose queue limits a test may change: a loop device with
nothing attached (its limits are the kernel's own, and no I/O goes through it)."""
from __future__ import annotations

import os
from pathlib import Path


def free_loop_devices(sys_root: Path = Path("/sys")) -> list[str]:
    """The names of the loop devices with no backing file and a writable ``queue/max_sectors_kb``
    (none: no loop module, or not root)."""
    return [queue.parent.name for queue in sorted((sys_root / "block").glob("loop*/queue"))
            if not (queue.parent / "loop" / "backing_file").exists() and os.access(queue / "max_sectors_kb", os.W_OK)]


def free_loop_device(sys_root: Path = Path("/sys")) -> str | None:
    """The first of :func:`free_loop_devices`; None when there is none."""
    return next(iter(free_loop_devices(sys_root)), None)
