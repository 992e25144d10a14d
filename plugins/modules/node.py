#!/usr/bin/python
# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: node
short_description: Switch colocation and oversubscription on or off on Kubernetes nodes
version_added: 0.1.0
description:
  - Brings nodes to one of four modes with two independent labels,
    C(colocation.tidal.io/colocation=true) and C(colocation.tidal.io/oversubscription=true)
    (RV(mode)). V(off) (neither) - Tidal does nothing on the node. V(colocation) - offline (BE)
    pods keep their native requests and run with BE isolation; no oversold resources; evicted
    above the high watermark. V(oversubscription) - tidal-manager publishes the node's
    C(kubernetes.io/batch-cpu) and C(kubernetes.io/batch-memory) for BE pods; they are evicted
    above the high watermark only when the node's requests are also above 100 % of its
    allocatable. V(colocation+oversubscription) - both; evicted above the high watermark.
  - Volcano's C(volcano.sh/colocation) and C(volcano.sh/oversubscription) labels are read by
    Tidal as aliases when its own label is absent. Switching colocation off on a node whose
    C(volcano.sh/colocation=true) stays sets C(colocation.tidal.io/colocation=false) (Tidal's label
    wins) rather than removing Volcano's label.
  - Oversubscription off leaves no residue of it, removing the batch extended resources,
    Volcano's oversubscription annotations and its C(volcano.sh/oversubscription) label (with
    tidal-manager's C(colocation.tidal.io/volcano-oversubscription-written) marker). The mode off
    also removes the C(colocation.tidal.io/offline-evicting) taint.
  - BE pods are evicted only when the node leaves the modes they can run in, after the node's
    labels, taint, annotations and batch resources were changed. In mode V(off) every BE pod is
    evicted; with oversubscription off, the BE pods asking for batch resources (they lose them;
    BE pods on native requests stay on a V(colocation) node). Switching colocation off while
    oversubscription stays on evicts nothing. Evictions go through the Eviction API (so
    PodDisruptionBudgets hold) and are reported; as the node's labels and batch resources changed
    first, neither an evicted pod's replacement nor a new such pod is placed on the node again.
  - An eviction that a PodDisruptionBudget does not allow now (the Eviction API answers 429) is
    reported in RV(blocked) and the module B(fails), after trying every node and pod, with
    C(changed) true for what it did change. It fails because BE pods are still running
    on a node whose mode no longer lets them run, which a playbook should not pass over; the node's
    changes are not undone and need no repeating, so running the task again (for example with
    C(retries) and C(until)) only retries the evictions.
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
    description:
      - Whether the nodes take offline (BE) pods beside online ones, with BE isolation, on their
        native requests unless oversubscription is on too.
    type: bool
    required: true
  oversubscription:
    description:
      - Whether the nodes' unused online resources are oversold as batch resources for BE pods.
      - Independent of O(colocation); V(true) with O(colocation=false) is the V(oversubscription) mode.
      - Defaults to O(colocation).
    type: bool
  evict_be_pods:
    description:
      - When the nodes leave the modes their BE pods can run in, evict those pods, after the nodes'
        labels and batch resources changed.
      - V(false) only reports them in RV(nodes[].be_pods), and the module does not fail for them.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - tidal.colocation.attributes.changes
  - tidal.colocation.auth
"""

EXAMPLES = r"""
- name: Colocation and oversubscription on two nodes
  tidal.colocation.node:
    names: [worker-1, worker-2]
    colocation: true

- name: Colocation only - BE pods keep native requests (BE pods on batch resources are evicted)
  tidal.colocation.node:
    names: [worker-4]
    colocation: true
    oversubscription: false

- name: Oversubscription only - batch resources, no colocation label
  tidal.colocation.node:
    label_selector: pool=batch
    colocation: false
    oversubscription: true

- name: Colocation off on every GPU node (BE pods there are evicted)
  tidal.colocation.node:
    label_selector: accelerator=nvidia
    colocation: false
  register: nodes_off

- name: Show what was evicted
  ansible.builtin.debug:
    msg: "{{ nodes_off.nodes | map(attribute='evicted') | flatten }}"

- name: Colocation off, waiting for PodDisruptionBudgets to allow the evictions
  tidal.colocation.node:
    names: [worker-3]
    colocation: false
  register: worker_3_off
  retries: 10
  delay: 30
  until: worker_3_off is not failed or worker_3_off.blocked | default([]) | length == 0
