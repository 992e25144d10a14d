"""Faults of the real node's runtime under Tidal deployed as pods: containerd restarted (the
NRI plugin must reconnect and re-synchronise) and the kubelet restarted."""
import sys
import time
from pathlib import Path

import pytest

from tidal_dev.lab.pytest_plugin import wait_for
from tidal_dev.testing.site import CGROUP, REAL_NODE, container_cgroup, gone, logs_since, read, running, tidal_pods

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_helpers import BE_QUOTA_US, be_pod, evictions, now_utc, pod_ready, tracebacks  # noqa: E402

pytestmark = pytest.mark.lab


def _agent(core):
    (agent,) = tidal_pods(core, "tidal-agent")
    return agent


def _restarts(pod) -> dict[str, int]:
    return {s.name: s.restart_count for s in pod.status.container_statuses or []}


def test_containerd_restarted_the_nri_plugin_reconnects_and_new_be_containers_get_their_limits(
        lab, core, workload, image, recovery):
    """containerd restarted under running pods. Must hold: the NRI plugin registers again with
    the new containerd (its log says so) and is ready; a BE container created afterwards is
    given its batch limits at creation by the plugin (its log names the pod; the cgroup holds
    the memory limit; the CPU quota comes from the agent's round on cgroup v1, where the kernel
    refuses a quota above the BE parent's at creation); the running BE pod is the same pod, Running, with its quota; nothing evicted;
    no traceback."""
    be = core.read_namespaced_pod("transcode", workload)
    evicted_before = len(evictions(core, workload))
    started = now_utc()
    stopping = time.monotonic()
    lab.restart("containerd")
    up = time.monotonic() - stopping
    agent = _agent(core)

    def registered_again():
        log = logs_since(core, agent, "nri", started)
        return "registered as" in log and log
    wait_for(registered_again, 60, "the NRI plugin registered with the restarted containerd", interval=0.25)
    took = time.monotonic() - stopping
    wait_for(lambda: pod_ready(_agent(core)), 60, "the agent pod ready")
    recovery("containerd restarted", took, f"from the restart's start: containerd healthy after {up:.1f}s, "
                                           f"the NRI plugin registered again with it after {took:.1f}s")

    core.create_namespaced_pod(workload, be_pod("after-containerd", image))
    try:
        created = wait_for(running(core, workload, "after-containerd"), 120, "a BE pod created after the restart")
        assert int(read(container_cgroup(created, "memory") / "memory.limit_in_bytes")) == 64 * 1024**2
        wait_for(lambda: read(container_cgroup(created, "cpu") / "cpu.cfs_quota_us") == BE_QUOTA_US, 30,
                 "the BE container's quota")
        wait_for(lambda: "after-containerd" in logs_since(core, _agent(core), "nri", started), 30,
                 "the NRI plugin's log naming the BE pod it limited")
    finally:
        core.delete_namespaced_pod("after-containerd", workload, grace_period_seconds=0)
        wait_for(gone(core, workload, "after-containerd"), 60, "the second BE pod gone")
    after = core.read_namespaced_pod("transcode", workload)
    assert after.metadata.uid == be.metadata.uid and after.status.phase == "Running"
    assert read(container_cgroup(after, "cpu") / "cpu.cfs_quota_us") == BE_QUOTA_US
    assert len(evictions(core, workload)) == evicted_before
    assert not tracebacks(core, started)


def test_kubelet_restarted_the_node_is_ready_again_and_nothing_is_restarted_or_evicted(
        lab, core, workload, recovery):
    """The kubelet restarted. Must hold: the node Ready again with a fresh heartbeat; the agent
    pod and the BE pod are the same pods, their containers not restarted; the BE quota as the
    policy says; nothing evicted; no traceback."""
    agent, be = _agent(core), core.read_namespaced_pod("transcode", workload)
    restarts = _restarts(agent)
    # The kubelet writes the BE pods' parent's weight at start; an idle group refuses it (EINVAL)
    # and the kubelet would not start: Tidal leaves that group's cpu.idle alone.
    assert read(CGROUP / "cpu/tidal-lab/kubepods/besteffort/cpu.idle") == "0"
    evicted_before = len(evictions(core, workload))
    started = now_utc()
    restarted = time.monotonic()
    lab.restart("kubelet")

    def ready_again():
        for condition in core.read_node(REAL_NODE).status.conditions:
            if condition.type == "Ready":
                return condition.status == "True" and condition.last_heartbeat_time >= started.replace(microsecond=0)
        return False
    wait_for(ready_again, 90, f"{REAL_NODE} Ready with a heartbeat after the restart", interval=0.25)
    took = time.monotonic() - restarted
    recovery("kubelet restarted", took, "from the restart's start to the node Ready with a fresh heartbeat")
    after_agent = _agent(core)
    assert after_agent.metadata.uid == agent.metadata.uid and _restarts(after_agent) == restarts
    after = core.read_namespaced_pod("transcode", workload)
    assert after.metadata.uid == be.metadata.uid and after.status.phase == "Running"
    assert _restarts(after) == _restarts(be)
    assert read(container_cgroup(after, "cpu") / "cpu.cfs_quota_us") == BE_QUOTA_US
    assert len(evictions(core, workload)) == evicted_before
    assert not tracebacks(core, started)
