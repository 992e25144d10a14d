"""What the collection carries a copy of behaves as its source in the `tidal` package.

The generated copies (plugins/module_utils/policy_model.py, the role's CRDs) are checked for
freshness by tests/unit/test_generated.py; here, that they agree in behaviour.
"""
import dataclasses

import pytest
import yaml

from collection_tools import ROOT

from ansible_collections.tidal.colocation.plugins.doc_fragments.auth import ModuleDocFragment
from ansible_collections.tidal.colocation.plugins.module_utils import kube, names, node_mode, policy_model
from tidal.api import node_mode as tidal_node_mode
from tidal.api import policy, qos


@pytest.mark.parametrize("spec", [
    {},
    {"overselling": {"ratioPercent": 50, "predictor": "p95"}},
    {"evictionWatermarks": {"cpu": {"lowPercent": 90}}},
    {"overselling": {"ratioPercent": 101, "predictor": "crystal-ball"}, "unknown": 1},
    {"features": {"psiInterference": {"resources": ["cpu", "cpu"]}}},
    {"loadAwareScheduling": {"enabled": "yes"}},
])
def test_vendored_model_accepts_and_rejects_exactly_what_tidal_policy_does(spec):
    def outcome(module):
        try:
            return ("ok", module.ColocationPolicy.from_spec(spec).to_spec())
        except module.PolicyValidationError as err:
            return ("error", [(e.path, e.message) for e in err.errors])
    assert outcome(policy_model) == outcome(policy)


def test_names_equal_tidal_qos():
    for name in ("API_GROUP", "API_VERSION", "NAMESPACE", "QOS_ANNOTATION", "OPENFUYAO_QOS_ANNOTATION",
                 "OPENFUYAO_QOS_ANNOTATION_CAPITALISED", "VOLCANO_QOS_ANNOTATION", "COLOCATION_NODE_LABEL", "OVERSUBSCRIPTION_NODE_LABEL",
                 "NODE_LABEL_ENABLED_VALUE", "OFFLINE_EVICTING_TAINT_KEY", "OFFLINE_EVICTING_TAINT_EFFECT",
                 "BATCH_CPU_RESOURCE", "BATCH_MEMORY_RESOURCE", "VOLCANO_OVERSUBSCRIPTION_LABEL"):
        assert getattr(names, name) == getattr(qos, name), name
    for name in ("VOLCANO_COLOCATION_LABEL", "VOLCANO_LABEL_WRITTEN_ANNOTATION"):
        assert getattr(names, name) == getattr(tidal_node_mode, name), name
    assert names.VOLCANO_OVERSUBSCRIPTION_ANNOTATIONS == (qos.VOLCANO_OVERSUBSCRIPTION_CPU_ANNOTATION,
                                                          qos.VOLCANO_OVERSUBSCRIPTION_MEMORY_ANNOTATION)
    assert names.QOS_LEVELS == tuple(level.value for level in qos.QoSLevel)
    assert names.POLICY_NAME == policy.DEFAULT_POLICY_NAME
    assert node_mode.MODES == tuple(mode.value for mode in tidal_node_mode.Mode)


_CO, _OV = qos.COLOCATION_NODE_LABEL, qos.OVERSUBSCRIPTION_NODE_LABEL
_VCO, _VOV = tidal_node_mode.VOLCANO_COLOCATION_LABEL, qos.VOLCANO_OVERSUBSCRIPTION_LABEL
_WRITTEN = {tidal_node_mode.VOLCANO_LABEL_WRITTEN_ANNOTATION: "true"}