"""

RETURN = r"""
mode:
  description: The mode the options ask for, which every node is in after the task.
  returned: always
  type: str
  choices: ["off", colocation, oversubscription, colocation+oversubscription]
  sample: colocation+oversubscription
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
    mode_before:
      description: The node's mode before (Volcano's aliases counted as Tidal does).
      type: str
    mode:
      description: The node's mode after.
      type: str
    removed:
      description: What turning oversubscription or the mode off removed (taint, extended resources, annotations, Volcano's label).
      type: list
      elements: str
    be_pods:
      description:
        - C(namespace/name) of the BE pods bound to the node that cannot run in its new mode (all
          of them in mode V(off); those asking for batch resources in mode V(colocation)), listed
          after its labels were changed (in check mode, the pods that would be evicted).
        - With O(evict_be_pods=false), the pods left running.
      type: list
      elements: str
    evicted:
      description: C(namespace/name) of the BE pods whose eviction the API accepted (or that were already gone).
      type: list
      elements: str
    blocked:
      description: The BE pods of this node whose eviction was refused with 429, as in RV(blocked).
      type: list
      elements: dict
blocked:
  description:
    - One entry per BE pod whose eviction the Eviction API refused with 429 Too Many Requests
      (a PodDisruptionBudget does not allow it now), on every node; when it is not empty the
      module has failed, and the nodes' changes stand.
    - Empty in check mode, which evicts nothing.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: Node name.
      type: str
    pod:
      description: C(namespace/name) of the pod.
      type: str
    message:
      description: The API's message, with the messages of its causes (the budget that refused) in parentheses.
      type: str
  sample:
    - node: worker-3
      pod: batch/train-7
      message: >-
        Cannot evict pod as it would violate the pod's disruption budget (The disruption budget
        train needs 2 healthy pods and has 2 currently)
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.tidal.colocation.plugins.module_utils import arguments, kube, names, node_mode, node_state
from ansible_collections.tidal.colocation.plugins.module_utils.errors import ModuleError

# The Eviction API answers 429 Too Many Requests when a PodDisruptionBudget does not allow the
# eviction now (https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/).
EVICTION_BLOCKED = 429


def switches(params):
    """(colocation, oversubscription) from the options; raises `ModuleError` naming the option."""
    colocation = params["colocation"]
    oversubscription = colocation if params["oversubscription"] is None else params["oversubscription"]
    if not params["names"] and not params["label_selector"]:
        raise ModuleError("names, label_selector: one of them must name at least one node "
                          "(a non-empty list of node names or a label selector)")
    return colocation, oversubscription


def select_nodes(core, node_names, label_selector):
    """The nodes named or selected, as dicts in name order; raises `ModuleError` (nothing is
    changed yet) when one is missing, none is selected or the API refuses."""
    serialize = core.api_client.sanitize_for_serialization
    selected = {}
    missing = []
    try:
        if label_selector:
            for node in map(serialize, core.list_node(label_selector=label_selector).items):
                selected[node["metadata"]["name"]] = node
        for name in node_names:
            if name in selected:
                continue
            try:
                selected[name] = serialize(core.read_node(name))
            except kube.ApiException as err:
                if err.status != 404:
                    raise
                missing.append(name)
    except kube.ApiException as err:
        raise ModuleError("cannot read nodes: %s; nothing was changed" % kube.api_error_message(err))
    if missing:
        raise ModuleError("names: node(s) not found: %s; nothing was changed" % ", ".join(missing))
    if not selected:
        raise ModuleError("label_selector: %r matches no node; nothing was changed" % label_selector)
    return [selected[name] for name in sorted(selected)]


def be_pods(core, node_name, node_plan):
    """``namespace/name`` of the running BE pods bound to the node that must leave it under the
    plan (`node_state.must_leave`), sorted."""
    serialize = core.api_client.sanitize_for_serialization
    pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % node_name).items
    return sorted(
        "%s/%s" % (pod["metadata"]["namespace"], pod["metadata"]["name"])
        for pod in map(serialize, pods)
        if names.is_best_effort(pod) and node_state.must_leave(node_plan, pod)
        and not pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))


def apply_plan(core, name, node_plan):
    """Patch the node: labels, annotations and taints, then the batch resources in its status."""
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


def evict(core, pods):
    """Evict each pod through the Eviction API; returns (evicted, blocked).

    ``evicted``: the pods whose eviction was accepted or that were already gone. ``blocked``: one
    ``{pod, message}`` per eviction the API refused with 429 (a PodDisruptionBudget), the message
    the API's, with its causes. Every pod is tried; any other API error is raised.
    """
    from kubernetes import client
    evicted, blocked = [], []
    for qualified in pods:
        namespace, name = qualified.split("/", 1)
        eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        try:
            core.create_namespaced_pod_eviction(name, namespace, eviction)
        except kube.ApiException as err:
            if err.status == EVICTION_BLOCKED:
                message = kube.api_error_message(err)
                causes = kube.api_error_causes(err)
                if causes:
                    message = "%s (%s)" % (message.rstrip("."), "; ".join(causes))
                blocked.append({"pod": qualified, "message": message})
                continue
            if err.status != 404:  # 404: already gone
                raise
        evicted.append(qualified)
    return evicted, blocked


