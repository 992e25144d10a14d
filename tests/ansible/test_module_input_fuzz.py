"""Bad input to every module: for EVERY module and EVERY option of its argument_spec (read from
the module itself, so a new option is covered without touching this file), wrong-typed values,
values outside ``choices``, unknown option names and missing required options must fail the
module with a message naming the option, and change nothing: the files a module edits stay
byte-identical (no backup file either), the Kubernetes objects it writes keep what the module
could have written (labels, annotations, Tidal's taints and batch resources, the ConfigMap's
data, the policy's spec).

The file modules run in-process against real files (no lab); the cluster modules (and
volcano_scheduler_config's ConfigMap mode) against the lab's API server (a kwok-only lab is
enough). Values come from hypothesis, a bounded number of examples per option.
"""
from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from ansible.module_utils.basic import FILE_COMMON_ARGUMENTS
from ansible.module_utils.testing import patch_module_args
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collection_tools import ROOT, fake_sysfs
from ansible_collections.tidal.colocation.plugins.modules import (
    containerd_nri, disk_queue, info, kubelet_config, node, policy, volcano_scheduler_config,
)

NODE_ROOT = ROOT / "playbooks" / "files" / "node-root"
VOLCANO_CONF = ROOT / "devtools" / "tidal_dev" / "lab" / "assets" / "volcano-scheduler.conf"
MODULES = {m.__name__.rsplit(".", 1)[1]: m for m in (containerd_nri, disk_queue, info, kubelet_config, node, policy,
                                                      volcano_scheduler_config)}
EXAMPLES = 6
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


# -- the argument_spec, as the module builds it --------------------------------------------

class _Captured(Exception):
    pass


def argument_spec(module) -> dict:
    """The options ``module.main()`` passes to AnsibleModule (with the file options when it asks
    for them), captured by standing in for AnsibleModule."""
    captured = {}

    def capture(argument_spec, **kwargs):
        captured.update(kwargs, argument_spec=argument_spec)
        raise _Captured

    original = module.AnsibleModule
    module.AnsibleModule = capture
    try:
        module.main()
    except _Captured:
        pass
    finally:
        module.AnsibleModule = original
    spec = dict(captured["argument_spec"])
    if captured.get("add_file_common_args"):
        spec = {**FILE_COMMON_ARGUMENTS, **spec}
    return spec


# -- wrong values per option ----------------------------------------------------------------

_WORD = st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=8)
_CONTAINER = st.one_of(st.dictionaries(_WORD, _WORD, min_size=1, max_size=3),
                       st.lists(st.integers(), min_size=1, max_size=3))
_NOT_BOOL = st.one_of(st.sampled_from(["perhaps", "2", "ja", "truee", "-1"]), _CONTAINER,
                      st.integers(min_value=2))
_NOT_INT = st.one_of(_WORD, _CONTAINER,
                     st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f != int(f)))
_NOT_DICT = st.one_of(st.lists(st.integers(), min_size=1, max_size=3), st.integers(),
                      _WORD)  # a lone word is neither JSON nor key=value


