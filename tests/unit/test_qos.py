"""tidal.api.qos: the names of DESIGN.md and the parsing of QoS, cache-limit and CPU burst annotations."""

from __future__ import annotations

import pytest
from tidal.api import qos
from tidal.api.qos import (
    CacheLimit,
    CacheLimitAnnotationError,
    CPUBurstAnnotationError,
    CPUBurstRequest,
    EgressBandwidthAnnotationError,
    QoSAnnotationConflictError,
    QoSAnnotationError,
    QoSLevel,
    cache_limit_of,
    cpu_burst_of,
    egress_bandwidth_limit_of,
    node_egress_bandwidth_of,
    priority_class_manifests,
    qos_level_of,
)

CANONICAL = "colocation.tidal.io/qos-level"
OPENFUYAO = "openfuyao.com/qos-level"
VOLCANO = "volcano.sh/qos-level"


# --- Names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("constant", "design_value"),
    [
        ("API_GROUP", "colocation.tidal.io"),
        ("API_VERSION", "v1alpha1"),
        ("API_GROUP_VERSION", "colocation.tidal.io/v1alpha1"),
        ("NAMESPACE", "tidal-system"),
        ("QOS_ANNOTATION", "colocation.tidal.io/qos-level"),
        ("OPENFUYAO_QOS_ANNOTATION", "openfuyao.com/qos-level"),
        ("VOLCANO_QOS_ANNOTATION", "volcano.sh/qos-level"),
        ("COLOCATION_NODE_LABEL", "colocation.tidal.io/colocation"),
        ("OVERSUBSCRIPTION_NODE_LABEL", "colocation.tidal.io/oversubscription"),
        ("NODE_LABEL_ENABLED_VALUE", "true"),
        ("OFFLINE_EVICTING_TAINT_KEY", "colocation.tidal.io/offline-evicting"),
        ("OFFLINE_EVICTING_TAINT_EFFECT", "NoSchedule"),
        ("BATCH_CPU_RESOURCE", "kubernetes.io/batch-cpu"),
        ("BATCH_MEMORY_RESOURCE", "kubernetes.io/batch-memory"),
        ("SCHEDULER_NAME", "volcano"),
        ("CACHE_LIMIT_ANNOTATION", "colocation.tidal.io/cache-limit"),
        ("VOLCANO_CACHE_LIMIT_ANNOTATION", "volcano.sh/cache-limit"),
        ("CPU_BURST_ANNOTATION", "colocation.tidal.io/cpu-burst"),
        ("CPU_BURST_QUOTA_US_ANNOTATION", "colocation.tidal.io/cpu-burst-quota-us"),
        ("VOLCANO_ENABLE_QUOTA_BURST_ANNOTATION", "volcano.sh/enable-quota-burst"),
        ("VOLCANO_QUOTA_BURST_TIME_ANNOTATION", "volcano.sh/quota-burst-time"),
        ("EGRESS_BANDWIDTH_ANNOTATION", "colocation.tidal.io/egress-bandwidth-mbps"),
        ("NODE_EGRESS_BANDWIDTH_ANNOTATION", "colocation.tidal.io/node-egress-bandwidth-mbps"),
        ("VOLCANO_NETWORK_BANDWIDTH_RATE_ANNOTATION", "volcano.sh/network-bandwidth-rate"),
        ("METRICS_PREFIX", "tidal_"),
    ],
)
def test_name_matches_design(constant: str, design_value: str) -> None:
    assert getattr(qos, constant) == design_value


def test_qos_levels_are_hls_ls_be_highest_first() -> None:
    assert [level.value for level in QoSLevel] == ["HLS", "LS", "BE"]


def test_qos_level_is_its_annotation_value_as_a_string() -> None:
    assert QoSLevel.BE == "BE"
    assert str(QoSLevel.HLS) == "HLS"
    assert f"{QoSLevel.LS}" == "LS"


