# SPDX-License-Identifier: Apache-2.0
"""The webhook's entry point: an AdmissionReview (admission.k8s.io/v1) in, its answer out.

``review(body)`` takes the parsed JSON body of any shape and always returns a well-formed
AdmissionReview response: the request's ``uid`` (or "" when it has none), ``allowed``, a
``status`` with code, message and reason when denied, a base64 JSON Patch only when there are
operations, and ``warnings`` when there are some. It never raises: an internal error denies the
request with code 500 and the exception in the message.

What is decided (`decide`):

* Subresources (``request.subResource`` set: status, binding, eviction, resize, ...), DELETE
  and CONNECT: allowed untouched.
* Pod CREATE: a pod without a QoS annotation is allowed untouched. Otherwise the annotation
  must be valid (aliases resolved by ``tidal.api.qos.qos_level_of``), the pod must follow the rule
  of its level (``rules``), and it is mutated (``mutation``). A BE pod keeps its native requests
  when ``tidal.api.node_mode.oversell_opted_out`` says so (the ``colocation.tidal.io/oversell``
  annotation of the pod, else of its namespace, else the policy's
  ``overselling.beUsesBatchResources``), with a warning saying why; a bad value of that
  annotation is an "invalid-qos-annotation" denial naming it. A BE pod given batch requests while
  the policy's ``overselling.reportingMode`` is ``volcanoAnnotations`` (nodes then offer no batch
  resources) is allowed with a warning saying it will stay Pending and what to change.
* The pod's own egress limit, ``colocation.tidal.io/egress-bandwidth-mbps``, on a pod (or pod
  template) with a QoS level: a value that is not a positive number of Mbit/s
  (``tidal.api.qos.egress_bandwidth_limit_of``) is an "invalid-qos-annotation" denial naming the
  annotation and the allowed form, on CREATE and on an UPDATE that changes it (the agent reads
  it live). Pods without a QoS level are not looked at: the agent leaves them alone.
* Pod UPDATE: the QoS level may not change (old and new objects compared after resolving
  aliases); anything else is allowed without mutation, as most of a pod is immutable anyway.
  An update that leaves the QoS annotations as they were is always allowed, so a pod created
  before the webhook, even with a bad annotation, can still be labelled or have finalizers
  removed.
* Workloads (``workloads``) on CREATE and UPDATE: their pod template is validated like a pod,
  without mutation, messages prefixed with the template's path; a BE template that would ask for
  batch resources no node offers gets the pod's ``volcanoAnnotations`` warning (the pods' own go
  to the controller that creates them, not to the user). An UPDATE that leaves the
  template as it was is allowed, so that metadata-only updates (garbage collector, finalizers)
  of a workload admitted before a rule existed are never blocked.

``dryRun`` requests get exactly the same answer: the webhook has no side effects to skip.

The namespace's annotations and the policy come in as an `AdmissionContext` (the server's watch
caches); without one, `DEFAULT_CONTEXT`: no namespace annotation, the policy's defaults.

Everything here is pure and cheap: the object is read in place, never copied or re-serialised.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from tidal.api.node_mode import OVERSELL_ANNOTATION, oversell_opted_out
from tidal.api.policy import ReportingMode
from tidal.manager.admission.context import DEFAULT_CONTEXT, AdmissionContext
from tidal.manager.admission.decision import ALLOWED, RULE_REASON_BY_LEVEL, Decision, DenialReason
from tidal.manager.admission.mutation import batch_resources_annotation, pod_mutation
from tidal.manager.admission.podspec import containers_of
from tidal.manager.admission.rules import violations
from tidal.api.shape import (
    MalformedObjectError,
    describe,
    optional_object,
    optional_string,
)
from tidal.manager.admission.workloads import Target, pod_template_of, target_of
from tidal.api.qos import (
    COLOCATION_NODE_LABEL,
    QOS_ALIAS_ANNOTATIONS,
    QOS_ANNOTATION,
    AnnotationError,
    AnnotationValueError,
    EGRESS_BANDWIDTH_ANNOTATION,
    QoSLevel,
    egress_bandwidth_limit_of,
    qos_level_of,
)

__all__ = [
    "ADMISSION_API_VERSION", "ADMISSION_KIND", "AdmissionContext", "review", "answer", "decide",
    "namespace_of",
]

ADMISSION_API_VERSION = "admission.k8s.io/v1"
ADMISSION_KIND = "AdmissionReview"
_OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
_QOS_ANNOTATIONS = (QOS_ANNOTATION, *QOS_ALIAS_ANNOTATIONS)
#: annotations that are parsed: each must be a string
_PARSED_ANNOTATIONS = (*_QOS_ANNOTATIONS, EGRESS_BANDWIDTH_ANNOTATION)
_INVALID_LEVEL = "invalid"


# --- Reading the object -----------------------------------------------------------------------


def _annotations_of(obj: dict[str, Any], path: str) -> dict[str, Any] | None:
    """``metadata.annotations`` of ``obj``; the ones that are parsed must be strings."""
    metadata = optional_object(obj, "metadata", f"{path}metadata")
    if metadata is None:
        return None
    annotations = optional_object(metadata, "annotations", f"{path}metadata.annotations")
    if annotations:
        for key in _PARSED_ANNOTATIONS:
            if key in annotations and not isinstance(annotations[key], str):
                raise MalformedObjectError(
                    f"{path}metadata.annotations[{json.dumps(key)}]", "a string", annotations[key]
                )
    return annotations


def _qos_annotation_values(annotations: dict[str, Any] | None) -> tuple[Any, ...]:
    if not annotations:
        return (None,) * len(_QOS_ANNOTATIONS)
    return tuple(annotations.get(key) for key in _QOS_ANNOTATIONS)


def _egress_problem(annotations: dict[str, Any] | None) -> str | None:
    """Why the pod's own egress limit is invalid, None when it is fine or absent."""
    try:
        egress_bandwidth_limit_of(annotations)
    except AnnotationValueError as error:
        return str(error)
    return None


