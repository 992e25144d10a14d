"""Which nodes the oversell master oversells (tidal.api.node_mode: Tidal's label or Volcano's
alias, not the alias the master wrote itself), the oversell types, and the Volcano label with
its marker: the pure decision table-driven, then one-off cycles against a fake API."""
import asyncio
import datetime
import math

import pytest

from tidal.api import qos
from tidal.api.node_mode import (OVERSELL_TYPES_ANNOTATION, VOLCANO_COLOCATION_LABEL,
                                 VOLCANO_LABEL_WRITTEN_ANNOTATION, VOLCANO_OVERSUBSCRIPTION_TYPES_ANNOTATION)
from tidal.manager.oversell.master import OversellMaster, master_node, volcano_patch
from tidal.manager.oversell.node_decision import (COLOCATION_ONLY_NOTE, VOLCANO_CPU_ANNOTATION,
                                                  VOLCANO_MEMORY_ANNOTATION, OversellSettings, decide_node,
                                                  breakdown_disagrees, mode_of, volcano_label_changes)

NOW = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.timezone.utc)
GiB = 1024 ** 3
CO, OV = qos.COLOCATION_NODE_LABEL, qos.OVERSUBSCRIPTION_NODE_LABEL
VOV, MARK = qos.VOLCANO_OVERSUBSCRIPTION_LABEL, VOLCANO_LABEL_WRITTEN_ANNOTATION
CPU_OK = 16000 * 60 // 100 - 2000 - 1600          # 16 cores, cap 60 %, peak 2000 m, margin 10 %
MEMORY_OK = math.floor(64 * GiB * 0.6) - 8 * GiB - math.ceil(64 * GiB * 0.1)
SETTINGS = OversellSettings()
VOLCANO = OversellSettings(reporting_mode="volcanoAnnotations")


def _node(labels=None, annotations=None, batch=None, name="n1"):
    allocatable = {"cpu": "16", "memory": "64Gi", **(batch or {})}
    return {"metadata": {"name": name, "uid": "uid-" + name, "labels": dict(labels or {}),
                         "annotations": dict(annotations or {})},
            "status": {"capacity": dict(allocatable), "allocatable": dict(allocatable)}}


def _profile(name="n1"):
    observed = (NOW - datetime.timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": {"name": name, "uid": "p-" + name}, "status": {"observedAt": observed, "predictions": {
        "predictor": "tidal", "onlinePeak": {"cpuMillicores": 2000, "memoryBytes": 8 * GiB}}}}


NOT_OVERSOLD = "node not oversold: neither colocation.tidal.io/oversubscription=true nor its alias"


