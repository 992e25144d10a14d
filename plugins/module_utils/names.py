# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The names of Tidal's contract (DESIGN.md "Names") that the modules read and write.

The same values as ``tidal.api.qos`` and ``tidal.api.node_mode``, which modules cannot import on
a managed host; a unit test (tests/ansible/test_vendored.py) checks that every value here equals
its counterpart there and that `qos_level` agrees with ``tidal.api.qos.qos_level_of`` on a table
of annotations.
"""

from __future__ import annotations

API_GROUP = "colocation.tidal.io"
API_VERSION = "v1alpha1"
NAMESPACE = "tidal-system"
POLICY_PLURAL = "colocationpolicies"
POLICY_NAME = "default"
NODE_PROFILE_PLURAL = "nodeprofiles"

QOS_ANNOTATION = "colocation.tidal.io/qos-level"
OPENFUYAO_QOS_ANNOTATION = "openfuyao.com/qos-level"
OPENFUYAO_QOS_ANNOTATION_CAPITALISED = "openfuyao.com/QoS-level"
VOLCANO_QOS_ANNOTATION = "volcano.sh/qos-level"

COLOCATION_NODE_LABEL = "colocation.tidal.io/colocation"
OVERSUBSCRIPTION_NODE_LABEL = "colocation.tidal.io/oversubscription"
NODE_LABEL_ENABLED_VALUE = "true"
# Volcano's names for the two switches, read as aliases (tidal.api.node_mode), never written.
VOLCANO_COLOCATION_LABEL = "volcano.sh/colocation"

OFFLINE_EVICTING_TAINT_KEY = "colocation.tidal.io/offline-evicting"
OFFLINE_EVICTING_TAINT_EFFECT = "NoSchedule"
# Set by the agent while it still has something to put back on its node (the uninstall waits).
RESTORE_PENDING_NODE_LABEL = "colocation.tidal.io/restore-pending"

BATCH_CPU_RESOURCE = "kubernetes.io/batch-cpu"
BATCH_MEMORY_RESOURCE = "kubernetes.io/batch-memory"
BATCH_RESOURCES = (BATCH_CPU_RESOURCE, BATCH_MEMORY_RESOURCE)

# Volcano's oversubscription reporting (policy overselling.reportingMode: volcanoAnnotations).
VOLCANO_OVERSUBSCRIPTION_LABEL = "volcano.sh/oversubscription"
VOLCANO_OVERSUBSCRIPTION_ANNOTATIONS = ("volcano.sh/oversubscription-cpu", "volcano.sh/oversubscription-memory")
# Set by tidal-manager beside the volcano.sh/oversubscription label it writes: that label is then
# its output, not the alias.
VOLCANO_LABEL_WRITTEN_ANNOTATION = "colocation.tidal.io/volcano-oversubscription-written"

QOS_LEVELS = ("HLS", "LS", "BE")
_VOLCANO_LEVELS = {"LC": "HLS", "HLS": "LS", "LS": "LS", "BE": "BE"}


def qos_level(annotations):
    """The QoS level a pod's annotations ask for (``HLS``, ``LS``, ``BE``), or None.

    The canonical annotation wins; the aliases are read only without it. An unparsable value
    gives None here: the admission webhook rejects such pods, so none should exist.
    """
    annotations = annotations or {}
    if QOS_ANNOTATION in annotations:
        value = annotations[QOS_ANNOTATION].strip()
        return value if value in QOS_LEVELS else None
    levels = set()
    for key in (OPENFUYAO_QOS_ANNOTATION, OPENFUYAO_QOS_ANNOTATION_CAPITALISED):
        if key in annotations:
            value = annotations[key].strip()
            levels.add(value if value in QOS_LEVELS else None)
    if VOLCANO_QOS_ANNOTATION in annotations:
        value = annotations[VOLCANO_QOS_ANNOTATION].strip()
        if value in _VOLCANO_LEVELS:
            levels.add(_VOLCANO_LEVELS[value])
        else:
            try:
                levels.add("BE" if int(value) < 0 else "LS")
            except ValueError:
                levels.add(None)
    if len(levels) != 1:
        return None
    return levels.pop()


def is_best_effort(pod):
    """Whether a pod (a dict as the API returns it) is an offline BE pod: its QoS annotation
    says BE, or it asks for batch resources (what the mutating webhook turns BE pods into)."""
    metadata = pod.get("metadata") or {}
    if qos_level(metadata.get("annotations")) == "BE":
        return True
    for container in (pod.get("spec") or {}).get("containers") or []:
        requests = (container.get("resources") or {}).get("requests") or {}
        if any(name in requests for name in BATCH_RESOURCES):
            return True
    return False


def uses_batch_resources(pod):
    """Whether a pod asks for batch resources (a request or limit of ``kubernetes.io/batch-cpu`` or
    ``kubernetes.io/batch-memory`` in any container or init container): it cannot keep running
    on a node that no longer offers them."""
    spec = pod.get("spec") or {}
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        resources = container.get("resources") or {}
        for part in ("requests", "limits"):
            if any(name in (resources.get(part) or {}) for name in BATCH_RESOURCES):
                return True
    return False