# --- qos_level_of: values ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "level"),
    [
        (CANONICAL, "HLS", QoSLevel.HLS),
        (CANONICAL, "LS", QoSLevel.LS),
        (CANONICAL, "BE", QoSLevel.BE),
        (OPENFUYAO, "HLS", QoSLevel.HLS),
        (OPENFUYAO, "LS", QoSLevel.LS),
        (OPENFUYAO, "BE", QoSLevel.BE),
        (VOLCANO, "LC", QoSLevel.HLS),
        (VOLCANO, "HLS", QoSLevel.LS),
        (VOLCANO, "LS", QoSLevel.LS),
        (VOLCANO, "BE", QoSLevel.BE),
        (VOLCANO, "-1", QoSLevel.BE),
        (VOLCANO, "-100", QoSLevel.BE),
        (VOLCANO, "0", QoSLevel.LS),
        (VOLCANO, "1", QoSLevel.LS),
        (VOLCANO, "2", QoSLevel.LS),
        (VOLCANO, "+3", QoSLevel.LS),
        (VOLCANO, "-0", QoSLevel.LS),
    ],
)
def test_annotation_value_maps_to_design_level(key: str, value: str, level: QoSLevel) -> None:
    assert qos_level_of({key: value}) is level


@pytest.mark.parametrize(
    "annotations",
    [None, {}, {"app": "web"}, {"colocation.tidal.io/cache-limit": "low"}],
    ids=["none", "empty", "unrelated", "other-tidal-annotation"],
)
def test_pod_without_qos_annotation_has_no_level(annotations) -> None:
    assert qos_level_of(annotations) is None


@pytest.mark.parametrize(
    ("key", "value", "level"),
    [
        (CANONICAL, " HLS ", QoSLevel.HLS),
        (CANONICAL, "BE\n", QoSLevel.BE),
        (CANONICAL, "\tLS", QoSLevel.LS),
        (OPENFUYAO, " BE", QoSLevel.BE),
        (VOLCANO, " LC ", QoSLevel.HLS),
        (VOLCANO, " -1 ", QoSLevel.BE),
    ],
)
def test_surrounding_whitespace_is_ignored(key: str, value: str, level: QoSLevel) -> None:
    assert qos_level_of({key: value}) is level


# --- qos_level_of: precedence and conflicts ---------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "level"),
    [
        ({CANONICAL: "BE", OPENFUYAO: "HLS"}, QoSLevel.BE),
        ({CANONICAL: "LS", VOLCANO: "LC"}, QoSLevel.LS),
        ({CANONICAL: "HLS", OPENFUYAO: "BE", VOLCANO: "-1"}, QoSLevel.HLS),
        # Aliases that disagree with each other do not matter when the canonical one is there.
        ({CANONICAL: "LS", OPENFUYAO: "HLS", VOLCANO: "BE"}, QoSLevel.LS),
        # Nor do invalid aliases: they are not read at all.
        ({CANONICAL: "BE", OPENFUYAO: "bogus", VOLCANO: "1.5"}, QoSLevel.BE),
    ],
)
def test_canonical_annotation_overrides_aliases(annotations, level: QoSLevel) -> None:
    assert qos_level_of(annotations) is level


def test_invalid_canonical_annotation_is_rejected_even_with_valid_aliases() -> None:
    with pytest.raises(QoSAnnotationError) as caught:
        qos_level_of({CANONICAL: "gold", OPENFUYAO: "LS"})
    assert caught.value.key == CANONICAL


@pytest.mark.parametrize(
    ("annotations", "level"),
    [
        ({OPENFUYAO: "HLS", VOLCANO: "LC"}, QoSLevel.HLS),
        ({OPENFUYAO: "LS", VOLCANO: "HLS"}, QoSLevel.LS),
        ({OPENFUYAO: "LS", VOLCANO: "0"}, QoSLevel.LS),
        ({OPENFUYAO: "BE", VOLCANO: "-1"}, QoSLevel.BE),
        ({OPENFUYAO: "BE", VOLCANO: "BE"}, QoSLevel.BE),
    ],
)
def test_aliases_that_agree_give_their_level(annotations, level: QoSLevel) -> None:
    assert qos_level_of(annotations) is level


