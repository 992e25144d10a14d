"""The pure cores of the modules, table-driven: config edits, version rules, node plans, policy merges."""
import pytest
import tomlkit
import yaml

from ansible_collections.tidal.colocation.plugins.module_utils import containerd, kubelet, node_mode, node_state, volcano
from ansible_collections.tidal.colocation.plugins.modules.policy import desired_spec, merge
from ansible_collections.tidal.colocation.plugins.module_utils.policy_model import PolicyValidationError

KUBELET = """\
# written by kubeadm
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd  # keep
systemReserved:
  memory: 1Gi
"""


@pytest.mark.parametrize("options, changed_keys", [
    ({"cpu_manager_policy": "static", "reserved_system_cpus": "0-1"}, {"cpuManagerPolicy", "reservedSystemCPUs"}),
    ({"cpu_manager_policy": "static", "system_reserved": {"cpu": "500m"}}, {"cpuManagerPolicy", "systemReserved"}),
    ({"topology_manager_policy": "single-numa-node"}, {"topologyManagerPolicy"}),
    ({"system_reserved": {"memory": "1Gi"}}, set()),
])
def test_kubelet_edit_sets_only_owned_keys(options, changed_keys):
    text, before, after = kubelet.edit(KUBELET, kubelet.desired_keys(**options))
    assert {k for k in after if before[k] != after[k]} == changed_keys
    config = yaml.safe_load(text)
    assert config["cgroupDriver"] == "systemd"
    assert "# keep" in text and "# written by kubeadm" in text
    assert config["systemReserved"]["memory"] == "1Gi"   # merged, not replaced
    if not changed_keys:
        assert text == KUBELET


@pytest.mark.parametrize("options, message", [
    ({"cpu_manager_policy": "static"}, "cpuManagerPolicy: static requires a CPU reservation"),
    ({"cpu_manager_policy": "static", "system_reserved": {"cpu": "0"}}, "requires a CPU reservation"),
    ({"cpu_manager_policy": "dynamic"}, "cpuManagerPolicy: must be one of none, static"),
    ({"reserved_system_cpus": "first two"}, "reservedSystemCPUs: must be a CPU list"),
    ({"kube_reserved": {"cpu": "lots"}}, "kubeReserved.cpu: must be a CPU quantity"),
    ({"topology_manager_policy": "numa"}, "topologyManagerPolicy: must be one of"),
])
def test_kubelet_refuses_what_the_kubelet_would(options, message):
    with pytest.raises(kubelet.KubeletConfigError, match=message):
        kubelet.edit(KUBELET, kubelet.desired_keys(**options))


@pytest.mark.parametrize("text, message", [
    ("", "the file is empty"), ("- a\n", "must be a mapping"), ("kind: Pod\n", "kind: must be KubeletConfiguration"),
    ("kind: [\n", "not valid YAML"),
])
def test_kubelet_refuses_files_that_are_not_a_kubelet_configuration(text, message):
    with pytest.raises(kubelet.KubeletConfigError, match=message):
        kubelet.edit(text, {"cpuManagerPolicy": "none"})


@pytest.mark.parametrize("output, version", [
    ("containerd github.com/containerd/containerd v1.7.13 7c3aca7", (1, 7, 13)),
    ("containerd containerd.io 1.6.21 3dce8eb", (1, 6, 21)),
    ("containerd github.com/containerd/containerd/v2 v2.0.4 1a43cb6", (2, 0, 4)),
    ("2.1", (2, 1, 0)),
])
def test_containerd_version_parsing(output, version):
    assert containerd.parse_containerd_version(output) == version


@pytest.mark.parametrize("version, ok", [((1, 6, 99), False), ((1, 7, 0), True), ((2, 0, 0), True), ((0, 9, 0), False)])
def test_containerd_minimum_version(version, ok):
    if ok:
        containerd.check_containerd_version(version)
    else:
        with pytest.raises(containerd.ContainerdConfigError, match="NRI needs containerd >= 1.7"):
            containerd.check_containerd_version(version)


@pytest.mark.parametrize("text, version, message", [
    ("root = '/x'\n", (1, 7, 0), "config schema 1 is not supported"),
    ("version = 3\n", (1, 7, 0), "schema 3 needs containerd >= 2.0"),
    ("version = 'two'\n", None, "version: must be an integer"),
    ("version = \n", None, "not valid TOML"),
])
def test_containerd_refuses_schemas_without_nri(text, version, message):
    with pytest.raises(containerd.ContainerdConfigError, match=message):
        containerd.set_nri(text, containerd.nri_settings(), version)


