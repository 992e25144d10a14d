"""Admission webhook, property-based: whatever arrives, the answer is a well-formed review.

10,000 generated requests (plus 500 quantities): 5,500 pod creations with random containers,
quantities, annotations, tolerations and affinities; 1,500 workloads and pod updates; 3,000
arbitrary JSON bodies, most of them valid reviews with one or two parts replaced or deleted.
This module takes about 35 s on two cores, most of it in Hypothesis' own generation: pods are
assembled from pre-built fragments to keep it there. ``database=None``: no example database is
written into the working tree; a failure prints the falsifying example.
"""
from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tidal.manager.admission.decision import DenialReason
from tidal.api.quantities import QuantityError, parse_quantity
from tidal.manager.admission.review import review
from tidal.api.qos import qos_level_of

CANONICAL = "colocation.tidal.io/qos-level"
OPENFUYAO = "openfuyao.com/qos-level"
VOLCANO = "volcano.sh/qos-level"
BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
TAINT = "colocation.tidal.io/offline-evicting"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
NODE_LABELS = ("colocation.tidal.io/colocation", "colocation.tidal.io/oversubscription")
PRIORITY = {"tidal-hls": 100000, "tidal-ls": 50000, "tidal-be": -100}
REASONS = {reason.value for reason in DenialReason}
OPERATIONS = {"add", "remove", "replace"}

PROPERTY = settings(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- Strategies ---------------------------------------------------------------------------------
# Pods are assembled from pre-built fragments drawn with sampled_from: a handful of draws per pod
# instead of hundreds keeps 10,000 examples within seconds, while the fragments still cover every
# rule, dialect and odd value. Fragments are deep-copied so that no example shares (or, in the
# corruption test, mutates) another's objects.

ABSENT = object()  # a sampled "leave this field out"

json_scalars = (
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=4)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=5,
)

QUANTITIES = [
    *[
        "0",
        "1",
        "2",
        "4",
        "500m",
        "1500m",
        "2000m",
        "1.5",
        "64Mi",
        "1Gi",
        "2Gi",
        "1e3",
        "100M",
        "1000",
        "2k",
        "1n",
    ],
    *[
        "1e999",
        "0x10",
        "-1",
        "1.5.5",
        "",
        "١",
        "NaN",
        "1e-999",
        "1e99999",
        "9300000000000000",
        " 1 ",
        "1Ei",
    ],
    *["∞", "1 Gi", "+.5", "5.", "1" * 70],
    *[2, 0.5, -3, 2**70, float("nan"), float("inf"), None, True, [], {}],
]
quantities = st.sampled_from(QUANTITIES) | st.text(max_size=4)
RESOURCE_NAMES = ["cpu", "memory", BATCH_CPU, BATCH_MEMORY, "ephemeral-storage"]
RESOURCE_MAPS = [
    ABSENT,
    {},
    {"cpu": "1", "memory": "1Gi"},
    {"cpu": "2", "memory": "2Gi"},
    {"cpu": "500m", "memory": "64Mi"},
    {"cpu": "500m"},
    {"memory": "1Gi"},
    {"cpu": "1.5", "memory": "1.5Gi"},
    {BATCH_CPU: "1000", BATCH_MEMORY: "1073741824"},
    {"cpu": "1", BATCH_CPU: "1000"},
    {"cpu": "2", BATCH_CPU: "1000"},
    {"memory": "1Gi", BATCH_MEMORY: "1Gi"},
    {"cpu": "1", "ephemeral-storage": "1Gi"},
    {"cpu": None},
    None,
]
GUARANTEED_VALUES = [
    {"cpu": "1", "memory": "1Gi"},
    {"cpu": "2000m", "memory": "512Mi"},
    {"cpu": "3", "memory": "1e9"},
]
CONTAINER_NAMES = ["web", "db", "side", "a/b~c", ""]


# Strategies are built once: constructing one inside a composite on every draw is what is slow.
_quarter = st.integers(0, 3)
_one_or_two = st.integers(1, 2)
_resource_names = st.sampled_from(RESOURCE_NAMES)
_resource_map_fragments = st.sampled_from(RESOURCE_MAPS)
_container_names = st.sampled_from(CONTAINER_NAMES)
_container_shapes = st.integers(0, 2)
_guaranteed_values = st.sampled_from(GUARANTEED_VALUES)
_fifth = st.integers(0, 4)