@pytest.mark.parametrize(
    "annotations",
    [
        {OPENFUYAO: "HLS", VOLCANO: "HLS"},  # Volcano's HLS means Tidal's LS
        {OPENFUYAO: "BE", VOLCANO: "LS"},
        {OPENFUYAO: "LS", VOLCANO: "-1"},
        {OPENFUYAO: "HLS", VOLCANO: "BE"},
    ],
)
def test_aliases_that_disagree_are_rejected(annotations) -> None:
    with pytest.raises(QoSAnnotationConflictError) as caught:
        qos_level_of(annotations)
    message = str(caught.value)
    assert f'"{OPENFUYAO}": "{annotations[OPENFUYAO]}"' in message
    assert f'"{VOLCANO}": "{annotations[VOLCANO]}"' in message
    assert f'set "{CANONICAL}"' in message
    assert caught.value.values == annotations
    assert set(caught.value.levels) == {OPENFUYAO, VOLCANO}


OPENFUYAO_CAPITALISED = "openfuyao.com/QoS-level"


@pytest.mark.parametrize(
    ("annotations", "level"),
    [
        ({OPENFUYAO_CAPITALISED: "HLS"}, QoSLevel.HLS),
        ({OPENFUYAO_CAPITALISED: "LS"}, QoSLevel.LS),
        ({OPENFUYAO_CAPITALISED: " BE "}, QoSLevel.BE),
        ({OPENFUYAO_CAPITALISED: "BE", OPENFUYAO: "BE", VOLCANO: "-1"}, QoSLevel.BE),
        ({OPENFUYAO_CAPITALISED: "LS", VOLCANO: "HLS"}, QoSLevel.LS),
        ({CANONICAL: "LS", OPENFUYAO_CAPITALISED: "BE"}, QoSLevel.LS),
    ],
)
def test_capitalised_openfuyao_annotation_is_an_alias(annotations, level: QoSLevel) -> None:
    # issue 20: openFuyao's NUMA steps write openfuyao.com/QoS-level; it was ignored.
    assert qos_level_of(annotations) is level


@pytest.mark.parametrize(
    "annotations",
    [
        {OPENFUYAO_CAPITALISED: "BE", OPENFUYAO: "LS"},
        {OPENFUYAO_CAPITALISED: "HLS", VOLCANO: "BE"},
        {OPENFUYAO_CAPITALISED: "LS", OPENFUYAO: "LS", VOLCANO: "-1"},
    ],
)
def test_capitalised_openfuyao_annotation_conflicts_are_refused(annotations) -> None:
    with pytest.raises(QoSAnnotationConflictError) as caught:
        qos_level_of(annotations)
    assert f'"{OPENFUYAO_CAPITALISED}": "{annotations[OPENFUYAO_CAPITALISED]}"' in str(caught.value)
    assert caught.value.values == annotations


def test_capitalised_openfuyao_annotation_bad_value_is_refused() -> None:
    with pytest.raises(QoSAnnotationError) as caught:
        qos_level_of({OPENFUYAO_CAPITALISED: "ls"})
    assert caught.value.key == OPENFUYAO_CAPITALISED
    assert "values are case-sensitive" in str(caught.value)


def test_alias_conflict_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        qos_level_of({OPENFUYAO: "HLS", VOLCANO: "BE"})


def test_invalid_alias_is_rejected_even_when_the_other_alias_is_valid() -> None:
    with pytest.raises(QoSAnnotationError) as caught:
        qos_level_of({OPENFUYAO: "LS", VOLCANO: "gold"})
    assert caught.value.key == VOLCANO


