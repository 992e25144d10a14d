"""Tidal's Python NRI plugin against NRI's own runtime side (github.com/containerd/nri
pkg/adaptation, the code containerd embeds), driven by the Go harness in ./harness: a real
socket, NRI's real multiplexer and ttrpc, registration, Configure, Synchronize and events."""
from __future__ import annotations

import asyncio
import json
import time

from tidal.agent.nri.decisions import BATCH_RESOURCES_ANNOTATION, BatchRequest, page_rounded

QOS = "colocation.tidal.io/qos-level"


def pod(pod_id: str, level: str | None, batch: dict | None = None, **annotations: str) -> dict:
    ann = dict(annotations)
    if level is not None:
        ann[QOS] = level
    if batch is not None:
        ann[BATCH_RESOURCES_ANNOTATION] = json.dumps(batch)
    return {"id": pod_id, "name": f"{pod_id}-name", "namespace": "team-a", "uid": f"uid-{pod_id}",
            "annotations": ann}


def flat(resources: dict | None) -> dict[str, object]:
    """NRI LinuxResources (protojson) as {"cpu.shares": 512, ...}, unset fields left out."""
    out: dict[str, object] = {}
    resources = resources or {}
    for group in ("cpu", "memory"):
        for key, value in (resources.get(group) or {}).items():
            if isinstance(value, dict) and "value" in value:
                out[f"{group}.{key}"] = int(value["value"])
            elif isinstance(value, str) and value:
                out[f"{group}.{key}"] = value
    return out


def adjusted(answer: dict) -> dict[str, object]:
    return flat(((answer.get("adjust") or {}).get("linux") or {}).get("resources"))


def connect(runtime, start_plugin, **kwargs):
    plugin = start_plugin(**kwargs)
    runtime.cmd("wait_plugins", n=1, timeout_ms=10_000)
    return plugin


BE_BATCH = {"worker": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1000000000"},
            "big": {"kubernetes.io/batch-cpu": "2k"}}
BE_WORKER = {"cpu.shares": 512, "cpu.quota": 50_000, "cpu.period": 100_000,
             "memory.limit": page_rounded(1_000_000_000)}


def test_create_adjusts_be_containers_and_leaves_ls_hls_and_plain_pods(runtime, start_plugin):
    connect(runtime, start_plugin)
    runtime.cmd("run_pod", pod=pod("be", "BE", BE_BATCH))
    runtime.cmd("run_pod", pod=pod("ls", "LS"))
    runtime.cmd("run_pod", pod=pod("hls", "HLS"))
    runtime.cmd("run_pod", pod=pod("plain", None))
    runtime.cmd("run_pod", pod=pod("alias", None, BE_BATCH, **{"volcano.sh/qos-level": "-1"}))

    assert adjusted(runtime.cmd("create", pod_id="be", container={"id": "c1", "name": "worker"})) == BE_WORKER
    assert adjusted(runtime.cmd("create", pod_id="be", container={"id": "c2", "name": "big"})) == {
        "cpu.shares": 2048, "cpu.quota": 200_000, "cpu.period": 100_000}
    # a container the annotation does not list: the minimum CPU weight, no limits
    assert adjusted(runtime.cmd("create", pod_id="be", container={"id": "c3", "name": "sidecar"})) == {
        "cpu.shares": 2}
    assert adjusted(runtime.cmd("create", pod_id="alias", container={"id": "c4", "name": "worker"})) == BE_WORKER
    ls_kubelet = {"linux": {"resources": {"cpu": {"shares": {"value": "1024"}, "quota": {"value": "100000"}}}}}
    for pod_id, cid in (("ls", "c5"), ("hls", "c6"), ("plain", "c7")):
        answer = runtime.cmd("create", pod_id=pod_id, container={"id": cid, "name": "app", **ls_kubelet})
        assert adjusted(answer) == {}, pod_id
        assert answer["update"] == [] and answer["evict"] == []


def test_ls_cpuset_hook_is_applied_for_ls_only(runtime, start_plugin):
    asked = []

    def numa(ref):
        asked.append(ref.container_name)
        return "0-1"

    connect(runtime, start_plugin, ls_cpuset=numa)
    runtime.cmd("run_pod", pod=pod("ls", "LS"))
    runtime.cmd("run_pod", pod=pod("hls", "HLS"))
    assert adjusted(runtime.cmd("create", pod_id="ls", container={"id": "c1", "name": "web"})) == {"cpu.cpus": "0-1"}
    assert adjusted(runtime.cmd("create", pod_id="hls", container={"id": "c2", "name": "db"})) == {}
    assert asked == ["web"]