def wrong_values(option: dict) -> st.SearchStrategy:
    """Values the option's spec does not allow."""
    kind = option.get("type", "str")
    if option.get("no_log"):
        # Ansible masks a no_log value wherever it appears in the result, the message included:
        # values that cannot be part of an option's name keep the name readable.
        secret = st.text(alphabet="XYZ0123456789", min_size=6, max_size=10)
        return st.one_of(st.dictionaries(secret, secret, min_size=1, max_size=2), st.lists(secret, min_size=1))
    if option.get("choices"):
        choices = [str(c) for c in option["choices"]]
        outside = st.text(min_size=1, max_size=20).filter(lambda t: t not in choices)
        return st.one_of(outside, _CONTAINER)
    if kind in ("str", "path", "raw"):
        return _CONTAINER
    if kind == "bool":
        return _NOT_BOOL
    if kind == "int":
        return _NOT_INT
    if kind == "dict":
        strategies = [_NOT_DICT]
        if option.get("options"):  # an unknown suboption, or a wrong-typed one
            # anything but a mapping for a dict with suboptions: ansible-core crashes or fails
            # without naming the option, before the module runs (the xfail tests at the end)
            strategies = []
            strategies.append(_WORD.map(lambda w: {"no_such_" + w: "x"}))
            for name, sub in option["options"].items():
                strategies.append(wrong_values(sub).map(lambda v, name=name: {name: v}))
        return st.one_of(strategies)
    if kind == "list":
        elements = option.get("elements", "str")
        element = {"type": "dict", "options": option.get("options")} if elements == "dict" else {"type": elements}
        element = wrong_values(element)
        return st.one_of(st.dictionaries(_WORD, _WORD, min_size=1, max_size=2),
                         st.lists(element, min_size=1, max_size=2))
    raise AssertionError(f"no wrong values for type {kind!r}: extend wrong_values()")


# -- running a module ----------------------------------------------------------------------

def run_module(module, capsys, args):
    """(exit code, result) of the module's main() with ``args``; a traceback fails the test."""
    with patch_module_args(args), pytest.raises(SystemExit) as stop:
        module.main()
    return stop.value.code, json.loads(capsys.readouterr().out)


def refused(module, capsys, args, snapshot, names) -> str:
    """Run the module with ``args``: it must fail, name one of ``names`` and change nothing."""
    before = snapshot()
    code, result = run_module(module, capsys, args)
    assert code == 1 and result.get("failed"), f"accepted {args!r}: {result!r}"
    msg = result["msg"]
    assert any(name in msg for name in names), f"{msg!r} does not name any of {names}"
    assert snapshot() == before, f"{args!r} changed something"
    return msg


def fuzz_options(module, capsys, baseline, snapshot, skip=()):
    """Every option of ``module``: wrong values, then unknown options and missing required ones."""
    spec = argument_spec(module)
    options = [name for name in spec if name not in skip]
    assert options
    for name in options:
        option = spec[name]
        names = [name, *option.get("aliases", ())]

        @FUZZ
        @given(value=wrong_values(option))
        def one_option(value):
            refused(module, capsys, {**baseline, name: value}, snapshot, names)
        one_option()
    for name, option in spec.items():
        if option.get("required") and name not in skip:
            refused(module, capsys, {k: v for k, v in baseline.items() if k != name}, snapshot, [name])

    @FUZZ
    @given(unknown=_WORD.map(lambda w: "no_such_" + w))
    def unknown_option(unknown):
        refused(module, capsys, {**baseline, unknown: "x"}, snapshot, [unknown])
    unknown_option()
    return options


def _copy(tmp_path: Path, name: str, source: Path) -> Path:
    path = tmp_path / name
    path.write_bytes(source.read_bytes())
    return path


def directory_snapshot(directory: Path):
    """Every file below the directory, by path, with its bytes and mode (a backup file is a change too)."""
    return lambda: {str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mode)
                    for p in sorted(directory.rglob("*")) if p.is_file()}


# -- the file modules ----------------------------------------------------------------------

def _containerd(tmp_path):
    path = _copy(tmp_path, "config.toml", NODE_ROOT / "containerd-config.toml")
    return {"path": str(path), "containerd_version": "1.7.22"}


def _kubelet(tmp_path):
    path = _copy(tmp_path, "config.yaml", NODE_ROOT / "kubelet-config.yaml")
    return {"path": str(path), "cpu_manager_policy": "static", "reserved_system_cpus": "0",
            "system_reserved": {"cpu": "500m", "memory": "1Gi"}, "topology_manager_policy": "restricted"}


def _disk_queue(tmp_path):
    sys_root = fake_sysfs(tmp_path / "sys", {"vda": (4096, 2147483647), "nvme0n1": (128, 128)})
    return {"sys_root": str(sys_root), "max_request_kib": 64, "disks": ["vda"]}