# --- qos_level_of: bad values -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            CANONICAL,
            "Foo",
            'annotation "colocation.tidal.io/qos-level": invalid value "Foo"; allowed: HLS, LS, BE',
        ),
        (
            CANONICAL,
            "",
            'annotation "colocation.tidal.io/qos-level": invalid value ""; allowed: HLS, LS, BE',
        ),
        (
            CANONICAL,
            "   ",
            'annotation "colocation.tidal.io/qos-level": invalid value "   "; allowed: HLS, LS, BE',
        ),
        (
            CANONICAL,
            "LC",
            'annotation "colocation.tidal.io/qos-level": invalid value "LC"; allowed: HLS, LS, BE',
        ),
        (
            CANONICAL,
            "-1",
            'annotation "colocation.tidal.io/qos-level": invalid value "-1"; allowed: HLS, LS, BE',
        ),
        (
            CANONICAL,
            "hls",
            'annotation "colocation.tidal.io/qos-level": invalid value "hls"; allowed: HLS, LS, BE '
            "(values are case-sensitive)",
        ),
        (
            CANONICAL,
            'B"E',
            'annotation "colocation.tidal.io/qos-level": invalid value "B\\"E"; allowed: HLS, LS, BE',
        ),
        (
            OPENFUYAO,
            "Gold",
            'annotation "openfuyao.com/qos-level": invalid value "Gold"; allowed: HLS, LS, BE',
        ),
        (
            OPENFUYAO,
            "be",
            'annotation "openfuyao.com/qos-level": invalid value "be"; allowed: HLS, LS, BE '
            "(values are case-sensitive)",
        ),
        (
            VOLCANO,
            "1.5",
            'annotation "volcano.sh/qos-level": invalid value "1.5"; '
            "allowed: LC, HLS, LS, BE, an integer (<0 means BE, >=0 means LS)",
        ),
        (
            VOLCANO,
            "lc",
            'annotation "volcano.sh/qos-level": invalid value "lc"; '
            "allowed: LC, HLS, LS, BE, an integer (<0 means BE, >=0 means LS) (values are case-sensitive)",
        ),
        (
            VOLCANO,
            "",
            'annotation "volcano.sh/qos-level": invalid value ""; '
            "allowed: LC, HLS, LS, BE, an integer (<0 means BE, >=0 means LS)",
        ),
        (
            VOLCANO,
            "- 1",
            'annotation "volcano.sh/qos-level": invalid value "- 1"; '
            "allowed: LC, HLS, LS, BE, an integer (<0 means BE, >=0 means LS)",
        ),
        (
            VOLCANO,
            "\u0661",  # ARABIC-INDIC DIGIT ONE: a digit to Python, not an integer to Kubernetes users
            'annotation "volcano.sh/qos-level": invalid value "\u0661"; '
            "allowed: LC, HLS, LS, BE, an integer (<0 means BE, >=0 means LS)",
        ),
    ],
)
def test_bad_value_is_rejected_naming_key_value_and_allowed_values(key, value, message) -> None:
    with pytest.raises(QoSAnnotationError) as caught:
        qos_level_of({key: value})
    assert str(caught.value) == message
    assert caught.value.key == key
    assert caught.value.value == value


def test_qos_annotation_error_exposes_allowed_values_and_is_a_value_error() -> None:
    with pytest.raises(ValueError) as caught:
        qos_level_of({CANONICAL: "Foo"})
    assert isinstance(caught.value, QoSAnnotationError)
    assert caught.value.allowed == ("HLS", "LS", "BE")


# --- PriorityClasses --------------------------------------------------------------------------


def test_priority_classes_follow_design_names_and_chosen_values() -> None:
    by_name = {pc["metadata"]["name"]: pc for pc in priority_class_manifests()}
    assert {name: (pc["value"], pc["preemptionPolicy"]) for name, pc in by_name.items()} == {
        "tidal-hls": (100000, "PreemptLowerPriority"),
        "tidal-ls": (50000, "PreemptLowerPriority"),
        "tidal-be": (-100, "Never"),
    }


def test_priority_class_manifests_are_valid_scheduling_v1_objects() -> None:
    for manifest in priority_class_manifests():
        assert manifest["apiVersion"] == "scheduling.k8s.io/v1"
        assert manifest["kind"] == "PriorityClass"
        assert manifest["globalDefault"] is False
        assert manifest["description"]
        # User-defined classes must stay at or below one billion; system classes sit above.
        assert -(10**9) <= manifest["value"] <= 10**9


