#!/usr/bin/python
# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: info
short_description: Report Tidal's view of nodes - switches, capabilities, batch resources and why
version_added: 0.1.0
description:
  - For each node, its mode (V(off), V(colocation), V(oversubscription) or
    V(colocation+oversubscription), from its labels and Volcano's aliases as Tidal reads them),
    its Tidal labels, its offline-evicting taint, the batch resources tidal-manager
    published and the breakdown behind them (inputs, predictor, formula, from the node's
    NodeProfile), what its kernel and hardware support (from the agent's capability probe),
    its pods by QoS level and the BE evictions the agent reported.
  - Reads only; never changes anything.
author: Tidal maintainers (@tidal-colocation)
options:
  names:
    description: Only these nodes (default every node).
    type: list
    elements: str
    default: []
  label_selector:
    description: Only the nodes this label selector matches.
    type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - tidal.colocation.attributes.reads
  - tidal.colocation.auth
"""

EXAMPLES = r"""
- name: Read Tidal's state of every colocation node
  tidal.colocation.info:
    label_selector: colocation.tidal.io/colocation=true
  register: tidal

- name: Batch CPU per node
  ansible.builtin.debug:
    msg: "{{ tidal.nodes | items2dict(key_name='name', value_name='batch_resources') }}"
"""

RETURN = r"""
policy_exists:
  description: Whether the ColocationPolicy C(default) exists (the components use the defaults otherwise).
  returned: always
  type: bool
nodes:
  description: One entry per node, in name order.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Node name.
      type: str
    mode:
      description:
        - The node's mode - V(off), V(colocation), V(oversubscription) or V(colocation+oversubscription) -
          from the two switches below.
      type: str
      sample: colocation+oversubscription
    colocation:
      description:
        - Whether colocation is on - C(colocation.tidal.io/colocation), else its alias C(volcano.sh/colocation).
      type: bool
    oversubscription:
      description:
        - Whether oversubscription is on - C(colocation.tidal.io/oversubscription), else its alias
          C(volcano.sh/oversubscription) unless tidal-manager wrote it itself
          (C(colocation.tidal.io/volcano-oversubscription-written)).
      type: bool
    labels:
      description: The node's labels under C(colocation.tidal.io/).
      type: dict
    offline_evicting:
      description: Whether the node carries the offline-evicting taint.
      type: bool
    batch_resources:
      description: Allocatable C(kubernetes.io/batch-cpu) (millicores) and C(kubernetes.io/batch-memory) (bytes); 0 when absent.
      type: dict
    breakdown:
      description: C(NodeProfile.status.oversell) - the inputs, predictor and formula behind the batch resources (empty without a NodeProfile).
      type: dict
    capabilities:
      description: C(NodeProfile.status.capabilities), each feature with whether it is supported and why not.
      type: list
      elements: dict
    pods_by_qos:
      description: Running or pending pods on the node per QoS level (C(HLS), C(LS), C(BE), C(none)).
      type: dict
    evictions:
      description: BE evictions the node's agent reported (C(TidalEvicted) events still kept by the API server).
      type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.tidal.colocation.plugins.module_utils import arguments, kube, names, node_mode

_PREFIX = names.API_GROUP + "/"


def _quantity_int(value):
    if value is None:
        return 0
    text = str(value)
    try:
        return int(text)
    except ValueError:
        suffixes = {"k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30}
        for suffix, factor in suffixes.items():
            if text.endswith(suffix) and text[:-len(suffix)].isdigit():
                return int(text[:-len(suffix)]) * factor
        return 0


def node_summary(node, profile, pods, evictions):
    """One node's report from API dicts (pure)."""
    labels = node["metadata"].get("labels") or {}
    colocation, oversubscription = node_mode.switches(labels, node["metadata"].get("annotations"))
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    status = (profile or {}).get("status") or {}
    by_qos = {"HLS": 0, "LS": 0, "BE": 0, "none": 0}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        level = names.qos_level((pod.get("metadata") or {}).get("annotations"))
        if level is None and names.is_best_effort(pod):
            level = "BE"
        by_qos[level or "none"] += 1
    return {
        "name": node["metadata"]["name"],
        "mode": node_mode.mode_name(colocation, oversubscription),
        "colocation": colocation,
        "oversubscription": oversubscription,
        "labels": {k: v for k, v in labels.items() if k.startswith(_PREFIX)},
        "offline_evicting": any(t.get("key") == names.OFFLINE_EVICTING_TAINT_KEY
                                for t in (node.get("spec") or {}).get("taints") or []),
        "batch_resources": {r: _quantity_int(allocatable.get(r)) for r in names.BATCH_RESOURCES},
        "breakdown": status.get("oversell") or {},
        "capabilities": status.get("capabilities") or [],
        "pods_by_qos": by_qos,
        "evictions": evictions,
    }


def main():
    module = AnsibleModule(
        argument_spec=kube.argument_spec(
            names={"type": "list", "elements": "str", "default": []},
            label_selector={"type": "str"},
        ),
        supports_check_mode=True,
    )
    arguments.refuse_non_strings(module)
    params = module.params
    from kubernetes import client
    api = kube.api_client(module)
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    serialize = api.sanitize_for_serialization
    try:
        nodes = [serialize(n) for n in core.list_node(label_selector=params["label_selector"] or "").items]
        if params["names"]:
            wanted = set(params["names"])
            missing = wanted - {n["metadata"]["name"] for n in nodes}
            if missing:
                module.fail_json(msg="names: node(s) not found: %s" % ", ".join(sorted(missing)))
            nodes = [n for n in nodes if n["metadata"]["name"] in wanted]
        try:
            profiles = {p["metadata"]["name"]: p for p in custom.list_cluster_custom_object(
                names.API_GROUP, names.API_VERSION, names.NODE_PROFILE_PLURAL)["items"]}
        except kube.ApiException as err:
            if err.status != 404:  # 404: Tidal's CRDs are not installed
                raise
            profiles = {}
        try:
            custom.get_cluster_custom_object(names.API_GROUP, names.API_VERSION, names.POLICY_PLURAL, names.POLICY_NAME)
            policy_exists = True
        except kube.ApiException as err:
            if err.status != 404:
                raise
            policy_exists = False
        evictions = {}
        for event in core.list_event_for_all_namespaces(field_selector="reason=TidalEvicted").items:
            host = event.reporting_instance or (event.source.host if event.source else None)
            evictions[host] = evictions.get(host, 0) + (event.count or 1)
        reports = []
        for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
            name = node["metadata"]["name"]
            pods = [serialize(p) for p in core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % name).items]
            reports.append(node_summary(node, profiles.get(name), pods, evictions.get(name, 0)))
    except kube.ApiException as err:
        module.fail_json(msg="cannot read the cluster: %s" % kube.api_error_message(err))
    module.exit_json(changed=False, nodes=reports, policy_exists=policy_exists)


if __name__ == "__main__":
    main()