# --- Decisions per kind of request -------------------------------------------------------------


def _be_native_reason(
    annotations: dict[str, Any] | None, context: AdmissionContext, path: str
) -> str | None:
    """Why a BE pod (or template) keeps its native requests; None when it uses batch resources.

    Raises:
        AnnotationError: ``colocation.tidal.io/oversell`` (on the pod, else its namespace) is
            neither ``true`` nor ``false``; the message says where it is.
        MalformedObjectError: the pod's annotation is not a string.
    """
    raw = (annotations or {}).get(OVERSELL_ANNOTATION)
    if raw is not None and not isinstance(raw, str):
        raise MalformedObjectError(
            f"{path}metadata.annotations[{json.dumps(OVERSELL_ANNOTATION)}]", "a string", raw
        )
    try:
        native, why = oversell_opted_out(
            annotations, context.namespace_annotations,
            context.overselling.be_uses_batch_resources,
        )
    except AnnotationValueError as error:
        where = "pod" if raw is not None else f"namespace {context.namespace}".rstrip()
        raise AnnotationError(f"{where}: {error}") from error
    return why if native else None


#: A BE pod moved to batch resources while the master publishes none (the policy's
#: ``overselling.reportingMode``): no node offers them, so the pod would wait unexplained.
VOLCANO_ANNOTATIONS_WARNING = (
    "BE pod asks for kubernetes.io/batch-cpu/batch-memory, but the ColocationPolicy's "
    "overselling.reportingMode is volcanoAnnotations: nodes publish Volcano's "
    "volcano.sh/oversubscription-cpu/memory annotations instead, so no node offers these resources and "
    f"the pod stays Pending; keep its native requests ({OVERSELL_ANNOTATION}=false on the pod or its "
    "namespace, or overselling.beUsesBatchResources=false), or set reportingMode to extendedResources"
)