def _removed(node_plan):
    taint = ["taint %s" % names.OFFLINE_EVICTING_TAINT_KEY] if node_plan["taints"] is not None else []
    labels = ["label %s" % key for key, value in sorted(node_plan["labels"].items())
              if value is None and key not in (names.COLOCATION_NODE_LABEL, names.OVERSUBSCRIPTION_NODE_LABEL)]
    return (taint + node_plan["status_removals"] + ["annotation %s" % a for a in node_plan["annotations"]]
            + labels)


def _blocked_message(blocked, mode):
    pods = "; ".join("%s on %s: %s" % (b["pod"], b["node"], b["message"]) for b in blocked)
    return ("%d BE pod(s) could not be evicted, the Eviction API answered 429 Too Many Requests "
            "(a PodDisruptionBudget does not allow it now): %s. The node(s) are in mode %s all "
            "the same (labels, taint and batch resources changed first), so no new pod that cannot "
            "run there is placed there; run the task again to retry the evictions" % (len(blocked), pods, mode))


def run(core, params, check_mode=False, diff=False):
    """Bring the nodes to the wanted switches; returns the module's result.

    Per node: the labels, the offline-evicting taint, Volcano's oversubscription annotations and
    label and the batch resources change first, then the BE pods still bound to it that cannot
    run in its new mode are listed and evicted, so none of them (nor a replacement) is placed on
    the node again. Raises `ModuleError` carrying the results so far: on an API error, and when
    an eviction was blocked (after every node and every pod has been tried).
    """
    colocation, oversubscription = switches(params)
    mode = node_mode.mode_name(colocation, oversubscription)
    nodes = select_nodes(core, params["names"], params["label_selector"])
    results, blocked, diff_before, diff_after = [], [], {}, {}

    def summary():
        result = {"changed": any(r["changed"] for r in results), "mode": mode, "nodes": results,
                  "blocked": blocked}
        if diff:
            result["diff"] = {"before": diff_before, "after": diff_after}
        return result

    for node in nodes:
        name = node["metadata"]["name"]
        node_plan = node_state.plan(node, colocation, oversubscription)
        before = node_state.tidal_labels(node)
        after = node_state.labels_after(node, node_plan)
        metadata = node.get("metadata") or {}
        entry = {"name": name, "changed": False, "labels_before": before,
                 "labels_after": node_state.tidal_labels({"metadata": {"labels": after}}),
                 "mode_before": node_mode.node_mode(metadata.get("labels"), metadata.get("annotations")),
                 "mode": node_mode.node_mode(after, node_state.annotations_after(node, node_plan)),
                 "removed": _removed(node_plan), "be_pods": [], "evicted": [], "blocked": []}
        results.append(entry)
        diff_before[name], diff_after[name] = before, entry["labels_after"]
        step = "update node %s" % name
        try:
            if not node_state.is_empty(node_plan):
                if not check_mode:
                    apply_plan(core, name, node_plan)
                entry["changed"] = True
            if node_plan["evict"] is None:
                continue
            step = "list the pods on node %s" % name
            entry["be_pods"] = be_pods(core, name, node_plan)
            if not params["evict_be_pods"] or not entry["be_pods"]:
                continue
            if check_mode:
                entry["changed"] = True
                continue
            step = "evict the BE pods on node %s" % name
            entry["evicted"], entry["blocked"] = evict(core, entry["be_pods"])
            entry["changed"] = entry["changed"] or bool(entry["evicted"])
            blocked.extend(dict(b, node=name) for b in entry["blocked"])
        except kube.ApiException as err:
            raise ModuleError("cannot %s: %s" % (step, kube.api_error_message(err)), **summary())
    if blocked:
        raise ModuleError(_blocked_message(blocked, mode), **summary())
    return summary()


def _core_api(params):
    from kubernetes import client
    return client.CoreV1Api(kube.build_api_client(params))


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
    arguments.refuse_non_strings(module)
    try:
        switches(module.params)
        result = run(_core_api(module.params), module.params, module.check_mode, module._diff)
    except ModuleError as err:
        module.fail_json(**err.result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
