# SPDX-License-Identifier: Apache-2.0
"""The node-mode matrix, its aliases and the eviction rule per row (tidal.api.node_mode)."""

import pytest

from tidal.api import qos
from tidal.api.node_mode import (
    OVERSELL_ANNOTATION,
    OVERSELL_TYPES_ANNOTATION,
    VOLCANO_COLOCATION_LABEL,
    VOLCANO_LABEL_WRITTEN_ANNOTATION,
    VOLCANO_OVERSUBSCRIPTION_TYPES_ANNOTATION,
    Mode,
    eviction_allowed,
    eviction_annotations,
    node_mode,
    oversell_opted_out,
    requests_percent,
)

CO, OV = qos.COLOCATION_NODE_LABEL, qos.OVERSUBSCRIPTION_NODE_LABEL
VCO, VOV = VOLCANO_COLOCATION_LABEL, qos.VOLCANO_OVERSUBSCRIPTION_LABEL


@pytest.mark.parametrize("labels, annotations, mode, sources", [
    ({}, {}, Mode.OFF, {"colocation": "default", "oversubscription": "default"}),
    ({CO: "true"}, {}, Mode.COLOCATION, {"colocation": CO}),
    ({OV: "true"}, {}, Mode.OVERSUBSCRIPTION, {"oversubscription": OV}),
    ({CO: "true", OV: "true"}, {}, Mode.COLOCATION_OVERSUBSCRIPTION, {}),
    ({CO: "false", OV: "false"}, {}, Mode.OFF, {"colocation": CO}),
    # aliases alone mean the same
    ({VCO: "true"}, {}, Mode.COLOCATION, {"colocation": VCO}),
    ({VOV: "true"}, {}, Mode.OVERSUBSCRIPTION, {"oversubscription": VOV}),
    ({VCO: "true", VOV: "true"}, {}, Mode.COLOCATION_OVERSUBSCRIPTION, {}),
    # Tidal's name wins over its alias
    ({CO: "false", VCO: "true"}, {}, Mode.OFF, {"colocation": CO}),
    ({OV: "true", VOV: "false"}, {}, Mode.OVERSUBSCRIPTION, {"oversubscription": OV}),
    # the volcano label the master wrote itself is output, not input
    ({VOV: "true"}, {VOLCANO_LABEL_WRITTEN_ANNOTATION: "true"}, Mode.OFF, {"oversubscription": "default"}),
    # whitespace is invisible in most editors
    ({CO: " true "}, {}, Mode.COLOCATION, {}),
])
def test_mode_of_labels(labels, annotations, mode, sources):
    got = node_mode(labels, annotations)
    assert got.mode is mode
    for key, source in sources.items():
        assert got.sources[key] == source
    assert got.active is (mode is not Mode.OFF)
    assert got.oversold is (mode in (Mode.OVERSUBSCRIPTION, Mode.COLOCATION_OVERSUBSCRIPTION))
    assert got.requests_check is (mode is Mode.OVERSUBSCRIPTION)
    status = got.to_status()
    assert status["name"] == str(mode) and status["evictionRule"] and status["meaning"]


def test_a_conflict_names_both_values_and_the_winner():
    got = node_mode({CO: "true", VCO: "false"})
    assert got.colocation
    assert got.conflicts == (f"node label {CO}=true and its alias {VCO}=false disagree: {CO} wins",)
    assert got.to_status()["conflicts"] == list(got.conflicts)


def test_a_label_value_not_understood_is_a_problem_and_counts_as_absent():
    got = node_mode({CO: "yes", VCO: "true"})
    assert got.colocation and got.sources["colocation"] == VCO
    assert got.problems == (f"node label {CO}='yes' is not understood (allowed: true, false); counted as absent",)


