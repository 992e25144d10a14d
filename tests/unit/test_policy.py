"""tidal.api.policy: defaults, validation with field paths, round trips, and that the CRD generated
from it (tidal.api.policy_crd) defaults and validates as the model does."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import math
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tidal.crds import crd_manifests
from tidal.api.policy import (
    DEFAULT_POLICY_NAME,
    ColocationPolicy,
    CrossFieldRule,
    FieldSpec,
    PolicyValidationError,
    Predictor,
    PSIResource,
    ReportingMode,
    Watermark,
    cross_field_rules,
    field_specs,
    policy_manifest,
)

DEFAULT_SPEC = ColocationPolicy().to_spec()
FIELDS = {path: (spec, default) for path, spec, default in field_specs()}
RULES = list(cross_field_rules())


def spec_with(path: str, value: Any) -> dict[str, Any]:
    """A spec that sets only ``path`` (``spec.a.b``) to ``value``."""
    keys = path.split(".")[1:]
    spec: dict[str, Any] = {}
    node = spec
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return spec


def validation_errors(spec: Any) -> list[tuple[str, str]]:
    """(path, message) of every error from_spec reports; [] when the spec is valid."""
    try:
        ColocationPolicy.from_spec(spec)
    except PolicyValidationError as error:
        return [(e.path, e.message) for e in error.errors]
    return []


def value_at(policy: ColocationPolicy, path: str) -> Any:
    return dict((p, v) for p, _, v in field_specs(policy))[path]


# --- Defaults ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "design_default"),
    [
        ("spec.loadAwareScheduling.cpuThresholdPercent", 60),
        ("spec.loadAwareScheduling.memoryThresholdPercent", 60),
        ("spec.evictionWatermarks.cpu.highPercent", 80),
        ("spec.evictionWatermarks.cpu.lowPercent", 30),
        ("spec.evictionWatermarks.memory.highPercent", 60),
        ("spec.evictionWatermarks.memory.lowPercent", 30),
        ("spec.features.cpuBurst.loadHighPercent", 60),
        ("spec.features.cpuBurst.loadAlertPercent", 80),
        ("spec.features.cacheLimits.l3Percent.low", 20),
        ("spec.features.cacheLimits.l3Percent.mid", 30),
        ("spec.features.cacheLimits.l3Percent.high", 50),
        ("spec.features.cacheLimits.memoryBandwidthPercent.low", 20),
        ("spec.features.cacheLimits.memoryBandwidthPercent.mid", 30),
        ("spec.features.cacheLimits.memoryBandwidthPercent.high", 50),
        ("spec.features.psiInterference.resources", ["cpu", "memory"]),
        ("spec.features.psiInterference.avg10ThresholdPercent", 5.0),
        ("spec.overselling.ratioPercent", 60),
        # Not in DESIGN.md's table but named in the brief of the model.
        ("spec.overselling.predictor", "tidal"),
        ("spec.overselling.changeThresholdPercent", 10),
        ("spec.overselling.reportingMode", "extendedResources"),
    ],
)
def test_default_matches_design_table(path: str, design_default: Any) -> None:
    assert value_at(ColocationPolicy(), path) == design_default


@pytest.mark.parametrize(
    ("feature", "enabled"),
    [
        ("spec.loadAwareScheduling", True),
        ("spec.evictionWatermarks", True),
        ("spec.overselling", True),
        ("spec.features.cpuBurst", True),
        ("spec.features.memoryReclaim", True),
        ("spec.features.cacheLimits", False),
        ("spec.features.psiInterference", False),
        ("spec.features.numaAffinity", False),
        ("spec.features.egressBandwidth", False),
        ("spec.features.blockIO", False),
    ],
)
def test_only_features_that_need_no_special_hardware_are_on_by_default(
    feature: str, enabled: bool
) -> None:
    assert value_at(ColocationPolicy(), f"{feature}.enabled") is enabled


def test_default_policy_name_is_default() -> None:
    assert DEFAULT_POLICY_NAME == "default"
    assert policy_manifest()["metadata"]["name"] == "default"


def test_policy_manifest_holds_the_full_spec_under_the_tidal_api() -> None:
    manifest = policy_manifest()
    assert manifest["apiVersion"] == "colocation.tidal.io/v1alpha1"
    assert manifest["kind"] == "ColocationPolicy"
    assert manifest["spec"] == DEFAULT_SPEC


@pytest.mark.parametrize("spec", [None, {}], ids=["null", "empty"])
def test_missing_spec_gives_the_default_policy(spec) -> None:
    assert ColocationPolicy.from_spec(spec) == ColocationPolicy()


def test_partial_spec_keeps_the_defaults_of_every_other_field() -> None:
    policy = ColocationPolicy.from_spec({"evictionWatermarks": {"cpu": {"highPercent": 90}}})
    assert policy.eviction_watermarks.cpu == Watermark(high_percent=90, low_percent=30)
    expected = copy.deepcopy(DEFAULT_SPEC)
    expected["evictionWatermarks"]["cpu"]["highPercent"] = 90
    assert policy.to_spec() == expected


@pytest.mark.parametrize(
    "spec",
    [
        {"overselling": None},
        {"overselling": {"ratioPercent": None}},
        {"features": {"psiInterference": {"resources": None}}},
    ],
)
def test_null_counts_as_missing_like_the_api_server_prunes_it(spec) -> None:
    assert ColocationPolicy.from_spec(spec) == ColocationPolicy()


# --- Round trip -------------------------------------------------------------------------------


def test_default_spec_round_trips() -> None:
    assert ColocationPolicy.from_spec(DEFAULT_SPEC) == ColocationPolicy()


def test_to_spec_is_complete_json_data() -> None:
    spec = ColocationPolicy().to_spec()
    assert json.loads(json.dumps(spec)) == spec
    for path in FIELDS:
        node: Any = spec
        for key in path.split(".")[1:]:
            node = node[key]


def test_parsed_enums_are_python_enums() -> None:
    policy = ColocationPolicy.from_spec(
        {
            "overselling": {"predictor": "max", "reportingMode": "volcanoAnnotations"},
            "features": {"psiInterference": {"resources": ["io", "cpu"]}},
        }
    )
    assert policy.overselling.predictor is Predictor.MAX
    assert policy.overselling.reporting_mode is ReportingMode.VOLCANO_ANNOTATIONS
    assert policy.features.psi_interference.resources == (PSIResource.IO, PSIResource.CPU)


def test_integer_is_accepted_for_a_number_field_and_kept_as_float() -> None:
    policy = ColocationPolicy.from_spec(
        spec_with("spec.features.psiInterference.avg10ThresholdPercent", 7)
    )
    value = policy.features.psi_interference.avg10_threshold_percent
    assert value == 7.0 and isinstance(value, float)


def _strategy(cls: type) -> st.SearchStrategy:
    """Valid instances of one of the policy dataclasses, built from its FieldSpecs."""
    arguments = {}
    for f in dataclasses.fields(cls):
        spec = FieldSpec.of(f)
        if spec.kind == "boolean":
            arguments[f.name] = st.booleans()
        elif spec.kind == "integer":
            arguments[f.name] = st.integers(spec.minimum, spec.maximum)
        elif spec.kind == "number":
            arguments[f.name] = st.floats(spec.minimum, spec.maximum, allow_nan=False)
        elif spec.kind == "string":
            arguments[f.name] = st.sampled_from(spec.enum_type)
        elif spec.kind == "array":
            arguments[f.name] = st.lists(
                st.sampled_from(spec.enum_type), min_size=spec.min_items, unique=True
            ).map(tuple)
        else:
            arguments[f.name] = _strategy(spec.object_type)
    return (
        st.builds(cls, **arguments)
        .map(_order_rule_operands)
        .filter(lambda obj: all(rule.holds(obj) for rule in cls.RULES))
    )


def _order_rule_operands(obj: Any) -> Any:
    # Every cross-field rule so far is an ordering with its operands listed lowest first, so
    # sorting them makes nearly every draw valid; filtering alone would discard most draws.
    names = {FieldSpec.of(f).name: f.name for f in dataclasses.fields(obj)}
    for rule in type(obj).RULES:
        attributes = [names[operand] for operand in rule.operands]
        ordered = sorted(getattr(obj, attribute) for attribute in attributes)
        obj = dataclasses.replace(obj, **dict(zip(attributes, ordered, strict=True)))
    return obj


@given(_strategy(ColocationPolicy))
def test_any_valid_policy_round_trips_through_its_spec(policy: ColocationPolicy) -> None:
    spec = policy.to_spec()
    assert ColocationPolicy.from_spec(spec) == policy
    assert json.loads(json.dumps(spec)) == spec
    policy.validate()


# --- Ranges -----------------------------------------------------------------------------------

NUMERIC_FIELDS = [path for path, (spec, _) in FIELDS.items() if spec.kind in ("integer", "number")]


@pytest.mark.parametrize(
    ("path", "minimum", "maximum"),
    [
        ("spec.loadAwareScheduling.cpuThresholdPercent", 0, 100),
        ("spec.loadAwareScheduling.memoryThresholdPercent", 0, 100),
        ("spec.evictionWatermarks.cpu.highPercent", 0, 99),
        ("spec.evictionWatermarks.cpu.lowPercent", 0, 99),
        ("spec.evictionWatermarks.memory.highPercent", 0, 99),
        ("spec.evictionWatermarks.memory.lowPercent", 0, 99),
        ("spec.overselling.ratioPercent", 0, 100),
        ("spec.overselling.safetyMarginPercent", 0, 100),
        ("spec.overselling.changeThresholdPercent", 0, 100),
        ("spec.features.cpuBurst.loadHighPercent", 0, 100),
        ("spec.features.cpuBurst.loadAlertPercent", 0, 100),
        ("spec.features.psiInterference.avg10ThresholdPercent", 0, 100),
    ],
)
def test_design_ranges(path: str, minimum: int, maximum: int) -> None:
    spec, _ = FIELDS[path]
    assert (spec.minimum, spec.maximum) == (minimum, maximum)


def test_every_percentage_is_bounded_by_zero_and_a_hundred() -> None:
    for path in NUMERIC_FIELDS:
        if path.endswith("Percent") or ".cacheLimits." in path:
            spec, _ = FIELDS[path]
            assert spec.minimum >= 0, path
            assert spec.maximum <= 100, path


@pytest.mark.parametrize("path", NUMERIC_FIELDS)
def test_value_outside_range_is_rejected_with_its_path(path: str) -> None:
    spec, _ = FIELDS[path]
    for bad in (spec.minimum - 1, spec.maximum + 1):
        assert validation_errors(spec_with(path, bad)) == [
            (path, f"must be between {spec.minimum} and {spec.maximum}, got {bad!r}")
        ]


@pytest.mark.parametrize("path", NUMERIC_FIELDS)
def test_range_bounds_are_inclusive(path: str) -> None:
    spec, _ = FIELDS[path]
    for edge in (spec.minimum, spec.maximum):
        # A bound may still break an ordering rule with the default of its partner field;
        # what must not appear is a range error.
        range_errors = [
            (p, m)
            for p, m in validation_errors(spec_with(path, edge))
            if m.startswith("must be between")
        ]
        assert range_errors == []


def test_out_of_range_message_reads_as_documented() -> None:
    with pytest.raises(PolicyValidationError) as caught:
        ColocationPolicy.from_spec({"evictionWatermarks": {"cpu": {"lowPercent": 120}}})
    assert str(caught.value) == (
        "invalid ColocationPolicy (1 error): "
        "spec.evictionWatermarks.cpu.lowPercent: must be between 0 and 99, got 120"
    )


# --- Types ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("spec.loadAwareScheduling.enabled", "yes", "must be a boolean, got 'yes' (string)"),
        ("spec.loadAwareScheduling.enabled", 1, "must be a boolean, got 1 (integer)"),
        (
            "spec.loadAwareScheduling.cpuThresholdPercent",
            True,
            "must be an integer, got True (boolean)",
        ),
        (
            "spec.loadAwareScheduling.cpuThresholdPercent",
            60.0,
            "must be an integer, got 60.0 (number)",
        ),
        (
            "spec.loadAwareScheduling.cpuThresholdPercent",
            "60",
            "must be an integer, got '60' (string)",
        ),
        (
            "spec.features.psiInterference.avg10ThresholdPercent",
            False,
            "must be a number, got False (boolean)",
        ),
        (
            "spec.features.psiInterference.avg10ThresholdPercent",
            math.inf,
            "must be a finite number, got inf (number)",
        ),
        (
            "spec.features.psiInterference.avg10ThresholdPercent",
            math.nan,
            "must be a finite number, got nan (number)",
        ),
        (
            "spec.overselling.predictor",
            "p50",
            "must be one of tidal, p90, p95, p99, max, nsigma, rc, rc-nsigma-max, volcano, koordinator, got 'p50' (string)",
        ),
        (
            "spec.overselling.predictor",
            "P95",
            "must be one of tidal, p90, p95, p99, max, nsigma, rc, rc-nsigma-max, volcano, koordinator, got 'P95' (string)",
        ),
        (
            "spec.overselling.reportingMode",
            1,
            "must be one of extendedResources, volcanoAnnotations, got 1 (integer)",
        ),
        ("spec.features.psiInterference.resources", "cpu", "must be an array, got 'cpu' (string)"),
        ("spec.features.psiInterference.resources", [], "must have at least 1 item(s), got 0"),
        (
            "spec.features.psiInterference.resources",
            ["cpu", "cpu"],
            "must not contain duplicates, got ['cpu'] more than once",
        ),
        (
            "spec.features.psiInterference.resources",
            ["cpu", "gpu"],
            "items must be among cpu, memory, io, got ['gpu']",
        ),
        ("spec.evictionWatermarks", [], "must be an object, got array"),
        ("spec.features.cpuBurst", "on", "must be an object, got string"),
    ],
)
def test_wrong_type_is_rejected_with_its_path(path: str, value: Any, message: str) -> None:
    assert validation_errors(spec_with(path, value)) == [(path, message)]


def test_spec_that_is_not_an_object_is_rejected() -> None:
    assert validation_errors(["loadAwareScheduling"]) == [("spec", "must be an object, got array")]


# --- Unknown keys -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "path", "known"),
    [
        (
            {"oversell": {}},
            "spec.oversell",
            "loadAwareScheduling, evictionWatermarks, beIsolation, overselling, features",
        ),
        (
            {"evictionWatermarks": {"cpu": {"highPercnt": 90}}},
            "spec.evictionWatermarks.cpu.highPercnt",
            "highPercent, lowPercent",
        ),
        (
            {"features": {"numaAffinity": {"enable": True}}},
            "spec.features.numaAffinity.enable",
            "enabled",
        ),
    ],
)
def test_unknown_key_is_rejected_with_its_path_and_the_known_keys(
    spec, path: str, known: str
) -> None:
    assert validation_errors(spec) == [(path, f"unknown field; known fields: {known}")]


# --- Ordering rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "path", "message"),
    [
        (
            {"evictionWatermarks": {"cpu": {"highPercent": 50, "lowPercent": 50}}},
            "spec.evictionWatermarks.cpu.lowPercent",
            "must be lower than highPercent, got lowPercent 50, highPercent 50",
        ),
        (
            {"evictionWatermarks": {"cpu": {"lowPercent": 90}}},
            "spec.evictionWatermarks.cpu.lowPercent",
            "must be lower than highPercent, got lowPercent 90, highPercent 80",
        ),
        (
            {"evictionWatermarks": {"memory": {"highPercent": 20}}},
            "spec.evictionWatermarks.memory.lowPercent",
            "must be lower than highPercent, got lowPercent 30, highPercent 20",
        ),
        (
            {"features": {"cpuBurst": {"loadHighPercent": 80}}},
            "spec.features.cpuBurst.loadHighPercent",
            "must be lower than loadAlertPercent, got loadHighPercent 80, loadAlertPercent 80",
        ),
        (
            {"features": {"cacheLimits": {"l3Percent": {"low": 40}}}},
            "spec.features.cacheLimits.l3Percent",
            "must satisfy low <= mid <= high, got low 40, mid 30, high 50",
        ),
        (
            {"features": {"cacheLimits": {"memoryBandwidthPercent": {"high": 25}}}},
            "spec.features.cacheLimits.memoryBandwidthPercent",
            "must satisfy low <= mid <= high, got low 20, mid 30, high 25",
        ),
        (
            {"features": {"egressBandwidth": {"offlineLowPercent": 50}}},
            "spec.features.egressBandwidth.offlineLowPercent",
            "must not exceed offlineHighPercent, got offlineLowPercent 50, offlineHighPercent 40",
        ),
    ],
)
def test_ordering_rule_is_enforced_with_its_path(spec, path: str, message: str) -> None:
    assert validation_errors(spec) == [(path, message)]


@pytest.mark.parametrize(
    "spec",
    [
        {"evictionWatermarks": {"cpu": {"highPercent": 31, "lowPercent": 30}}},
        {"evictionWatermarks": {"memory": {"highPercent": 99, "lowPercent": 0}}},
        {"features": {"cpuBurst": {"loadHighPercent": 79, "loadAlertPercent": 80}}},
        {"features": {"cacheLimits": {"l3Percent": {"low": 30, "mid": 30, "high": 30}}}},
        {"features": {"egressBandwidth": {"offlineLowPercent": 40, "offlineHighPercent": 40}}},
    ],
)
def test_values_just_inside_an_ordering_rule_are_accepted(spec) -> None:
    assert validation_errors(spec) == []


def test_ordering_rule_is_not_reported_on_top_of_a_range_error() -> None:
    # lowPercent 150 is already out of range; "must be lower than highPercent" would add nothing.
    assert validation_errors({"evictionWatermarks": {"cpu": {"lowPercent": 150}}}) == [
        ("spec.evictionWatermarks.cpu.lowPercent", "must be between 0 and 99, got 150")
    ]


# --- Several errors ---------------------------------------------------------------------------


def test_every_error_is_reported_at_once() -> None:
    spec = {
        "loadAwareScheduling": {"cpuThresholdPercent": 101, "enabled": "true"},
        "evictionWatermarks": {"memory": {"lowPercent": 70}},
        "overselling": {"predictor": "mean", "ratio": 50},
        "features": {"cpuBurst": {"loadHighPercent": 90}},
    }
    with pytest.raises(PolicyValidationError) as caught:
        ColocationPolicy.from_spec(spec)
    assert [e.path for e in caught.value.errors] == [
        "spec.loadAwareScheduling.enabled",
        "spec.loadAwareScheduling.cpuThresholdPercent",
        "spec.evictionWatermarks.memory.lowPercent",
        "spec.overselling.ratio",
        "spec.overselling.predictor",
        "spec.features.cpuBurst.loadHighPercent",
    ]
    message = str(caught.value)
    assert message.startswith("invalid ColocationPolicy (6 errors): ")
    for error in caught.value.errors:
        assert f"{error.path}: {error.message}" in message


def test_policy_validation_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        ColocationPolicy.from_spec({"bogus": 1})


def test_error_paths_follow_the_given_prefix() -> None:
    with pytest.raises(PolicyValidationError) as caught:
        ColocationPolicy.from_spec({"overselling": {"ratioPercent": -1}}, path="policy")
    assert caught.value.errors[0].path == "policy.overselling.ratioPercent"


def test_validate_rejects_a_policy_built_in_code_with_broken_rules() -> None:
    policy = ColocationPolicy()
    broken = dataclasses.replace(
        policy,
        eviction_watermarks=dataclasses.replace(
            policy.eviction_watermarks, cpu=Watermark(high_percent=20, low_percent=40)
        ),
    )
    with pytest.raises(PolicyValidationError, match=r"spec\.evictionWatermarks\.cpu\.lowPercent"):
        broken.validate()


# --- The CRD (generated from the model by hack/generate_crds.py) behaves as the model ----------


def _policy_crd() -> dict[str, Any]:
    (crd,) = [c for c in crd_manifests() if c["spec"]["names"]["kind"] == "ColocationPolicy"]
    return crd


POLICY_SCHEMA = _policy_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def crd_node(path: str) -> dict[str, Any]:
    """The CRD schema node of a field path like ``spec.overselling.ratioPercent``."""
    node = POLICY_SCHEMA
    for key in path.split("."):
        node = node["properties"][key]
    return node


def test_crd_rejects_any_name_but_default_at_the_root() -> None:
    # metadata.name is visible to CEL only at the root of a CRD schema.
    assert POLICY_SCHEMA["x-kubernetes-validations"] == [
        {
            "rule": f"self.metadata.name == '{DEFAULT_POLICY_NAME}'",
            "message": "metadata.name must be 'default': ColocationPolicy is a cluster singleton",
            "reason": "FieldValueInvalid",
        }
    ]


def apply_crd_defaults(node: dict[str, Any], value: Any) -> Any:
    """Structural defaulting as the API server does it: fill missing properties that have a
    default, then recurse into objects (defaults are themselves defaulted)."""
    if not isinstance(value, dict):
        return value
    result = dict(value)
    for name, child in node.get("properties", {}).items():
        if name not in result and "default" in child:
            result[name] = copy.deepcopy(child["default"])
        if name in result:
            result[name] = apply_crd_defaults(child, result[name])
    return result


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"evictionWatermarks": {"cpu": {"highPercent": 90}}},
        {"features": {"cacheLimits": {"enabled": True}, "psiInterference": {"resources": ["io"]}}},
        {"overselling": {"predictor": "max"}, "loadAwareScheduling": {}},
    ],
)
def test_api_server_defaulting_gives_the_same_spec_as_from_spec(spec) -> None:
    defaulted = apply_crd_defaults(crd_node("spec"), spec)
    assert defaulted == ColocationPolicy.from_spec(spec).to_spec()


# The CRD's CEL rules and the Python rules must mean the same thing. The rules are kept to a tiny
# subset of CEL (field reads, integer comparisons, &&, ||) that translates to Python one token at
# a time; a rule outside it fails here on purpose, so whoever adds one extends this translator.
_CEL_TOKEN = re.compile(r"\s*(self\.[A-Za-z][A-Za-z0-9]*|<=|>=|==|!=|<|>|&&|\|\||\d+|\(|\))")
_CEL_TO_PYTHON = {"&&": " and ", "||": " or "}


def cel_to_python(rule: str) -> str:
    position, out = 0, []
    while position < len(rule):
        match = _CEL_TOKEN.match(rule, position)
        assert match, (
            f"CEL outside the translated subset at {rule[position:]!r}: extend cel_to_python"
        )
        token = match.group(1)
        if token.startswith("self."):
            out.append(f"obj[{token[5:]!r}]")
        else:
            out.append(_CEL_TO_PYTHON.get(token, f" {token} "))
        position = match.end()
    return "".join(out)


@pytest.mark.parametrize(("path", "rule"), RULES, ids=[f"{p}:{r.cel}" for p, r in RULES])
def test_cel_rule_means_the_same_as_the_python_rule(path: str, rule: CrossFieldRule) -> None:
    python_rule = cel_to_python(rule.cel)
    default_spec = value_at(ColocationPolicy(), path)
    object_type = FIELDS[path][0].object_type
    for values in itertools.product([0, 1, 30, 50, 99], repeat=len(rule.operands)):
        obj_spec = {**default_spec, **dict(zip(rule.operands, values, strict=True))}
        python_object = _build(object_type, obj_spec)
        assert eval(python_rule, {}, {"obj": obj_spec}) == rule.holds(python_object), (
            path,
            obj_spec,
        )


def _build(object_type: type, obj_spec: dict[str, Any]) -> Any:
    names = {FieldSpec.of(f).name: f.name for f in dataclasses.fields(object_type)}
    return object_type(**{names[key]: value for key, value in obj_spec.items()})


def test_every_default_satisfies_the_cel_rules_of_its_own_node() -> None:
    # What the API server checks when the CRD is created: each default, as written (nested
    # defaults not applied), against the CEL rules of the node it sits on. A rule reading an
    # absent field is an error there, which would reject the whole CRD.
    checked = 0
    for path, node in crd_schema_nodes(crd_node("spec"), "spec"):
        if "default" not in node:
            continue
        for validation in node.get("x-kubernetes-validations", []):
            python_rule = cel_to_python(validation["rule"])
            try:
                holds = eval(python_rule, {}, {"obj": node["default"]})
            except KeyError as missing:
                pytest.fail(
                    f"{path}: default {node['default']} lacks {missing} read by its CEL rule"
                )
            assert holds, (path, validation["rule"], node["default"])
            checked += 1
    assert checked == len(RULES)


def crd_schema_nodes(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from crd_schema_nodes(child, f"{path}.{name}")
