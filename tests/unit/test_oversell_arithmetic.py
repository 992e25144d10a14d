import datetime
import math

import pytest
from hypothesis import given, settings, strategies as st

from tidal.api import qos
from tidal.manager.oversell.arithmetic import ResourceInputs, batch_amount, should_write
from tidal.manager.oversell.node_decision import OversellSettings, current_amounts, decide_node
from tidal.api.policy import ColocationPolicy

NOW = datetime.datetime(2026, 11, 22, 3, 0, tzinfo=datetime.timezone.utc)
GiB = 1024**3


@pytest.mark.parametrize("inputs, cap, margin, expected", [
    # 16 cores × 60 % = 9600 m − peak 2000 − overhead 0 − margin 1600 = 6000
    (ResourceInputs(16000, 2000), 60, 10, 6000),
    # system daemons use 1500 m of a 1000 m reservation: 500 m overhead on top
    (ResourceInputs(16000, 2000, system_usage=1500, system_reserved=1000), 60, 10, 5500),
    # usage inside the reservation costs nothing extra (allocatable already excludes it)
    (ResourceInputs(16000, 2000, system_usage=800, system_reserved=1000), 60, 10, 6000),
    # the online peak fills the cap: clamped at 0, never negative
    (ResourceInputs(16000, 12000), 60, 10, 0),
    (ResourceInputs(0, 0), 60, 10, 0),
    (ResourceInputs(16000, 0), 0, 0, 0),
    (ResourceInputs(16000, 0), 100, 0, 16000),
])
def test_batch_amount_follows_the_formula(inputs, cap, margin, expected):
    assert batch_amount(inputs, cap, margin).result == expected


@pytest.mark.parametrize("inputs, cap, margin, reason", [
    (ResourceInputs(16000, None), 60, 10, "predicted online peak unknown"),
    (ResourceInputs(16000, float("nan")), 60, 10, "predicted online peak unknown or invalid (nan)"),
    (ResourceInputs(float("inf"), 0), 60, 10, "allocatable unknown or invalid (inf)"),
    (ResourceInputs(16000, -5), 60, 10, "predicted online peak unknown or invalid (-5)"),
    (ResourceInputs(16000, 0, system_usage=float("nan")), 60, 10, "system usage unknown"),
    (ResourceInputs(16000, 0), 140, 10, "invalid cap 140"),
    (ResourceInputs(16000, 0), 60, float("nan"), "invalid safety margin nan"),
])
def test_unusable_inputs_give_zero_with_the_reason(inputs, cap, margin, reason):
    breakdown = batch_amount(inputs, cap, margin)
    assert breakdown.result == 0 and reason in breakdown.reason


@settings(max_examples=500, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True), st.one_of(st.none(), st.floats()),
       st.floats(), st.floats(), st.floats(), st.floats())
def test_batch_amount_is_always_a_finite_non_negative_integer(alloc, peak, usage, reserved, cap, margin):
    result = batch_amount(ResourceInputs(alloc, peak, usage, reserved), cap, margin).result
    assert isinstance(result, int) and result >= 0
    if math.isfinite(alloc) and alloc >= 0:
        assert result <= alloc


def test_an_allocatable_near_the_float_maximum_does_not_overflow():
    # found by the property test above: 8.99e307 × 2 (the margin's percent) is inf before / 100
    huge = 8.98846567431158e307
    assert batch_amount(ResourceInputs(huge, 0.0, 0.0, 0.0), 0.0, 2.0).result == 0
    assert batch_amount(ResourceInputs(huge, 0.0, 0.0, 0.0), 100.0, 2.0).result > 0


