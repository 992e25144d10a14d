import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tidal.api import qos
from tidal_dev.lab.pytest_plugin import wait_for


@pytest.fixture
def core(lab_api):
    return client.CoreV1Api(lab_api)


@pytest.fixture
def namespace(core):
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    # The namespace controller creates the default ServiceAccount; pods need it.
    wait_for(lambda: core.list_namespaced_service_account(name).items, 30, f"serviceaccount in {name}")
    yield name
    core.delete_namespace(name)


@pytest.fixture
def tidal_namespace(core):
    """tidal-system, where tidal-manager's leader-election Lease lives (the tidal_controllers
    role creates it in a real installation); kept after the test, as other tests share it."""
    try:
        core.create_namespace({"metadata": {"name": qos.NAMESPACE}})
    except ApiException as err:
        if err.status != 409:
            raise
    return qos.NAMESPACE


POLICY = ("colocation.tidal.io", "v1alpha1", "colocationpolicies", "default")


@pytest.fixture
def policy(lab_api):
    """Set fields of the shared ColocationPolicy for one test; put the object back afterwards.
    Tidal's CRDs are installed first, so the test does not depend on one that ran before it."""
    from tidal.crds import crd_manifests
    from tidal_dev.lab.apply import create_or_replace_all
    create_or_replace_all(lab_api, crd_manifests(), wait_established=True)
    custom = client.CustomObjectsApi(lab_api)
    try:
        before = custom.get_cluster_custom_object(*POLICY)
    except ApiException as err:
        if err.status != 404:
            raise
        before = None

    def set_spec(spec):
        body = {"apiVersion": qos.API_GROUP_VERSION, "kind": "ColocationPolicy",
                "metadata": {"name": "default"}, "spec": spec}
        try:
            current = custom.get_cluster_custom_object(*POLICY)
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            custom.replace_cluster_custom_object(*POLICY, body)
        except ApiException as err:
            if err.status != 404:
                raise
            custom.create_cluster_custom_object(*POLICY[:3], body)

    yield set_spec
    if before is None:
        try:
            custom.delete_cluster_custom_object(*POLICY)
        except ApiException:
            pass
    else:
        set_spec(before.get("spec") or {})
