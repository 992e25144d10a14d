"""Admission webhook: the rule of each QoS level, every annotation dialect, the exact messages."""

from __future__ import annotations

from typing import Any

import pytest
from tidal.manager.admission.decision import Decision
from tidal.manager.admission.review import decide

CANONICAL = "colocation.tidal.io/qos-level"
OPENFUYAO = "openfuyao.com/qos-level"
OPENFUYAO_CAPITALISED = "openfuyao.com/QoS-level"  # as openFuyao's NUMA steps write it
VOLCANO = "volcano.sh/qos-level"
BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
QUANTITY_HINT = "(expected a number with an optional suffix such as m, k, M, G, Ki, Mi, Gi or e3)"

GUARANTEED = {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}


def container(
    name: str = "web", *, requests: dict | None = None, limits: dict | None = None, **fields: Any
) -> dict:
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {
        "name": name,
        "image": "busybox",
        **({"resources": resources} if resources else {}),
        **fields,
    }


def pod(
    annotations: dict | None,
    containers: list[dict],
    init_containers: list[dict] | None = None,
    **spec: Any,
) -> dict:
    metadata: dict[str, Any] = {"name": "p", "namespace": "default"}
    if annotations is not None:
        metadata["annotations"] = annotations
    pod_spec: dict[str, Any] = {"containers": containers, **spec}
    if init_containers is not None:
        pod_spec["initContainers"] = init_containers
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def create(obj: dict) -> Decision:
    return decide(
        {
            "uid": "u",
            "operation": "CREATE",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "object": obj,
        }
    )


def assert_denied(decision: Decision, reason: str, message: str) -> None:
    assert (decision.allowed, decision.reason, decision.message, decision.patch) == (
        False,
        reason,
        message,
        (),
    )
    assert decision.status_code == 403


# --- HLS --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "containers",
    [
        pytest.param([container(**GUARANTEED)], id="requests-equal-limits-whole-cpus"),
        pytest.param(
            [container(limits={"cpu": "2", "memory": "1Gi"})],
            id="limits-only-requests-default-to-them",
        ),
        pytest.param(
            [
                container(
                    requests={"cpu": "1000m", "memory": "1024Mi"},
                    limits={"cpu": "1", "memory": "1Gi"},
                )
            ],
            id="equal-by-value-not-spelling",
        ),
        pytest.param(
            [
                container(
                    requests={"cpu": "2", "memory": "1Gi", "ephemeral-storage": "1Gi"},
                    limits=GUARANTEED["limits"],
                )
            ],
            id="other-resources-are-not-hls-business",
        ),
    ],
)
def test_hls_pod_with_guaranteed_whole_cpu_containers_is_allowed(containers: list[dict]) -> None:
    assert create(pod({CANONICAL: "HLS"}, containers)).allowed