@pytest.mark.parametrize("annotations, types, source", [
    ({}, {"cpu", "memory"}, "default"),
    ({OVERSELL_TYPES_ANNOTATION: "cpu"}, {"cpu"}, OVERSELL_TYPES_ANNOTATION),
    ({OVERSELL_TYPES_ANNOTATION: "memory, cpu"}, {"cpu", "memory"}, OVERSELL_TYPES_ANNOTATION),
    ({VOLCANO_OVERSUBSCRIPTION_TYPES_ANNOTATION: "memory"}, {"memory"}, VOLCANO_OVERSUBSCRIPTION_TYPES_ANNOTATION),
    ({OVERSELL_TYPES_ANNOTATION: "cpu", VOLCANO_OVERSUBSCRIPTION_TYPES_ANNOTATION: "memory"}, {"cpu"},
     OVERSELL_TYPES_ANNOTATION),
    ({OVERSELL_TYPES_ANNOTATION: "gpu"}, {"cpu", "memory"}, "default"),
    ({OVERSELL_TYPES_ANNOTATION: ""}, {"cpu", "memory"}, "default"),
])
def test_oversell_types(annotations, types, source):
    got = node_mode({OV: "true"}, annotations)
    assert got.oversell_types == types
    assert got.sources["oversellTypes"] == source
    for kind, resource in (("cpu", qos.BATCH_CPU_RESOURCE), ("memory", qos.BATCH_MEMORY_RESOURCE)):
        assert got.oversells(resource) is (kind in types)
        reason = got.type_off_reason(resource)
        assert (reason is None) is (kind in types)
        if reason:
            assert reason.startswith(f"{kind} is not oversold on this node: {source}=")


def test_a_bad_types_value_says_what_is_allowed():
    got = node_mode({OV: "true"}, {OVERSELL_TYPES_ANNOTATION: "cpu,gpu"})
    assert got.problems == (f"node annotation {OVERSELL_TYPES_ANNOTATION}='cpu,gpu' is not understood "
                            "(allowed: cpu, memory, cpu,memory); both types stay oversold",)


def test_volcano_eviction_annotations_map_onto_tidals_and_tidals_win():
    got, conflicts = eviction_annotations({
        "volcano.sh/evicting-cpu-high-watermark": "70",
        "volcano.sh/evicting-memory-low-watermark": "20",
        "colocation.tidal.io/eviction-memory-low-percent": "25",
        "other": "x",
    })
    assert got == {"colocation.tidal.io/eviction-cpu-high-percent": "70",
                   "colocation.tidal.io/eviction-memory-low-percent": "25", "other": "x"}
    assert conflicts == ["node annotation colocation.tidal.io/eviction-memory-low-percent=25 and its alias "
                         "volcano.sh/evicting-memory-low-watermark=20 disagree: "
                         "colocation.tidal.io/eviction-memory-low-percent wins"]


@pytest.mark.parametrize("pod, namespace, default, opted_out, why", [
    ({}, {}, True, False, "policy overselling.beUsesBatchResources=true"),
    ({}, {}, False, True, "policy overselling.beUsesBatchResources=false"),
    ({OVERSELL_ANNOTATION: "false"}, {}, True, True, f"pod annotation {OVERSELL_ANNOTATION}=false"),
    ({}, {OVERSELL_ANNOTATION: "false"}, True, True, f"namespace annotation {OVERSELL_ANNOTATION}=false"),
    ({OVERSELL_ANNOTATION: "true"}, {OVERSELL_ANNOTATION: "false"}, False, False,
     f"pod annotation {OVERSELL_ANNOTATION}=true"),
])
def test_oversell_opt_out(pod, namespace, default, opted_out, why):
    assert oversell_opted_out(pod, namespace, default) == (opted_out, why)


def test_an_opt_out_value_not_understood_is_an_error_naming_what_is_allowed():
    with pytest.raises(qos.AnnotationValueError) as err:
        oversell_opted_out({OVERSELL_ANNOTATION: "no"}, None)
    assert OVERSELL_ANNOTATION in str(err.value) and "true" in str(err.value)


def test_requests_percent():
    assert requests_percent({"cpu": 3000, "memory": 2 << 30}, {"cpu": 2000, "memory": 4 << 30}) == \
        {"cpu": 150.0, "memory": 50.0}
    assert requests_percent({"cpu": 1}, {"cpu": 0}) == {}


@pytest.mark.parametrize("labels, requests, allowed", [
    ({}, {"cpu": 200.0}, False),
    ({CO: "true"}, {}, True),
    ({CO: "true", OV: "true"}, {"cpu": 10.0}, True),
    ({OV: "true"}, {"cpu": 90.0, "memory": 100.0}, False),  # at 100 % is not above
    ({OV: "true"}, {"cpu": 90.0, "memory": 100.5}, True),
    ({OV: "true"}, {}, False),  # unknown requests: not known to be overcommitted
    ({OV: "true"}, None, False),
])
def test_eviction_allowed_per_row(labels, requests, allowed):
    ok, reason = eviction_allowed(node_mode(labels), requests)
    assert ok is allowed
    assert reason