@pytest.mark.parametrize("inputs, include, result, overhead, why", [
    # counted (default): 1500 m measured outside the pods, 1000 m reserved by the kubelet
    (ResourceInputs(16000, 2000, system_usage=1500, system_reserved=1000), True, 5500, 500,
     "measured system usage 1500 − kubelet's reservation 1000"),
    (ResourceInputs(16000, 2000, system_usage=800, system_reserved=1000), True, 6000, 0,
     "within the kubelet's reservation 1000"),
    # includeSystemUsage false: not subtracted, whatever was measured (and an invalid value is ignored)
    (ResourceInputs(16000, 2000, system_usage=1500, system_reserved=1000), False, 6000, 0,
     "includeSystemUsage is false"),
    (ResourceInputs(16000, 2000, system_usage=float("nan")), False, 6000, 0, "includeSystemUsage is false"),
    # an agent that does not report it: 0, and the breakdown says so
    (ResourceInputs(16000, 2000, system_usage=None, system_reserved=1000), True, 6000, 0,
     "no system usage reported"),
    # counted but invalid: batch 0 with the reason (never a guess)
    (ResourceInputs(16000, 2000, system_usage=-1), True, 0, 0, ""),
])
def test_system_usage_is_subtracted_only_when_the_policy_counts_it(inputs, include, result, overhead, why):
    breakdown = batch_amount(inputs, 60, 10, include)
    assert (breakdown.result, breakdown.system_overhead) == (result, overhead)
    assert why in breakdown.system_overhead_reason
    status = breakdown.to_status()
    assert status["includeSystemUsage"] is include and status["systemOverhead"] == overhead
    measured = inputs.system_usage
    assert status["systemUsage"] == (math.ceil(measured) if measured is not None and math.isfinite(measured)
                                     and measured >= 0 else None)
    if result == 0:
        assert "system usage unknown or invalid" in breakdown.reason


@settings(max_examples=300, deadline=None)
@given(allocatable=st.integers(0, 2 ** 45), peak=st.floats(0, 2 ** 44), usage=st.floats(0, 2 ** 44),
       reserved=st.integers(0, 2 ** 40), cap=st.floats(0, 100), margin=st.floats(0, 100))
def test_the_breakdown_adds_up_to_its_result(allocatable, peak, usage, reserved, cap, margin):
    """A reader's capped − peak − overhead − margin is the result, as the breakdown shows them:
    memory at 60 % of 16421869Ki (a fractional byte count) used to come out one byte short."""
    b = batch_amount(ResourceInputs(allocatable, peak, usage, reserved), cap, margin)
    assert b.result == max(0, b.capped - b.predicted_online_peak - b.system_overhead - b.safety_margin)
    exact = allocatable * cap / 100 - peak - max(0.0, usage - reserved) - allocatable * margin / 100
    assert b.result <= max(0.0, exact)  # never more than the formula gives


def test_the_example_of_a_fractional_cap_adds_up():
    b = batch_amount(ResourceInputs(16421869 * 1024, 3_000_000_000, 2_000_000_000), 60, 10)
    assert b.capped - b.predicted_online_peak - b.system_overhead - b.safety_margin == b.result == 3_407_996_927


def test_breakdown_keeps_its_keys_and_says_where_the_system_term_came_from():
    status = batch_amount(ResourceInputs(16000, 2000, 1500, 1000), 60, 10).to_status()
    assert {"result", "allocatable", "capPercent", "capped", "predictedOnlinePeak", "systemOverhead",
            "safetyMargin", "reason", "formula"} <= set(status)
    assert {k: status[k] for k in ("systemUsage", "systemReserved", "includeSystemUsage")} == {
        "systemUsage": 1500, "systemReserved": 1000, "includeSystemUsage": True}
    assert status["systemOverheadReason"] == "measured system usage 1500 − kubelet's reservation 1000"