def _volcano_file(tmp_path):
    path = _copy(tmp_path, "volcano-scheduler.conf", VOLCANO_CONF)
    return {"path": str(path), "actions": ["allocate", "backfill", "preempt"],
            "plugins": [{"name": "usage", "tier": 2, "settings": {"arguments": {"thresholds": {"cpu": 60}}}}]}


#: module -> (a valid request that changes the file, options fuzzed by the lab test instead)
FILE_BASELINES = {
    "containerd_nri": (_containerd, ()),
    "disk_queue": (_disk_queue, ()),
    "kubelet_config": (_kubelet, ()),
    "volcano_scheduler_config": (_volcano_file, ("configmap",)),
}
#: the modules (or modes) that write Kubernetes objects: test_cluster_module_refuses_bad_input...
CLUSTER_MODULES = ("info", "node", "policy", "volcano_scheduler_config")


def test_every_module_is_fuzzed():
    found = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py"))
    assert sorted(MODULES) == found, "a new module: add it to MODULES and give it a baseline here"
    assert set(FILE_BASELINES) | set(CLUSTER_MODULES) == set(MODULES)


@pytest.mark.parametrize("name", sorted(FILE_BASELINES))
def test_file_module_refuses_bad_input_and_changes_nothing(name, tmp_path, capsys):
    module = MODULES[name]
    make_baseline, skip = FILE_BASELINES[name]
    baseline = make_baseline(tmp_path)
    snapshot = directory_snapshot(tmp_path)
    # the baseline is valid and would change the file: check mode says so and writes nothing
    before = snapshot()
    code, result = run_module(module, capsys, {**baseline, "_ansible_check_mode": True, "_ansible_diff": True})
    assert code == 0 and result["changed"] and result["diff"]["after"], result
    assert snapshot() == before
    fuzz_options(module, capsys, baseline, snapshot, skip)


# -- values of the right type that the module must still refuse ----------------------------

ARABIC_ZERO = "\u0660"  # a digit to Python's \d and int(), not to the kubelet or containerd


@pytest.mark.parametrize("name, change, named", [
    ("kubelet_config", {"reserved_system_cpus": ARABIC_ZERO}, "reserved_system_cpus"),
    ("kubelet_config", {"reserved_system_cpus": "0-"}, "reserved_system_cpus"),
    ("kubelet_config", {"system_reserved": {"memory": "lots"}}, "system_reserved"),
    ("kubelet_config", {"system_reserved": {"memory": "-1Gi"}}, "system_reserved"),
    ("kubelet_config", {"kube_reserved": {"gpu": "1"}}, "kube_reserved"),
    ("kubelet_config", {"kube_reserved": {"pid": "many"}}, "kube_reserved"),
    ("kubelet_config", {"kube_reserved": {"cpu": "-500m"}}, "kube_reserved"),
    ("kubelet_config", {"system_reserved": {"cpu": {"nested": "1"}}}, "system_reserved"),
    ("disk_queue", {"max_request_kib": 3}, "max_request_kib"),
    ("disk_queue", {"disks": ["vdz"]}, "disks"),
    ("disk_queue", {"disks": ["loop0"]}, "disks"),
    ("disk_queue", {"disks": [""]}, "disks"),
    ("disk_queue", {"disks": ["vda/../nvme0n1"]}, "disks"),
    ("disk_queue", {"sys_root": "/nonexistent-sysfs"}, "sys_root"),
    ("containerd_nri", {"plugin_request_timeout": ARABIC_ZERO + "s"}, "plugin_request_timeout"),
    ("containerd_nri", {"plugin_registration_timeout": "-5s"}, "plugin_registration_timeout"),
    ("containerd_nri", {"socket_path": ""}, "socket_path"),
    ("containerd_nri", {"plugin_path": "relative/plugins"}, "plugin_path"),
    ("containerd_nri", {"plugin_config_path": "/etc/nri\n[plugins]"}, "plugin_config_path"),
    ("containerd_nri", {"containerd_version": "1.6.21"}, "containerd_version"),
    ("containerd_nri", {"containerd_version": "latest"}, "containerd_version"),
    ("volcano_scheduler_config", {"plugins": [{"name": "usage", "tier": 1000000}]}, "plugins[0].tier"),
    ("volcano_scheduler_config", {"plugins": [{"name": "usage", "tier": 0}]}, "plugins[0].tier"),
    ("volcano_scheduler_config", {"plugins": [{"name": "usage", "tier": -3}]}, "plugins[0].tier"),
    ("volcano_scheduler_config", {"plugins": [{"name": ""}]}, "plugins[0].name"),
    ("volcano_scheduler_config", {"plugins": [{"name": "usage", "settings": {"name": "gang"}}]},
     "plugins[0].settings"),
    ("volcano_scheduler_config", {"actions": []}, "actions"),
    ("volcano_scheduler_config", {"actions": ["allocate", "allocate"]}, "actions"),
    ("volcano_scheduler_config", {"actions": ["alloc\u0430te"]}, "actions"),  # a Cyrillic a
])
def test_file_module_refuses_bad_values(name, change, named, tmp_path, capsys):
    make_baseline, _ = FILE_BASELINES[name]
    args = {**make_baseline(tmp_path), **change}
    snapshot = directory_snapshot(tmp_path)
    refused(MODULES[name], capsys, args, snapshot, [named])
    refused(MODULES[name], capsys, {**args, "_ansible_check_mode": True, "_ansible_diff": True}, snapshot, [named])


