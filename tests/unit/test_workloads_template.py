"""The tidal_controllers role's cluster mode: workloads.yml.j2 and rbac.yml.j2 rendered with
ansible-core's own templating (as the role renders them, as tests/ansible/test_role_templates.py
does), with the role's defaults and with a lab's overrides (a real kubelet node with its own
root dir, cgroup root and NRI socket, beside kwok nodes), and checked against the code: every
command line parses with the controller's own parser, every probe and scrape annotation names a
route its server really has, every path the agent reads is mounted from the host."""
from __future__ import annotations

import asyncio
import os
import posixpath
from pathlib import Path
from unittest import mock

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tidal.api import qos

ROLE = Path(__file__).resolve().parents[2] / "roles" / "tidal_controllers"

NOT_KWOK = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "type", "operator": "NotIn", "values": ["kwok"]}]}]}}}
LAB_NODE = "/root/.cache/tidal/lab/run/nodes/tidal-node-1"
LAB = {
    "tidal_controllers_image_pull_policy": "Never",
    "tidal_controllers_kubelet_root_dir": f"{LAB_NODE}/var/lib/kubelet",
    "tidal_controllers_kubelet_cgroup_root": "/tidal-lab",
    "tidal_controllers_kubelet_cgroup_driver": "cgroupfs",
    "tidal_controllers_agent_nri_socket": f"{LAB_NODE}/var/run/nri/nri.sock",
    "tidal_controllers_agent_state_dir": f"{LAB_NODE}/var/lib/tidal-agent",
    "tidal_controllers_affinity": NOT_KWOK,
    "tidal_controllers_agent_affinity": NOT_KWOK,
    "tidal_controllers_prometheus_url": "http://10.0.0.1:9090",
}
VARIANTS = pytest.mark.parametrize("overrides", [{}, LAB], ids=["defaults", "lab"])


def variables(**overrides):
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values.update(yaml.safe_load((ROLE / "vars" / "console_roles.yml").read_text()))
    values = {k: v for k, v in values.items() if "lookup(" not in str(v)}
    values.update(overrides)
    return values


def render(name, **overrides):
    text = Templar(loader=DataLoader(), variables=variables(**overrides)).template(
        trust_as_template((ROLE / "templates" / name).read_text()))
    return [d for d in yaml.safe_load_all(text) if d]


def workloads(**overrides) -> dict[str, dict]:
    """kind/name -> object."""
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in render("workloads.yml.j2", **overrides)}


def pod(objects, key) -> dict:
    return objects[key]["spec"]["template"]


def container(objects, key, name) -> dict:
    return next(c for c in pod(objects, key)["spec"]["containers"] if c["name"] == name)


def all_containers(objects):
    for key, obj in objects.items():
        if obj["kind"] in ("Deployment", "DaemonSet"):
            for c in obj["spec"]["template"]["spec"]["containers"]:
                yield key, c