def test_priority_order_follows_qos_order_and_be_is_below_unclassified_pods() -> None:
    values = [qos.PRIORITY_CLASS_BY_LEVEL[level].value for level in QoSLevel]
    assert values == sorted(values, reverse=True)
    assert len(set(values)) == len(values)
    assert qos.PRIORITY_CLASS_BY_LEVEL[QoSLevel.BE].value < 0  # pods without a class have 0


def test_priority_class_manifests_are_fresh_copies() -> None:
    first = priority_class_manifests()
    first[0]["metadata"]["name"] = "mutated"
    assert priority_class_manifests()[0]["metadata"]["name"] == "tidal-hls"


# --- cache_limit_of ---------------------------------------------------------------------------

CACHE = "colocation.tidal.io/cache-limit"
VOLCANO_CACHE = "volcano.sh/cache-limit"


@pytest.mark.parametrize(
    ("annotations", "limit"),
    [
        ({CACHE: "low"}, CacheLimit.LOW),
        ({CACHE: "mid"}, CacheLimit.MID),
        ({CACHE: "high"}, CacheLimit.HIGH),
        ({CACHE: " high\n"}, CacheLimit.HIGH),
        ({VOLCANO_CACHE: "low"}, CacheLimit.LOW),
        ({VOLCANO_CACHE: "middle"}, CacheLimit.MID),
        # issue 20: DESIGN.md documents the alias with Tidal's values; "mid" fell back to dynamic.
        ({VOLCANO_CACHE: "mid"}, CacheLimit.MID),
        ({VOLCANO_CACHE: " mid "}, CacheLimit.MID),
        ({VOLCANO_CACHE: "high"}, CacheLimit.HIGH),
        ({CACHE: "low", VOLCANO_CACHE: "high"}, CacheLimit.LOW),
        ({CACHE: "mid", VOLCANO_CACHE: "dynamic"}, CacheLimit.MID),
        (None, None),
        ({}, None),
        ({CANONICAL: "BE"}, None),
    ],
)
def test_cache_limit_annotation_maps_to_level(annotations, limit) -> None:
    assert cache_limit_of(annotations) is limit


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            CACHE,
            "middle",
            'annotation "colocation.tidal.io/cache-limit": invalid value "middle"; allowed: low, mid, high',
        ),
        (
            CACHE,
            "",
            'annotation "colocation.tidal.io/cache-limit": invalid value ""; allowed: low, mid, high',
        ),
        (
            CACHE,
            "HIGH",
            'annotation "colocation.tidal.io/cache-limit": invalid value "HIGH"; allowed: low, mid, high '
            "(values are case-sensitive)",
        ),
        (
            VOLCANO_CACHE,
            "max",
            'annotation "volcano.sh/cache-limit": invalid value "max"; allowed: low, mid, middle, high',
        ),
        (
            VOLCANO_CACHE,
            "dynamic",
            'annotation "volcano.sh/cache-limit": invalid value "dynamic"; allowed: low, mid, middle, high',
        ),
    ],
)
def test_bad_cache_limit_is_rejected_naming_key_value_and_allowed_values(
    key, value, message
) -> None:
    with pytest.raises(CacheLimitAnnotationError) as caught:
        cache_limit_of({key: value})
    assert str(caught.value) == message
    assert (caught.value.key, caught.value.value) == (key, value)


# --- cpu_burst_of -----------------------------------------------------------------------------

BURST = "colocation.tidal.io/cpu-burst"
BURST_QUOTA = "colocation.tidal.io/cpu-burst-quota-us"
VOLCANO_BURST = "volcano.sh/enable-quota-burst"
VOLCANO_BURST_TIME = "volcano.sh/quota-burst-time"


