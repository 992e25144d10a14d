"""The NRI plugin's decisions (pure), table-driven; the same numbers as the node engine's."""
from __future__ import annotations

import json

import pytest

from tidal.api import qos
from tidal.agent.nri.decisions import (
    BATCH_RESOURCES_ANNOTATION,
    BatchRequest,
    BatchResourcesAnnotationError,
    ContainerRef,
    Resources,
    batch_requests_of,
    be_resources,
    decide,
    page_rounded,
    sync_updates,
)
from tidal.agent.qos.be_batch_resources import PAGE_SIZE, milli_cpu_to_quota, milli_cpu_to_shares

QOS = qos.QOS_ANNOTATION


def ref(annotations, container="c"):
    return ContainerRef("ns", "pod", "uid", container, annotations)


def batch(**containers):
    return json.dumps({name: dict(zip((qos.BATCH_CPU_RESOURCE, qos.BATCH_MEMORY_RESOURCE), values))
                       for name, values in containers.items()})


@pytest.mark.parametrize("request_, expected", [
    (None, Resources(cpu_shares=2)),
    (BatchRequest(), Resources(cpu_shares=2)),
    (BatchRequest(cpu_millicores=500), Resources(cpu_shares=512, cpu_quota=50_000, cpu_period=100_000)),
    (BatchRequest(cpu_millicores=1), Resources(cpu_shares=2, cpu_quota=1_000, cpu_period=100_000)),
    (BatchRequest(cpu_millicores=300_000), Resources(cpu_shares=262_144, cpu_quota=30_000_000, cpu_period=100_000)),
    (BatchRequest(memory_bytes=PAGE_SIZE * 10 + 1), Resources(cpu_shares=2, memory_limit=PAGE_SIZE * 10)),
    (BatchRequest(memory_bytes=1), Resources(cpu_shares=2, memory_limit=PAGE_SIZE)),
])
def test_be_resources(request_, expected):
    assert be_resources(request_) == expected


@pytest.mark.parametrize("millicores", [1, 10, 999, 1000, 1500, 64_000])
def test_be_cpu_is_the_engines_arithmetic(millicores):
    res = be_resources(BatchRequest(cpu_millicores=millicores))
    assert (res.cpu_shares, res.cpu_quota) == (milli_cpu_to_shares(millicores), milli_cpu_to_quota(millicores))


@pytest.mark.parametrize("annotations, container, hook, expected_level, expected, lookup", [
    ({}, "c", None, None, Resources(), False),
    ({"other": "x"}, "c", None, None, Resources(), False),
    ({QOS: "HLS"}, "c", "0-3", qos.QoSLevel.HLS, Resources(), False),
    ({QOS: "LS"}, "c", None, qos.QoSLevel.LS, Resources(), False),
    ({QOS: "LS"}, "c", "0-3", qos.QoSLevel.LS, Resources(cpuset_cpus="0-3"), False),
    ({QOS: "BE"}, "c", None, qos.QoSLevel.BE, Resources(cpu_shares=2), True),
    ({QOS: "BE", BATCH_RESOURCES_ANNOTATION: batch(c=("1500", "1Gi"))}, "c", "0-3", qos.QoSLevel.BE,
     Resources(cpu_shares=1536, cpu_quota=150_000, cpu_period=100_000, memory_limit=1 << 30), False),
    ({QOS: "BE", BATCH_RESOURCES_ANNOTATION: batch(c=("1500", "1Gi"))}, "other", None, qos.QoSLevel.BE,
     Resources(cpu_shares=2), False),
    ({"openfuyao.com/qos-level": "BE", BATCH_RESOURCES_ANNOTATION: batch(c=("2k", "0"))}, "c", None,
     qos.QoSLevel.BE, Resources(cpu_shares=2048, cpu_quota=200_000, cpu_period=100_000), False),
    ({"volcano.sh/qos-level": "LC"}, "c", "1", qos.QoSLevel.HLS, Resources(), False),
])
def test_decide(annotations, container, hook, expected_level, expected, lookup):
    decision = decide(ref(annotations, container), ls_cpuset=(lambda r: hook) if hook else None)
    assert (decision.level, decision.resources, decision.needs_lookup, decision.problem) == (
        expected_level, expected, lookup, None)