def _asks_for_batch_nobody_offers(level: QoSLevel, native_reason: str | None, containers,
                                  context: AdmissionContext) -> bool:
    """A BE pod (or template) that ends up asking for batch resources while the policy's
    reporting mode publishes none (`VOLCANO_ANNOTATIONS_WARNING`)."""
    return (level is QoSLevel.BE and native_reason is None
            and context.overselling.reporting_mode == ReportingMode.VOLCANO_ANNOTATIONS
            and batch_resources_annotation(containers) is not None)


def _native_warning(why: str, anywhere: bool) -> str:
    where = (
        "any node, preferring colocation and oversold nodes (overselling.beFallbackToNative=true)"
        if anywhere
        else f"nodes labelled {COLOCATION_NODE_LABEL}=true only"
    )
    return (
        f"BE pod keeps its native cpu/memory requests ({why}): no oversold batch resources; "
        f"it runs on {where}"
    )


def _pod_create(pod: dict[str, Any], context: AdmissionContext) -> Decision:
    annotations = _annotations_of(pod, "")
    try:
        level = qos_level_of(annotations)
    except AnnotationError as error:
        return Decision.deny(DenialReason.INVALID_QOS_ANNOTATION, str(error))
    if level is None:
        return ALLOWED
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise MalformedObjectError("spec", "an object", spec)
    native_reason = None
    if level is QoSLevel.BE:
        try:
            native_reason = _be_native_reason(annotations, context, "")
        except AnnotationError as error:
            return Decision.deny(DenialReason.INVALID_QOS_ANNOTATION, str(error))
    egress_problem = _egress_problem(annotations)
    if egress_problem:
        return Decision.deny(DenialReason.INVALID_QOS_ANNOTATION, egress_problem)
    containers = containers_of(spec, "spec")
    problems = violations(spec, level, "spec", containers, native_reason)
    if problems:
        return Decision.deny(RULE_REASON_BY_LEVEL[level], "; ".join(problems))
    anywhere = native_reason is not None and context.overselling.be_fallback_to_native
    mutation = pod_mutation(spec, level, containers, annotations,
                            be_native=native_reason is not None, be_anywhere=anywhere)
    warnings = mutation.warnings
    if native_reason is not None:
        warnings += (_native_warning(native_reason, anywhere),)
    elif _asks_for_batch_nobody_offers(level, native_reason, containers, context):
        warnings += (VOLCANO_ANNOTATIONS_WARNING,)
    if not mutation.ops and not warnings:
        return ALLOWED
    return Decision.allow(mutation.ops, warnings)


def _level_name(level: QoSLevel | None) -> str:
    return "none" if level is None else level.value


def _pod_update(pod: dict[str, Any], old_pod: Any) -> Decision:
    if not isinstance(old_pod, dict):
        raise MalformedObjectError("request.oldObject", "an object", old_pod)
    annotations = _annotations_of(pod, "")
    old_annotations = _annotations_of(old_pod, "oldObject.")
    if (annotations or {}).get(EGRESS_BANDWIDTH_ANNOTATION) != (old_annotations or {}).get(
        EGRESS_BANDWIDTH_ANNOTATION
    ):
        try:
            level_now = qos_level_of(annotations)
        except AnnotationError:
            level_now = None  # judged below when the QoS annotations changed too
        egress_problem = _egress_problem(annotations) if level_now is not None else None
        if egress_problem:
            return Decision.deny(DenialReason.INVALID_QOS_ANNOTATION, egress_problem)
    if _qos_annotation_values(annotations) == _qos_annotation_values(old_annotations):
        return ALLOWED
    try:
        level = qos_level_of(annotations)
    except AnnotationError as error:
        return Decision.deny(DenialReason.INVALID_QOS_ANNOTATION, str(error))
    try:
        old_level_name = _level_name(qos_level_of(old_annotations))
    except AnnotationError:
        old_level_name = _INVALID_LEVEL  # an annotation from before the webhook: any change is one
    if old_level_name == _level_name(level):
        return ALLOWED
    return Decision.deny(
        DenialReason.QOS_LEVEL_CHANGE,
        f"the QoS level of a pod cannot change (was {old_level_name}, now {_level_name(level)}); "
        f"delete and recreate the pod instead",
    )


