"""Issue 14 with the real ``tidal-agent run`` on the lab: an LS pod's process waits on a run queue
(a competitor pinned to its CPU), and the agent lowers the BE parent's quota below suppression's,
says so in a Node Event, its metrics and the NodeProfile's ``status.cpuInterference``; once the
competitor is gone the quota grows back to suppression's bound.

Outcomes are polled with deadlines; the give-back phase is skipped with the reason when the
machine itself keeps the LS process waiting (a shared machine under load)."""
import os
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client

from tidal.agent.collector.cgroups import PodQOSClass
from tidal.agent.qos.capabilities import probe, supported_map
from tidal.api import qos
from tidal_dev.lab import processes
from tidal_dev.lab.ports import free_port
from tidal_dev.lab.pytest_plugin import wait_for

pytestmark = pytest.mark.lab
sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_fixtures import CPUS, _agent, _be, _pod, _read, hierarchy, kubelet, node  # noqa: E402,F401

FLOOR = 200


def _metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_agent_slows_be_while_an_ls_process_waits_and_reports_it(lab, core, namespace, node, kubelet, policy,
                                                                 tmp_path):
    if not supported_map(probe()).get("schedstat"):
        pytest.skip("kernel without per-task schedstat (CONFIG_SCHED_INFO)")
    # A 1 ms target: a competitor on the LS process's CPU makes it wait its slices (milliseconds),
    # while a merely busy shared machine stays below half of it (the default 100 µs would not).
    policy({"beIsolation": {"cpuSuppression": {"thresholdPercent": 100, "floorMillicores": FLOOR},
                            "cpuInterference": {"targetDelayMicroseconds": 1000}}})
    web = kubelet.run_pod(core, namespace, _pod(node, "web", "LS", {"cpu": "500m", "memory": "64Mi"}))
    be = kubelet.run_pod(core, namespace, _be(node, "batch", 500))
    cpu = sorted(os.sched_getaffinity(0))[-1]
    ls = kubelet.spin(web.dirs)
    os.sched_setaffinity(ls.pid, {cpu})
    kubelet.idle(be.dirs)
    be_parent = kubelet.cpu_root / kubelet.layout.qos_relpath(PodQOSClass.BEST_EFFORT)
    original = _read(be_parent / "cpu.cfs_quota_us")
    port = free_port()
    agent = _agent(lab, node, kubelet, tmp_path, port)
    custom = client.CustomObjectsApi(core.api_client)

    def status():
        profile = custom.get_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles", node)
        return (profile.get("status") or {}).get("cpuInterference") or {}

    try:
        wait_for(lambda: _read(be_parent / "cpu.cfs_quota_us") != original, 30,
                 f"the agent's BE quota (log {tmp_path / 'agent.log'})")
        competitor = kubelet.cgroups.spawn("spin")  # a daemon outside the pods, on the LS process's CPU
        os.sched_setaffinity(competitor.pid, {cpu})
        wait_for(lambda: _read(be_parent / "cpu.cfs_quota_us") == str(FLOOR * 100), 30,
                 "the BE quota at the floor while the LS process waits")
        # the status is a snapshot of one round, written every 2 s here: polled until one shows it
        seen = wait_for(lambda: (s := status()).get("throttled") is True
                        and s.get("runQueueDelayMicroseconds", 0) > s["targetDelayMicroseconds"] and s, 30,
                        "status.cpuInterference: throttled, the delay above the target")
        assert FLOOR <= seen["beCPUAllowanceMillicores"] < seen["boundMillicores"]
        assert seen["onlineThreads"] >= 1
        assert _metric(port, "tidal_be_cpu_interference_throttles_total") >= 1
        assert _metric(port, "tidal_be_cpu_quota_millicores") == FLOOR
        assert _metric(port, "tidal_online_runqueue_delay_microseconds") > 0

        def events(reason):
            found = core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
            return [e for e in found if e.reason == reason]
        throttled = wait_for(lambda: events("TidalBECPUThrottled"), 30, "a TidalBECPUThrottled Event on the Node")
        assert all(e.type == "Warning" and "per scheduling slice" in e.message for e in throttled)
        # rate-limited: one per throttling episode (a busy machine may have started one before the
        # competitor, and ended it: TidalBECPUReleased), not one per round
        assert len(throttled) <= 1 + len(events("TidalBECPUReleased")), [e.message for e in throttled]

        competitor.kill()
        competitor.wait()
        bound = CPUS * 100_000  # threshold 100 %, the LS process's usage below
        deadline = time.monotonic() + 60
        while int(_read(be_parent / "cpu.cfs_quota_us")) < bound * 0.4:
            if time.monotonic() > deadline:
                delay = status().get("runQueueDelayMicroseconds", 0)
                if delay >= status().get("targetDelayMicroseconds", 100) / 2:
                    pytest.skip(f"machine too busy: the LS process alone still waits {delay} µs per slice")
                pytest.fail(f"the BE quota stayed at {_read(be_parent / 'cpu.cfs_quota_us')} (delay {delay} µs)")
            time.sleep(0.5)  # polled: the agent's next rounds
    finally:
        processes.stop(agent)
