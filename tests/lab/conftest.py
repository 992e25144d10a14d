import uuid

import pytest
from kubernetes import client

from tidal.lab.pytest_plugin import wait_for


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
