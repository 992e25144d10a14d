"""Admission webhook: the AdmissionReview envelope, operations, UPDATE, malformed input, errors."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
from tidal.manager.admission import review as review_module
from tidal.manager.admission.decision import Decision, DenialReason
from tidal.manager.admission.review import answer, decide, review

CANONICAL = "colocation.tidal.io/qos-level"
OPENFUYAO = "openfuyao.com/qos-level"
VOLCANO = "volcano.sh/qos-level"
UID = "705ab4f5-6393-11e8-b7cc-42010a800002"
POD_KIND = {"group": "", "version": "v1", "kind": "Pod"}
GUARANTEED = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


def pod(annotations: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "namespace": "default"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [{"name": "web", "image": "busybox", "resources": GUARANTEED}],
            **spec,
        },
    }


def admission_review(
    obj: Any = None, *, operation: str = "CREATE", **request: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": UID, "kind": POD_KIND, "operation": operation, "object": obj, **request},
    }


def patch_ops(response: dict[str, Any]) -> list[dict[str, Any]]:
    inner = response["response"]
    return json.loads(base64.b64decode(inner["patch"])) if "patch" in inner else []


# --- Envelope ---------------------------------------------------------------------------------


def test_allowed_mutation_is_a_well_formed_v1_review_with_a_base64_json_patch() -> None:
    response = review(admission_review(pod({CANONICAL: "LS"})))
    assert set(response) == {"apiVersion", "kind", "response"}
    assert (response["apiVersion"], response["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    inner = response["response"]
    assert set(inner) == {"uid", "allowed", "patchType", "patch"}
    assert (inner["uid"], inner["allowed"], inner["patchType"]) == (UID, True, "JSONPatch")
    assert {"op": "add", "path": "/spec/priorityClassName", "value": "tidal-ls"} in patch_ops(
        response
    )


def test_untouched_pod_gets_no_patch_fields_at_all() -> None:
    assert review(admission_review(pod())) == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": UID, "allowed": True},
    }


def test_denial_carries_code_message_and_reason() -> None:
    response = review(admission_review(pod({CANONICAL: "gold"})))
    assert response["response"] == {
        "uid": UID,
        "allowed": False,
        "status": {
            "code": 403,
            "message": 'annotation "colocation.tidal.io/qos-level": invalid value "gold"; allowed: HLS, LS, BE',
            "reason": "invalid-qos-annotation",
        },
    }


def test_warnings_are_returned_to_the_user() -> None:
    response = review(admission_review(pod({CANONICAL: "HLS"}, priorityClassName="gold")))
    assert response["response"]["warnings"] == [
        'priorityClassName "gold" replaced by "tidal-hls" for QoS level HLS'
    ]


def test_review_does_not_modify_the_request() -> None:
    body = admission_review(pod({CANONICAL: "BE"}, affinity={"nodeAffinity": {}}))
    before = copy.deepcopy(body)
    review(body)
    assert body == before


def test_every_denial_reason_has_a_label_and_a_code() -> None:
    assert {reason.value: reason.status_code for reason in DenialReason} == {
        "invalid-qos-annotation": 403,
        "hls-rule": 403,
        "ls-rule": 403,
        "be-rule": 403,
        "qos-level-change": 403,
        "malformed-request": 400,
        "internal-error": 500,
    }


# --- Operations and subresources ---------------------------------------------------------------


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_are_allowed_untouched(operation: str) -> None:
    request = admission_review(None, operation=operation, oldObject=pod({CANONICAL: "gold"}))[
        "request"
    ]
    assert decide(request) == Decision(allowed=True)


@pytest.mark.parametrize(
    "sub_resource", ["status", "binding", "eviction", "resize", "ephemeralcontainers"]
)
def test_subresource_requests_are_allowed_untouched(sub_resource: str) -> None:
    request = admission_review(
        pod({CANONICAL: "gold"}), operation="UPDATE", subResource=sub_resource, oldObject=pod()
    )["request"]
    assert decide(request) == Decision(allowed=True)


def test_dry_run_gets_the_same_answer() -> None:
    for obj in (pod({CANONICAL: "BE"}), pod({CANONICAL: "gold"}), pod()):
        assert review(admission_review(obj, dryRun=True)) == review(
            admission_review(obj, dryRun=False)
        )


def test_request_identified_by_resource_when_kind_is_absent() -> None:
    body = admission_review(pod({CANONICAL: "gold"}))
    del body["request"]["kind"]
    body["request"]["resource"] = {"group": "", "version": "v1", "resource": "pods"}
    assert review(body)["response"]["status"]["reason"] == "invalid-qos-annotation"


def test_validating_answer_has_the_same_verdict_without_patch_or_patch_warnings() -> None:
    body = admission_review(pod({CANONICAL: "BE"}, priorityClassName="gold"))
    response, decision = answer(body, with_patch=False)
    assert response["response"] == {"uid": UID, "allowed": True}
    assert decision == Decision(allowed=True)
    denied, decision = answer(admission_review(pod({CANONICAL: "gold"})), with_patch=False)
    assert (denied["response"]["allowed"], decision.reason) == (False, "invalid-qos-annotation")


# --- UPDATE of a pod ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        pytest.param({CANONICAL: "LS"}, {CANONICAL: "LS"}, None, id="unchanged"),
        pytest.param({CANONICAL: "LS"}, {CANONICAL: " LS "}, None, id="same-level-respelled"),
        pytest.param({CANONICAL: "LS"}, {VOLCANO: "HLS"}, None, id="alias-of-the-same-level"),
        pytest.param({VOLCANO: "LC"}, {CANONICAL: "HLS"}, None, id="volcano-lc-is-hls"),
        pytest.param({OPENFUYAO: "BE"}, {VOLCANO: "-5"}, None, id="negative-integer-is-be"),
        pytest.param(
            {CANONICAL: "gold"},
            {CANONICAL: "gold", "team": "a"},
            None,
            id="legacy-bad-annotation-kept",
        ),
        pytest.param(
            {CANONICAL: "HLS"},
            {CANONICAL: "BE"},
            "the QoS level of a pod cannot change (was HLS, now BE); delete and recreate the pod instead",
            id="hls-to-be",
        ),
        pytest.param(
            {VOLCANO: "HLS"},
            {CANONICAL: "HLS"},
            "the QoS level of a pod cannot change (was LS, now HLS); delete and recreate the pod instead",
            id="volcano-hls-is-ls",
        ),
        pytest.param(
            None,
            {CANONICAL: "BE"},
            "the QoS level of a pod cannot change (was none, now BE); delete and recreate the pod instead",
            id="added",
        ),
        pytest.param(
            {OPENFUYAO: "LS"},
            {},
            "the QoS level of a pod cannot change (was LS, now none); delete and recreate the pod instead",
            id="removed",
        ),
        pytest.param(
            {CANONICAL: "gold"},
            {CANONICAL: "LS"},
            "the QoS level of a pod cannot change (was invalid, now LS); delete and recreate the pod instead",
            id="legacy-bad-annotation-replaced",
        ),
    ],
)
def test_pod_update_may_not_change_the_qos_level(
    old: dict | None, new: dict | None, message: str | None
) -> None:
    request = admission_review(pod(new), operation="UPDATE", oldObject=pod(old))["request"]
    decision = decide(request)
    if message is None:
        assert decision == Decision(allowed=True)
    else:
        assert (decision.allowed, decision.reason, decision.message) == (
            False,
            "qos-level-change",
            message,
        )


def test_pod_update_to_an_invalid_annotation_is_denied_as_invalid() -> None:
    request = admission_review(
        pod({CANONICAL: "hls"}), operation="UPDATE", oldObject=pod({CANONICAL: "HLS"})
    )["request"]
    assert decide(request).reason == "invalid-qos-annotation"


def test_pod_update_is_never_mutated_nor_held_to_the_rules() -> None:
    be_pod = pod({CANONICAL: "BE"}, priorityClassName="gold")
    be_pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "garbage"}}
    request = admission_review(be_pod, operation="UPDATE", oldObject=copy.deepcopy(be_pod))[
        "request"
    ]
    assert decide(request) == Decision(allowed=True)


# --- Malformed input ----------------------------------------------------------------------------


def _without(mapping: dict, key: str) -> dict:
    return {k: v for k, v in mapping.items() if k != key}


VALID_BODY = admission_review(pod({CANONICAL: "LS"}))
VALID_REQUEST = VALID_BODY["request"]


@pytest.mark.parametrize(
    ("body", "message", "uid"),
    [
        (None, "AdmissionReview: expected an object, got null", ""),
        ([VALID_BODY], "AdmissionReview: expected an object, got an array", ""),
        ("{}", 'AdmissionReview: expected an object, got "{}"', ""),
        (7, "AdmissionReview: expected an object, got 7", ""),
        ({}, 'apiVersion: expected "admission.k8s.io/v1", got null', ""),
        (
            {**VALID_BODY, "apiVersion": "admission.k8s.io/v1beta1"},
            'apiVersion: expected "admission.k8s.io/v1", got "admission.k8s.io/v1beta1"',
            UID,
        ),
        ({**VALID_BODY, "kind": "Pod"}, 'kind: expected "AdmissionReview", got "Pod"', UID),
        (_without(VALID_BODY, "request"), "request: expected an object, got null", ""),
        ({**VALID_BODY, "request": "x"}, 'request: expected an object, got "x"', ""),
        (
            {**VALID_BODY, "request": _without(VALID_REQUEST, "uid")},
            "request.uid: expected a string, got null",
            "",
        ),
        (
            {**VALID_BODY, "request": {**VALID_REQUEST, "uid": 12}},
            "request.uid: expected a string, got 12",
            "",
        ),
        (
            {**VALID_BODY, "request": {**VALID_REQUEST, "operation": "PATCH"}},
            'request.operation: expected CREATE, UPDATE, DELETE or CONNECT, got "PATCH"',
            UID,
        ),
        (
            {**VALID_BODY, "request": _without(VALID_REQUEST, "operation")},
            "request.operation: expected CREATE, UPDATE, DELETE or CONNECT, got null",
            UID,
        ),
        (
            {**VALID_BODY, "request": {**VALID_REQUEST, "subResource": ["status"]}},
            "request.subResource: expected a string, got an array",
            UID,
        ),
        (
            {**VALID_BODY, "request": _without(VALID_REQUEST, "kind")},
            "request.kind: expected an object with a string kind, got null",
            UID,
        ),
        (
            {**VALID_BODY, "request": {**VALID_REQUEST, "kind": {"group": 1, "kind": "Pod"}}},
            "request.kind.group: expected a string, got 1",
            UID,
        ),
        (
            {**VALID_BODY, "request": _without(VALID_REQUEST, "object")},
            "request.object: expected an object, got null",
            UID,
        ),
        (
            {**VALID_BODY, "request": {**VALID_REQUEST, "operation": "UPDATE"}},
            "request.oldObject: expected an object, got null",
            UID,
        ),
        (
            admission_review({"metadata": []}),
            "metadata: expected an object, got an array",
            UID,
        ),
        (
            admission_review({"metadata": {"annotations": {CANONICAL: "LS"}}}),
            "spec: expected an object, got null",
            UID,
        ),
        (
            admission_review(
                {"metadata": {"annotations": {CANONICAL: "LS"}}, "spec": {"containers": [1]}}
            ),
            "spec.containers[0]: expected an object, got 1",
            UID,
        ),
        (
            admission_review(
                {
                    "metadata": {"annotations": {CANONICAL: "LS"}},
                    "spec": {"initContainers": [{"resources": {"limits": "1"}}]},
                }
            ),
            'spec.initContainers[0].resources.limits: expected an object, got "1"',
            UID,
        ),
        (
            admission_review(
                pod(
                    {CANONICAL: "BE"},
                    affinity={
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [[]]
                            }
                        }
                    },
                )
            ),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]: "
            "expected an object, got an array",
            UID,
        ),
        (
            admission_review(pod({CANONICAL: "HLS"}, tolerations={"key": "x"})),
            "spec.tolerations: expected an array, got an object",
            UID,
        ),
    ],
)
def test_malformed_request_is_denied_with_the_path_of_the_problem(
    body: Any, message: str, uid: str
) -> None:
    response, decision = answer(body)
    assert response == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": uid,
            "allowed": False,
            "status": {
                "code": 400,
                "message": f"malformed request: {message}",
                "reason": "malformed-request",
            },
        },
    }
    assert decision.reason == "malformed-request"


# --- Internal errors ----------------------------------------------------------------------------


def test_internal_error_still_answers_with_the_uid_and_code_500(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*_: Any, **__: Any) -> list[str]:
        raise RuntimeError("boom")

    monkeypatch.setattr(review_module, "violations", broken)
    response, decision = answer(admission_review(pod({CANONICAL: "LS"})))
    assert response["response"] == {
        "uid": UID,
        "allowed": False,
        "status": {
            "code": 500,
            "message": "internal error in tidal admission: RuntimeError: boom",
            "reason": "internal-error",
        },
    }
    assert decision.reason == "internal-error"


def test_internal_error_whose_message_cannot_be_rendered_still_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise ValueError("no")

    def broken(*_: Any, **__: Any) -> list[str]:
        raise Unprintable

    monkeypatch.setattr(review_module, "violations", broken)
    assert review(admission_review(pod({CANONICAL: "LS"})))["response"]["status"]["message"] == (
        "internal error in tidal admission: Unprintable"
    )


@pytest.mark.parametrize("map_name", ["requests", "limits"])
def test_a_null_quantity_is_a_malformed_request_not_a_half_rewritten_pod(map_name):
    # Found by hypothesis: read as absent, a null batch-memory left requests and limits unequal.
    resources = {"requests": {"cpu": "0"}, "limits": {"cpu": "0"}}
    resources[map_name]["kubernetes.io/batch-memory"] = None
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
        "object": {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "p", "annotations": {"colocation.tidal.io/qos-level": "BE"}},
                   "spec": {"containers": [], "initContainers": [
                       {"name": "web", "restartPolicy": "Always", "resources": resources}]}}}}
    response, decision = answer(body)
    assert decision.reason is DenialReason.MALFORMED_REQUEST and not response["response"]["allowed"]
    assert response["response"]["status"]["message"] == (
        f'malformed request: spec.initContainers[0].resources.{map_name}["kubernetes.io/batch-memory"]: '
        "expected a quantity string, got null")