# Issue 20 (NUMA affinity at creation). Written without running it (it needs the Go harness):
# to be run with the rest of tests/nri.
def test_numa_affinity_pins_ls_containers_at_creation_and_keeps_them_at_update(runtime, start_plugin):
    from pathlib import Path

    from tidal.agent.nri.numa import NUMAPlacer
    from tidal.agent.qos.numa_affinity import read_topology

    tree = Path(__file__).resolve().parent.parent / "data" / "numa" / "two-node"
    connect(runtime, start_plugin, numa=NUMAPlacer(read_topology(tree)))
    runtime.cmd("run_pod", pod=pod("ls", "LS"))
    runtime.cmd("run_pod", pod=pod("be", "BE", BE_BATCH))
    pool = "0-1,6-7,10-31"  # the static CPU manager's shared pool (HLS holds 2-5,8-9)
    kubelet = {"linux": {"resources": {"cpu": {"shares": {"value": "2048"}, "cpus": pool}}}}
    assert adjusted(runtime.cmd("create", pod_id="ls", container={"id": "c1", "name": "web", **kubelet})) == {
        "cpu.cpus": "10-15,24-31", "cpu.mems": "1"}
    assert adjusted(runtime.cmd("create", pod_id="ls", container={"id": "c2", "name": "side", **kubelet})) == {
        "cpu.cpus": "0-1,6-7,16-23", "cpu.mems": "0"}
    assert adjusted(runtime.cmd("create", pod_id="be", container={"id": "c3", "name": "worker"})) == BE_WORKER
    # the kubelet's reconcile rewrites the cpuset to its pool: the plugin keeps the NUMA node
    answer = runtime.cmd("update", container_id="c1", resources={"cpu": {"cpus": "0-31"}})
    ours = [u for u in answer["update"] if u["container_id"] == "c1"]
    assert ours and flat(ours[-1]["linux"]["resources"]).get("cpu.mems") == "1"
    assert flat(ours[-1]["linux"]["resources"]).get("cpu.cpus") == "8-15,24-31"


def test_update_keeps_be_limits_on_the_updated_container(runtime, start_plugin):
    connect(runtime, start_plugin)
    runtime.cmd("run_pod", pod=pod("be", "BE", BE_BATCH))
    runtime.cmd("run_pod", pod=pod("ls", "LS"))
    runtime.cmd("create", pod_id="be", container={"id": "c1", "name": "worker"})
    runtime.cmd("create", pod_id="ls", container={"id": "c2", "name": "web"})

    # the kubelet reconciles a BestEffort container to shares 2 and no limits
    answer = runtime.cmd("update", container_id="c1",
                         resources={"cpu": {"shares": {"value": "2"}, "quota": {"value": "0"}}})
    assert [u["container_id"] for u in answer["update"]] == ["c1"]
    assert flat(answer["update"][0]["linux"]["resources"]) == BE_WORKER
    answer = runtime.cmd("update", container_id="c2", resources={"cpu": {"shares": {"value": "512"}}})
    # the runtime answers with its (empty) update of c2: nothing from the plugin in it
    assert all(flat((u.get("linux") or {}).get("resources")) == {} for u in answer["update"])

    assert runtime.cmd("stop_container", container_id="c1")["update"] == []
    runtime.cmd("stop_pod", pod_id="be")
    runtime.cmd("remove_pod", pod_id="be")


def test_a_node_whose_mode_is_off_gets_no_container_changed(runtime, start_plugin):
    """Colocation switched off: the agent is putting back what Tidal changed. A kubelet's update
    (its CPU manager's after a restart) must not bring the batch limits back, nor Synchronize,
    nor a creation; switched on again, the plugin adjusts as before."""
    mode = {"on": True}
    connect(runtime, start_plugin, node_active=lambda: mode["on"])
    runtime.cmd("run_pod", pod=pod("be", "BE", BE_BATCH))
    assert adjusted(runtime.cmd("create", pod_id="be", container={"id": "c1", "name": "worker"})) == BE_WORKER
    mode["on"] = False
    answer = runtime.cmd("update", container_id="c1",
                         resources={"cpu": {"shares": {"value": "2"}, "quota": {"value": "0"}}})
    assert all(flat((u.get("linux") or {}).get("resources")) == {} for u in answer["update"])
    assert adjusted(runtime.cmd("create", pod_id="be", container={"id": "c2", "name": "worker"})) == {}
    runtime.restart()
    runtime.cmd("wait_plugins", n=1, timeout_ms=10_000)
    sync = runtime.wait_event("synchronize", lambda e: e["containers"] == 2 and not e["at_start"])
    assert sync["updates"] == []
    mode["on"] = True
    assert adjusted(runtime.cmd("create", pod_id="be", container={"id": "c3", "name": "worker"})) == BE_WORKER