@pytest.mark.parametrize(
    ("annotations", "request_"),
    [
        (None, None),
        ({}, None),
        ({CANONICAL: "LS"}, None),
        ({BURST: "true"}, CPUBurstRequest(enabled=True)),
        ({BURST: "false"}, CPUBurstRequest(enabled=False)),
        ({BURST: " true "}, CPUBurstRequest(enabled=True)),
        ({BURST: "true", BURST_QUOTA: "200000"}, CPUBurstRequest(enabled=True, quota_us=200000)),
        ({BURST: "false", BURST_QUOTA: "200000"}, CPUBurstRequest(enabled=False, quota_us=200000)),
        # 0 means the default, the quota (Volcano's agent); alone it enables nothing (rubik
        # writes 0, Volcano's agent needs its on/off key)
        ({BURST: "true", BURST_QUOTA: "0"}, CPUBurstRequest(enabled=True)),
        ({VOLCANO_BURST: "true", VOLCANO_BURST_TIME: "0"}, CPUBurstRequest(enabled=True)),
        ({BURST_QUOTA: "0"}, CPUBurstRequest(enabled=False)),
        ({VOLCANO_BURST_TIME: "0"}, CPUBurstRequest(enabled=False)),
        ({VOLCANO_BURST: "true"}, CPUBurstRequest(enabled=True)),
        # Volcano's agent parses its key with Go's strconv.ParseBool
        ({VOLCANO_BURST: "1"}, CPUBurstRequest(enabled=True)),
        ({VOLCANO_BURST: "True"}, CPUBurstRequest(enabled=True)),
        ({VOLCANO_BURST: "TRUE"}, CPUBurstRequest(enabled=True)),
        ({VOLCANO_BURST: "t"}, CPUBurstRequest(enabled=True)),
        ({VOLCANO_BURST: "0", VOLCANO_BURST_TIME: "2000"}, CPUBurstRequest(enabled=False, quota_us=2000)),
        ({VOLCANO_BURST: "False"}, CPUBurstRequest(enabled=False)),
        ({VOLCANO_BURST: "f"}, CPUBurstRequest(enabled=False)),
        (
            {VOLCANO_BURST: "true", VOLCANO_BURST_TIME: "200000"},
            CPUBurstRequest(enabled=True, quota_us=200000),
        ),
        ({VOLCANO_BURST_TIME: "2000"}, CPUBurstRequest(enabled=True, quota_us=2000)),
        # Each canonical key overrides its Volcano counterpart on its own.
        ({BURST: "false", VOLCANO_BURST: "true"}, CPUBurstRequest(enabled=False)),
        (
            {BURST_QUOTA: "100", VOLCANO_BURST_TIME: "bogus"},
            CPUBurstRequest(enabled=True, quota_us=100),
        ),
        ({BURST: "true", VOLCANO_BURST_TIME: "300"}, CPUBurstRequest(enabled=True, quota_us=300)),
    ],
)
def test_cpu_burst_annotations_map_to_request(annotations, request_) -> None:
    assert cpu_burst_of(annotations) == request_


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            BURST,
            "yes",
            'annotation "colocation.tidal.io/cpu-burst": invalid value "yes"; allowed: true, false',
        ),
        (
            BURST,
            "True",
            'annotation "colocation.tidal.io/cpu-burst": invalid value "True"; allowed: true, false '
            "(values are case-sensitive)",
        ),
        (
            BURST_QUOTA,
            "-5",
            'annotation "colocation.tidal.io/cpu-burst-quota-us": invalid value "-5"; '
            "allowed: a non-negative integer number of microseconds",
        ),
        (
            BURST_QUOTA,
            "2ms",
            'annotation "colocation.tidal.io/cpu-burst-quota-us": invalid value "2ms"; '
            "allowed: a non-negative integer number of microseconds",
        ),
        (
            VOLCANO_BURST,
            "yes",
            'annotation "volcano.sh/enable-quota-burst": invalid value "yes"; allowed: true, false',
        ),
        (
            BURST,
            "1",
            'annotation "colocation.tidal.io/cpu-burst": invalid value "1"; allowed: true, false',
        ),
        (
            VOLCANO_BURST_TIME,
            "1.5",
            'annotation "volcano.sh/quota-burst-time": invalid value "1.5"; '
            "allowed: a non-negative integer number of microseconds",
        ),
    ],
)
def test_bad_cpu_burst_annotation_is_rejected_naming_key_value_and_allowed_values(
    key, value, message
) -> None:
    with pytest.raises(CPUBurstAnnotationError) as caught:
        cpu_burst_of({key: value})
    assert str(caught.value) == message
    assert caught.value.key == key


