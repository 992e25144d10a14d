#!/usr/bin/python
# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: policy
short_description: Set fields of Tidal's ColocationPolicy
version_added: 0.1.0
description:
  - Sets any field of the cluster's ColocationPolicy C(default) (API group
    C(colocation.tidal.io/v1alpha1)), the one object every Tidal component reads.
  - O(spec) is merged into the current spec (or the defaults when there is no policy yet); the
    result is validated with the same model tidal-manager and tidal-agent use, so an invalid
    value fails with the field's full path and the rule (for example that
    C(spec.evictionWatermarks.cpu.lowPercent) must be lower than C(highPercent)), and nothing is
    changed.
  - The policy is written only when its complete spec (defaults included) changes.
author: Tidal maintainers (@tidal-colocation)
options:
  spec:
    description:
      - Fields of the policy's spec, in the CRD's camelCase, nested as in the object (see the examples).
      - Fields not given keep their current value (O(replace=false)) or take their defaults (O(replace=true)).
    type: dict
    default: {}
  replace:
    description: Replace the whole spec with O(spec) over the defaults instead of merging it into the current spec.
    type: bool
    default: false
  state:
    description: V(absent) deletes the policy, after which every component uses the defaults.
    type: str
    choices: [present, absent]
    default: present
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - tidal.colocation.attributes.changes
  - tidal.colocation.auth
"""

EXAMPLES = r"""
- name: Oversell at most half of each node, predicted by the p95 of the last 10 minutes
  tidal.colocation.policy:
    spec:
      overselling:
        ratioPercent: 50
        predictor: p95
        windowSeconds: 600

- name: Back to the defaults
  tidal.colocation.policy:
    replace: true
"""

RETURN = r"""
spec:
  description: The complete spec after the change (every field, defaults included); null after O(state=absent).
  returned: always
  type: dict
errors:
  description: Every validation error, with the field path and the rule.
  returned: failed
  type: list
  elements: dict
"""

import copy

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.tidal.colocation.plugins.module_utils import arguments, kube, names
from ansible_collections.tidal.colocation.plugins.module_utils.policy_model import (
    ColocationPolicy,
    PolicyValidationError,
    policy_manifest,
)


def merge(base, overlay):
    """``overlay`` deep-merged over ``base`` (new dicts; lists and scalars replace)."""
    merged = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def desired_spec(current_spec, requested, replace):
    """The complete spec to store; raises PolicyValidationError naming every bad field."""
    base = {} if replace or current_spec is None else current_spec
    return ColocationPolicy.from_spec(merge(base, requested)).to_spec()


def complete(spec):
    """A stored spec with defaults filled in, so two specs compare by meaning; None if invalid."""
    try:
        return ColocationPolicy.from_spec(spec).to_spec()
    except PolicyValidationError:
        return None


def main():
    module = AnsibleModule(
        argument_spec=kube.argument_spec(
            spec={"type": "dict", "default": {}},
            replace={"type": "bool", "default": False},
            state={"type": "str", "choices": ["present", "absent"], "default": "present"},
        ),
        supports_check_mode=True,
    )
    arguments.refuse_non_strings(module)
    params = module.params
    from kubernetes import client
    custom = client.CustomObjectsApi(kube.api_client(module))
    args = (names.API_GROUP, names.API_VERSION, names.POLICY_PLURAL, names.POLICY_NAME)
    try:
        current = custom.get_cluster_custom_object(*args)
    except kube.ApiException as err:
        if err.status != 404:
            module.fail_json(msg="cannot read ColocationPolicy %s: %s" % (names.POLICY_NAME, kube.api_error_message(err)))
        current = None
    current_spec = complete(current.get("spec") or {}) if current else None

    if params["state"] == "absent":
        result = {"changed": current is not None, "spec": None}
        if module._diff:
            result["diff"] = {"before": current_spec or {}, "after": {}}
        if current is not None and not module.check_mode:
            try:
                custom.delete_cluster_custom_object(*args)
            except kube.ApiException as err:
                if err.status != 404:
                    module.fail_json(msg="cannot delete ColocationPolicy: %s" % kube.api_error_message(err))
        module.exit_json(**result)

    try:
        spec = desired_spec(current_spec if current else None, params["spec"], params["replace"])
    except PolicyValidationError as err:
        module.fail_json(msg="%s; nothing was changed" % err,
                         errors=[{"path": e.path, "message": e.message} for e in err.errors])
    changed = spec != current_spec
    result = {"changed": changed, "spec": spec}
    if module._diff:
        result["diff"] = {"before": current_spec or {}, "after": spec}
    if changed and not module.check_mode:
        try:
            if current is None:
                body = policy_manifest(ColocationPolicy.from_spec(spec))
                stored = custom.create_cluster_custom_object(names.API_GROUP, names.API_VERSION, names.POLICY_PLURAL, body)
            else:
                body = dict(current, spec=spec)
                stored = custom.replace_cluster_custom_object(*args, body)
        except kube.ApiException as err:
            # The CRD's schema and CEL rules are the API server's own check of the same rules.
            module.fail_json(msg="the API server refused the ColocationPolicy: %s" % kube.api_error_message(err))
        result["spec"] = complete(stored.get("spec") or {}) or spec
    module.exit_json(**result)


if __name__ == "__main__":
    main()