@pytest.mark.parametrize("labels, annotations, mode, cpu, memory, cpu_reason, memory_reason, note", [
    # the four rows of the matrix
    ({}, {}, "off", 0, 0, NOT_OVERSOLD, NOT_OVERSOLD, NOT_OVERSOLD),
    ({CO: "true"}, {}, "colocation", 0, 0, COLOCATION_ONLY_NOTE, COLOCATION_ONLY_NOTE, COLOCATION_ONLY_NOTE),
    ({OV: "true"}, {}, "oversubscription", CPU_OK, MEMORY_OK, "ok", "ok", None),
    ({CO: "true", OV: "true"}, {}, "colocation+oversubscription", CPU_OK, MEMORY_OK, "ok", "ok", None),
    # Volcano's aliases are read as Tidal's labels
    ({VOV: "true"}, {}, "oversubscription", CPU_OK, MEMORY_OK, "ok", "ok", None),
    ({VOLCANO_COLOCATION_LABEL: "true"}, {}, "colocation", 0, 0, COLOCATION_ONLY_NOTE, COLOCATION_ONLY_NOTE,
     COLOCATION_ONLY_NOTE),
    # ... but not the Volcano label the master wrote itself
    ({VOV: "true"}, {MARK: "true"}, "off", 0, 0, NOT_OVERSOLD, NOT_OVERSOLD, "written by the oversell master itself"),
    ({CO: "true", VOV: "true"}, {MARK: "true"}, "colocation", 0, 0, COLOCATION_ONLY_NOTE, COLOCATION_ONLY_NOTE,
     COLOCATION_ONLY_NOTE),
    ({OV: "true", VOV: "true"}, {MARK: "true"}, "oversubscription", CPU_OK, MEMORY_OK, "ok", "ok", None),
    # Tidal's label wins over its alias, and the conflict is named
    ({OV: "false", VOV: "true"}, {}, "off", 0, 0, NOT_OVERSOLD, NOT_OVERSOLD, "disagree: colocation.tidal.io/oversub"),
    # oversell types: a type off is 0 with the reason, the other computed as usual
    ({OV: "true"}, {OVERSELL_TYPES_ANNOTATION: "cpu"}, "oversubscription", CPU_OK, 0, "ok",
     "memory is not oversold on this node: colocation.tidal.io/oversell-types=cpu", None),
    ({CO: "true", OV: "true"}, {OVERSELL_TYPES_ANNOTATION: "memory"}, "colocation+oversubscription", 0, MEMORY_OK,
     "cpu is not oversold on this node: colocation.tidal.io/oversell-types=memory", "ok", None),
    ({OV: "true"}, {VOLCANO_OVERSUBSCRIPTION_TYPES_ANNOTATION: "cpu"}, "oversubscription", CPU_OK, 0, "ok",
     "memory is not oversold on this node: volcano.sh/oversubscription-types=cpu", None),
    ({OV: "true"}, {OVERSELL_TYPES_ANNOTATION: "cpu,memory"}, "oversubscription", CPU_OK, MEMORY_OK, "ok", "ok", None),
    # types on a node that is not oversold change nothing: it is 0 for its mode
    ({CO: "true"}, {OVERSELL_TYPES_ANNOTATION: "cpu"}, "colocation", 0, 0, COLOCATION_ONLY_NOTE,
     COLOCATION_ONLY_NOTE, COLOCATION_ONLY_NOTE),
    # a value not understood is named; both types stay oversold
    ({OV: "true"}, {OVERSELL_TYPES_ANNOTATION: "gpu"}, "oversubscription", CPU_OK, MEMORY_OK, "ok", "ok",
     "colocation.tidal.io/oversell-types='gpu' is not understood"),
])
def test_node_decision_follows_the_node_mode_and_oversell_types(labels, annotations, mode, cpu, memory,
                                                                 cpu_reason, memory_reason, note):
    decision = decide_node(_node(labels, annotations), _profile(), SETTINGS, NOW)
    assert decision.mode == mode == str(mode_of(_node(labels, annotations)).mode)
    assert (decision.cpu.result, decision.memory.result) == (cpu, memory)
    assert cpu_reason in decision.cpu.reason and memory_reason in decision.memory.reason
    if note is not None:
        assert any(note in n for n in decision.notes), decision.notes
    status = decision.to_status(NOW)
    assert status["mode"] == mode
    assert status["cpuMillicores"]["reason"] == decision.cpu.reason
    assert status["memoryBytes"]["reason"] == decision.memory.reason
    # a resource at 0 still shows the node's allocatable, never a computed share
    for part, allocatable in ((status["cpuMillicores"], 16000), (status["memoryBytes"], 64 * GiB)):
        assert part["allocatable"] == allocatable
        if part["result"] == 0:
            assert part["capped"] == part["predictedOnlinePeak"] == part["safetyMargin"] == 0


def test_a_node_not_oversold_does_not_read_its_profile():
    decision = decide_node(_node({CO: "true"}), _profile(), SETTINGS, NOW)
    assert decision.predictor is None and decision.profile_observed_at is None
    assert decision.notes == (COLOCATION_ONLY_NOTE,)


@pytest.mark.parametrize("labels, annotations, changes", [
    # oversold by Tidal's label: the master writes the Volcano label and marks it, once
    ({OV: "true"}, {}, {"labels": {VOV: "true"}, "annotations": {MARK: "true"}}),
    ({OV: "true", VOV: "true"}, {MARK: "true"}, {}),
    # a Volcano label already there beside Tidal's (an older master's write) is marked
    ({OV: "true", VOV: "true"}, {}, {"labels": {VOV: "true"}, "annotations": {MARK: "true"}}),
    ({OV: "true", VOV: "false"}, {}, {"labels": {VOV: "true"}, "annotations": {MARK: "true"}}),
    # oversold by the user's Volcano label alone: left alone, never marked (else it would
    # switch itself off at the next cycle)
    ({VOV: "true"}, {}, {}),
    ({CO: "true", VOV: "true"}, {}, {}),
    # no longer oversold: the label and marker the master wrote go
    ({VOV: "true"}, {MARK: "true"}, {"labels": {VOV: None}, "annotations": {MARK: None}}),
    ({CO: "true", VOV: "true"}, {MARK: "true"}, {"labels": {VOV: None}, "annotations": {MARK: None}}),
    ({OV: "false", VOV: "true"}, {MARK: "true"}, {"labels": {VOV: None}, "annotations": {MARK: None}}),
    ({}, {MARK: "true"}, {"annotations": {MARK: None}}),   # the label removed by hand: the marker too
    # not oversold, a Volcano label the master did not write: not its to remove
    ({OV: "false", VOV: "true"}, {}, {}),
    ({CO: "true"}, {}, {}),
    ({}, {}, {}),
])
def test_volcano_label_changes(labels, annotations, changes):
    node = _node(labels, annotations)
    assert volcano_label_changes(node, mode_of(node)) == changes