def mounted_host_path(objects, key, container_name, path) -> tuple[dict, dict]:
    """The volumeMount that holds ``path`` in the container (the longest mountPath that is a
    prefix) and its volume."""
    c = container(objects, key, container_name)
    mounts = [m for m in c.get("volumeMounts", [])
              if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert mounts, f"{container_name}: nothing mounted at {path}"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    volume = next(v for v in pod(objects, key)["spec"]["volumes"] if v["name"] == mount["name"])
    return mount, volume


# -- the controllers' own parsers and servers ----------------------------------------------------

def parse(parser, argv, c=None):
    """``argv`` parsed as the container would: in the container's environment only (flags
    default to environment variables; the pod has no KUBECONFIG, the test runner may)."""
    env = {e["name"]: e.get("value", f"<{e['name']} of the pod>") for e in (c or {}).get("env", [])}
    with mock.patch.dict(os.environ, env, clear=True):
        return parser().parse_args(argv)


def agent_args(argv, c=None):
    from tidal.agent.main import _parser
    assert argv[0] == "tidal-agent"
    return parse(_parser, argv[1:], c)


def manager_args(argv, c=None):
    from tidal.manager.main import _parser
    return parse(_parser, argv, c)


def console_args(argv, c=None):
    from tidal.console.main import _parser
    assert argv[0] == "tidal-console"
    return parse(_parser, argv[1:], c)


def _get_routes(app) -> set[str]:
    return {r.resource.canonical for r in app.router.routes() if r.method == "GET"}


def served_routes() -> dict[str, set[str]]:
    """component -> the GET paths its (health/metrics) server answers, from the servers themselves."""
    async def collect():
        from tidal.agent.nri.main import serve_health as nri_health
        from tidal.agent.run import serve_health as agent_health
        from tidal.console.server import Console, ConsoleConfig
        from tidal.manager.admission.server import AdmissionMetrics, build_apps

        class Plugin:
            ready, socket_path = asyncio.Event(), "/nri.sock"

        from prometheus_client import CollectorRegistry
        agent = await agent_health("127.0.0.1", 0, CollectorRegistry(), lambda: True)
        nri = await nri_health("127.0.0.1", 0, Plugin())
        try:
            return {"manager": _get_routes(build_apps(AdmissionMetrics(), asyncio.Event())[1]),
                    "agent": _get_routes(agent.app), "nri": _get_routes(nri.app),
                    "console": _get_routes(Console(object(), ConsoleConfig("http://p:9090"), None).app())}
        finally:
            await agent.cleanup()
            await nri.cleanup()
    return asyncio.run(collect())


COMPONENT = {("Deployment/tidal-manager", "manager"): "manager", ("DaemonSet/tidal-agent", "agent"): "agent",
             ("DaemonSet/tidal-agent", "nri"): "nri", ("Deployment/tidal-console", "console"): "console"}


def listen_port(key, c) -> int:
    """The port the container's command line makes its health/metrics server listen on."""
    component = COMPONENT[(key, c["name"])]
    if component == "manager":
        return manager_args(c["args"], c).health_port
    if component == "agent":
        return agent_args(c["command"], c).metrics_port
    if component == "nri":
        return agent_args(c["command"], c).health_port
    return console_args(c["command"], c).port


@pytest.fixture(scope="module")
def routes():
    return served_routes()


# -- every container ---------------------------------------------------------------------------

@VARIANTS
def test_every_container_has_requests_limits_probes_image_and_pull_policy(overrides):
    values = variables(**overrides)
    containers = list(all_containers(workloads(**overrides)))
    assert {(k, c["name"]) for k, c in containers} == set(COMPONENT)
    for key, c in containers:
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(c["resources"][kind]), (key, c["name"], kind)
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        for probe in ("readinessProbe", "livenessProbe"):
            assert c[probe]["httpGet"]["port"] in ports, (key, c["name"], probe)
        assert c["image"] == values["tidal_controllers_image"] == "localhost/tidal:0.1.0"
        assert c["imagePullPolicy"] == values["tidal_controllers_image_pull_policy"]


@VARIANTS
def test_probes_and_scrape_annotations_name_routes_the_servers_really_have(overrides, routes):
    objects = workloads(**overrides)
    for key, c in all_containers(objects):
        component = COMPONENT[(key, c["name"])]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        for probe in ("readinessProbe", "livenessProbe"):
            get = c[probe]["httpGet"]
            assert get["path"] in routes[component], (component, probe, get["path"])
            assert ports[get["port"]] == listen_port(key, c), (component, probe)
    for key in ("Deployment/tidal-manager", "DaemonSet/tidal-agent", "Deployment/tidal-console"):
        annotations = pod(objects, key)["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        port = int(annotations["prometheus.io/port"])
        scraped = [(k, c) for k, c in all_containers(objects) if k == key and listen_port(k, c) == port]
        assert scraped, f"{key}: no container listens on the scrape port {port}"
        assert annotations["prometheus.io/path"] in routes[COMPONENT[(key, scraped[0][1]["name"])]]


def test_default_ports_are_the_controllers_defaults():
    objects = workloads()
    assert listen_port("Deployment/tidal-manager", container(objects, "Deployment/tidal-manager", "manager")) \
        == manager_args([]).health_port == 8080
    agent = container(objects, "DaemonSet/tidal-agent", "agent")
    assert listen_port("DaemonSet/tidal-agent", agent) == agent_args(["tidal-agent", "run", "--node=n"]).metrics_port
    console = container(objects, "Deployment/tidal-console", "console")
    assert listen_port("Deployment/tidal-console", console) == console_args(["tidal-console", "serve"]).port


# -- tidal-agent ---------------------------------------------------------------------------------

@VARIANTS
def test_agent_flags_point_at_host_mounts_of_what_it_reads_and_writes(overrides):
    values = variables(**overrides)
    objects = workloads(**overrides)
    key = "DaemonSet/tidal-agent"
    agent = container(objects, key, "agent")
    args = agent_args(agent["command"], agent)
    assert args.command == "run" and args.node == "<NODE_NAME of the pod>" and args.kubeconfig is None

    mount, volume = mounted_host_path(objects, key, "agent", str(args.cgroup_root))
    assert volume["hostPath"]["path"] == "/sys/fs/cgroup" and not mount.get("readOnly")
    mount, volume = mounted_host_path(objects, key, "agent", str(args.proc_root))
    assert volume["hostPath"]["path"] == "/proc"
    # the restore journal: a host directory, so it outlives the pod
    mount, volume = mounted_host_path(objects, key, "agent", str(args.state_dir / "qos-journal.json"))
    assert volume["hostPath"] == {"path": values["tidal_controllers_agent_state_dir"], "type": "DirectoryOrCreate"}
    assert not mount.get("readOnly")
    # the NRI socket it probes: the host socket's directory
    mount, volume = mounted_host_path(objects, key, "agent", args.nri_socket)
    socket = values["tidal_controllers_agent_nri_socket"]
    assert volume["hostPath"]["path"] == posixpath.dirname(socket)
    assert posixpath.basename(args.nri_socket) == posixpath.basename(socket)
    # the kubelet's cgroup root and driver, as set
    assert args.kubelet_cgroup_root == (values["tidal_controllers_kubelet_cgroup_root"] or "/")
    assert args.cgroup_driver == (values["tidal_controllers_kubelet_cgroup_driver"] or None)


@VARIANTS
def test_agent_reads_cpu_manager_state_from_the_kubelet_root_dir(overrides):
    from tidal.agent.qos.numa_affinity import DEFAULT_CPU_MANAGER_STATE
    objects = workloads(**overrides)
    mount, volume = mounted_host_path(objects, "DaemonSet/tidal-agent", "agent", str(DEFAULT_CPU_MANAGER_STATE))
    assert volume["hostPath"] == {"path": variables(**overrides)["tidal_controllers_kubelet_root_dir"],
                                  "type": "Directory"}
    # read-only, and unmounts of pod volumes below it reach the container
    assert mount["readOnly"] is True and mount["mountPropagation"] == "HostToContainer"


@VARIANTS
def test_nri_container_uses_the_same_socket_the_in_cluster_account_and_a_health_port(overrides):
    values = variables(**overrides)
    objects = workloads(**overrides)
    key = "DaemonSet/tidal-agent"
    nri = agent_args(container(objects, key, "nri")["command"], container(objects, key, "nri"))
    agent = agent_args(container(objects, key, "agent")["command"], container(objects, key, "agent"))
    assert nri.command == "nri" and nri.socket == agent.nri_socket
    assert nri.in_cluster and nri.kubeconfig is None
    assert nri.plugin_name == "tidal" and nri.plugin_index == values["tidal_controllers_agent_nri_plugin_index"]
    mount, volume = mounted_host_path(objects, key, "nri", nri.socket)
    assert volume["hostPath"]["path"] == posixpath.dirname(values["tidal_controllers_agent_nri_socket"])
    assert not mount.get("readOnly")  # connecting to a socket is a write
    assert nri.health_port != agent.metrics_port  # both on the node's network


def test_nri_container_can_be_left_out():
    objects = workloads(tidal_controllers_agent_nri_enabled=False)
    spec = pod(objects, "DaemonSet/tidal-agent")["spec"]
    assert [c["name"] for c in spec["containers"]] == ["agent"]
    assert "nri" not in {v["name"] for v in spec["volumes"]}


def test_resctrl_is_mounted_only_when_asked_and_never_created():
    from tidal.agent.qos.resctrl import DEFAULT_ROOT
    paths = lambda objects: {v["hostPath"]["path"]: v["hostPath"] for v in  # noqa: E731
                             pod(objects, "DaemonSet/tidal-agent")["spec"]["volumes"] if "hostPath" in v}
    assert str(DEFAULT_ROOT) not in paths(workloads())
    objects = workloads(tidal_controllers_agent_resctrl=True)
    assert paths(objects)[str(DEFAULT_ROOT)].get("type") == "Directory"  # never DirectoryOrCreate
    mount, _ = mounted_host_path(objects, "DaemonSet/tidal-agent", "agent", str(DEFAULT_ROOT / "schemata"))
    assert mount["mountPath"] == str(DEFAULT_ROOT) and not mount.get("readOnly")
    agent = container(objects, "DaemonSet/tidal-agent", "agent")
    assert agent["securityContext"]["appArmorProfile"] == {"type": "Unconfined"}
    assert "appArmorProfile" not in container(workloads(), "DaemonSet/tidal-agent", "agent")["securityContext"]


@VARIANTS
def test_agent_shares_the_hosts_network_and_pids_with_named_capabilities_not_privileged(overrides):
    objects = workloads(**overrides)
    spec = pod(objects, "DaemonSet/tidal-agent")["spec"]
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["hostPID"] is True
    assert "nodeSelector" not in spec  # placement is the mode's node affinity (test below)
    agent = container(objects, "DaemonSet/tidal-agent", "agent")["securityContext"]
    assert agent["privileged"] is False and agent["runAsUser"] == 0 and agent["readOnlyRootFilesystem"] is True
    assert agent["capabilities"] == {"drop": ["ALL"],
                                    "add": ["NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE", "SYS_NICE", "DAC_OVERRIDE"]}
    nri = container(objects, "DaemonSet/tidal-agent", "nri")["securityContext"]
    assert nri["capabilities"] == {"drop": ["ALL"]} and nri["allowPrivilegeEscalation"] is False
    assert nri["readOnlyRootFilesystem"] is True and nri["runAsUser"] == 0
    for _, c in all_containers(objects):
        assert not c["securityContext"].get("privileged"), c["name"]


@VARIANTS
def test_manager_and_console_run_as_65532_on_a_read_only_root(overrides):
    objects = workloads(**overrides)
    for key, name in (("Deployment/tidal-manager", "manager"), ("Deployment/tidal-console", "console")):
        sc = container(objects, key, name)["securityContext"]
        assert (sc["runAsNonRoot"], sc["runAsUser"], sc["readOnlyRootFilesystem"]) == (True, 65532, True)
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}


def test_console_command_line():
    objects = workloads(tidal_controllers_console_web_dir="/usr/share/tidal/console-web",
                        tidal_controllers_prometheus_url="http://prometheus.monitoring:9090")
    c = container(objects, "Deployment/tidal-console", "console")
    args = console_args(c["command"], c)
    assert (args.command, args.address) == ("serve", "0.0.0.0")
    assert args.prometheus_url == "http://prometheus.monitoring:9090"
    assert args.kubeconfig is None and str(args.web_dir) == "/usr/share/tidal/console-web"
    assert console_args(container(workloads(), "Deployment/tidal-console", "console")["command"]).web_dir is None
    assert "Deployment/tidal-console" not in workloads(tidal_controllers_console_enabled=False)


def test_manager_command_line_finds_its_certificate_in_the_secret_mount():
    objects = workloads()
    c = container(objects, "Deployment/tidal-manager", "manager")
    args = manager_args(c["args"], c)
    for path in (args.webhook_cert_file, args.webhook_key_file):
        _, volume = mounted_host_path(objects, "Deployment/tidal-manager", "manager", path)
        assert volume["secret"]["secretName"] == "tidal-manager-webhook-tls"
    assert args.kubeconfig is None  # in-cluster
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["webhook"] == args.webhook_port


# -- the manager's availability and placement ---------------------------------------------------------

@pytest.mark.parametrize("replicas, pdb", [(1, False), (2, True), (3, True)])
def test_manager_pdb_keeps_one_replica_when_there_are_two_or_more(replicas, pdb):
    objects = workloads(tidal_controllers_manager_replicas=replicas)
    assert ("PodDisruptionBudget/tidal-manager" in objects) is pdb
    if pdb:
        budget = objects["PodDisruptionBudget/tidal-manager"]["spec"]
        assert budget["minAvailable"] == 1
        labels = pod(objects, "Deployment/tidal-manager")["metadata"]["labels"]
        assert budget["selector"]["matchLabels"].items() <= labels.items()


def test_placement_defaults_leave_scheduling_alone():
    objects = workloads()
    for key in ("Deployment/tidal-manager", "Deployment/tidal-console"):
        spec = pod(objects, key)["spec"]
        assert "nodeSelector" not in spec and "tolerations" not in spec
    assert set(pod(objects, "Deployment/tidal-manager")["spec"]["affinity"]) == {"podAntiAffinity"}
    assert "affinity" not in pod(objects, "Deployment/tidal-console")["spec"]
    # the agent's only placement is the node mode's (either label): nothing else by default
    assert pod(objects, "DaemonSet/tidal-agent")["spec"]["affinity"] == agent_affinity()


def test_placement_variables_keep_every_controller_off_kwok_nodes():
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}]
    objects = workloads(**LAB, tidal_controllers_node_selector={"node-role.kubernetes.io/infra": ""},
                        tidal_controllers_tolerations=tolerations)
    manager = pod(objects, "Deployment/tidal-manager")["spec"]
    assert manager["affinity"]["nodeAffinity"] == NOT_KWOK["nodeAffinity"]
    assert "podAntiAffinity" in manager["affinity"]  # replicas still spread
    console = pod(objects, "Deployment/tidal-console")["spec"]
    assert console["affinity"] == NOT_KWOK
    for spec in (manager, console):
        assert spec["nodeSelector"] == {"node-role.kubernetes.io/infra": ""} and spec["tolerations"] == tolerations
    agent = pod(objects, "DaemonSet/tidal-agent")["spec"]
    not_kwok = NOT_KWOK["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert agent["affinity"] == agent_affinity(not_kwok["matchExpressions"])
    assert "nodeSelector" not in agent


MODE_LABELS = (qos.COLOCATION_NODE_LABEL, qos.OVERSUBSCRIPTION_NODE_LABEL, "volcano.sh/colocation",
               "volcano.sh/oversubscription", qos.RESTORE_PENDING_NODE_LABEL)


def agent_affinity(extra=(), **rest):
    """The agent's affinity: one required term per mode label and the restore-pending label
    (ORed), each with ``extra``."""
    terms = [{"matchExpressions": [{"key": label, "operator": "In", "values": ["true"]}, *extra]}
             for label in MODE_LABELS]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}},
            **rest}


