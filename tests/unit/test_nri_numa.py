"""NUMA affinity at container creation (the NRI plugin's placer), table-driven on the recorded
NUMA trees; its choice is the node engine's, and the engine's round keeps it."""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from tidal.agent.collector.cgroups import CgroupDriver, CgroupHierarchy, CgroupLayout, CgroupVersion, PodQOSClass
from tidal.agent.nri.api import api_pb2 as api
from tidal.agent.nri.decisions import ContainerRef, Cpuset, Resources, decide, shares_to_millicores
from tidal.agent.nri.main import numa_enabled
from tidal.agent.nri.numa import NUMAPlacer, node_topology
from tidal.agent.nri.plugin import TidalNRIPlugin
from tidal.agent.qos.be_batch_resources import milli_cpu_to_shares
from tidal.agent.qos.numa_affinity import (
    NUMAAffinityActuator,
    assign,
    parse_cpu_manager_state,
    pinned_nodes,
    read_topology,
    shareable,
)
from tidal.agent.qos.pod_features import ContainerCPU, FeaturePodState
from tidal.api import qos

DATA = Path(__file__).resolve().parent.parent / "data" / "numa"
STATIC = DATA / "kubelet" / "cpu_manager_state.static"
#: the shared pool the kubelet's static CPU manager gives a shared container (its defaultCpuSet)
POOL = "0-1,6-7,10-31"
LS = {qos.QOS_ANNOTATION: "LS"}
SUCCESS = "Successfully set NUMA affinity for container {}: cpus={} mems={}"


def ref(cid, request=1000, pool="", creating=True, annotations=LS, uid=None):
    return ContainerRef("web", f"pod-{cid}", uid or f"uid-{cid}", "app", annotations, container_id=cid,
                        cpu_request_millicores=request, cpuset_cpus=pool, creating=creating)


def placer(tree, enabled=True):
    return NUMAPlacer(read_topology(DATA / tree), lambda: enabled)


# --- pure pieces ---------------------------------------------------------------------------------

@pytest.mark.parametrize("shares, expected", [(None, 0), (0, 0), (2, 0), (102, 100), (256, 250), (1024, 1000),
                                              (2048, 2000), (262_144, 256_000)])
def test_shares_to_millicores(shares, expected):
    assert shares_to_millicores(shares) == expected


@pytest.mark.parametrize("millicores", [10, 100, 250, 333, 1000, 1500, 64_000])
def test_the_request_survives_the_kubelets_shares_to_the_millicore(millicores):
    assert abs(shares_to_millicores(milli_cpu_to_shares(millicores)) - millicores) <= 1


@pytest.mark.parametrize("mems, nodes, expected", [
    ("1", (0, 1), (1,)),
    ("1\n", (0, 1), (1,)),
    ("0-1", (0, 1), None),          # every node: not pinned
    ("", (0, 1), None),             # unset (cgroup v2 default)
    ("0,2", (0, 1, 2, 3), (0, 2)),
    ("5", (0, 1), None),            # not a subset
    ("x", (0, 1), None),
])
def test_pinned_nodes(mems, nodes, expected):
    assert pinned_nodes(mems, nodes) == expected


@pytest.mark.parametrize("hook, expected", [
    (None, Resources()),
    (lambda r: None, Resources()),
    (lambda r: "0-3", Resources(cpuset_cpus="0-3")),
    (lambda r: Cpuset("8-15,24-31", "1"), Resources(cpuset_cpus="8-15,24-31", cpuset_mems="1")),
    (lambda r: Cpuset("", "1"), Resources()),  # no CPU to give: nothing
])
def test_decide_ls_cpuset(hook, expected):
    assert decide(ref("c1"), ls_cpuset=hook).resources == expected


# --- the placer -----------------------------------------------------------------------------------

@pytest.mark.parametrize("tree, pool, creates, expected", [
    # two nodes, no CPU manager: the freest node, lowest id on ties; SMT siblings included
    ("two-node", "", [("c1", 2000), ("c2", 1000)], {"c1": ("0-7,16-23", "0"), "c2": ("8-15,24-31", "1")}),
    # the static CPU manager's shared pool (HLS holds 2-5,8-9): node1 has more shareable CPUs
    ("two-node", POOL, [("c1", 2000), ("c2", 1000), ("c3", 500)],
     {"c1": ("10-15,24-31", "1"), "c2": ("0-1,6-7,16-23", "0"), "c3": ("10-15,24-31", "1")}),
    # bigger than one node: the freest nodes together
    ("two-node", "", [("c1", 20_000)], {"c1": ("0-31", "0-1")}),
    ("four-node", "", [("c1", 3000), ("c2", 3000), ("c3", 6000)],
     {"c1": ("0-3", "0"), "c2": ("4-7", "1"), "c3": ("8-15", "2-3")}),
])
def test_placer_at_creation(tree, pool, creates, expected):
    numa = placer(tree)
    got = {cid: numa(ref(cid, request, pool)) for cid, request in creates}
    assert got == {cid: Cpuset(*cm) for cid, cm in expected.items()}