def test_volcano_patch_carries_the_label_changes_in_the_same_patch():
    amounts = {qos.BATCH_CPU_RESOURCE: 6000, qos.BATCH_MEMORY_RESOURCE: 1024}
    assert volcano_patch(amounts, {"labels": {VOV: "true"}, "annotations": {MARK: "true"}}) == {"metadata": {
        "labels": {VOV: "true"},
        "annotations": {VOLCANO_CPU_ANNOTATION: "6000", VOLCANO_MEMORY_ANNOTATION: "1024", MARK: "true"}}}
    assert volcano_patch(amounts) == {"metadata": {
        "annotations": {VOLCANO_CPU_ANNOTATION: "6000", VOLCANO_MEMORY_ANNOTATION: "1024"}}}


@pytest.mark.parametrize("labels, annotations, batch, kept", [
    ({}, {}, None, False),
    ({CO: "true"}, {}, None, False),                       # colocation-only, nothing to undo
    ({CO: "true"}, {}, {qos.BATCH_CPU_RESOURCE: "3000"}, True),  # colocation-only with batch left: undo
    ({VOV: "true"}, {}, None, True),                       # the alias oversells
    ({VOV: "true"}, {MARK: "true"}, None, True),           # not oversold, but its own label to remove
    ({}, {MARK: "true"}, None, True),
    ({CO: "true", OV: "true"}, {}, None, True),
])
def test_master_keeps_the_nodes_its_mode_rule_concerns(labels, annotations, batch, kept):
    assert (master_node(_node(labels, annotations, batch)) is not None) is kept


class FakeAPI:
    """The KubeAPI calls of a one-off cycle: one page per list, writes recorded in order."""

    def __init__(self, nodes, profiles):
        self.lists = {"/api/v1/nodes": nodes, "profiles": profiles}
        self.writes = []

    async def list_pages(self, path, params=None, limit=500):
        items = self.lists["/api/v1/nodes"] if path == "/api/v1/nodes" else self.lists["profiles"]
        yield {"metadata": {"resourceVersion": "1"}, "items": items}

    async def strategic_patch(self, path, body):
        self.writes.append(("strategic", path, body))

    async def json_patch(self, path, ops):
        self.writes.append(("json", path, {op["path"]: op["value"] for op in ops}))

    async def merge_patch(self, path, body):
        self.writes.append(("merge", path, body))

    async def create(self, path, body):
        self.writes.append(("create", path, body["reason"]))


def _cycle(nodes, settings, profiles=None):
    api = FakeAPI(nodes, [_profile(n["metadata"]["name"]) for n in nodes] if profiles is None else profiles)
    result = asyncio.run(OversellMaster(api, settings, clock=lambda: NOW).cycle())
    return api.writes, result


def _volcano(cpu, memory):
    return {VOLCANO_CPU_ANNOTATION: str(cpu), VOLCANO_MEMORY_ANNOTATION: str(memory)}