@pytest.mark.parametrize(
    ("containers", "init_containers", "message"),
    [
        pytest.param(
            [
                container(
                    requests={"cpu": "500m", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"}
                )
            ],
            None,
            'container "web": HLS requires requests.cpu == limits.cpu (got 500m / 1)',
            id="cpu-request-below-limit",
        ),
        pytest.param(
            [
                container(
                    requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1", "memory": "2Gi"}
                )
            ],
            None,
            'container "web": HLS requires requests.memory == limits.memory (got 1Gi / 2Gi)',
            id="memory-request-below-limit",
        ),
        pytest.param(
            [container(requests={"cpu": "2", "memory": "1Gi"})],
            None,
            'container "web": HLS requires requests.cpu == limits.cpu (got 2 / unset); '
            'container "web": HLS requires requests.memory == limits.memory (got 1Gi / unset)',
            id="no-limits",
        ),
        pytest.param(
            [container()],
            None,
            'container "web": HLS requires requests.cpu == limits.cpu (got unset / unset); '
            'container "web": HLS requires requests.memory == limits.memory (got unset / unset)',
            id="no-resources",
        ),
        pytest.param(
            [
                container(
                    requests={"cpu": "1500m", "memory": "1Gi"},
                    limits={"cpu": "1500m", "memory": "1Gi"},
                )
            ],
            None,
            'container "web": HLS requires limits.cpu to be a whole number of CPUs, at least 1 (got 1500m)',
            id="fractional-cpus",
        ),
        pytest.param(
            [container(limits={"cpu": "1.9999", "memory": "1Gi"})],
            None,
            'container "web": HLS requires limits.cpu to be a whole number of CPUs, at least 1 (got 1.9999)',
            id="almost-whole-cpus",
        ),
        pytest.param(
            [
                container(
                    requests={"cpu": "0", "memory": "1Gi"}, limits={"cpu": "0", "memory": "1Gi"}
                )
            ],
            None,
            'container "web": HLS requires limits.cpu to be a whole number of CPUs, at least 1 (got 0)',
            id="zero-cpus",
        ),
        pytest.param(
            [container(requests={"cpu": "1500m", "memory": "1Gi"})],
            None,
            'container "web": HLS requires requests.cpu == limits.cpu (got 1500m / unset); '
            'container "web": HLS requires requests.cpu to be a whole number of CPUs, at least 1 (got 1500m); '
            'container "web": HLS requires requests.memory == limits.memory (got 1Gi / unset)',
            id="every-violation-reported",
        ),
        pytest.param(
            [container(**GUARANTEED)],
            [container("setup", requests={"cpu": "100m", "memory": "64Mi"})],
            'init container "setup": HLS requires requests.cpu == limits.cpu (got 100m / unset); '
            'init container "setup": HLS requires requests.cpu to be a whole number of CPUs, at least 1 (got 100m); '
            'init container "setup": HLS requires requests.memory == limits.memory (got 64Mi / unset)',
            id="init-containers-included",
        ),
        pytest.param(
            [
                container("a", requests={"cpu": "500m"}, limits={"cpu": "1", "memory": "1Gi"}),
                container("b", **GUARANTEED),
            ],
            [],
            'container "a": HLS requires requests.cpu == limits.cpu (got 500m / 1)',
            id="names-the-container-that-breaks-it",
        ),
        pytest.param(
            [container(limits={"cpu": "1.5.5", "memory": "1Gi"})],
            None,
            f'container "web": limits.cpu: "1.5.5" is not a quantity {QUANTITY_HINT}',
            id="malformed-quantity-reported-once",
        ),
        pytest.param(
            [
                container(
                    requests={"cpu": "-1", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"}
                )
            ],
            None,
            'container "web": requests.cpu: "-1" is negative',
            id="negative-quantity",
        ),
        pytest.param(
            [
                {
                    "image": "busybox",
                    "resources": {
                        "requests": {"cpu": "500m"},
                        "limits": {"cpu": "1", "memory": "1Gi"},
                    },
                }
            ],
            None,
            "container containers[0]: HLS requires requests.cpu == limits.cpu (got 500m / 1)",
            id="unnamed-container-named-by-position",
        ),
    ],
)
def test_hls_pod_breaking_the_rule_is_denied_with_every_violation(
    containers: list[dict], init_containers: list[dict] | None, message: str
) -> None:
    assert_denied(create(pod({CANONICAL: "HLS"}, containers, init_containers)), "hls-rule", message)


# --- LS ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("containers", "init_containers"),
    [
        pytest.param(
            [container(requests={"cpu": "100m", "memory": "128Mi"})],
            None,
            id="burstable-requests-only",
        ),
        pytest.param([container(**GUARANTEED)], None, id="guaranteed"),
        pytest.param(
            [
                container(
                    requests={"cpu": "100m", "memory": "128Mi"},
                    limits={"cpu": "2", "memory": "1Gi"},
                )
            ],
            None,
            id="requests-below-limits",
        ),
        pytest.param(
            [container(limits={"cpu": "1", "memory": "1Gi"})],
            None,
            id="limits-only-requests-default-to-them",
        ),
        pytest.param(
            [container(requests={"cpu": "100m", "memory": "128Mi"})],
            [container("setup")],
            id="ordinary-init-container-needs-no-requests",
        ),
    ],
)
def test_ls_pod_with_cpu_and_memory_requests_is_allowed(
    containers: list[dict], init_containers: list[dict] | None
) -> None:
    assert create(pod({CANONICAL: "LS"}, containers, init_containers)).allowed


@pytest.mark.parametrize(
    ("containers", "init_containers", "message"),
    [
        pytest.param(
            [container()],
            None,
            'container "web": LS requires requests.cpu to be set; container "web": LS requires requests.memory to be set',
            id="no-resources",
        ),
        pytest.param(
            [container(requests={"cpu": "100m"})],
            None,
            'container "web": LS requires requests.memory to be set',
            id="no-memory-request",
        ),
        pytest.param(
            [container(requests={"memory": "1Gi"}, limits={"memory": "1Gi"})],
            None,
            'container "web": LS requires requests.cpu to be set',
            id="no-cpu-request",
        ),
        pytest.param(
            [container(requests={"cpu": "100m", "memory": "128Mi"})],
            [container("proxy", restartPolicy="Always")],
            'init container "proxy": LS requires requests.cpu to be set; '
            'init container "proxy": LS requires requests.memory to be set',
            id="sidecar-init-container-runs-with-the-app",
        ),
        pytest.param(
            [container(requests={"cpu": "100m", "memory": "128Mi"})],
            [container("setup", limits={"cpu": "0x10"})],
            f'init container "setup": limits.cpu: "0x10" is not a quantity {QUANTITY_HINT}',
            id="init-container-quantities-must-parse",
        ),
        pytest.param(
            [container(requests={"cpu": "1e999", "memory": "128Mi"})],
            None,
            'container "web": requests.cpu: "1e999" is too large',
            id="huge-quantity",
        ),
    ],
)
def test_ls_pod_breaking_the_rule_is_denied_with_every_violation(
    containers: list[dict], init_containers: list[dict] | None, message: str
) -> None:
    assert_denied(create(pod({CANONICAL: "LS"}, containers, init_containers)), "ls-rule", message)


# --- Online pods and oversold resources (issue 20) --------------------------------------------

BATCH_RULE = "oversold batch resources are for BE pods only, online pods use native"


@pytest.mark.parametrize(
    ("level", "reason", "containers", "init_containers", "message"),
    [
        pytest.param(
            "HLS",
            "hls-rule",
            [
                container(
                    requests={**GUARANTEED["requests"], BATCH_CPU: "2000"},
                    limits={**GUARANTEED["limits"], BATCH_CPU: "2000"},
                )
            ],
            None,
            f'container "web": HLS requires requests.{BATCH_CPU} to be unset: {BATCH_RULE} '
            'requests.cpu (got 2000); '
            f'container "web": HLS requires limits.{BATCH_CPU} to be unset: {BATCH_RULE} '
            "limits.cpu (got 2000)",
            id="hls-batch-cpu",
        ),
        pytest.param(
            "HLS",
            "hls-rule",
            [container(**GUARANTEED)],
            [container("setup", limits={**GUARANTEED["limits"], BATCH_MEMORY: "1Gi"})],
            f'init container "setup": HLS requires limits.{BATCH_MEMORY} to be unset: '
            f"{BATCH_RULE} limits.memory (got 1Gi)",
            id="hls-init-batch-memory",
        ),
        pytest.param(
            "LS",
            "ls-rule",
            [container(requests={"cpu": "500m", "memory": "256Mi", BATCH_MEMORY: "1Gi"})],
            None,
            f'container "web": LS requires requests.{BATCH_MEMORY} to be unset: {BATCH_RULE} '
            "requests.memory (got 1Gi)",
            id="ls-batch-memory",
        ),
        pytest.param(
            "LS",
            "ls-rule",
            [container(requests={BATCH_CPU: "500", BATCH_MEMORY: "268435456"},
                       limits={BATCH_CPU: "500", BATCH_MEMORY: "268435456"})],
            None,
            f'container "web": LS requires requests.{BATCH_CPU} to be unset: {BATCH_RULE} '
            'requests.cpu (got 500); '
            f'container "web": LS requires limits.{BATCH_CPU} to be unset: {BATCH_RULE} '
            'limits.cpu (got 500); '
            f'container "web": LS requires requests.{BATCH_MEMORY} to be unset: {BATCH_RULE} '
            'requests.memory (got 268435456); '
            f'container "web": LS requires limits.{BATCH_MEMORY} to be unset: {BATCH_RULE} '
            'limits.memory (got 268435456); '
            'container "web": LS requires requests.cpu to be set; '
            'container "web": LS requires requests.memory to be set',
            id="ls-only-batch",
        ),
    ],
)
def test_online_pod_asking_for_batch_resources_is_denied(
    level: str, reason: str, containers: list[dict], init_containers: list[dict] | None,
    message: str,
) -> None:
    assert_denied(create(pod({CANONICAL: level}, containers, init_containers)), reason, message)


def test_volcano_hls_pod_asking_for_batch_resources_is_denied_as_ls() -> None:
    decision = create(pod({VOLCANO: "HLS"}, [container(
        requests={"cpu": "1", "memory": "1Gi", BATCH_CPU: "1000"},
        limits={"cpu": "1", "memory": "1Gi", BATCH_CPU: "1000"},
    )]))
    assert (decision.allowed, decision.reason) == (False, "ls-rule")
    assert f"LS requires requests.{BATCH_CPU} to be unset" in decision.message


def test_pod_without_qos_level_may_ask_for_batch_resources() -> None:
    # DESIGN.md: a pod without any QoS annotation is left alone.
    batch = {BATCH_CPU: "500", BATCH_MEMORY: "268435456"}
    decision = create(pod(None, [container(requests=batch, limits=batch)]))
    assert decision.allowed and decision.patch == ()


# --- BE ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("containers", "init_containers"),
    [
        pytest.param(
            [
                container(
                    requests={"cpu": "500m", "memory": "1Gi"}, limits={"cpu": "1", "memory": "2Gi"}
                )
            ],
            None,
            id="native-only",
        ),
        pytest.param([container()], None, id="no-resources"),
        pytest.param(
            [container(requests={BATCH_CPU: "500"}, limits={BATCH_CPU: "500"})],
            None,
            id="batch-only",
        ),
        pytest.param(
            [container(limits={"cpu": "2", BATCH_CPU: "2000"})],
            None,
            id="batch-consistent-with-native-limit",
        ),
        pytest.param(
            [container(requests={"cpu": "2", BATCH_CPU: "2k"})],
            None,
            id="batch-consistent-by-value",
        ),
        pytest.param(
            [container(requests={"cpu": "500m", BATCH_CPU: "500"})],
            None,
            id="batch-consistent-with-native-request",
        ),
        pytest.param(
            [container(limits={"memory": "1Gi", BATCH_MEMORY: "1073741824"})],
            None,
            id="batch-memory-in-bytes",
        ),
        pytest.param(
            [container()], [container("setup", limits={"cpu": "1"})], id="native-init-container"
        ),
    ],
)
def test_be_pod_with_parsable_consistent_quantities_is_allowed(
    containers: list[dict], init_containers: list[dict] | None
) -> None:
    assert create(pod({CANONICAL: "BE"}, containers, init_containers)).allowed


