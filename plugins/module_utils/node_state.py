# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What switching colocation on or off means for one node (pure: dicts in, a plan out)."""

from __future__ import annotations

from ansible_collections.tidal.colocation.plugins.module_utils import names


def tidal_labels(node):
    labels = (node.get("metadata") or {}).get("labels") or {}
    return {key: labels[key] for key in (names.COLOCATION_NODE_LABEL, names.OVERSUBSCRIPTION_NODE_LABEL)
            if key in labels}


def plan(node, colocation, oversubscription):
    """The changes that bring ``node`` (a dict as the API returns it) to the wanted switches.

    Returns a dict: ``labels`` (label -> value, None to remove; only what differs),
    ``taints`` (the new taint list, or None when unchanged), ``status_removals`` (JSON-patch
    paths under /status to remove), ``annotations`` (annotation -> None, to remove).
    Turning colocation off leaves no residue: both labels, the offline-evicting taint, the
    batch extended resources and Volcano's oversubscription annotations and label go.
    """
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    wanted = {
        names.COLOCATION_NODE_LABEL: names.NODE_LABEL_ENABLED_VALUE if colocation else None,
        names.OVERSUBSCRIPTION_NODE_LABEL: (
            names.NODE_LABEL_ENABLED_VALUE if colocation and oversubscription else None),
    }
    result = {"labels": {}, "taints": None, "status_removals": [], "annotations": {}}
    for key, value in wanted.items():
        if labels.get(key) != value:
            result["labels"][key] = value
    if colocation:
        return result
    if names.VOLCANO_OVERSUBSCRIPTION_LABEL in labels:
        result["labels"][names.VOLCANO_OVERSUBSCRIPTION_LABEL] = None
    for key in names.VOLCANO_OVERSUBSCRIPTION_ANNOTATIONS:
        if key in annotations:
            result["annotations"][key] = None
    taints = (node.get("spec") or {}).get("taints") or []
    kept = [t for t in taints if t.get("key") != names.OFFLINE_EVICTING_TAINT_KEY]
    if len(kept) != len(taints):
        result["taints"] = kept
    status = node.get("status") or {}
    for section in ("capacity", "allocatable"):
        for resource in names.BATCH_RESOURCES:
            if resource in (status.get(section) or {}):
                result["status_removals"].append(
                    "/status/%s/%s" % (section, resource.replace("~", "~0").replace("/", "~1")))
    return result


def is_empty(node_plan):
    return not (node_plan["labels"] or node_plan["taints"] is not None
                or node_plan["status_removals"] or node_plan["annotations"])
