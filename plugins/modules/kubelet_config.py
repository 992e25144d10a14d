#!/usr/bin/python
# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: kubelet_config
short_description: Set the CPU manager, CPU reservation and topology manager keys of a kubelet configuration file
version_added: 0.1.0
description:
  - Edits a KubeletConfiguration YAML file structurally, the way C(kubeadm) and kubespray write it
    (C(/var/lib/kubelet/config.yaml) or C(/etc/kubernetes/kubelet-config.yaml)).
  - Sets only the keys given; every other key keeps its value, order and comments. Maps such as
    O(system_reserved) are merged into the file's map.
  - Refuses C(cpuManagerPolicy=static) without a CPU reservation, which the kubelet would refuse
    to start with, and reservations of anything but C(cpu), C(memory), C(ephemeral-storage) and
    C(pid) or with a value that is not a quantity, and changes nothing then.
  - Reports whether C(cpuManagerPolicy) changed, because only then must the kubelet's
    C(cpu_manager_state) file be removed before the kubelet restarts.
author: Tidal maintainers (@tidal-colocation)
options:
  path:
    description: The KubeletConfiguration file.
    type: path
    required: true
  cpu_manager_policy:
    description: C(cpuManagerPolicy). V(static) gives Guaranteed pods with whole CPUs exclusive cores.
    type: str
    choices: [none, static]
  reserved_system_cpus:
    description: C(reservedSystemCPUs), a CPU list such as V(0-1) kept for system daemons.
    type: str
  system_reserved:
    description: C(systemReserved), for example V(cpu=500m) and V(memory=1Gi); merged into the file's map.
    type: dict
  kube_reserved:
    description: C(kubeReserved), for example V(cpu=500m) and V(memory=1Gi); merged into the file's map.
    type: dict
  topology_manager_policy:
    description: C(topologyManagerPolicy).
    type: str
    choices: [none, best-effort, restricted, single-numa-node]
  topology_manager_scope:
    description: C(topologyManagerScope).
    type: str
    choices: [container, pod]
  backup:
    description: Keep a timestamped copy of the file before changing it.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - tidal.colocation.attributes.changes
  - ansible.builtin.files
requirements:
  - ruamel.yaml
"""

EXAMPLES = r"""
- name: Static CPU manager with two CPUs reserved for system daemons
  tidal.colocation.kubelet_config:
    path: /var/lib/kubelet/config.yaml
    cpu_manager_policy: static
    reserved_system_cpus: "0-1"
    topology_manager_policy: best-effort
    mode: "0644"
  register: kubelet_config
"""

RETURN = r"""
before:
  description: The owned keys' values before the edit (null for a key that was absent).
  returned: always
  type: dict
  sample: {cpuManagerPolicy: none}
after:
  description: The owned keys' values after the edit.
  returned: always
  type: dict
  sample: {cpuManagerPolicy: static}
cpu_manager_policy_changed:
  description: Whether C(cpuManagerPolicy) changed (remove C(cpu_manager_state) and restart the kubelet then).
  returned: always
  type: bool
backup_file:
  description: The backup copy, when one was made.
  returned: changed and backup is true
  type: str
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.tidal.colocation.plugins.module_utils import arguments, kubelet
from ansible_collections.tidal.colocation.plugins.module_utils.files import read_text, write_if_changed

#: the KubeletConfiguration key -> the option that sets it (named in the refusals)
OPTION_OF_KEY = {
    "cpuManagerPolicy": "cpu_manager_policy",
    "reservedSystemCPUs": "reserved_system_cpus",
    "systemReserved": "system_reserved",
    "kubeReserved": "kube_reserved",
    "topologyManagerPolicy": "topology_manager_policy",
    "topologyManagerScope": "topology_manager_scope",
}


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "cpu_manager_policy": {"type": "str", "choices": list(kubelet.CPU_MANAGER_POLICIES)},
            "reserved_system_cpus": {"type": "str"},
            "system_reserved": {"type": "dict"},
            "kube_reserved": {"type": "dict"},
            "topology_manager_policy": {"type": "str", "choices": list(kubelet.TOPOLOGY_MANAGER_POLICIES)},
            "topology_manager_scope": {"type": "str", "choices": list(kubelet.TOPOLOGY_MANAGER_SCOPES)},
            "backup": {"type": "bool", "default": True},
        },
        add_file_common_args=True,
        supports_check_mode=True,
    )
    arguments.refuse_non_strings(module)
    if not kubelet.HAS_RUAMEL:
        module.fail_json(msg=missing_required_lib("ruamel.yaml"), exception=kubelet.RUAMEL_IMPORT_ERROR)
    params = module.params
    path = params["path"]
    try:
        keys = kubelet.desired_keys(
            cpu_manager_policy=params["cpu_manager_policy"],
            reserved_system_cpus=params["reserved_system_cpus"],
            system_reserved=params["system_reserved"],
            kube_reserved=params["kube_reserved"],
            topology_manager_policy=params["topology_manager_policy"],
            topology_manager_scope=params["topology_manager_scope"])
        text = read_text(module, path)
        new_text, before, after = kubelet.edit(text, keys)
    except kubelet.KubeletConfigError as err:
        message = str(err)
        key = message.split(":", 1)[0].split(".", 1)[0]
        if key in OPTION_OF_KEY:  # the file's key, and the option that sets it
            message = "%s (option %s)" % (message, OPTION_OF_KEY[key])
        module.fail_json(msg="%s: %s" % (path, message))
    result = {
        "before": before,
        "after": after,
        # An absent cpuManagerPolicy is the kubelet's default, none.
        "cpu_manager_policy_changed": (before.get("cpuManagerPolicy") or "none")
        != (after.get("cpuManagerPolicy") or "none"),
    }
    write_if_changed(module, path, text, new_text, result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