def _workload(
    obj: dict[str, Any], old_obj: Any, operation: str, target: Target, context: AdmissionContext
) -> Decision:
    template = pod_template_of(obj, target)
    if template is None:
        return ALLOWED
    if operation == "UPDATE" and isinstance(old_obj, dict):
        try:
            if pod_template_of(old_obj, target) == template:
                return ALLOWED
        except MalformedObjectError:
            pass  # the old object is not ours to judge; validate the new template
    prefix = target.template_path_text
    annotations = _annotations_of(template, f"{prefix}.")
    try:
        level = qos_level_of(annotations)
        native_reason = (
            _be_native_reason(annotations, context, f"{prefix}.")
            if level is QoSLevel.BE else None
        )
    except AnnotationError as error:
        return Decision.deny(DenialReason.INVALID_QOS_ANNOTATION, f"{prefix}: {error}")
    if level is None:
        return ALLOWED
    egress_problem = _egress_problem(annotations)
    if egress_problem:
        return Decision.deny(DenialReason.INVALID_QOS_ANNOTATION, f"{prefix}: {egress_problem}")
    spec = optional_object(template, "spec", f"{prefix}.spec") or {}
    containers = containers_of(spec, f"{prefix}.spec")
    problems = violations(spec, level, f"{prefix}.spec", containers, native_reason)
    if problems:
        return Decision.deny(
            RULE_REASON_BY_LEVEL[level], "; ".join(f"{prefix}: {problem}" for problem in problems)
        )
    if _asks_for_batch_nobody_offers(level, native_reason, containers, context):
        # the pods' own warnings go to the controller that creates them, not to the user
        return Decision.allow(warnings=(f"{prefix}: {VOLCANO_ANNOTATIONS_WARNING}",))
    return ALLOWED


def _decide(request: Any, context: AdmissionContext) -> Decision:
    if not isinstance(request, dict):
        raise MalformedObjectError("request", "an object", request)
    uid = request.get("uid")
    if not isinstance(uid, str):
        raise MalformedObjectError("request.uid", "a string", uid)
    if optional_string(request, "subResource", "request.subResource"):
        return ALLOWED
    operation = request.get("operation")
    if operation not in _OPERATIONS:
        raise MalformedObjectError(
            "request.operation", "CREATE, UPDATE, DELETE or CONNECT", operation
        )
    if operation in ("DELETE", "CONNECT"):
        return ALLOWED
    target = target_of(request)
    if target is None:
        return ALLOWED
    obj = request.get("object")
    if not isinstance(obj, dict):
        raise MalformedObjectError("request.object", "an object", obj)
    if not target.is_pod:
        return _workload(obj, request.get("oldObject"), operation, target, context)
    if operation == "CREATE":
        return _pod_create(obj, context)
    return _pod_update(obj, request.get("oldObject"))


def decide(request: Any, context: AdmissionContext = DEFAULT_CONTEXT) -> Decision:
    """The decision for one ``AdmissionReview.request`` in ``context`` (the namespace's
    annotations and the policy).

    A request of the wrong shape is denied as "malformed-request" with the path of the problem.
    Pure: ``request`` is only read.

    Raises:
        Exception: only on a bug; `review` turns it into an "internal-error" denial.
    """
    try:
        return _decide(request, context)
    except MalformedObjectError as error:
        return Decision.deny(DenialReason.MALFORMED_REQUEST, f"malformed request: {error}")


# --- The AdmissionReview envelope -------------------------------------------------------------


def _decide_review(admission_review: Any, context: AdmissionContext) -> Decision:
    if not isinstance(admission_review, dict):
        message = f"AdmissionReview: expected an object, got {describe(admission_review)}"
        return Decision.deny(DenialReason.MALFORMED_REQUEST, f"malformed request: {message}")
    for field, expected in (("apiVersion", ADMISSION_API_VERSION), ("kind", ADMISSION_KIND)):
        value = admission_review.get(field)
        if value != expected:
            message = f"{field}: expected {json.dumps(expected)}, got {describe(value)}"
            return Decision.deny(DenialReason.MALFORMED_REQUEST, f"malformed request: {message}")
    return decide(admission_review.get("request"), context)