@pytest.mark.parametrize(
    ("containers", "init_containers", "spec", "message"),
    [
        pytest.param(
            [container(limits={"cpu": "2", BATCH_CPU: "1500"})],
            None,
            {},
            f'container "web": BE requires limits.{BATCH_CPU} == limits.cpu in millicores (got 1500 / 2 = 2000)',
            id="batch-cpu-conflicts-with-native-limit",
        ),
        pytest.param(
            [container(requests={"cpu": "500m", BATCH_CPU: "400"})],
            None,
            {},
            f'container "web": BE requires requests.{BATCH_CPU} == requests.cpu in millicores (got 400 / 500m = 500)',
            id="batch-cpu-conflicts-with-native-request",
        ),
        pytest.param(
            [
                container(
                    requests={"memory": "512Mi"}, limits={"memory": "1Gi", BATCH_MEMORY: "1000"}
                )
            ],
            None,
            {},
            f'container "web": BE requires limits.{BATCH_MEMORY} == limits.memory in bytes (got 1000 / 1Gi = 1073741824)',
            id="batch-memory-conflicts-with-native-limit",
        ),
        pytest.param(
            [container(requests={BATCH_CPU: "1000"}, limits={BATCH_CPU: "2000"})],
            None,
            {},
            f'container "web": BE requires requests.{BATCH_CPU} == limits.{BATCH_CPU} (got 1000 / 2000)',
            id="batch-request-differs-from-batch-limit",
        ),
        pytest.param(
            [container(requests={"cpu": "2"}, limits={"cpu": "1"})],
            None,
            {},
            'container "web": BE requires requests.cpu <= limits.cpu (got 2 / 1)',
            id="native-request-above-limit",
        ),
        pytest.param(
            [container(requests={BATCH_MEMORY: "lots"})],
            None,
            {},
            f'container "web": requests.{BATCH_MEMORY}: "lots" is not a quantity {QUANTITY_HINT}',
            id="malformed-batch-quantity",
        ),
        pytest.param(
            [container(limits={"cpu": "9300000000000000"})],
            None,
            {},
            'container "web": limits.cpu: "9300000000000000" is too large (more than 2**63-1 millicores)',
            id="cpu-beyond-int64-millicores",
        ),
        pytest.param(
            [container()],
            [container("setup", limits={"cpu": "1", BATCH_CPU: "1"})],
            {},
            f'init container "setup": BE requires limits.{BATCH_CPU} == limits.cpu in millicores (got 1 / 1 = 1000)',
            id="init-containers-included",
        ),
        pytest.param(
            [container()],
            None,
            {"resources": {"limits": {"cpu": "2", "memory": "1Gi"}}},
            f"pod: BE requires pod-level resources.limits.cpu to be unset, as it cannot be rewritten into {BATCH_CPU} "
            "(got 2); "
            f"pod: BE requires pod-level resources.limits.memory to be unset, as it cannot be rewritten into {BATCH_MEMORY} "
            "(got 1Gi)",
            id="pod-level-resources",
        ),
    ],
)
def test_be_pod_breaking_the_rule_is_denied_with_every_violation(
    containers: list[dict], init_containers: list[dict] | None, spec: dict, message: str
) -> None:
    assert_denied(
        create(pod({CANONICAL: "BE"}, containers, init_containers, **spec)), "be-rule", message
    )


