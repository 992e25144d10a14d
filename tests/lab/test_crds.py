"""Tidal's CRDs in the real API server: defaults, OpenAPI ranges and CEL rules."""
import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tidal.api import qos
from tidal.crds import crd_manifests
from tidal_dev.lab.apply import create_or_replace_all
from tidal.api.policy import DEFAULT_POLICY_NAME, ColocationPolicy

pytestmark = pytest.mark.lab

PLURAL = "colocationpolicies"


@pytest.fixture(scope="module")
def custom(lab_api):
    create_or_replace_all(lab_api, crd_manifests(), wait_established=True)
    return client.CustomObjectsApi(lab_api)


@pytest.fixture
def no_policy(custom):
    def delete():
        try:
            custom.delete_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, PLURAL, DEFAULT_POLICY_NAME)
        except ApiException as err:
            if err.status != 404:
                raise
    delete()
    yield
    delete()


def _policy(spec, name=DEFAULT_POLICY_NAME):
    return {"apiVersion": qos.API_GROUP_VERSION, "kind": "ColocationPolicy",
            "metadata": {"name": name}, "spec": spec}


def _rejection(custom, body):
    with pytest.raises(ApiException) as err:
        custom.create_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, PLURAL, body)
    assert err.value.status == 422, err.value.body
    return json.loads(err.value.body)["message"]


def test_api_server_fills_the_same_defaults_as_the_python_model(custom, no_policy):
    stored = custom.create_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, PLURAL, _policy({}))
    assert stored["spec"] == ColocationPolicy.from_spec({}).to_spec()
    assert stored["spec"]["evictionWatermarks"]["cpu"] == {"highPercent": 80, "lowPercent": 30}


@pytest.mark.parametrize("spec, field", [
    ({"evictionWatermarks": {"cpu": {"lowPercent": 90, "highPercent": 80}}},
     "spec.evictionWatermarks.cpu.lowPercent"),
    ({"evictionWatermarks": {"memory": {"lowPercent": 60, "highPercent": 60}}},
     "spec.evictionWatermarks.memory.lowPercent"),
    ({"loadAwareScheduling": {"cpuThresholdPercent": 140}},
     "spec.loadAwareScheduling.cpuThresholdPercent"),
    ({"overselling": {"ratioPercent": 140}}, "spec.overselling.ratioPercent"),
    ({"features": {"cpuBurst": {"loadHighPercent": 90, "loadAlertPercent": 80}}},
     "spec.features.cpuBurst"),
])
def test_invalid_policy_is_rejected_with_a_message_naming_the_field(custom, no_policy, spec, field):
    message = _rejection(custom, _policy(spec))
    assert field in message, message
    # Nothing was stored.
    with pytest.raises(ApiException) as err:
        custom.get_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, PLURAL, DEFAULT_POLICY_NAME)
    assert err.value.status == 404


def test_the_python_model_rejects_what_the_api_server_rejects(custom, no_policy):
    spec = {"evictionWatermarks": {"cpu": {"lowPercent": 90, "highPercent": 80}},
            "loadAwareScheduling": {"cpuThresholdPercent": 140}}
    message = _rejection(custom, _policy(spec))
    with pytest.raises(ValueError) as err:
        ColocationPolicy.from_spec(spec)
    for field in ("spec.evictionWatermarks.cpu.lowPercent", "spec.loadAwareScheduling.cpuThresholdPercent"):
        assert field in message and field in str(err.value)


def test_only_one_policy_named_default_is_accepted(custom, no_policy):
    message = _rejection(custom, _policy({}, name="other"))
    assert "default" in message


def test_node_profile_status_is_written_through_its_subresource(custom, lab):
    name = "lab-node-0"
    body = {"apiVersion": qos.API_GROUP_VERSION, "kind": "NodeProfile", "metadata": {"name": name}}
    try:
        custom.create_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles", body)
    except ApiException as err:
        if err.status != 409:
            raise
    status = {"status": {"capabilities": [{"name": "cpu.idle", "supported": False,
                                           "reason": "kernel has no cpu.idle"}]}}
    patched = custom.patch_cluster_custom_object_status(qos.API_GROUP, qos.API_VERSION, "nodeprofiles",
                                                        name, status)
    assert patched["status"]["capabilities"][0]["reason"] == "kernel has no cpu.idle"
    custom.delete_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles", name)
