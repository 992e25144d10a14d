# SPDX-License-Identifier: Apache-2.0
"""An API server that refuses some requests with a 500, for the tests of what Tidal does then: a
validating webhook nobody serves (loopback port 1 refuses connections), with failurePolicy Fail,
so the API server answers every request it matches with "failed calling webhook"."""
from __future__ import annotations

import contextlib

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tidal_dev.lab.pytest_plugin import wait_for

NAME = "tidal-faults-refuse"
EVICTIONS_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods/eviction"]}
EVENTS_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["events"]}


def refusing(namespace: str, rule: dict) -> dict:
    """The webhook configuration refusing the requests `rule` matches in `namespace`."""
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": NAME},
            "webhooks": [{"name": "refuse.faults.tidal.io", "clientConfig": {"url": "https://127.0.0.1:1/refuse"},
                          "rules": [rule], "failurePolicy": "Fail", "sideEffects": "None",
                          "admissionReviewVersions": ["v1"], "timeoutSeconds": 2,
                          "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}]}


def answers_500(call) -> bool:
    """Whether the API server refuses `call` (a dry run) with the webhook's 500."""
    try:
        call()
    except ApiException as err:
        if err.status == 500 and "failed calling webhook" in (err.body or ""):
            return True
        raise
    return False


def remove(admission: client.AdmissionregistrationV1Api) -> None:
    """The webhook gone (already gone is fine)."""
    try:
        admission.delete_validating_webhook_configuration(NAME)
    except ApiException as err:
        if err.status != 404:
            raise


@contextlib.contextmanager
def events_refused(core: client.CoreV1Api, namespace: str = "default"):
    """Event creation in `namespace` refused (500) inside the block, once the API server does so."""
    admission = client.AdmissionregistrationV1Api(core.api_client)
    admission.create_validating_webhook_configuration(refusing(namespace, EVENTS_RULE))
    probe = {"metadata": {"generateName": "tidal-fault-probe-"}, "involvedObject": {"kind": "Node", "name": "probe"},
             "reason": "TidalFaultProbe", "message": "a dry run"}
    try:
        wait_for(lambda: answers_500(lambda: core.create_namespaced_event(namespace, probe, dry_run="All")),
                 30, f"the API server refusing Events in {namespace}")
        yield admission
    finally:
        remove(admission)