@st.composite
def resource_maps(draw: st.DrawFn) -> Any:
    if draw(_quarter) == 0:  # now and then a fuzzed map, with any quantity
        return {draw(_resource_names): draw(quantities) for _ in range(draw(_one_or_two))}
    fragment = draw(_resource_map_fragments)
    return fragment if fragment is ABSENT else copy.deepcopy(fragment)


_resource_maps = resource_maps()


@st.composite
def containers(draw: st.DrawFn) -> dict[str, Any]:
    item: dict[str, Any] = {"name": draw(_container_names)}
    shape = draw(_container_shapes)
    if shape == 0:  # Guaranteed, whole CPUs: valid at every level
        values = draw(_guaranteed_values)
        item["resources"] = {"requests": dict(values), "limits": dict(values)}
    elif shape == 1:
        resources = {}
        for map_name in ("requests", "limits"):
            value = draw(_resource_maps)
            if value is not ABSENT:
                resources[map_name] = value
        item["resources"] = resources
    if draw(_fifth) == 0:
        item["restartPolicy"] = "Always"
    return item


ANNOTATION_SETS = [
    *(
        {CANONICAL: level}
        for level in ("HLS", "LS", "BE", "HLS", "LS", "BE", " LS ", "hls", "gold", "")
    ),
    *({OPENFUYAO: level} for level in ("HLS", "LS", "BE", "LC")),
    *({VOLCANO: level} for level in ("LC", "HLS", "LS", "BE", "-1", "0", "7", "x")),
    {CANONICAL: "BE", VOLCANO: "LC"},
    {OPENFUYAO: "BE", VOLCANO: "-1"},
    {OPENFUYAO: "HLS", VOLCANO: "BE"},
    {"app": "web"},
    {},
    ABSENT,
]
COLOCATION = {"key": NODE_LABELS[0], "operator": "In", "values": ["true"]}
OVERSUBSCRIPTION = {"key": NODE_LABELS[1], "operator": "In", "values": ["true"]}
ZONE = {"key": "zone", "operator": "In", "values": ["a"]}
NODE_NAME = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
AFFINITIES = [
    ABSENT,
    {},
    {"podAntiAffinity": {}},
    {"nodeAffinity": {}},
    {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
    {"nodeAffinity": {REQUIRED: {}}},
    {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": []}}},
    {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{}]}}},
    {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [ZONE]}]}}},
    {
        "nodeAffinity": {
            REQUIRED: {
                "nodeSelectorTerms": [{"matchFields": [NODE_NAME]}, {"matchExpressions": []}]
            }
        }
    },
    {
        "nodeAffinity": {
            REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [OVERSUBSCRIPTION]}, {}]}
        }
    },
    {
        "nodeAffinity": {
            REQUIRED: {
                "nodeSelectorTerms": [{"matchExpressions": [COLOCATION, ZONE, OVERSUBSCRIPTION]}]
            }
        }
    },
    {
        "nodeAffinity": {
            REQUIRED: {
                "nodeSelectorTerms": [{"matchExpressions": [{**COLOCATION, "operator": "NotIn"}]}]
            }
        }
    },
]
TOLERATION_LISTS = [
    ABSENT,
    [],
    [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
    [{"key": TAINT, "operator": "Exists"}],
    [{"operator": "Exists"}],
    [{"key": TAINT, "operator": "Equal", "value": "", "effect": "NoSchedule"}],
    [
        {"key": "other", "operator": "Exists", "effect": "NoExecute"},
        {"key": TAINT, "operator": "Exists", "effect": "NoExecute"},
    ],
]
SPEC_FIELDS = {
    "schedulerName": [ABSENT, "default-scheduler", "volcano", "custom"],
    "priorityClassName": [ABSENT, "", "tidal-be", "tidal-hls", "high"],
    "priority": [ABSENT, 0, -100, 50000, 100000, 7],
    "preemptionPolicy": [ABSENT, "Never", "PreemptLowerPriority"],
    "tolerations": TOLERATION_LISTS,
    "affinity": AFFINITIES,
    "resources": [
        ABSENT,
        ABSENT,
        ABSENT,
        {"limits": {"cpu": "1"}},
        {"requests": {"memory": "1Gi"}},
        {},
    ],
}


_container_lists = st.lists(containers(), max_size=3)
_init_container_lists = st.lists(containers(), min_size=1, max_size=2)
_spec_fields = {field: st.sampled_from(choices) for field, choices in SPEC_FIELDS.items()}
_annotation_sets = st.sampled_from(ANNOTATION_SETS)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(_container_lists)}
    if draw(_quarter) == 0:
        spec["initContainers"] = draw(_init_container_lists)
    for field, choices in _spec_fields.items():
        value = draw(choices)
        if value is not ABSENT:
            spec[field] = copy.deepcopy(value)
    metadata: dict[str, Any] = {"name": "p"}
    annotations = draw(_annotation_sets)
    if annotations is not ABSENT:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