@pytest.mark.parametrize("labels, annotations, node_patch", [
    # oversold by Tidal's label: amounts, label and marker in one patch
    ({OV: "true"}, {}, {"labels": {VOV: "true"}, "annotations": {**_volcano(CPU_OK, MEMORY_OK), MARK: "true"}}),
    # oversold by the user's alias: amounts only, the label is the user's
    ({VOV: "true"}, {}, {"annotations": _volcano(CPU_OK, MEMORY_OK)}),
    # Tidal's label removed after the master wrote the alias: driven to 0, label and marker gone
    ({VOV: "true"}, {**_volcano(3000, GiB), MARK: "true"},
     {"labels": {VOV: None}, "annotations": {**_volcano(0, 0), MARK: None}}),
    # switched to colocation only: the same, with the colocation-only note
    ({CO: "true", VOV: "true"}, {**_volcano(3000, GiB), MARK: "true"},
     {"labels": {VOV: None}, "annotations": {**_volcano(0, 0), MARK: None}}),
    # already 0, only the label and marker left: they go all the same
    ({VOV: "true"}, {**_volcano(0, 0), MARK: "true"}, {"labels": {VOV: None}, "annotations": {**_volcano(0, 0), MARK: None}}),
    # a memory type off: memory 0
    ({OV: "true", VOV: "true"}, {MARK: "true", OVERSELL_TYPES_ANNOTATION: "cpu"},
     {"annotations": _volcano(CPU_OK, 0)}),
    # colocation-only, nothing written before: nothing to do
    ({CO: "true"}, {}, None),
])
def test_volcano_mode_cycle_writes_label_and_marker_with_the_amounts(labels, annotations, node_patch):
    writes, result = _cycle([_node(labels, annotations)], VOLCANO)
    node_writes = [body["metadata"] for kind, path, body in writes if kind == "strategic"]
    assert node_writes == ([node_patch] if node_patch else [])
    profile_writes = [body["status"]["oversell"] for kind, _, body in writes if kind == "merge"]
    assert len(profile_writes) == (1 if node_patch else 0)
    if profile_writes and labels.get(CO) and not labels.get(OV):
        assert profile_writes[0]["notes"] == [COLOCATION_ONLY_NOTE] and profile_writes[0]["mode"] == "colocation"
    if not node_patch:
        assert result.nodes == 0


def test_volcano_mode_cycle_after_its_own_write_writes_nothing_and_undoes_itself():
    """The marker ends the loop: written once, read back as output, removed with Tidal's label."""
    node, profile = _node({OV: "true"}), _profile()
    writes, _ = _cycle([node], VOLCANO, [profile])
    ((_, _, body),) = [w for w in writes if w[0] == "strategic"]
    node["metadata"]["labels"].update(body["metadata"]["labels"])
    node["metadata"]["annotations"].update(body["metadata"]["annotations"])
    ((_, _, breakdown),) = [w for w in writes if w[0] == "merge"]   # as the API server stores it
    profile["status"].update(breakdown["status"])
    assert [w for w in _cycle([node], VOLCANO, [profile])[0] if w[0] == "strategic"] == []
    del node["metadata"]["labels"][OV]
    (undo,) = [w[2]["metadata"] for w in _cycle([node], VOLCANO, [profile])[0] if w[0] == "strategic"]
    assert undo["labels"] == {VOV: None} and undo["annotations"][MARK] is None


@pytest.mark.parametrize("labels, batch, amounts, events", [
    ({CO: "true"}, {qos.BATCH_CPU_RESOURCE: "3000", qos.BATCH_MEMORY_RESOURCE: str(GiB)}, (0, 0), 1),
    ({VOV: "true"}, None, (CPU_OK, MEMORY_OK), 0),
    ({OV: "true"}, None, (CPU_OK, MEMORY_OK), 0),
    ({CO: "true"}, None, None, 0),
])
def test_extended_resources_cycle_follows_the_mode(labels, batch, amounts, events):
    writes, _ = _cycle([_node(labels, None, batch)], SETTINGS)
    status = [ops for kind, path, ops in writes if kind == "json"]
    if amounts is None:
        assert writes == []
        return
    assert status == [{"/status/capacity/kubernetes.io~1batch-cpu": str(amounts[0]),
                       "/status/capacity/kubernetes.io~1batch-memory": str(amounts[1]),
                       "/status/allocatable/kubernetes.io~1batch-cpu": str(amounts[0]),
                       "/status/allocatable/kubernetes.io~1batch-memory": str(amounts[1])}]
    assert [w for w in writes if w[0] == "strategic"] == []   # no Volcano label in this mode
    assert len([w for w in writes if w[0] == "create"]) == events


# -- a half-written node (issue 15): a leader killed between its two writes of a node (the Node's
# batch amounts, then the breakdown in its NodeProfile); the next leader's cycle finishes it even
# though the amounts need no change.