def test_synchronize_updates_existing_containers_once(runtime, start_plugin):
    # containers created while no plugin was connected keep the kubelet's values
    runtime.cmd("run_pod", pod=pod("be", "BE", BE_BATCH))
    runtime.cmd("run_pod", pod=pod("ls", "LS"))
    runtime.cmd("create", pod_id="be", container={
        "id": "old", "name": "worker", "linux": {"resources": {"cpu": {"shares": {"value": "2"}}}}})
    runtime.cmd("create", pod_id="ls", container={"id": "web", "name": "web"})

    plugin = connect(runtime, start_plugin)
    sync = runtime.wait_event("synchronize", lambda e: e["containers"] == 2 and not e["at_start"])
    assert [u["container_id"] for u in sync["updates"]] == ["old"]
    assert flat(sync["updates"][0]["linux"]["resources"]) == BE_WORKER

    # a container created with the plugin present already has its values: a reconnect
    # after a runtime restart asks for nothing more for it
    runtime.cmd("create", pod_id="be", container={"id": "new", "name": "worker"})
    runtime.restart()
    runtime.cmd("wait_plugins", n=1, timeout_ms=10_000)
    sync = runtime.wait_event("synchronize", lambda e: e["containers"] == 3 and not e["at_start"])
    assert [u["container_id"] for u in sync["updates"]] == ["old"]  # the harness never applied it
    assert plugin.plugin.sessions >= 2


def test_runtime_restart_reconnects_with_backoff(runtime, start_plugin):
    plugin = connect(runtime, start_plugin)
    runtime.restart(down_seconds=1.0)  # several failed attempts against a dead socket
    runtime.cmd("wait_plugins", n=1, timeout_ms=10_000)
    runtime.cmd("run_pod", pod=pod("be", "BE", BE_BATCH))
    assert adjusted(runtime.cmd("create", pod_id="be", container={"id": "c1", "name": "worker"})) == BE_WORKER
    assert plugin.plugin.sessions >= 2


def test_a_hung_plugin_does_not_block_the_runtime(runtime, start_plugin):
    """The runtime's request timeout (1 s here) bounds what the plugin can cost it; the plugin
    that missed it is dropped by the runtime and comes back by itself."""

    hung = []

    def hang(ref):
        if ref.pod_name.startswith("slow") and not hung:
            hung.append(ref.container_name)
            time.sleep(2.5)  # blocks the plugin's event loop: the worst a plugin bug can do
        return None

    connect(runtime, start_plugin, ls_cpuset=hang)
    runtime.cmd("run_pod", pod=pod("slow", "LS"))
    runtime.cmd("run_pod", pod=pod("be", "BE", BE_BATCH))
    started = time.monotonic()
    answer = runtime.cmd("create", pod_id="slow", container={"id": "c1", "name": "web"})
    assert time.monotonic() - started < 2.0
    assert adjusted(answer) == {}
    runtime.cmd("wait_plugins", n=1, timeout_ms=15_000)
    assert adjusted(runtime.cmd("create", pod_id="be", container={"id": "c2", "name": "worker"})) == BE_WORKER


def test_be_pod_without_annotation_is_updated_from_the_pod_object(runtime, start_plugin):
    looked_up = []

    async def lookup(namespace, name, uid):
        looked_up.append((namespace, name, uid))
        await asyncio.sleep(0.05)
        return {"worker": BatchRequest(cpu_millicores=1000, memory_bytes=1 << 30)}

    connect(runtime, start_plugin, pod_lookup=lookup)
    runtime.cmd("run_pod", pod=pod("be", "BE"))
    # at once: the minimum CPU weight; the limits follow through UpdateContainers
    assert adjusted(runtime.cmd("create", pod_id="be", container={"id": "c1", "name": "worker"})) == {"cpu.shares": 2}
    event = runtime.wait_event("update_containers")
    assert [u["container_id"] for u in event["updates"]] == ["c1"]
    assert flat(event["updates"][0]["linux"]["resources"]) == {
        "cpu.shares": 1024, "cpu.quota": 100_000, "cpu.period": 100_000, "memory.limit": 1 << 30}
    assert looked_up == [("team-a", "be-name", "uid-be")]
    # the kubelet's later update keeps the limits read from the pod object
    answer = runtime.cmd("update", container_id="c1", resources={"cpu": {"shares": {"value": "2"}}})
    assert flat(answer["update"][0]["linux"]["resources"])["memory.limit"] == 1 << 30


def test_bad_annotations_never_fail_a_creation(runtime, start_plugin):
    connect(runtime, start_plugin)
    runtime.cmd("run_pod", pod=pod("badlevel", "be"))  # values are case-sensitive
    runtime.cmd("run_pod", pod=pod("badbatch", "BE", **{BATCH_RESOURCES_ANNOTATION: "{not json"}))
    assert adjusted(runtime.cmd("create", pod_id="badlevel", container={"id": "c1", "name": "x"})) == {}
    assert adjusted(runtime.cmd("create", pod_id="badbatch", container={"id": "c2", "name": "x"})) == {
        "cpu.shares": 2}


def test_large_messages_cross_mux_frames(runtime, start_plugin):
    """A 1 MiB pod annotation: NRI's ttrpc writes it in pieces, reassembled across mux frames."""
    connect(runtime, start_plugin)
    runtime.cmd("run_pod", pod=pod("be", "BE", BE_BATCH, blob="x" * (1 << 20)))
    assert adjusted(runtime.cmd("create", pod_id="be", container={"id": "c1", "name": "worker"})) == BE_WORKER