def _matches(term, labels):
    """A nodeSelectorTerm against a node's labels (``labels["metadata.name"]`` for matchFields)."""
    ops = {"In": lambda v, vs: v is not None and v in vs, "NotIn": lambda v, vs: v is None or v not in vs,
           "Exists": lambda v, vs: v is not None, "DoesNotExist": lambda v, vs: v is None}
    return all(ops[e["operator"]](labels.get(e["key"]), e.get("values", ()))
               for e in (*term.get("matchExpressions", ()), *term.get("matchFields", ())))


def _schedulable(affinity, labels):
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return any(_matches(term, labels) for term in terms)


@pytest.mark.parametrize("labels, runs", [
    pytest.param({qos.COLOCATION_NODE_LABEL: "true"}, True, id="colocation"),
    pytest.param({qos.OVERSUBSCRIPTION_NODE_LABEL: "true"}, True, id="oversubscription"),
    pytest.param({"volcano.sh/colocation": "true"}, True, id="volcano-colocation"),
    pytest.param({"volcano.sh/oversubscription": "true"}, True, id="volcano-oversubscription"),
    pytest.param({qos.COLOCATION_NODE_LABEL: "false"}, False, id="switched-off"),
    pytest.param({qos.COLOCATION_NODE_LABEL: "false", qos.RESTORE_PENDING_NODE_LABEL: "true"}, True,
                 id="switched-off-not-restored-yet"),
    pytest.param({}, False, id="no-label"),
    pytest.param({qos.OVERSUBSCRIPTION_NODE_LABEL: "true", "type": "kwok"}, False, id="lab-kwok-excluded-by-the-extra"),
])
def test_the_agent_runs_on_nodes_with_either_mode_label_and_the_extra_affinity_applies_to_each(labels, runs):
    spec = pod(workloads(**LAB), "DaemonSet/tidal-agent")["spec"]
    assert _schedulable(spec["affinity"], labels) is runs
    defaults = pod(workloads(), "DaemonSet/tidal-agent")["spec"]
    assert _schedulable(defaults["affinity"], labels) is (runs or labels.get("type") == "kwok")