# --- Annotations ------------------------------------------------------------------------------

PRIORITY_CLASS_LEVEL = {"tidal-hls": "HLS", "tidal-ls": "LS", "tidal-be": "BE"}


def admitted_level(annotations: dict[str, str]) -> str | None:
    """The level a pod valid for every level is mutated for, read from its PriorityClass."""
    decision = create(pod(annotations, [container(**GUARANTEED)]))
    assert decision.allowed, decision.message
    classes = [op["value"] for op in decision.patch if op["path"] == "/spec/priorityClassName"]
    return PRIORITY_CLASS_LEVEL[classes[0]] if classes else None


@pytest.mark.parametrize(
    ("annotations", "level"),
    [
        ({CANONICAL: "HLS"}, "HLS"),
        ({CANONICAL: "LS"}, "LS"),
        ({CANONICAL: "BE"}, "BE"),
        ({CANONICAL: " BE "}, "BE"),
        ({OPENFUYAO: "HLS"}, "HLS"),
        ({OPENFUYAO: "LS"}, "LS"),
        ({OPENFUYAO: "BE"}, "BE"),
        ({VOLCANO: "LC"}, "HLS"),
        ({VOLCANO: "HLS"}, "LS"),
        ({VOLCANO: "LS"}, "LS"),
        ({VOLCANO: "BE"}, "BE"),
        ({VOLCANO: "-1"}, "BE"),
        ({VOLCANO: "-10"}, "BE"),
        ({VOLCANO: "0"}, "LS"),
        ({VOLCANO: "2"}, "LS"),
        ({VOLCANO: "+3"}, "LS"),
        ({CANONICAL: "LS", VOLCANO: "BE", OPENFUYAO: "HLS"}, "LS"),
        ({OPENFUYAO: "BE", VOLCANO: "-1"}, "BE"),
        ({OPENFUYAO: "HLS", VOLCANO: "LC"}, "HLS"),
        ({OPENFUYAO_CAPITALISED: "HLS"}, "HLS"),
        ({OPENFUYAO_CAPITALISED: "LS"}, "LS"),
        ({OPENFUYAO_CAPITALISED: "BE"}, "BE"),
        ({OPENFUYAO_CAPITALISED: "BE", OPENFUYAO: "BE"}, "BE"),
        ({"example.com/qos-level": "BE"}, None),
        ({}, None),
    ],
)
def test_every_annotation_dialect_resolves_to_its_level(
    annotations: dict[str, str], level: str | None
) -> None:
    assert admitted_level(annotations) == level


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        (
            {CANONICAL: "gold"},
            'annotation "colocation.tidal.io/qos-level": invalid value "gold"; allowed: HLS, LS, BE',
        ),
        (
            {CANONICAL: "hls"},
            'annotation "colocation.tidal.io/qos-level": invalid value "hls"; allowed: HLS, LS, BE '
            "(values are case-sensitive)",
        ),
        (
            {CANONICAL: ""},
            'annotation "colocation.tidal.io/qos-level": invalid value ""; allowed: HLS, LS, BE',
        ),
        (
            {OPENFUYAO: "LC"},
            'annotation "openfuyao.com/qos-level": invalid value "LC"; allowed: HLS, LS, BE',
        ),
        (
            {VOLCANO: "high"},
            'annotation "volcano.sh/qos-level": invalid value "high"; '
            "allowed: LC, HLS, LS, BE, an integer (<0 means BE, >=0 means LS)",
        ),
        (
            {VOLCANO: "1.5"},
            'annotation "volcano.sh/qos-level": invalid value "1.5"; '
            "allowed: LC, HLS, LS, BE, an integer (<0 means BE, >=0 means LS)",
        ),
        (
            {OPENFUYAO: "HLS", VOLCANO: "BE"},
            'annotations disagree on the QoS level: "openfuyao.com/qos-level": "HLS" (means HLS) and '
            '"volcano.sh/qos-level": "BE" (means BE); set "colocation.tidal.io/qos-level" to one of HLS, LS, BE',
        ),
        (
            {OPENFUYAO: "LS", OPENFUYAO_CAPITALISED: "BE"},
            'annotations disagree on the QoS level: "openfuyao.com/qos-level": "LS" (means LS) and '
            '"openfuyao.com/QoS-level": "BE" (means BE); set "colocation.tidal.io/qos-level" to one of HLS, LS, BE',
        ),
        (
            {OPENFUYAO_CAPITALISED: "gold"},
            'annotation "openfuyao.com/QoS-level": invalid value "gold"; allowed: HLS, LS, BE',
        ),
    ],
)
def test_invalid_qos_annotation_is_denied_with_the_valid_values(
    annotations: dict[str, str], message: str
) -> None:
    assert_denied(
        create(pod(annotations, [container(**GUARANTEED)])), "invalid-qos-annotation", message
    )


def test_invalid_annotation_is_reported_before_resources_are_looked_at() -> None:
    decision = create(pod({CANONICAL: "gold"}, [container(limits={"cpu": "garbage"})]))
    assert decision.reason == "invalid-qos-annotation"


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(pod(None, [container(requests={"cpu": "garbage"})]), id="no-annotations"),
        pytest.param(
            pod({"app.kubernetes.io/name": "web"}, [container()]), id="unrelated-annotations"
        ),
        pytest.param({"metadata": {"name": "p"}, "spec": "whatever"}, id="spec-not-read"),
        pytest.param({"spec": {"containers": []}}, id="no-metadata"),
    ],
)
def test_pod_without_qos_annotation_passes_untouched(obj: dict) -> None:
    assert create(obj) == Decision(allowed=True)


def test_qos_annotation_that_is_not_a_string_is_a_malformed_request() -> None:
    decision = create(pod({CANONICAL: 1}, [container()]))  # type: ignore[dict-item]
    assert (decision.allowed, decision.reason, decision.status_code) == (
        False,
        "malformed-request",
        400,
    )
    assert decision.message == (
        'malformed request: metadata.annotations["colocation.tidal.io/qos-level"]: expected a string, got 1'
    )