def _is_workload(admission_review: Any) -> bool:
    """Whether the review is of a workload carrying a pod template (validated, never mutated)."""
    request = admission_review.get("request") if isinstance(admission_review, dict) else None
    target = target_of(request) if isinstance(request, dict) else None
    return target is not None and not target.is_pod


def _uid_of(admission_review: Any) -> str:
    if isinstance(admission_review, dict):
        request = admission_review.get("request")
        if isinstance(request, dict) and isinstance(request.get("uid"), str):
            return request["uid"]
    return ""


def _internal_error(error: Exception) -> Decision:
    try:
        detail = f"{type(error).__name__}: {error}"
    except Exception:  # noqa: BLE001 - an exception whose __str__ fails still gets an answer
        detail = type(error).__name__
    return Decision.deny(
        DenialReason.INTERNAL_ERROR, f"internal error in tidal admission: {detail}"
    )


def _encode_patch(patch: tuple[dict[str, Any], ...]) -> str:
    return base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode("ascii")


def _response(uid: str, decision: Decision) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed:
        reason = decision.reason or DenialReason.INTERNAL_ERROR
        response["status"] = {
            "code": decision.status_code,
            "message": decision.message,
            "reason": reason.value,
        }
    elif decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = _encode_patch(decision.patch)
    if decision.warnings:
        response["warnings"] = list(decision.warnings)
    return {"apiVersion": ADMISSION_API_VERSION, "kind": ADMISSION_KIND, "response": response}


def namespace_of(admission_review: Any) -> str:
    """``request.namespace`` of a review of any shape ("" when there is none), for the caller
    that looks up the `AdmissionContext`."""
    if isinstance(admission_review, dict):
        request = admission_review.get("request")
        if isinstance(request, dict) and isinstance(request.get("namespace"), str):
            return request["namespace"]
    return ""


def answer(
    admission_review: Any, *, with_patch: bool = True,
    context: AdmissionContext = DEFAULT_CONTEXT,
) -> tuple[dict[str, Any], Decision]:
    """The AdmissionReview response and the `Decision` behind it (for metrics and logs).

    Args:
        admission_review: the parsed JSON body, of any shape.
        with_patch: False for the validating webhook: same verdict, no patch, and none of a
            pod's warnings (the mutating webhook gave them, with its patch); a workload's warnings
            (its template, which only this webhook sees) are kept.
        context: the namespace's annotations and the policy (`DEFAULT_CONTEXT`: none, defaults).

    Never raises (see the module docstring).
    """
    try:
        uid = _uid_of(admission_review)
    except Exception:  # noqa: BLE001 - not even the uid is readable: answer anyway
        uid = ""
    try:
        decision = _decide_review(admission_review, context)
        if (not with_patch and decision.allowed and (decision.patch or decision.warnings)
                and not _is_workload(admission_review)):
            decision = ALLOWED  # a workload's warnings are about the object: only this webhook sees it
        return _response(uid, decision), decision
    except Exception as error:  # noqa: BLE001 - the contract is an answer, never an exception
        decision = _internal_error(error)
        return _response(uid, decision), decision


def review(admission_review: Any, context: AdmissionContext = DEFAULT_CONTEXT) -> dict[str, Any]:
    """The AdmissionReview (admission.k8s.io/v1) response to ``admission_review``; never raises.

    ``response.uid`` echoes ``request.uid`` when it is a string, else "". ``allowed`` is a bool;
    a denial carries ``status: {code, message, reason}`` (reason: a `DenialReason` value); an
    allowed mutation carries ``patchType: JSONPatch`` and ``patch``, the base64 of a JSON array
    of RFC 6902 operations, only when there are operations.
    """
    return answer(admission_review, context=context)[0]