@pytest.mark.parametrize("labels, annotations", [
    (None, None), ({}, {}),
    ({_CO: "true"}, {}), ({_OV: "true"}, {}), ({_CO: "true", _OV: "true"}, {}), ({_CO: "false", _OV: "false"}, {}),
    ({_VCO: "true"}, {}), ({_VOV: "true"}, {}), ({_VCO: "true", _VOV: "true"}, {}),
    ({_CO: "false", _VCO: "true"}, {}), ({_CO: "true", _VCO: "false"}, {}),
    ({_OV: "false", _VOV: "true"}, {}), ({_OV: "true", _VOV: "false"}, {}),
    ({_VOV: "true"}, _WRITTEN), ({_OV: "true", _VOV: "true"}, _WRITTEN), ({_CO: "true", _VOV: "true"}, _WRITTEN),
    ({_VOV: "true"}, {tidal_node_mode.VOLCANO_LABEL_WRITTEN_ANNOTATION: "yes"}),
    ({_CO: " true "}, {}), ({_CO: "True"}, {}), ({_CO: "1", _VCO: "true"}, {}), ({_OV: ""}, {}),
    ({_CO: "true", "other": "x"}, {"colocation.tidal.io/oversell-types": "cpu"}),
])
def test_node_mode_agrees_with_tidal_node_mode(labels, annotations):
    expected = tidal_node_mode.node_mode(labels, annotations)
    assert node_mode.switches(labels, annotations) == (expected.colocation, expected.oversubscription)
    assert node_mode.node_mode(labels, annotations) == str(expected.mode)


@pytest.mark.parametrize("annotations", [
    None, {}, {"colocation.tidal.io/qos-level": "BE"}, {"colocation.tidal.io/qos-level": "HLS"},
    {"colocation.tidal.io/qos-level": " LS "}, {"openfuyao.com/qos-level": "BE"},
    {"volcano.sh/qos-level": "LC"}, {"volcano.sh/qos-level": "HLS"}, {"volcano.sh/qos-level": "-1"},
    {"volcano.sh/qos-level": "0"}, {"volcano.sh/qos-level": "BE", "openfuyao.com/qos-level": "BE"},
    {"colocation.tidal.io/qos-level": "LS", "volcano.sh/qos-level": "BE"},
    {"openfuyao.com/QoS-level": "BE"}, {"openfuyao.com/QoS-level": "LS", "volcano.sh/qos-level": "HLS"},
])
def test_qos_level_agrees_with_tidal_qos(annotations):
    expected = qos.qos_level_of(annotations)
    assert names.qos_level(annotations) == (expected.value if expected else None)


@pytest.mark.parametrize("annotations", [
    {"colocation.tidal.io/qos-level": "hls"}, {"volcano.sh/qos-level": "x"},
    {"volcano.sh/qos-level": "BE", "openfuyao.com/qos-level": "LS"},
    {"openfuyao.com/QoS-level": "BE", "openfuyao.com/qos-level": "LS"},
])
def test_qos_level_is_none_where_tidal_qos_rejects(annotations):
    with pytest.raises(qos.AnnotationError):
        qos.qos_level_of(annotations)
    assert names.qos_level(annotations) is None


def test_auth_doc_fragment_documents_exactly_the_shared_options():
    documented = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]
    assert set(documented) == set(kube.AUTH_ARG_SPEC)
    for name, option in kube.AUTH_ARG_SPEC.items():
        assert documented[name]["type"] == option["type"], name
        assert documented[name].get("aliases", []) == option.get("aliases", []), name


def test_every_module_is_in_the_action_group_when_it_takes_connection_options():
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    group = set(runtime["action_groups"]["tidal"])
    for path in sorted((ROOT / "plugins" / "modules").glob("*.py")):
        takes_auth = "tidal.colocation.auth" in path.read_text()
        assert (path.stem in group) == takes_auth, path.stem


def test_policy_model_is_a_dataclass_copy():
    assert dataclasses.is_dataclass(policy_model.ColocationPolicy)
    assert policy_model.policy_manifest()["apiVersion"] == qos.API_GROUP_VERSION


def test_role_console_roles_equal_tidal_console_rbac():
    from tidal.console.rbac import cluster_roles
    data = yaml.safe_load((ROOT / "roles" / "tidal_controllers" / "vars" / "console_roles.yml").read_text())
    assert data["tidal_controllers_console_roles"] == cluster_roles()