@pytest.mark.parametrize("include, system, cpu, why", [
    (True, {"cpuMillicores": 2500, "memoryBytes": 0}, 16000 * 60 // 100 - 2000 - 1500 - 1600, "− kubelet's"),
    (False, {"cpuMillicores": 2500, "memoryBytes": 0}, 6000, "includeSystemUsage is false"),
    (True, None, 6000, "no system usage reported"),  # an agent that does not measure it
    (True, {"cpuMillicores": "lots"}, 0, ""),  # reported but not a number: 0, with the reason
])
def test_node_decision_reads_system_usage_and_honours_the_switch(include, system, cpu, why):
    profile = _profile()
    if system is not None:
        profile["status"]["predictions"]["systemUsage"] = system
    settings = OversellSettings.from_policy(ColocationPolicy.from_spec(
        {"overselling": {"includeSystemUsage": include}}))
    assert settings.include_system_usage is include
    # capacity 17 cores, allocatable 16: 1000 m reserved by the kubelet
    decision = decide_node(_node(capacity_cpu="17"), profile, settings, NOW)
    assert decision.cpu.result == cpu and why in decision.cpu.system_overhead_reason
    status = decision.to_status(NOW)["cpuMillicores"]
    assert status["includeSystemUsage"] is include and status["systemReserved"] == 1000


@pytest.mark.parametrize("current, desired, threshold, write", [
    (None, 0, 10, True),          # nothing written yet
    (0, 500, 10, True),           # crosses 0 upwards
    (500, 0, 10, True),           # crosses 0 downwards
    (1000, 1099, 10, False),      # 9.9 % drift: not worth a write
    (1000, 1100, 10, True),       # 10 %
    (1000, 900, 10, True),
    (1000, 1000, 10, False),
    (1000, 1001, 0, True),        # threshold 0: every change
    # a large threshold holds increases back, never decreases of 10 % or more: at 100 % the node
    # kept offering 10000 m where 1 was decided
    (10000, 1, 100, True),
    (10000, 5001, 50, True),
    (10000, 9100, 50, False),     # 9 % down: within the 10 % a decrease may wait
    (10000, 14000, 50, False),    # 40 % up: the policy's threshold
])
def test_node_is_patched_only_when_the_change_is_worth_it(current, desired, threshold, write):
    assert should_write(current, desired, threshold) is write


OVERSOLD = {qos.OVERSUBSCRIPTION_NODE_LABEL: "true"}


def _node(name="n1", cpu="16", memory="64Gi", capacity_cpu=None, annotations=None, batch=None, labels=OVERSOLD):
    allocatable = {"cpu": cpu, "memory": memory, **(batch or {})}
    capacity = {"cpu": capacity_cpu or cpu, "memory": memory, **(batch or {})}
    return {"metadata": {"name": name, "labels": dict(labels), "annotations": annotations or {}},
            "status": {"capacity": capacity, "allocatable": allocatable}}


def _profile(age_seconds=5, cpu_peak=2000, memory_peak=8 * GiB, predictor="tidal"):
    observed = (NOW - datetime.timedelta(seconds=age_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"status": {"observedAt": observed, "predictions": {
        "predictor": predictor, "onlinePeak": {"cpuMillicores": cpu_peak, "memoryBytes": memory_peak}}}}


SETTINGS = OversellSettings.from_policy(ColocationPolicy.from_spec({}))


def test_fresh_profile_gives_batch_resources_with_an_explained_breakdown():
    decision = decide_node(_node(), _profile(), SETTINGS, NOW)
    assert decision.amounts == {qos.BATCH_CPU_RESOURCE: 6000,
                                qos.BATCH_MEMORY_RESOURCE: math.floor(64 * GiB * 0.6) - 8 * GiB - math.ceil(64 * GiB * 0.1)}
    status = decision.to_status(NOW)
    assert status["predictor"] == "tidal" and status["cpuMillicores"]["predictedOnlinePeak"] == 2000
    assert status["cpuMillicores"]["formula"].startswith("max(0, allocatable × cap")


TIDAL_BASIS = {"regime": "calibrated", "rule": "koordinator", "form": "all", "bound": "floor", "cpuCores": 2.0,
               "margin": 0.7, "reason": "koordinator × 0.700 ...; raised to its floor"}
MEMORY_BASIS = {"statistic": "max", "windowSeconds": 1800, "samples": 180}


def _basis(**parts):
    return {resource: {k: parts.get(resource, {}).get(k) for k in
                       ("statistic", "windowSeconds", "samples", "regime", "rule", "form", "bound", "cpuCores",
                        "provisional")}
            for resource in ("cpu", "memory")}


@pytest.mark.parametrize("predictions, expected", [
    pytest.param({"basis": TIDAL_BASIS, "memoryBasis": MEMORY_BASIS},
                 _basis(cpu={k: TIDAL_BASIS[k] for k in ("regime", "rule", "form", "bound", "cpuCores")},
                        memory=MEMORY_BASIS), id="history-predictor"),
    pytest.param({"predictor": "p95/1800s"}, _basis(cpu={"statistic": "p95", "windowSeconds": 1800},
                                                    memory={"statistic": "p95", "windowSeconds": 1800}),
                 id="statistic-predictor"),
    pytest.param({}, None, id="an-older-agent-says-nothing"),
])
def test_the_oversell_status_says_where_each_peak_came_from(predictions, expected):
    """status.oversell.peakBasis: what the decided amounts rest on, kept with them (the status is
    rewritten only when the amounts change, while predictions.basis moves on every report). Every
    key is written, null where it does not apply, so the merge patch drops an earlier one's."""
    profile = _profile()
    profile["status"]["predictions"].update(predictions)
    status = decide_node(_node(), profile, SETTINGS, NOW).to_status(NOW)
    assert status["peakBasis"] == expected


def test_a_stale_profile_clears_the_peak_basis():
    profile = _profile(age_seconds=181)
    profile["status"]["predictions"].update(basis=TIDAL_BASIS, memoryBasis=MEMORY_BASIS)
    status = decide_node(_node(), profile, SETTINGS, NOW).to_status(NOW)
    assert "peakBasis" in status and status["peakBasis"] is None  # null: the merge patch removes the old one


@pytest.mark.parametrize("profile, note", [
    (None, "no NodeProfile"),
    (_profile(age_seconds=181), "stale (181s old > degrade time 180s)"),
    ({"status": {}}, "no observedAt"),
    ({"status": {"observedAt": "yesterday", "predictions": {}}}, "no observedAt"),
    # an agent whose clock runs ahead: its last report would stay fresh long after it died
    (_profile(age_seconds=-3600), "observedAt is 3600s in the future (more than the 60s of clock skew allowed)"),
    (_profile(age_seconds=-86400 * 365), "in the future"),
    # fresh, but the agent's first report, before its first usage sample
    ({"status": {"observedAt": _profile()["status"]["observedAt"]}}, "no prediction yet"),
    ({"status": {"observedAt": _profile()["status"]["observedAt"], "predictions": {}}}, "no prediction yet"),
])
def test_missing_or_stale_profiles_drive_batch_resources_to_zero(profile, note):
    decision = decide_node(_node(), profile, SETTINGS, NOW)
    assert decision.amounts == {qos.BATCH_CPU_RESOURCE: 0, qos.BATCH_MEMORY_RESOURCE: 0}
    assert any(note in n for n in decision.notes), decision.notes


def test_a_profile_a_little_ahead_of_the_managers_clock_is_fresh():
    decision = decide_node(_node(), _profile(age_seconds=-30), SETTINGS, NOW)  # within the clock skew allowed
    assert decision.amounts[qos.BATCH_CPU_RESOURCE] == 6000 and not decision.notes


def test_kubelet_reservation_is_not_subtracted_twice():
    # capacity 17 cores, allocatable 16: the reservation is already out of allocatable
    decision = decide_node(_node(capacity_cpu="17"), _profile(), SETTINGS, NOW)
    assert decision.cpu.result == 6000 and decision.cpu.system_overhead == 0


@pytest.mark.parametrize("annotations, cpu, note", [
    ({"colocation.tidal.io/oversell-ratio-percent": "80"}, 16000 * 80 // 100 - 2000 - 1600, "overrides"),
    ({"colocation.tidal.io/oversell-ratio-percent": "eighty"}, 6000, "ignored: must be a number 0-100"),
    ({"colocation.tidal.io/oversell-safety-margin-percent": "140"}, 6000, "ignored"),
])
def test_node_annotations_override_the_policy_or_are_named_when_invalid(annotations, cpu, note):
    decision = decide_node(_node(annotations=annotations), _profile(), SETTINGS, NOW)
    assert decision.cpu.result == cpu and any(note in n for n in decision.notes)


def test_current_amounts_read_both_reporting_modes():
    node = _node(batch={qos.BATCH_CPU_RESOURCE: "6k", qos.BATCH_MEMORY_RESOURCE: "1073741824"},
                 annotations={"volcano.sh/oversubscription-cpu": "2500", "volcano.sh/oversubscription-memory": "1024"})
    assert current_amounts(node, "extendedResources") == {qos.BATCH_CPU_RESOURCE: 6000,
                                                          qos.BATCH_MEMORY_RESOURCE: GiB}
    assert current_amounts(node, "volcanoAnnotations") == {qos.BATCH_CPU_RESOURCE: 2500,
                                                           qos.BATCH_MEMORY_RESOURCE: 1024}
    assert current_amounts(_node(), "extendedResources") == {qos.BATCH_CPU_RESOURCE: None,
                                                             qos.BATCH_MEMORY_RESOURCE: None}


def _pod(node, level, phase="Running", **requests):
    return {"metadata": {"annotations": {qos.QOS_ANNOTATION: level} if level else {}},
            "spec": {"nodeName": node, "containers": [{"resources": {"requests": requests}}]},
            "status": {"phase": phase}}


@pytest.mark.parametrize("pods, expected", [
    ([], {}),
    ([_pod("n1", "BE", **{qos.BATCH_CPU_RESOURCE: "1500", qos.BATCH_MEMORY_RESOURCE: "1Gi"}),
      _pod("n1", "BE", **{qos.BATCH_CPU_RESOURCE: "2k"})],
     {"n1": {"cpu": 3500, "memory": 1 << 30}}),
    ([_pod("n1", "LS", cpu="2", memory="1Gi"), _pod("n1", None, cpu="1")], {}),  # online pods: nothing batch
    ([_pod("n1", "BE", "Succeeded", **{qos.BATCH_CPU_RESOURCE: "1000"}),
      _pod("n1", "BE", "Failed", **{qos.BATCH_CPU_RESOURCE: "1000"})], {}),  # finished: freed
    ([_pod(None, "BE", "Pending", **{qos.BATCH_CPU_RESOURCE: "1000"})], {}),  # not bound yet
    ([_pod("n1", "be-ish", **{qos.BATCH_CPU_RESOURCE: "1000"})], {}),  # unreadable level: not counted
    ([_pod("n1", "BE", **{qos.BATCH_CPU_RESOURCE: "lots"}), _pod("n2", "BE", **{qos.BATCH_MEMORY_RESOURCE: "1Mi"})],
     {"n1": {"cpu": 0, "memory": 0}, "n2": {"cpu": 0, "memory": 1 << 20}}),
])
def test_batch_requested_sums_bound_unfinished_be_pods_per_node(pods, expected):
    from tidal.manager.oversell.loop import be_pod_request, sum_by_node

    def batch_requested_by_node(pods, totals=None):
        """What run_batch_requested exports: the watch cache keeps be_pod_request's non-None
        values, summed per node."""
        return sum_by_node(filter(None, map(be_pod_request, pods)), totals)

    assert batch_requested_by_node(pods) == expected
    # page by page into the same sums
    totals = {}
    for pod in pods:
        batch_requested_by_node([pod], totals)
    assert totals == expected


def test_batch_requested_series_follow_the_latest_count():
    from prometheus_client import CollectorRegistry
    from tidal.manager.oversell.loop import export_batch_requested
    from tidal.metrics import manager_metrics
    registry = CollectorRegistry()
    metrics = manager_metrics(registry)
    export_batch_requested(metrics, {"n1": {"cpu": 1500, "memory": 10}, "n2": {"cpu": 1, "memory": 2}})
    export_batch_requested(metrics, {"n2": {"cpu": 3, "memory": 4}})
    value = registry.get_sample_value
    assert value("tidal_node_batch_requested", {"node": "n2", "resource": "cpu"}) == 3
    assert value("tidal_node_batch_requested", {"node": "n1", "resource": "cpu"}) is None  # gone



def test_safety_margin_is_a_share_of_allocatable_as_the_policy_field_says():
    # issue 20: the field said "in percent of that peak" while the arithmetic takes a share of
    # allocatable; both now say allocatable, and the margin does not shrink with the peak.
    import dataclasses

    from tidal.api.policy import FieldSpec, Overselling

    field = next(f for f in dataclasses.fields(Overselling) if f.name == "safety_margin_percent")
    description = FieldSpec.of(field).description
    assert "percent of the node's allocatable" in description
    assert "of that peak" not in description
    for peak in (0, 100, 2000, 8000):
        breakdown = batch_amount(ResourceInputs(16000, peak), 60, 10)
        assert breakdown.safety_margin == 1600  # 10 % of allocatable, whatever the peak
        assert breakdown.result == max(0, 9600 - peak - 1600)