# -- the cluster modules, against the lab's API server --------------------------------------

@pytest.fixture(scope="module")
def cluster(lab, lab_api):
    """A Node that no kubelet or kwok controller owns, a namespace with a copy of Volcano's scheduler ConfigMap, Tidal's CRDs."""
    import uuid

    from kubernetes import client
    from tidal.crds import crd_manifests
    from tidal_dev.lab.apply import create_or_replace_all
    create_or_replace_all(lab_api, crd_manifests(), wait_established=True)
    core = client.CoreV1Api(lab_api)
    run = uuid.uuid4().hex[:6]
    node_name, namespace = f"fuzz-{run}", f"fuzz-{run}"
    core.create_node({"metadata": {"name": node_name}})
    core.create_namespace({"metadata": {"name": namespace}})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "volcano-scheduler-configmap"},
                                                  "data": {"volcano-scheduler.conf": VOLCANO_CONF.read_text()}})
    yield {"kubeconfig": str(lab.kubeconfig_path), "node": node_name, "namespace": namespace, "api": lab_api}
    core.delete_node(node_name)
    core.delete_namespace(namespace)


def _versions(cluster):
    """What the cluster modules may write, as it is now: the node's metadata, taints and batch
    resources (not what the control plane writes: a node no kubelet heartbeats gets not-ready and
    unreachable taints and conditions from the node lifecycle controller while the test runs), the
    ConfigMap's data, the policy's spec (None: absent; its status is the manager's)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    core, custom = client.CoreV1Api(cluster["api"]), client.CustomObjectsApi(cluster["api"])
    try:
        policy = custom.get_cluster_custom_object("colocation.tidal.io", "v1alpha1", "colocationpolicies",
                                                  "default")["spec"]
    except ApiException as err:
        assert err.status == 404, err
        policy = None
    node = core.read_node(cluster["node"])
    owned = ("colocation.tidal.io/", "volcano.sh/", "kubernetes.io/batch-")
    taints = sorted((t.key, t.effect) for t in node.spec.taints or [] if t.key.startswith(owned))
    batch = {k: v for k, v in (node.status.allocatable or {}).items() if k.startswith(owned)}
    return (node.metadata.labels, node.metadata.annotations, taints, batch, node.spec.unschedulable,
            core.read_namespaced_config_map("volcano-scheduler-configmap", cluster["namespace"]).data,
            policy)


def _cluster_baseline(name, cluster):
    auth = {"kubeconfig": cluster["kubeconfig"]}
    return {
        "info": dict(auth, names=[cluster["node"]]),
        "node": dict(auth, names=[cluster["node"]], colocation=True),
        "policy": dict(auth, spec={"overselling": {"ratioPercent": 55}}),
        "volcano_scheduler_config": dict(auth, configmap={"namespace": cluster["namespace"]},
                                         actions=["allocate", "backfill", "preempt"],
                                         plugins=[{"name": "usage", "tier": 2}]),
    }[name]


@pytest.mark.lab
@pytest.mark.parametrize("name", CLUSTER_MODULES)
def test_cluster_module_refuses_bad_input_and_changes_nothing(name, cluster, capsys):
    module = MODULES[name]
    baseline = _cluster_baseline(name, cluster)
    snapshot = lambda: _versions(cluster)  # noqa: E731
    before = snapshot()
    code, result = run_module(module, capsys, {**baseline, "_ansible_check_mode": True, "_ansible_diff": True})
    assert code == 0, result
    assert snapshot() == before
    # path: the file mode of volcano_scheduler_config, fuzzed by the file test
    fuzz_options(module, capsys, baseline, snapshot, skip=("path",) if name == "volcano_scheduler_config" else ())


def _nested(path: str, value):
    for key in reversed(path.split(".")[1:]):
        value = {key: value}
    return value


def _bad_policy_values(spec):
    """Values of the right shape that the field must refuse: outside its range or enum, or of
    another JSON type."""
    if spec.kind in ("integer", "number"):
        values = ["50", [], {}, True, float("nan"), float("inf")]
        values += [] if spec.minimum is None else [spec.minimum - 1]
        values += [] if spec.maximum is None else [spec.maximum + 1, spec.maximum * 5 + 1]
        return values + ([1.5] if spec.kind == "integer" else [])
    if spec.kind == "boolean":
        return ["yes", 1, []]
    if spec.kind == "string":
        return [5, [], "no-such-value"]
    if spec.kind == "array":
        return ["cpu", [5], ["no-such-value"]]
    return ["x", [], {"noSuchField": 1}]


@pytest.mark.lab
def test_policy_refuses_every_field_out_of_range_and_changes_nothing(cluster, capsys):
    """Every field of the policy's spec (from the model, so a new field is covered): a value
    outside its range, its enum or its type fails the module naming the field's path; the stored
    policy's spec is unchanged, in check mode and diff mode too."""
    from ansible_collections.tidal.colocation.plugins.module_utils.policy_model import field_specs
    snapshot = lambda: _versions(cluster)  # noqa: E731
    auth = {"kubeconfig": cluster["kubeconfig"]}
    cases = 0
    for path, spec, _ in field_specs():
        for value in _bad_policy_values(spec):
            for extra in ({}, {"_ansible_check_mode": True, "_ansible_diff": True}):
                msg = refused(policy, capsys, {**auth, **extra, "spec": _nested(path, value)}, snapshot,
                              [path, path.removeprefix("spec.")])
                assert "nothing was changed" in msg
                cases += 1
    assert cases > 200


@pytest.mark.xfail(strict=True, raises=TypeError, reason="ansible-core 2.19: set_fallbacks() of a dict "
                   "option with suboptions given a number or a list raises TypeError before the module "
                   "runs (the task fails with a traceback that names no option); nothing is changed")
def test_ansible_core_crashes_on_a_dict_with_suboptions_given_a_number(tmp_path, capsys):
    refused(volcano_scheduler_config, capsys, {"configmap": 5, "actions": ["allocate"]},
            directory_snapshot(tmp_path), ["configmap"])
