"""The tidal_controllers role's templates render what the `tidal` package defines (rendered with
ansible-core's own templating, as the role renders them)."""
import base64

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from collection_tools import ROOT
from tidal.api import qos
from tidal.manager.admission.configuration import webhook_configurations

TEMPLATES = ROOT / "roles" / "tidal_controllers" / "templates"
CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def render(name, **variables):
    defaults = yaml.safe_load((ROOT / "roles" / "tidal_controllers" / "defaults" / "main.yml").read_text())
    defaults.update(yaml.safe_load((ROOT / "roles" / "tidal_controllers" / "vars" / "console_roles.yml").read_text()))
    defaults = {k: v for k, v in defaults.items() if "lookup(" not in str(v)}
    defaults.update(variables)
    text = Templar(loader=DataLoader(), variables=defaults).template(trust_as_template((TEMPLATES / name).read_text()))
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.parametrize("url", ["https://127.0.0.1:18443", ""])
def test_webhooks_equal_the_manager_configuration(url):
    rendered = render("webhooks.yml.j2", tidal_controllers_webhook_url=url,
                      tidal_controllers_webhook_ca_bundle=base64.b64encode(CA_PEM).decode())
    expected = webhook_configurations(CA_PEM, url=url or None)
    assert rendered == expected


def test_priority_classes_equal_tidal_qos():
    assert render("priorityclasses.yml.j2") == qos.priority_class_manifests()


def test_agent_rbac_is_least_privilege_and_its_writes_are_limited_to_its_node():
    objects = render("rbac.yml.j2")
    agent = next(o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "tidal-agent")
    writes = {(r["apiGroups"][0], res, verb) for r in agent["rules"] for res in r["resources"] for verb in r["verbs"]
              if verb in ("create", "update", "patch", "delete")}
    assert writes == {("", "nodes", "patch"), ("", "pods/eviction", "create"), ("", "events", "create"),
                      ("", "events", "patch"), ("events.k8s.io", "events", "create"), ("events.k8s.io", "events", "patch"),
                      ("colocation.tidal.io", "nodeprofiles", "create"), ("colocation.tidal.io", "nodeprofiles/status", "patch")}
    policy = next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicy")
    guarded = {res for rule in policy["spec"]["matchConstraints"]["resourceRules"] for res in rule["resources"]}
    assert {"nodes", "nodeprofiles", "nodeprofiles/status"} <= guarded
    assert "system:serviceaccount:tidal-system:tidal-agent" in policy["spec"]["matchConditions"][0]["expression"]


def test_agent_daemonset_runs_only_on_nodes_whose_mode_is_active_or_not_restored_yet():
    workloads = render("workloads.yml.j2")
    agent = next(o for o in workloads if o["kind"] == "DaemonSet")
    spec = agent["spec"]["template"]["spec"]
    assert "nodeSelector" not in spec
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": label, "operator": "In", "values": ["true"]}]}
                     for label in (qos.COLOCATION_NODE_LABEL, qos.OVERSUBSCRIPTION_NODE_LABEL,
                                   "volcano.sh/colocation", qos.VOLCANO_OVERSUBSCRIPTION_LABEL,
                                   qos.RESTORE_PENDING_NODE_LABEL)]
    manager = next(o for o in workloads if o["kind"] == "Deployment" and o["metadata"]["name"] == "tidal-manager")
    container = manager["spec"]["template"]["spec"]["containers"][0]
    assert manager["spec"]["replicas"] == 2
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["securityContext"]["runAsNonRoot"] is True


def _manager_rules(objects, kind, name):
    role = next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)
    return role, {(r["apiGroups"][0], res, verb) for r in role["rules"] for res in r["resources"] for verb in r["verbs"]}


def test_manager_may_count_pods_and_edit_only_volcanos_scheduler_configmap():
    objects = render("rbac.yml.j2")
    _, rules = _manager_rules(objects, "ClusterRole", "tidal-manager")
    assert ("", "pods", "list") in rules and ("", "configmaps", "patch") not in rules
    role, rules = _manager_rules(objects, "Role", "tidal-manager-volcano-scheduler-config")
    assert role["metadata"]["namespace"] == "volcano-system"
    assert rules == {("", "configmaps", "get"), ("", "configmaps", "patch")}
    assert role["rules"][0]["resourceNames"] == ["volcano-scheduler-configmap"]
    binding = next(o for o in objects if o["kind"] == "RoleBinding"
                   and o["metadata"]["name"] == "tidal-manager-volcano-scheduler-config")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "tidal-manager", "namespace": "tidal-system"}]
    manager = next(o for o in render("workloads.yml.j2") if o["kind"] == "Deployment")
    assert ("--volcano-scheduler-config=configmap:volcano-system/volcano-scheduler-configmap/volcano-scheduler.conf"
            in manager["spec"]["template"]["spec"]["containers"][0]["args"])


@pytest.mark.parametrize("variables", [{"tidal_controllers_volcano_scheduler_config": "none"},
                                       {"tidal_controllers_volcano_scheduler_config": "file:/etc/volcano/s.conf"},
                                       {"tidal_controllers_mode": "lab"}])
def test_no_volcano_configmap_access_when_the_manager_does_not_write_one(variables):
    names = {o["metadata"]["name"] for o in render("rbac.yml.j2", **variables)}
    assert "tidal-manager-volcano-scheduler-config" not in names


def test_manager_may_watch_namespaces_and_the_policy_for_admission():
    """Every replica's admission keeps watch caches of the namespaces (their
    colocation.tidal.io/oversell annotation) and of the ColocationPolicy; reading is all it needs."""
    _, rules = _manager_rules(render("rbac.yml.j2"), "ClusterRole", "tidal-manager")
    assert {("", "namespaces", "list"), ("", "namespaces", "watch"),
            ("colocation.tidal.io", "colocationpolicies", "list"),
            ("colocation.tidal.io", "colocationpolicies", "watch")} <= rules
    assert not {verb for group, resource, verb in rules if resource == "namespaces"} - {"list", "watch"}
