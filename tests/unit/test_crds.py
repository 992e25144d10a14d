"""The CRD YAML files: names, structural schemas, status shapes and CEL rule hygiene.

The files are generated from tidal.api (hack/generate_crds.py; test_generated.py checks they are
fresh); test_policy.py checks that the ColocationPolicy CRD defaults and validates as the model.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from tidal.api import qos
from tidal.crds import CRD_FILES, crd_manifests
from tidal.api.policy import Predictor

CRDS = {crd["spec"]["names"]["kind"]: crd for crd in crd_manifests()}


def schema_of(kind: str) -> dict[str, Any]:
    (version,) = CRDS[kind]["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node below ``node``, with a readable path (``[]`` marks array items)."""
    yield path or "<root>", node
    for name, child in node.get("properties", {}).items():
        yield from nodes(child, f"{path}.{name}" if path else name)
    if "items" in node:
        yield from nodes(node["items"], f"{path}[]")


def node_at(kind: str, json_path: str) -> dict[str, Any]:
    """The schema node of a printer-column style path like ``.status.policy.appliedGeneration``."""
    node = schema_of(kind)
    for key in json_path.lstrip(".").split("."):
        node = node["properties"][key]
    return node


def test_one_file_per_crd_in_the_order_of_crd_files() -> None:
    assert [crd["metadata"]["name"] for crd in crd_manifests()] == [
        "colocationpolicies.colocation.tidal.io",
        "nodeprofiles.colocation.tidal.io",
    ]
    assert len(CRD_FILES) == len(CRDS)


def test_crd_manifests_are_fresh_copies() -> None:
    crd_manifests()[0]["metadata"]["name"] = "mutated"
    assert crd_manifests()[0]["metadata"]["name"] == "colocationpolicies.colocation.tidal.io"


@pytest.mark.parametrize(
    ("kind", "singular", "plural", "short_name"),
    [
        ("ColocationPolicy", "colocationpolicy", "colocationpolicies", "cpol"),
        ("NodeProfile", "nodeprofile", "nodeprofiles", "nprof"),
    ],
)
def test_crd_is_a_cluster_scoped_tidal_api_with_a_status_subresource(
    kind: str, singular: str, plural: str, short_name: str
) -> None:
    crd = CRDS[kind]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{plural}.{qos.API_GROUP}"
    spec = crd["spec"]
    assert spec["group"] == qos.API_GROUP
    assert spec["scope"] == "Cluster"
    assert spec["names"] == {
        "kind": kind,
        "listKind": f"{kind}List",
        "singular": singular,
        "plural": plural,
        "shortNames": [short_name],
        "categories": ["tidal"],
    }
    (version,) = spec["versions"]
    assert version["name"] == qos.API_VERSION
    assert version["served"] is True and version["storage"] is True
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_schema_is_structural(kind: str) -> None:
    # What the API server demands of a v1 CRD schema: a type everywhere unless fields are
    # preserved, no uniqueItems (quadratic), no additionalProperties beside properties.
    for path, node in nodes(schema_of(kind)):
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
        assert "uniqueItems" not in node, path
        assert not ("additionalProperties" in node and "properties" in node), path
        assert "$ref" not in node, path
        if node.get("type") == "array":
            assert "items" in node, path


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_list_map_keys_are_required_in_their_items(kind: str) -> None:
    for path, node in nodes(schema_of(kind)):
        if node.get("x-kubernetes-list-type") == "map":
            for key in node["x-kubernetes-list-map-keys"]:
                assert key in node["items"].get("required", []), f"{path}: {key}"


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_printer_columns_point_at_schema_fields(kind: str) -> None:
    (version,) = CRDS[kind]["spec"]["versions"]
    for column in version["additionalPrinterColumns"]:
        if column["jsonPath"] == ".metadata.creationTimestamp":
            continue
        node = node_at(kind, column["jsonPath"])
        if column["type"] == "date":
            assert (node["type"], node.get("format")) == ("string", "date-time")
        else:
            assert node["type"] == column["type"]


