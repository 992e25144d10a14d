# SPDX-License-Identifier: Apache-2.0
"""The webhook configurations that register tidal-manager with the API server.

Failure policy: **Ignore**, for both webhooks. The QoS level is an annotation, and
objectSelector can only match labels, so the webhooks must see every pod outside the
excluded namespaces. With `Fail`, an outage of tidal-manager would stop every pod
creation in the cluster (Deployments could not scale, Jobs could not start). With
`Ignore`, a pod created during an outage is stored as written: a BE pod keeps its
native requests and the default scheduler, i.e. it runs as an ordinary pod that is
fully accounted for — it uses no oversold capacity, so online latency is not put at
risk; it only misses colocation until it is recreated. A lab test shows exactly this.
"""
from __future__ import annotations

import base64
from typing import Any

from tidal.api import qos

WEBHOOK_NAME = "tidal-admission"
MUTATE_PATH = "/mutate"
VALIDATE_PATH = "/validate"
TIMEOUT_SECONDS = 5
EXCLUDED_NAMESPACES = ("kube-system", qos.NAMESPACE)
FAILURE_POLICY = "Ignore"

WORKLOAD_RULES = [
    {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
     "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"], "scope": "Namespaced"},
    {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
     "resources": ["jobs", "cronjobs"], "scope": "Namespaced"},
]


def client_config(ca_bundle_pem: bytes, path: str, *, url: str | None = None,
                  service_name: str = "tidal-manager", service_namespace: str = qos.NAMESPACE,
                  service_port: int = 443) -> dict[str, Any]:
    """Where the API server calls: a Service in the cluster, or a URL (the lab)."""
    config: dict[str, Any] = {"caBundle": base64.b64encode(ca_bundle_pem).decode()}
    if url:
        config["url"] = url.rstrip("/") + path
    else:
        config["service"] = {"name": service_name, "namespace": service_namespace,
                             "path": path, "port": service_port}
    return config


def _common(name: str, client: dict[str, Any], rules: list[dict]) -> dict[str, Any]:
    return {
        "name": name,
        "clientConfig": client,
        "rules": rules,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "timeoutSeconds": TIMEOUT_SECONDS,
        "failurePolicy": FAILURE_POLICY,
        "matchPolicy": "Equivalent",
        "namespaceSelector": {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "NotIn",
            "values": list(EXCLUDED_NAMESPACES)}]},
    }


def webhook_configurations(ca_bundle_pem: bytes, *, url: str | None = None,
                           **service: Any) -> list[dict[str, Any]]:
    """The MutatingWebhookConfiguration (pods, CREATE) and the ValidatingWebhookConfiguration
    (pods CREATE/UPDATE and the workloads that carry pod templates)."""
    pods = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
             "resources": ["pods"], "scope": "Namespaced"}]
    mutating = _common("pods.mutate.colocation.tidal.io",
                       client_config(ca_bundle_pem, MUTATE_PATH, url=url, **service), pods)
    # Re-run after other mutating webhooks changed the pod, so Tidal's fields win.
    mutating["reinvocationPolicy"] = "IfNeeded"
    validating = _common(
        "pods.validate.colocation.tidal.io",
        client_config(ca_bundle_pem, VALIDATE_PATH, url=url, **service),
        [{**pods[0], "operations": ["CREATE", "UPDATE"]}, *WORKLOAD_RULES])
    labels = {"app.kubernetes.io/name": "tidal-manager", "app.kubernetes.io/part-of": "tidal"}
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "metadata": {"name": WEBHOOK_NAME, "labels": labels}, "webhooks": [mutating]},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": WEBHOOK_NAME, "labels": labels}, "webhooks": [validating]},
    ]
