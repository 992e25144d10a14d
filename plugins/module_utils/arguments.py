# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Refuse a list or a mapping given where a module option takes a string.

ansible-core turns any value given to a ``type: str`` (or ``path``) option into a string, with a
warning only: a mapping becomes its Python repr (``"{'a': 1}"``), which a module would then write
into a configuration file or send to the API server. No option of this collection means that, so
every module calls `refuse_non_strings` right after building its AnsibleModule: the module fails
naming the option, before anything is read or changed. Numbers and booleans are still converted
(``reserved_system_cpus: 0`` in YAML is the string ``"0"``).
"""

from __future__ import annotations

from ansible.module_utils.basic import _load_params

STRING_TYPES = ("str", "path")


def _kind(value):
    return "list" if isinstance(value, list) else "mapping"


def string_errors(spec, raw, prefix=""):
    """One message per option (or suboption, or list element) of ``spec`` whose raw value in
    ``raw`` is a list or a mapping where a string is expected."""
    errors = []
    for name, option in spec.items():
        kind = option.get("type") or "str"
        for key in [name] + list(option.get("aliases") or []):
            if key not in raw:
                continue
            value, where = raw[key], prefix + key
            if kind in STRING_TYPES and isinstance(value, (dict, list)):
                errors.append("%s: must be a string, got a %s" % (where, _kind(value)))
            elif kind == "list" and isinstance(value, list):
                for index, item in enumerate(value):
                    if option.get("elements") in STRING_TYPES and isinstance(item, (dict, list)):
                        errors.append("%s[%d]: must be a string, got a %s" % (where, index, _kind(item)))
                    elif option.get("options") and isinstance(item, dict):
                        errors.extend(string_errors(option["options"], item, "%s[%d]." % (where, index)))
            elif kind == "dict" and option.get("options") and isinstance(value, dict):
                errors.extend(string_errors(option["options"], value, where + "."))
    return errors


def refuse_non_strings(module):
    """Fail ``module`` when one of its string options was given a list or a mapping."""
    errors = string_errors(module.argument_spec, _load_params())
    if errors:
        module.fail_json(msg="; ".join(errors) + "; nothing was changed")