CPU, MEMORY = qos.BATCH_CPU_RESOURCE, qos.BATCH_MEMORY_RESOURCE


def _with_breakdown(profile, cpu, memory):
    profile["status"]["oversell"] = {"cpuMillicores": {"result": cpu}, "memoryBytes": {"result": memory}}
    return profile


@pytest.mark.parametrize("oversell, current, disagrees", [
    # the breakdown names what the node carries: nothing to finish
    ({"cpuMillicores": {"result": 3000}, "memoryBytes": {"result": 1024}}, {CPU: 3000, MEMORY: 1024}, False),
    # the node was patched, the breakdown not (killed in between)
    ({"cpuMillicores": {"result": 2000}, "memoryBytes": {"result": 1024}}, {CPU: 3000, MEMORY: 1024}, True),
    ({"cpuMillicores": {"result": 3000}, "memoryBytes": {"result": 0}}, {CPU: 3000, MEMORY: 1024}, True),
    # no breakdown at all on a node with amounts (never written, or the status was lost)
    (None, {CPU: 3000, MEMORY: 1024}, True),
    ({}, {CPU: 0, MEMORY: 0}, True),
    # a node without amounts: nothing was written, nothing half-written
    (None, {CPU: None, MEMORY: None}, False),
    # an amount missing counts as 0
    ({"cpuMillicores": {"result": 0}, "memoryBytes": {"result": 1024}}, {CPU: None, MEMORY: 1024}, False),
])
def test_breakdown_disagrees(oversell, current, disagrees):
    profile = {"metadata": {"name": "n1"}, "status": {} if oversell is None else {"oversell": oversell}}
    assert breakdown_disagrees(profile, current) is disagrees


@pytest.mark.parametrize("published, notes, disagrees", [
    (["annotation x=50 overrides the policy (60)"], ["annotation x=50 overrides the policy (60)"], False),
    # a user's annotation ignored since the last write: the note must be published
    ([], ["annotation colocation.tidal.io/oversell-ratio-percent='lots' ignored: must be a number 0-100"], True),
    # ... and removed again
    (["annotation x=50 overrides the policy (60)"], [], True),
    # only the figures changed (a stale profile's age): not worth a write every cycle
    (["NodeProfile is stale (301s old > degrade time 300s)"], ["NodeProfile is stale (306s old > degrade time 300s)"],
     False),
    (["NodeProfile observedAt is 75s in the future (more than the 60s of clock skew allowed)"],
     ["NodeProfile observedAt is 80s in the future (more than the 60s of clock skew allowed)"], False),
    # an override's value changed (its amounts within the threshold): the note said 62 while 63 decided
    (["annotation colocation.tidal.io/oversell-ratio-percent=62 overrides the policy (60)"],
     ["annotation colocation.tidal.io/oversell-ratio-percent=63 overrides the policy (60)"], True),
])
def test_a_breakdown_whose_notes_disagree_is_written_again(published, notes, disagrees):
    profile = {"status": {"oversell": {"cpuMillicores": {"result": 1}, "memoryBytes": {"result": 2},
                                       "notes": published}}}
    assert breakdown_disagrees(profile, {CPU: 1, MEMORY: 2}, notes) is disagrees
    assert breakdown_disagrees(profile, {CPU: 1, MEMORY: 2}) is False   # notes not given: amounts only


def test_a_node_without_a_node_profile_has_nothing_half_written():
    assert breakdown_disagrees(None, {CPU: 3000, MEMORY: 1024}) is False


def test_the_next_cycle_finishes_a_half_written_node_and_then_writes_nothing():
    # The node carries the amounts of the killed leader's cycle; its breakdown is the one before.
    node = _node({OV: "true"}, batch={CPU: str(CPU_OK), MEMORY: str(MEMORY_OK)})
    profile = _with_breakdown(_profile(), CPU_OK - 1000, MEMORY_OK)
    writes, result = _cycle([node], SETTINGS, [profile])
    (breakdown,) = [body["status"]["oversell"] for kind, _, body in writes if kind == "merge"]
    assert (breakdown["cpuMillicores"]["result"], breakdown["memoryBytes"]["result"]) == (CPU_OK, MEMORY_OK)
    assert [kind for kind, _, _ in writes if kind == "create"] == []   # no Event: the amounts did not drop
    # once finished, the node and its breakdown agree: the following cycle writes nothing
    profile["status"]["oversell"] = breakdown
    assert _cycle([node], SETTINGS, [profile])[0] == []