def test_decide_uses_looked_up_requests_only_without_the_annotation():
    looked = {"c": BatchRequest(cpu_millicores=1000)}
    assert decide(ref({QOS: "BE"}), looked_up=looked).resources.cpu_quota == 100_000
    annotated = {QOS: "BE", BATCH_RESOURCES_ANNOTATION: batch(c=("500", "0"))}
    assert decide(ref(annotated), looked_up=looked).resources.cpu_quota == 50_000


@pytest.mark.parametrize("annotations, problem", [
    ({QOS: "be"}, "case-sensitive"),
    ({"openfuyao.com/qos-level": "BE", "volcano.sh/qos-level": "LC"}, "disagree"),
])
def test_bad_qos_annotation_is_no_decision_with_a_reason(annotations, problem):
    decision = decide(ref(annotations))
    assert decision.level is None and not decision.resources and problem in decision.problem


@pytest.mark.parametrize("value, message", [
    ("{not json", "must be a JSON object"),
    ("[]", "must be a JSON object of container names"),
    ('{"c": 5}', "container 'c': must be an object"),
    ('{"c": {"cpu": "1"}}', "unknown resource 'cpu'"),
    ('{"c": {"kubernetes.io/batch-cpu": "lots"}}', "'kubernetes.io/batch-cpu'"),
    ('{"c": {"kubernetes.io/batch-memory": true}}', "must be a quantity string or an integer"),
    ('{"c": {"kubernetes.io/batch-memory": "-1"}}', "'kubernetes.io/batch-memory'"),
    # a quota of m × 100 µs that does not fit the runtime's int64 failed CreateContainer
    ('{"c": {"kubernetes.io/batch-cpu": "100P"}}', "'kubernetes.io/batch-cpu': at most 1000000000, got '100P'"),
    ('{"c": {"kubernetes.io/batch-memory": "9Ei"}}', "'kubernetes.io/batch-memory': \"9Ei\" is too large"),
])
def test_bad_batch_annotation_names_the_field(value, message):
    with pytest.raises(BatchResourcesAnnotationError, match=BATCH_RESOURCES_ANNOTATION) as err:
        batch_requests_of({BATCH_RESOURCES_ANNOTATION: value})
    assert message in str(err.value)
    # and the plugin still gives the BE container the minimum weight, with the reason logged
    decision = decide(ref({QOS: "BE", BATCH_RESOURCES_ANNOTATION: value}))
    assert decision.resources == Resources(cpu_shares=2) and message in decision.problem


def test_batch_requests_of():
    assert batch_requests_of(None) is None
    assert batch_requests_of({QOS: "BE"}) is None
    assert batch_requests_of({BATCH_RESOURCES_ANNOTATION: '{"a": {"kubernetes.io/batch-cpu": 250}, "b": {}}'}) == {
        "a": BatchRequest(cpu_millicores=250), "b": BatchRequest()}


def test_page_rounded():
    assert page_rounded(PAGE_SIZE * 3) == PAGE_SIZE * 3
    assert page_rounded(PAGE_SIZE * 3 + 7) == PAGE_SIZE * 3
    assert page_rounded(5) == PAGE_SIZE


def test_sync_updates_only_what_differs():
    be = {QOS: "BE", BATCH_RESOURCES_ANNOTATION: batch(c=("500", "0"))}
    right = Resources(cpu_shares=512, cpu_quota=50_000, cpu_period=100_000)
    rows = [
        ("wrong", ref(be), Resources(cpu_shares=2)),
        ("right", ref(be), right),
        ("right-plus-extra", ref(be), Resources(cpu_shares=512, cpu_quota=50_000, cpu_period=100_000,
                                                cpuset_cpus="0-1")),
        ("ls", ref({QOS: "LS"}), Resources(cpu_shares=1024)),
        ("plain", ref({}), Resources()),
    ]
    assert [(cid, d.resources) for cid, d in sync_updates(rows)] == [("wrong", right)]


