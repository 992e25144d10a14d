import pytest

from tidal.api import qos
from tidal.agent.collector.cgroups import PodQOSClass
from tidal.agent.pods import NodePods, pod_info, pod_state
from tidal.api.pod_resources import BatchRequest


def _pod(annotations=None, requests=None, phase="Running", qos_class="Burstable", container_id="containerd://abc123"):
    return {"metadata": {"uid": "u1", "namespace": "ns", "name": "p", "annotations": annotations or {},
                         "resourceVersion": "42"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": requests or {}}}]},
            "status": {"phase": phase, "qosClass": qos_class,
                       "containerStatuses": [{"name": "c", "containerID": container_id}] if container_id else []}}


@pytest.mark.parametrize("annotations, requests, level, cpu, memory", [
    ({qos.QOS_ANNOTATION: "LS"}, {"cpu": "1500m", "memory": "1Gi"}, qos.QoSLevel.LS, 1500, 1024**3),
    ({qos.QOS_ANNOTATION: "BE"}, {qos.BATCH_CPU_RESOURCE: "2k", qos.BATCH_MEMORY_RESOURCE: "1024"},
     qos.QoSLevel.BE, 2000, 1024),
    ({}, {"cpu": "1", "memory": "1Mi"}, None, 1000, 1024**2),
    ({qos.QOS_ANNOTATION: "GOLD"}, {"cpu": "1"}, None, 1000, 0),       # a bad level counts as no level
    ({qos.VOLCANO_QOS_ANNOTATION: "LC"}, {"cpu": "2"}, qos.QoSLevel.HLS, 2000, 0),
    ({qos.QOS_ANNOTATION: "LS"}, {"cpu": "1.5.5", "memory": "1Gi"}, qos.QoSLevel.LS, 0, 0),  # unparsable container
])
def test_pod_info_reads_level_and_requests(annotations, requests, level, cpu, memory):
    info = pod_info(_pod(annotations, requests))
    assert (info.tidal_level, info.cpu_request_millicores, info.memory_request_bytes) == (level, cpu, memory)
    assert info.qos_class is PodQOSClass.BURSTABLE and len(info.container_ids) == 1


@pytest.mark.parametrize("annotations, requests, container_id, expected", [
    # BE: per-container batch resources, by runtime ID (batch-cpu is a plain count of millicores)
    ({qos.QOS_ANNOTATION: "BE"}, {qos.BATCH_CPU_RESOURCE: "1500", qos.BATCH_MEMORY_RESOURCE: "1Gi"},
     "containerd://abc", (("containerd://abc", 1500, 1024**3),)),
    # online pods carry no batch resources to enforce
    ({qos.QOS_ANNOTATION: "LS"}, {"cpu": "1"}, "containerd://abc", (("containerd://abc", 0, 0),)),
    # a container not started yet has no cgroup to act on
    ({qos.QOS_ANNOTATION: "BE"}, {qos.BATCH_CPU_RESOURCE: "1000"}, None, ()),
    # an unparsable batch quantity is not enforced (admission rejects it anyway)
    ({qos.QOS_ANNOTATION: "BE"}, {qos.BATCH_CPU_RESOURCE: "x"}, "containerd://abc", (("containerd://abc", 0, 0),)),
])
def test_pod_state_has_containers_with_their_batch_resources(annotations, requests, container_id, expected):
    pod = _pod(annotations, requests, qos_class="BestEffort", container_id=container_id)
    pod["spec"]["priority"] = -100
    state = pod_state(pod, pod_info(pod))
    assert tuple((c.id, c.batch_cpu_millicores, c.batch_memory_bytes) for c in state.containers) == expected
    assert (state.uid, state.priority, state.namespace, state.name) == ("u1", -100, "ns", "p")


@pytest.mark.parametrize("annotations, requests, not_started, expected", [
    pytest.param({qos.QOS_ANNOTATION: "LS"}, {"cpu": "1500m", "memory": "1Gi"}, False, (1500, 1024**3), id="online"),
    pytest.param({qos.QOS_ANNOTATION: "BE"}, {qos.BATCH_CPU_RESOURCE: "2000", qos.BATCH_MEMORY_RESOURCE: "1Gi"},
                 False, (2000, 1024**3), id="be-batch"),
    pytest.param({qos.QOS_ANNOTATION: "BE"}, {"cpu": "1", "memory": "1Gi"}, False, (1000, 1024**3),
                 id="be-on-native-requests"),
    pytest.param({}, {"cpu": "250m"}, False, (250, 0), id="no-tidal-level-counts-too"),
    pytest.param({qos.QOS_ANNOTATION: "LS"}, {"cpu": "1"}, True, (1000, 0),
                 id="a-pod-not-started-yet-counts-as-the-scheduler-counts-it"),
])
def test_pod_state_carries_what_the_pod_takes_of_the_nodes_requests(annotations, requests, not_started, expected):
    pod = _pod(annotations, requests, container_id=None if not_started else "containerd://abc")
    assert pod_state(pod, pod_info(pod)).node_requests == expected


def _be_with_sidecar(sidecar_batch, main_started=True, other=None):
    main = {"name": "main", "resources": {"limits": {qos.BATCH_CPU_RESOURCE: "500", qos.BATCH_MEMORY_RESOURCE: "512Mi"}}}
    sidecar = {"name": "proxy", "restartPolicy": "Always", "resources": {"limits": sidecar_batch}}
    init = {"name": "fetch", "resources": {"limits": {qos.BATCH_CPU_RESOURCE: "100", qos.BATCH_MEMORY_RESOURCE: "64Mi"}}}
    pod = {"metadata": {"uid": "u1", "namespace": "ns", "name": "p", "annotations": {qos.QOS_ANNOTATION: "BE"}},
           "spec": {"initContainers": [init, sidecar], "containers": [main, *([other] if other else [])]},
           "status": {"phase": "Running", "qosClass": "BestEffort",
                      "initContainerStatuses": [{"name": "fetch", "containerID": "containerd://init"},
                                                {"name": "proxy", "containerID": "containerd://side"}],
                      "containerStatuses": [{"name": "main", "containerID": "containerd://main"}] if main_started else []}}
    return pod_state(pod, pod_info(pod))


def test_a_be_pods_limits_count_its_sidecars_and_containers_not_started_yet():
    """A sidecar (restartable init container) runs beside the containers: it gets its own batch
    limits, and the pod-level limits (what the BE batch-resources strategy writes on the pod
    cgroup) are the scheduler's pod amount, not the sum of the containers started so far. An
    ordinary init container has ended: no limits of its own to enforce."""
    mib = 1 << 20
    state = _be_with_sidecar({qos.BATCH_CPU_RESOURCE: "200", qos.BATCH_MEMORY_RESOURCE: "256Mi"})
    assert [(c.id, c.batch_cpu_millicores, c.batch_memory_bytes) for c in state.containers] == [
        ("containerd://side", 200, 256 * mib), ("containerd://main", 500, 512 * mib)]
    assert (state.batch_cpu_millicores, state.batch_memory_bytes) == (700, 768 * mib)
    waiting = {"name": "late", "resources": {"limits": {qos.BATCH_CPU_RESOURCE: "300", qos.BATCH_MEMORY_RESOURCE: "1Gi"}}}
    state = _be_with_sidecar({qos.BATCH_CPU_RESOURCE: "200", qos.BATCH_MEMORY_RESOURCE: "256Mi"}, other=waiting)
    assert (state.batch_cpu_millicores, state.batch_memory_bytes) == (1000, 768 * mib + 1024 * mib)
    # a sidecar without a CPU limit: no pod-level CPU limit (the kubelet's rule), memory still
    state = _be_with_sidecar({qos.BATCH_MEMORY_RESOURCE: "256Mi"})
    assert (state.batch_cpu_millicores, state.batch_memory_bytes) == (0, 768 * mib)


@pytest.mark.parametrize("init_id, sidecar_id, expected", [
    pytest.param(None, None, False, id="nothing-created-yet"),
    pytest.param("containerd://init", None, True, id="an-ordinary-init-container-created"),
    pytest.param("", None, False, id="an-init-status-without-an-id-yet"),
    # a sidecar is one of the pod's containers (PodState.containers), not an init step
    pytest.param(None, "containerd://side", False, id="a-sidecar-only"),
])
def test_pod_state_says_whether_an_ordinary_init_container_was_created(init_id, sidecar_id, expected):
    """What BEPlacement needs to tell a BE pod nowhere yet from one whose containers' place (below
    kubepods or in the BE idle group) is decided: its init phase counts."""
    init = {"name": "fetch"}
    sidecar = {"name": "proxy", "restartPolicy": "Always"}
    init_status = {"name": "fetch", **({"containerID": init_id} if init_id is not None else {})}
    sidecar_status = {"name": "proxy", **({"containerID": sidecar_id} if sidecar_id else {})}
    pod = {"metadata": {"uid": "u1", "namespace": "ns", "name": "p", "annotations": {qos.QOS_ANNOTATION: "BE"}},
           "spec": {"initContainers": [init, sidecar], "containers": [{"name": "main"}]},
           "status": {"phase": "Pending", "qosClass": "BestEffort", "containerStatuses": [{"name": "main"}],
                      "initContainerStatuses": [init_status, sidecar_status]}}
    state = pod_state(pod, pod_info(pod))
    assert state.init_started is expected
    assert [c.id for c in state.containers] == ([sidecar_id] if sidecar_id else [])


@pytest.mark.parametrize("deletion, terminating", [(None, False), ("2026-11-27T03:00:00Z", True)])
def test_pod_state_says_when_the_pod_is_on_its_way_out(deletion, terminating):
    pod = _pod({qos.QOS_ANNOTATION: "BE"})
    if deletion:
        pod["metadata"]["deletionTimestamp"] = deletion
    assert pod_state(pod, pod_info(pod)).terminating is terminating


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_finished_pods_hold_no_resources(phase):
    assert pod_info(_pod(phase=phase)) is None


class FakeAPI:
    """Stands in for KubeAPI (the real one is exercised by every lab test of the agent): a
    list answer, then one scripted watch per call."""

    def __init__(self, watches):
        self.scripts = list(watches)
        self.calls = []

    async def request(self, method, path, *, params=None, **_):
        self.calls.append(("list", path, dict(params or {})))
        return {"metadata": {"resourceVersion": "500"}, "items": []}

    async def get(self, path, params=None):
        return await self.request("GET", path, params=params)

    async def watch(self, path, params, on_open=None):
        import asyncio
        self.calls.append(("watch", path, dict(params)))
        for event in self.scripts.pop(0) if self.scripts else []:
            yield event
        await asyncio.sleep(3600)


def test_watch_events_update_the_node_pods_and_resume_point():
    pods = NodePods(FakeAPI([]), "n1")
    pods.apply("ADDED", _pod({qos.QOS_ANNOTATION: "LS"}, {"cpu": "1"}))
    assert set(pods.pods) == {"u1"} == set(pods.states) and pods.resource_version == "42"
    pods.apply("MODIFIED", _pod(phase="Succeeded"))
    assert pods.pods == {} == pods.states
    pods.apply("ADDED", _pod())
    pods.apply("DELETED", _pod())
    assert pods.pods == {}


def test_pod_watch_relists_after_a_410_and_resumes_from_the_new_resource_version():
    """ERROR 410 (the real API answers it only once etcd has compacted past the watch's
    resourceVersion, which a fresh lab never has) -> re-list -> watch from the list's version."""
    import asyncio

    api = FakeAPI([[{"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}],
                   [{"type": "ADDED", "object": _pod({qos.QOS_ANNOTATION: "LS"}, {"cpu": "1"})}]])
    pods = NodePods(api, "n1")
    pods.resource_version = "1"

    async def scenario():
        task = asyncio.create_task(pods.run())
        for _ in range(100):
            if pods.pods:
                break
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(scenario())
    selector = {"fieldSelector": "spec.nodeName=n1"}
    assert api.calls[0] == ("watch", "/api/v1/pods", {**selector, "resourceVersion": "1",
                                                       "allowWatchBookmarks": True, "timeoutSeconds": 300})
    assert api.calls[1] == ("list", "/api/v1/pods", selector)
    assert api.calls[2][2]["resourceVersion"] == "500"
    assert pods.relists == 1 and set(pods.pods) == {"u1"}


STATIC_UID = "5c1e9b7d3f0a4c2e8b6d1f3a5c7e9b0d"  # the kubelet's hash of the manifest


def _mirror():
    return _pod({qos.QOS_ANNOTATION: "LS", "kubernetes.io/config.mirror": STATIC_UID,
                 "kubernetes.io/config.hash": STATIC_UID, "kubernetes.io/config.source": "file"}, {"cpu": "100m"})


@pytest.mark.parametrize("pod, expected", [
    pytest.param(_pod(), "u1", id="an-api-pod-its-metadata-uid"),
    pytest.param(_mirror(), STATIC_UID, id="a-static-pods-mirror-the-kubelets-uid"),
    pytest.param({"metadata": {"uid": "u1", "annotations": {"kubernetes.io/config.mirror": ""}}}, "u1",
                 id="an-empty-mirror-annotation-is-ignored"),
    pytest.param({"metadata": {}}, "", id="no-uid"),
])
def test_node_uid(pod, expected):
    from tidal.api.pod_identity import node_uid
    assert node_uid(pod) == expected


def test_a_static_pod_is_known_by_its_uid_on_the_node():
    """Its cgroup is pod<the kubelet's uid>: by the mirror pod's uid it was never found, its usage
    counted outside the pods and the pod at its request."""
    pods = NodePods(FakeAPI([]), "n1")
    pods.apply("ADDED", _mirror())
    assert set(pods.pods) == {STATIC_UID} == set(pods.states)
    assert pods.pods[STATIC_UID].uid == STATIC_UID == pods.states[STATIC_UID].uid
    pods.apply("DELETED", _mirror())
    assert pods.pods == {}


def test_the_nri_lookup_matches_a_static_pod_by_its_uid_on_the_node():
    import asyncio

    from tidal.agent.nri.pod_lookup import ApiServerPods

    class OnePod:
        async def get(self, path):
            return _mirror()

    lookup = ApiServerPods(OnePod())
    assert asyncio.run(lookup("ns", "p", STATIC_UID)) == {"c": BatchRequest()}  # an LS pod: no batch
    assert asyncio.run(lookup("ns", "p", "u1")) is None  # the mirror's own uid names no sandbox
