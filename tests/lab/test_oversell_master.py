"""The oversell master against the lab's real API server and Volcano."""
import asyncio
import datetime
import math

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.utils import parse_quantity

from tidal.api import qos
from tidal.crds import crd_manifests
from tidal_dev.lab.apply import create_or_replace_all
from tidal.kube import KubeAPI
from tidal_dev.lab.pytest_plugin import wait_for
from tidal.manager.leader import LeaderElector
from tidal.manager.oversell.master import OversellMaster
from tidal.manager.oversell.node_decision import OversellSettings

pytestmark = pytest.mark.lab

OVERSOLD, PLAIN = "lab-node-1", "lab-node-2"
GiB = 1024**3
PLURAL = "nodeprofiles"


async def _until(condition, what: str, seconds: float = 15.0):
    """Poll `condition` every 0.1 s until it is truthy (returned) or `seconds` pass (AssertionError)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not (value := condition()):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {seconds}s: {what}")
        await asyncio.sleep(0.1)
    return value


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


async def _with_api(lab, action):
    async with KubeAPI.from_kubeconfig(lab.kubeconfig_path) as api:
        return await action(api)


def cycle(lab, settings=OversellSettings(), clock=_now):
    return asyncio.run(_with_api(lab, lambda api: OversellMaster(api, settings, clock).cycle()))


def _profile_status(custom, name, cpu_peak=2000, memory_peak=8 * GiB):
    body = {"apiVersion": qos.API_GROUP_VERSION, "kind": "NodeProfile", "metadata": {"name": name}}
    try:
        custom.create_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, PLURAL, body)
    except ApiException as err:
        if err.status != 409:
            raise
    status = {"status": {"observedAt": _now().strftime("%Y-%m-%dT%H:%M:%SZ"), "predictions": {
        "predictor": "test", "onlinePeak": {"cpuMillicores": cpu_peak, "memoryBytes": memory_peak}}}}
    custom.patch_cluster_custom_object_status(qos.API_GROUP, qos.API_VERSION, PLURAL, name, status)


def _batch(core, name):
    allocatable = core.read_node(name).status.allocatable or {}
    return {k: int(parse_quantity(v)) for k, v in allocatable.items() if k.startswith("kubernetes.io/batch-")}


@pytest.fixture
def oversell_setup(lab, lab_api, core):
    create_or_replace_all(lab_api, crd_manifests(), wait_established=True)
    custom = client.CustomObjectsApi(lab_api)
    core.patch_node(OVERSOLD, {"metadata": {"labels": {qos.OVERSUBSCRIPTION_NODE_LABEL: "true",
                                                       qos.COLOCATION_NODE_LABEL: "true"}}})
    for name in (OVERSOLD, PLAIN):
        _profile_status(custom, name)
    yield custom
    core.patch_node(OVERSOLD, {"metadata": {"labels": {qos.OVERSUBSCRIPTION_NODE_LABEL: None,
                                                       qos.COLOCATION_NODE_LABEL: None}}})
    cycle(lab)  # the unlabelled node is driven back to 0 by the master itself
    for name in (OVERSOLD, PLAIN):
        custom.delete_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, PLURAL, name)


def test_batch_resources_appear_on_labelled_nodes_only_and_are_not_rewritten(lab, core, oversell_setup):
    first = cycle(lab)
    assert first.node_patches == 1
    assert _batch(core, OVERSOLD) == {qos.BATCH_CPU_RESOURCE: 6000,
                                      qos.BATCH_MEMORY_RESOURCE: math.floor(64 * GiB * 0.6) - 8 * GiB - math.ceil(64 * GiB * 0.1)}
    assert _batch(core, PLAIN) == {}
    profile = oversell_setup.get_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, PLURAL, OVERSOLD)
    explained = profile["status"]["oversell"]["cpuMillicores"]
    assert explained["result"] == 6000 and explained["predictedOnlinePeak"] == 2000 and explained["formula"]
    # Unchanged inputs: the next cycle writes nothing.
    second = cycle(lab)
    assert second.node_patches == 0 and second.profile_patches == 0


def test_volcano_schedules_batch_pods_against_the_batch_resources(lab, core, namespace, oversell_setup):
    cycle(lab)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "batch"}, "spec": {
        "schedulerName": "volcano", "containers": [{"name": "main", "image": "registry.invalid/job:1", "resources": {
            "requests": {qos.BATCH_CPU_RESOURCE: "4000", qos.BATCH_MEMORY_RESOURCE: str(GiB)},
            "limits": {qos.BATCH_CPU_RESOURCE: "4000", qos.BATCH_MEMORY_RESOURCE: str(GiB)}}}]}}
    core.create_namespaced_pod(namespace, pod)
    too_big = dict(pod, metadata={"name": "too-big"})
    too_big["spec"] = {**pod["spec"], "containers": [{**pod["spec"]["containers"][0], "resources": {
        "requests": {qos.BATCH_CPU_RESOURCE: "7000"}, "limits": {qos.BATCH_CPU_RESOURCE: "7000"}}}]}
    core.create_namespaced_pod(namespace, too_big)

    def bound():
        p = core.read_namespaced_pod("batch", namespace)
        return p.spec.node_name if p.status.phase == "Running" else None

    assert wait_for(bound, 60, "batch pod Running") == OVERSOLD
    # 7000 m exceeds the 6000 m the node offers: Volcano leaves it pending.
    assert core.read_namespaced_pod("too-big", namespace).spec.node_name is None


def test_stale_profile_drives_batch_resources_to_zero_with_an_event(lab, core, oversell_setup):
    cycle(lab)
    settings = OversellSettings(degrade_seconds=30)
    later = lambda: _now() + datetime.timedelta(seconds=60)  # noqa: E731 - the agent stopped a minute ago
    result = cycle(lab, settings, later)
    assert result.node_patches == 1 and result.events == 1
    assert _batch(core, OVERSOLD) == {qos.BATCH_CPU_RESOURCE: 0, qos.BATCH_MEMORY_RESOURCE: 0}
    events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={OVERSOLD}").items
    assert any(e.reason == "BatchResourcesDropped" and "stale" in e.message for e in events)


def test_a_drop_event_the_api_refuses_is_sent_at_the_next_cycle_once(lab, core, oversell_setup):
    """The API server refuses Events (500, a failing webhook) as a cycle drops a node's batch
    resources: the node is written all the same and the Event waits. The next cycle has nothing
    to write (the node is at its value: before, the Event was lost there) and sends it, once, with
    the time of the drop."""
    from tidal_dev.testing.refusing_webhook import events_refused

    cycle(lab)
    before = {e.metadata.uid for e in core.list_namespaced_event("default").items}

    def dropped():
        return [e for e in core.list_namespaced_event("default", field_selector=(
            f"involvedObject.name={OVERSOLD},reason=BatchResourcesDropped")).items if e.metadata.uid not in before]
    drop_time = _now() + datetime.timedelta(seconds=60)  # the agent stopped a minute ago

    async def scenario(api):
        master = OversellMaster(api, OversellSettings(degrade_seconds=30), lambda: drop_time)
        with events_refused(core, "default"):
            refused = await master.cycle()
            assert len(master.events) == 1 and not dropped()
        later = await master.cycle()
        return refused, later, len(master.events)

    refused, later, waiting = asyncio.run(_with_api(lab, scenario))
    assert (refused.node_patches, refused.events, refused.failed) == (1, 0, {})
    assert _batch(core, OVERSOLD) == {qos.BATCH_CPU_RESOURCE: 0, qos.BATCH_MEMORY_RESOURCE: 0}
    assert (later.node_patches, later.events, waiting) == (0, 1, 0)
    (event,) = dropped()
    assert "stale" in event.message and event.first_timestamp == drop_time.replace(microsecond=0), \
        (event.first_timestamp, drop_time)


def test_started_master_cycles_on_watch_caches_and_still_undoes_an_unlabelled_node(lab, core, oversell_setup):
    """After start(), a cycle reads nothing (it decides on the watch caches); a node losing its
    label reaches the cache by its watch event and is driven to 0, then dropped from the cache;
    the caches are re-listed every resync period."""
    def names(master):
        return {n["metadata"]["name"] for n in master.nodes.objects.values()}

    async def scenario(api):
        async with OversellMaster(api, OversellSettings(), resync_seconds=3) as master:
            assert OVERSOLD in names(master) and PLAIN not in names(master)
            assert (await master.cycle()).node_patches == 1
            # Both writes back through both watches: the node's batch resources and the
            # NodeProfile's breakdown (a breakdown not yet seen is written again: breakdown_disagrees).
            await _until(lambda: master.nodes.objects and all(
                (n["status"].get("allocatable") or {}).get(qos.BATCH_CPU_RESOURCE) for n in master.nodes.objects.values()
                if n["metadata"]["name"] == OVERSOLD), "the written node in the cache")
            await _until(lambda: any(p["metadata"]["name"] == OVERSOLD
                                     and ((p.get("status") or {}).get("oversell") or {}).get("cpuMillicores")
                                     for p in master.profiles.objects.values()), "the written breakdown in the cache")
            calls, request = [], api.request

            async def counted(*args, **kwargs):
                calls.append(args)
                return await request(*args, **kwargs)

            api.request = counted
            assert (await master.cycle()).node_patches == 0 and calls == []
            api.request = request
            relists = master.nodes.relists
            await asyncio.to_thread(core.patch_node, OVERSOLD,
                                    {"metadata": {"labels": {qos.OVERSUBSCRIPTION_NODE_LABEL: None}}})
            await _until(lambda: not any(n["metadata"].get("labels", {}).get(qos.OVERSUBSCRIPTION_NODE_LABEL)
                                        for n in master.nodes.objects.values()), "the label's removal in the cache")
            result = await master.cycle()
            assert result.node_patches == 1 and not any(result.decisions[OVERSOLD].amounts.values())
            await _until(lambda: OVERSOLD not in names(master), "the undone node dropped from the cache")
            await _until(lambda: master.nodes.relists > relists, "a resync")
        assert not master.running

    asyncio.run(_with_api(lab, scenario))
    assert not any(_batch(core, OVERSOLD).values())


def test_only_one_leader_works_and_a_lost_lease_stops_its_work(lab, lab_api, core, tidal_namespace):
    leases = client.CoordinationV1Api(lab_api)
    name = "tidal-test-leader"

    async def scenario(api):
        ticks = {"a": 0, "b": 0}
        cancelled = []

        def work_of(who):
            async def work():
                try:
                    while True:
                        ticks[who] += 1
                        await asyncio.sleep(0.1)
                except asyncio.CancelledError:
                    cancelled.append(who)
                    raise
            return work

        electors = {who: LeaderElector(api, name, qos.NAMESPACE, f"replica-{who}", lease_seconds=4,
                                       renew_deadline=2.0, retry_seconds=0.5) for who in ("a", "b")}
        stop = asyncio.Event()
        tasks = [asyncio.create_task(e.run(work_of(w), stop)) for w, e in electors.items()]
        leaders = await _until(lambda: [w for w, e in electors.items() if e.is_leader and ticks[w]],
                               "one replica leads and works")
        assert len(leaders) == 1, leaders
        follower = "b" if leaders[0] == "a" else "a"
        assert ticks[follower] == 0
        # Someone else takes the lease (as a partitioned replica would see it).
        path = f"/apis/coordination.k8s.io/v1/namespaces/{qos.NAMESPACE}/leases/{name}"
        lease = await api.get(path)
        lease["spec"]["holderIdentity"] = "intruder"
        lease["spec"]["renewTime"] = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=30)
                                      ).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        await api.replace(path, lease)
        await _until(lambda: leaders[0] in cancelled and not any(e.is_leader for e in electors.values()),
                     "the leader stops its work once it sees the intruder's lease")
        frozen = dict(ticks)
        await asyncio.sleep(0.5)
        assert ticks == frozen  # nobody works while the intruder holds the lease
        stop.set()
        await asyncio.gather(*tasks)

    try:
        asyncio.run(_with_api(lab, scenario))
    finally:
        try:
            leases.delete_namespaced_lease(name, qos.NAMESPACE)
        except ApiException:
            pass


def test_tidal_manager_process_leads_writes_batch_resources_and_exports_them(lab, core, oversell_setup, namespace,
                                                                            tidal_namespace, tmp_path):
    import sys
    import urllib.request
    from pathlib import Path

    from prometheus_client.parser import text_string_to_metric_families

    from tidal_dev.lab import processes
    from tidal_dev.lab.pki import ensure_ca, issue
    from tidal_dev.lab.ports import free_ports

    # A BE pod bound to the oversold node (as admission leaves it: batch resources only), and an
    # LS pod, which counts for nothing in batch terms.
    for name, level, resources in (
            ("be", "BE", {qos.BATCH_CPU_RESOURCE: "1500", qos.BATCH_MEMORY_RESOURCE: str(2 * GiB)}),
            ("ls", "LS", {"cpu": "1", "memory": "1Gi"})):
        core.create_namespaced_pod(namespace, {
            "metadata": {"name": name, "annotations": {qos.QOS_ANNOTATION: level}},
            "spec": {"nodeName": OVERSOLD, "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "main", "image": "registry.invalid/app:1",
                                     "resources": {"requests": resources, "limits": resources}}]}})
    cert = issue(ensure_ca(tmp_path), tmp_path, "webhook", "tidal-manager", server=True, ip_addresses=("127.0.0.1",))
    port, health = free_ports(2)

    def exported() -> dict[tuple[str, str, str], float]:
        text = urllib.request.urlopen(f"http://127.0.0.1:{health}/metrics", timeout=5).read().decode()
        return {(sample.name, sample.labels.get("node", ""), sample.labels.get("resource", "")): sample.value
                for family in text_string_to_metric_families(text) for sample in family.samples
                if sample.name.startswith("tidal_node_batch")}

    record = processes.start("tidal-manager", [
        str(Path(sys.executable).with_name("tidal-manager")), "--kubeconfig", str(lab.kubeconfig_path),
        "--identity", "test-replica", "--oversell-interval", "1",
        "--webhook-cert-file", str(cert.cert), "--webhook-key-file", str(cert.key),
        "--webhook-address", "127.0.0.1", "--webhook-port", str(port),
        "--health-address", "127.0.0.1", "--health-port", str(health)], tmp_path / "manager.log")
    try:
        wait_for(lambda: _batch(core, OVERSOLD).get(qos.BATCH_CPU_RESOURCE) == 6000, 30,
                 "batch-cpu written by the running tidal-manager")
        lease = client.CoordinationV1Api(core.api_client).read_namespaced_lease("tidal-manager", qos.NAMESPACE)
        assert lease.spec.holder_identity == "test-replica"
        # /metrics on the health port: what was published and what BE pods request of it (the
        # console's overselling chart), with the admission series in the same registry.
        wanted = {("tidal_node_batch_allocatable", OVERSOLD, "cpu"): 6000.0,
                  ("tidal_node_batch_requested", OVERSOLD, "cpu"): 1500.0,
                  ("tidal_node_batch_requested", OVERSOLD, "memory"): float(2 * GiB)}
        wait_for(lambda: wanted.items() <= exported().items(), 30,
                 f"batch series on /metrics (log {tmp_path / 'manager.log'})")
        body = urllib.request.urlopen(f"http://127.0.0.1:{health}/metrics", timeout=5).read().decode()
        assert "tidal_admission_requests_total" in body and "tidal_oversell_cycles_total" in body
    finally:
        processes.stop(record)
        client.CoordinationV1Api(core.api_client).delete_namespaced_lease("tidal-manager", qos.NAMESPACE)


def test_volcano_annotation_mode_writes_volcanos_own_oversubscription_keys(lab, core, oversell_setup):
    settings = OversellSettings(reporting_mode="volcanoAnnotations")
    try:
        assert cycle(lab, settings).node_patches == 1
        node = core.read_node(OVERSOLD)
        assert node.metadata.labels["volcano.sh/oversubscription"] == "true"
        # marked as the master's own write, so it is not read back as the alias
        assert node.metadata.annotations["colocation.tidal.io/volcano-oversubscription-written"] == "true"
        assert node.metadata.annotations["volcano.sh/oversubscription-cpu"] == "6000"
        assert int(node.metadata.annotations["volcano.sh/oversubscription-memory"]) == int(
            math.floor(64 * GiB * 0.6) - 8 * GiB - math.ceil(64 * GiB * 0.1))
        assert not any(_batch(core, OVERSOLD).values())  # no extended resources in this mode
        assert cycle(lab, settings).node_patches == 0
    finally:
        core.patch_node(OVERSOLD, {"metadata": {
            "labels": {"volcano.sh/oversubscription": None},
            "annotations": {"volcano.sh/oversubscription-cpu": None, "volcano.sh/oversubscription-memory": None,
                            "colocation.tidal.io/volcano-oversubscription-written": None}}})