def test_a_node_and_breakdown_that_agree_are_not_written_again():
    node = _node({OV: "true"}, batch={CPU: str(CPU_OK), MEMORY: str(MEMORY_OK)})
    assert _cycle([node], SETTINGS, [_with_breakdown(_profile(), CPU_OK, MEMORY_OK)])[0] == []


# -- found by review (2026-12-02): a node's odd annotation, overselling switched off, a reporting
# mode switched, one node's write failing

def test_an_infinite_volcano_annotation_on_any_node_stops_nothing():
    """``float("1e999")`` is inf and ``int(inf)`` raised OverflowError in the node cache's
    transform: every cycle failed, for every node, in both reporting modes."""
    odd = _node({}, {VOLCANO_CPU_ANNOTATION: "1e999"}, name="odd")  # not even oversold
    stale = _node({OV: "true"}, None, {CPU: "6000", MEMORY: str(8 * GiB)}, name="n1")
    old = {**_profile("n1"), "status": {"observedAt": "2024-05-01T10:00:00Z"}}  # two hours old: stale
    for settings in (SETTINGS, VOLCANO):
        writes, result = _cycle([odd, stale], settings, [old])
        assert result.decisions["n1"].amounts == {CPU: 0, MEMORY: 0}
        assert any(path.endswith("/n1/status") or path.endswith("/n1") for _, path, _ in writes), writes


def test_overselling_switched_off_is_not_overridden_by_a_nodes_ratio():
    settings = OversellSettings(enabled=False)
    node = _node({OV: "true"}, {"colocation.tidal.io/oversell-ratio-percent": "80"},
                 {CPU: "6000", MEMORY: str(8 * GiB)})
    decision = decide_node(node, _profile(), settings, NOW)
    assert decision.amounts == {CPU: 0, MEMORY: 0}
    assert decision.notes == ("overselling.enabled is false in the ColocationPolicy: batch resources 0 on every "
                              "node",)
    writes, _ = _cycle([node], settings)
    assert [ops for kind, _, ops in writes if kind == "json"][0]["/status/allocatable/kubernetes.io~1batch-cpu"] == "0"


def test_a_switch_to_volcano_annotations_drives_the_extended_resources_left_to_0():
    """Written in extendedResources mode, then the policy says volcanoAnnotations: the extended
    resources stayed on the node for ever (and were never driven to 0 with the node's label)."""
    node = _node({CO: "true"}, None, {CPU: "6000", MEMORY: str(8 * GiB)})  # colocation-only now
    writes, _ = _cycle([node], VOLCANO)
    status = [ops for kind, _, ops in writes if kind == "json"]
    assert status == [{f"/status/{part}/kubernetes.io~1batch-{r}": "0"
                       for part in ("capacity", "allocatable") for r in ("cpu", "memory")}]
    oversold = _node({OV: "true"}, None, {CPU: "6000", MEMORY: str(8 * GiB)})  # oversold: Volcano's keys instead
    writes, _ = _cycle([oversold], VOLCANO)
    assert [w[0] for w in writes if w[0] in ("json", "strategic")] == ["strategic", "json"]
    node["status"]["allocatable"].update({CPU: "0", MEMORY: "0"})  # once undone, not written again
    node["status"]["capacity"].update({CPU: "0", MEMORY: "0"})
    assert _cycle([node], VOLCANO)[0] == []


def test_a_switch_to_extended_resources_removes_the_volcano_keys_the_master_wrote():
    written = _node({OV: "true", VOV: "true"}, {**_volcano(3000, GiB), MARK: "true"})
    writes, _ = _cycle([written], SETTINGS)
    strategic = [body["metadata"] for kind, _, body in writes if kind == "strategic"]
    assert strategic == [{"labels": {VOV: None}, "annotations": {MARK: None, VOLCANO_CPU_ANNOTATION: None,
                                                                 VOLCANO_MEMORY_ANNOTATION: None}}]
    users = _node({VOV: "true"}, _volcano(3000, GiB))  # the user's own Volcano label: not the master's to remove
    assert [w for w in _cycle([users], SETTINGS)[0] if w[0] == "strategic"] == []


