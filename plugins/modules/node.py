#!/usr/bin/python
# Copyright: Tidal maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# or, at your option, GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node
short_description: Switch colocation and overselling on or off on Kubernetes nodes
version_added: 0.1.0
description:
  - Sets the node labels C(colocation.tidal.io/colocation=true) (tidal-agent runs there and
    protects online pods) and C(colocation.tidal.io/oversubscription=true) (tidal-manager
    publishes the node's C(kubernetes.io/batch-cpu) and C(kubernetes.io/batch-memory)).
  - Turning colocation off leaves no residue on the node, removing both labels, the
    C(colocation.tidal.io/offline-evicting) taint, the batch extended resources and Volcano's
    oversubscription annotations; the offline (BE) pods running there are evicted through the
    Eviction API (so PodDisruptionBudgets hold), and reported.
  - Every node named must exist, or nothing changes.
author: Tidal maintainers (@tidal-colocation)
options:
  names:
    description: Node names. At least one of O(names) and O(label_selector) is required.
    type: list
    elements: str
    default: []
  label_selector:
    description: A label selector; the nodes it matches are added to O(names).
    type: str
  colocation:
    description: Whether the nodes take offline (BE) pods beside online ones.
    type: bool
    required: true
  oversubscription:
    description:
      - Whether the nodes' unused online resources are oversold as batch resources.
      - Defaults to O(colocation); it cannot be V(true) without colocation.
    type: bool
  evict_be_pods:
    description: When turning colocation off, evict the BE pods on the node (V(false) only reports them).
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - tidal.colocation.auth
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Colocation and overselling on two nodes
  tidal.colocation.node:
    names: [worker-1, worker-2]
    colocation: true

- name: Colocation off on every GPU node (BE pods there are evicted)
  tidal.colocation.node:
    label_selector: accelerator=nvidia
    colocation: false
  register: nodes_off

- name: Show what was evicted
  ansible.builtin.debug:
    msg: "{{ nodes_off.nodes | map(attribute='be_pods') | flatten }}"
"""

RETURN = r"""
nodes:
  description: One entry per node, in name order.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Node name.
      type: str
    changed:
      description: Whether this node changed (or would, in check mode).
      type: bool
    labels_before:
      description: The node's Tidal labels before.
      type: dict
    labels_after:
      description: The node's Tidal labels after.
      type: dict
    removed:
      description: What turning colocation off removed (taint, extended resources, annotations).
      type: list
      elements: str
    be_pods:
      description: C(namespace/name) of the BE pods evicted (or to be evicted, in check mode or with O(evict_be_pods=false)).
      type: list
      elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.tidal.colocation.plugins.module_utils import kube, names, node_state


def _select_nodes(module, core):
    params = module.params
    selected = {}
    try:
        if params["label_selector"]:
            for node in core.list_node(label_selector=params["label_selector"]).items:
                selected[node.metadata.name] = node
        missing = []
        for name in params["names"]:
            if name in selected:
                continue
            try:
                selected[name] = core.read_node(name)
            except kube.ApiException as err:
                if err.status != 404:
                    raise
                missing.append(name)
    except kube.ApiException as err:
        module.fail_json(msg="cannot read nodes: %s" % kube.api_error_message(err))
    if missing:
        module.fail_json(msg="names: node(s) not found: %s; nothing was changed" % ", ".join(missing))
    if not selected:
        module.fail_json(msg="label_selector: %r matches no node; nothing was changed" % params["label_selector"])
    serialize = core.api_client.sanitize_for_serialization
    return [serialize(selected[name]) for name in sorted(selected)]


def _be_pods(core, node_name):
    serialize = core.api_client.sanitize_for_serialization
    pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % node_name).items
    return sorted(
        "%s/%s" % (pod["metadata"]["namespace"], pod["metadata"]["name"])
        for pod in map(serialize, pods)
        if names.is_best_effort(pod) and not pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))


def _apply(core, name, node_plan):
    metadata = {}
    if node_plan["labels"]:
        metadata["labels"] = node_plan["labels"]
    if node_plan["annotations"]:
        metadata["annotations"] = node_plan["annotations"]
    body = {}
    if metadata:
        body["metadata"] = metadata
    if node_plan["taints"] is not None:
        body["spec"] = {"taints": node_plan["taints"]}
    if body:
        core.patch_node(name, body)
    if node_plan["status_removals"]:
        core.patch_node_status(name, [{"op": "remove", "path": path} for path in node_plan["status_removals"]])


def _evict(core, be_pods):
    from kubernetes import client
    for qualified in be_pods:
        namespace, name = qualified.split("/", 1)
        eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        try:
            core.create_namespaced_pod_eviction(name, namespace, eviction)
        except kube.ApiException as err:
            if err.status != 404:  # already gone
                raise


def main():
    module = AnsibleModule(
        argument_spec=kube.argument_spec(
            names={"type": "list", "elements": "str", "default": []},
            label_selector={"type": "str"},
            colocation={"type": "bool", "required": True},
            oversubscription={"type": "bool"},
            evict_be_pods={"type": "bool", "default": True},
        ),
        required_one_of=[("names", "label_selector")],
        supports_check_mode=True,
    )
    params = module.params
    colocation = params["colocation"]
    oversubscription = colocation if params["oversubscription"] is None else params["oversubscription"]
    if oversubscription and not colocation:
        module.fail_json(msg="oversubscription: cannot be true when colocation is false "
                             "(batch resources are used only by BE pods on colocation nodes)")
    if not params["names"] and not params["label_selector"]:
        module.fail_json(msg="one of names or label_selector must name at least one node")

    from kubernetes import client
    core = client.CoreV1Api(kube.api_client(module))
    nodes = _select_nodes(module, core)
    results, diff_before, diff_after = [], {}, {}
    try:
        for node in nodes:
            name = node["metadata"]["name"]
            node_plan = node_state.plan(node, colocation, oversubscription)
            be_pods = [] if colocation else _be_pods(core, name)
            evicting = be_pods if params["evict_be_pods"] else []
            changed = not node_state.is_empty(node_plan) or bool(evicting)
            before = node_state.tidal_labels(node)
            after = {k: v for k, v in dict(before, **node_plan["labels"]).items()
                     if v is not None and k in (names.COLOCATION_NODE_LABEL, names.OVERSUBSCRIPTION_NODE_LABEL)}
            removed = ([("taint %s" % names.OFFLINE_EVICTING_TAINT_KEY)] if node_plan["taints"] is not None else []) \
                + node_plan["status_removals"] + ["annotation %s" % a for a in node_plan["annotations"]]
            if changed and not module.check_mode:
                if evicting:
                    _evict(core, evicting)
                _apply(core, name, node_plan)
            results.append({"name": name, "changed": changed, "labels_before": before,
                            "labels_after": after, "removed": removed, "be_pods": be_pods})
            diff_before[name] = before
            diff_after[name] = after
    except kube.ApiException as err:
        module.fail_json(msg="cannot update node: %s" % kube.api_error_message(err), nodes=results)
    result = {"changed": any(r["changed"] for r in results), "nodes": results}
    if module._diff:
        result["diff"] = {"before": diff_before, "after": diff_after}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