@pytest.mark.parametrize("tree, pool, creates", [
    ("two-node", "", [("c1", 2000), ("c2", 1000), ("c3", 3000), ("c4", 500)]),
    ("two-node", POOL, [("c1", 2000), ("c2", 1000), ("c3", 500)]),
    ("four-node", "", [("c1", 3000), ("c2", 3000), ("c3", 3000), ("c4", 3000), ("c5", 2000)]),
])
def test_the_placer_chooses_as_the_engine_does(tree, pool, creates):
    """Same inputs, same choice: the engine's assign() over the same containers in the same order."""
    numa = placer(tree)
    for cid, request in creates:
        numa(ref(cid, request, pool))
    cpu_state = parse_cpu_manager_state(STATIC.read_text()) if pool else parse_cpu_manager_state("{}")
    engine = assign(shareable(read_topology(DATA / tree), cpu_state), {},
                    [(f"uid-{cid}", cid, request) for cid, request in creates])
    assert {c: p.nodes for c, p in numa.placements.items()} == {c: p.nodes for c, p in engine.items()}


def test_placements_are_sticky_and_follow_the_kubelets_pool():
    numa = placer("two-node")
    assert numa(ref("c1", 2000)) == Cpuset("0-7,16-23", "0")
    # the kubelet's reconcile (UpdateContainer) with the static CPU manager's shrunken pool: same node
    assert numa(ref("c1", 2000, POOL, creating=False)) == Cpuset("0-1,6-7,16-23", "0")
    # a container not pinned at creation is never placed later (the agent's round owns it)
    assert numa(ref("old", 1000, creating=False)) is None and "old" not in numa.placements
    numa.forget("c1")
    assert numa(ref("c1", 2000, creating=False)) is None


@pytest.mark.parametrize("tree, enabled", [
    ("two-node", False),    # the policy has it off
    ("one-node", True),     # one NUMA node: nothing to align
])
def test_placer_does_nothing_when_off(tree, enabled):
    numa = NUMAPlacer({0: frozenset(range(8))}, lambda: enabled) if tree == "one-node" else placer(tree, enabled)
    assert numa(ref("c1")) is None and numa.placements == {}


def test_learnt_placements_count_and_only_ls_pinned_ones_are_learnt():
    numa = placer("two-node")
    numa.learn(ref("ls-pinned", 4000, creating=False), "0")
    numa.learn(ref("ls-free", 8000, creating=False), "0-1")
    numa.learn(ref("be-pinned", 8000, creating=False, annotations={qos.QOS_ANNOTATION: "BE"}), "1")
    numa.learn(ref("bad", 8000, creating=False, annotations={qos.QOS_ANNOTATION: "nonsense"}), "1")
    assert set(numa.placements) == {"ls-pinned"}
    # node 0 carries 4 CPUs of requests: the next container goes to node 1
    assert numa(ref("new", 1000)) == Cpuset("8-15,24-31", "1")
    numa.forget_pod("uid-ls-pinned")
    assert set(numa.placements) == {"new"}


def test_node_topology_without_numa_sysfs(tmp_path):
    assert node_topology(tmp_path) == {}
    assert node_topology(DATA / "four-node") == read_topology(DATA / "four-node")


def test_numa_enabled_follows_the_policy_object():
    obj = {"metadata": {"resourceVersion": "1"}, "spec": {"features": {"numaAffinity": {"enabled": True}}}}
    current = [None]
    enabled = numa_enabled(lambda: current[0])
    assert enabled() is False  # no policy: the defaults (off)
    current[0] = obj
    assert enabled() is True
    current[0] = {"metadata": {"resourceVersion": "2"}, "spec": {"features": {"numaAffinity": {"enabled": "x"}}}}
    assert enabled() is True  # invalid: the last valid answer stays
    current[0] = {"metadata": {"resourceVersion": "3"}, "spec": {}}
    assert enabled() is False