class Failing(FakeAPI):
    """Node status patches of the nodes in ``failing`` raise their error."""

    def __init__(self, nodes, profiles, failing: dict[str, str]):
        super().__init__(nodes, profiles)
        self.failing = failing

    async def json_patch(self, path, ops):
        name = path.split("/")[-2]  # /api/v1/nodes/<name>/status
        if name in self.failing:
            raise RuntimeError(self.failing[name])
        await super().json_patch(path, ops)


def test_one_nodes_failed_write_stops_no_other_node():
    nodes = [_node({OV: "true"}, name=n) for n in ("a", "gone", "b")]
    api = Failing(nodes, [_profile(n["metadata"]["name"]) for n in nodes], {"gone": "404 nodes gone not found"})
    result = asyncio.run(OversellMaster(api, SETTINGS, clock=lambda: NOW).cycle())
    assert set(result.failed) == {"gone"} and "404" in result.failed["gone"]
    assert sorted(path for kind, path, _ in api.writes if kind == "json") == [
        "/api/v1/nodes/a/status", "/api/v1/nodes/b/status"]


def test_the_metrics_show_what_the_nodes_carry_and_count_the_failed_writes():
    """tidal_node_batch_allocatable is what is published: the decision where the cycle wrote it,
    what the node carries where its write failed (it used to show the decision there too) or where
    the change was within the threshold; tidal_oversell_write_failures_total counts the failure."""
    from prometheus_client import CollectorRegistry
    from tidal.manager.oversell.loop import export_cycle
    from tidal.metrics import manager_metrics

    carried = {CPU: "1000", MEMORY: str(GiB)}
    nodes = [_node({OV: "true"}, name="a", batch=carried), _node({OV: "true"}, name="gone", batch=carried),
             _node({OV: "true"}, name="same", batch={CPU: str(CPU_OK - 1), MEMORY: str(MEMORY_OK)}),
             _node({OV: "true"}, name="new")]  # no batch resources yet
    api = Failing(nodes, [_profile("a"), _profile("gone"), _with_breakdown(_profile("same"), CPU_OK - 1, MEMORY_OK),
                          _profile("new")], {name: "500 failed calling webhook" for name in ("gone", "new")})
    result = asyncio.run(OversellMaster(api, SETTINGS, clock=lambda: NOW).cycle())
    assert set(result.failed) == {"gone", "new"} and result.published == {"a"}
    metrics = manager_metrics(CollectorRegistry())
    export_cycle(metrics, result, 0.0)

    def gauge(node, resource):
        return metrics.batch_allocatable.labels(node, resource)._value.get()
    assert (gauge("a", "cpu"), gauge("a", "memory")) == (CPU_OK, MEMORY_OK)   # written
    assert (gauge("gone", "cpu"), gauge("gone", "memory")) == (1000, GiB)     # not written: what it carries
    assert gauge("same", "cpu") == CPU_OK - 1                                 # within the threshold
    assert (gauge("new", "cpu"), gauge("new", "memory")) == (0, 0)            # none yet: 0
    assert metrics.write_failures.labels("gone")._value.get() == 1
    assert "a" not in {s.labels["node"] for m in metrics.write_failures.collect() for s in m.samples}
    assert metrics.cycles.labels("ok")._value.get() == 1


def test_a_drop_event_the_api_server_rejects_for_good_is_counted():
    """tidal_oversell_events_dropped_total: a BatchResourcesDropped Event the API server rejects for
    good (422) was only a log line."""
    from prometheus_client import CollectorRegistry
    from tidal.kube.client import ApiError
    from tidal.manager.oversell.loop import new_master
    from tidal.metrics import manager_metrics

    class Rejecting(FakeAPI):
        async def create(self, path, body):
            raise ApiError(422, "Event is invalid")

    node = _node({OV: "true"}, batch={CPU: "6000", MEMORY: str(8 * GiB)})
    stale = {**_profile(), "status": {"observedAt": "2024-05-01T10:00:00Z"}}  # drives the node to 0: an Event
    metrics = manager_metrics(CollectorRegistry())
    master = new_master(Rejecting([node], [stale]), metrics)
    master.settings = SETTINGS
    master.clock = lambda: NOW
    result = asyncio.run(master.cycle())
    assert result.decisions["n1"].amounts == {CPU: 0, MEMORY: 0} and result.events == 0
    assert metrics.events_dropped._value.get() == 1 and len(master.events) == 0