uids = st.sampled_from(["705ab4f5-6393-11e8-b7cc-42010a800002", "", "u"]) | st.text(max_size=4)


def envelope(request: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def pod_create(obj: dict[str, Any], uid: str = "u") -> dict[str, Any]:
    return envelope(
        {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "object": obj,
        }
    )


# --- Assertions ---------------------------------------------------------------------------------


def request_of(body: Any) -> Any:
    return body.get("request") if isinstance(body, dict) else None


def assert_well_formed(body: Any, response: Any) -> list[dict[str, Any]]:
    """Checks the answer's shape; returns the decoded patch (empty when none)."""
    assert isinstance(response, dict) and set(response) == {"apiVersion", "kind", "response"}
    assert (response["apiVersion"], response["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    inner = response["response"]
    request = request_of(body)
    expected_uid = (
        request["uid"] if isinstance(request, dict) and isinstance(request.get("uid"), str) else ""
    )
    assert inner["uid"] == expected_uid
    assert isinstance(inner["allowed"], bool)
    assert set(inner) <= {"uid", "allowed", "status", "patchType", "patch", "warnings"}
    for warning in inner.get("warnings", []):
        assert isinstance(warning, str)
    json.dumps(response)  # serialisable as it is
    if not inner["allowed"]:
        status = inner["status"]
        assert set(status) == {"code", "message", "reason"}
        assert status["reason"] in REASONS and status["reason"] != "internal-error", status
        assert (
            status["code"] in (400, 403)
            and isinstance(status["message"], str)
            and status["message"]
        )
        assert "patch" not in inner and "patchType" not in inner
        return []
    assert "status" not in inner
    if "patch" not in inner:
        assert "patchType" not in inner
        return []
    assert inner["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(inner["patch"], validate=True))
    assert isinstance(ops, list) and ops
    for op in ops:
        assert op["op"] in OPERATIONS and isinstance(op["path"], str) and op["path"].startswith("/")
        assert ("value" in op) == (op["op"] != "remove")
    return ops


def native_or_batch_quantities_are_consistent(spec: dict[str, Any]) -> None:
    for item in spec.get("containers", []) + spec.get("initContainers", []):
        resources = item.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        assert not ({"cpu", "memory"} & (set(requests) | set(limits))), resources
        for batch in (BATCH_CPU, BATCH_MEMORY):
            if batch in requests or batch in limits:
                assert parse_quantity(requests[batch]) == parse_quantity(limits[batch])


def assert_follows_the_scheduling_contract(pod: dict[str, Any]) -> None:
    level = qos_level_of(pod["metadata"]["annotations"])
    spec = pod["spec"]
    assert spec["schedulerName"] == "volcano"
    assert (
        spec["priority"] == PRIORITY[spec["priorityClassName"]]
        and spec["priorityClassName"] == f"tidal-{level.value.lower()}"
    )
    if level == "BE":
        native_or_batch_quantities_are_consistent(spec)
        for node_term in spec["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]:
            if node_term.get("matchExpressions") or node_term.get("matchFields"):
                keys = {
                    e["key"]
                    for e in node_term["matchExpressions"]
                    if e["operator"] == "In" and e["values"] == ["true"]
                }
                # only oversubscription is required (a pod of the earlier rule also has colocation)
                assert NODE_LABELS[1] in keys
    else:
        assert any(
            t.get("operator") == "Exists"
            and t.get("key") in (None, "", TAINT)
            and t.get("effect") in (None, "", "NoSchedule")
            for t in spec["tolerations"]
        )


# --- Properties ---------------------------------------------------------------------------------


@settings(PROPERTY, max_examples=5_500)
@given(obj=pods(), uid=uids)
def test_any_pod_creation_gets_a_well_formed_answer_whose_patch_applies_and_is_idempotent(
    obj: dict, uid: str
) -> None:
    body = pod_create(obj, uid)
    before = copy.deepcopy(body)
    response = review(body)
    assert body == before, "review must not modify the request"
    ops = assert_well_formed(body, response)
    if not response["response"]["allowed"]:
        return
    patched = jsonpatch.apply_patch(obj, ops)
    assert review(pod_create(patched, uid))["response"] == {"uid": uid, "allowed": True}, (
        "reinvocation changes nothing"
    )
    if qos_level_of(obj["metadata"].get("annotations")) is None:
        assert ops == [], "a pod without QoS level passes untouched"
    else:
        assert_follows_the_scheduling_contract(patched)


WORKLOADS = [
    ({"group": "apps", "version": "v1", "kind": "Deployment"}, lambda t: {"template": t}),
    ({"group": "apps", "version": "v1", "kind": "StatefulSet"}, lambda t: {"template": t}),
    ({"group": "apps", "version": "v1", "kind": "DaemonSet"}, lambda t: {"template": t}),
    ({"group": "apps", "version": "v1", "kind": "ReplicaSet"}, lambda t: {"template": t}),
    ({"group": "batch", "version": "v1", "kind": "Job"}, lambda t: {"template": t}),
    (
        {"group": "batch", "version": "v1", "kind": "CronJob"},
        lambda t: {"jobTemplate": {"spec": {"template": t}}},
    ),
    ({"group": "", "version": "v1", "kind": "Pod"}, None),
]


@settings(PROPERTY, max_examples=1_500)
@given(
    workload=st.sampled_from(WORKLOADS),
    new=pods(),
    old=pods(),
    operation=st.sampled_from(["CREATE", "UPDATE", "DELETE"]),
    dry_run=st.booleans(),
    uid=uids,
)
def test_workloads_and_pod_updates_get_a_well_formed_answer_without_patch(
    workload: tuple, new: dict, old: dict, operation: str, dry_run: bool, uid: str
) -> None:
    kind, build = workload
    if build is None and operation == "CREATE":
        operation = "UPDATE"  # pod creations have their own property
    wrap = (
        (lambda p: p)
        if build is None
        else (
            lambda p: {
                "kind": kind["kind"],
                "spec": build({"metadata": p["metadata"], "spec": p["spec"]}),
            }
        )
    )
    request = {
        "uid": uid,
        "kind": kind,
        "operation": operation,
        "dryRun": dry_run,
        "object": wrap(new),
        "oldObject": wrap(old),
    }
    if operation == "DELETE":
        request["object"] = None
    body = envelope(request)
    response = review(body)
    assert assert_well_formed(body, response) == []


WRONG_VALUES = [
    None,
    "",
    "x",
    0,
    -1,
    2**70,
    1.5,
    float("nan"),
    True,
    [],
    {},
    [None],
    {"a": None},
    "1e999",
    "\ud800",
]
_wrong_values = st.sampled_from(WRONG_VALUES)
# Mostly the cheap pre-built wrong values; arbitrary JSON a quarter of the time.
_replacements = st.one_of(_wrong_values, _wrong_values, _wrong_values, json_values)
_corruption_count = st.integers(1, 2)


def places_in(node: Any, found: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Every (container, key or index) in a JSON document, depth first."""
    if isinstance(node, dict):
        for key, value in node.items():
            found.append((node, key))
            places_in(value, found)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            found.append((node, index))
            places_in(item, found)
    return found


@st.composite
def corrupted_reviews(draw: st.DrawFn) -> Any:
    """A valid pod review with one or two places replaced by other JSON, or deleted."""
    body: Any = pod_create(draw(pods()), draw(uids))
    for _ in range(draw(_corruption_count)):
        places = places_in(body, [(None, None)])  # (None, None): the whole body
        parent, key = places[draw(st.integers(0, len(places) - 1))]
        replacement = copy.deepcopy(draw(_replacements))  # later rounds may edit inside it
        if parent is None:
            body = replacement
        elif isinstance(parent, dict) and draw(st.booleans()):
            del parent[key]
        else:
            parent[key] = replacement
    return body


@settings(PROPERTY, max_examples=3_000)
@given(body=st.one_of(corrupted_reviews(), json_values))
def test_any_json_gets_a_well_formed_answer(body: Any) -> None:
    before = copy.deepcopy(body)
    response = review(body)
    assert body == before or body != body  # NaN never equals itself
    ops = assert_well_formed(body, response)
    if ops:
        jsonpatch.apply_patch(body["request"]["object"], ops)


@settings(PROPERTY, max_examples=500)
@given(value=quantities)
def test_quantities_parse_or_fail_with_a_quantity_error_only(value: Any) -> None:
    try:
        parsed = parse_quantity(value)
    except QuantityError as error:
        assert str(error)
    else:
        assert parsed >= 0 and parsed.is_finite()
