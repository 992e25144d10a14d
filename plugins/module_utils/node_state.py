# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What switching colocation and oversubscription on or off means for one node (pure: dicts in,
a plan out)."""

from __future__ import annotations

from ansible_collections.tidal.colocation.plugins.module_utils import names, node_mode

#: which BE pods must leave the node (`plan`'s ``evict``)
EVICT_ALL = "all"
EVICT_BATCH = "batch"


def tidal_labels(node):
    labels = (node.get("metadata") or {}).get("labels") or {}
    return {key: labels[key] for key in (names.COLOCATION_NODE_LABEL, names.OVERSUBSCRIPTION_NODE_LABEL)
            if key in labels}


def _wanted_label(labels, own, alias, wanted, alias_removed):
    """Tidal's label for a wanted switch: ``true`` when on; when off, removed — or ``false`` when
    a Volcano alias that stays on the node would switch it on (Tidal's label wins; the alias is
    the user's, not this module's to remove)."""
    if wanted:
        return names.NODE_LABEL_ENABLED_VALUE
    if not alias_removed and node_mode.label_value(labels, alias):
        return "false"
    return None


def plan(node, colocation, oversubscription):
    """The changes that bring ``node`` (a dict as the API returns it) to the wanted switches.

    Returns a dict: ``labels`` (label -> value, None to remove; only what differs),
    ``taints`` (the new taint list, or None when unchanged), ``status_removals`` (JSON-patch
    paths under /status to remove), ``annotations`` (annotation -> None, to remove),
    ``evict`` (which BE pods must leave: `EVICT_ALL`, `EVICT_BATCH` — those asking for batch
    resources — or None) and ``mode`` (the mode after, `node_mode.MODES`).

    - Oversubscription off leaves no residue of it: the batch extended resources, Volcano's
      oversubscription annotations and its ``volcano.sh/oversubscription`` label (with
      tidal-manager's marker) go, and the BE pods asking for batch resources must leave (they
      lose them); BE pods on native requests may stay while colocation is on.
    - The mode off (both switches off) also removes the offline-evicting taint, and every BE
      pod must leave.
    - Colocation off with oversubscription on keeps the BE pods: they run on batch resources.
    """
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    result = {"labels": {}, "taints": None, "status_removals": [], "annotations": {}, "evict": None,
              "mode": node_mode.mode_name(colocation, oversubscription)}
    if not oversubscription:
        if names.VOLCANO_OVERSUBSCRIPTION_LABEL in labels:
            result["labels"][names.VOLCANO_OVERSUBSCRIPTION_LABEL] = None
        for key in names.VOLCANO_OVERSUBSCRIPTION_ANNOTATIONS + (names.VOLCANO_LABEL_WRITTEN_ANNOTATION,):
            if key in annotations:
                result["annotations"][key] = None
        status = node.get("status") or {}
        for section in ("capacity", "allocatable"):
            for resource in names.BATCH_RESOURCES:
                if resource in (status.get(section) or {}):
                    result["status_removals"].append(
                        "/status/%s/%s" % (section, resource.replace("~", "~0").replace("/", "~1")))
        result["evict"] = EVICT_BATCH if colocation else EVICT_ALL
    wanted = {
        names.COLOCATION_NODE_LABEL: _wanted_label(
            labels, names.COLOCATION_NODE_LABEL, names.VOLCANO_COLOCATION_LABEL, colocation, False),
        names.OVERSUBSCRIPTION_NODE_LABEL: _wanted_label(
            labels, names.OVERSUBSCRIPTION_NODE_LABEL, names.VOLCANO_OVERSUBSCRIPTION_LABEL, oversubscription,
            names.VOLCANO_OVERSUBSCRIPTION_LABEL in result["labels"]),
    }
    for key, value in wanted.items():
        if labels.get(key) != value:
            result["labels"][key] = value
    if not (colocation or oversubscription):
        taints = (node.get("spec") or {}).get("taints") or []
        kept = [t for t in taints if t.get("key") != names.OFFLINE_EVICTING_TAINT_KEY]
        if len(kept) != len(taints):
            result["taints"] = kept
    return result


def labels_after(node, node_plan):
    """The node's labels once the plan is applied."""
    labels = dict((node.get("metadata") or {}).get("labels") or {}, **node_plan["labels"])
    return {key: value for key, value in labels.items() if value is not None}


def annotations_after(node, node_plan):
    annotations = dict((node.get("metadata") or {}).get("annotations") or {}, **node_plan["annotations"])
    return {key: value for key, value in annotations.items() if value is not None}


def must_leave(node_plan, pod):
    """Whether a BE pod bound to the node must leave it under the plan."""
    if node_plan["evict"] == EVICT_ALL:
        return True
    return node_plan["evict"] == EVICT_BATCH and names.uses_batch_resources(pod)


def is_empty(node_plan):
    return not (node_plan["labels"] or node_plan["taints"] is not None
                or node_plan["status_removals"] or node_plan["annotations"])
