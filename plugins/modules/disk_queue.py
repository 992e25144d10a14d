#!/usr/bin/python
# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: disk_queue
short_description: Cap the size of the requests a node's disks are sent, so online reads do not wait behind BE writeback
version_added: 0.1.0
description:
  - Sets C(queue/max_sectors_kb) of a node's disks in sysfs, the largest request the block layer
    sends to each disk (the kernel splits larger ones).
  - A read waits behind the requests already queued at the disk. With the kernel's default (up
    to 4 MiB a request on current kernels) a BE job's buffered writes, which the kernel's
    writeback sends in requests that large, kept an online service's 4 KiB reads waiting for
    seconds on a cloud volume, with and without Tidal's block I/O caps (cgroup v1 charges
    writeback to the root cgroup, so no BE cap holds it). See docs/benchmarks.md, "Block I/O".
  - The value lasts until the disk goes away or the node reboots; the C(disk_queue) role also
    writes a udev rule that sets it again.
  - Applies to the running kernel only; it changes no file. Check mode reports what would change.
author: Tidal maintainers (@tidal-colocation)
options:
  max_request_kib:
    description:
      - The largest request in KiB, at least V(4) (a page). A disk whose hardware takes less
        (C(queue/max_hw_sectors_kb)) gets its hardware's limit.
      - V(0) puts back the kernel's default (kernels 6.9 and later; older ones refuse it, give the
        value to restore then). Check mode assumes the default of kernels 6.7 and later (4096 KiB,
        or the disk's hardware limit when lower).
      - An integer, or a string of decimal digits (checked by the module itself, so that any other
        value is refused naming this option).
    type: raw
    required: true
  disks:
    description:
      - The disks by name (V(vda), V(nvme0n1)); any block device of C(/sys/block) may be named.
      - Default, every whole disk with a driver behind it (the entries of C(/sys/block) with a
        C(device) link; not loop, ram, zram or device-mapper devices, whose requests reach the
        disks below them).
    type: list
    elements: str
  sys_root:
    description: Where sysfs is mounted.
    type: path
    default: /sys
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - tidal.colocation.attributes.changes
"""

EXAMPLES = r"""
- name: Requests of at most 64 KiB on every disk of a colocation node
  tidal.colocation.disk_queue:
    max_request_kib: 64

- name: The kernel's default again on vda
  tidal.colocation.disk_queue:
    max_request_kib: 0
    disks: [vda]
"""

RETURN = r"""
before:
  description: Each disk's C(max_sectors_kb) before.
  returned: always
  type: dict
  sample: {vda: 4096}
after:
  description: Each disk's C(max_sectors_kb) after (in check mode, what it would be).
  returned: always
  type: dict
  sample: {vda: 64}
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.tidal.colocation.plugins.module_utils import arguments

#: a request is at least a page (the kernel refuses less)
MIN_KIB = 4
#: the kernel's default cap on a request since 6.7 (BLK_DEF_MAX_SECTORS_CAP), for check mode
DEFAULT_CAP_KIB = 4096


class QueueError(Exception):
    """A failure to report, with what was already written (``after``: per disk)."""

    def __init__(self, msg, after=None):
        super().__init__(msg)
        self.after = after or {}


def kib(value):
    """``max_request_kib`` as a number: an int (not a bool) or a string of ASCII digits; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())
    return None


def whole_disks(sys_root):
    """The names of the whole disks with a driver behind them, sorted."""
    block = os.path.join(sys_root, "block")
    try:
        names = sorted(os.listdir(block))
    except OSError as err:
        raise QueueError("sys_root: cannot list %s: %s" % (block, err))
    return [name for name in names if os.path.exists(os.path.join(block, name, "device"))]


def target(requested, hardware_limit):
    """What ``max_sectors_kb`` becomes: the request, at most the hardware's limit (0: the kernel's
    default as of 6.7)."""
    if requested == 0:
        return min(hardware_limit, DEFAULT_CAP_KIB)
    return min(requested, hardware_limit)


def _read_int(path):
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError) as err:
        raise QueueError("cannot read %s: %s" % (path, err))


def plan(sys_root, names, requested):
    """Per disk: (its queue directory, max_sectors_kb now, what it becomes)."""
    if names is None:
        names = whole_disks(sys_root)
    unknown = [name for name in names if not os.path.isfile(os.path.join(sys_root, "block", name, "queue", "max_sectors_kb"))]
    if unknown:
        raise QueueError("disks: %s is not a block device of %s/block; the whole disks are: %s"
                         % (", ".join(unknown), sys_root, ", ".join(whole_disks(sys_root)) or "none"))
    planned = {}
    for name in names:
        queue = os.path.join(sys_root, "block", name, "queue")
        now = _read_int(os.path.join(queue, "max_sectors_kb"))
        planned[name] = (queue, now, target(requested, _read_int(os.path.join(queue, "max_hw_sectors_kb"))))
    return planned


def apply(planned, requested):
    """Write each disk's value; returns what the kernel kept."""
    after = {}
    for name, (queue, now, wanted) in planned.items():
        path = os.path.join(queue, "max_sectors_kb")
        if requested != 0 and now == wanted:
            after[name] = now
            continue
        value = 0 if requested == 0 else wanted  # 0: the kernel puts its default back
        try:
            with open(path, "w", encoding="ascii") as handle:
                handle.write(str(value))
        except OSError as err:
            hint = " (kernels before 6.9 do not take 0: give the value to restore)" if value == 0 else ""
            raise QueueError("max_request_kib: %s refused %s: %s%s; %s"
                             % (path, value, err, hint,
                                "changed before it: %s" % ", ".join(sorted(after)) if after else "nothing was changed"),
                             after)
        after[name] = _read_int(path)
    return after


def _lines(values):
    """A diff side: one ``<disk> max_sectors_kb=<value>`` line per disk, by name."""
    return "".join("%s max_sectors_kb=%d\n" % item for item in sorted(values.items()))


def main():
    module = AnsibleModule(
        argument_spec={
            "max_request_kib": {"type": "raw", "required": True},
            "disks": {"type": "list", "elements": "str"},
            "sys_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    arguments.refuse_non_strings(module)
    requested, names = kib(module.params["max_request_kib"]), module.params["disks"]
    if requested is None or (requested != 0 and requested < MIN_KIB):
        module.fail_json(msg="max_request_kib: must be 0 (the kernel's default) or a whole number of KiB of at "
                             "least %d (a page), got %r; nothing was changed" % (MIN_KIB, module.params["max_request_kib"]))
    if names is not None and (not names or any(not name or "/" in name or name.startswith(".") for name in names)):
        module.fail_json(msg="disks: must be disk names such as vda or nvme0n1 (or left out for every disk), got %r; "
                             "nothing was changed" % (names,))
    try:
        planned = plan(module.params["sys_root"], names, requested)
    except QueueError as err:
        module.fail_json(msg="%s; nothing was changed" % err)
    before = dict((name, entry[1]) for name, entry in planned.items())
    after = dict((name, entry[2]) for name, entry in planned.items())
    if not module.check_mode:
        try:
            after = apply(planned, requested)
        except QueueError as err:
            module.fail_json(msg=str(err), changed=any(before[n] != v for n, v in err.after.items()),
                             before=before, after=err.after)
    result = {"changed": before != after, "before": before, "after": after}
    if module._diff and result["changed"]:
        header = "%s/block" % module.params["sys_root"]
        result["diff"] = {"before": _lines(before), "after": _lines(after), "before_header": header,
                          "after_header": header}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
