"""Writes to NodeProfiles with tidal-agent's own service-account tokens (run by verify.yml).

A token bound to a pod on lab-node-0 carries that node as a claim; the admission policy must let
it write lab-node-0's NodeProfile status and refuse lab-node-1's; a token bound to no pod (no node
claim) is refused too. Prints {case: [HTTP status, message]} as JSON.
"""
import json
import sys

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

namespace, kubeconfig = sys.argv[1], sys.argv[2]
api = config.new_client_from_config(config_file=kubeconfig)
core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
group = ("colocation.tidal.io", "v1alpha1", "nodeprofiles")

for node in ("lab-node-0", "lab-node-1"):
    try:
        custom.create_cluster_custom_object(*group, {"apiVersion": "colocation.tidal.io/v1alpha1",
                                                     "kind": "NodeProfile", "metadata": {"name": node}})
    except ApiException as err:
        if err.status != 409:
            raise
try:
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "agent-on-lab-node-0"},
        "spec": {"serviceAccountName": "tidal-agent", "nodeName": "lab-node-0",
                 "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "agent", "image": "tidal"}]}})
except ApiException as err:
    if err.status != 409:
        raise
pod = core.read_namespaced_pod("agent-on-lab-node-0", namespace)


def token(bound_to_pod):
    spec = {"audiences": [], "expirationSeconds": 600}
    if bound_to_pod:
        spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": pod.metadata.name, "uid": pod.metadata.uid}
    return core.create_namespaced_service_account_token("tidal-agent", namespace, {"spec": spec}).status.token


def patch_status(bearer, node):
    configuration = client.Configuration()
    configuration.host = api.configuration.host
    configuration.ssl_ca_cert = api.configuration.ssl_ca_cert
    configuration.api_key = {"authorization": "Bearer " + bearer}
    with client.ApiClient(configuration) as agent_api:
        try:
            client.CustomObjectsApi(agent_api).patch_cluster_custom_object_status(*group, node, {"metadata": {}})
            return [200, ""]
        except ApiException as err:
            return [err.status, json.loads(err.body).get("message", "")]


pod_token, plain_token = token(True), token(False)
print(json.dumps({
    "own_node": patch_status(pod_token, "lab-node-0"),
    "other_node": patch_status(pod_token, "lab-node-1"),
    "no_node_claim": patch_status(plain_token, "lab-node-0"),
}))
