"""PSI interference end to end: a BE pod on the kwok node standing for this machine thrashes its
page cache against the node's memory (the node is a memory cgroup with a tight limit,
``tidal-agent run --node-memory-cgroup``: real memory pressure in /proc/pressure/memory while the
node reclaims); tidal-agent run evicts it through the lab's Eviction API, with an Event carrying
the figures and tidal_evictions_total{reason="psi"}, while the quiet BE pod next to it stays."""
from __future__ import annotations

import sys
import time
import urllib.request
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from tidal.agent.qos.psi_interference import parse_some_avg10
from tidal_dev.lab import processes
from tidal_dev.lab.ports import free_port
from tidal_dev.lab.pytest_plugin import wait_for
from tidal_dev.testing.pressure import Thrasher

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_fixtures import _agent, _be, hierarchy, kubelet, node  # noqa: E402,F401 (fixtures)

pytestmark = pytest.mark.lab


def _memory_avg10() -> float:
    return parse_some_avg10(Path("/proc/pressure/memory").read_text())


def test_agent_evicts_the_be_pod_that_makes_memory_pressure(
        lab, core, namespace, node, kubelet, policy, tmp_path):  # noqa: F811
    if not Path("/proc/pressure/memory").exists():
        pytest.skip("no PSI on this kernel")
    deadline = time.monotonic() + 30
    while _memory_avg10() >= 2.5:
        if time.monotonic() > deadline:
            pytest.skip(f"node memory pressure stays at {_memory_avg10():.1f}%")
        time.sleep(2)
    policy({"evictionWatermarks": {"enabled": False},
            "features": {"psiInterference": {"enabled": True, "resources": ["memory"]}}})
    thrash = kubelet.run_pod(core, namespace, _be(node, "thrash", 500))  # its own limit: 256 MiB, roomy
    quiet = kubelet.run_pod(core, namespace, _be(node, "quiet", 500, memory="64Mi"))
    kubelet.idle(quiet.dirs)
    node_cgroup = kubelet.layout.hierarchy.memory_root / kubelet.kubelet_root.lstrip("/")
    port = free_port()
    agent = _agent(lab, node, kubelet, tmp_path, port, "--node-memory-cgroup", kubelet.kubelet_root)
    try:
        wait_for(lambda: (tmp_path / "agent.log").exists() and "metrics and health" in
                 (tmp_path / "agent.log").read_text(), 30, "agent up")
        # the node's limit: the quiet pod's idle process and the thrashing share it
        with Thrasher(tmp_path, thrash.dirs, node_cgroup, size_mib=64, limit_mib=48):
            def evicted():
                try:
                    pod = core.read_namespaced_pod("thrash", namespace)
                except ApiException as err:
                    return err.status == 404
                return pod.metadata.deletion_timestamp is not None
            wait_for(evicted, 60, f"thrash evicted (memory avg10 {_memory_avg10():.1f}%, log {tmp_path / 'agent.log'})")
        events = core.list_namespaced_event(namespace, field_selector="reason=TidalEvicted").items
        (event,) = [e for e in events if e.involved_object.name == "thrash"]
        assert event.message.startswith("PSI interference: memory some avg10 ")
        assert f"evicting BE pod {namespace}/thrash" in event.message
        quiet_pod = core.read_namespaced_pod("quiet", namespace)
        assert quiet_pod.metadata.deletion_timestamp is None
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert f'tidal_evictions_total{{node="{node}",reason="psi",resource="memory"}} 1.0' in metrics, [
            line for line in metrics.splitlines() if "evictions" in line]
        assert processes.alive(agent)
    finally:
        processes.stop(agent)
