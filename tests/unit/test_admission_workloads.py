"""Admission webhook: workloads are validated through their pod template, never mutated."""

from __future__ import annotations

from typing import Any

import pytest
from tidal.manager.admission.decision import Decision
from tidal.manager.admission.review import decide

CANONICAL = "colocation.tidal.io/qos-level"
HALF_CPU = {
    "name": "web",
    "resources": {
        "requests": {"cpu": "500m", "memory": "1Gi"},
        "limits": {"cpu": "1", "memory": "1Gi"},
    },
}
GUARANTEED = {
    "name": "web",
    "resources": {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {"cpu": "1", "memory": "1Gi"},
    },
}
HLS_RULE_BROKEN = 'container "web": HLS requires requests.cpu == limits.cpu (got 500m / 1)'


def template(annotations: dict[str, Any] | None, containers: list[dict]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"labels": {"app": "web"}}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": {"containers": containers}}


def with_template(pod_template: dict[str, Any]) -> dict[str, Any]:
    return {"selector": {"matchLabels": {"app": "web"}}, "template": pod_template}


# (group, version, kind, resource, spec builder, template path in messages)
WORKLOAD_KINDS = [
    ("apps", "v1", "Deployment", "deployments", with_template, "spec.template"),
    ("apps", "v1", "StatefulSet", "statefulsets", with_template, "spec.template"),
    ("apps", "v1", "DaemonSet", "daemonsets", with_template, "spec.template"),
    ("apps", "v1", "ReplicaSet", "replicasets", with_template, "spec.template"),
    ("batch", "v1", "Job", "jobs", lambda t: {"template": t}, "spec.template"),
    (
        "batch",
        "v1",
        "CronJob",
        "cronjobs",
        lambda t: {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": t}}},
        "spec.jobTemplate.spec.template",
    ),
    ("", "v1", "ReplicationController", "replicationcontrollers", with_template, "spec.template"),
]
KIND_IDS = [kind for _, _, kind, *_ in WORKLOAD_KINDS]


def workload_request(
    kind_entry: tuple,
    obj_template: dict,
    *,
    operation: str = "CREATE",
    old_template: dict | None = None,
    by: str = "kind",
) -> dict[str, Any]:
    group, version, kind, resource, build, _ = kind_entry
    obj = {
        "apiVersion": f"{group}/{version}".lstrip("/"),
        "kind": kind,
        "metadata": {"name": "w"},
        "spec": build(obj_template),
    }
    request: dict[str, Any] = {"uid": "u", "operation": operation, "object": obj}
    if by == "kind":
        request["kind"] = {"group": group, "version": version, "kind": kind}
    request["resource"] = {"group": group, "version": version, "resource": resource}
    if old_template is not None:
        request["oldObject"] = {**obj, "spec": build(old_template)}
    return request


@pytest.mark.parametrize("kind_entry", WORKLOAD_KINDS, ids=KIND_IDS)
def test_workload_with_a_template_breaking_its_rule_is_refused_at_creation(
    kind_entry: tuple,
) -> None:
    decision = decide(workload_request(kind_entry, template({CANONICAL: "HLS"}, [HALF_CPU])))
    prefix = kind_entry[-1]
    assert (decision.allowed, decision.reason, decision.message) == (
        False,
        "hls-rule",
        f"{prefix}: {HLS_RULE_BROKEN}",
    )


@pytest.mark.parametrize("kind_entry", WORKLOAD_KINDS, ids=KIND_IDS)
def test_workload_with_a_valid_template_is_allowed_without_patch(kind_entry: tuple) -> None:
    for level in ("HLS", "LS", "BE"):
        assert decide(
            workload_request(kind_entry, template({CANONICAL: level}, [GUARANTEED]))
        ) == Decision(allowed=True)


@pytest.mark.parametrize("kind_entry", WORKLOAD_KINDS, ids=KIND_IDS)
def test_workload_template_with_an_invalid_annotation_is_refused_with_its_path(
    kind_entry: tuple,
) -> None:
    decision = decide(
        workload_request(kind_entry, template({"volcano.sh/qos-level": "gold"}, [GUARANTEED]))
    )
    assert decision.reason == "invalid-qos-annotation"
    assert decision.message == (
        f'{kind_entry[-1]}: annotation "volcano.sh/qos-level": invalid value "gold"; '
        "allowed: LC, HLS, LS, BE, an integer (<0 means BE, >=0 means LS)"
    )


@pytest.mark.parametrize("kind_entry", WORKLOAD_KINDS, ids=KIND_IDS)
def test_workload_identified_by_resource_when_kind_is_absent(kind_entry: tuple) -> None:
    decision = decide(
        workload_request(kind_entry, template({CANONICAL: "HLS"}, [HALF_CPU]), by="resource")
    )
    assert decision.reason == "hls-rule"


def test_workload_template_annotation_is_read_not_the_workloads_own() -> None:
    request = workload_request(WORKLOAD_KINDS[0], template(None, [HALF_CPU]))
    request["object"]["metadata"]["annotations"] = {CANONICAL: "HLS"}
    assert decide(request) == Decision(allowed=True)


def test_workload_violations_are_all_reported_with_the_template_prefix() -> None:
    containers = [
        HALF_CPU,
        {"name": "side", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
    ]
    decision = decide(workload_request(WORKLOAD_KINDS[5], template({CANONICAL: "HLS"}, containers)))
    prefix = "spec.jobTemplate.spec.template"
    assert decision.message == "; ".join(
        [
            f"{prefix}: {HLS_RULE_BROKEN}",
            f'{prefix}: container "side": HLS requires requests.cpu == limits.cpu (got 1 / unset)',
            f'{prefix}: container "side": HLS requires requests.memory == limits.memory (got 1Gi / unset)',
        ]
    )


def test_workload_update_that_keeps_the_template_is_allowed_even_if_it_breaks_a_rule() -> None:
    # A workload admitted before the webhook (or a rule) existed must still accept metadata
    # updates: the garbage collector and finalizer removal go through UPDATE.
    bad = template({CANONICAL: "HLS"}, [HALF_CPU])
    request = workload_request(WORKLOAD_KINDS[0], bad, operation="UPDATE", old_template=bad)
    assert decide(request) == Decision(allowed=True)


def test_workload_update_that_changes_the_template_is_validated() -> None:
    request = workload_request(
        WORKLOAD_KINDS[0],
        template({CANONICAL: "HLS"}, [HALF_CPU]),
        operation="UPDATE",
        old_template=template(None, [HALF_CPU]),
    )
    assert decide(request).message == f"spec.template: {HLS_RULE_BROKEN}"


def test_workload_level_may_change_on_update() -> None:
    request = workload_request(
        WORKLOAD_KINDS[0],
        template({CANONICAL: "BE"}, [GUARANTEED]),
        operation="UPDATE",
        old_template=template({CANONICAL: "HLS"}, [GUARANTEED]),
    )
    assert decide(request).allowed


@pytest.mark.parametrize("kind_entry", WORKLOAD_KINDS, ids=KIND_IDS)
def test_workload_without_a_template_is_left_to_the_api_server(kind_entry: tuple) -> None:
    request = workload_request(kind_entry, template(None, []))
    request["object"]["spec"] = {}
    assert decide(request) == Decision(allowed=True)


def test_malformed_template_is_named_by_its_path() -> None:
    request = workload_request(
        WORKLOAD_KINDS[5],
        {"metadata": {"annotations": {CANONICAL: "LS"}}, "spec": {"containers": "web"}},
    )
    decision = decide(request)
    assert (decision.reason, decision.status_code) == ("malformed-request", 400)
    assert (
        decision.message
        == 'malformed request: spec.jobTemplate.spec.template.spec.containers: expected an array, got "web"'
    )


@pytest.mark.parametrize(
    ("group", "kind"),
    [
        ("", "Service"),
        ("", "PodTemplate"),
        ("apps", "ControllerRevision"),
        ("example.com", "Deployment"),
        ("", "ConfigMap"),
    ],
)
def test_objects_tidal_does_not_review_are_allowed(group: str, kind: str) -> None:
    request = {
        "uid": "u",
        "operation": "CREATE",
        "kind": {"group": group, "version": "v1", "kind": kind},
        "object": {"spec": 1},
    }
    assert decide(request) == Decision(allowed=True)