def test_every_annotation_error_shares_one_base_for_the_webhook() -> None:
    for bad in ({CANONICAL: "x"}, {OPENFUYAO: "HLS", VOLCANO: "BE"}):
        with pytest.raises(qos.AnnotationError):
            qos_level_of(bad)
    with pytest.raises(qos.AnnotationError):
        cache_limit_of({CACHE: "x"})
    with pytest.raises(qos.AnnotationError):
        cpu_burst_of({BURST: "x"})
    with pytest.raises(qos.AnnotationError):
        egress_bandwidth_limit_of({EGRESS: "x"})


# --- Egress bandwidth -------------------------------------------------------------------------

EGRESS = "colocation.tidal.io/egress-bandwidth-mbps"
NODE_EGRESS = "colocation.tidal.io/node-egress-bandwidth-mbps"
VOLCANO_RATE = "volcano.sh/network-bandwidth-rate"
MBPS_ALLOWED = "allowed: a positive number of Mbit/s up to 1000000, e.g. 100 or 2.5"


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        (None, None),
        ({}, None),
        ({EGRESS: "100"}, 100.0),
        ({EGRESS: " 2.5 "}, 2.5),
        ({EGRESS: "1000000"}, 1_000_000.0),
        # Volcano's annotation is a node's bandwidth: on a pod it is no limit
        ({VOLCANO_RATE: "100"}, None),
        ({NODE_EGRESS: "100"}, None),
    ],
)
def test_pod_egress_limit(annotations, expected) -> None:
    assert egress_bandwidth_limit_of(annotations) == expected


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        ("0", ""),
        ("-5", ""),
        ("", ""),
        ("fast", ""),
        ("1e3", ""),
        ("1000001", ""),
        ("nan", ""),
        (".5", ""),
        ("100M", " (the unit is Mbit/s, write the number alone)"),
        ("100 Mbps", " (the unit is Mbit/s, write the number alone)"),
        ("100Mbit/s", " (the unit is Mbit/s, write the number alone)"),
    ],
)
def test_bad_pod_egress_limit_names_the_annotation_and_the_allowed_form(value, hint) -> None:
    with pytest.raises(EgressBandwidthAnnotationError) as caught:
        egress_bandwidth_limit_of({EGRESS: value})
    assert str(caught.value) == (
        f'annotation "{EGRESS}": invalid value "{value}"; {MBPS_ALLOWED}{hint}'
    )
    assert caught.value.key == EGRESS


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({}, None),
        ({NODE_EGRESS: "1000"}, (1000.0, NODE_EGRESS)),
        ({VOLCANO_RATE: "1000"}, (1000.0, VOLCANO_RATE)),
        ({EGRESS: "500"}, (500.0, EGRESS)),  # the deprecated name, on a node
        # the first present decides, in order: Tidal's, the deprecated one, Volcano's
        ({NODE_EGRESS: "1000", EGRESS: "500", VOLCANO_RATE: "200"}, (1000.0, NODE_EGRESS)),
        ({EGRESS: "500", VOLCANO_RATE: "200"}, (500.0, EGRESS)),
    ],
)
def test_node_egress_bandwidth(annotations, expected) -> None:
    assert node_egress_bandwidth_of(annotations) == expected


def test_a_bad_deciding_node_annotation_is_an_error_even_when_an_alias_is_fine() -> None:
    with pytest.raises(EgressBandwidthAnnotationError) as caught:
        node_egress_bandwidth_of({NODE_EGRESS: "10G", VOLCANO_RATE: "1000"})
    assert caught.value.key == NODE_EGRESS
    assert str(caught.value).startswith(f'annotation "{NODE_EGRESS}": invalid value "10G"; {MBPS_ALLOWED}')
