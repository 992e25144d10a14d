#!/usr/bin/python
# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: containerd_nri
short_description: Enable NRI in containerd's config.toml
version_added: 0.1.0
description:
  - Sets the whole C([plugins."io.containerd.nri.v1.nri"]) table of a containerd configuration
    file, in config schema 2 (containerd 1.7) or 3 (containerd 2.x).
  - The file is edited with tomlkit, so every other table, key and comment is kept.
  - Refuses containerd older than 1.7 (no NRI), schema 1 files, a schema 3 file with
    containerd 1.x, a path option that is not an absolute path and a timeout that is not a Go
    duration, and changes nothing then.
author: Tidal maintainers (@tidal-colocation)
options:
  path:
    description: containerd's configuration file.
    type: path
    default: /etc/containerd/config.toml
  containerd_version:
    description:
      - The node's containerd version (C(containerd --version) output or V(1.7.13)).
      - Checked against the NRI minimum (1.7) and the file's schema; an empty file starts the
        schema this version writes.
    type: str
  disable:
    description: C(disable); V(false) enables NRI.
    type: bool
    default: false
  disable_connections:
    description: C(disable_connections); V(false) lets external plugins such as tidal-agent connect.
    type: bool
    default: false
  plugin_config_path:
    description: C(plugin_config_path).
    type: str
    default: /etc/nri/conf.d
  plugin_path:
    description: C(plugin_path).
    type: str
    default: /opt/nri/plugins
  plugin_registration_timeout:
    description: C(plugin_registration_timeout), a Go duration.
    type: str
    default: 5s
  plugin_request_timeout:
    description: C(plugin_request_timeout), a Go duration.
    type: str
    default: 2s
  socket_path:
    description: C(socket_path), where NRI plugins connect.
    type: str
    default: /var/run/nri/nri.sock
  backup:
    description: Keep a timestamped copy of the file before changing it.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - tidal.colocation.attributes.changes
  - ansible.builtin.files
requirements:
  - tomlkit
"""

EXAMPLES = r"""
- name: Enable NRI
  tidal.colocation.containerd_nri:
    path: /etc/containerd/config.toml
    containerd_version: "{{ containerd_version_output.stdout }}"
    mode: "0644"
"""

RETURN = r"""
schema:
  description: The file's config schema version.
  returned: success
  type: int
  sample: 2
before:
  description: The NRI table before (null when there was none).
  returned: success
  type: dict
after:
  description: The NRI table after.
  returned: success
  type: dict
backup_file:
  description: The backup copy, when one was made.
  returned: changed and backup is true
  type: str
"""

import re

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.tidal.colocation.plugins.module_utils import arguments, containerd
from ansible_collections.tidal.colocation.plugins.module_utils.files import read_text, write_if_changed

_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$")
#: the NRI options that are paths on the node: absolute, one line
PATH_OPTIONS = ("plugin_config_path", "plugin_path", "socket_path")


def main():
    defaults = containerd.NRI_DEFAULTS
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": "/etc/containerd/config.toml"},
            "containerd_version": {"type": "str"},
            "disable": {"type": "bool", "default": defaults["disable"]},
            "disable_connections": {"type": "bool", "default": defaults["disable_connections"]},
            "plugin_config_path": {"type": "str", "default": defaults["plugin_config_path"]},
            "plugin_path": {"type": "str", "default": defaults["plugin_path"]},
            "plugin_registration_timeout": {"type": "str", "default": defaults["plugin_registration_timeout"]},
            "plugin_request_timeout": {"type": "str", "default": defaults["plugin_request_timeout"]},
            "socket_path": {"type": "str", "default": defaults["socket_path"]},
            "backup": {"type": "bool", "default": True},
        },
        add_file_common_args=True,
        supports_check_mode=True,
    )
    arguments.refuse_non_strings(module)
    if not containerd.HAS_TOMLKIT:
        module.fail_json(msg=missing_required_lib("tomlkit"), exception=containerd.TOMLKIT_IMPORT_ERROR)
    params = module.params
    path = params["path"]
    for name in ("plugin_registration_timeout", "plugin_request_timeout"):
        if not _DURATION.match(params[name]):
            module.fail_json(msg="%s: must be a Go duration such as 5s or 500ms, got %r" % (name, params[name]))
    for name in PATH_OPTIONS:
        value = params[name]
        if not value.startswith("/") or any(c in value for c in "\n\r\x00"):
            module.fail_json(msg="%s: must be an absolute path on the node such as %s, got %r"
                                 % (name, containerd.NRI_DEFAULTS[name], value))
    try:
        version = None
        if params["containerd_version"]:
            version = containerd.parse_containerd_version(params["containerd_version"])
            containerd.check_containerd_version(version)
        settings = containerd.nri_settings(**{key: params[key] for key in defaults})
        text = read_text(module, path, missing_ok=True)
        new_text, before, after = containerd.set_nri(text or "", settings, version)
    except containerd.ContainerdConfigError as err:
        module.fail_json(msg="%s: %s" % (path, err))
    result = {"before": before, "after": after,
              "schema": containerd.schema_of(containerd.tomlkit.parse(new_text))}
    write_if_changed(module, path, text, new_text, result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
