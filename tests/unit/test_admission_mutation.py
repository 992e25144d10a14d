"""Admission webhook: what a pod of each level becomes, verified by applying the JSON Patch.

Every case applies the patch with ``jsonpatch`` (an independent RFC 6902 implementation), compares
the result with the expected pod, and reviews the patched pod again: webhook reinvocation must
find nothing left to do.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest
from tidal.manager.admission.mutation import pod_mutation
from tidal.api.json_patch import escape, member
from tidal.manager.admission.review import review
from tidal.api.qos import QoSLevel

CANONICAL = "colocation.tidal.io/qos-level"
BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
TAINT = "colocation.tidal.io/offline-evicting"

OFFLINE_EVICTING_TOLERATION = {"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}
COLOCATION = {"key": "colocation.tidal.io/colocation", "operator": "In", "values": ["true"]}
OVERSUBSCRIPTION = {
    "key": "colocation.tidal.io/oversubscription",
    "operator": "In",
    "values": ["true"],
}
TIDAL_TERM = {"matchExpressions": [OVERSUBSCRIPTION]}
#: What BE pods were required before issue 19 (both labels): such pods are still reviewed again.
OLD_RULE_TERM = {"matchExpressions": [COLOCATION, OVERSUBSCRIPTION]}
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
NOT_OVERSOLD = {**OVERSUBSCRIPTION, "operator": "NotIn"}
ONLINE_PREFERENCE = {"weight": 10, "preference": {"matchExpressions": [NOT_OVERSOLD]}}
ONLINE_AFFINITY = {"nodeAffinity": {PREFERRED: [ONLINE_PREFERENCE]}}
GUARANTEED = {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}

# What the API server has filled in before a mutating webhook sees a pod with no class.
AS_STORED = {"schedulerName": "default-scheduler", "priority": 0}
HLS_SCHEDULING = {"schedulerName": "volcano", "priorityClassName": "tidal-hls", "priority": 100000}
LS_SCHEDULING = {"schedulerName": "volcano", "priorityClassName": "tidal-ls", "priority": 50000}
BE_SCHEDULING = {
    "schedulerName": "volcano",
    "priorityClassName": "tidal-be",
    "priority": -100,
    "preemptionPolicy": "Never",
}


def pod(level: str | None, spec: dict[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "namespace": "default"}
    if level is not None:
        metadata["annotations"] = {CANONICAL: level}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def create_review(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "9d2a0b6e-0000-4000-8000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "object": obj,
        },
    }


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    inner = response["response"]
    assert inner["allowed"] is True, inner
    if "patch" not in inner:
        assert "patchType" not in inner
        return []
    assert inner["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(inner["patch"]))


def mutate(obj: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """(patched pod, operations, warnings); asserts the patch applies and is idempotent."""
    original = copy.deepcopy(obj)
    response = review(create_review(obj))
    assert obj == original, "review must not modify the request"
    ops = patch_of(response)
    patched = jsonpatch.apply_patch(obj, ops)
    assert patch_of(review(create_review(patched))) == [], (
        "reinvocation must find nothing to change"
    )
    return patched, ops, response["response"].get("warnings", [])


def container(name: str = "web", **resources: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "image": "busybox", **({"resources": resources} if resources else {})}


# --- Scheduling fields, every level -------------------------------------------------------------


@pytest.mark.parametrize(
    ("level", "spec", "expected_spec"),
    [
        pytest.param(
            "HLS",
            {"containers": [container(**GUARANTEED)], **AS_STORED},
            {
                "containers": [container(**GUARANTEED)],
                **HLS_SCHEDULING,
                "affinity": ONLINE_AFFINITY,
                "tolerations": [OFFLINE_EVICTING_TOLERATION],
            },
            id="hls-volcano-class-priority-toleration",
        ),
        pytest.param(
            "LS",
            {"containers": [container(requests={"cpu": "1", "memory": "1Gi"})], **AS_STORED},
            {
                "containers": [container(requests={"cpu": "1", "memory": "1Gi"})],
                **LS_SCHEDULING,
                "affinity": ONLINE_AFFINITY,
                "tolerations": [OFFLINE_EVICTING_TOLERATION],
            },
            id="ls-volcano-class-priority-toleration",
        ),
        pytest.param(
            "BE",
            {"containers": [container()], **AS_STORED},
            {
                "containers": [container()],
                **BE_SCHEDULING,
                "affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [TIDAL_TERM]}}},
            },
            id="be-volcano-class-priority-never-preempts-affinity",
        ),
        pytest.param(
            "LS",
            {"containers": [container(requests={"cpu": "1", "memory": "1Gi"})]},
            {
                "containers": [container(requests={"cpu": "1", "memory": "1Gi"})],
                **LS_SCHEDULING,
                "affinity": ONLINE_AFFINITY,
                "tolerations": [OFFLINE_EVICTING_TOLERATION],
            },
            id="absent-fields-are-added",
        ),
        pytest.param(
            "HLS",
            {"containers": [container(**GUARANTEED)], **AS_STORED, "preemptionPolicy": "Never"},
            {
                "containers": [container(**GUARANTEED)],
                **HLS_SCHEDULING,
                "preemptionPolicy": "PreemptLowerPriority",
                "affinity": ONLINE_AFFINITY,
                "tolerations": [OFFLINE_EVICTING_TOLERATION],
            },
            id="preemption-policy-of-the-original-class-is-replaced",
        ),
    ],
)
def test_pod_gets_volcano_and_the_priority_of_its_level(
    level: str, spec: dict, expected_spec: dict
) -> None:
    patched, _, _ = mutate(pod(level, spec))
    assert patched == pod(level, expected_spec)


def test_pod_already_scheduled_by_tidal_rules_gets_no_scheduling_ops() -> None:
    spec = {
        "containers": [container()],
        **BE_SCHEDULING,
        "affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [TIDAL_TERM]}}},
    }
    _, ops, warnings = mutate(pod("BE", spec))
    assert (ops, warnings) == ([], [])


@pytest.mark.parametrize(
    ("spec", "warnings"),
    [
        pytest.param(
            {"priorityClassName": "high-priority", "priority": 1000000},
            ['priorityClassName "high-priority" replaced by "tidal-ls" for QoS level LS'],
            id="other-priority-class",
        ),
        pytest.param(
            {"schedulerName": "my-scheduler"},
            ['schedulerName "my-scheduler" replaced by "volcano" for QoS level LS'],
            id="other-scheduler",
        ),
        pytest.param(
            {"schedulerName": "default-scheduler", "priorityClassName": ""},
            [],
            id="defaults-replaced-silently",
        ),
    ],
)
def test_overwriting_a_users_choice_is_warned_about(spec: dict, warnings: list[str]) -> None:
    ls_spec = {"containers": [container(requests={"cpu": "1", "memory": "1Gi"})], **spec}
    patched, _, got = mutate(pod("LS", ls_spec))
    assert got == warnings
    assert {key: patched["spec"][key] for key in LS_SCHEDULING} == LS_SCHEDULING


def test_overwritten_priority_class_is_replaced_not_added() -> None:
    ls_spec = {
        "containers": [container(requests={"cpu": "1", "memory": "1Gi"})],
        "priorityClassName": "high",
        "priority": 7,
    }
    _, ops, _ = mutate(pod("LS", ls_spec))
    assert {"op": "replace", "path": "/spec/priorityClassName", "value": "tidal-ls"} in ops
    assert {"op": "replace", "path": "/spec/priority", "value": 50000} in ops


# --- HLS/LS: offline-evicting toleration -------------------------------------------------------

OTHER_TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        pytest.param(None, [OFFLINE_EVICTING_TOLERATION], id="none"),
        pytest.param([], [OFFLINE_EVICTING_TOLERATION], id="empty-list"),
        pytest.param(
            [OTHER_TOLERATION],
            [OTHER_TOLERATION, OFFLINE_EVICTING_TOLERATION],
            id="appended-to-users",
        ),
        pytest.param(
            [OFFLINE_EVICTING_TOLERATION], [OFFLINE_EVICTING_TOLERATION], id="already-present"
        ),
        pytest.param(
            [{"key": TAINT, "operator": "Exists"}],
            [{"key": TAINT, "operator": "Exists"}],
            id="any-effect",
        ),
        pytest.param([{"operator": "Exists"}], [{"operator": "Exists"}], id="tolerates-everything"),
        pytest.param(
            [{"key": TAINT, "operator": "Exists", "effect": "NoExecute"}],
            [
                {"key": TAINT, "operator": "Exists", "effect": "NoExecute"},
                OFFLINE_EVICTING_TOLERATION,
            ],
            id="other-effect-does-not-count",
        ),
        pytest.param(
            [{"key": TAINT, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
            [
                {"key": TAINT, "operator": "Equal", "value": "true", "effect": "NoSchedule"},
                OFFLINE_EVICTING_TOLERATION,
            ],
            id="equal-depends-on-the-taint-value-so-does-not-count",
        ),
    ],
)
@pytest.mark.parametrize("level", ["HLS", "LS"])
def test_online_pod_tolerates_the_offline_evicting_taint(
    level: str, tolerations: list | None, expected: list
) -> None:
    spec: dict[str, Any] = {
        "containers": [container(**GUARANTEED)],
        **(HLS_SCHEDULING if level == "HLS" else LS_SCHEDULING),
    }
    if tolerations is not None:
        spec["tolerations"] = tolerations
    patched, _, _ = mutate(pod(level, spec))
    assert patched["spec"]["tolerations"] == expected


def test_be_pod_gets_no_toleration() -> None:
    patched, _, _ = mutate(pod("BE", {"containers": [container()]}))
    assert "tolerations" not in patched["spec"]


# --- BE: required node affinity ----------------------------------------------------------------

ZONE = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
NODE_NAME_FIELD = {"key": "metadata.name", "operator": "In", "values": ["node-1"]}
USER_PREFERRED = [{"weight": 1, "preference": {"matchExpressions": [ZONE]}}]
POD_ANTI_AFFINITY = {
    "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname"}]
}


@pytest.mark.parametrize(
    ("affinity", "expected"),
    [
        pytest.param(
            None,
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [TIDAL_TERM]}}},
            id="no-affinity",
        ),
        pytest.param(
            {"podAntiAffinity": POD_ANTI_AFFINITY},
            {
                "podAntiAffinity": POD_ANTI_AFFINITY,
                "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [TIDAL_TERM]}},
            },
            id="no-node-affinity",
        ),
        pytest.param(
            {"nodeAffinity": {PREFERRED: USER_PREFERRED}},
            {
                "nodeAffinity": {
                    PREFERRED: USER_PREFERRED,
                    REQUIRED: {"nodeSelectorTerms": [TIDAL_TERM]},
                }
            },
            id="preferred-only-is-kept",
        ),
        pytest.param(
            {
                "nodeAffinity": {
                    REQUIRED: {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [ZONE]},
                            {"matchFields": [NODE_NAME_FIELD]},
                        ]
                    }
                }
            },
            {
                "nodeAffinity": {
                    REQUIRED: {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [ZONE, OVERSUBSCRIPTION]},
                            {
                                "matchFields": [NODE_NAME_FIELD],
                                "matchExpressions": [OVERSUBSCRIPTION],
                            },
                        ]
                    }
                }
            },
            id="anded-into-every-user-term",
        ),
        pytest.param(
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [ZONE, COLOCATION]}]}}},
            {
                "nodeAffinity": {
                    REQUIRED: {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [ZONE, COLOCATION, OVERSUBSCRIPTION]}
                        ]
                    }
                }
            },
            id="a-users-colocation-expression-is-kept-and-oversubscription-added",
        ),
        pytest.param(
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [OLD_RULE_TERM]}}},
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [OLD_RULE_TERM]}}},
            id="pod-of-the-earlier-rule-keeps-both-expressions",
        ),
        pytest.param(
            {
                "nodeAffinity": {
                    REQUIRED: {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [ZONE, COLOCATION, OVERSUBSCRIPTION]},
                            {"matchExpressions": [ZONE]},
                        ]
                    }
                }
            },
            {
                "nodeAffinity": {
                    REQUIRED: {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [ZONE, COLOCATION, OVERSUBSCRIPTION]},
                            {"matchExpressions": [ZONE, OVERSUBSCRIPTION]},
                        ]
                    }
                }
            },
            id="earlier-rule-term-kept-user-term-completed",
        ),
        pytest.param(
            {
                "nodeAffinity": {
                    REQUIRED: {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{**OVERSUBSCRIPTION, "values": ["true", "false"]}]}
                        ]
                    }
                }
            },
            {
                "nodeAffinity": {
                    REQUIRED: {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {**OVERSUBSCRIPTION, "values": ["true", "false"]},
                                    OVERSUBSCRIPTION,
                                ]
                            }
                        ]
                    }
                }
            },
            id="a-looser-user-expression-does-not-count",
        ),
        pytest.param(
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": []}}},
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [TIDAL_TERM]}}},
            id="empty-term-list",
        ),
        pytest.param(
            {"nodeAffinity": {REQUIRED: {}}},
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [TIDAL_TERM]}}},
            id="required-without-terms",
        ),
        pytest.param(
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{}, {"matchExpressions": [ZONE]}]}}},
            {
                "nodeAffinity": {
                    REQUIRED: {
                        "nodeSelectorTerms": [
                            {},
                            {"matchExpressions": [ZONE, OVERSUBSCRIPTION]},
                        ]
                    }
                }
            },
            id="empty-term-matches-no-node-and-stays-so",
        ),
    ],
)
def test_be_pod_requires_oversold_nodes_without_dropping_user_terms(
    affinity: dict | None, expected: dict
) -> None:
    spec: dict[str, Any] = {"containers": [container()], **BE_SCHEDULING}
    if affinity is not None:
        spec["affinity"] = affinity
    patched, _, _ = mutate(pod("BE", spec))
    assert patched["spec"]["affinity"] == expected


def test_affinity_is_added_at_the_shallowest_missing_parent() -> None:
    _, ops, _ = mutate(
        pod(
            "BE",
            {"containers": [container()], **BE_SCHEDULING, "affinity": {"podAntiAffinity": {}}},
        )
    )
    assert ops == [
        {
            "op": "add",
            "path": "/spec/affinity/nodeAffinity",
            "value": {REQUIRED: {"nodeSelectorTerms": [TIDAL_TERM]}},
        }
    ]


def test_affinity_expressions_are_appended_not_rewritten() -> None:
    affinity = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [ZONE]}]}}}
    _, ops, _ = mutate(
        pod("BE", {"containers": [container()], **BE_SCHEDULING, "affinity": affinity})
    )
    path = f"/spec/affinity/nodeAffinity/{REQUIRED}/nodeSelectorTerms/0/matchExpressions/-"
    assert ops == [{"op": "add", "path": path, "value": OVERSUBSCRIPTION}]


# --- BE: native resources become batch resources -----------------------------------------------


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        pytest.param(
            {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
            {
                "requests": {BATCH_CPU: "1000", BATCH_MEMORY: "2147483648"},
                "limits": {BATCH_CPU: "1000", BATCH_MEMORY: "2147483648"},
            },
            id="limit-is-the-amount",
        ),
        pytest.param(
            {"requests": {"cpu": "250m", "memory": "100M"}},
            {
                "requests": {BATCH_CPU: "250", BATCH_MEMORY: "100000000"},
                "limits": {BATCH_CPU: "250", BATCH_MEMORY: "100000000"},
            },
            id="request-without-limit-is-the-amount-and-a-limits-map-is-added",
        ),
        pytest.param(
            {"limits": {"cpu": "1.5", "memory": "1.5Ki"}},
            {
                "limits": {BATCH_CPU: "1500", BATCH_MEMORY: "1536"},
                "requests": {BATCH_CPU: "1500", BATCH_MEMORY: "1536"},
            },
            id="limits-only-gets-a-requests-map",
        ),
        pytest.param(
            {"requests": {"cpu": "1n"}},
            {"requests": {BATCH_CPU: "1"}, "limits": {BATCH_CPU: "1"}},
            id="rounded-up-to-a-whole-millicore",
        ),
        pytest.param(
            {
                "requests": {"cpu": "1", "ephemeral-storage": "1Gi", "nvidia.com/gpu": "1"},
                "limits": {"nvidia.com/gpu": "1"},
            },
            {
                "requests": {"ephemeral-storage": "1Gi", "nvidia.com/gpu": "1", BATCH_CPU: "1000"},
                "limits": {"nvidia.com/gpu": "1", BATCH_CPU: "1000"},
            },
            id="other-resources-kept",
        ),
        pytest.param(
            {"requests": {BATCH_CPU: "2000"}, "limits": {"cpu": "2", BATCH_CPU: "2k"}},
            {"requests": {BATCH_CPU: "2000"}, "limits": {BATCH_CPU: "2k"}},
            id="consistent-batch-values-kept-as-written",
        ),
        pytest.param(
            {"requests": {BATCH_MEMORY: "1024"}},
            {"requests": {BATCH_MEMORY: "1024"}, "limits": {BATCH_MEMORY: "1024"}},
            id="batch-request-alone-gets-its-limit",
        ),
        pytest.param(
            {"requests": None, "limits": {"memory": "1Ki"}},
            {"requests": {BATCH_MEMORY: "1024"}, "limits": {BATCH_MEMORY: "1024"}},
            id="null-map-replaced",
        ),
        pytest.param(
            {"claims": [{"name": "gpu"}]},
            {"claims": [{"name": "gpu"}]},
            id="no-cpu-or-memory-untouched",
        ),
    ],
)
def test_be_native_resources_become_batch_resources(resources: dict, expected: dict) -> None:
    spec = {
        "containers": [{"name": "web", "resources": resources}],
        **BE_SCHEDULING,
        "affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [TIDAL_TERM]}}},
    }
    patched, _, _ = mutate(pod("BE", spec))
    assert patched["spec"]["containers"][0]["resources"] == expected


def test_be_init_containers_and_every_container_are_rewritten() -> None:
    spec = {
        "initContainers": [container("setup", limits={"cpu": "100m", "memory": "64Mi"})],
        "containers": [
            container("a", requests={"cpu": "1"}),
            container("b"),
            container("c", limits={"memory": "1Mi"}),
        ],
    }
    patched, _, _ = mutate(pod("BE", spec))
    resources = {
        c["name"]: c.get("resources")
        for c in patched["spec"]["initContainers"] + patched["spec"]["containers"]
    }
    assert resources == {
        "setup": {
            "limits": {BATCH_CPU: "100", BATCH_MEMORY: "67108864"},
            "requests": {BATCH_CPU: "100", BATCH_MEMORY: "67108864"},
        },
        "a": {"requests": {BATCH_CPU: "1000"}, "limits": {BATCH_CPU: "1000"}},
        "b": None,
        "c": {"limits": {BATCH_MEMORY: "1048576"}, "requests": {BATCH_MEMORY: "1048576"}},
    }


def test_batch_resource_keys_are_escaped_in_the_patch() -> None:
    spec = {
        "containers": [container(requests={"cpu": "1"}, limits={"cpu": "1"})],
        **BE_SCHEDULING,
        "affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [TIDAL_TERM]}}},
    }
    _, ops, _ = mutate(pod("BE", spec))
    assert ops == [
        {"op": "remove", "path": "/spec/containers/0/resources/requests/cpu"},
        {
            "op": "add",
            "path": "/spec/containers/0/resources/requests/kubernetes.io~1batch-cpu",
            "value": "1000",
        },
        {"op": "remove", "path": "/spec/containers/0/resources/limits/cpu"},
        {
            "op": "add",
            "path": "/spec/containers/0/resources/limits/kubernetes.io~1batch-cpu",
            "value": "1000",
        },
        {
            "op": "add",
            "path": "/metadata/annotations/colocation.tidal.io~1batch-resources",
            "value": '{"web":{"kubernetes.io/batch-cpu":"1000"}}',
        },
    ]


@pytest.mark.parametrize(
    ("token", "escaped"),
    [
        ("kubernetes.io/batch-cpu", "kubernetes.io~1batch-cpu"),
        ("a~b", "a~0b"),
        ("~1", "~01"),
        ("/~", "~1~0"),
        ("plain", "plain"),
    ],
)
def test_pointer_tokens_are_escaped_tilde_first(token: str, escaped: str) -> None:
    assert escape(token) == escaped
    assert member("/spec", token) == f"/spec/{escaped}"


def test_patch_values_do_not_alias_each_other() -> None:
    # Two terms get the same expressions: they must be distinct objects in the patch (a JSON
    # serialiser does not care, but an in-process consumer of the ops might mutate one).
    affinity = {
        "nodeAffinity": {
            REQUIRED: {
                "nodeSelectorTerms": [
                    {"matchFields": [NODE_NAME_FIELD]},
                    {"matchFields": [NODE_NAME_FIELD]},
                ]
            }
        }
    }
    spec = {"containers": [container()], **BE_SCHEDULING, "affinity": affinity}
    first, second = pod_mutation(spec, QoSLevel.BE).ops
    assert first["value"] == second["value"] and first["value"] is not second["value"]


def test_be_pods_get_their_batch_amounts_in_one_annotation_for_the_nri_plugin() -> None:
    """NRI does not carry extended resources: the plugin reads each container's batch amounts
    from colocation.tidal.io/batch-resources. Nothing else in metadata changes."""
    spec = {"initContainers": [container("setup", requests={"cpu": "250m"}, limits={"cpu": "250m"})],
            "containers": [container(requests={"cpu": "1", "memory": "1Gi"}),
                           container("side", limits={BATCH_CPU: "2k", "kubernetes.io/batch-memory": "512Mi"})]}
    patched, ops, _ = mutate(pod("BE", spec))
    metadata_ops = [op for op in ops if op["path"].startswith("/metadata")]
    assert [op["path"] for op in metadata_ops] == ["/metadata/annotations/colocation.tidal.io~1batch-resources"]
    assert json.loads(patched["metadata"]["annotations"]["colocation.tidal.io/batch-resources"]) == {
        "setup": {BATCH_CPU: "250"},
        "web": {BATCH_CPU: "1000", "kubernetes.io/batch-memory": str(1 << 30)},
        "side": {BATCH_CPU: "2000", "kubernetes.io/batch-memory": str(512 << 20)},
    }
    assert {k: v for k, v in patched["metadata"].items() if k != "annotations"} == \
        {k: v for k, v in pod("BE", {})["metadata"].items() if k != "annotations"}
    # online pods get no such annotation
    _, ops, _ = mutate(pod("LS", {"containers": [container(requests={"cpu": "1", "memory": "1Gi"})]}))
    assert not any(op["path"].startswith("/metadata") for op in ops)




def test_a_container_name_that_is_not_a_string_is_left_out_of_the_annotation_not_an_error() -> None:
    """Found by the any-JSON property: a list as a container's name could not key the
    annotation's map and the review answered 500. The verdict is now the usual one, and only
    containers with a real name carry batch amounts in the annotation."""
    spec = {"containers": [container(requests={"cpu": "1"}),
                           {**container(requests={"cpu": "1"}), "name": ["not", "a", "name"]}]}
    body = create_review(pod("BE", spec))
    response = review(body)["response"]
    assert response["allowed"], response
    patched = jsonpatch.apply_patch(body["request"]["object"], patch_of({"response": response}))
    assert json.loads(patched["metadata"]["annotations"]["colocation.tidal.io/batch-resources"]) == {
        "web": {BATCH_CPU: "1000"}}