def test_an_extra_agent_affinity_with_several_terms_and_other_parts_is_anded_into_each_mode_term():
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    extra = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [zone]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n9"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchExpressions": [zone]}}]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}
    affinity = pod(workloads(tidal_controllers_agent_affinity=extra), "DaemonSet/tidal-agent")["spec"]["affinity"]
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 2 * len(MODE_LABELS)
    for label in MODE_LABELS:
        mode = {"key": label, "operator": "In", "values": ["true"]}
        assert {"matchExpressions": [mode, zone]} in terms
        assert {"matchExpressions": [mode], "matchFields": extra["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][1]["matchFields"]} in terms
    assert affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == \
        extra["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert affinity["podAntiAffinity"] == extra["podAntiAffinity"]
    assert _schedulable(affinity, {qos.OVERSUBSCRIPTION_NODE_LABEL: "true", "zone": "a"})
    assert not _schedulable(affinity, {qos.OVERSUBSCRIPTION_NODE_LABEL: "true", "zone": "b"})
    assert _schedulable(affinity, {qos.OVERSUBSCRIPTION_NODE_LABEL: "true", "zone": "b", "metadata.name": "n9"})
    assert not _schedulable(affinity, {"zone": "a", "metadata.name": "n9"})


# -- RBAC ----------------------------------------------------------------------------------------

def _rules(role) -> set[tuple[str, str, str]]:
    return {(g, res, verb) for r in role["rules"] for g in r["apiGroups"] for res in r["resources"]
            for verb in r["verbs"]}


def test_every_controller_runs_under_its_own_service_account_bound_to_its_role():
    rbac = render("rbac.yml.j2")
    accounts = {o["metadata"]["name"] for o in rbac if o["kind"] == "ServiceAccount"}
    objects = workloads()
    used = [pod(objects, key)["spec"]["serviceAccountName"] for key in
            ("Deployment/tidal-manager", "DaemonSet/tidal-agent", "Deployment/tidal-console")]
    assert used == ["tidal-manager", "tidal-agent", "tidal-console"] and set(used) == accounts
    for name in used:
        binding = next(o for o in rbac if o["kind"] == "ClusterRoleBinding" and o["metadata"]["name"] == name)
        assert binding["roleRef"]["name"] == name
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "tidal-system"}]


# What tidal-manager's code calls (oversell/master.py, oversell/loop.py, policy/reconciler.py).
MANAGER_CALLS = {
    ("", "nodes", "list"), ("", "nodes", "watch"), ("", "nodes", "patch"),    # master, reconciler, volcanoAnnotations
    ("", "nodes/status", "patch"),                                            # batch resources
    ("", "pods", "list"), ("", "pods", "watch"),                              # tidal_node_batch_requested (watch cache)
    ("", "events", "create"),                                                 # BatchResourcesDropped
    ("colocation.tidal.io", "colocationpolicies", "get"), ("colocation.tidal.io", "colocationpolicies", "list"),
    ("colocation.tidal.io", "colocationpolicies", "watch"),
    ("colocation.tidal.io", "colocationpolicies/status", "patch"),            # rollout status
    ("colocation.tidal.io", "nodeprofiles", "list"), ("colocation.tidal.io", "nodeprofiles", "watch"),
    ("colocation.tidal.io", "nodeprofiles/status", "patch"),                  # status.oversell
}


def test_manager_cluster_role_covers_every_call_of_its_code():
    rbac = render("rbac.yml.j2")
    role = next(o for o in rbac if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "tidal-manager")
    assert MANAGER_CALLS <= _rules(role), MANAGER_CALLS - _rules(role)


def test_manager_may_create_and_renew_only_its_own_lease():
    rbac = render("rbac.yml.j2")
    role = next(o for o in rbac if o["kind"] == "Role" and o["metadata"]["name"] == "tidal-manager-leader-election")
    assert role["metadata"]["namespace"] == qos.NAMESPACE
    lease = manager_args([]).lease_name
    named = {verb for r in role["rules"] if r.get("resourceNames") == [lease] for verb in r["verbs"]}
    anonymous = {verb for r in role["rules"] if not r.get("resourceNames") for verb in r["verbs"]}
    assert named == {"get", "update"} and anonymous == {"create"}


def test_agent_may_read_pods_by_name_for_the_nri_lookup():
    rbac = render("rbac.yml.j2")
    role = next(o for o in rbac if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "tidal-agent")
    assert {("", "pods", "get"), ("", "pods", "list"), ("", "pods", "watch")} <= _rules(role)


# -- Kubernetes >= 1.30 ----------------------------------------------------------------------------

@pytest.mark.parametrize("major, minor, accepted", [
    ("1", "34", True), ("1", "30", True), ("1", "30+", True), ("2", "0", True),
    ("1", "29", False), ("1", "29+", False), ("1", "9", False),
])
def test_role_refuses_an_api_server_older_than_1_30_naming_its_version(major, minor, accepted):
    """The assert of tasks/present.yml over what kubernetes.core.k8s_cluster_info returns."""
    tasks = yaml.safe_load((ROLE / "tasks" / "present.yml").read_text())
    check = next(t for t in tasks if "ansible.builtin.assert" in t and "1.30" in t["name"])
    assert tasks.index(check) == 1 and "kubernetes.core.k8s_cluster_info" in tasks[0]  # before anything
    git = f"v{major}.{minor.rstrip('+')}.2-provider"
    values = {"tidal_controllers_cluster_info": {"version": {"server": {"kubernetes": {
        "major": major, "minor": minor, "gitVersion": git}}}}}
    values.update({k: trust_as_template(v) for k, v in check["vars"].items()})
    templar = Templar(loader=DataLoader(), variables=values)
    spec = check["ansible.builtin.assert"]
    assert all(templar.template(trust_as_template("{{ %s }}" % that)) for that in spec["that"]) is accepted
    message = templar.template(trust_as_template(spec["fail_msg"]))
    assert "Kubernetes 1.30 or newer" in message and message.endswith(f"this API server is {git}.")