def test_batch_resources_enabled_follows_the_policy_object_and_starts_on():
    """On by default, and before any valid policy is seen (an invalid first one): a BE container
    gets its batch limits, as the agent's round would set them."""
    from tidal.agent.nri.main import batch_resources_enabled
    off = {"metadata": {"resourceVersion": "1"}, "spec": {"beIsolation": {"batchResources": {"enabled": False}}}}
    invalid = {"metadata": {"resourceVersion": "0"}, "spec": {"beIsolation": {"batchResources": {"enabled": "x"}}}}
    current = [invalid]
    enabled = batch_resources_enabled(lambda: current[0])
    assert enabled() is True  # invalid before any valid one: the default
    current[0] = off
    assert enabled() is False
    current[0] = None
    assert enabled() is True  # no policy: the defaults


@pytest.mark.parametrize("synced, node, on", [
    (False, None, True),  # not read yet: on, as the DaemonSet runs the agent where the mode is on
    (True, {"metadata": {"labels": {"colocation.tidal.io/colocation": "true"}}}, True),
    (True, {"metadata": {"labels": {"volcano.sh/oversubscription": "true"}}}, True),  # an alias
    (True, {"metadata": {"labels": {"colocation.tidal.io/restore-pending": "true"}}}, False),
    (True, {"metadata": {}}, False),
    (True, None, False),  # the node is gone
])
def test_node_active_reads_the_node_mode_as_the_agent_does(synced, node, on):
    from tidal.agent.nri.main import node_active
    assert node_active(lambda: node, lambda: synced)() is on


# --- the plugin's handlers ------------------------------------------------------------------------

def container(cid, name="app", shares=2048, cpus="", mems="", state=api.CONTAINER_UNKNOWN, pod_id="p1"):
    c = api.Container(id=cid, name=name, pod_sandbox_id=pod_id, state=state)
    c.linux.resources.cpu.shares.value = shares
    if cpus:
        c.linux.resources.cpu.cpus = cpus
    if mems:
        c.linux.resources.cpu.mems = mems
    return c


def pod(annotations=LS, pod_id="p1", name="api"):
    return api.PodSandbox(id=pod_id, name=name, namespace="web", uid=f"uid-{pod_id}", annotations=annotations)


def test_plugin_pins_ls_containers_at_creation_and_logs_it(caplog):
    plugin = TidalNRIPlugin("/nonexistent", numa=placer("two-node"))

    async def main():
        ls = await plugin._create_container(api.CreateContainerRequest(pod=pod(), container=container("c1", cpus=POOL)))
        be = await plugin._create_container(api.CreateContainerRequest(
            pod=pod({qos.QOS_ANNOTATION: "BE"}, "p2", "batch"), container=container("c2", shares=2)))
        return ls, be

    with caplog.at_level(logging.INFO, logger="tidal.agent.nri.plugin"):
        ls, be = asyncio.run(main())
    cpu = ls.adjust.linux.resources.cpu
    assert (cpu.cpus, cpu.mems) == ("10-15,24-31", "1")
    assert not be.adjust.linux.resources.cpu.mems and be.adjust.linux.resources.cpu.shares.value == 2
    success = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Successfully")]
    assert success == [SUCCESS.format("web/api/app", "10-15,24-31", "1")]


def test_plugin_keeps_the_pin_at_update_and_forgets_it_at_stop():
    plugin = TidalNRIPlugin("/nonexistent", numa=placer("two-node"))

    async def main():
        await plugin._create_container(api.CreateContainerRequest(pod=pod(), container=container("c1")))
        # the kubelet's reconcile with the static CPU manager: its shared pool in the request
        update = api.UpdateContainerRequest(pod=pod(), container=container("c1", cpus="0-31", mems="0"))
        update.linux_resources.cpu.cpus = POOL
        kept = await plugin._update_container(update)
        await plugin._stop_container(api.StopContainerRequest(pod=pod(), container=container("c1")))
        return kept

    kept = asyncio.run(main())
    assert [u.container_id for u in kept.update] == ["c1"]
    cpu = kept.update[0].linux.resources.cpu
    assert (cpu.cpus, cpu.mems) == ("0-1,6-7,16-23", "0")
    assert plugin.numa.placements == {}


def test_plugin_learns_pinned_containers_at_synchronize_and_asks_nothing_for_them():
    plugin = TidalNRIPlugin("/nonexistent", numa=placer("two-node"))
    sync = api.SynchronizeRequest(pods=[pod()], containers=[
        container("old", shares=4096, cpus="0-7,16-23", mems="0", state=api.CONTAINER_RUNNING),
        container("free", cpus="", mems="", state=api.CONTAINER_RUNNING)])

    async def main():
        answer = await plugin._synchronize(sync)
        created = await plugin._create_container(api.CreateContainerRequest(pod=pod(), container=container("c1")))
        return answer, created

    answer, created = asyncio.run(main())
    assert list(answer.update) == []  # the pinned one is right, the other is the agent's
    assert {c: p.nodes for c, p in plugin.numa.placements.items()} == {"old": (0,), "c1": (1,)}
    assert created.adjust.linux.resources.cpu.mems == "1"


