"""Admission webhook: a pod's own egress limit (colocation.tidal.io/egress-bandwidth-mbps) must be a
positive number of Mbit/s on pods and pod templates with a QoS level; the denial names the
annotation and the allowed form."""

from __future__ import annotations

from typing import Any

import pytest
from tidal.manager.admission.decision import DenialReason
from tidal.manager.admission.review import decide

QOS = "colocation.tidal.io/qos-level"
EGRESS = "colocation.tidal.io/egress-bandwidth-mbps"
ALLOWED = "allowed: a positive number of Mbit/s up to 1000000, e.g. 100 or 2.5"
GUARANTEED = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
POD_KIND = {"group": "", "version": "v1", "kind": "Pod"}


def pod(annotations: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "annotations": annotations},
        "spec": {"containers": [{"name": "web", "image": "busybox", "resources": GUARANTEED}]},
    }


def pod_request(obj: dict[str, Any], operation: str = "CREATE", old: dict | None = None) -> dict:
    request = {"uid": "u", "kind": POD_KIND, "operation": operation, "object": obj}
    if old is not None:
        request["oldObject"] = old
    return request


def deployment_request(annotations: dict[str, Any]) -> dict:
    template = {"metadata": {"labels": {"app": "w"}, "annotations": annotations},
                "spec": {"containers": [{"name": "web", "resources": GUARANTEED}]}}
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"},
           "spec": {"selector": {"matchLabels": {"app": "w"}}, "template": template}}
    return {"uid": "u", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "operation": "CREATE", "object": obj}


def denial(value: str, hint: str = "") -> str:
    return f'annotation "{EGRESS}": invalid value "{value}"; {ALLOWED}{hint}'


@pytest.mark.parametrize(("level", "value", "message"), [
    ("LS", "100", None),
    ("BE", "2.5", None),
    ("HLS", " 10 ", None),
    ("LS", "0", denial("0")),
    ("BE", "-1", denial("-1")),
    ("BE", "fast", denial("fast")),
    ("HLS", "100Mbps", denial("100Mbps", " (the unit is Mbit/s, write the number alone)")),
    ("LS", "1e3", denial("1e3")),
    (None, "fast", None),  # no QoS level: Tidal leaves the pod alone
])
def test_pod_creation(level, value, message) -> None:
    annotations = {EGRESS: value} if level is None else {QOS: level, EGRESS: value}
    decision = decide(pod_request(pod(annotations)))
    if message is None:
        assert decision.allowed, decision.message
    else:
        assert (decision.allowed, decision.reason, decision.message) == (
            False, DenialReason.INVALID_QOS_ANNOTATION, message)


@pytest.mark.parametrize(("old", "new", "message"), [
    ("100", "fast", denial("fast")),     # changed to a bad value
    (None, "0", denial("0")),            # added with a bad value
    ("100", "50", None),                 # changed to a good value
    ("fast", "fast", None),              # unchanged (a pod from before the webhook): allowed
    ("fast", None, None),                # removed
])
def test_pod_update_that_changes_the_limit(old, new, message) -> None:
    def with_value(value):
        return pod({QOS: "BE"} if value is None else {QOS: "BE", EGRESS: value})
    decision = decide(pod_request(with_value(new), "UPDATE", with_value(old)))
    if message is None:
        assert decision.allowed, decision.message
    else:
        assert (decision.allowed, decision.reason, decision.message) == (
            False, DenialReason.INVALID_QOS_ANNOTATION, message)


def test_pod_template_with_a_bad_limit_is_refused_with_its_path() -> None:
    decision = decide(deployment_request({QOS: "LS", EGRESS: "10M"}))
    assert (decision.allowed, decision.reason, decision.message) == (
        False, DenialReason.INVALID_QOS_ANNOTATION,
        "spec.template: " + denial("10M", " (the unit is Mbit/s, write the number alone)"))
    assert decide(deployment_request({QOS: "LS", EGRESS: "10"})).allowed


def test_a_non_string_limit_is_a_malformed_request() -> None:
    decision = decide(pod_request(pod({QOS: "LS", EGRESS: 100})))
    assert (decision.allowed, decision.reason) == (False, DenialReason.MALFORMED_REQUEST)
    assert EGRESS in decision.message