def test_containerd_sets_the_whole_table_and_keeps_the_rest():
    text = 'version = 2\n# mine\n[plugins."io.containerd.nri.v1.nri"]\n  disable = true  # was off\n  extra = 1\n'
    new, before, after = containerd.set_nri(text, containerd.nri_settings(socket_path="/run/nri.sock"))
    parsed = tomlkit.parse(new).unwrap()
    assert parsed["plugins"][containerd.NRI_PLUGIN] == after == containerd.nri_settings(socket_path="/run/nri.sock")
    assert before == {"disable": True, "extra": 1}
    assert "# mine" in new
    assert containerd.set_nri(new, after)[0] == new


def test_containerd_empty_file_starts_the_versions_schema():
    new, before, _ = containerd.set_nri("", containerd.nri_settings(), (2, 0, 1))
    assert before is None and tomlkit.parse(new)["version"] == 3


VOLCANO = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: gang
  - name: priority
- plugins:
  - name: nodeorder
    arguments:
      nodeaffinity.weight: 3  # mine
"""

TIDAL_PLUGINS = [
    {"name": "priority", "tier": 1, "first": True},
    {"name": "gang", "tier": 1, "settings": {"enablePreemptable": False, "enableJobStarving": False}},
    {"name": "usage", "tier": 2, "settings": {"arguments": {"thresholds": {"cpu": 60, "mem": 60}}}},
]


def test_volcano_edit_places_plugins_and_keeps_the_rest():
    text, before, after = volcano.edit(VOLCANO, ["allocate", "backfill", "preempt"], TIDAL_PLUGINS)
    assert after["actions"] == "allocate, backfill, preempt"
    assert [p["name"] for p in after["tiers"][0]["plugins"]] == ["priority", "gang"]
    assert after["tiers"][0]["plugins"][1] == {"name": "gang", "enablePreemptable": False, "enableJobStarving": False}
    assert [p["name"] for p in after["tiers"][1]["plugins"]] == ["nodeorder", "usage"]
    assert "# mine" in text
    assert volcano.edit(text, ["allocate", "backfill", "preempt"], TIDAL_PLUGINS)[0] == text


@pytest.mark.parametrize("plugins, tiers", [
    ([{"name": "gang", "state": "absent"}], [["priority"], ["nodeorder"]]),
    ([{"name": "binpack", "tier": 4}], [["gang", "priority"], ["nodeorder"], [], ["binpack"]]),
    ([{"name": "nodeorder", "tier": 1}], [["gang", "priority", "nodeorder"], []]),
    ([{"name": "drf"}], [["gang", "priority"], ["nodeorder", "drf"]]),
])
def test_volcano_plugin_placement(plugins, tiers):
    _, _, after = volcano.edit(VOLCANO, None, plugins)
    assert [[p["name"] for p in tier.get("plugins", [])] for tier in after["tiers"]] == tiers


@pytest.mark.parametrize("actions, plugins, message", [
    (["allocate", "teleport"], None, "actions: unknown teleport"),
    ([], None, "actions: must list at least one action"),
    (["allocate", "allocate"], None, "must not repeat"),
    (None, [{"name": "gang", "tier": 0}], r"plugins\[0\].tier: must be 1 to 10"),
])
def test_volcano_refuses_bad_requests(actions, plugins, message):
    with pytest.raises(volcano.SchedulerConfigError, match=message):
        volcano.edit(VOLCANO, actions, plugins)


def _node(labels=None, taints=None, capacity=None, annotations=None):
    return {"metadata": {"name": "n", "labels": labels or {}, "annotations": annotations or {}},
            "spec": {"taints": taints or []},
            "status": {"capacity": capacity or {}, "allocatable": capacity or {}}}


ON = {"colocation.tidal.io/colocation": "true", "colocation.tidal.io/oversubscription": "true"}


@pytest.mark.parametrize("node, colocation, oversubscription, labels, empty", [
    (_node(), True, True, ON, False),
    (_node(ON), True, True, {}, True),
    (_node(ON), True, False, {"colocation.tidal.io/oversubscription": None}, False),
    (_node(ON), False, False, {k: None for k in ON}, False),
    (_node(), False, False, {}, True),
])
def test_node_plan_labels(node, colocation, oversubscription, labels, empty):
    plan = node_state.plan(node, colocation, oversubscription)
    assert plan["labels"] == labels
    assert node_state.is_empty(plan) == empty


CO, OV = "colocation.tidal.io/colocation", "colocation.tidal.io/oversubscription"
VCO, VOV = "volcano.sh/colocation", "volcano.sh/oversubscription"
WRITTEN = "colocation.tidal.io/volcano-oversubscription-written"
TAINT = {"key": "colocation.tidal.io/offline-evicting", "effect": "NoSchedule"}
BATCH = {"kubernetes.io/batch-cpu": "100"}


@pytest.mark.parametrize("node, colocation, oversubscription, labels, evict, taint_removed, status_removed", [
    # the four modes from a node carrying everything: only the mode off takes the taint
    (_node(ON, [TAINT], BATCH), True, True, {}, None, False, False),
    (_node(ON, [TAINT], BATCH), True, False, {OV: None}, "batch", False, True),
    (_node(ON, [TAINT], BATCH), False, True, {CO: None}, None, False, False),
    (_node(ON, [TAINT], BATCH), False, False, {CO: None, OV: None}, "all", True, True),
    # from off: the labels; BE pods on batch resources cannot stay on a colocation-only node
    (_node(), True, False, {CO: "true"}, "batch", False, False),
    (_node(), False, True, {OV: "true"}, None, False, False),
    # an alias that would keep a switch on: Tidal's label says false (the alias is the user's)
    (_node({VCO: "true"}), False, True, {CO: "false", OV: "true"}, None, False, False),
    (_node({VCO: "false"}), False, False, {}, "all", False, False),
    # Volcano's oversubscription label goes with oversubscription (tidal-manager's output or not)
    (_node({VOV: "true"}), True, False, {VOV: None, CO: "true"}, "batch", False, False),
    (_node({VOV: "true"}, annotations={WRITTEN: "true"}), False, True, {OV: "true"}, None, False, False),
])
def test_node_plan_in_the_four_modes(node, colocation, oversubscription, labels, evict, taint_removed,
                                     status_removed):
    plan = node_state.plan(node, colocation, oversubscription)
    assert plan["labels"] == labels and plan["evict"] == evict
    assert (plan["taints"] is not None) is taint_removed
    assert bool(plan["status_removals"]) is status_removed
    # whatever the node had, it ends in the mode asked for, as Tidal reads it
    after = node_state.labels_after(node, plan)
    assert node_mode.node_mode(after, node_state.annotations_after(node, plan)) == plan["mode"]
    assert plan["mode"] == node_mode.mode_name(colocation, oversubscription)


@pytest.mark.parametrize("evict, pod, leaves", [
    ("all", {"spec": {"containers": [{}]}}, True),
    ("batch", {"spec": {"containers": [{}]}}, False),
    ("batch", {"spec": {"containers": [{"resources": {"requests": {"kubernetes.io/batch-cpu": "1"}}}]}}, True),
    ("batch", {"spec": {"containers": [{"resources": {"limits": {"kubernetes.io/batch-memory": "1"}}}]}}, True),
    ("batch", {"spec": {"initContainers": [{"resources": {"requests": {"kubernetes.io/batch-cpu": "1"}}}],
                        "containers": [{}]}}, True),
    ("batch", {"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}}, False),
    (None, {"spec": {"containers": [{"resources": {"requests": {"kubernetes.io/batch-cpu": "1"}}}]}}, False),
])
def test_which_be_pods_must_leave(evict, pod, leaves):
    assert node_state.must_leave({"evict": evict}, pod) is leaves


def test_node_plan_off_leaves_no_residue():
    node = _node(dict(ON, **{"volcano.sh/oversubscription": "true"}),
                 taints=[{"key": "colocation.tidal.io/offline-evicting", "effect": "NoSchedule"}, {"key": "other"}],
                 capacity={"cpu": "8", "kubernetes.io/batch-cpu": "100"},
                 annotations={"volcano.sh/oversubscription-cpu": "1"})
    plan = node_state.plan(node, False, False)
    assert plan["taints"] == [{"key": "other"}]
    assert plan["status_removals"] == ["/status/capacity/kubernetes.io~1batch-cpu",
                                       "/status/allocatable/kubernetes.io~1batch-cpu"]
    assert plan["annotations"] == {"volcano.sh/oversubscription-cpu": None}
    written = _node({"volcano.sh/oversubscription": "true"}, annotations={WRITTEN: "true"})
    assert node_state.plan(written, True, False)["annotations"] == {WRITTEN: None}
    assert plan["labels"]["volcano.sh/oversubscription"] is None


def test_policy_merge_keeps_unrelated_fields():
    assert merge({"a": {"b": 1, "c": 2}}, {"a": {"b": 3}}) == {"a": {"b": 3, "c": 2}}


def test_policy_desired_spec_merges_or_replaces():
    current = desired_spec(None, {"overselling": {"ratioPercent": 40}}, False)
    merged = desired_spec(current, {"overselling": {"predictor": "p95"}}, False)
    replaced = desired_spec(current, {"overselling": {"predictor": "p95"}}, True)
    assert merged["overselling"]["ratioPercent"] == 40 and merged["overselling"]["predictor"] == "p95"
    assert replaced["overselling"]["ratioPercent"] == 60


def test_policy_desired_spec_names_every_error():
    with pytest.raises(PolicyValidationError) as err:
        desired_spec(None, {"evictionWatermarks": {"cpu": {"lowPercent": 95}}, "overselling": {"windowSeconds": 1}}, False)
    assert [(e.path, e.message) for e in err.value.errors] == [
        ("spec.evictionWatermarks.cpu.lowPercent", "must be lower than highPercent, got lowPercent 95, highPercent 80"),
        ("spec.overselling.windowSeconds", "must be between 60 and 1800, got 1"),
    ]