def test_placements_of_containers_that_ended_while_the_plugin_was_away_are_dropped_at_synchronize():
    """Their StopContainer never reached the plugin (the runtime restarted, the connection was
    lost): kept, a NUMA node looked full while empty and later LS containers crowded the other."""
    plugin = TidalNRIPlugin("/nonexistent", numa=placer("two-node"))

    async def main():
        await plugin._create_container(api.CreateContainerRequest(pod=pod(), container=container("gone")))
        placed = dict(plugin.numa.placements)
        await plugin._synchronize(api.SynchronizeRequest(pods=[pod()], containers=[]))  # it ended meanwhile
        return placed

    placed = asyncio.run(main())
    assert list(placed) == ["gone"] and plugin.numa.placements == {}


# --- the agent's round does not fight the plugin -------------------------------------------------

def ls_pod(uid, name, cid, request):
    return FeaturePodState(uid=uid, qos_class=PodQOSClass.BURSTABLE, tidal_level=qos.QoSLevel.LS,
                           namespace="web", name=name, cpu=(ContainerCPU(cid, request, 0, "app"),))


@pytest.mark.parametrize("version", [CgroupVersion.V1, CgroupVersion.V2])
def test_a_container_pinned_at_creation_is_kept_by_the_next_round(tmp_path, caplog, version):
    """The plugin pins at creation; the runtime writes its cpuset; the agent's round, on the
    same state, leaves it where it is and logs nothing more. Another container the plugin never
    knew makes the engine's own fresh choice differ: it still adopts the plugin's node."""
    root = tmp_path / "cgroup"
    if version is CgroupVersion.V1:
        layout = CgroupLayout(CgroupHierarchy(version, root / "cpu,cpuacct", root / "memory"), CgroupDriver.CGROUPFS)
        cpuset = root / "cpuset"
    else:
        layout = CgroupLayout(CgroupHierarchy(version, root, root), CgroupDriver.SYSTEMD)
        cpuset = root
    numa = placer("two-node")
    pinned = numa(ref("containerd://a1", 2000, POOL, uid="1111-aaaa"))
    assert pinned == Cpuset("10-15,24-31", "1")
    # a pod placed by the agent's round earlier (invisible to the plugin) holds node 1's CPUs
    # in the agent's view: its own fresh choice for a1 would be node 0
    busy = ls_pod("0000-bbbb", "busy", "containerd://b1", 12_000)
    api_pod = ls_pod("1111-aaaa", "api", "containerd://a1", 2000)
    files = {}
    for p, (cpus, mems) in ((busy, ("0-31", "0-1")), (api_pod, (pinned.cpus, pinned.mems))):
        d = cpuset / layout.container_relpath(p.uid, p.qos_class, p.cpu[0].id)
        d.mkdir(parents=True)
        (d / "cpuset.cpus").write_text(cpus)
        (d / "cpuset.mems").write_text(mems)
        files[p.uid] = d
    actuator = NUMAAffinityActuator(layout, tmp_path / "numa.json", sys_root=DATA / "two-node",
                                    cpu_manager_state=STATIC)
    actuator.round(True, [busy])
    assert actuator.placements["containerd://b1"].nodes == (1,)
    with caplog.at_level(logging.INFO, logger="tidal.agent.qos.numa_affinity"):
        assert actuator.round(True, [busy, api_pod]) == []
        assert actuator.round(True, [busy, api_pod]) == []
    assert actuator.placements["containerd://a1"].nodes == (1,)
    assert (files["1111-aaaa"] / "cpuset.cpus").read_text() == "10-15,24-31"
    assert (files["1111-aaaa"] / "cpuset.mems").read_text() == "1"
    assert not any(r.getMessage().startswith("Successfully") for r in caplog.records)
    # the engine alone, on the same state, would have moved it: the adoption is what keeps it
    fresh = assign(shareable(read_topology(DATA / "two-node"), parse_cpu_manager_state(STATIC.read_text())),
                   {"containerd://b1": actuator.placements["containerd://b1"]},
                   [("0000-bbbb", "containerd://b1", 12_000), ("1111-aaaa", "containerd://a1", 2000)])
    assert fresh["containerd://a1"].nodes == (0,)