_CEL_FIELD = re.compile(r"self\.([A-Za-z][A-Za-z0-9]*)")


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_cel_rules_read_declared_fields_and_name_them_in_their_message(kind: str) -> None:
    for path, node in nodes(schema_of(kind)):
        for validation in node.get("x-kubernetes-validations", []):
            fields = _CEL_FIELD.findall(validation["rule"])
            assert fields, validation
            for name in fields:
                assert name in node.get("properties", {}) or name == "metadata", (path, name)
            if "fieldPath" in validation:
                assert validation["fieldPath"].lstrip(".") in node["properties"]
            message = validation["message"]
            named = validation.get("fieldPath", "").lstrip(".") or path.split(".")[-1]
            assert named in message or "metadata.name" in message, (path, message)
            assert validation.get("reason", "FieldValueInvalid") in {
                "FieldValueInvalid",
                "FieldValueForbidden",
                "FieldValueRequired",
                "FieldValueDuplicate",
            }


def _conditions_schema(kind: str) -> dict[str, Any]:
    return node_at(kind, ".status.conditions")


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_status_conditions_follow_metav1_condition(kind: str) -> None:
    conditions = _conditions_schema(kind)
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    assert item["required"] == ["type", "status", "lastTransitionTime", "reason", "message"]
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert item["properties"]["lastTransitionTime"]["format"] == "date-time"


def test_policy_status_reports_rollout_per_node() -> None:
    status = node_at("ColocationPolicy", ".status")["properties"]
    assert set(status) == {
        "observedGeneration",
        "totalNodes",
        "appliedNodes",
        "nodes",
        "conditions",
    }
    nodes_list = status["nodes"]
    assert nodes_list["x-kubernetes-list-map-keys"] == ["name"]
    assert set(nodes_list["items"]["properties"]) == {"name", "appliedGeneration", "reason"}
    assert nodes_list["items"]["properties"]["appliedGeneration"]["format"] == "int64"


def test_node_profile_status_holds_what_the_agent_and_the_master_report() -> None:
    status = node_at("NodeProfile", ".status")["properties"]
    assert set(status) == {
        "observedAt",
        "policy",
        "usage",
        "systemUsage",
        "perQoS",
        "predictions",
        "cpuInterference",
        "onlineSchedSlice",
        "oversell",
        "capabilities",
        "conditions",
        "mode",
    }
    assert status["observedAt"]["format"] == "date-time"
    assert {"name", "evictionAllowed", "evictionReason", "conflicts", "problems"} <= set(status["mode"]["properties"])
    assert status["mode"]["properties"]["evictionAllowed"]["type"] == "boolean"
    assert set(status["policy"]["properties"]) == {"appliedGeneration", "effective", "problems"}
    assert status["policy"]["properties"]["effective"]["x-kubernetes-preserve-unknown-fields"]
    assert set(status["perQoS"]["properties"]) == {level.value for level in qos.QoSLevel}
    assert status["predictions"]["x-kubernetes-preserve-unknown-fields"]
    capability = status["capabilities"]["items"]
    assert capability["required"] == ["name", "supported"]
    assert capability["properties"]["supported"]["type"] == "boolean"
    assert capability["properties"]["reason"]["type"] == "string"


@pytest.mark.parametrize("path", [".status.usage", ".status.systemUsage"])
@pytest.mark.parametrize("summary", ["cpuMillicores", "memoryBytes"])
def test_node_usage_summary_has_every_statistic_per_window(summary: str, path: str) -> None:
    window = node_at("NodeProfile", path)
    assert window["x-kubernetes-list-map-keys"] == ["windowSeconds"]
    statistics = window["items"]["properties"][summary]["properties"]
    assert list(statistics) == ["avg", "p50", "p90", "p95", "p99", "max"]
    for statistic in statistics.values():
        assert statistic == {"type": "integer", "format": "int64", "minimum": 0}


def test_node_profile_statistics_cover_every_statistic_predictor_of_the_policy() -> None:
    from tidal.agent.prediction import STATISTICS
    from tidal.predict.predictors import REALISABLE

    window = node_at("NodeProfile", ".status.usage")
    statistics = window["items"]["properties"]["cpuMillicores"]["properties"]
    assert set(STATISTICS) <= set(statistics)
    # Every predictor the policy offers is either a window statistic or a history predictor.
    assert {p.value for p in Predictor} == set(STATISTICS) | {p.name for p in REALISABLE}