@pytest.mark.parametrize("request_, expected", [
    (None, Resources(cpu_shares=2)),
    (BatchRequest(cpu_millicores=500), Resources(cpu_shares=512)),
    (BatchRequest(cpu_millicores=500, memory_bytes=PAGE_SIZE * 4),
     Resources(cpu_shares=512, memory_limit=PAGE_SIZE * 4)),
])
def test_no_be_quota_under_cgroup_v1s_nested_quota_rule(request_, expected):
    """v1 refuses a container quota above its BE parent's, which moves every round: the plugin
    leaves the quota to the agent's round (weights and memory nest freely: still set)."""
    assert be_resources(request_, nested_quota_rule=True) == expected
    be = {QOS: "BE", BATCH_RESOURCES_ANNOTATION: batch(c=("500", "0"))}
    assert decide(ref(be), nested_quota_rule=True).resources == Resources(cpu_shares=512)


def test_sync_updates_under_the_nested_quota_rule_leave_the_agents_clamped_quota_alone():
    be = {QOS: "BE", BATCH_RESOURCES_ANNOTATION: batch(c=("500", "0"))}
    rows = [
        ("clamped", ref(be), Resources(cpu_shares=512, cpu_quota=20_000, cpu_period=100_000)),
        ("unbounded", ref(be), Resources(cpu_shares=512)),
        ("wrong-weight", ref(be), Resources(cpu_shares=2, cpu_quota=20_000, cpu_period=100_000)),
    ]
    assert [(cid, d.resources) for cid, d in sync_updates(rows, nested_quota_rule=True)] == [
        ("wrong-weight", Resources(cpu_shares=512))]


@pytest.mark.parametrize("controllers, rule", [
    ("cpuset cpu io memory pids\n", False),  # cgroup v2 with the cpu controller
    ("memory pids\n", True),                 # v2 without cpu (hybrid: cpu stays v1)
    (None, True),                            # no cgroup.controllers: v1 (or nothing mounted)
])
def test_nested_quota_rule_of_the_plugins_cgroup_mount(tmp_path, controllers, rule):
    from tidal.agent.nri.main import nested_quota_rule
    if controllers is not None:
        (tmp_path / "cgroup.controllers").write_text(controllers)
    assert nested_quota_rule(tmp_path) is rule


def test_batch_resources_switched_off_gives_be_containers_nothing():
    """``beIsolation.batchResources.enabled: false``: the agent's round sets no batch limits and
    restores those it set; the plugin must not set them on new containers either (nothing would
    ever take them off)."""
    be = {QOS: "BE", BATCH_RESOURCES_ANNOTATION: batch(c=("500", "1048576"))}
    off = decide(ref(be), batch_resources=False)
    assert off.level is qos.QoSLevel.BE and not off.resources and not off.needs_lookup
    assert decide(ref({QOS: "BE"}), batch_resources=False).needs_lookup is False
    assert decide(ref({QOS: "LS"}), batch_resources=False).level is qos.QoSLevel.LS
    rows = [("be", ref(be), Resources(cpu_shares=2))]
    assert sync_updates(rows, batch_resources=False) == []


def test_sync_updates_keep_what_was_read_from_the_pod_object():
    """A BE pod without the annotation whose requests the plugin read from the API server: a
    reconnect's Synchronize must not set its container back to the minimum shares."""
    looked = {"uid": {"c": BatchRequest(cpu_millicores=500)}}
    rows = [("c1", ref({QOS: "BE"}), Resources(cpu_shares=512, cpu_quota=50_000, cpu_period=100_000))]
    assert sync_updates(rows, looked_up=looked) == []
    assert [(cid, d.resources) for cid, d in sync_updates(rows)] == [("c1", Resources(cpu_shares=2))]  # as before
    wrong = [("c1", ref({QOS: "BE"}), Resources(cpu_shares=2))]
    assert [(cid, d.resources) for cid, d in sync_updates(wrong, looked_up=looked)] == [
        ("c1", Resources(cpu_shares=512, cpu_quota=50_000, cpu_period=100_000))]
