"""Admission webhook and the node-mode matrix (issue 19): where pods of each level may and would
rather run, and BE pods that keep their native requests (``colocation.tidal.io/oversell``).

Every mutation case applies the patch with ``jsonpatch`` and reviews the patched pod again in the
same context: webhook reinvocation must find nothing left to do.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest
from tidal.api.policy import ColocationPolicy
from tidal.manager.admission.context import AdmissionContext
from tidal.manager.admission.review import answer, decide, namespace_of, review

QOS = "colocation.tidal.io/qos-level"
OVERSELL = "colocation.tidal.io/oversell"
BATCH_RESOURCES = "colocation.tidal.io/batch-resources"
BATCH_CPU = "kubernetes.io/batch-cpu"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"

COLOCATION = {"key": "colocation.tidal.io/colocation", "operator": "In", "values": ["true"]}
OVERSOLD = {"key": "colocation.tidal.io/oversubscription", "operator": "In", "values": ["true"]}
NOT_OVERSOLD = {**OVERSOLD, "operator": "NotIn"}
ZONE = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}

PREFER_OVERSOLD = {"weight": 50, "preference": {"matchExpressions": [OVERSOLD]}}
PREFER_COLOCATION = {"weight": 50, "preference": {"matchExpressions": [COLOCATION]}}
PREFER_NOT_OVERSOLD = {"weight": 10, "preference": {"matchExpressions": [NOT_OVERSOLD]}}
USER_PREFERENCE = {"weight": 7, "preference": {"matchExpressions": [ZONE]}}

NATIVE = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
GUARANTEED = {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}


def policy(be_uses_batch_resources: bool = True, be_fallback_to_native: bool = False) -> ColocationPolicy:
    return ColocationPolicy.from_spec({"overselling": {
        "beUsesBatchResources": be_uses_batch_resources, "beFallbackToNative": be_fallback_to_native}})


def context(namespace_value: str | None = None, **policy_fields: bool) -> AdmissionContext:
    annotations = {} if namespace_value is None else {OVERSELL: namespace_value}
    return AdmissionContext(annotations, policy(**policy_fields), namespace="team-a")


def pod(level: str, resources: dict | None = None, oversell: str | None = None,
        **spec: Any) -> dict[str, Any]:
    annotations = {QOS: level}
    if oversell is not None:
        annotations[OVERSELL] = oversell
    container = {"name": "web", "image": "busybox"}
    if resources is not None:
        container["resources"] = copy.deepcopy(resources)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "team-a", "annotations": annotations},
            "spec": {"containers": [container], **spec}}


def create_review(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "namespace": "team-a", "operation": "CREATE", "object": obj}}


def ops_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    inner = response["response"]
    assert inner["allowed"] is True, inner
    return json.loads(base64.b64decode(inner["patch"])) if "patch" in inner else []


def mutate(obj: dict[str, Any], ctx: AdmissionContext) -> tuple[dict[str, Any], list[dict], list[str]]:
    """(patched pod, operations, warnings); asserts the patch applies and is idempotent."""
    response = review(create_review(obj), ctx)
    ops = ops_of(response)
    patched = jsonpatch.apply_patch(obj, ops)
    assert ops_of(review(create_review(patched), ctx)) == [], "reinvocation must find nothing to change"
    return patched, ops, response["response"].get("warnings", [])


# --- Which BE pods keep their native requests -------------------------------------------------


@pytest.mark.parametrize(
    ("pod_value", "namespace_value", "policy_default", "keeps_native", "why"),
    [
        pytest.param(None, None, True, False, None, id="policy-default-batch"),
        pytest.param(None, None, False, True,
                     "policy overselling.beUsesBatchResources=false", id="policy-default-native"),
        pytest.param("false", None, True, True,
                     f"pod annotation {OVERSELL}=false", id="pod-opts-out"),
        pytest.param(None, "false", True, True,
                     f"namespace annotation {OVERSELL}=false", id="namespace-opts-out"),
        pytest.param("true", "false", True, False, None, id="pod-wins-over-namespace"),
        pytest.param("true", None, False, False, None, id="pod-opts-in-against-the-policy"),
        pytest.param(None, "true", False, False, None, id="namespace-opts-in-against-the-policy"),
        pytest.param(" false ", None, True, True,
                     f"pod annotation {OVERSELL}=false", id="value-is-stripped"),
    ],
)
def test_be_pod_keeps_native_requests_when_the_pod_its_namespace_or_the_policy_says_so(
    pod_value: str | None, namespace_value: str | None, policy_default: bool,
    keeps_native: bool, why: str | None,
) -> None:
    ctx = context(namespace_value, be_uses_batch_resources=policy_default)
    patched, _, warnings = mutate(pod("BE", NATIVE, oversell=pod_value), ctx)
    resources = patched["spec"]["containers"][0]["resources"]
    annotations = patched["metadata"]["annotations"]
    required = patched["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    if keeps_native:
        assert resources == NATIVE
        assert BATCH_RESOURCES not in annotations
        assert required == [{"matchExpressions": [COLOCATION]}]
        assert warnings == [
            f"BE pod keeps its native cpu/memory requests ({why}): no oversold batch resources; "
            "it runs on nodes labelled colocation.tidal.io/colocation=true only"]
    else:
        assert resources == {"requests": {BATCH_CPU: "1000", "kubernetes.io/batch-memory": str(1 << 30)},
                             "limits": {BATCH_CPU: "1000", "kubernetes.io/batch-memory": str(1 << 30)}}
        assert BATCH_RESOURCES in annotations
        assert required == [{"matchExpressions": [OVERSOLD]}]
        assert warnings == []
    # the level decides scheduling either way
    assert (patched["spec"]["schedulerName"], patched["spec"]["priorityClassName"],
            patched["spec"]["priority"], patched["spec"]["preemptionPolicy"]) == \
        ("volcano", "tidal-be", -100, "Never")


VOLCANO_WARNING = (
    "BE pod asks for kubernetes.io/batch-cpu/batch-memory, but the ColocationPolicy's "
    "overselling.reportingMode is volcanoAnnotations: nodes publish Volcano's "
    "volcano.sh/oversubscription-cpu/memory annotations instead, so no node offers these resources and "
    f"the pod stays Pending; keep its native requests ({OVERSELL}=false on the pod or its "
    "namespace, or overselling.beUsesBatchResources=false), or set reportingMode to extendedResources")


@pytest.mark.parametrize(
    ("mode", "level", "resources", "oversell", "warned"),
    [
        pytest.param("volcanoAnnotations", "BE", NATIVE, None, True, id="batch-requests-nobody-offers"),
        pytest.param("volcanoAnnotations", "BE",
                     {"requests": {BATCH_CPU: "500"}, "limits": {BATCH_CPU: "500"}}, None, True,
                     id="batch-requests-written-by-hand"),
        pytest.param("volcanoAnnotations", "BE", None, None, False, id="no-requests-fits-anywhere"),
        pytest.param("volcanoAnnotations", "BE", NATIVE, "false", False, id="keeps-native-requests"),
        pytest.param("volcanoAnnotations", "LS", NATIVE, None, False, id="online-pod"),
        pytest.param("extendedResources", "BE", NATIVE, None, False, id="batch-resources-published"),
    ],
)
def test_a_be_pod_given_batch_requests_no_node_offers_is_warned(
    mode: str, level: str, resources: dict | None, oversell: str | None, warned: bool,
) -> None:
    """In the volcanoAnnotations reporting mode the master publishes no kubernetes.io/batch-*
    (docs/overselling.md): a BE pod asking for them would stay Pending with no word why."""
    ctx = AdmissionContext({}, ColocationPolicy.from_spec({"overselling": {"reportingMode": mode}}),
                           namespace="team-a")
    _, _, warnings = mutate(pod(level, resources, oversell=oversell), ctx)
    assert (VOLCANO_WARNING in warnings) is warned, warnings


@pytest.mark.parametrize(
    ("pod_value", "namespace_value", "where"),
    [
        pytest.param("no", None, "pod", id="pod"),
        pytest.param("False", "false", "pod", id="pod-checked-before-a-valid-namespace"),
        pytest.param(None, "maybe", "namespace team-a", id="namespace"),
        pytest.param("", None, "pod", id="empty"),
    ],
)
def test_a_bad_oversell_annotation_is_denied_naming_it_and_the_allowed_values(
    pod_value: str | None, namespace_value: str | None, where: str,
) -> None:
    bad = pod_value if pod_value is not None else namespace_value
    response = review(create_review(pod("BE", NATIVE, oversell=pod_value)), context(namespace_value))
    inner = response["response"]
    assert inner["allowed"] is False
    assert inner["status"] == {
        "code": 403, "reason": "invalid-qos-annotation",
        "message": f'{where}: annotation "{OVERSELL}": invalid value {json.dumps(bad)}; allowed: true, false'}


def test_the_oversell_annotation_is_not_read_on_online_pods() -> None:
    """It only says how BE pods use resources: on an LS pod, or in the namespace of one, a bad
    value changes nothing."""
    ls = pod("LS", NATIVE, oversell="bogus")
    _, _, warnings = mutate(ls, context("bogus"))
    assert warnings == []


def test_a_non_string_oversell_annotation_is_a_malformed_request() -> None:
    obj = pod("BE", NATIVE)
    obj["metadata"]["annotations"][OVERSELL] = False
    inner = review(create_review(obj))["response"]
    assert (inner["allowed"], inner["status"]["reason"]) == (False, "malformed-request")
    assert f'metadata.annotations["{OVERSELL}"]' in inner["status"]["message"]


# --- The BE rule for pods that keep native requests --------------------------------------------


@pytest.mark.parametrize(
    ("resources", "problems"),
    [
        pytest.param(NATIVE, [], id="native-requests-allowed"),
        pytest.param(None, [], id="no-resources"),
        pytest.param(
            {"requests": {"cpu": "1", BATCH_CPU: "1000"}, "limits": {BATCH_CPU: "1000"}},
            [f'container "web": BE keeping native requests (pod annotation {OVERSELL}=false) '
             f"requires requests.{BATCH_CPU} to be unset: the pod runs without oversold resources, "
             "use requests.cpu (got 1000)",
             f'container "web": BE keeping native requests (pod annotation {OVERSELL}=false) '
             f"requires limits.{BATCH_CPU} to be unset: the pod runs without oversold resources, "
             "use limits.cpu (got 1000)"],
            id="batch-resources-refused",
        ),
        pytest.param(
            {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}},
            ['container "web": BE requires requests.memory <= limits.memory (got 2Gi / 1Gi)'],
            id="request-above-limit",
        ),
        pytest.param(
            {"requests": {"cpu": "1.5.5"}},
            ['container "web": requests.cpu: "1.5.5" is not a quantity'],
            id="unparsable-quantity",
        ),
    ],
)
def test_be_pod_keeping_native_requests_follows_the_native_rule(
    resources: dict | None, problems: list[str]
) -> None:
    inner = review(create_review(pod("BE", resources, oversell="false")), context())["response"]
    if not problems:
        assert inner["allowed"] is True, inner
        return
    assert (inner["allowed"], inner["status"]["reason"]) == (False, "be-rule")
    got = inner["status"]["message"].split("; ")
    assert len(got) == len(problems)
    for message, expected in zip(got, problems, strict=True):
        assert message.startswith(expected), (message, expected)


def test_be_pod_keeping_native_requests_may_set_pod_level_resources() -> None:
    """Nothing is rewritten, so the pod-level cpu/memory a batch BE pod may not have are fine."""
    obj = pod("BE", NATIVE, oversell="false")
    obj["spec"]["resources"] = {"limits": {"cpu": "2", "memory": "2Gi"}}
    patched, _, _ = mutate(obj, context())
    assert patched["spec"]["resources"] == {"limits": {"cpu": "2", "memory": "2Gi"}}
    batch = pod("BE", NATIVE)
    batch["spec"]["resources"] = {"limits": {"cpu": "2"}}
    assert review(create_review(batch), context())["response"]["status"]["reason"] == "be-rule"


# --- Where pods may run, and would rather run --------------------------------------------------


@pytest.mark.parametrize(
    ("level", "resources", "oversell", "ctx", "expected_affinity"),
    [
        pytest.param("BE", NATIVE, None, context(),
                     {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [OVERSOLD]}]}}},
                     id="be-batch-requires-oversold-nodes-no-preference-every-node-oversells"),
        pytest.param("BE", NATIVE, "false", context(),
                     {"nodeAffinity": {
                         REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [COLOCATION]}]},
                         PREFERRED: [PREFER_OVERSOLD]}},
                     id="be-native-requires-colocation-prefers-oversold"),
        pytest.param("BE", NATIVE, "false", context(be_fallback_to_native=True),
                     {"nodeAffinity": {PREFERRED: [PREFER_COLOCATION, PREFER_OVERSOLD]}},
                     id="be-native-with-fallback-requires-nothing-prefers-both"),
        pytest.param("BE", NATIVE, None, context(be_fallback_to_native=True),
                     {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [OVERSOLD]}]}}},
                     id="fallback-does-not-touch-be-batch-pods"),
        pytest.param("HLS", GUARANTEED, None, context(),
                     {"nodeAffinity": {PREFERRED: [PREFER_NOT_OVERSOLD]}},
                     id="hls-prefers-not-oversold"),
        pytest.param("LS", NATIVE, None, context(),
                     {"nodeAffinity": {PREFERRED: [PREFER_NOT_OVERSOLD]}},
                     id="ls-prefers-not-oversold"),
    ],
)
def test_node_affinity_of_each_kind_of_pod(
    level: str, resources: dict, oversell: str | None, ctx: AdmissionContext, expected_affinity: dict
) -> None:
    patched, _, _ = mutate(pod(level, resources, oversell=oversell), ctx)
    assert patched["spec"]["affinity"] == expected_affinity


def test_fallback_warning_says_the_pod_may_run_anywhere() -> None:
    _, _, warnings = mutate(pod("BE", NATIVE, oversell="false"), context(be_fallback_to_native=True))
    assert warnings == [
        f"BE pod keeps its native cpu/memory requests (pod annotation {OVERSELL}=false): no oversold "
        "batch resources; it runs on any node, preferring colocation and oversold nodes "
        "(overselling.beFallbackToNative=true)"]


@pytest.mark.parametrize(
    ("level", "resources", "oversell", "ctx", "affinity", "expected"),
    [
        pytest.param(
            "LS", NATIVE, None, context(),
            {"nodeAffinity": {PREFERRED: [USER_PREFERENCE]}},
            {"nodeAffinity": {PREFERRED: [USER_PREFERENCE, PREFER_NOT_OVERSOLD]}},
            id="appended-after-the-users-preferences"),
        pytest.param(
            "LS", NATIVE, None, context(),
            {"nodeAffinity": {PREFERRED: [{**PREFER_NOT_OVERSOLD, "weight": 90}]}},
            {"nodeAffinity": {PREFERRED: [{**PREFER_NOT_OVERSOLD, "weight": 90}]}},
            id="the-same-preference-at-another-weight-is-the-users-and-kept"),
        pytest.param(
            "LS", NATIVE, None, context(),
            {"nodeAffinity": {PREFERRED: [{"weight": 10, "preference": {"matchExpressions": [ZONE, NOT_OVERSOLD]}}]}},
            {"nodeAffinity": {PREFERRED: [
                {"weight": 10, "preference": {"matchExpressions": [ZONE, NOT_OVERSOLD]}}, PREFER_NOT_OVERSOLD]}},
            id="a-narrower-user-preference-does-not-count"),
        pytest.param(
            "HLS", GUARANTEED, None, context(),
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [ZONE]}]}}},
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [ZONE]}]},
                              PREFERRED: [PREFER_NOT_OVERSOLD]}},
            id="online-required-terms-untouched"),
        pytest.param(
            "LS", NATIVE, None, context(),
            {"nodeAffinity": {PREFERRED: None}},
            {"nodeAffinity": {PREFERRED: [PREFER_NOT_OVERSOLD]}},
            id="null-preferences-replaced"),
        pytest.param(
            "BE", NATIVE, "false", context(),
            {"podAntiAffinity": {}, "nodeAffinity": {PREFERRED: [USER_PREFERENCE]}},
            {"podAntiAffinity": {}, "nodeAffinity": {
                PREFERRED: [USER_PREFERENCE, PREFER_OVERSOLD],
                REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [COLOCATION]}]}}},
            id="be-native-required-and-preferred-added-beside-the-users"),
        pytest.param(
            "BE", NATIVE, "false", context(),
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
                {"matchExpressions": [COLOCATION, OVERSOLD]}]}}},
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
                {"matchExpressions": [COLOCATION, OVERSOLD]}]}, PREFERRED: [PREFER_OVERSOLD]}},
            id="be-native-admitted-under-the-earlier-rule-keeps-its-terms"),
        pytest.param(
            "BE", NATIVE, "false", context(be_fallback_to_native=True),
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [ZONE]}]}}},
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [ZONE]}]},
                              PREFERRED: [PREFER_COLOCATION, PREFER_OVERSOLD]}},
            id="be-fallback-leaves-the-users-requirement-alone"),
    ],
)
def test_preferences_are_added_once_and_never_replace_the_users(
    level: str, resources: dict, oversell: str | None, ctx: AdmissionContext, affinity: dict,
    expected: dict,
) -> None:
    patched, _, _ = mutate(pod(level, resources, oversell=oversell, affinity=affinity), ctx)
    assert patched["spec"]["affinity"] == expected


def test_preference_ops_append_to_the_users_list() -> None:
    obj = pod("LS", NATIVE, affinity={"nodeAffinity": {PREFERRED: [USER_PREFERENCE]}})
    _, ops, _ = mutate(obj, context())
    assert {"op": "add", "path": f"/spec/affinity/nodeAffinity/{PREFERRED}/-",
            "value": PREFER_NOT_OVERSOLD} in ops


@pytest.mark.parametrize("level", ["HLS", "LS"])
@pytest.mark.parametrize("batch_in", ["requests", "limits"])
def test_online_pods_use_native_resources_only_even_on_an_oversold_node(level: str, batch_in: str) -> None:
    """An online pod may land on an oversold node (it only prefers the others), and there it
    uses native cpu/memory only: kubernetes.io/batch-* is refused for HLS and LS."""
    resources = copy.deepcopy(GUARANTEED)
    resources[batch_in][BATCH_CPU] = "1000"
    inner = review(create_review(pod(level, resources)), context())["response"]
    assert inner["allowed"] is False
    assert inner["status"]["reason"] == f"{level.lower()}-rule"
    assert (f'container "web": {level} requires {batch_in}.{BATCH_CPU} to be unset: oversold batch '
            f"resources are for BE pods only, online pods use native {batch_in}.cpu (got 1000)") \
        in inner["status"]["message"]


# --- Workload templates ---------------------------------------------------------------------------


def deployment_request(template_annotations: dict[str, str], resources: dict) -> dict[str, Any]:
    template = {"metadata": {"labels": {"app": "w"}, "annotations": template_annotations},
                "spec": {"containers": [{"name": "web", "image": "x", "resources": resources}]}}
    return {"uid": "u", "operation": "CREATE", "namespace": "team-a",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "object": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"},
                       "spec": {"selector": {"matchLabels": {"app": "w"}}, "template": template}}}


@pytest.mark.parametrize(
    ("annotations", "ctx", "resources", "reason", "message"),
    [
        pytest.param({QOS: "BE", OVERSELL: "false"}, context(),
                     {"requests": {"cpu": "1"}}, None, "", id="native-template-allowed"),
        pytest.param({QOS: "BE"}, context("false"),
                     {"requests": {BATCH_CPU: "1"}, "limits": {BATCH_CPU: "1"}}, "be-rule",
                     f'spec.template: container "web": BE keeping native requests (namespace annotation '
                     f"{OVERSELL}=false) requires requests.{BATCH_CPU} to be unset",
                     id="namespace-opt-out-applies-to-templates"),
        pytest.param({QOS: "BE", OVERSELL: "nope"}, context(), {}, "invalid-qos-annotation",
                     f'spec.template: pod: annotation "{OVERSELL}": invalid value "nope"; allowed: true, false',
                     id="bad-annotation-on-the-template"),
    ],
)
def test_workload_templates_are_judged_with_the_same_opt_out(
    annotations: dict, ctx: AdmissionContext, resources: dict, reason: str | None, message: str
) -> None:
    decision = decide(deployment_request(annotations, resources), ctx)
    if reason is None:
        assert decision.allowed and not decision.patch, decision
        return
    assert (decision.allowed, str(decision.reason)) == (False, reason)
    assert decision.message.startswith(message), decision.message


@pytest.mark.parametrize(
    ("mode", "annotations", "warned"),
    [
        pytest.param("volcanoAnnotations", {QOS: "BE"}, True, id="batch-template-nobody-offers"),
        pytest.param("volcanoAnnotations", {QOS: "BE", OVERSELL: "false"}, False, id="native-template"),
        pytest.param("volcanoAnnotations", {QOS: "LS"}, False, id="online-template"),
        pytest.param("extendedResources", {QOS: "BE"}, False, id="batch-resources-published"),
    ],
)
def test_a_workload_whose_be_pods_no_node_can_take_is_warned(mode: str, annotations: dict, warned: bool) -> None:
    """The user creates the Deployment or Job, not its pods: the warning must come at the workload."""
    ctx = AdmissionContext({}, ColocationPolicy.from_spec({"overselling": {"reportingMode": mode}}),
                           namespace="team-a")
    decision = decide(deployment_request(annotations, NATIVE), ctx)
    assert decision.allowed and not decision.patch, decision
    assert decision.warnings == ((f"spec.template: {VOLCANO_WARNING}",) if warned else ()), decision.warnings


def test_the_validating_webhook_says_a_workloads_warning_but_not_a_pods_again() -> None:
    """/validate answers without a patch: a pod's warnings came with the mutating webhook's
    answer already, a workload's come only from here (it is validated, never mutated)."""
    ctx = AdmissionContext({}, ColocationPolicy.from_spec({"overselling": {"reportingMode": "volcanoAnnotations"}}),
                           namespace="team-a")
    workload = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": deployment_request({QOS: "BE"}, NATIVE)}
    validated, _ = answer(workload, with_patch=False, context=ctx)
    assert validated["response"]["warnings"] == [f"spec.template: {VOLCANO_WARNING}"]
    mutated, _ = answer(create_review(pod("BE", NATIVE)), with_patch=True, context=ctx)
    validated, _ = answer(create_review(pod("BE", NATIVE)), with_patch=False, context=ctx)
    assert VOLCANO_WARNING in mutated["response"]["warnings"]
    assert "warnings" not in validated["response"] and "patch" not in validated["response"]


def test_the_namespace_is_read_from_the_request() -> None:
    assert namespace_of(create_review(pod("BE"))) == "team-a"
    assert namespace_of({"request": {"namespace": 7}}) == ""
    assert namespace_of(None) == ""


def test_without_a_context_the_policy_defaults_apply() -> None:
    """What the webhook does until its caches are synced: BE pods use batch resources."""
    inner = review(create_review(pod("BE", NATIVE)))["response"]
    ops = ops_of({"response": inner})
    assert any(op["path"].endswith("kubernetes.io~1batch-cpu") for op in ops)
    assert "warnings" not in inner
