# SPDX-License-Identifier: Apache-2.0
"""The ClusterRoles of the console: its own identity, and the two roles an admin binds users to.

- ``tidal-console``: what the console itself does once a caller was allowed — TokenReview and
  SubjectAccessReview, reading nodes/pods/NodeProfiles, patching node labels, writing the policy.
- ``tidal-console-viewer``: the read permissions the console checks (list NodeProfiles, get the
  ColocationPolicy; list nodes, pods and Events for the overview).
- ``tidal-console-editor``: viewer plus the write permissions (patch nodes, update the policy).
"""
from __future__ import annotations

from tidal.api import qos

__all__ = ["CONSOLE_ROLE", "EDITOR_ROLE", "VIEWER_ROLE", "cluster_roles"]

CONSOLE_ROLE = "tidal-console"
VIEWER_ROLE = "tidal-console-viewer"
EDITOR_ROLE = "tidal-console-editor"

_READ = [
    {"apiGroups": [qos.API_GROUP], "resources": ["nodeprofiles"], "verbs": ["get", "list"]},
    {"apiGroups": [qos.API_GROUP], "resources": ["colocationpolicies"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["nodes", "pods", "events"], "verbs": ["list"]},
]
_WRITE = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]},
    {"apiGroups": [qos.API_GROUP], "resources": ["colocationpolicies"], "verbs": ["update"]},
]


def _role(name: str, rules: list[dict]) -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "tidal"}}, "rules": rules}


def cluster_roles() -> list[dict]:
    return [
        _role(CONSOLE_ROLE, [
            {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
            {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["list"]},
            {"apiGroups": [qos.API_GROUP], "resources": ["nodeprofiles"], "verbs": ["get", "list"]},
            {"apiGroups": [qos.API_GROUP], "resources": ["colocationpolicies"],
             "verbs": ["get", "list", "create", "update"]},
        ]),
        _role(VIEWER_ROLE, _READ),
        _role(EDITOR_ROLE, _READ + _WRITE),
    ]
