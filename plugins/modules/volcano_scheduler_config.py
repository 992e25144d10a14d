#!/usr/bin/python
# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: volcano_scheduler_config
short_description: Edit the Volcano scheduler configuration structurally (ConfigMap or file)
version_added: 0.1.0
description:
  - Sets the scheduler's actions, places plugins in tiers and sets the plugin keys given, in the
    C(volcano-scheduler.conf) key of Volcano's ConfigMap or in a file (the lab, or a scheduler
    started with C(--scheduler-conf)).
  - Every other plugin, argument, tier and comment is kept; the configuration is written only
    when it changed.
author: Tidal maintainers (@tidal-colocation)
options:
  path:
    description: Edit this file instead of a ConfigMap. Mutually exclusive with O(configmap).
    type: path
  configmap:
    description: The ConfigMap holding the configuration (the default when O(path) is not set).
    type: dict
    suboptions:
      name:
        description: ConfigMap name.
        type: str
        default: volcano-scheduler-configmap
      namespace:
        description: ConfigMap namespace.
        type: str
        default: volcano-system
      key:
        description: The key holding the configuration.
        type: str
        default: volcano-scheduler.conf
  actions:
    description: The scheduler's actions, in order; omitted keeps the current ones.
    type: list
    elements: str
  plugins:
    description: Plugins to place or configure, in order.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Plugin name, for example V(priority), V(gang), V(usage).
        type: str
        required: true
      state:
        description: V(absent) removes the plugin from every tier.
        type: str
        choices: [present, absent]
        default: present
      tier:
        description:
          - The tier (counted from 1) the plugin must be in; omitted keeps it where it is, or puts a new plugin in the last tier.
          - From 1 to 10; tiers missing up to it are added empty.
        type: int
      first:
        description: Place the plugin first in its tier.
        type: bool
        default: false
      settings:
        description: Keys merged into the plugin entry, for example C(enablePreemptable) or C(arguments) (merged key by key); not C(name).
        type: dict
        default: {}
  backup:
    description: With O(path), keep a timestamped copy of the file before changing it.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - tidal.colocation.attributes.changes
  - tidal.colocation.auth
  - ansible.builtin.files
requirements:
  - ruamel.yaml
  - kubernetes (with O(configmap))
"""

EXAMPLES = r"""
- name: The actions and plugins Tidal needs, leaving the rest
  tidal.colocation.volcano_scheduler_config:
    actions: [allocate, backfill, preempt]
    plugins:
      - name: priority
        tier: 1
        first: true
      - name: gang
        tier: 1
        settings:
          enablePreemptable: false
          enableJobStarving: false
      - name: usage
        tier: 2
        settings:
          enablePredicate: true
          arguments:
            thresholds:
              cpu: 60
              mem: 60
"""

RETURN = r"""
actions:
  description: The actions after the edit.
  returned: success
  type: list
  elements: str
configuration:
  description: The whole configuration after the edit, as data.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.tidal.colocation.plugins.module_utils import arguments, kube, volcano
from ansible_collections.tidal.colocation.plugins.module_utils.files import read_text, write_if_changed

#: the file attributes of add_file_common_args, which mean nothing for a ConfigMap
FILE_ATTRIBUTES = ("mode", "owner", "group", "seuser", "serole", "selevel", "setype", "attributes")


def _configmap(module):
    from kubernetes import client

    spec = module.params["configmap"] or {}
    name = spec.get("name") or "volcano-scheduler-configmap"
    namespace = spec.get("namespace") or "volcano-system"
    key = spec.get("key") or "volcano-scheduler.conf"
    core = client.CoreV1Api(kube.api_client(module))
    try:
        configmap = core.read_namespaced_config_map(name, namespace)
    except kube.ApiException as err:
        module.fail_json(msg="configmap: cannot read %s/%s: %s" % (namespace, name, kube.api_error_message(err)))
    text = (configmap.data or {}).get(key, "")
    return core, name, namespace, key, text


def main():
    module = AnsibleModule(
        argument_spec=kube.argument_spec(
            path={"type": "path"},
            configmap={"type": "dict", "options": {
                "name": {"type": "str", "default": "volcano-scheduler-configmap"},
                "namespace": {"type": "str", "default": "volcano-system"},
                "key": {"type": "str", "default": "volcano-scheduler.conf", "no_log": False},
            }},
            actions={"type": "list", "elements": "str"},
            plugins={"type": "list", "elements": "dict", "default": [], "options": {
                "name": {"type": "str", "required": True},
                "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
                "tier": {"type": "int"},
                "first": {"type": "bool", "default": False},
                "settings": {"type": "dict", "default": {}},
            }},
            backup={"type": "bool", "default": True},
        ),
        mutually_exclusive=[("path", "configmap")],
        add_file_common_args=True,
        supports_check_mode=True,
    )
    arguments.refuse_non_strings(module)
    if not volcano.HAS_RUAMEL:
        module.fail_json(msg=missing_required_lib("ruamel.yaml"), exception=volcano.RUAMEL_IMPORT_ERROR)
    params = module.params
    if params["path"]:
        text = read_text(module, params["path"])
    else:
        file_options = sorted(name for name in FILE_ATTRIBUTES if params.get(name) is not None)
        if file_options:
            module.fail_json(msg="%s: only with path (a file), not with a ConfigMap; nothing was changed"
                                 % ", ".join(file_options))
        core, name, namespace, key, text = _configmap(module)
    try:
        new_text, before, after = volcano.edit(text, params["actions"], params["plugins"])
    except volcano.SchedulerConfigError as err:
        module.fail_json(msg=str(err))
    result = {"actions": volcano.actions_of(after), "configuration": after}
    if params["path"]:
        write_if_changed(module, params["path"], text, new_text, result)
        module.exit_json(**result)

    result["changed"] = before != after
    if result["changed"] and module._diff:
        result["diff"] = {"before": text, "after": new_text,
                          "before_header": "%s/%s[%s]" % (namespace, name, key),
                          "after_header": "%s/%s[%s]" % (namespace, name, key)}
    if result["changed"] and not module.check_mode:
        try:
            core.patch_namespaced_config_map(name, namespace, {"data": {key: new_text}})
        except kube.ApiException as err:
            module.fail_json(msg="configmap: cannot update %s/%s: %s" % (namespace, name, kube.api_error_message(err)))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
